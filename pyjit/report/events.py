"""The structured compile trace: one JSONL file per process, written while pyjit compiles.

Enabled by ``PYJIT_TRACE=<dir>`` or ``pyjit.config.trace_dir``; off, every entry point returns
after one attribute check (:func:`enabled`), so compile paths pay nothing and cache hits never
reach this module. Each line is one event (``schema.json`` beside this module describes them):

- ``process``: the header (pid, rank, argv, versions), written when the file is opened;
- ``frame``: a frame pyjit compiled, skipped, ran eagerly or failed on, with its user stack;
- ``graph``: a captured FX graph (code, node count) and the guards of its frame in source form;
- ``graph_break``: kind, explanation, file:line, inline chain, hint;
- ``recompile``: a frame compiled again, with the first failing guard of each earlier entry;
- ``cache``: a graph-cache hit or miss (a miss names the key fields that differ);
- ``warm_start``: an entry installed from an earlier process's frame record;
- ``kernels``: a generated module's kernels (names, the module's source path, launch lines);
- ``span``: a compile phase (trace, backend, aten, lowering, codegen, kernel_compile, load).

Events made while a frame compiles carry its id (``frame``), so the report links graphs,
breaks, spans and kernels to the frame and its user stack. Under ``torch.distributed`` the
file name holds the rank (``pyjit_trace.rank<r>.<pid>.jsonl``); ``python -m pyjit report``
renders a directory of such files (:mod:`pyjit.report.html`).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import time
import types
from typing import Any, Iterator

from ..config import config

SCHEMA_VERSION = 1

_lock = threading.Lock()
_file: Any = None
_file_dir: str | None = None
_file_pid: int = 0
_rank: int = 0
_ids = itertools.count(1)
_local = threading.local()


def enabled() -> bool:
    """Whether a trace is being written (the one check every caller makes first)."""
    return config.trace_dir is not None


def _detect_rank() -> int:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - no process group: the launcher's rank or 0
        pass
    return config.trace_rank


def _open() -> Any:
    """The open trace file for ``config.trace_dir`` (reopened when the setting changes)."""
    global _file, _file_dir, _rank, _file_pid
    directory = config.trace_dir
    if _file is not None and _file_dir == directory and _file_pid == os.getpid():
        return _file
    if _file is not None and _file_pid != os.getpid():
        _file = None  # a forked child (a DataLoader worker): its own file, the parent's stays open there
    if _file is not None:
        _file.close()
        _file = None
    assert directory is not None
    os.makedirs(directory, exist_ok=True)
    _rank = _detect_rank()
    path = os.path.join(directory, f"pyjit_trace.rank{_rank}.{os.getpid()}.jsonl")
    _file = open(path, "a", encoding="utf-8", buffering=1)  # line-buffered: a crash keeps what was written
    _file_dir = directory
    _file_pid = os.getpid()
    versions = {"python": sys.version.split()[0]}
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:
        versions["torch"] = str(getattr(torch_mod, "__version__", "?"))
    _write(_file, {"event": "process", "argv": list(sys.argv), "versions": versions, "cwd": os.getcwd()})
    return _file


def _write(f: Any, record: dict[str, Any]) -> None:
    record = {"v": SCHEMA_VERSION, "t": time.time(), "pid": os.getpid(), "rank": _rank, **record}
    f.write(json.dumps(record, default=str) + "\n")


def emit(event: str, **fields: Any) -> None:
    """Write one event (tagged with the frame being compiled, if any); no-op when off."""
    if config.trace_dir is None:
        return
    frame = current_frame()
    if frame is not None and "frame" not in fields:
        fields["frame"] = frame
    try:
        with _lock:
            _write(_open(), {"event": event, **fields})
    except OSError as e:  # the trace must never break the program
        config.trace_dir = None
        from ..logs import get_logger

        get_logger("fallbacks").warning("pyjit: could not write the compile trace (%s: %s); tracing is off", type(e).__name__, e)


def close() -> None:
    """Close the trace file (tests, and before reading it in the same process)."""
    global _file, _file_dir
    with _lock:
        if _file is not None:
            _file.close()
        _file = None
        _file_dir = None


# -- frames ---------------------------------------------------------------------------------------

def current_frame() -> str | None:
    stack = getattr(_local, "frames", None)
    return stack[-1] if stack else None


def user_stack(code: types.CodeType | None = None) -> list[dict[str, Any]]:
    """The program's frames on this thread's stack, outermost first (pyjit, torch and library
    frames left out), ending with ``code`` (the frame being compiled, not yet running)."""
    from ..frame.policy import is_library_code

    out: list[dict[str, Any]] = []
    f = sys._getframe(1)
    while f is not None:
        c = f.f_code
        if not is_library_code(c) and not c.co_name.startswith("__pyjit_"):
            out.append({"file": c.co_filename, "line": f.f_lineno or c.co_firstlineno, "function": c.co_name})
        f = f.f_back
    out.reverse()
    if code is not None:
        top = {"file": code.co_filename, "line": code.co_firstlineno, "function": code.co_name}
        if not out or out[-1]["function"] != code.co_name or out[-1]["file"] != code.co_filename:
            out.append(top)
    return out


@contextlib.contextmanager
def frame_scope(code: types.CodeType) -> Iterator["FrameRecord"]:
    """Compile one frame: gives its record (fill ``status``/``reason``); writes the ``frame``
    event at the end. Inner events carry the frame's id."""
    if config.trace_dir is None:
        yield FrameRecord("", code)
        return
    record = FrameRecord(f"f{next(_ids)}", code)
    record.stack = user_stack(code)
    stack = getattr(_local, "frames", None)
    if stack is None:
        stack = _local.frames = []
    stack.append(record.id)
    start = time.time()
    try:
        yield record
    except BaseException as e:
        if record.status == "compiled":
            record.status = "failed"
            record.reason = f"{type(e).__name__}: {e}"
        raise
    finally:
        stack.pop()
        emit("frame", id=record.id, status=record.status, reason=record.reason, name=code.co_name,
             qualname=getattr(code, "co_qualname", code.co_name), file=code.co_filename, line=code.co_firstlineno,
             stack=record.stack, start=start, dur=time.time() - start, frame=stack[-1] if stack else None)


class FrameRecord:
    __slots__ = ("id", "code", "status", "reason", "stack")

    def __init__(self, frame_id: str, code: types.CodeType) -> None:
        self.id = frame_id
        self.code = code
        self.status = "compiled"  # compiled | skipped | eager | failed | warm_start
        self.reason = ""
        self.stack: list[dict[str, Any]] = []


def next_id(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


# -- spans ----------------------------------------------------------------------------------------

@contextlib.contextmanager
def span(phase: str, name: str = "") -> Iterator[None]:
    """Time a compile phase: a ``span`` event when tracing; a ``torch.profiler`` range
    (``pyjit: compile <phase> <name>``) when a profiler records; nothing otherwise."""
    from . import profiler

    tracing = config.trace_dir is not None
    prof = profiler.active()
    if not tracing and not prof:
        yield
        return
    handle = profiler.enter(f"pyjit: compile {phase}" + (f" {name}" if name else "")) if prof else None
    start = time.time()
    try:
        yield
    finally:
        if handle is not None:
            profiler.exit(handle)
        if tracing:
            emit("span", phase=phase, name=name, start=start, dur=time.time() - start)


def record_span(phase: str, name: str, start: float, dur: float) -> None:
    """A phase timed by its caller (``start``: ``time.time()`` at its start)."""
    if config.trace_dir is not None:
        emit("span", phase=phase, name=name, start=start, dur=dur)


def graph_break(gb: Any, resolution: str) -> None:
    """A graph break (:class:`pyjit.errors.GraphBreak`) and what pyjit did about it."""
    loc = gb.location
    emit("graph_break", kind=gb.kind, explanation=gb.explanation, resolution=resolution,
         file=loc.filename if loc is not None else None, line=loc.lineno if loc is not None else None,
         function=loc.function if loc is not None else "", source_line=(loc.source_line or "").strip() if loc else "",
         inline_chain=[{"file": c.filename, "line": c.lineno, "function": c.function} for c in gb.inline_chain],
         hint=gb.hint)
