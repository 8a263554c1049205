"""A user's backend gets graphs with symbolic sizes after a size changes, as under torch.compile;
a backend that declares ``pyjit_dynamic = False`` keeps getting one static graph per size."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import pyjit

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


class RecordingBackend:
    """A plain user backend: records each graph and runs it on its example inputs once (a backend
    must be able to), then returns the graph's forward."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        gm.forward(*example_inputs)
        return gm.forward


def _mlp(x: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    h = torch.relu(x @ w) * n
    return h.sum(1) + x.shape[0]


def _inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    return torch.randn(batch, 8), torch.randn(8, 4), batch % 3 + 1


def test_twenty_batch_sizes_cost_two_backend_calls() -> None:
    backend = RecordingBackend()
    jitted = pyjit.jit(_mlp, backend=backend)
    for batch in range(2, 22):
        args = _inputs(batch)
        torch.testing.assert_close(jitted(*args), _mlp(*args))
    assert len(backend.graphs) == 2, [gm.code for gm in backend.graphs]
    symbolic = backend.graphs[1]
    placeholders = [n for n in symbolic.graph.nodes if n.op == "placeholder"]
    assert any(isinstance(n.meta["example_value"], torch.Tensor) and
               any(isinstance(s, torch.SymInt) for s in n.meta["example_value"].shape)
               for n in placeholders), "the second graph should have symbolic sizes"


def test_size_symbols_are_int_placeholders_as_under_torch_compile() -> None:
    backend = RecordingBackend()
    examples: list[list[Any]] = []
    original_call = backend.__call__

    def recording(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        examples.append(list(example_inputs))
        return original_call(gm, example_inputs)

    jitted = pyjit.jit(_mlp, backend=recording)
    for batch in (2, 3, 5, 7):
        args = _inputs(batch)
        torch.testing.assert_close(jitted(*args), _mlp(*args))
    symbolic, inputs = backend.graphs[-1], examples[-1]
    placeholders = [n for n in symbolic.graph.nodes if n.op == "placeholder"]
    # the batch symbol comes first, before the tensor that carries it, with an int example
    first = placeholders[0]
    assert isinstance(first.meta["example_value"], torch.SymInt)
    assert isinstance(inputs[0], int) and inputs[0] == inputs[1].shape[0] == 3
    x_meta = placeholders[1].meta["example_value"]
    assert x_meta.shape[0].node.expr == first.meta["example_value"].node.expr
    # the graph reads the size from the placeholder, not from the tensor
    assert not any(n.op == "call_method" and n.target == "size" for n in symbolic.graph.nodes), symbolic.code
    # and a backend can run it on the example inputs as a torch.compile backend would
    symbolic(*inputs)


def test_backend_declaring_static_gets_a_graph_per_size() -> None:
    backend = RecordingBackend()
    backend.pyjit_dynamic = False  # type: ignore[attr-defined]
    jitted = pyjit.jit(_mlp, backend=backend)
    for batch in (2, 3, 4):
        args = _inputs(batch)
        torch.testing.assert_close(jitted(*args), _mlp(*args))
    assert len(backend.graphs) == 3
    for gm in backend.graphs:
        for node in gm.graph.nodes:
            if node.op == "placeholder" and isinstance(node.meta.get("example_value"), torch.Tensor):
                assert all(isinstance(s, int) for s in node.meta["example_value"].shape)


def test_function_backend_and_training_graph_with_varying_sizes() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    lin = torch.nn.Linear(8, 4)
    jitted = pyjit.jit(lin, backend=backend)
    for batch in (2, 5, 7, 9):
        x = torch.randn(batch, 8)
        out = jitted(x)
        torch.testing.assert_close(out, lin(x))
        out.sum().backward()
    assert len(graphs) == 2
