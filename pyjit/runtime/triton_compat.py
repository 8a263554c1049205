"""The one place generated kernels get math functions that moved between Triton versions.

``libdevice`` is ``triton.language.extra.libdevice`` where it exists (Triton >= 3.0, incl. 3.6
on the GPU machine and 3.9 here), else the CUDA one. Triton's interpreter (``TRITON_INTERPRET``)
only emulates ``tl``/``tl.math`` builtins, not libdevice, so :data:`interpreter_libdevice`
provides the same names computed with torch on the interpreter's numpy arrays; the module
loader (``pyjit.runtime.launcher``) swaps it in for kernels that run interpreted on CPU.
"""
from __future__ import annotations

import types
from typing import Any, Callable

try:
    from triton.language.extra import libdevice  # Triton 3.x: dispatches to the CUDA/HIP flavour
except ImportError:  # pragma: no cover - older Triton
    from triton.language.extra.cuda import libdevice  # type: ignore[no-redef]


def _make_interpreter_libdevice() -> types.ModuleType:
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            tensors = [a for a in args if isinstance(a, tl.core.tensor)]
            arrays = [np.asarray(a.handle.data) if isinstance(a, tl.core.tensor) else a for a in args]
            torch_args = [torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in arrays]
            result = fn(*torch_args)
            out = result.numpy() if isinstance(result, torch.Tensor) else np.asarray(result)
            ref = max(tensors, key=lambda t: np.asarray(t.handle.data).size)
            scalar = ref.dtype if fn not in _BOOL_RESULT else tl.int1
            out = out.astype(_NP[scalar.name]) if scalar.name in _NP else out
            shape = list(out.shape)
            ty = tl.block_type(scalar, shape) if shape else scalar
            return tl.core.tensor(TensorHandle(out, scalar), ty)
        return call

    _NP = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16, "int1": np.bool_, "int32": np.int32,
           "int64": np.int64}
    fns: dict[str, Callable[..., Any]] = {
        "expm1": torch.expm1, "log10": torch.log10, "log1p": torch.log1p, "tan": torch.tan, "asin": torch.asin,
        "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
        "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh, "erfc": torch.erfc,
        "erfinv": torch.erfinv, "lgamma": torch.lgamma, "trunc": torch.trunc, "nearbyint": torch.round,
        "pow": torch.pow, "fmod": torch.fmod, "atan2": torch.atan2, "copysign": torch.copysign,
        "hypot": torch.hypot, "signbit": torch.signbit, "isinf": torch.isinf, "isnan": torch.isnan,
        "exp": torch.exp, "log": torch.log, "floor": torch.floor, "ceil": torch.ceil,
    }
    global _BOOL_RESULT
    _BOOL_RESULT = {torch.signbit, torch.isinf, torch.isnan}
    module = types.ModuleType("pyjit_interpreter_libdevice")
    for name, fn in fns.items():
        setattr(module, name, wrap(fn))
    return module


_BOOL_RESULT: set[Any] = set()
_interpreter_libdevice: types.ModuleType | None = None


def interpreter_libdevice() -> types.ModuleType:
    global _interpreter_libdevice
    if _interpreter_libdevice is None:
        _interpreter_libdevice = _make_interpreter_libdevice()
    return _interpreter_libdevice


__all__ = ["libdevice", "interpreter_libdevice"]
