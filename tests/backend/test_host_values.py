"""CPU values in a CUDA graph (``pyjit/backend/passes/host_values.py``).

The pass runs on aten graphs traced with fake CUDA tensors (no GPU needed: fake tensors carry
the device). Its rewrite is checked structurally (one stack and one transfer per dtype, host
nodes before device nodes, writes into inputs left in place) and by value: the rewritten graph,
with its transfer pointed at the CPU, computes what the original computes on real CPU tensors.
Refusals (device-to-host values, host values of several elements read on the device) raise
``GraphRefusal``. The GPU run of a jitted Adam step is in docs/training.md.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from pyjit.backend.passes.host_values import move_host_values
from pyjit.errors import GraphRefusal

aten = torch.ops.aten
CUDA = torch.device("cuda", 0)


def _trace(fn: Callable[..., Any], *specs: tuple[tuple[int, ...], str, torch.dtype]) -> torch.fx.GraphModule:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [torch.empty(shape, device=dev, dtype=dt) for shape, dev, dt in specs]
    return make_fx(fn, tracing_mode="real")(*fakes)


def _on_cpu(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The rewritten graph with every device argument pointed at the CPU (to run it here)."""
    for node in gm.graph.nodes:
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    return gm


def _adam_like(p: torch.Tensor, g: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, ...]:
    step.add_(1)  # host: the step counter
    bc = 1 - 0.9 ** step  # host
    size = torch.tensor(0.1) / bc  # host, made in the graph
    p.addcmul_(g, size)  # device reads a host value
    flag = (step > 2).to(torch.int64)  # a second dtype
    return p * flag, step


def _specs() -> list[tuple[tuple[int, ...], str, torch.dtype]]:
    return [((5,), "cuda", torch.float32), ((5,), "cuda", torch.float32), ((), "cpu", torch.float32)]


def test_host_values_are_moved_in_one_transfer_per_dtype() -> None:
    gm = _trace(_adam_like, *_specs())
    moved = move_host_values(gm, CUDA)
    assert moved == 2  # the step size (float32) and the flag (int64)
    nodes = list(gm.graph.nodes)
    copies = [n for n in nodes if n.target is aten._to_copy.default and n.kwargs.get("device") == CUDA]
    stacks = [n for n in nodes if n.target is aten.stack.default]
    assert len(copies) == 2 and len(stacks) == 2
    # Every device node reading a host value reads it through the transfer.
    for n in nodes:
        val = n.meta.get("val")
        if n.op == "call_function" and isinstance(val, torch.Tensor) and val.device.type == "cuda":
            for a in n.all_input_nodes:
                av = a.meta.get("val")
                assert not (isinstance(av, torch.Tensor) and av.device.type == "cpu") or n in copies, (n, a)
    # Host nodes come before the first device node; the write into ``step`` stays last.
    first_device = next(i for i, n in enumerate(nodes) if n.op == "call_function"
                        and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].device.type == "cuda")
    host = [i for i, n in enumerate(nodes) if n.op == "call_function"
            and n.target not in (aten.copy_.default, aten.stack.default)
            and all(t.device.type == "cpu" for t in torch.utils._pytree.tree_leaves(n.meta.get("val"))
                    if isinstance(t, torch.Tensor)) and isinstance(n.meta.get("val"), torch.Tensor)]
    assert max(host) < first_device


def test_rewritten_graph_computes_the_same_values() -> None:
    gm = _trace(_adam_like, *_specs())
    args = [torch.randn(5), torch.randn(5), torch.tensor(2.0)]
    ref_args = [a.clone() for a in args]
    expected = _adam_like(*ref_args)
    move_host_values(gm, CUDA)
    got = _on_cpu(gm)(*args)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    for e, g in zip(ref_args, args):  # the in-place updates of p and step
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_graph_without_host_values_is_unchanged() -> None:
    gm = _trace(lambda a, b: a * b + 1, ((4,), "cuda", torch.float32), ((4,), "cuda", torch.float32))
    code = gm.code
    assert move_host_values(gm, CUDA) == 0 and gm.code == code


def test_device_to_host_value_is_refused() -> None:
    gm = _trace(lambda a, s: (a.sum().cpu() + s, a * s), ((4,), "cuda", torch.float32), ((), "cpu", torch.float32))
    with pytest.raises(GraphRefusal, match="device-to-host"):
        move_host_values(gm, CUDA)


def test_host_tensor_of_several_elements_read_on_device_is_refused() -> None:
    gm = _trace(lambda a, w: a * w, ((4,), "cuda", torch.float32), ((), "cpu", torch.float32))
    # The same graph with ``w`` traced as a 4-element CPU tensor (eager allows only a copy to
    # read one on the device; fake tensors here cannot trace that copy without CUDA).
    w = [n for n in gm.graph.nodes if n.op == "placeholder"][1]
    with w.meta["val"].fake_mode:
        w.meta["val"] = torch.empty(4)
    with pytest.raises(GraphRefusal, match="shape"):
        move_host_values(gm, CUDA)


def test_cpu_graph_is_left_alone() -> None:
    gm = _trace(lambda a, s: a * s, ((4,), "cpu", torch.float32), ((), "cpu", torch.float32))
    assert move_host_values(gm, torch.device("cpu")) == 0


def test_an_op_run_as_an_aten_call_keeps_reading_the_host_value() -> None:
    """An op without a lowering is an aten call from the wrapper and takes the 0-d CPU tensor as
    eager does (the attention backward kernels require theirs on the host: given the device
    copy they read a device pointer on the host and crashed). Only lowered readers (``mul``)
    read the transfer."""
    def fn(a: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.special.zeta(a, s), a * s

    gm = _trace(fn, ((4,), "cuda", torch.float32), ((), "cpu", torch.float32))
    assert move_host_values(gm, CUDA) == 1
    s = next(n for n in gm.graph.nodes if n.op == "placeholder" and n.meta["val"].device.type == "cpu")
    readers = {n.target for n in s.users}
    assert aten.special_zeta.default in readers and aten.mul.Tensor not in readers
    args = [torch.rand(4) + 1.5, torch.tensor(2.5)]
    for e, g in zip(fn(*args), _on_cpu(gm)(*args)):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
