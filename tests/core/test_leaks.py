"""No leaks: many calls through a cache hit, a miss, and the exception path leave reference
counts of arguments, code objects and functions unchanged and tracemalloc flat."""
from __future__ import annotations

import gc
import sys
import tracemalloc

from pyjit import _C

from .core_helpers import flat_code


class Arg:
    pass


def target(a, b=1, *rest, k=2, **kw):
    return a


def raising(a):
    raise ValueError(a)


def _refcounts(*objs):
    return [sys.getrefcount(o) for o in objs]


def _guard_for(a):
    t = _C.GuardTree()
    t.arg(0).check_type(type(a), 0)
    t.arg(0).check_id(a, 1)
    t.arg(2).check_eq(2, 2)
    t.global_("Arg").check_id(Arg, 3)
    return t


def _traced_growth(fn, n_warm, n):
    for _ in range(n_warm):
        fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            fn()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before


def test_hits_do_not_leak():
    a, extra, kwval = Arg(), Arg(), Arg()
    repl = flat_code(target)
    guard = _guard_for(a)

    def cb(func, args):
        return (guard, repl) if func is target else _C.mark_skip(func.__code__)

    _C.set_callback(cb)
    try:
        target(a, 0, extra, z=kwval)  # install the entry
        objs = (a, extra, kwval, target, target.__code__, repl, guard, cb)
        before = _refcounts(*objs)
        for _ in range(100_000):
            target(a, 0, extra, z=kwval)
        after = _refcounts(*objs)
        growth = _traced_growth(lambda: target(a, 0, extra, z=kwval), 1000, 20_000)
    finally:
        _C.set_callback(None)
    assert after == before
    assert len(_C.cache_entries(target.__code__)) == 1
    assert growth < 16 * 1024, f"tracemalloc grew by {growth} bytes over 20k hits"


def test_misses_do_not_leak():
    a = Arg()
    seen = [0]

    def cb(func, args):
        if func is target:
            seen[0] += 1
            return None  # run the original, call back next time again
        _C.mark_skip(func.__code__)
        return None

    _C.set_callback(cb)
    try:
        target(a)
        objs = (a, target, target.__code__, cb)
        before = _refcounts(*objs)
        for _ in range(10_000):
            target(a, 5, k=3)
        after = _refcounts(*objs)
        growth = _traced_growth(lambda: target(a, 5, k=3), 100, 5_000)
    finally:
        _C.set_callback(None)
    assert after == before
    assert seen[0] > 10_000
    assert growth < 16 * 1024, f"tracemalloc grew by {growth} bytes over 5k misses"


def test_guard_failures_and_exceptions_do_not_leak():
    a, b = Arg(), Arg()
    repl_target = flat_code(target)
    repl_raising = flat_code(raising)
    guard = _guard_for(a)

    def cb(func, args):
        if func is target:
            return (guard, repl_target)
        if func is raising:
            return (None, repl_raising)
        _C.mark_skip(func.__code__)
        return None

    _C.set_entry_limit(1)
    _C.set_callback(cb)
    try:
        target(a)
        try:
            raising(a)
        except ValueError:
            pass
        objs = (a, b, target, target.__code__, raising.__code__, repl_target, repl_raising, guard)
        before = _refcounts(*objs)
        for _ in range(10_000):
            target(b)  # guard fails, limit reached: original code
            try:
                raising(a)
            except ValueError:
                pass
        after = _refcounts(*objs)
    finally:
        _C.set_callback(None)
    assert after == before


def test_guard_tree_construction_and_checks_do_not_leak():
    a = Arg()

    def build_and_check():
        t = _guard_for(a)
        t.arg(1).attr("missing").check_eq(1, 4)
        t.check(target, (a, 0, 2, (), {}))
        t.check(target, (a, None, 2, (), {}))

    before = _refcounts(a, Arg)
    growth = _traced_growth(build_and_check, 200, 5_000)
    assert _refcounts(a, Arg) == before
    assert growth < 16 * 1024
