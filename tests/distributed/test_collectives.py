"""Collectives inside jitted functions: traced as functional collectives + wait (no graph
break), results and in-place effects equal to eager on every rank, and the wait of each
collective placed just before the first use of its result.

Two processes per device (gloo on CPU; NCCL on CUDA when two GPUs are present), spawned once
per device; every check runs on both ranks and reports its failure by name.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from .spawn import WORLD, devices, init_rank, run_checks, run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

_F = torch.ops._c10d_functional



# --------------------------------------------------------------------------- traced functions
# Each takes the rank-dependent input and returns tensors; in-place collectives write their
# argument, which the check compares with eager's as well.

def f_all_reduce(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


def f_all_reduce_input(x):
    dist.all_reduce(x, op=dist.ReduceOp.MAX)  # writes the caller's tensor
    return x.sin()


def f_all_gather(x):
    out = torch.empty(WORLD * x.shape[0], *x.shape[1:], device=x.device)
    dist.all_gather_into_tensor(out, x + 1)
    return out * 2


def f_reduce_scatter(x):
    out = torch.empty(x.shape[0] // WORLD, *x.shape[1:], device=x.device)
    dist.reduce_scatter_tensor(out, x.cos())
    return out - 1


def f_broadcast(x):
    y = x + 3
    dist.broadcast(y, src=1)
    return y


def f_funcol(x):
    import torch.distributed._functional_collectives as funcol

    # (older torch releases spell the *_single functions *_tensor, with the same arguments)
    gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
    group = dist.group.WORLD
    a = funcol.all_reduce(x, "sum", group)
    b = gather(x, 1, group)
    c = scatter(x, "sum", 0, group)
    d = funcol.broadcast(x, 0, group)
    e = scatter(x, "max", 1, [0, 1])  # a group given as its ranks
    return a + 1, b * 2, c, d, e


def f_raw_ops(x):
    group = dist.group.WORLD.group_name
    y = _F.all_reduce(x, "sum", group)
    z = x.exp() * 3  # independent of the collective: runs before its wait
    return _F.wait_tensor(y) + z


def f_overlap(x, w):
    y = x * 2
    dist.all_reduce(y)
    z = (w @ w).relu()  # independent compute between the collective and the first read of y
    return y + z.sum()


def f_rank_dependent(x):
    """Each rank reads a different one of two collectives: both must still be issued, in order
    (a dropped or reordered one pairs with the other rank's wrong collective)."""
    import torch.distributed._functional_collectives as funcol

    y = funcol.all_reduce(x, "sum", dist.group.WORLD)
    z = funcol.all_reduce(x * 2, "max", dist.group.WORLD)
    if dist.get_rank() == 0:
        return x + z
    return x - y


def f_async(x, w):
    work = dist.all_reduce(x, async_op=True)
    z = w.exp().sum()  # independent of the collective
    work.wait()
    return x + z


def f_async_escapes(x, w):
    work = dist.all_reduce(x, async_op=True)
    return w + 1, work


CASES = {
    "all_reduce": (f_all_reduce, lambda r, d: [torch.arange(6.0, device=d).view(2, 3) + r]),
    "all_reduce_input": (f_all_reduce_input, lambda r, d: [torch.arange(4.0, device=d) * (1 - 2 * r)]),
    "all_gather_into_tensor": (f_all_gather, lambda r, d: [torch.arange(6.0, device=d).view(3, 2) * (r + 1)]),
    "reduce_scatter_tensor": (f_reduce_scatter, lambda r, d: [torch.arange(8.0, device=d).view(4, 2) + r]),
    "broadcast": (f_broadcast, lambda r, d: [torch.full((3,), float(r), device=d)]),
    "functional_collectives": (f_funcol, lambda r, d: [torch.arange(8.0, device=d).view(4, 2) + 10 * r]),
    "raw_functional_ops": (f_raw_ops, lambda r, d: [torch.arange(4.0, device=d) + r]),
    "overlap": (f_overlap, lambda r, d: [torch.arange(4.0, device=d) + r, torch.ones(8, 8, device=d)]),
    "rank_dependent_use": (f_rank_dependent, lambda r, d: [torch.arange(4.0, device=d) * (r + 1)]),
    "all_reduce_async": (f_async, lambda r, d: [torch.arange(3.0, device=d) + r, torch.ones(2, 2, device=d)]),
}


def _clone(args):
    return [a.clone() for a in args]


def _check_case(name: str, rank: int, device: str) -> None:
    import pyjit
    from pyjit.backend.metrics import metrics

    fn, make = CASES[name]
    # No graph break: one graph holding the collectives and their waits.
    explained = pyjit.explain(fn)(*make(rank, device))
    assert explained.graph_count == 1 and explained.break_count == 0, str(explained)
    targets = [str(n.target) for n in explained.graphs[0].graph.nodes if n.op == "call_function"]
    assert any("_c10d_functional.wait_tensor" in t for t in targets), str(explained)
    # pyjit's backend compiles it (not run as captured) and matches eager, outputs and inputs.
    eager_args, jit_args = make(rank, device), make(rank, device)
    expected = fn(*eager_args)
    metrics.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        got = pyjit.jit(fn)(*jit_args)
    compiled = metrics.compiled_graphs  # by pyjit's backend (graph-cache hits included)
    assert compiled == 1 and not metrics.eager_graphs, (compiled, metrics.eager_graphs)
    assert not any("_c10d_functional" in op for op in metrics.fallback_ops), dict(metrics.fallback_ops)
    # Compiled sin/cos/exp may differ from eager's in the last bit: default float tolerances.
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(jit_args, eager_args)


def _check_wait_order(rank: int, device: str, out_dir: str) -> None:
    """In the generated wrapper, the matmul independent of the all_reduce is issued between the
    collective and its wait."""
    import glob

    import pyjit

    debug = os.path.join(out_dir, f"debug{rank}")
    with pyjit.config.patch(debug_dir=debug, raise_on_internal_error=True, backend_disk_cache=False):
        pyjit.jit(f_overlap)(*CASES["overlap"][1](rank, device))
    (path,) = glob.glob(os.path.join(debug, "pyjit_module_*.py"))
    with open(path) as f:
        code = f.read()
    call = code[code.index("def call(args)"):]
    start = call.index("_c10d_functional.all_reduce")
    wait = call.index("_c10d_functional.wait_tensor")
    assert start < wait, call
    # The matmul (an extern aten.mm, or a kernel named after it: a Triton template on CUDA)
    # is issued after the collective's line and before its wait.
    between = call[start:wait].split("\n", 1)[1]
    assert "mm" in between, call


def _check_async(rank: int, device: str) -> None:
    """``async_op=True`` whose Work is waited on in the traced code: traced (no break); a Work
    handle that leaves the function breaks with a reason naming it; both equal eager."""
    import pyjit

    make = CASES["all_reduce_async"][1]
    explained = pyjit.explain(f_async_escapes)(*make(rank, device))
    assert explained.break_count >= 1, str(explained)
    first = explained.graph_breaks[0]
    assert first.kind == "distributed" and "async_op=True" in first.explanation, first.format()
    eager_args, jit_args = make(rank, device), make(rank, device)
    expected, work = f_async_escapes(*eager_args)
    work.wait()
    got, work = pyjit.jit(f_async_escapes)(*jit_args)
    work.wait()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(jit_args, eager_args)


def f_inplace_grad(x):
    y = x * 2
    dist.all_reduce(y)
    return (y * x).sum()


def f_funcol_grad(x):
    import torch.distributed._functional_collectives as funcol

    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
    return (y * x).sum()


def _check_grad(rank: int, device: str) -> None:
    """Gradients through collectives equal eager's: the in-place c10d call on a tensor that
    requires grad runs natively (a ``distributed`` break), the functional one compiles."""
    import pyjit

    for fn, breaks in ((f_inplace_grad, True), (f_funcol_grad, False)):
        explained = pyjit.explain(fn)((torch.arange(3.0, device=device) + rank).requires_grad_())
        assert (explained.break_count > 0) == breaks, str(explained)
        if breaks:
            assert explained.graph_breaks[0].kind == "distributed", explained.graph_breaks[0].format()
        x_eager = (torch.arange(3.0, device=device) + rank).requires_grad_()
        x_jit = (torch.arange(3.0, device=device) + rank).requires_grad_()
        expected = fn(x_eager)
        expected.backward()
        with pyjit.config.patch(raise_on_internal_error=True):
            got = pyjit.jit(fn)(x_jit)
        got.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(x_jit.grad, x_eager.grad)


def _worker(rank: int, port: int, device: str, out_dir: str) -> None:
    device = init_rank(rank, port, device)
    checks = [(name, lambda n=name: _check_case(n, rank, device)) for name in CASES]
    checks += [("wait_order", lambda: _check_wait_order(rank, device, out_dir)), ("async_op", lambda: _check_async(rank, device)),
               ("gradients", lambda: _check_grad(rank, device))]
    run_checks(rank, out_dir, checks)


@pytest.mark.parametrize("device", devices())
def test_collectives_traced_equal_to_eager(device, tmp_path):
    """Per op (CASES): no graph break, compiled by pyjit's backend, result and in-place effect
    equal to eager on both ranks; the wait placed after independent compute in the generated
    wrapper (wait_order); a Work handle leaving the function breaks with its reason (async_op);
    gradients through collectives equal eager's (gradients)."""
    failures = run_ranks(_worker, device, tmp_path)
    assert not failures, "\n".join(f"--- {name}\n" + "\n".join(tbs) for name, tbs in failures.items())


def test_sink_waits_moves_wait_before_first_use():
    """The pass alone, on a hand-built graph: start, independent compute, wait, use."""
    from pyjit.backend.passes.collectives import sink_waits

    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    start = g.call_function(_F.all_reduce.default, (x, "sum", "0"))
    wait = g.call_function(_F.wait_tensor.default, (start,))
    mm = g.call_function(torch.ops.aten.mm.default, (w, w))
    relu = g.call_function(torch.ops.aten.relu.default, (mm,))
    use = g.call_function(torch.ops.aten.add.Tensor, (wait, relu))
    g.output((use,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert sink_waits(gm) == 1
    order = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert order == [start, mm, relu, wait, use]
    assert sink_waits(gm) == 0  # already in place


def test_sink_waits_moves_pure_dependents_with_the_wait():
    """Functionalization leaves ``copy(y, wait)`` right after the wait (an in-place collective
    on an intermediate): it moves down with the wait; a write into an input does not move."""
    from pyjit.backend.passes.collectives import sink_waits

    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    y = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    start = g.call_function(_F.all_reduce.default, (y, "sum", "0"))
    wait = g.call_function(_F.wait_tensor.default, (start,))
    copy = g.call_function(torch.ops.aten.copy.default, (y, wait))
    write_back = g.call_function(torch.ops.aten.copy_.default, (x, wait))
    mm = g.call_function(torch.ops.aten.mm.default, (w, w))
    use = g.call_function(torch.ops.aten.add.Tensor, (copy, mm))
    g.output((use,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    sink_waits(gm)
    order = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert order == [y, start, wait, write_back, mm, copy, use]


def test_cuda_graphs_refuse_collectives():
    """``mode="reduce-overhead"`` never captures a graph with a collective into a CUDA graph."""
    from pyjit.runtime import cudagraphs

    g = torch.fx.Graph()
    x = g.placeholder("x")
    start = g.call_function(_F.all_reduce.default, (x, "sum", "0"))
    g.output((g.call_function(_F.wait_tensor.default, (start,)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert "collective" in cudagraphs.graph_reason(gm, device="cpu")
