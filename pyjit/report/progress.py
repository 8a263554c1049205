"""The progress line of a long compile on a terminal.

When compiling a frame takes longer than ``config.progress_after_s`` (2 s) and stderr is a
terminal, one line on stderr says what is compiled and how far, redrawn in place
(``pyjit: forward (model.py:41): 37/120 kernels, 3.1 s``) and erased when the compile ends.
Off when stderr is not a terminal, under ``PYJIT_PROGRESS=0`` and while pytest runs a test.

:func:`compiling` wraps one frame's compile (nested compiles keep the outer line); stages
report with :func:`stage` (``"lowering"``) and :func:`count` (``37/120 kernels``). A daemon
thread draws the line, so a long single step (a C++ build) still shows its elapsed time.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, Iterator

from ..config import config, under_test

_ERASE = "\r\x1b[K"


class _Line:
    """The one compile being shown: its label and stage, drawn by a thread after the delay."""

    def __init__(self, label: str, stream: Any) -> None:
        self.label = label
        self.stage = "tracing"
        self.stream = stream
        self.start = time.monotonic()
        self.done = threading.Event()
        self.drawn = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="pyjit-progress", daemon=True)

    def text(self) -> str:
        return f"pyjit: {self.label}: {self.stage}, {time.monotonic() - self.start:.1f} s"

    def _run(self) -> None:
        if self.done.wait(max(0.0, config.progress_after_s)):
            return
        while True:
            with self.lock:
                if self.done.is_set():
                    return
                try:
                    self.stream.write(_ERASE + self.text())
                    self.stream.flush()
                    self.drawn = True
                except (OSError, ValueError):
                    return
            if self.done.wait(0.2):
                return

    def finish(self) -> None:
        with self.lock:
            self.done.set()
            if self.drawn:
                try:
                    self.stream.write(_ERASE)
                    self.stream.flush()
                except (OSError, ValueError):
                    pass


_current: list[_Line] = []


def _wanted(stream: Any) -> bool:
    if not config.progress or under_test():
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def compiling(label: str) -> Iterator[None]:
    """Show ``label``'s progress if this compile runs long (outermost compile only)."""
    if _current or not _wanted(sys.stderr):
        yield
        return
    line = _Line(label, sys.stderr)
    _current.append(line)
    line.thread.start()
    try:
        yield
    finally:
        _current.remove(line)
        line.finish()


def stage(text: str) -> None:
    """The step the current compile is in (``lowering``, ``C++ build``); no-op without a line."""
    if _current:
        _current[0].stage = text


def count(done: int, total: int, what: str = "kernels") -> None:
    """How many of ``total`` items of the current step are done."""
    if _current:
        _current[0].stage = f"{done}/{total} {what}"
