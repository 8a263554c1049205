"""The captured FX graph: node names from user variables, example values, stack traces, inputs."""
from __future__ import annotations

import pytest
import torch

import pyjit

from .conftest import same


def test_node_names_follow_user_variables(rec):
    def f(x, y):
        hidden = x @ y
        activated = torch.relu(hidden)
        return activated + 1

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    same(f(x, y), pyjit.jit(f, backend=rec)(x, y))
    names = [n.name for n in rec.graphs[0].graph.nodes]
    assert names[:2] == ["x", "y"]
    assert "hidden" in names and "activated" in names


def test_example_values_are_fake_and_match_eager(rec):
    def f(x):
        y = x.sum(0)
        return y.unsqueeze(1).to(torch.float64)

    x = torch.randn(5, 3)
    out = pyjit.jit(f, backend=rec)(x)
    nodes = [n for n in rec.graphs[0].graph.nodes if n.op == "call_method"]
    last = nodes[-1].meta["example_value"]
    assert type(last).__name__ == "FakeTensor"
    assert last.shape == out.shape and last.dtype == out.dtype


def test_stack_trace_points_at_user_line(rec):
    def helper(t):
        return t.cos()  # MARK-helper

    def f(x):
        return helper(x) * 2

    pyjit.jit(f, backend=rec)(torch.randn(3))
    cos = next(n for n in rec.graphs[0].graph.nodes if n.target == "cos")
    trace = cos.meta["stack_trace"]
    assert __file__ in trace
    assert "MARK-helper" in trace  # the inlined line
    assert trace.index("in f") < trace.index("in helper")  # outermost frame first


def test_inputs_returned_unchanged_are_not_graph_outputs(rec):
    def f(x, y):
        return x, y * 2, [x, 3], {"k": "v"}

    x, y = torch.randn(2), torch.randn(2)
    out = pyjit.jit(f, backend=rec)(x, y)
    same(f(x, y), out)
    assert out[0] is x and out[2][0] is x  # identity kept: rebuilt from the frame, not the graph
    output_node = next(n for n in rec.graphs[0].graph.nodes if n.op == "output")
    assert len(output_node.args[0]) == 1


def test_module_parameters_are_graph_inputs_read_each_call(rec):
    lin = torch.nn.Linear(4, 2)
    jf = pyjit.jit(lambda m, x: m(x), backend=rec)
    x = torch.randn(3, 4)
    same(lin(x), jf(lin, x))
    placeholders = [n.meta.get("source") for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]
    assert "L['m'].weight" in placeholders and "L['m'].bias" in placeholders
    with torch.no_grad():
        lin.weight.add_(1.0)  # an optimizer-style in-place update: seen without recompiling
    same(lin(x), jf(lin, x))
    assert len(rec.graphs) == 1


def test_duplicate_argument_uses_one_placeholder(rec):
    def f(a, b):
        return a + b

    x = torch.randn(3)
    jf = pyjit.jit(f, backend=rec)
    same(f(x, x), jf(x, x))
    assert sum(1 for n in rec.graphs[0].graph.nodes if n.op == "placeholder") == 1
    y = torch.randn(3)
    same(f(x, y), jf(x, y))  # aliasing guard fails: a second graph with two inputs
    assert len(rec.graphs) == 2


def test_closure_and_global_tensors_are_inputs(rec):
    bias = torch.randn(3)

    def f(x):
        return x + bias + GLOBAL_T

    x = torch.randn(3)
    same(f(x), pyjit.jit(f, backend=rec)(x))
    sources = {n.meta.get("source") for n in rec.graphs[0].graph.nodes if n.op == "placeholder"}
    assert sources == {"L['x']", "C['bias']", "G['GLOBAL_T']"}


GLOBAL_T = torch.randn(3)


def test_no_grad_region_switches_grad_mode_inside_graph(rec):
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y * 3
        return y, z

    x = torch.randn(3, requires_grad=True)
    out = pyjit.jit(f, backend=rec)(x)
    same(f(x), out)
    assert out[0].requires_grad and not out[1].requires_grad
    assert torch.is_grad_enabled()


def test_frame_without_tensor_ops_is_skipped(rec):
    from pyjit import _C

    def f(n):
        return [i * 2 for i in range(n)]

    jf = pyjit.jit(f, backend=rec)
    assert jf(3) == f(3)
    assert _C.get_plain(f.__code__) == (int,)  # no tensor in reach: never traced
    assert jf(4) == f(4)
    assert rec.graphs == []


def test_autocast_and_inference_mode_regions_are_replayed_by_the_graph(rec):
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = x @ w
        with torch.inference_mode():
            b = x * 2
        return a, b

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3)
    out = pyjit.jit(f, backend=rec, fullgraph=True)(x, w)
    ref = f(x, w)
    assert out[0].dtype == torch.bfloat16
    same(ref[0], out[0])
    torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)
    assert out[1].is_inference() and not out[1].requires_grad
    assert not torch._C._is_any_autocast_enabled() and not torch.is_inference_mode_enabled()


def test_tracing_stopped_inside_autocast_restores_state(rec):
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.T
            print(y)  # graph break inside the region
        return y

    x = torch.randn(3, 3)
    with pytest.raises(pyjit.GraphBreakError):
        pyjit.jit(f, backend=rec, fullgraph=True)(x)
    assert not torch._C._is_any_autocast_enabled()


def test_inplace_update_through_a_view_guards_against_aliased_inputs(rec):
    def f(a, b):
        a[0].add_(1)
        return a * b

    jf = pyjit.jit(f, backend=rec)
    for alias in (False, True, False):
        xe, ye = torch.randn(3), torch.randn(3)
        xj, yj = xe.clone(), ye.clone()
        same(f(xe, xe if alias else ye), jf(xj, xj if alias else yj))
        same(xe, xj)
    assert len(rec.graphs) == 2  # distinct inputs, then the aliased call
