"""Side effects under ``pyjit.jit`` happen exactly as in eager code, on every call: in-place
tensor updates (inputs, views of inputs, module buffers), Python mutations (lists, dicts,
globals, object attributes, closure cells) and the global RNG.

Correctness only: the frontend may capture these in a graph, replay them in its replacement
code, or run the frame eagerly; the number of graphs is not asserted here. Each test runs the
same sequence of calls eagerly and jitted from identical starting state and compares results and
the state afterwards.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same, assert_same_aliasing


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()


def _jit(fn):
    return pyjit.jit(fn, backend=CountingBackend())


def _compare_calls(fn, make_args, calls=3):
    """Call fn eagerly and jitted ``calls`` times on identical fresh arguments; compare results,
    arguments afterwards and identity of returned inputs."""
    jf = _jit(fn)
    for i in range(calls):
        eager_args, jit_args = make_args(i), make_args(i)
        expected, actual = fn(*eager_args), jf(*jit_args)
        assert_same(expected, actual, f"result of call {i}")
        assert_same(eager_args, jit_args, f"arguments after call {i}")
        assert_same_aliasing(eager_args, expected, jit_args, actual)


def _rand(i, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


def test_inplace_update_of_input_returned():
    def f(x):
        x.add_(1)
        return x

    _compare_calls(f, lambda i: (_rand(i, 4, 3),))


def test_inplace_update_through_view_of_input():
    def f(x):
        x[0].zero_()
        x[:, 1] = 5.0
        return x.sum()

    _compare_calls(f, lambda i: (_rand(i, 4, 3),))


def test_inplace_on_input_then_use():
    def f(x, y):
        y.mul_(x)
        return y + x

    _compare_calls(f, lambda i: (_rand(i, 4), _rand(i + 10, 4)))


def test_append_to_input_list():
    def f(x, out):
        out.append(x * 2)
        return x + 1

    _compare_calls(f, lambda i: (_rand(i, 3), [torch.ones(3)]))


def test_setitem_on_input_dict():
    def f(d):
        d["y"] = d["x"] + 1
        return d["x"] * 2

    _compare_calls(f, lambda i: ({"x": _rand(i, 3)},))


def test_replace_list_element():
    def f(xs):
        xs[0] = xs[0] + 1
        return xs[1] * 2

    _compare_calls(f, lambda i: ([_rand(i, 3), _rand(i + 1, 3)],))


CALLS = 0
HISTORY: list = []


def _global_counter(x):
    global CALLS
    CALLS += 1
    HISTORY.append(CALLS)
    return x * CALLS


def test_global_writes_happen_every_call():
    global CALLS
    x = torch.randn(3)
    CALLS = 0
    HISTORY.clear()
    expected = [_global_counter(x) for _ in range(3)]
    expected_history = list(HISTORY)
    CALLS = 0
    HISTORY.clear()
    jf = _jit(_global_counter)
    actual = [jf(x) for _ in range(3)]
    assert CALLS == 3 and HISTORY == expected_history
    assert_same(expected, actual)


class Tracker:
    def __init__(self):
        self.count = 0
        self.last = None


def test_object_attribute_writes():
    def f(x, t):
        t.count += 1
        t.last = x.sum()
        return x * t.count

    te, tj = Tracker(), Tracker()
    jf = _jit(f)
    for i in range(3):
        x = _rand(i, 4)
        assert_same(f(x, te), jf(x, tj))
        assert tj.count == te.count
        assert_same(te.last, tj.last)


def test_closure_cell_writes():
    def make():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x + n

        return step, lambda: n

    fe, ne = make()
    fj, nj = make()
    jf = _jit(fj)
    for i in range(3):
        x = _rand(i, 3)
        assert_same(fe(x), jf(x))
    assert nj() == ne() == 3


class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
        self.steps = 0

    def forward(self, x):
        self.avg.mul_(0.9).add_(x.mean(0) * 0.1)
        self.steps += 1
        return x - self.avg


def test_module_buffer_and_attribute_updates():
    ref = EMA()
    m = copy.deepcopy(ref)
    jm = pyjit.jit(m, backend=CountingBackend())
    for i in range(3):
        x = _rand(i, 5, 4)
        assert_same(ref(x), jm(x), f"output of call {i}")
        assert_same(ref.avg, m.avg, f"buffer after call {i}")
        assert m.steps == ref.steps


def test_random_ops_follow_the_global_rng():
    def f(x):
        return x + torch.rand_like(x) + torch.randn(x.shape[0])

    jf = _jit(f)
    x = torch.zeros(4)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = f(x)
        after_eager = torch.rand(1)
        torch.manual_seed(seed)
        actual = jf(x)
        after_jit = torch.rand(1)
        assert_same(expected, actual)
        # Tracing must not consume random numbers: the RNG stream continues identically.
        assert_same(after_eager, after_jit)


def test_dropout_in_training_mode_matches_under_same_seed():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(3, 4)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = m(x)
        torch.manual_seed(seed)
        assert_same(expected, jm(x))


def test_inplace_on_input_seen_through_view_argument():
    def f(a, b):
        a.add_(1)
        return b * 2

    jf = _jit(f)
    for _ in range(2):
        xe = torch.randn(3, 4)
        xj = xe.clone()
        assert_same(f(xe, xe[0]), jf(xj, xj[0]))
        assert_same(xe, xj, "mutated input")
    # and with unrelated arguments of the same shapes afterwards
    xe, ye = torch.randn(3, 4), torch.randn(4)
    xj, yj = xe.clone(), ye.clone()
    assert_same(f(xe, ye), jf(xj, yj))


def test_backward_inside_jitted_function():
    def step(x, w):
        loss = (x @ w).square().sum()
        loss.backward()
        return loss.detach()

    jf = _jit(step)
    x = torch.randn(3, 4)
    we = torch.randn(4, 2, requires_grad=True)
    wj = we.detach().clone().requires_grad_(True)
    for _ in range(2):
        assert_same(step(x, we), jf(x, wj))
        assert_same(we.grad, wj.grad, "accumulated grad")


def test_manual_seed_inside_jitted_function():
    def f(x):
        torch.manual_seed(5)
        return x + torch.rand(x.shape)

    jf = _jit(f)
    x = torch.zeros(3)
    assert_same(f(x), jf(x))
    torch.manual_seed(0)
    f(x)
    after_eager = torch.rand(2)
    torch.manual_seed(0)
    jf(x)
    after_jit = torch.rand(2)
    assert_same(after_eager, after_jit, "global RNG after the call")


def test_mutable_default_argument_accumulates():
    def make():
        def f(x, acc=[]):  # noqa: B006  (the Python gotcha, on purpose)
            acc.append(x.sum())
            return x * len(acc)

        return f

    fe, fj = make(), make()
    jf = _jit(fj)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(fe(x), jf(x))
    assert len(fe.__defaults__[0]) == len(fj.__defaults__[0]) == 3


def test_manual_sgd_update_through_data():
    def step(w, g, lr):
        w.data.add_(g, alpha=-lr)
        w.grad = None
        return w.data.norm()

    jf = _jit(step)
    we = torch.randn(4, requires_grad=True)
    wj = we.detach().clone().requires_grad_(True)
    for i in range(3):
        g = _rand(i, 4)
        assert_same(step(we, g, 0.1), jf(wj, g, 0.1), f"step {i}")
        assert_same(we, wj, f"weights after step {i}")
        assert wj.grad is None
