"""A pool of compile worker processes (``runtime/compile_worker.py``) for Triton kernels.

Why processes: Triton's compiler holds the GIL for most of a compile (the AST walk to TTIR and,
measured on the GPU machine, much of the MLIR pipeline), so a thread pool compiled a GPT-2
training step's ~100 kernels only about twice as fast as one thread. Separate interpreters
compile truly in parallel. Each worker is a plain ``python -m pyjit.runtime.compile_worker``
subprocess (not ``multiprocessing``: spawning through it would re-import the user's
``__main__``), fed length-prefixed pickles over its stdin/stdout by one thread of this process.

Workers are started in the background by :func:`prestart` (called when the first CUDA graph
starts compiling, or when the frontend initialises in a program that already uses CUDA, so
that they import Triton while the graph is traced and lowered)
and live until the process exits. A worker that dies or answers garbage is dropped and its
task reported failed; the caller then lets the kernel compile in this process, as it would have
without the pool.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import queue
import subprocess
import sys
import threading
from typing import Any

from ..logs import get_logger
from .compile_worker import read_message, write_message

time_log = get_logger("compile_times")


class _Worker:
    def __init__(self) -> None:
        import pyjit

        env = dict(os.environ)
        # The worker must import this pyjit even when it is not installed (a checkout on sys.path).
        root = os.path.dirname(os.path.dirname(os.path.abspath(pyjit.__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "pyjit.runtime.compile_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        hello = read_message(self.proc.stdout)
        if not (isinstance(hello, tuple) and hello and hello[0] == "ready"):
            raise RuntimeError(f"compile worker sent {hello!r} instead of ready")

    def run(self, task: dict[str, Any]) -> tuple[bool, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        write_message(self.proc.stdin, task)
        reply = read_message(self.proc.stdout)
        if not (isinstance(reply, tuple) and len(reply) == 2):
            raise RuntimeError(f"compile worker replied {reply!r}")
        return reply

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            write_message(self.proc.stdin, None)
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except Exception:  # noqa: BLE001 - exiting: make sure it is gone
            self.proc.kill()


class CompilePool:
    """``submit(task)`` -> a Future of ``(ok, seconds_or_error)``; ``size`` workers."""

    def __init__(self, size: int, prewarm: dict[str, Any] | None = None):
        self.size = size
        self.prewarm = prewarm  # a prewarm request each worker runs first
        self.tasks: queue.Queue[tuple[dict[str, Any], concurrent.futures.Future] | None] = queue.Queue()
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()
        self.alive = size  # serving threads whose worker started
        self.ready = 0  # workers that finished starting (and warming up): taking tasks now
        self.threads = [threading.Thread(target=self._serve, name=f"pyjit-compile-{i}", daemon=True)
                        for i in range(size)]
        for t in self.threads:
            t.start()

    def _serve(self) -> None:
        try:
            worker = _Worker()
        except Exception as e:  # noqa: BLE001 - no worker: its share of tasks goes to the others
            self._lost(f"could not start a compile worker ({type(e).__name__}: {e})")
            return
        with self.lock:
            self.workers.append(worker)
        if self.prewarm is not None:
            try:
                worker.run(self.prewarm)
            except Exception as e:  # noqa: BLE001 - a dead worker
                worker.proc.kill()
                self._lost(f"a compile worker died while warming up ({type(e).__name__}: {e})")
                return
        with self.lock:
            self.ready += 1
        while True:
            item = self.tasks.get()
            if item is None:
                worker.stop()
                return
            task, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(worker.run(task))
            except Exception as e:  # noqa: BLE001 - a dead worker: report, drop it
                future.set_result((False, f"compile worker failed ({type(e).__name__}: {e})"))
                worker.proc.kill()
                self._lost("a compile worker died")
                return

    def _lost(self, why: str) -> None:
        time_log.info("compile pool: %s", why)
        with self.lock:
            self.alive -= 1
            alive = self.alive
        if alive <= 0:  # nobody serves the queue any more: fail what waits in it
            while True:
                try:
                    item = self.tasks.get_nowait()
                except queue.Empty:
                    return
                if item is not None:
                    item[1].set_result((False, "no compile worker is running"))

    def submit(self, task: dict[str, Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.alive <= 0:
            future.set_result((False, "no compile worker is running"))
            return future
        self.tasks.put((task, future))
        return future

    def close(self) -> None:
        for _ in self.threads:
            self.tasks.put(None)
        for t in self.threads:
            t.join(timeout=3)


_pool: CompilePool | None = None
_pool_lock = threading.Lock()


def _forget_after_fork() -> None:
    """A forked child (a DataLoader worker...) inherits the pool object but not its serving
    threads: tasks would wait forever. It starts its own pool if it ever needs one."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def get(size: int, prewarm: dict[str, Any] | None = None) -> CompilePool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CompilePool(size, prewarm)
            atexit.register(_pool.close)
        return _pool


def prestart(size: int, target: Any = None) -> None:
    """Start the workers now: they import Triton in the background and, given the
    device's Triton ``target``, compile a tiny kernel for it (one-time set-up of the compiler)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    get(size, {"prewarm": target, "env": env} if target is not None else None)
