"""``contextvars.ContextVar`` get/set/reset and ``with lock:`` traced without a graph break
(pyjit/variables/context_state.py), as transformers' output capturing uses them: eager-equal
results, the variable's state after the call equal to eager's, break counts, guards on the
value read, tokens crossing a graph break or escaping the frame, and clean breaks where the
lock's mutual exclusion would matter."""
from __future__ import annotations

import contextvars
import threading

import pytest
import torch

import pyjit

from .helpers import CompileCounter, check_world_change, same

X = torch.randn(4)
COLLECTOR: contextvars.ContextVar = contextvars.ContextVar("pyjit_test_collector", default=None)
UNSET: contextvars.ContextVar = contextvars.ContextVar("pyjit_test_unset")
LOCK = threading.Lock()
REGISTRY = {"installed": True}


@pytest.fixture(autouse=True)
def _clean_state():
    ctx_token = COLLECTOR.set(None)
    yield
    COLLECTOR.reset(ctx_token)
    REGISTRY.clear()
    REGISTRY["installed"] = True


def _layer(x):
    collected = COLLECTOR.get()
    if collected is not None:
        collected.append(x.sum())
    return x * 2


def capture(x):
    collected = []
    token = COLLECTOR.set(collected)
    try:
        y = _layer(_layer(x))
    finally:
        COLLECTOR.reset(token)
    return y, collected, COLLECTOR.get()


def test_set_get_reset_in_one_graph():
    expected = capture(X)
    counter = CompileCounter()
    got = pyjit.jit(capture, backend=counter, fullgraph=True)(X)
    same(expected, got, "result")
    assert counter.graphs == 1 and COLLECTOR.get() is None
    assert pyjit.explain(capture)(X).break_count == 0


def test_value_read_is_guarded():
    def f(x):
        scale = COLLECTOR.get()
        return x * (1 if scale is None else scale)

    check_world_change(f, (X,), lambda: COLLECTOR.set(3), lambda: COLLECTOR.set(None))


def test_token_across_a_graph_break():
    def f(x):
        collected = []
        token = COLLECTOR.set(collected)
        try:
            y = _layer(x)
            pyjit.graph_break()
            y = _layer(y)
        finally:
            COLLECTOR.reset(token)  # in the resume function: the token came from the replayed set
        return y, collected, COLLECTOR.get()

    expected = f(X)
    got = pyjit.jit(f, backend=CompileCounter())(X)
    same(expected, got, "result")
    assert COLLECTOR.get() is None
    explained = pyjit.explain(f)(X)
    assert [b.kind for b in explained.graph_breaks] == ["user_break"]
    assert COLLECTOR.get() is None


def test_token_escaping_the_frame_is_the_replayed_sets_token():
    def set_it(x):
        return x + 1, COLLECTOR.set([7])

    def reset_it(x, token):
        COLLECTOR.reset(token)
        return x + 1, COLLECTOR.get()

    counter = CompileCounter()
    y, token = pyjit.jit(set_it, backend=counter, fullgraph=True)(X)
    assert isinstance(token, contextvars.Token) and COLLECTOR.get() == [7]
    same(((X + 1) + 1, None), pyjit.jit(reset_it, backend=counter, fullgraph=True)(y, token), "reset")
    assert COLLECTOR.get() is None and counter.graphs == 2
    with pytest.raises(RuntimeError):  # the caller's token was used by the replayed reset
        COLLECTOR.reset(token)


def test_unset_variable_without_default_breaks_with_lookup_error():
    def f(x):
        return x * UNSET.get()

    with pytest.raises(pyjit.GraphBreakError, match="LookupError"):
        pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)
    same(X * 5, pyjit.jit(lambda x: x * UNSET.get(5), backend=CompileCounter(), fullgraph=True)(X), "default")


# -- with lock: ------------------------------------------------------------------------------------


def install_once(x):
    if not REGISTRY.get("installed", False):
        with LOCK:
            if not REGISTRY.get("installed", False):
                REGISTRY["installed"] = True
                REGISTRY["hooks"] = 1
    with LOCK:  # a block that only reads
        ready = REGISTRY["installed"]
    return x + 1 if ready else x - 1


def test_read_only_lock_block_is_traced():
    expected = install_once(X)
    counter = CompileCounter()
    got = pyjit.jit(install_once, backend=counter, fullgraph=True)(X)
    same(expected, got, "result")
    assert counter.graphs == 1 and not LOCK.locked()
    explained = pyjit.explain(install_once)(X)
    assert explained.break_count == 0
    assert any("locked" in g for g in explained.guards), explained.guards


def test_lock_block_that_mutates_runs_natively():
    REGISTRY["installed"] = False
    explained = pyjit.explain(install_once)(X)
    assert [b.kind for b in explained.graph_breaks] == ["side_effect"]
    assert "with lock" in explained.graph_breaks[0].explanation
    assert REGISTRY == {"installed": True, "hooks": 1} and not LOCK.locked()
    REGISTRY.clear()
    got = pyjit.jit(install_once, backend=CompileCounter())(X)
    same(X + 1, got, "result")
    assert REGISTRY == {"installed": True, "hooks": 1} and not LOCK.locked()


def test_explicit_acquire_breaks_with_a_reason():
    def f(x):
        LOCK.acquire()
        LOCK.release()
        return x + 1

    with pytest.raises(pyjit.GraphBreakError, match="lock.acquire"):
        pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)
