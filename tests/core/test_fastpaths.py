"""Fast paths of the C core that must never change an answer (torch-free):

- global/builtin guard lookups cached per node by the dict's version tag: every store, delete
  or replacement of the dict must be seen;
- the hook's fast path (skip mark read before the frame filter, thread-state cache switched
  per thread).
"""
from __future__ import annotations

import threading
import types

from pyjit import _C

from .core_helpers import flat_code, running_code_name

G_VALUE = 1


def f(x=None):
    return x


def global_tree(name: str, value: object, check_id: int = 0) -> _C.GuardTree:
    tree = _C.GuardTree()
    tree.global_(name).check_eq(value, check_id)
    return tree


def test_global_guard_sees_every_store_and_delete():
    g = f.__globals__
    tree = global_tree("G_VALUE", 1)
    try:
        for _ in range(3):  # repeated hits come from the per-node cache
            assert tree.check(f, (None,)) == -1
        g["G_VALUE"] = 2
        assert tree.check(f, (None,)) == 0
        g["G_VALUE"] = 1
        assert tree.check(f, (None,)) == -1
        del g["G_VALUE"]
        assert tree.check(f, (None,)) == 0
        g["G_VALUE"] = 1.0  # equal but another type
        assert tree.check(f, (None,)) == 0
        # A store of an unrelated name changes the dict too: the guard still passes after it.
        g["G_VALUE"] = 1
        g["_unrelated_name"] = object()
        assert tree.check(f, (None,)) == -1
    finally:
        g["G_VALUE"] = 1
        g.pop("_unrelated_name", None)


def test_global_guard_with_another_functions_globals():
    tree = global_tree("K", "a")
    ga = {"K": "a", "__builtins__": __builtins__}
    gb = {"K": "b", "__builtins__": __builtins__}
    fa = types.FunctionType(f.__code__, ga, "fa", (None,))
    fb = types.FunctionType(f.__code__, gb, "fb", (None,))
    for _ in range(2):  # alternate: the cache must follow the dict, not the node
        assert tree.check(fa, (None,)) == -1
        assert tree.check(fb, (None,)) == 0
    ga["K"] = "b"
    assert tree.check(fa, (None,)) == 0
    assert tree.check(fb, (None,)) == 0
    gb["K"] = "a"
    assert tree.check(fb, (None,)) == -1


def test_global_guard_on_a_fresh_dict_with_the_same_contents():
    tree = global_tree("K", 5)
    for i in range(20):  # freed and re-allocated dicts (often at the same address)
        g = {"K": 5 if i % 2 == 0 else 6}
        fn = types.FunctionType(f.__code__, g, "fn", (None,))
        assert tree.check(fn, (None,)) == (-1 if i % 2 == 0 else 0)
        del fn, g


def test_global_missing_then_added():
    tree = global_tree("LATE", 3)
    g: dict = {}
    fn = types.FunctionType(f.__code__, g, "fn", (None,))
    assert tree.check(fn, (None,)) == 0
    g["LATE"] = 3
    assert tree.check(fn, (None,)) == -1


def test_builtin_guard_follows_the_builtins_dict():
    tree = _C.GuardTree()
    tree.builtin("len").check_id(len, 4)
    assert tree.check(f, (None,)) == -1
    custom = {"len": len}
    fn = types.FunctionType(f.__code__, {"__builtins__": custom}, "fn", (None,))
    assert tree.check(fn, (None,)) == -1
    custom["len"] = abs
    assert tree.check(fn, (None,)) == 4
    del custom["len"]
    assert tree.check(fn, (None,)) == 4
    assert tree.check(f, (None,)) == -1


def test_guarded_global_through_the_hook_recompiles_after_a_store():
    g = f.__globals__

    def h(x):
        return running_code_name(), x

    calls = []

    def cb(func, args):
        if func is not h:
            _C.mark_skip(func.__code__)
            return None
        calls.append(g["G_VALUE"])
        return global_tree("G_VALUE", g["G_VALUE"]), flat_code(h)

    _C.set_callback(cb)
    try:
        assert h(1) == ("h__repl", 1)
        assert h(2) == ("h__repl", 2)
        g["G_VALUE"] = 7
        assert h(3) == ("h__repl", 3)
        g["G_VALUE"] = 1
        assert h(4) == ("h__repl", 4)  # the first entry matches again: no new call
    finally:
        _C.set_callback(None)
        g["G_VALUE"] = 1
    assert calls == [1, 7]


def test_skip_marked_code_runs_plainly_on_every_thread():
    def leaf(x):
        return running_code_name(), x + 1

    def outer(x):
        return leaf(x)

    seen = []

    def cb(func, args):
        seen.append(func.__name__)
        _C.mark_skip(func.__code__)
        return None

    results: dict[str, list] = {"on": [], "off": []}
    barrier = threading.Barrier(2)

    def enabled() -> None:
        _C.set_callback(cb)
        try:
            for i in range(50):
                results["on"].append(outer(i))
                if i == 10:
                    barrier.wait()  # interleave with the other thread (thread-state cache)
        finally:
            _C.set_callback(None)

    def disabled() -> None:
        barrier.wait()
        for i in range(50):
            results["off"].append(outer(i))

    threads = [threading.Thread(target=enabled), threading.Thread(target=disabled)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [("leaf", i + 1) for i in range(50)]
    assert results["on"] == expected and results["off"] == expected
    assert seen.count("outer") == 1 and seen.count("leaf") == 1


def test_skip_marked_replacement_code_still_runs_and_is_not_intercepted():
    def k(x):
        return running_code_name(), x

    repl = flat_code(k)
    _C.mark_skip(repl)  # the replacement's own frame takes the skip fast path

    def cb(func, args):
        if func is k:
            return None if len(calls) else (calls.append(1), (None, repl))[1]
        _C.mark_skip(func.__code__)
        return None

    calls: list = []
    _C.set_callback(cb)
    try:
        assert [k(i) for i in range(3)] == [("k__repl", i) for i in range(3)]
        assert f(5) == 5  # an unrelated frame right after is handled normally
    finally:
        _C.set_callback(None)
    assert calls == [1]
