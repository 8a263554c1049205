"""pyjit's ranges in ``torch.profiler`` traces.

While a profiler records (``torch.autograd.profiler._is_profiler_enabled``, a module global
torch sets when any ``torch.profiler.profile``/``torch.autograd.profiler.profile`` starts),
pyjit marks:

- ``pyjit: guards <function>``: the cache-entry lookup of a compiled function as a whole
  (the guard trees checked by the C core before the replacement code runs; the C core asks
  :func:`guard_range_enter` only while the flag is set, see :func:`install`);
- ``pyjit: <function> graph <n>``: each run of a compiled graph (``<function>`` is the frame's
  name, ``n`` the graph's number within it); ``pyjit: <function> graph <n> backward``: the
  backward of a training graph;
- ``pyjit: <function> graph <n> piece <i>``: each piece of a graph split at DDP's buckets
  (:mod:`pyjit.distributed.ddp`), and ``... piece <i> backward``;
- ``pyjit: compile <phase> <name>``: compile phases (:func:`pyjit.report.events.span`).

Names never hold a double quote: torch's Chrome trace export writes them unescaped.

With no profiler active the cost is one attribute read per compiled-graph call and one dict
read per guarded lookup in C: ranges are never created unconditionally.
"""
from __future__ import annotations

import sys
import types
from typing import Any

_prof_module: Any = None


def _module() -> Any:
    global _prof_module
    if _prof_module is None:
        import torch.autograd.profiler as prof

        _prof_module = prof
    return _prof_module


def active() -> bool:
    """A torch profiler is recording (cheap: a module attribute)."""
    mod = _prof_module if _prof_module is not None else sys.modules.get("torch.autograd.profiler")
    return bool(mod is not None and getattr(mod, "_is_profiler_enabled", False))


def enter(name: str) -> Any:
    """Open a named range; the handle goes to :func:`exit`."""
    rf = _module().record_function(name.replace('"', "'"))
    rf.__enter__()
    return rf


def record(name: str) -> Any:
    """A ``with`` range named ``name`` (only call while :func:`active`)."""
    return _module().record_function(name.replace('"', "'"))


def exit(handle: Any) -> None:  # noqa: A001 - pairs with enter
    handle.__exit__(None, None, None)


def graph_range_name(frame_name: str, index: int) -> str:
    return f"pyjit: {frame_name} graph {index}"


def guard_range_enter(code: types.CodeType) -> Any:
    """Called by the C core (only while the profiler flag is set) before a guarded lookup."""
    return enter(f"pyjit: guards {code.co_name}")


def install(c_module: Any) -> None:
    """Give the C core the profiler flag (``torch.autograd.profiler``'s globals) and the range
    callbacks for the cache-entry lookup; idempotent."""
    setter = getattr(c_module, "set_profiler_hooks", None)
    if setter is None or "torch" not in sys.modules:
        return
    mod = _module()
    setter(vars(mod), "_is_profiler_enabled", guard_range_enter, exit)
