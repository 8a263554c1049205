"""Coexisting with torch.compile (Dynamo's PEP 523 hook) in one process.

Two frame hooks share CPython's single eval-function slot. pyjit's C hook is *terminal* (it
never calls the hook installed before it, so the two can never call each other in a cycle),
steps aside for every frame another hook hands it (that hook is on top: it owns the thread's
frames, e.g. Dynamo inside a torch.compile'd call), and enters jitted calls through
``pyjit._C.ScopedCall`` (C, no Python frame). This module provides the one piece of policy the
C side asks Python for: the *escape* a jitted call goes through while another hook is on top.

When the hook on top is torch's (the C core names the shared library that defines it), the
escape is ``torch.compiler.disable`` (public API) around
``pyjit._C._scoped_call``: Dynamo switches itself off for the call and keeps its own books
(its hook comes off while no thread compiles, and goes back on afterwards), and pyjit's hook is
on top for the jitted call, as with ``torch.compiler.disable``d code. For another tool's hook
there is no escape: pyjit's hook goes on top for the call and the other
hook is put back afterwards (C side). Details: docs/internals.md, "Coexisting with other frame
hooks".
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

_REASON = "pyjit entry point: pyjit compiles this call itself"


def make_escape(library: str | None) -> Callable[..., Any] | None:
    """Called by the C core (with pyjit's hook on top, so no other hook sees this frame) the
    first time a jitted call meets a given foreign hook on top of pyjit's; ``library`` is the
    file of the shared library defining that hook (None where the platform cannot tell)."""
    from .policy import _C

    torch = sys.modules.get("torch")
    if _C is None or torch is None or library is None or not _inside(library, os.path.dirname(torch.__file__)):
        return None  # not torch's hook: no way to switch it off; the C side goes on top instead
    return torch.compiler.disable(_C._scoped_call, reason=_REASON)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def install() -> None:
    """Register :func:`make_escape` with the C core (idempotent)."""
    from .policy import _C

    if _C is not None:
        _C.set_escape_factory(make_escape)
