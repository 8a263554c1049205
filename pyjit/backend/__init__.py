"""pyjit's compiler backend: FX graph -> aten -> loop IR -> fused Triton kernels + wrapper.

Entry point: :func:`compile_fx` (the backend protocol ``backend(gm, example_inputs)``, so
torch's own frontend can drive it too, as the bench's ``dynamo+pyjit`` crossing does). Counters for tests:
:data:`metrics`. Importing this package imports torch (``pyjit`` itself does not).
"""
from __future__ import annotations

from .compile_fx import compile_fx
from .metrics import metrics

__all__ = ["compile_fx", "metrics"]
