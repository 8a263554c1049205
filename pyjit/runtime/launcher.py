"""Loading generated modules and running their kernels (compiled on CUDA, interpreted on CPU).

Triton 3.x picks the interpreter when a kernel is *decorated* (``triton.jit`` reads the
``TRITON_INTERPRET`` knob at that moment), so setting the variable after import only affects
modules decorated later, and it is process-wide. pyjit instead decides per module: for CPU
graphs under ``PYJIT_CPU_BACKEND=triton_interpret`` the loader wraps each kernel's Python
function in ``triton.runtime.interpreter.InterpretedFunction`` and gives the module the
interpreter's libdevice stand-in (``triton_compat.interpreter_libdevice``). CUDA graphs in the
same process keep compiled kernels. Works on Triton 3.6 and 3.9.
"""
from __future__ import annotations

import importlib.util
import sys
import types


def load_module(path: str, key: str, interpret: bool) -> types.ModuleType:
    name = f"pyjit_generated_{key[:16]}{'_interp' if interpret else ''}"
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if interpret:
        _make_interpreted(module)
    sys.modules[name] = module
    return module


def _make_interpreted(module: types.ModuleType) -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from .triton_compat import interpreter_libdevice

    module.libdevice = interpreter_libdevice()  # type: ignore[attr-defined]
    for attr, value in list(vars(module).items()):
        if isinstance(value, JITFunction):
            setattr(module, attr, InterpretedFunction(value.fn))
