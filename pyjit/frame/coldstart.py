"""One-time initialisation of the frontend, timed apart from tracing.

The first compile in a new process pays costs that no later compile pays: importing the
frontend's modules (``pyjit.frame.convert`` and what it pulls in: ``torch.fx``, the trackers,
the bytecode layer) and torch's own lazy initialisation behind the first ``FakeTensorMode()``.
The latter dominates: ``FakeTensorMode.__init__`` imports the configuration of torch's own
compiler frontend, which executes that whole package (symbolic_shapes, sympy,
torch.distributed, ...), about 1.3-2 s on the 2-core CI machine, against ~40 us for every later
``FakeTensorMode()``. pyjit itself never uses that package; the import is torch's, and it is
unavoidable for as long as the frontend propagates shapes with fake tensors (see
docs/performance.md, Cold start).

This module does that work once, before the ``trace`` timer starts, and hands the one-time
costs to the first ``compile_times`` record as the phases ``imports`` and ``init``, so the log
(and the bench report built from it) no longer attributes torch's import time to tracing.
"""
from __future__ import annotations

import threading
import time

# One-time costs not yet reported; taken (and cleared) by the first compile's log record.
_pending: dict[str, float] = {}
_initialized = False
_lock = threading.Lock()


def note_imports(seconds: float) -> None:
    """Record the time spent importing the frontend's modules (called once, at module import)."""
    _pending["imports"] = _pending.get("imports", 0.0) + seconds


def ensure_initialized() -> None:
    """Pay torch's lazy one-time initialisation for fake tensors now, timed as ``init``.

    Idempotent and cheap after the first call (one boolean test)."""
    global _initialized
    if _initialized:
        return
    with _lock:
        if _initialized:
            return
        import torch

        if torch.cuda.is_initialized():
            # The program uses the GPU: start the compile workers now, so that they import
            # Triton and compile their warm-up kernel during this initialisation, not after it.
            from ..runtime.precompile import prestart
            prestart()
        t0 = time.perf_counter()
        from torch._subclasses.fake_tensor import FakeTensorMode

        # The constructor is what imports torch's compiler package (through its config); the mode
        # itself is dropped: each compile makes its own (about 40 us once warm).
        FakeTensorMode(allow_non_fake_inputs=False)
        _pending["init"] = _pending.get("init", 0.0) + (time.perf_counter() - t0)
        _initialized = True


def take_one_time_phases() -> dict[str, float]:
    """The one-time phases not reported yet (empty after the first compile of the process)."""
    out = dict(_pending)
    _pending.clear()
    return out
