"""pyjit's compiler backend: FX graph -> aten -> loop IR -> fused Triton kernels + wrapper.

Entry point: :func:`compile_fx` (torch.compile's backend protocol, so
``torch.compile(fn, backend=pyjit.backend.compile_fx)`` works). Counters for tests:
:data:`metrics`. Importing this package imports torch (``pyjit`` itself does not).
"""
from __future__ import annotations

from .compile_fx import compile_fx
from .metrics import metrics

__all__ = ["compile_fx", "metrics"]
