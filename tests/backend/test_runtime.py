"""Wrapper/runtime behaviour: input mutation write-back, buffer reuse, the disk cache, the
torch.compile driver, eager paths (grad, CPU eager backend) and the allocator plan."""
from __future__ import annotations

import os
from typing import Any
import stat

import torch

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime.allocator import Step, plan_buffers

from .conftest import check, compile_graph, make


def test_mutated_input_written_back(device: str) -> None:
    def fn(x, y):
        x.add_(y)
        return x * 2

    x, y = make([4, 5], device), make([5], device)
    x_ref = x.clone()
    compiled = compile_graph(fn, [x.clone(), y])
    out = compiled(x, y)
    expected = fn(x_ref, y)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, x_ref)


def test_several_mutated_inputs_written_back_together(device: str, monkeypatch: Any) -> None:
    """Inputs updated in place by one graph get their new values in one ``_foreach_copy_``,
    also where one's new value is another's old value (``a.copy_(b); b.add_(1)``: the kernel
    computes ``a``'s value into a buffer of its own before anything is written). As eager."""
    calls: list[int] = []
    fused = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda d, s: (calls.append(len(d)), fused(d, s))[1])

    def two(a, b, x):
        a.add_(x)
        b.mul_(2)
        return a + b

    def ordered(a, b):
        a.copy_(b)
        b.add_(1)
        return a * b

    for fn, inputs in ((two, [make([6], device), make([6], device), make([6], device)]),
                       (ordered, [make([6], device), make([6], device)])):
        calls.clear()
        eager_inputs = [t.clone() for t in inputs]
        expected = fn(*eager_inputs)
        out = compile_graph(fn, [t.clone() for t in inputs])(*inputs)
        torch.testing.assert_close(out, expected)
        for got, want in zip(inputs, eager_inputs):
            torch.testing.assert_close(got, want)
        assert calls == [2], calls


def _chain(x):
    # Every intermediate has four readers (more than a cheap value is recomputed for), so each
    # is realized into a buffer.
    a = x.exp()
    b = a * a + a.sin() + a.cos() + a.tanh()
    c = b * b + b.sin() + b.cos() + b.tanh()
    d = c * c + c.sin() + c.cos() + c.tanh()
    return d - d.abs()


def test_buffer_reuse_in_chain(device: str) -> None:
    with cfg.patch(backend_fusion=False):
        check(_chain, make([8, 8], device, low=-1, high=1))
    assert backend.metrics.reused_buffers >= 1


def test_allocator_plan() -> None:
    key = ((4,), (1,), torch.float32)
    steps = [Step([("buf0", key)], {"arg0"}), Step([("buf1", key)], {"buf0"}), Step([("buf2", key)], {"buf1"})]
    plan = plan_buffers(steps, keep={"arg0", "buf2"}, recyclable={"buf0", "buf1", "buf2"})
    assert plan.reuse == {"buf2": "buf0"}
    pinned = [Step([("buf0", key)], {"arg0"}, pinned={"buf0"}), Step([("buf1", key)], {"buf0"})]
    assert plan_buffers(pinned, keep={"buf1"}, recyclable={"buf0", "buf1"}).reuse == {}


def test_disk_cache_is_private_and_hit_on_recompile(device: str) -> None:
    fn = lambda x: x * 3 + 1  # noqa: E731
    x = make([5], device)
    compile_graph(fn, [x])
    compile_graph(fn, [x])
    assert backend.metrics.cache_hits + backend.metrics.graph_cache_hits >= 1
    root = cfg.config.default_cache_dir()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_torch_compile_driver(device: str) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    fn = torch.compile(lambda x, y: torch.softmax(x @ y, -1) + 1, backend=backend.compile_fx, dynamic=False)
    x, y = make([4, 6], device), make([6, 3], device)
    torch.testing.assert_close(fn(x, y), torch.softmax(x @ y, -1) + 1)
    assert backend.metrics.generated_kernel_count == 1 and not backend.metrics.eager_graphs


def test_grad_and_cpu_eager_run_as_captured(device: str) -> None:
    gm = torch.fx.symbolic_trace(lambda x: x.relu())
    x = make([3], device).requires_grad_()
    before = len(backend.metrics.eager_graphs)
    backend.compile_fx(gm, [x])  # training graphs are compiled too (tests/backend/test_aot_*)
    assert len(backend.metrics.eager_graphs) == before
    with cfg.patch(cpu_backend="eager"):
        backend.compile_fx(gm, [torch.randn(3)])
    assert "CPU" in backend.metrics.eager_graphs[-1]


def test_other_strides_at_call_time_run_eagerly(device: str) -> None:
    compiled = compile_graph(lambda x: x + 1, [make([4, 4], device)])
    y = make([4, 4], device).t()
    torch.testing.assert_close(compiled(y), y + 1)


def test_debug_dir_dump(device: str, tmp_path) -> None:
    with cfg.patch(debug_dir=str(tmp_path)):
        compile_graph(lambda x: x.exp(), [make([3], device)])
    dumped = [p.read_text() for p in tmp_path.iterdir() if p.name.startswith("pyjit_module_")]
    assert dumped and "def call(args)" in dumped[0] and "pyjit_fused_exp_0" in dumped[0]


def test_disk_cache_can_be_disabled(device: str) -> None:
    import pathlib

    root = pathlib.Path(cfg.config.default_cache_dir())
    before = set(root.rglob("*.py"))
    with cfg.patch(backend_disk_cache=False):
        compiled = compile_graph(lambda x: x * 5 - 2, [make([4], device)])
    x = make([4], device)
    torch.testing.assert_close(compiled(x), x * 5 - 2)
    assert set(root.rglob("*.py")) == before


def test_graph_cache_skips_tracing_on_warm_start(device: str, monkeypatch) -> None:
    import importlib

    cfx = importlib.import_module("pyjit.backend.compile_fx")  # the module (the package exports the function)

    fn = lambda x, y: torch.softmax(x * y + 0.25, -1)  # noqa: E731
    x, y = make([3, 7], device), make([7], device)
    compile_graph(fn, [x, y])
    monkeypatch.setattr(cfx, "trace_to_aten", lambda *a: (_ for _ in ()).throw(AssertionError("traced again")))
    compiled = compile_graph(fn, [x, y])
    assert backend.metrics.graph_cache_hits == 1
    torch.testing.assert_close(compiled(x, y), fn(x, y))


def test_graph_cache_refuses_user_functions(device: str) -> None:
    from pyjit.backend.graph_cache import graph_key

    def helper(t):
        return t * 2

    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) * 2)  # torch ops only: cacheable
    assert graph_key(gm, [make([2], device)]) is not None
    g = torch.fx.Graph()
    a = g.placeholder("a")
    g.output(g.call_function(helper, (a,)))
    assert graph_key(torch.fx.GraphModule({}, g), [make([2], device)]) is None


def _run_mutating(fn, device, *shapes):
    inputs = [make(sh, device) for sh in shapes]
    ref = [t.clone() for t in inputs]
    expected = fn(*ref)
    gm = torch.fx.experimental.proxy_tensor.make_fx(fn)(*[t.clone() for t in inputs])  # fx cannot trace setitem
    compiled = compile_graph(gm, [t.clone() for t in inputs])
    torch.testing.assert_close(compiled(*inputs), expected)
    for got, want in zip(inputs, ref):
        torch.testing.assert_close(got, want)
    return compiled


def test_slice_assignment_writes_only_the_slice(device: str) -> None:
    def kv_update(cache, k):
        cache[:, 2] = k * 2
        return k + 1

    def rows_update(cache, rows):
        cache[1:3] = rows.exp()
        return rows

    for fn, shapes in ((kv_update, ([4, 6], [4])), (rows_update, ([4, 6], [2, 6]))):
        compiled = _run_mutating(fn, device, *shapes)
        assert "scatter" not in compiled.pyjit_source  # no rebuilt copy of the whole input

    def two_writes(cache, k, rows):  # chained scatters: the whole input is rebuilt (still correct)
        cache[:, 2] = k
        cache[1:3] = rows
        return k + 1

    _run_mutating(two_writes, device, [4, 6], [4], [2, 6])

    def read_after_write(cache, k):
        cache[:, 2] = k
        return cache.sum(0)  # reads the new value: the full update is needed here

    _run_mutating(read_after_write, device, [4, 6], [4])
