"""The PEP 523 hook: callback protocol, replacement code for every argument form, frames it
must leave alone, exceptions, recursion, threads and re-entrancy."""
from __future__ import annotations

import asyncio
import sys
import threading
import traceback

import pytest

from pyjit import _C

from .core_helpers import Compiler, flat_code, running_code_name


def _run(compiler, fn, *args, **kwargs):
    _C.set_callback(compiler)
    try:
        return fn(*args, **kwargs)
    finally:
        _C.set_callback(None)


def test_hook_installed_only_while_a_thread_is_enabled():
    assert not _C._hook_installed()
    prev = _C.set_callback(lambda f, a: None)
    assert prev is None
    assert _C._hook_installed()
    cb = _C.set_callback(None)
    assert callable(cb)
    assert not _C._hook_installed()


def test_callback_once_per_code_then_cache_hit():
    def f(a, b):
        return (running_code_name(), a * b)

    comp = Compiler(f)
    _C.set_callback(comp)
    try:
        results = [f(i, 3) for i in range(5)]
    finally:
        _C.set_callback(None)
    assert results == [("f__repl", i * 3) for i in range(5)]
    assert [c[0] for c in comp.calls] == ["f"]
    assert comp.calls[0][1] == (0, 3)
    entries = _C.cache_entries(f.__code__)
    assert len(entries) == 1 and entries[0][0] is None
    assert entries[0][1].co_name == "f__repl"
    # With the hook off the original runs again.
    assert f(2, 2) == ("f", 4)


def test_callback_returning_none_runs_original_each_time():
    seen = []

    def f(x):
        return running_code_name(), x

    def cb(func, args):
        if func is f:
            seen.append(args)
        return None

    _C.set_callback(cb)
    try:
        out = [f(1), f(2)]
    finally:
        _C.set_callback(None)
    assert out == [("f", 1), ("f", 2)]
    assert seen == [(1,), (2,)]


def _expected_and_replaced(fn, *args, **kwargs):
    expected = fn(*args, **kwargs)
    got = _run(Compiler(fn), fn, *args, **kwargs)
    return expected, got


@pytest.mark.parametrize(
    "args,kwargs",
    [((1,), {}), ((1, 2), {}), ((1,), {"b": 5}), ((1, 2, 3, 4), {"k": 9, "z": 10}), ((), {"a": 7, "q": 1})],
)
def test_all_argument_forms(args, kwargs):
    def f(a, b=2, *rest, k=3, **kw):
        return (running_code_name(), a, b, rest, k, sorted(kw.items()))

    expected, got = _expected_and_replaced(f, *args, **kwargs)
    assert got[0] == "f__repl"
    assert got[1:] == expected[1:]


def test_positional_only_and_keyword_only():
    def f(a, /, b, *, c, d=4):
        return (running_code_name(), a, b, c, d)

    expected, got = _expected_and_replaced(f, 1, b=2, c=3)
    assert got == ("f__repl",) + expected[1:]


def test_args_slots_passed_to_callback_in_frame_order():
    def f(a, b=2, *rest, k=3, **kw):
        return a

    comp = Compiler(f)
    _run(comp, f, 1, 5, 6, z=1)
    assert comp.calls == [("f", (1, 5, 3, (6,), {"z": 1}))]


def test_closure_and_cells():
    scale = 10

    def f(x):
        y = x + 1

        def inner():
            return x * y  # x is an argument that is also a cell; y a non-arg cell

        return (running_code_name(), inner() * scale)

    expected, got = _expected_and_replaced(f, 3)
    assert got == ("f__repl", expected[1])
    assert expected[1] == 3 * 4 * 10


def test_closure_sees_later_rebinding():
    counter = 0

    def bump(n):
        nonlocal counter
        counter += n
        return running_code_name()

    comp = Compiler(bump)
    _C.set_callback(comp)
    try:
        names = [bump(1), bump(2)]
    finally:
        _C.set_callback(None)
    assert names == ["bump__repl", "bump__repl"]
    assert counter == 3


def test_self_and_zero_arg_super():
    class Base:
        def method(self, x):
            return ("base", x)

    class Child(Base):
        def method(self, x):
            return (running_code_name(), super().method(x + 1))

    obj = Child()
    expected, got = _expected_and_replaced(Child.method, obj, 1)
    assert got == ("method__repl", expected[1])
    # Bound call through the instance too.
    comp = Compiler(Child.method)
    assert _run(comp, obj.method, 5) == ("method__repl", ("base", 6))


def test_exception_propagates_with_traceback_through_user_file():
    def f(x):
        if x > 0:
            raise ValueError(f"bad {x}")
        return x

    _C.set_callback(Compiler(f))
    try:
        with pytest.raises(ValueError, match="bad 3") as info:
            f(3)
    finally:
        _C.set_callback(None)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].filename == __file__
    assert frames[-1].name == "f__repl"
    assert "raise ValueError" in frames[-1].line


def test_callback_exception_propagates_to_caller():
    def f(x):
        return x

    def cb(func, args):
        if func is f:
            raise KeyError("from callback")
        return None

    _C.set_callback(cb)
    try:
        with pytest.raises(KeyError, match="from callback"):
            f(1)
    finally:
        _C.set_callback(None)
    assert _C.cache_entries(f.__code__) == []


def test_invalid_replacement_is_rejected_with_a_clear_error():
    def f(a, b):
        return a + b

    def g(a):
        return a

    def cb(func, args):
        return (None, g.__code__) if func is f else None

    _C.set_callback(cb)
    try:
        with pytest.raises(TypeError, match="argument slots"):
            f(1, 2)
    finally:
        _C.set_callback(None)
    _C.set_callback(lambda func, args: (None, "not code") if func is f else None)
    try:
        with pytest.raises(TypeError, match="non-code"):
            f(1, 2)
    finally:
        _C.set_callback(None)


def test_freevars_must_match():
    a = 1

    def f(x):
        return x + a

    def g(x):
        return x

    _C.set_callback(lambda func, args: (None, g.__code__) if func is f else None)
    try:
        with pytest.raises(TypeError, match="free variables"):
            f(1)
    finally:
        _C.set_callback(None)


def test_generators_coroutines_never_replaced():
    calls = []

    def gen(n):
        yield from range(n)

    async def coro(x):
        await asyncio.sleep(0)
        return x * 2

    async def agen(n):
        for i in range(n):
            yield i

    async def collect(n):
        return [i async for i in agen(n)]

    def cb(func, args):
        calls.append(func.__name__)
        return None

    _C.set_callback(cb)
    try:
        assert list(gen(3)) == [0, 1, 2]
        assert asyncio.run(coro(4)) == 8
        assert asyncio.run(collect(3)) == [0, 1, 2]
    finally:
        _C.set_callback(None)
    assert "gen" not in calls and "coro" not in calls and "agen" not in calls
    assert "collect" not in calls


def test_generator_throw_and_close_run_handlers():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        finally:
            log.append("finally")

    _C.set_callback(lambda f, a: None)
    try:
        g = gen()
        next(g)
        g.close()
        g2 = gen()
        next(g2)
        with pytest.raises(RuntimeError):
            g2.throw(RuntimeError("x"))
    finally:
        _C.set_callback(None)
    assert log == ["finally", "finally"]


def test_class_bodies_and_module_code_never_replaced():
    names = []

    def cb(func, args):
        names.append(func.__code__.co_name)
        return None

    _C.set_callback(cb)
    try:
        class K:
            x = 1

            def m(self):
                return self.x

        ns: dict = {}
        exec("y = 2\ndef h(v):\n    return v + y\nz = h(3)\n", ns)
        val = eval("1 + 2")
    finally:
        _C.set_callback(None)
    assert K().m() == 1
    assert ns["z"] == 5 and val == 3
    assert "K" not in names and "<module>" not in names
    assert "h" in names  # an ordinary function defined by exec'd code is still seen


def test_recursion_depth_500():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    expected = fact(500)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 2000))
    try:
        comp = Compiler(fact)
        assert _run(comp, fact, 500) == expected
        assert len(comp.calls) == 1
        # run-only (every level is a hit) and pass-through (every level misses) both work
        _C.set_run_only_mode(True)
        try:
            assert fact(500) == expected
        finally:
            _C.set_run_only_mode(False)
        assert _run(lambda f, a: None, fact, 500) == expected
    finally:
        sys.setrecursionlimit(old)


def test_two_threads_one_enabled():
    def work(x):
        return (running_code_name(), x + 1)

    results: dict[str, list] = {"on": [], "off": []}
    barrier = threading.Barrier(2)
    comp = Compiler(work)

    def enabled():
        _C.set_callback(comp)
        try:
            barrier.wait()
            for i in range(200):
                results["on"].append(work(i))
        finally:
            _C.set_callback(None)

    def disabled():
        barrier.wait()
        for i in range(200):
            results["off"].append(work(i))

    threads = [threading.Thread(target=enabled), threading.Thread(target=disabled)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["on"] == [("work__repl", i + 1) for i in range(200)]
    assert results["off"] == [("work", i + 1) for i in range(200)]
    assert _C.get_callback() is None  # thread-local: this thread never enabled


def test_callback_not_reentered_by_its_own_frames():
    depth = 0
    max_depth = 0
    seen = []

    def helper(v):
        return v

    def cb(func, args):
        nonlocal depth, max_depth
        depth += 1
        max_depth = max(max_depth, depth)
        seen.append(func.__name__)
        helper(1)  # a Python frame run by the callback: must not call back
        [helper(i) for i in range(3)]
        depth -= 1
        return None

    def f(x):
        return helper(x)

    _C.set_callback(cb)
    try:
        assert f(5) == 5
    finally:
        _C.set_callback(None)
    assert max_depth == 1
    assert seen.count("f") == 1 and seen.count("helper") == 1


def test_callback_may_reset_and_mark_during_its_run():
    def f(x):
        return running_code_name(), x

    def cb(func, args):
        if func is f:
            _C.reset()
            _C.mark_skip(cb.__code__)
            return (None, flat_code(f))
        return None

    _C.set_callback(cb)
    try:
        assert f(1) == ("f__repl", 1)
        assert f(2) == ("f__repl", 2)
    finally:
        _C.set_callback(None)


def test_tracing_frames_are_left_alone():
    events = []

    def tracer(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return None

    def f(x):
        return x + 1

    calls = []

    def cb(func, args):
        calls.append(func.__name__)
        return None

    _C.set_callback(cb)
    sys.settrace(tracer)
    try:
        f(1)
    finally:
        sys.settrace(None)
        _C.set_callback(None)
    assert ("f", "call") in events
    assert "tracer" not in calls


def test_one_entry_serves_every_closure_instance_of_a_code_object():
    def make_adder(n):
        def add(x):
            return running_code_name(), x + n

        return add

    add1, add2 = make_adder(1), make_adder(2)
    comp = Compiler(add1)
    _C.set_callback(comp)
    try:
        out = [add1(10), add2(10), add1(5)]
    finally:
        _C.set_callback(None)
    assert out == [("add__repl", 11), ("add__repl", 12), ("add__repl", 6)]
    assert len(comp.calls) == 1


def test_replacement_sees_the_original_functions_globals_and_builtins():
    import types

    src = "def f(x):\n    return (len(x), CONST)\n"
    g: dict = {"CONST": 7, "__builtins__": {"len": lambda v: -1}}
    exec(src, g)
    f = g["f"]
    # A function whose globals lack __builtins__ takes the builtins current at its creation:
    # here the custom ones of an exec, which differ from the builtins at the call site.
    ns = {"__builtins__": {"len": lambda v: -2}, "FT": types.FunctionType, "code": f.__code__}
    exec("alt = FT(code, {'CONST': 8}, 'f')", ns)
    alt = ns["alt"]
    expected_f, expected_alt = f([1, 2]), alt([1, 2])
    comp = Compiler(f)
    _C.set_callback(comp)
    try:
        got_f, got_alt = f([1, 2]), alt([1, 2])
    finally:
        _C.set_callback(None)
    assert (got_f, got_alt) == (expected_f, expected_alt)
    assert got_f == (-1, 7) and got_alt == (-2, 8)
    assert len(comp.calls) == 1


def test_keyboard_interrupt_style_base_exceptions_propagate():
    class Stop(BaseException):
        pass

    def f(x):
        raise Stop()

    _C.set_callback(Compiler(f))
    try:
        with pytest.raises(Stop):
            f(1)
        with pytest.raises(Stop):
            f(2)
    finally:
        _C.set_callback(None)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_sys_monitoring_callbacks_are_left_alone():
    mon = sys.monitoring
    tool = mon.PROFILER_ID
    starts = []

    def on_start(code, offset):
        starts.append(code.co_name)

    def f(x):
        return x * 2

    names = []

    def cb(func, args):
        names.append(func.__name__)
        return None

    mon.use_tool_id(tool, "pyjit-test")
    try:
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, mon.events.PY_START)
        _C.set_callback(cb)
        try:
            assert f(2) == 4
        finally:
            _C.set_callback(None)
            mon.set_events(tool, 0)
            mon.register_callback(tool, mon.events.PY_START, None)
    finally:
        mon.free_tool_id(tool)
    assert "f" in starts and "f" in names
    assert "on_start" not in names


def test_interpreter_exit_with_callback_still_set():
    import subprocess
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(_C.__file__)))
    script = (
        "import atexit, threading\n"
        "from pyjit import _C\n"
        "def cb(func, args):\n"
        "    return None\n"
        "def work():\n"
        "    _C.set_callback(cb)\n"
        "    sum(i for i in range(10))\n"  # thread ends while enabled
        "t = threading.Thread(target=work); t.start(); t.join()\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "_C.set_callback(cb)\n"
        "print('done')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["done", "atexit", "ran"]


def test_recursion_with_large_frames_crosses_data_stack_chunks():
    # 300 locals per frame x depth 200: the thread's data stack grows by many chunks, so some
    # intercepted frames start a chunk and releasing them must free it (3.12 path).
    body = "\n".join(f"    v{i} = n + {i}" for i in range(300))
    src = f"def big(n):\n{body}\n    if n <= 0:\n        return v299\n    return big(n - 1) + v0 - n\n"
    ns: dict = {}
    exec(src, ns)
    big = ns["big"]
    expected = big(200)
    comp = Compiler(big)
    for _ in range(3):
        assert _run(comp, big, 200) == expected
    assert len(comp.calls) == 1
    before = (sys.getrefcount(big), sys.getrefcount(big.__code__))
    assert _run(comp, big, 200) == expected
    assert (sys.getrefcount(big), sys.getrefcount(big.__code__)) == before


def test_suspended_thread_runs_no_entry_and_no_callback():
    def f(a):
        return (running_code_name(), a + 1)

    comp = Compiler(f)
    _C.set_callback(comp)
    try:
        assert f(1) == ("f__repl", 2)  # compiled and cached
        assert _C.set_suspended(True) is False
        assert _C.get_suspended() and not _C._hook_installed()
        assert f(2) == ("f", 3), "a cached entry ran while suspended"
        assert _C.set_suspended(False) is True
        assert f(3) == ("f__repl", 4)  # the entry is still there
    finally:
        _C.set_suspended(False)
        _C.set_callback(None)
    assert [c[0] for c in comp.calls] == ["f"]
    # a callback set while suspended (a jitted call's scoped callback) leaves the hook off
    _C.set_suspended(True)
    try:
        _C.set_callback(comp)
        assert f(4) == ("f", 5) and not _C._hook_installed()
    finally:
        _C.set_callback(None)
        _C.set_suspended(False)


def test_suspended_is_per_thread():
    def f(a):
        return (running_code_name(), a)

    comp = Compiler(f)
    seen = []

    def other():
        _C.set_callback(comp)
        try:
            seen.append(f(1))
        finally:
            _C.set_callback(None)

    _C.set_suspended(True)
    try:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    finally:
        _C.set_suspended(False)
    assert seen == [("f__repl", 1)]
