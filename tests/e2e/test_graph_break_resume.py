"""Real graph breaks: the prefix graph is compiled, the breaking instruction runs
natively, the rest continues in a compiled resume function. Every test compares results, printed
output and observable state with eager, then checks what was compiled.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os

import pytest
import torch
import torch.nn as nn

import pyjit
from pyjit.errors import GraphBreakError

from .support import CountingBackend, assert_same


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _run_both(fn, make_args, calls=3, backend=None):
    """Run ``fn`` eagerly and jitted on identical fresh arguments; compare results and stdout."""
    backend = backend or CountingBackend()
    jf = pyjit.jit(fn, backend=backend)
    for i in range(calls):
        eager_out, jit_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_out):
            expected = fn(*make_args(i))
        with contextlib.redirect_stdout(jit_out):
            actual = jf(*make_args(i))
        assert_same(expected, actual, f"result of call {i}", exact=False)
        assert eager_out.getvalue() == jit_out.getvalue(), f"printed output of call {i}"
    return backend


def _rand(i, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


# -- worked examples: prefix graphs and resume functions --------------------------------------

def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_toy_example_prefix_and_one_resume_per_branch():
    be = CountingBackend()
    jf = pyjit.jit(toy_example, backend=be)
    a = torch.randn(10)
    for b in (torch.ones(10), -torch.ones(10)):  # both branches
        assert_same(toy_example(a, b), jf(a, b), exact=False)
    # prefix (abs/add/div/sum/lt), the fall-through resume (mul, mul), the jump resume (mul)
    assert be.frame_count == 3, be.graph_listing()
    for b in (torch.ones(10), -torch.ones(10)):
        jf(a, b)
    assert be.frame_count == 3  # cache hits in the frame and both resume functions


def recursive_toy(x, n):
    if n == 0:
        return x
    return recursive_toy(x * 2, n - 1)


def test_recursive_example_inlines_into_one_graph():
    be = CountingBackend()
    x = torch.randn(4)
    assert_same(recursive_toy(x, 5), pyjit.jit(recursive_toy, backend=be)(x, 5))
    assert be.frame_count == 1 and be.call_counts == [5]


def test_loop_over_range_unrolls_into_one_graph():
    def f(x, n):
        for i in range(1, n + 1):
            x = x * i
        return x

    be = CountingBackend()
    x = torch.randn(4)
    assert_same(f(x, 4), pyjit.jit(f, backend=be)(x, 4))
    assert be.frame_count == 1 and be.call_counts == [4]


def baz(x):
    if x.sum() > 0:
        return x.cos()
    return x.sin()


def bar(x):
    return baz(x * 2) + 1


def foo(x):
    y = x.relu()
    return bar(y - 0.5) * 3


def test_nested_foo_bar_baz_tensor_branch_deep_inside():
    e = pyjit.explain(foo)(torch.ones(6))
    assert e.graph_count == 4 and e.break_count == 1
    assert e.graph_break.kind == "data_dependent"
    assert e.graph_break.location.function == "baz"
    assert [loc.function for loc in e.graph_break.inline_chain] == ["bar", "foo"]
    assert sorted(name.split(".")[-1].split("__resume")[0] for name in e.resume_functions) == ["bar", "baz", "baz", "foo"]  # baz: one per branch
    pyjit.reset()
    be = _run_both(foo, lambda i: (torch.ones(6) * (1 if i % 2 else -1),), calls=4)
    # Resumed inside the nested frames: the prefix through foo, bar and baz; one resume per
    # branch of baz; bar's and foo's resume functions (shared by both branches).
    assert be.frame_count == 5, be.graph_listing()


def test_nested_break_in_inlined_closure_breaks_one_level_out():
    def make_inner(k):
        def inner(x):  # a closure: its resume function would need its cells
            print("inner", k)
            return x * k
        return inner

    inner = make_inner(3.0)

    def outer(x):
        y = x + 1
        z = inner(y)
        return z - 1

    be = _run_both(outer, lambda i: (_rand(i, 4),))
    assert be.frame_count >= 2


# -- each kind of break, in loops, under no_grad, deep in calls, before an exception ------------

def _print_break(x):
    print("value", x.shape)
    return x


def _item_break(x):
    return x * (x.sum().item() + 1.0)


def _tolist_break(x):
    return x * sum(x.tolist())


def _branch_break(x):
    if x.mean() > 0:
        return x + 1
    return x - 1


def _disabled_break(x):
    return _disabled_helper(x) * 2


@pyjit.disable
def _disabled_helper(x):
    return x + 100


def _user_break(x):
    y = x * 3
    pyjit.graph_break()
    return y - 1


def _logging_break(x):
    logging.getLogger("pyjit.tests.user").info("x has %d rows", x.shape[0])
    return x * 5


def _c_extension_break(x):
    import zlib  # a C extension function pyjit cannot trace: it runs natively at a break

    return x * (zlib.crc32(b"pyjit") % 7 + 1)


def _attr_break(x):
    return x + 1 if x.grad is None else x  # `.grad` is read natively


_HOOKED = nn.ReLU()
_HOOKED.register_forward_hook(lambda module, args, out: out * 2)  # a module with hooks runs natively


def _hooks_break(x):
    with torch.no_grad():
        return _HOOKED(x) + x


def _generator_break(x):
    gen = (i * 2 for i in range(3))
    first = next(gen)
    return x + first + sum(gen)


BREAKS = [_print_break, _item_break, _tolist_break, _branch_break, _disabled_break, _user_break, _logging_break,
          _c_extension_break, _attr_break, _hooks_break, _generator_break]


@pytest.mark.parametrize("brk", BREAKS, ids=[b.__name__ for b in BREAKS])
def test_break_inside_for_loop(brk):
    def f(x, n):
        acc = x * 0
        for i in range(n):
            acc = acc + brk(x + i)
        return acc.sum(), acc

    _run_both(f, lambda i: (_rand(i, 3), 3))


@pytest.mark.parametrize("brk", BREAKS, ids=[b.__name__ for b in BREAKS])
def test_break_inside_no_grad_restores_grad_mode(brk):
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = brk(y) + 1
            inner = torch.is_grad_enabled()
        return y + z, inner, torch.is_grad_enabled()

    def args(i):
        return (_rand(i, 3).requires_grad_(),)

    be = CountingBackend()
    jf = pyjit.jit(f, backend=be)
    for i in range(2):
        expected, actual = f(*args(i)), jf(*args(i))
        assert_same(expected, actual, exact=False)
        assert actual[0].requires_grad == expected[0].requires_grad
        assert torch.is_grad_enabled()


@pytest.mark.parametrize("brk", BREAKS, ids=[b.__name__ for b in BREAKS])
def test_break_two_inlined_calls_deep(brk):
    def inner(x):
        return brk(x.tanh()) * 2

    def middle(x):
        return inner(x + 1) - 1

    def f(x):
        return middle(x * 3).relu()

    be = _run_both(f, lambda i: (_rand(i, 4),))
    assert be.frame_count >= 1


@pytest.mark.parametrize("brk", BREAKS, ids=[b.__name__ for b in BREAKS])
def test_break_followed_by_exception_later_in_frame(brk):
    def f(x, fail):
        y = brk(x * 2)
        if fail:
            raise ValueError(f"failing after the break with {y.shape[0]} rows")
        return y

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    for fn in (f, jf):
        with pytest.raises(ValueError, match="failing after the break with 3 rows"):
            fn(x, True)
    assert_same(f(x, False), jf(x, False), exact=False)


def test_break_after_try_block():
    def f(x, d):
        try:
            k = d["scale"]
        except KeyError:
            k = 1.0
        y = x * k
        print("scaled by", k)
        return y + 1

    _run_both(f, lambda i: (_rand(i, 3), {"scale": 2.0} if i % 2 else {}))


def test_break_inside_except_handler_falls_back_correctly():
    def f(x):
        try:
            raise KeyError("k")
        except KeyError:
            print("handled")
            y = x * 2
        return y

    _run_both(f, lambda i: (_rand(i, 3),))


def test_loops_over_lists_modulelist_enumerate_zip_with_breaks():
    layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    scales = [1.0, 2.0, 3.0]

    def f(x):
        for i, (layer, s) in enumerate(zip(layers, scales)):
            x = layer(x) * s
            print("layer", i)
        for layer in layers:
            x = layer(x)
            if x.sum() > 0:
                x = x * 0.5
        return x

    with torch.no_grad():
        _run_both(f, lambda i: (_rand(i, 2, 4),))


def test_break_in_autocast_block_is_correct():
    def f(x, w):
        h = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = h @ w
            print("in autocast")
            z = y @ w
        return z.float()

    be = _run_both(f, lambda i: (_rand(i, 4, 4), _rand(i + 10, 4, 4)))
    # The break moves before the autocast block (which runs natively); the prefix compiles.
    assert be.frame_count == 1 and be.call_counts == [1]
    assert not torch.is_autocast_enabled("cpu")


def test_item_then_python_arithmetic():
    def f(x):
        m = x.max().item()
        scale = 1.0 / (m * 2 + 1)
        return x * scale, int(m > 0)

    be = _run_both(f, lambda i: (_rand(i, 5),))
    assert be.frame_count >= 2


# -- submodules compile when the top-level forward cannot be traced ----------------------------

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        import json  # an import and json.dumps of Python data inside forward
        meta = json.dumps({"rows": int(x.shape[0])})
        for b in self.blocks:
            x = b(x)
        return x, meta


def test_submodules_compile_under_untraceable_forward():
    m = Untraceable().eval()
    be = CountingBackend()
    jm = pyjit.jit(m, backend=be)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert_same(m(x), jm(x), exact=False)
    assert be.frame_count >= 1


# -- API ---------------------------------------------------------------------------------------

def test_fullgraph_raises_on_first_break_with_location():
    with pytest.raises(GraphBreakError) as info:
        pyjit.jit(_user_break, fullgraph=True, backend=CountingBackend())(torch.randn(2))
    assert info.value.graph_break.kind == "user_break"
    assert f"{__file__}:" in str(info.value)


def test_disable_is_never_traced_and_breaks():
    calls = []

    @pyjit.disable
    def side(x):
        calls.append(x.shape)
        return x.sum().item()

    def f(x):
        return x * side(x)

    be = CountingBackend()
    jf = pyjit.jit(f, backend=be)
    x = torch.randn(3)
    assert_same(f(x), jf(x), exact=False)
    assert len(calls) == 2  # once eagerly, once natively at the break
    assert all("side" not in str(n.target) for gm in be.graphs for n in gm.graph.nodes)


def test_enable_handle_is_a_context_manager_restoring_state():
    from pyjit import _C

    before = _C.get_callback()
    be = CountingBackend()

    def f(x):
        return x.cos() + 1

    with pyjit.enable(backend=be):
        f(torch.randn(3))
    assert _C.get_callback() is before
    with pytest.raises(RuntimeError):
        with pyjit.enable(backend=be):
            raise RuntimeError("boom")
    assert _C.get_callback() is before
    handle = pyjit.enable(backend=be)
    handle.restore()
    assert _C.get_callback() is before


def test_explain_lists_breaks_in_order_and_resume_functions():
    def f(x):
        y = x * 2
        print("first")
        z = y.sum().item()
        return y + z

    with contextlib.redirect_stdout(io.StringIO()):
        e = pyjit.explain(f)(torch.randn(3))
    kinds = [gb.kind for gb in e.graph_breaks]
    assert kinds == ["print", "data_dependent"]
    lines = [gb.location.lineno for gb in e.graph_breaks]
    assert lines == sorted(lines)
    assert len(e.resume_functions) == 2
    assert e.graph_count == 3  # y * 2 | print | y.sum() | .item() | y + z


def test_graph_break_logged_once_and_resume_disassembly_dumped(tmp_path, caplog):
    def f(x):
        y = x + 1
        pyjit.graph_break()
        return y * 2

    with pyjit.config.patch(debug_dir=str(tmp_path)), caplog.at_level(logging.INFO, logger="pyjit.graph_breaks"):
        jf = pyjit.jit(f, backend=CountingBackend())
        for _ in range(3):
            jf(torch.randn(2))
    breaks = [r for r in caplog.records if "user_break" in r.getMessage()]
    assert len(breaks) == 1 and f"{__file__}:" in breaks[0].getMessage()
    dumped = os.listdir(tmp_path)
    assert any("__resume_at_" in name for name in dumped), dumped


def test_break_with_cell_variables_of_comprehensions_and_closures():
    def uses_cells(x, d):
        scaled = {k: d[k] * 2 for k in d}  # `d` is a cell variable (the comprehension reads it)
        print("keys", sorted(scaled))
        return x * scaled["a"] + d["b"]

    def closure_live(x, k):
        g = lambda t: t * k  # noqa: E731 - a closure made before the break, used after it
        y = g(x)
        print("mid")
        return g(y)

    _run_both(uses_cells, lambda i: (_rand(i, 3), {"a": 1.5, "b": float(i)}))
    _run_both(closure_live, lambda i: (_rand(i, 3), 2.0))


class _Scaler:
    def __init__(self, x):
        self.scale = float(x.abs().max().item())  # a break inside __init__
        print("made scaler")

    def apply(self, x):
        return x / (self.scale + 1)


def test_break_inside_init_of_a_class_constructed_in_the_trace():
    # __init__'s return value is not the call's result: the break moves out to the constructor call.
    def f(x):
        y = x * 2
        s = _Scaler(y)
        return s.apply(y) + 1, s.scale

    _run_both(f, lambda i: (_rand(i, 4),))


def test_break_in_map_callback_is_not_resumed_as_the_call_result():
    def cb(t):
        print("cb", t.shape)
        return t * 2

    def f(x):
        parts = list(map(cb, [x, x + 1]))
        return parts[0] + parts[1]

    _run_both(f, lambda i: (_rand(i, 3),))


def test_torch_spellings_of_graph_break_and_disable():
    @torch.compiler.disable
    def helper(x):
        return x + 1

    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return helper(y).cos()

    be = _run_both(f, lambda i: (_rand(i, 3),))
    assert be.frame_count == 2  # sin | cos; helper is never compiled
    e = pyjit.explain(f)(torch.randn(3))
    assert [gb.kind for gb in e.graph_breaks] == ["user_break", "disabled"]


_CTX_LOG: list = []


class _Tag:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        _CTX_LOG.append(("enter", self.name))
        return self.name

    def __exit__(self, *exc):
        _CTX_LOG.append(("exit", self.name))
        return False


_TAG = _Tag("outer")


def test_with_on_user_context_manager_keeps_the_prefix_graph():
    def f(x):
        y = x * 2
        with _TAG as name:
            z = y + len(name)
        return z.sin()

    _CTX_LOG.clear()
    expected = f(torch.ones(3))
    eager_log = list(_CTX_LOG)
    _CTX_LOG.clear()
    be = CountingBackend()
    assert_same(expected, pyjit.jit(f, backend=be)(torch.ones(3)), exact=False)
    assert _CTX_LOG == eager_log
    assert be.frame_count == 1 and be.call_counts == [3]  # __enter__/__exit__ traced (log replayed)


@torch.library.custom_op("pyjit_tests::scaled_add", mutates_args=())
def _scaled_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + 2 * y  # a Python kernel: runs while the compiled graph runs


@_scaled_add.register_fake
def _(x, y):
    return torch.empty_like(x)


def test_custom_op_python_kernel_is_not_compiled_as_a_callee():
    def f(x, y):
        return torch.ops.pyjit_tests.scaled_add(x.sin(), y).cos()

    be = _run_both(f, lambda i: (_rand(i, 4), _rand(i + 1, 4)))
    assert be.frame_count == 1, be.graph_listing()


class _TooBig(ValueError):
    pass


def test_try_except_around_code_that_raises_while_tracing():
    def f(x, d):
        try:
            k = d["scale"]
        except KeyError:
            k = 1.5
        try:
            if x.shape[0] > 2:
                raise _TooBig("big")
            y = x * 2
        except ValueError as e:
            y = x * len(str(e))
        try:
            z = y + 1
        finally:
            z = z * 2
        try:
            assert x.shape[0] < 2, "too big"
        except AssertionError:
            z = z - 1
        try:
            z = z * [1, 2][5]
        except IndexError:
            z = z + 3
        return z * k

    for d in ({"scale": 2.0}, {}):
        for n in (2, 4):
            be = _run_both(f, lambda i: (_rand(i, n), dict(d)), calls=2)
            assert be.frame_count == 1, be.graph_listing()  # the handlers are traced: one graph


def test_uncaught_exception_in_try_still_raises():
    def f(x):
        try:
            raise KeyError("k")
        except ValueError:
            return x
        return x + 1

    jf = pyjit.jit(f, backend=CountingBackend())
    with pytest.raises(KeyError):
        jf(torch.randn(2))


def test_caught_exception_message_is_never_guessed():
    def f(x, d):
        try:
            k = d["scale"]
        except KeyError as e:
            k = len(str(e))  # "'scale'": pyjit does not model the message, so it breaks here
        return x * k

    _run_both(f, lambda i: (_rand(i, 3), {}))


def test_backend_python_wrappers_are_not_compiled_as_callees():
    graphs = []

    def run_graph(gm, args):  # user code the backend calls while the graph runs
        return gm.forward(*args)

    def backend(gm, example_inputs):
        graphs.append(gm)

        def compiled(*args):
            return run_graph(gm, args)

        return compiled

    def f(x):
        return (x.sin() + 1).cos()

    jf = pyjit.jit(f, backend=backend)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(f(x), jf(x), exact=False)
    assert len(graphs) == 1  # neither `compiled` nor `run_graph` was traced as a frame


def test_with_on_python_context_managers_is_traced_and_breaks_move_before_it():
    import contextlib

    def traced(x):
        with contextlib.nullcontext():
            y = x * 2
        with _TAG as name:  # a user class: __enter__/__exit__ run symbolically, replayed
            y = y + len(name)
        return y

    def breaks_inside(x):
        y = x * 2
        with _TAG as name:
            y = y + len(name)
            print("inside")  # the with block (and the rest) run natively; the prefix compiles
        return y

    for fn, graphs in ((traced, 1), (breaks_inside, 1)):
        _CTX_LOG.clear()
        expected = fn(torch.ones(3))
        eager_log = list(_CTX_LOG)
        _CTX_LOG.clear()
        be = CountingBackend()
        with contextlib.redirect_stdout(io.StringIO()):
            assert_same(expected, pyjit.jit(fn, backend=be)(torch.ones(3)), exact=False)
        assert _CTX_LOG == eager_log, fn.__name__
        assert be.frame_count == graphs, (fn.__name__, be.graph_listing())


def test_modules_built_in_forward_after_torch_compile_patched_module_init():
    # torch.compile wraps nn.Module.__init__ for its own bookkeeping; pyjit traces the original.
    torch.compile(nn.ReLU(), backend="eager")(torch.randn(2))

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2.0

        def forward(self, x):
            return x * self.k

    def f(x):
        return Scaled()(x) + 1

    be = CountingBackend()
    assert_same(f(torch.ones(3)), pyjit.jit(f, backend=be, fullgraph=True)(torch.ones(3)), exact=False)
    assert be.frame_count == 1


def test_breaks_inside_comprehensions_keep_the_code_around_them_compiled():
    # 3.12+ inlines comprehensions into the frame: the comprehension runs natively as an
    # outlined function and the frame resumes after it (3.11: the comprehension's own frame).
    def fn(x, n):
        i = "outer i"  # a comprehension variable shadowing a local: restored after it
        y = x * 2
        d = {k: y[k].item() for k in range(n)}
        z = y + sum(d.values())
        w = [[y[a].item() + b for b in range(2)] for a in range(n) if a != 1]
        s = {int(v) for v in d.values()}
        return z * len(w) + len(s), i

    be = _run_both(fn, lambda i: (_rand(i, 4), 3))
    assert be.frame_count >= 2  # the prefix and the code after the comprehensions

    def unbound_loop_variable(x):
        vals = [x[j].item() for j in range(2)]
        return x + vals[0], "j" in dir()

    _run_both(unbound_loop_variable, lambda i: (_rand(i, 3),))

    def raises_inside(x):
        return [x[k].item() for k in range(5)]  # IndexError from the native comprehension

    jf = pyjit.jit(raises_inside, backend=CountingBackend())
    with pytest.raises(IndexError):
        jf(torch.ones(3))


def test_break_inside_comprehension_and_local_closure_over_caller_variables():
    def comp(x, n):
        y = x + 1
        vals = [y[i].item() * 2 for i in range(n)]  # the comprehension reads `y` (a cell)
        return y * sum(vals)

    def local_closure(x):
        scale = 3.0

        def helper(t):
            nonlocal scale
            scale = scale + 1
            print("helper", scale)
            return t * scale

        y = helper(x + 1)
        return y + scale

    be = _run_both(comp, lambda i: (_rand(i, 4), 3))
    assert be.frame_count >= 2  # the prefix and the caller's resume function are compiled
    _run_both(local_closure, lambda i: (_rand(i, 3),))
