"""Frames without tensor work cost nothing under ``pyjit.enable()``: they are not traced, get no
replacement code and no guards (pyjit/frame/precheck.py, the C core's plain mark), while the
tensor functions they call are still compiled; pure-Python calls inside a traced frame run
natively once they exceed the inline budgets (docs/graph_breaks.md)."""
from __future__ import annotations

import time

import pytest
import torch

import pyjit
from pyjit import _C
from pyjit.frame import convert, precheck

from .support import CountingBackend, assert_same

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Node:
    def __init__(self, value, nxt):
        self.value = value
        self.nxt = nxt


def build_and_walk(n):
    head = None
    for i in range(n):
        head = Node(i, head)
    total = 0
    while head is not None:
        total += head.value
        head = head.nxt
    return total


def timed(n):
    t0 = time.perf_counter()
    r = fib(n)
    return r, time.perf_counter() - t0  # a float that differs on every call


def scaled_ones(n):
    return torch.ones(n) * 3  # reads the global `torch`: traced


def driver(n):
    s = sum(i * i for i in range(n))
    return scaled_ones(4) + (s % 7)


def add(a, b):
    return a + b


@pytest.fixture
def counts(monkeypatch):
    """How often frames were traced (convert_frame) and looked at (the precheck), per code name."""
    traced: dict[str, int] = {}
    looked: dict[str, int] = {}
    real_convert, real_reaches = convert.convert_frame, precheck.reaches_tensors

    def counting_convert(func, *a, **k):
        traced[func.__code__.co_name] = traced.get(func.__code__.co_name, 0) + 1
        return real_convert(func, *a, **k)

    def counting_reaches(func, args):
        looked[func.__code__.co_name] = looked.get(func.__code__.co_name, 0) + 1
        return real_reaches(func, args)

    monkeypatch.setattr(convert, "convert_frame", counting_convert)
    monkeypatch.setattr(precheck, "reaches_tensors", counting_reaches)
    return traced, looked


def test_plain_functions_get_no_replacement_and_are_not_looked_at_again(counts):
    traced, looked = counts
    be = CountingBackend()
    with pyjit.enable(backend=be):
        assert fib(12) == 144
        assert build_and_walk(500) == sum(range(500))
        first = dict(looked)
        assert fib(12) == 144
        assert build_and_walk(500) == sum(range(500))
    assert traced == {} and be.frame_count == 0
    for code in (fib.__code__, build_and_walk.__code__, Node.__init__.__code__):
        assert _C.cache_entries(code) == [], code.co_name
        assert _C.get_plain(code) is not None, code.co_name
    # Each code object was looked at once per new argument type (Node.__init__: a Node, then None).
    assert first["fib"] == 1 and first["build_and_walk"] == 1 and first["__init__"] <= 2
    assert looked == first, "the second round ran natively, without calling back"


def test_a_timestamp_in_a_plain_frame_installs_no_guard_and_never_recompiles(counts):
    traced, _ = counts
    with pyjit.enable(backend=CountingBackend()):
        for _ in range(3):
            r, dt = timed(10)
            assert r == 55 and dt >= 0
    assert traced == {}
    assert _C.cache_entries(timed.__code__) == []


def test_a_function_seen_with_ints_is_compiled_when_it_gets_tensors(counts):
    traced, _ = counts
    be = CountingBackend()
    x, y = torch.randn(3), torch.randn(3)
    with pyjit.enable(backend=be):
        assert add(2, 3) == 5
        assert _C.get_plain(add.__code__) == (int,)
        out = add(x, y)
        assert add(4, 5) == 9
    assert_same(out, x + y)
    assert traced.get("add") == 1 and be.frame_count == 1
    assert len(_C.cache_entries(add.__code__)) == 1


def test_plain_frame_calling_a_tensor_function_still_compiles_the_callee(counts):
    traced, _ = counts
    be = CountingBackend()
    with pyjit.enable(backend=be):
        first = driver(10)
        second = driver(10)
    assert_same(first, torch.ones(4) * 3 + (sum(i * i for i in range(10)) % 7))
    assert_same(second, first)
    assert "driver" not in traced and _C.cache_entries(driver.__code__) == []
    assert traced.get("scaled_ones") == 1 and be.frame_count == 1
    assert len(_C.cache_entries(scaled_ones.__code__)) == 1


def step(x):
    n = fib(12)  # pure-Python recursion inside a traced frame
    y = x * 2
    return y + n


def step_copy(x):
    n = fib(12)
    y = x * 2
    return y + n


def test_recursion_inside_a_traced_frame_runs_natively_and_the_tensor_part_compiles():
    x = torch.randn(4)
    explanation = pyjit.explain(step)(x)
    kinds = [gb.kind for gb in explanation.graph_breaks]
    assert kinds == ["inline_budget"], str(explanation)
    assert explanation.graph_count >= 1
    be = CountingBackend()
    with pyjit.enable(backend=be):  # a function explain() did not jit already
        out = step_copy(x)
        again = step_copy(x)
    assert_same(out, x * 2 + 144)
    assert_same(again, out)
    assert be.frame_count >= 1


def long_loop(n):
    total = 0
    for i in range(n):
        total += i % 3
    return total


def step_with_loop(x):
    return x + long_loop(5000)


def test_a_long_pure_python_call_is_not_traced_to_the_limit(counts):
    traced, _ = counts
    x = torch.randn(4)
    with pyjit.config.patch(inline_instruction_budget=500):
        explanation = pyjit.explain(step_with_loop)(x)
    assert [gb.kind for gb in explanation.graph_breaks] == ["inline_budget"], str(explanation)
    assert "long_loop" not in traced, "the call ran natively and, reaching no tensor, was not traced"
    assert_same(pyjit.jit(step_with_loop, backend=CountingBackend())(x), step_with_loop(x))


def recursive_tensor(x, k):
    if k == 0:
        return x
    return recursive_tensor(x * 2, k - 1)


def test_recursion_with_tensor_work_is_still_inlined_into_one_graph():
    x = torch.randn(3)
    explanation = pyjit.explain(recursive_tensor)(x, 8)
    assert explanation.break_count == 0 and explanation.graph_count == 1, str(explanation)


def test_mixed_program_compiles_its_tensor_part_and_matches_eager():
    w = torch.randn(8, 8)

    def program(x):
        words = [f"w{i % 11}" for i in range(300)]
        counts: dict[str, int] = {}
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        return torch.relu(x @ w) * len(counts)

    x = torch.randn(2, 8)
    be = CountingBackend()
    with pyjit.enable(backend=be):
        out = program(x)
    assert_same(out, torch.relu(x @ w) * 11)
    assert be.frame_count >= 1
    with pyjit.config.patch(inline_instruction_budget=100):  # the comprehension is never the one run natively
        pyjit.reset()
        be = CountingBackend()
        with pyjit.enable(backend=be):
            assert_same(program(x), out)
        assert be.frame_count >= 1


def test_fullgraph_jit_of_a_plain_function_is_still_traced(counts):
    traced, _ = counts
    assert pyjit.jit(add, backend=CountingBackend(), fullgraph=True)(1, 2) == 3
    assert traced.get("add") == 1


class _Trap:
    """Any user dunder the look would call fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"__getattr__({name!r}) called")

    @property
    def __class__(self):
        raise AssertionError("__class__ read")

    def __len__(self):
        raise AssertionError("__len__ called")


def test_the_look_calls_no_user_code_and_sees_tensors_in_containers_and_objects():
    def f(a, b=None):
        return a

    trap = _Trap()
    assert not precheck.reaches_tensors(f, (trap, [1, 2, {"k": "v"}]))
    holder = Node(torch.ones(1), None)
    assert precheck.reaches_tensors(f, (holder, None))
    assert precheck.reaches_tensors(f, ([1, (2, {"t": torch.ones(1)})], None))
    assert precheck.reaches_tensors(f, (torch.nn.Linear(2, 2), None))
