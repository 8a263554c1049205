"""Fixtures for the tracer tests: a clean pyjit state, internal errors raised, a counting backend."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")  # these tests trace and compile torch programs; skipped where torch is absent

import pyjit
from pyjit.config import patch


@dataclasses.dataclass
class Recorder:
    """A backend that keeps every graph it is given and runs it as captured."""

    graphs: list[torch.fx.GraphModule] = dataclasses.field(default_factory=list)
    inputs: list[list[Any]] = dataclasses.field(default_factory=list)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        self.inputs.append(list(example_inputs))
        return gm.forward

    def calls(self, i: int = -1) -> list[str]:
        """The called targets of graph ``i`` (grad-mode switches left out), readable."""
        out = []
        for n in self.graphs[i].graph.nodes:
            if n.op in ("call_function", "call_method") and n.target is not torch._C._set_grad_enabled:
                out.append(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target)))
        return out


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture(autouse=True)
def clean_state():
    pyjit.reset()
    with patch(raise_on_internal_error=True):
        yield
    pyjit.reset()


def same(a: Any, b: Any) -> None:
    """Structural equality of results (containers, tensors bit-identical, dtype, requires_grad)."""
    assert type(a) is type(b), f"{type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0, equal_nan=True)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    else:
        assert a == b
