"""Per-code cache in co_extra: skip marks, run-only (per code and per thread), entry limit
with its one-time callback, most-recently-hit ordering, reset, and code-object lifetime."""
from __future__ import annotations

import gc
import sys
import weakref

import pytest

from pyjit import _C

from .core_helpers import Compiler, flat_code, running_code_name


def test_mark_skip_never_calls_back():
    def f(x):
        return running_code_name()

    calls = []

    def cb(func, args):
        calls.append(func.__name__)
        return (None, flat_code(func))

    _C.mark_skip(f.__code__)
    assert _C.is_skip(f.__code__)
    _C.set_callback(cb)
    try:
        assert [f(1), f(2)] == ["f", "f"]
    finally:
        _C.set_callback(None)
    assert "f" not in calls
    _C.mark_skip(f.__code__, False)
    assert not _C.is_skip(f.__code__)


def test_skip_mark_wins_over_entries():
    def f(x):
        return running_code_name()

    _C.set_callback(Compiler(f))
    try:
        assert f(1) == "f__repl"
        _C.mark_skip(f.__code__)
        assert f(1) == "f"
    finally:
        _C.set_callback(None)


def test_thread_run_only_mode_uses_entries_never_calls_back():
    def f(x):
        return running_code_name(), x

    def g(x):
        return running_code_name(), x

    comp = Compiler(f, g)
    _C.set_callback(comp)
    try:
        assert f(1) == ("f__repl", 1)
        assert _C.set_run_only_mode(True) is False
        assert _C.get_run_only_mode()
        assert f(2) == ("f__repl", 2)
        assert g(3) == ("g", 3)  # no entry and no callback in run-only mode
    finally:
        _C.set_run_only_mode(False)
        _C.set_callback(None)
    assert [c[0] for c in comp.calls] == ["f"]
    # run-only mode alone (no callback) also enables the hook for this thread
    _C.set_run_only_mode(True)
    try:
        assert _C._hook_installed()
        assert f(4) == ("f__repl", 4)
    finally:
        _C.set_run_only_mode(False)
    assert not _C._hook_installed()


def test_per_code_run_only():
    def f(x):
        return running_code_name(), x

    def guard(func, args):
        t = _C.GuardTree()
        t.arg(0).check_eq(args[0], 0)
        return t

    comp = Compiler(f, guard_factory=guard)
    _C.set_callback(comp)
    try:
        assert f(1) == ("f__repl", 1)
        _C.set_run_only(f.__code__, True)
        assert _C.is_run_only(f.__code__)
        assert f(1) == ("f__repl", 1)  # hit
        assert f(2) == ("f", 2)        # miss: original, no callback
    finally:
        _C.set_callback(None)
    assert len(comp.calls) == 1


def test_entry_limit_and_limit_callback_once():
    def f(x):
        return running_code_name(), x

    def guard(func, args):
        t = _C.GuardTree()
        t.arg(0).check_eq(args[0], 0)
        return t

    limited = []
    _C.set_entry_limit(3)
    assert _C.get_entry_limit() == 3
    _C.set_limit_callback(limited.append)
    comp = Compiler(f, guard_factory=guard)
    _C.set_callback(comp)
    try:
        out = [f(i) for i in range(6)] + [f(1)]
    finally:
        _C.set_callback(None)
    assert out[:3] == [("f__repl", 0), ("f__repl", 1), ("f__repl", 2)]
    assert out[3:6] == [("f", 3), ("f", 4), ("f", 5)]
    assert out[6] == ("f__repl", 1)
    assert len(comp.calls) == 3
    assert limited == [f.__code__]
    assert len(_C.cache_entries(f.__code__)) == 3
    with pytest.raises(ValueError):
        _C.set_entry_limit(-1)


def test_limit_callback_error_does_not_break_the_frame(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))

    def f(x):
        return x

    def bad(code):
        raise RuntimeError("logging failed")

    def guard(func, args):
        t = _C.GuardTree()
        t.arg(0).check_eq(args[0], 0)
        return t

    _C.set_entry_limit(1)
    _C.set_limit_callback(bad)
    _C.set_callback(Compiler(f, guard_factory=guard))
    try:
        assert f(3) == 3
        assert f(4) == 4
        assert f(5) == 5
    finally:
        _C.set_callback(None)
    assert reported == [RuntimeError]


def test_reset_drops_entries_and_marks():
    def f(x):
        return running_code_name()

    def s(x):
        return x

    comp = Compiler(f)
    _C.set_callback(comp)
    try:
        f(1)
    finally:
        _C.set_callback(None)
    _C.mark_skip(s.__code__)
    _C.set_run_only(f.__code__, True)
    assert _C.cache_entries(f.__code__)
    _C.reset()
    assert _C.cache_entries(f.__code__) == []
    assert not _C.is_skip(s.__code__) and not _C.is_run_only(f.__code__)
    _C.set_callback(comp)
    try:
        assert f(1) == "f__repl"
    finally:
        _C.set_callback(None)
    assert len(comp.calls) == 2


def test_cache_state_dies_with_the_code_object():
    ns: dict = {}
    exec("def tmp(x):\n    return x\n", ns)
    tmp = ns.pop("tmp")
    gc.collect()  # code objects of earlier tests that are already garbage must not die below
    before = _C._extra_count()
    repl = flat_code(tmp)
    repl_ref = weakref.ref(tmp)
    _C.set_callback(lambda func, args: (None, repl) if func is tmp else None)  # noqa: F821 (both deleted below)
    try:
        tmp(1)
    finally:
        _C.set_callback(None)
    assert _C._extra_count() == before + 1
    del tmp, repl, ns
    gc.collect()
    assert repl_ref() is None
    assert _C._extra_count() == before


def test_api_type_errors():
    with pytest.raises(TypeError):
        _C.mark_skip("not code")
    with pytest.raises(TypeError):
        _C.cache_entries(lambda: 0)
    with pytest.raises(TypeError):
        _C.set_callback(3)
    assert _C.cache_entries((lambda: 0).__code__) == []
