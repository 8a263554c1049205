"""Frames without tensor operations are looked at, found to have no graph worth compiling, and
left to run as plain Python: the backend never sees a graph, and results stay correct.
"""
from __future__ import annotations

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def int_math(a, b):
    return a * b + 1


def string_work(name, n):
    return f"{name}-{n}".upper()


def list_work(xs):
    return sorted(xs)[::-1] + [len(xs)]


def returns_input_tensor(x):
    return x


def shape_only(x):
    return x.shape[0] * x.shape[1], x.dtype


def container_of_inputs(x, y):
    return {"x": x, "pair": (y, x)}


PLAIN_CASES = [
    (int_math, [(2, 3), (4, 5), (2.5, 2)]),
    (string_work, [("a", 1), ("bb", 22), ("a", 1)]),
    (list_work, [([3, 1, 2],), ([5, 4],), ([],)]),
]


@pytest.mark.parametrize("fn,calls", PLAIN_CASES, ids=[c[0].__name__ for c in PLAIN_CASES])
def test_python_only_frames_make_no_graph(fn, calls):
    backend = CountingBackend()
    jitted = pyjit.jit(fn, backend=backend)
    for args in calls * 2:
        assert jitted(*args) == fn(*args)
    assert backend.frame_count == 0, backend.graph_listing()


TENSOR_NO_OP_CASES = [returns_input_tensor, shape_only, container_of_inputs]


@pytest.mark.parametrize("fn", TENSOR_NO_OP_CASES, ids=[f.__name__ for f in TENSOR_NO_OP_CASES])
def test_tensor_frames_without_tensor_ops_make_no_graph(fn):
    backend = CountingBackend()
    jitted = pyjit.jit(fn, backend=backend)
    nargs = fn.__code__.co_argcount
    for shape in [(4, 8), (4, 8), (2, 3)]:
        args = [torch.randn(*shape) for _ in range(nargs)]
        expected = fn(*args)
        actual = jitted(*args)
        assert_same(expected, actual)
        if fn is not shape_only:
            # Input tensors come back as the very same objects.
            exp_leaves = [v for v in _flat(expected)]
            act_leaves = [v for v in _flat(actual)]
            assert all(a is e for a, e in zip(act_leaves, exp_leaves))
    assert backend.frame_count == 0, backend.graph_listing()


def _flat(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _flat(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _flat(x)
    else:
        yield v


def test_skipped_frame_called_later_with_tensors_is_correct():
    # First seen with ints (no tensor work), then with tensors: whatever the frontend decides
    # for the code object, the answers must be eager's.
    backend = CountingBackend()
    jitted = pyjit.jit(int_math, backend=backend)
    assert jitted(2, 3) == int_math(2, 3)
    x, y = torch.randn(4), torch.randn(4)
    assert_same(int_math(x, y), jitted(x, y))
    assert_same(int_math(x, y), jitted(x, y))


def test_skip_is_per_function_not_global():
    backend = CountingBackend()

    def no_tensor_work(a):
        return a + 1

    def tensor_work(x):
        return x + 1

    jn = pyjit.jit(no_tensor_work, backend=backend)
    jt = pyjit.jit(tensor_work, backend=backend)
    assert jn(1) == no_tensor_work(1)
    x = torch.randn(3)
    assert_same(tensor_work(x), jt(x))
    assert backend.frame_count == 1


def test_nested_calls_inside_jitted_frame_are_not_compiled_separately():
    # The helper is inlined into the caller's graph: one graph in total, never one per frame.
    def helper(v):
        return v * 3

    def outer(x):
        return helper(x) + helper(x + 1)

    backend = CountingBackend()
    jitted = pyjit.jit(outer, backend=backend)
    x = torch.randn(4)
    assert_same(outer(x), jitted(x))
    assert_same(outer(x), jitted(x))
    assert backend.frame_count == 1
    # Calling the helper directly (not jitted) makes no graph.
    helper(x)
    assert backend.frame_count == 1


def test_frame_without_tensor_ops_is_marked_plain_after_one_look():
    # A frame that reaches no tensor gets the C core's plain mark for its argument types
    # (pyjit/frame/precheck.py): later calls with ints run natively without a callback.
    from pyjit import _C

    def only_ints(a, b):
        return a * b - 1

    be = CountingBackend()
    jf = pyjit.jit(only_ints, backend=be)
    assert _C.get_plain(only_ints.__code__) is None
    assert jf(3, 4) == only_ints(3, 4)
    assert _C.get_plain(only_ints.__code__) == (int,)
    assert jf(5, 6) == only_ints(5, 6)
    assert _C.cache_entries(only_ints.__code__) == [] and be.frame_count == 0
    pyjit.reset()
    assert _C.get_plain(only_ints.__code__) is None, "pyjit.reset() forgets plain marks too"
