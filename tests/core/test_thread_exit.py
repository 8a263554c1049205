"""Threads that end while pyjit is enabled leak nothing.

Each thread's state is owned by an object in its thread-state dict, freed when the thread ends:
the callback reference is released and the thread's share of the installed hook is given back.
Torch-free (runs under 3.11/3.12/3.13 with the C core only).
"""
from __future__ import annotations

import gc
import sys
import threading
import tracemalloc

from pyjit import _C


def _callback(func, args):
    return None


def _run_threads(n: int, target) -> None:
    for _ in range(n):
        t = threading.Thread(target=target)
        t.start()
        t.join()


def _enable_and_exit(cb) -> None:
    _C.set_callback(cb)  # the thread ends with its callback set


def _run_only_and_exit() -> None:
    _C.set_run_only_mode(True)


def test_thread_exiting_enabled_releases_callback_and_hook():
    cb = _callback
    assert _C.get_callback() is None and not _C._hook_installed()
    gc.collect()
    before = sys.getrefcount(cb)
    _run_threads(200, lambda: _enable_and_exit(cb))
    gc.collect()
    assert sys.getrefcount(cb) == before, "a callback reference survived its thread"
    assert not _C._hook_installed(), "an ended thread still holds the hook installed"


def test_thread_exiting_in_run_only_mode_gives_the_hook_back():
    _run_threads(50, _run_only_and_exit)
    assert not _C._hook_installed()
    assert _C.get_run_only_mode() is False  # this thread's own mode is untouched


def test_thread_exit_while_another_thread_stays_enabled():
    """The main thread stays enabled: the hook stays; its callback is still the one set."""
    cb = _callback
    previous = _C.set_callback(cb)
    try:
        _run_threads(50, lambda: _enable_and_exit(lambda f, a: None))
        assert _C._hook_installed()
        assert _C.get_callback() is cb
    finally:
        _C.set_callback(previous)
    assert not _C._hook_installed()


def test_thread_exits_leave_memory_flat():
    class Callback:
        def __call__(self, func, args):
            return None

    def body():
        _C.set_callback(Callback())
        _C.set_run_only_mode(True)

    _run_threads(20, body)  # warm up (thread machinery, interned strings)
    gc.collect()
    tracemalloc.start()
    try:
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        _run_threads(300, body)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    # One leaked Callback per thread would be >= 300 * 48 bytes; allow noise well below that.
    assert growth < 8000, f"memory grew by {growth} bytes over 300 threads"
    assert not _C._hook_installed()


def test_scoped_call_in_a_thread_releases_everything():
    """A ScopedCall (pyjit.jit's base) used on a short-lived thread leaves no state behind."""
    seen = []

    class Scoped(_C.ScopedCall):
        pass

    s = Scoped()
    s.scoped_fn = lambda x: seen.append(_C.get_callback() is _callback) or x
    s.scoped_callback = _callback
    gc.collect()
    before = sys.getrefcount(_callback)
    _run_threads(50, lambda: s(1))
    gc.collect()
    assert seen == [True] * 50
    assert sys.getrefcount(_callback) == before
    assert not _C._hook_installed()
