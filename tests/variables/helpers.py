"""Shared harness of the guard-soundness tests: compile in state A, change the world to state B,
check jitted == eager in both (a recompile, not a stale entry), and that nothing recompiles
while the world stays put."""
from __future__ import annotations

from typing import Any, Callable

import torch

import pyjit


class CompileCounter:
    """A backend that runs each graph unchanged and counts how many graphs it was given."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def same(expected: Any, actual: Any, what: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}"
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), what
        for i, (e, a) in enumerate(zip(expected, actual)):
            same(e, a, f"{what}[{i}]")
    else:
        assert expected == actual, f"{what}: {actual!r} != eager {expected!r}"


def check_world_change(fn: Callable[..., Any], args: tuple[Any, ...], to_b: Callable[[], None],
                       to_a: Callable[[], None]) -> CompileCounter:
    """The scenario protocol (see module docstring); always restores state A."""
    counter = CompileCounter()
    jf = pyjit.jit(fn, backend=counter)
    try:
        eager_a = fn(*args)
        same(eager_a, jf(*args), "state A")
        compiled = counter.graphs
        assert compiled >= 1, "nothing was compiled: the scenario does not exercise the tracer"
        same(eager_a, jf(*args), "state A, second call")
        assert counter.graphs == compiled, "recompiled although nothing changed"
        to_b()
        eager_b = fn(*args)
        # the change must matter, else the test could not catch a stale entry
        assert not _equal(eager_a, eager_b), "scenario bug: state B gives the same eager result"
        same(eager_b, jf(*args), "state B (a stale compiled entry?)")
        compiled_b = counter.graphs
        same(eager_b, jf(*args), "state B, second call")
        assert counter.graphs == compiled_b, "recompiled in state B although nothing changed"
        to_a()
        same(eager_a, jf(*args), "back in state A")
        # An entry compiled around a graph break evaluates the changed thing natively and can
        # serve both states: its other branch's resume function then compiles once.
        assert counter.graphs <= compiled_b + 1, "state A's entry was not reused"
        settled = counter.graphs
        same(eager_a, jf(*args), "back in state A, second call")
        assert counter.graphs == settled, "recompiled in state A although nothing changed"
        return counter
    finally:
        to_a()


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)
