"""Loading generated modules and running their kernels (compiled on CUDA, interpreted on CPU).

Triton 3.x picks the interpreter when a kernel is *decorated* (``triton.jit`` reads the
``TRITON_INTERPRET`` knob at that moment), so setting the variable after import only affects
modules decorated later, and it is process-wide. pyjit instead decides per module: for CPU
graphs under ``PYJIT_CPU_BACKEND=triton_interpret`` the loader wraps each kernel's Python
function in ``triton.runtime.interpreter.InterpretedFunction`` (see :class:`InterpretedKernel`
for Triton's own jit helpers) and gives the module the interpreter's libdevice stand-in
(``triton_compat.interpreter_libdevice``). CUDA graphs in the
same process keep compiled kernels. Works on Triton 3.6 and 3.9. Modules for the GPU get their
kernels wrapped for cheap repeated launches (``fast_launch.py``, ``config.fast_launch``).
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import types
from typing import Any, Callable, Iterator


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
    else:
        from ..config import config
        if config.fast_launch:
            from .fast_launch import wrap_module_kernels
            wrap_module_kernels(module)  # direct launches after each site's first (fast_launch.py)
    sys.modules[name] = module
    return module


def _make_interpreted(module: types.ModuleType) -> None:
    from triton.runtime.jit import JITFunction

    from .triton_compat import interpreter_libdevice

    module.libdevice = interpreter_libdevice()  # type: ignore[attr-defined]
    for attr, value in list(vars(module).items()):
        if isinstance(value, JITFunction):
            setattr(module, attr, InterpretedKernel(value))


class InterpretedKernel:
    """A kernel run by Triton's interpreter even though ``triton`` was imported without it.

    Triton's own helpers (``tl.sum``, ``tl.max``...) are ``@triton.jit`` functions decorated at
    import: with the interpreter off they refuse to be called from Python. For the duration of
    a launch they are swapped for interpreted twins (and the interpreter's fp32 -> bf16 cast for
    one that rounds like the GPU), then restored, so compiled CUDA kernels in the same process
    are unaffected.
    """

    def __init__(self, jit_fn: Any):
        from triton.runtime.interpreter import InterpretedFunction

        self.fn = InterpretedFunction(jit_fn.fn)
        self.__name__ = jit_fn.fn.__name__

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            with _interpreted_stdlib():
                self.fn[grid](*args, **kwargs)
        return launch


_swaps: list[tuple[Any, str, Any, Any]] | None = None


def _stdlib_swaps() -> list[tuple[Any, str, Any, Any]]:
    global _swaps
    if _swaps is None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        try:  # imported lazily by launches; import it now, while Triton's helpers are not swapped
            import triton.experimental.gluon  # noqa: F401
        except Exception:  # absent or unusable in this Triton: nothing will import it lazily either
            pass
        _swaps = []
        for mod_name, mod in list(sys.modules.items()):
            if not mod_name.startswith("triton.language") or mod is None:
                continue
            for attr, value in list(vars(mod).items()):
                if isinstance(value, JITFunction):
                    _swaps.append((mod, attr, value, InterpretedFunction(value.fn)))
        _swaps += _rtne_bf16_cast_swap()
    return _swaps


def _rtne_bf16_cast_swap() -> list[tuple[Any, str, Any, Any]]:
    """The interpreter truncates fp32 -> bf16; compiled Triton (and eager) round to nearest even.

    During interpreted launches its cast routine is replaced by one that rounds like the GPU,
    so CPU CI sees the numbers the GPU produces. Skipped if Triton's internals differ.
    """
    try:
        import numpy as np
        import torch
        import triton.language as tl
        from triton.runtime import interpreter as interp

        builder_cls = type(interp.interpreter_builder)
        original = builder_cls.cast_impl
        handle_cls = interp.TensorHandle
    except (ImportError, AttributeError):  # pragma: no cover - other Triton versions
        return []

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            data = np.ascontiguousarray(np.asarray(src.data, dtype=np.float32))
            bits = torch.from_numpy(data).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return handle_cls(bits, tl.bfloat16)
        return original(self, src, dst_type)

    return [(builder_cls, "cast_impl", original, cast_impl)]


def _language_namespaces() -> list[Any]:
    """Modules of ``triton.language`` and the classes they define: what the interpreter patches."""
    spaces: list[Any] = []
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("triton.language") or mod is None:
            continue
        spaces.append(mod)
        for value in list(vars(mod).values()):
            if isinstance(value, type) and getattr(value, "__module__", "").startswith("triton.language"):
                spaces.append(value)
    return spaces


@contextlib.contextmanager
def _restored_language() -> Iterator[None]:
    """Undo whatever an interpreted launch patches in ``triton.language``.

    Triton's interpreter swaps the builtins of ``tl``/``tl.core``/``tl.math`` and the operators
    of ``tl.tensor`` for interpreter versions. Triton 3.9 restores them after the launch;
    Triton 3.6 (the GPU machine's) leaves them patched, after which *compiling* a CUDA kernel
    in the same process fails ("'ir.value' object has no attribute 'dtype'"). Snapshot the
    namespaces and put every changed or removed attribute back.
    """
    spaces = _language_namespaces()
    saved = [(space, dict(vars(space))) for space in spaces]
    try:
        yield
    finally:
        for space, before in saved:
            now = vars(space)
            # Names the interpreter *adds* stay: it adds helpers once and relies on them later,
            # and a name unknown to compiled code cannot change what that code does.
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    try:
                        setattr(space, name, value)
                    except (AttributeError, TypeError):  # read-only slots of builtin types
                        pass


_MISSING = object()


@contextlib.contextmanager
def _interpreted_stdlib() -> Iterator[None]:
    swaps = _stdlib_swaps()
    with _lock, _restored_language():
        for mod, attr, _, interp in swaps:
            setattr(mod, attr, interp)
        try:
            yield
        finally:
            for mod, attr, original, _ in swaps:
                setattr(mod, attr, original)


_lock = threading.RLock()
