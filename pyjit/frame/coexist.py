"""Coexisting with torch.compile (Dynamo's PEP 523 hook) in one process.

Two frame hooks share CPython's single eval-function slot. pyjit's C hook is *terminal* (it
never calls the hook installed before it, so the two can never call each other in a cycle),
steps aside for every frame another hook hands it (that hook is on top: it owns the thread's
frames, e.g. Dynamo inside a torch.compile'd call), and enters jitted calls through
``pyjit._C.ScopedCall`` (C, no Python frame). This module provides the one piece of policy the
C side asks Python for: the *escape* a jitted call goes through while another hook is on top.

With Dynamo loaded, the escape is ``torch.compiler.disable`` (public API) around
``pyjit._C._scoped_call``: Dynamo switches itself off for the call and keeps its own books
(its hook comes off while no thread compiles, and goes back on afterwards), and pyjit's hook is
on top for the jitted call, as with ``torch.compiler.disable``d code. Without Dynamo loaded
(another tool's hook), there is no escape: pyjit's hook goes on top for the call and the other
hook is put back afterwards (C side). Details: docs/internals.md, "Coexisting with other frame
hooks".
"""
from __future__ import annotations

import sys
from typing import Any, Callable

_REASON = "pyjit entry point: pyjit compiles this call itself"


def make_escape() -> Callable[..., Any] | None:
    """Called by the C core (with pyjit's hook on top, so no other hook sees this frame) the
    first time a jitted call meets a given foreign hook on top of pyjit's."""
    from .policy import _C

    if _C is None or "torch._dynamo" not in sys.modules:
        return None  # not Dynamo: no way to switch that hook off; the C side goes on top instead
    torch = sys.modules["torch"]
    return torch.compiler.disable(_C._scoped_call, reason=_REASON)


def install() -> None:
    """Register :func:`make_escape` with the C core (idempotent)."""
    from .policy import _C

    if _C is not None:
        _C.set_escape_factory(make_escape)
