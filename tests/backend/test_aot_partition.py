"""The partitioners of pyjit's training path and the ``pyjit.backends.aot`` API.

Partition tests run on aten graphs only (``aot_eager``-style compilers that run the graphs as
captured), so they are fast; gradients are still compared with eager autograd.
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit
from pyjit.backend.aot import aot_compile
from pyjit.backend.aot import partition as aot_partition

aten = torch.ops.aten


def _run_as_captured(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return gm.forward


def _cheap(target: Any) -> bool:
    if target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.pointwise in target.tags or target in aot_partition._VIEW_OPS
        or target in aot_partition._CONSTANT_OPS) and torch.Tag.nondeterministic_seeded not in target.tags


def _grads_match(fn: Callable[..., Any], make_inputs: Callable[[], list[torch.Tensor]], partition: str) -> Any:
    inputs, ref = make_inputs(), make_inputs()
    compiled = aot_compile(torch.fx.symbolic_trace(fn), inputs, _run_as_captured, partition=partition)
    report = aot_partition.last_report
    out, exp = compiled(*inputs), fn(*ref)
    torch.testing.assert_close(out, exp)
    out.sum().backward()
    exp.sum().backward()
    for a, e in zip(inputs, ref):
        torch.testing.assert_close(a.grad, e.grad)
    return report


def pointwise_chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x * w
    for _ in range(4):
        y = torch.sin(y) * 1.5 + torch.cos(y)
    return torch.tanh(y)


def _chain_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 32, generator=g, requires_grad=True), torch.randn(32, generator=g, requires_grad=True)]


def test_min_cut_saves_fewer_bytes_on_pointwise_chain() -> None:
    ref = _grads_match(pointwise_chain, _chain_inputs, "reference")
    cut = _grads_match(pointwise_chain, _chain_inputs, "min_cut")
    assert cut.min_cut_bytes == cut.saved_bytes and ref.reference_bytes == ref.saved_bytes
    assert cut.saved_bytes <= ref.saved_bytes
    # The whole chain is recomputable from the two inputs: min-cut saves just them.
    assert cut.saved_bytes == (64 * 32 + 32) * 4 < ref.saved_bytes
    assert cut.recomputed and all(_cheap(t) for t in cut.recomputed)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.ln = nn.Linear(16, 32), nn.Linear(32, 16), nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        return self.ln(x + F.dropout(self.fc2(h), 0.1)).relu()


def test_min_cut_on_mlp_recomputes_only_cheap_ops() -> None:
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(8, 16, requires_grad=True)
    ref_net, ref_x = copy.deepcopy(net), x.detach().clone().requires_grad_()
    compiled = aot_compile(torch.fx.symbolic_trace(net), [x], _run_as_captured)
    report = aot_partition.last_report
    assert report is not None and report.min_cut_bytes <= report.reference_bytes
    assert all(_cheap(t) for t in report.recomputed)
    torch.manual_seed(1)
    out = compiled(x)
    torch.manual_seed(1)
    exp = ref_net(ref_x)
    torch.testing.assert_close(out, exp)
    out.sum().backward()
    exp.sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    for (name, p), q in zip(net.named_parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_aot_backend_hands_user_compiler_aten_graphs() -> None:
    seen: dict[str, list[torch.fx.GraphModule]] = {"fw": [], "bw": []}

    def recorder(kind: str) -> Callable[..., Any]:
        def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            seen[kind].append(gm)
            return gm.forward
        return compiler

    backend = pyjit.backends.aot(recorder("fw"), recorder("bw"))

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(F.gelu(x @ w), (8,))

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    rx, rw = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    jitted = pyjit.jit(fn, backend=backend)
    out = jitted(x, w)
    assert len(seen["fw"]) == 1 and not seen["bw"]  # the backward is compiled on first use
    out.sum().backward()
    fn(rx, rw).sum().backward()
    assert len(seen["bw"]) == 1
    for gm in seen["fw"] + seen["bw"]:
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert targets and all(isinstance(t, torch._ops.OpOverload) or t is operator.getitem for t in targets)
    assert aten.native_layer_norm.default not in [n.target for n in seen["fw"][0].graph.nodes]  # decomposed
    torch.testing.assert_close(x.grad, rx.grad)
    torch.testing.assert_close(w.grad, rw.grad)
    pyjit.reset()


def test_aot_eager_registered_and_reference_partition() -> None:
    assert "aot_eager" in pyjit.backends.list()
    # "inductor" is accepted, but resolved (torch._inductor imported) only when a user asks for it
    assert "inductor" in pyjit.list_backends()
    with pytest.raises(ValueError, match="partition"):
        pyjit.backends.aot(_run_as_captured, partition="bogus")
    for backend in ("aot_eager", pyjit.backends.aot(_run_as_captured, partition="reference")):
        x = torch.randn(6, requires_grad=True)
        rx = x.detach().clone().requires_grad_()
        jitted = pyjit.jit(lambda a: (a.sin() * a).exp(), backend=backend)
        jitted(x).sum().backward()
        (rx.sin() * rx).exp().sum().backward()
        torch.testing.assert_close(x.grad, rx.grad)
        pyjit.reset()


def test_aot_backend_without_grad_gives_forward_graph_only() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    buf = torch.zeros(3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        buf.add_(x)
        return x.cos()

    with torch.no_grad():
        out = pyjit.jit(fn, backend=pyjit.backends.aot(compiler))(torch.ones(3))
    torch.testing.assert_close(out, torch.ones(3).cos())
    torch.testing.assert_close(buf, torch.ones(3))  # the input mutation is applied as eager
    assert len(graphs) == 1
    assert not any(n.target is aten.copy_.default for n in graphs[0].graph.nodes)  # functional graph
    pyjit.reset()


def test_no_grad_region_inside_graph_keeps_eager_gradients() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        with torch.no_grad():
            z = y * 3  # no gradient flows through z
        return y * z

    x = torch.randn(5, requires_grad=True)
    rx = x.detach().clone().requires_grad_()
    pyjit.jit(fn, backend="aot_eager")(x).sum().backward()
    fn(rx).sum().backward()
    torch.testing.assert_close(x.grad, rx.grad)
    pyjit.reset()


# --------------------------------------------------------------------------- traffic-aware choices
def _mlp_gelu_tanh(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w1, b1), approximate="tanh") @ w2


def _mlp_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 16), (32, 16), (32,), (32, 8)]
    return [torch.randn(*s, generator=g, requires_grad=True) for s in shapes]


def test_value_a_matmul_reads_in_both_passes_is_saved_not_recomputed() -> None:
    """GELU's output feeds the second matmul in the forward and its weight gradient in the
    backward: recomputing it would make the backward write it again, so it is saved; and the
    derivative is recomputed from the first matmul's output (in memory anyway), not saved as a
    new tensor of the same size."""
    cut = _grads_match(_mlp_gelu_tanh, _mlp_inputs, "min_cut")
    ref = _grads_match(_mlp_gelu_tanh, _mlp_inputs, "reference")
    assert cut.saved_bytes <= ref.saved_bytes
    saved = " ".join(cut.saved)
    assert "addmm" in saved  # the matmul's output (x @ w1.T + b1)
    # what reaches the second matmul: GELU's output (a mul), never recomputed from the addmm
    assert aten.tanh.default in cut.recomputed  # the derivative's tanh, recomputed
    forward_gelu_outputs = [n for n in cut.saved if n.startswith("mul")]
    assert forward_gelu_outputs, cut.saved
    # Two tensors of the activation's size (the addmm output and GELU's output), nothing else big.
    assert cut.saved_bytes < 3 * 64 * 32 * 4 + (32 * 16 + 32 + 32 * 8 + 64 * 16) * 4
