"""Cheap launches of compiled Triton kernels from generated modules.

``kernel[grid](*args, **meta)`` goes through Triton's ``JITFunction.run`` on every call: it binds
the arguments, computes their specialisation (dtype, 16-byte alignment of each pointer,
integers equal to 1 or divisible by 16), hashes a cache key, looks the kernel up and builds its
launch metadata. Measured on the lent H100's host that is about 20 us per launch, so a graph of
17 small kernels (a small ResNet) spends more time launching than the GPU spends running them
(docs/performance-archive.md, "Why the convolution rows move between runs").

A generated module's launch sites are fixed: each passes the same kernel, grid expression and
``constexpr`` values on every call, buffers of fixed dtypes, and (for static graphs) the same
integers. So :class:`FastKernel` wraps each kernel of a module loaded for the GPU; the first
launch at a site goes through ``JITFunction.run`` as before (compiling if needed), and the site
then remembers the compiled kernel, its launcher and what its specialisation assumed. Later
launches call the launcher directly after checking, per call, exactly those assumptions:

- the same integer arguments and ``constexpr``/launch options (else: the slow path, which may
  compile another specialisation, and the site rebinds);
- every pointer that was 16-byte aligned at binding still is (an unaligned pointer is never
  assumed aligned; the reverse is always safe);
- the same current device, and no Triton launch hooks installed (profilers such as proton
  install them; their launches take the slow path so the hooks see them).

The direct launch itself goes, where every parameter of the compiled kernel is modelled
(:func:`native_launcher`), through ``pyjit._C.KernelLauncher``: one ``cuLaunchKernel`` with the
grid, block, shared memory and argument kinds fixed at binding, which only reads the tensors'
data pointers per call (Triton's launcher also queries the driver about every pointer and runs
through a Python wrapper: 5.5 us a launch on the lent H200's host). Otherwise, or with
``PYJIT_NATIVE_LAUNCH=0``, it calls Triton's launcher with the bound metadata.

Anything unexpected at binding (a Triton whose kernels or launcher differ from what this
module knows, ``constexpr`` parameters not at the end) leaves the site on the slow path for
good: correct, only not faster. Triton's check that global values a kernel read have not
changed is not repeated: generated kernels read no mutable globals.
"""
from __future__ import annotations

import sys

from typing import Any, Callable

import torch

from ..config import config

_MAX_SITES = 64  # grids a kernel remembers (dynamic shapes compute a new grid per size)
_MAX_BINDINGS = 4  # specialisations a site launches directly


class FastKernel:
    """A ``JITFunction`` stand-in for generated modules: ``kernel[grid](*args, **meta)``."""

    __slots__ = ("kernel", "sites", "__name__")

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.sites: dict[Any, _Site] = {}
        self.__name__ = getattr(getattr(kernel, "fn", None), "__name__", "kernel")

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        site = self.sites.get(grid)
        if site is None:
            if len(self.sites) >= _MAX_SITES:
                return self.kernel[grid]
            site = self.sites[grid] = _Site(self.kernel, grid)
        return site

    def __getattr__(self, name: str) -> Any:  # warmup, fn, device_caches...: the kernel's own
        return getattr(self.kernel, name)


class _Bound:
    __slots__ = ("run", "function", "packed", "ints", "aligned", "meta", "device", "current_device", "stream_of",
                 "grid3", "constexpr_values", "hooks_off", "native")


class _Site:
    """One ``kernel[grid]`` of a module: slow path first, then direct launches while valid."""

    __slots__ = ("kernel", "grid", "bindings", "unusable")

    def __init__(self, kernel: Any, grid: Any):
        self.kernel = kernel
        self.grid = grid
        # Up to _MAX_BINDINGS specialisations seen here (e.g. an input aligned on some calls and
        # not on others): the first whose assumptions hold is launched directly.
        self.bindings: list[_Bound] = []
        self.unusable = False

    def __call__(self, *args: Any, **meta: Any) -> Any:
        for b in self.bindings:
            if meta == b.meta and b.hooks_off() and b.current_device() == b.device and _fits(b, args):
                native = b.native
                if native is not None and native(b.stream_of(b.device), args):
                    return None
                g0, g1, g2 = b.grid3
                b.run(g0, g1, g2, b.stream_of(b.device), b.function, b.packed, None, None, None,
                      *args, *b.constexpr_values)
                return None
        compiled = self.kernel[self.grid](*args, **meta)
        if not self.unusable and len(self.bindings) < _MAX_BINDINGS:
            self._bind(compiled, args, meta)
        return compiled

    @property
    def bound(self) -> _Bound | None:
        return self.bindings[0] if self.bindings else None

    def _bind(self, compiled: Any, args: tuple, meta: dict[str, Any]) -> None:
        try:
            bound = _binding(self.kernel, self.grid, compiled, args, meta)
        except Exception as e:  # noqa: BLE001 - an unknown Triton layout: this site keeps the slow path
            self.bindings = []
            self.unusable = True
            _note_refusal(self.kernel, f"{type(e).__name__}: {e}")
            return
        if isinstance(bound, str):
            _note_refusal(self.kernel, bound)
        else:
            self.bindings.append(bound)


def _fits(b: _Bound, args: tuple) -> bool:
    """The call's integers are the bound ones, and every pointer assumed aligned still is."""
    for i, value in b.ints:
        if args[i] != value:
            return False
    for i in b.aligned:
        if args[i].data_ptr() & 15:
            return False
    return True


refusals: dict[str, str] = {}  # kernel name -> why its sites launch through JITFunction.run


def _note_refusal(kernel: Any, why: str) -> None:
    name = getattr(getattr(kernel, "fn", None), "__name__", repr(kernel))
    if name not in refusals:
        refusals[name] = why
        from ..logs import get_logger
        get_logger("compile_times").info("fast launch: %s keeps Triton's launch path (%s)", name, why)


def _constexpr_positions(kernel: Any) -> list[int]:
    """Indices of the kernel's ``tl.constexpr`` parameters (Triton 3.6 and 3.9 spell it alike;
    older ones only through ``params``)."""
    positions = getattr(kernel, "constexprs", None)
    if positions is None:
        positions = [i for i, p in enumerate(kernel.params) if p.is_constexpr]
    return list(positions)


def _hooks_check() -> Callable[[], bool]:
    """A cheap per-call test that no Triton launch hook is installed (Triton >= 3.4's knobs).

    Triton 3.9 leaves the hooks None; Triton 3.6 holds an empty ``HookChain`` (a ``calls``
    list) that profilers add to. Passing None instead of an empty chain changes nothing. The
    test is specialised to what is installed now: the same hook objects, their lists still
    empty (anything else, e.g. a profiler replacing a hook, fails it: the slow path).
    """
    from triton import knobs

    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook

    def calls_of(hook: Any) -> list | None:
        calls = getattr(hook, "calls", None)
        return calls if isinstance(calls, list) else None

    if enter is None and leave is None:
        return lambda: runtime.launch_enter_hook is None and runtime.launch_exit_hook is None
    enter_calls, leave_calls = calls_of(enter), calls_of(leave)
    if (enter is not None and enter_calls is None) or (leave is not None and leave_calls is None):
        return lambda: False  # a hook of a kind not modelled here: always the slow path
    enter_calls = enter_calls if enter_calls is not None else []
    leave_calls = leave_calls if leave_calls is not None else []

    def hooks_off() -> bool:
        return (runtime.launch_enter_hook is enter and runtime.launch_exit_hook is leave
                and not enter_calls and not leave_calls)
    return hooks_off


def _binding(kernel: Any, grid: Any, compiled: Any, args: tuple, meta: dict[str, Any]) -> _Bound | str:
    """What a direct launch of ``compiled`` at this site needs, or why not (the slow path stays)."""
    hooks_off = _hooks_check()
    if compiled is None or not hooks_off():
        return "no compiled kernel, or launch hooks installed"
    if callable(grid) or not isinstance(grid, tuple) or not 1 <= len(grid) <= 3:
        return f"grid {grid!r} is not a tuple of 1-3 values"
    if not all(isinstance(g, int) for g in grid):
        return f"grid {grid!r} holds non-integers"
    names = list(kernel.arg_names)
    constexpr_positions = sorted(_constexpr_positions(kernel))
    # Generated kernels put their constexpr parameters last and pass them by keyword.
    if constexpr_positions != list(range(len(args), len(names))):
        return f"constexpr parameters {constexpr_positions} are not the last of {names} after {len(args)} arguments"
    if any(names[i] not in meta for i in constexpr_positions):
        return "a constexpr parameter is not passed by keyword"
    from triton.runtime import driver

    b = _Bound()
    b.hooks_off = hooks_off
    b.run = compiled.run  # the launcher (initialises the module's handles once)
    b.function = compiled.function
    b.packed = compiled.packed_metadata
    b.meta = dict(meta)
    b.constexpr_values = tuple(meta[names[i]] for i in constexpr_positions)
    b.device = torch.cuda.current_device()
    # torch.cuda.current_device() without its Python wrapper (initialisation is long done here).
    b.current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
    b.stream_of = driver.active.get_current_stream
    b.grid3 = tuple(grid) + (1,) * (3 - len(grid))
    ints, aligned = [], []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.data_ptr() % 16 == 0:
                aligned.append(i)
        elif isinstance(a, bool) or not isinstance(a, int):
            return f"argument {i} is a {type(a).__name__}"  # its specialisation is not modelled here
        else:
            ints.append((i, a))
    b.ints = tuple(ints)
    b.aligned = tuple(aligned)
    b.native = None
    if config.native_launch:
        native = native_launcher(kernel, compiled, args, b.grid3)
        if isinstance(native, str):
            _note_native_refusal(kernel, native)
        else:
            b.native = native
    return b


# Triton parameter types a KernelLauncher converts, by their kind letter (csrc/cuda_launch.c).
_KINDS = {"i32": "i", "u32": "I", "i64": "l", "u64": "L", "fp32": "f", "fp64": "d"}
# Scratch pointers Triton appends to a kernel's parameters (global, profile): passed as nulls.
# cuLaunchKernel reads as many parameters as the kernel declares, so a trailing null a
# Triton version does not append is never read.
_SCRATCH_PARAMS = 2


def native_launcher(kernel: Any, compiled: Any, args: tuple, grid3: tuple[int, int, int]) -> Any:
    """A ``pyjit._C.KernelLauncher`` for ``compiled`` at this site, or why not (a string).

    Built only where every parameter is modelled: the compiled signature gives each argument's
    type (``constexpr`` for those specialised away, such as integers equal to 1), one CTA per
    program, no cluster, cooperative or programmatic launch, and no scratch memory.
    """
    from .. import _C

    launcher_type = getattr(_C, "KernelLauncher", None)
    if launcher_type is None:
        return "pyjit._C has no KernelLauncher"
    md = compiled.metadata
    if getattr(md, "num_ctas", 1) != 1 or tuple(getattr(md, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) != (1, 1, 1):
        return "a kernel of several CTAs per program"
    if getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False):
        return "a cooperative or programmatic launch"
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        return "a kernel that needs scratch memory"
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    names = list(kernel.arg_names)
    if not isinstance(signature, dict) or len(signature) != len(names):
        return "no compiled signature of one entry per parameter"
    types = [signature.get(name, signature.get(i)) for i, name in enumerate(names)]
    if any(t != "constexpr" for t in types[len(args):]):
        return "a keyword parameter the kernel takes at run time"
    kinds = []
    for t, a in zip(types, args):
        if t == "constexpr":
            kinds.append("-")
        elif isinstance(t, str) and t.startswith("*") and isinstance(a, torch.Tensor):
            kinds.append("P")
        elif isinstance(t, str) and t in _KINDS and not isinstance(a, torch.Tensor):
            kinds.append(_KINDS[t])
        else:
            return f"parameter type {t!r} for a {type(a).__name__}"
    try:
        return launcher_type(int(compiled.function), grid3, 32 * int(md.num_warps), int(getattr(md, "shared", 0)),
                             "".join(kinds), _SCRATCH_PARAMS)
    except (RuntimeError, ValueError, TypeError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"


native_refusals: dict[str, str] = {}  # kernel name -> why its sites use Triton's launcher


def _note_native_refusal(kernel: Any, why: str) -> None:
    name = getattr(getattr(kernel, "fn", None), "__name__", repr(kernel))
    if name not in native_refusals:
        native_refusals[name] = why
        from ..logs import get_logger
        get_logger("compile_times").info("native launch: %s uses Triton's launcher (%s)", name, why)


def unwrap(kernel: Any) -> Any:
    """The ``JITFunction`` behind a :class:`FastKernel` (anything else unchanged)."""
    return kernel.kernel if isinstance(kernel, FastKernel) else kernel


def wrap_module_kernels(module: Any) -> int:
    """Replace each Triton kernel of a generated GPU module by a :class:`FastKernel`."""
    if "triton" not in sys.modules:
        return 0  # a module with Triton kernels imported triton: this one has none (C++ kernels)
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return 0
    wrapped = 0
    for name, value in list(vars(module).items()):
        if isinstance(value, JITFunction):
            setattr(module, name, FastKernel(value))
            wrapped += 1
    return wrapped
