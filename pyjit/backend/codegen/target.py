"""Kernel targets: which generator a device's graphs get, and what the wrapper asks of it.

A :class:`KernelTarget` is chosen once per device by :func:`kernel_target` (CUDA: Triton; CPU:
C++ kernels, or Triton run by its interpreter under ``PYJIT_CPU_BACKEND=triton_interpret``).
Lowerings and the wrapper (``wrapper.py``) ask it instead of testing the device or the CPU
backend: its capabilities (``column_split``, ``interpreted``, ``tunes``, ``indexes_int64``),
one wrapper step per fused group (:meth:`KernelTarget.kernel_step`: generate the kernel,
its allocations and launch lines), the module's header and its kernel definitions. The
kernels themselves are subclasses of ``common.Kernel`` (``triton.py``, ``cpp.py``).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import sympy
import torch

from ...config import config
from ...runtime.allocator import Step
from ..symbolic import is_static, pexpr

if TYPE_CHECKING:
    from ..scheduler import FusedGroup
    from .triton import KernelSource
    from .wrapper import WrapperCodegen


def _allocs(group: "FusedGroup", removed: set[str]) -> list[tuple[str, Any]]:
    """The buffers a kernel step allocates: its nodes' outputs that leave the kernel (a
    scatter-add's atomic kernel writes its fill's buffer and allocates nothing)."""
    if group.in_place:
        return []
    return [(n.name, (n.buf.layout.size, n.buf.layout.stride, n.buf.layout.dtype))
            for n in group.nodes if n.name not in removed]


_REINTERPRET = ["", "", "def reinterpret(t, size, stride, offset):",
                "    return torch.as_strided(t, size, stride, t.storage_offset() + offset)"]


class KernelTarget:
    """What code generation needs to know about the kernels of one device's graphs."""

    name: ClassVar[str] = ""
    # A static splittable column reduction is split into column chunks (lowering/reductions.py).
    column_split: ClassVar[bool] = True
    # Kernels always index in int64: no run-time int32 range check of symbolic sizes.
    indexes_int64: ClassVar[bool] = False
    # Triton run by its interpreter on CPU tensors (tests exercise GPU code paths with it).
    interpreted: bool = False

    @property
    def tunes(self) -> bool:
        """Launch and matmul-epilogue autotuning can apply to this target's kernels."""
        return False

    def kernel_step(self, w: "WrapperCodegen", group: "FusedGroup", kernels: list[Any],
                    removed: set[str]) -> tuple[Step, list[str]]:
        """Generate ``group``'s kernel (appended to ``kernels``): its wrapper step (allocations,
        reads) and the ``call()`` lines launching it."""
        raise NotImplementedError

    def header(self, w: "WrapperCodegen") -> list[str]:
        raise NotImplementedError

    def definitions(self, w: "WrapperCodegen", kernels: list[Any]) -> list[str]:
        """The module lines defining ``kernels`` (after the header)."""
        raise NotImplementedError


@dataclasses.dataclass
class TritonTarget(KernelTarget):
    """Triton kernels (``triton.py``), matmul templates, launch autotuning."""

    name: ClassVar[str] = "triton"
    interpreted: bool = False

    @property
    def tunes(self) -> bool:
        return True

    def kernel_step(self, w: "WrapperCodegen", group: "FusedGroup", kernels: list[Any],
                    removed: set[str]) -> tuple[Step, list[str]]:
        from .triton import generate_kernel
        from .wrapper import _const
        graph = w.graph
        if group.is_template:
            # A matmul template with its fused epilogue (codegen/matmul_template.py).
            from .matmul_template import generate_template_kernel, launch_line
            tks = self.shared(w, generate_template_kernel(group, len(kernels), removed, w.dtypes, graph.node_info))
            kernels.append(tks)
            return (Step(_allocs(group, removed), {a for a in tks.arg_names if a not in group.names}),
                    [launch_line(tks, _const(tks.grid))])
        ks = generate_kernel(group, len(kernels), removed, w.dtypes, w.persistent_rmax, graph.node_info,
                             config.backend_persistent_multi_pass_max, frozenset(w.symbols))
        if w.launch_tuner is not None:
            ks = w.launch_tuner.tune(ks, group, len(kernels), removed)
        if not ks.int64 and not is_static(ks.xnumel * ks.rnumel):
            w.int32_limits.append(sympy.sympify(ks.xnumel * ks.rnumel * ks.ynumel))
        per_call = ks.rnumel != 1 and not is_static(ks.rnumel) and w.persistent_rmax > 1
        if not per_call:
            ks = self.shared(w, ks)
        kernels.append(ks)
        step = Step(_allocs(group, removed), {a for a in ks.arg_names if a not in group.names})
        sizes = ([pexpr(ks.ynumel)] if ks.ynumel != 1 else []) + [pexpr(ks.xnumel)]
        args = ", ".join(ks.arg_names + ks.size_args + sizes + ([pexpr(ks.rnumel)] if ks.rnumel != 1 else []))
        meta = ", ".join(f"{k}={v}" for k, v in ks.meta.items())
        launch = f"{ks.name}[{_const(ks.grid)}]({args}, {meta})"
        if per_call:
            return step, self._persistent_or_looped(w, group, removed, ks, launch, len(kernels), kernels)
        return step, [launch]

    @staticmethod
    def shared(w: "WrapperCodegen", ks: "KernelSource") -> "KernelSource":
        """``ks``, or an earlier kernel of this module with the same code under its name.

        Repeated layers (a transformer's blocks) generate the same kernel several times, differing
        only in name and the comments naming their graph nodes. Triton compiles each distinct
        source once (its cache key covers the text), so defining such a kernel once and launching
        it from every layer cuts a model's compile work by about its depth. Launch parameters
        are not part of the source, so each launch keeps its own.
        """
        first = w.shared_kernels.setdefault(ks.code_key(), ks.name)
        return ks if first == ks.name else dataclasses.replace(ks, name=first)

    @staticmethod
    def _persistent_or_looped(w: "WrapperCodegen", group: "FusedGroup", removed: set[str], looped: "KernelSource",
                              looped_launch: str, index: int, kernels: list[Any]) -> list[str]:
        """A reduction over a symbolic row length: the looped kernel (every length) and a
        persistent variant (whole rows in registers) chosen per call by the row length, with the
        persistent launch configuration computed from the call's sizes (Triton compiles one
        variant per RBLOCK it sees). A column reduction holds whole columns only while they are
        short (``COLUMN_PERSISTENT_RMAX``) and takes ``column_meta``'s wide-x tiles."""
        from .reduction_heuristics import COLUMN_PERSISTENT_RMAX
        from .triton import generate_kernel

        persistent = generate_kernel(group, index, removed, w.dtypes, w.persistent_rmax, w.graph.node_info,
                                     0, frozenset(w.symbols), force_persistent=True)
        kernels.append(persistent)
        if not persistent.int64 and not is_static(persistent.xnumel * persistent.rnumel):
            w.int32_limits.append(sympy.sympify(persistent.xnumel * persistent.rnumel))
        xnumel, rnumel = pexpr(persistent.xnumel), pexpr(persistent.rnumel)
        if persistent.column_bytes is not None:
            w.uses_column_meta = True
            limit = min(w.persistent_rmax, COLUMN_PERSISTENT_RMAX)
            meta = f"column_meta({xnumel}, {rnumel}, True, {persistent.column_bytes})"
        else:
            w.uses_persistent_meta = True
            limit, meta = w.persistent_rmax, f"persistent_meta({xnumel}, {rnumel})"
        args = ", ".join(persistent.arg_names + persistent.size_args + [xnumel, rnumel])
        return [
            f"if {rnumel} <= {limit}:",
            f"    _meta = {meta}",
            f"    {persistent.name}[(-(-({xnumel}) // _meta['XBLOCK']),)]({args}, XBLOCK=_meta['XBLOCK'], "
            f"RBLOCK=_meta['RBLOCK'], num_warps=_meta['num_warps'])",
            "else:",
            f"    {looped_launch}",
        ]

    def header(self, w: "WrapperCodegen") -> list[str]:
        return [
            f'"""Generated by pyjit for a graph on {w.device.type}. Run me to time call() on random inputs."""',
            "import torch",
            "import triton",
            "import triton.language as tl",
            "",
            "from pyjit.runtime.triton_compat import libdevice",
            *w._check_imports(),
            *(["import functools"] if w.uses_persistent_meta or w.uses_column_meta else []),
            *(["from pyjit.backend.codegen.reduction_heuristics import persistent_meta as _persistent_meta",
               "persistent_meta = functools.lru_cache(maxsize=256)(_persistent_meta)"]
              if w.uses_persistent_meta else []),
            *(["from pyjit.backend.codegen.reduction_heuristics import column_meta as _column_meta",
               "column_meta = functools.lru_cache(maxsize=256)(_column_meta)"]
              if w.uses_column_meta else []),
            "",
            f"DEVICE = torch.device({str(w.device)!r})",
            "empty_strided = torch.empty_strided",
            *_REINTERPRET,
        ]

    def definitions(self, w: "WrapperCodegen", kernels: list[Any]) -> list[str]:
        lines: list[str] = []
        emitted: set[str] = set()
        for ks in kernels:
            if ks.name in emitted:  # a repeat of an earlier kernel (see shared): defined once
                continue
            emitted.add(ks.name)
            lines += ["", "", *ks.source.rstrip("\n").split("\n")]
        return lines


class CppTarget(KernelTarget):
    """C++ kernels (``cpp.py``): one translation unit per graph, called through ctypes with
    data pointers. Rows are walked by the kernel's own loops (no column split), indices are
    int64, nothing is autotuned."""

    name: ClassVar[str] = "cpp"
    column_split: ClassVar[bool] = False
    indexes_int64: ClassVar[bool] = True

    def kernel_step(self, w: "WrapperCodegen", group: "FusedGroup", kernels: list[Any],
                    removed: set[str]) -> tuple[Step, list[str]]:
        from .cpp import generate_cpp_kernel
        if group.is_template:
            raise NotImplementedError("matmul templates have no C++ code (lowering/matmul.py keeps mm extern)")
        cks = generate_cpp_kernel(group, len(kernels), removed, w.dtypes, w.graph.node_info,
                                  frozenset(w.symbols), w.float_symbols)
        kernels.append(cks)
        ptrs = ", ".join([f"{a}.data_ptr()" for a in cks.arg_names] + list(cks.size_args))
        return Step(_allocs(group, removed), {a for a in cks.arg_names if a not in group.names}), \
            [f"{cks.name}({ptrs})"]

    def header(self, w: "WrapperCodegen") -> list[str]:
        return [
            f'"""Generated by pyjit for a graph on {w.device.type} (C++ kernels). Run me to time call()."""',
            "import torch",
            *w._check_imports(),
            "",
            f"DEVICE = torch.device({str(w.device)!r})",
            "empty_strided = torch.empty_strided",
            *_REINTERPRET,
        ]

    def definitions(self, w: "WrapperCodegen", kernels: list[Any]) -> list[str]:
        """The graph's C++ translation unit and the ctypes functions built from it."""
        from .cpp import translation_unit
        if not kernels:
            return []
        source = translation_unit(kernels)
        assert "'''" not in source and "\\" not in source
        # Static kernels take data pointers only (``name: n``); dynamic ones also their size
        # symbols (``name: (n, ("int64_t", ...))``), so ctypes passes them as 64-bit integers.
        sigs = ", ".join(f"{k.name!r}: {len(k.arg_names)}" if not k.size_args
                         else f"{k.name!r}: ({len(k.arg_names)}, {tuple(k.size_types)!r})" for k in kernels)
        lines = ["", "", "from pyjit.runtime.cpp_build import load_kernels", "", "CPP_SOURCE = r'''",
                 *source.split("\n"), "'''", "", f"_kernels = load_kernels(CPP_SOURCE, {{{sigs}}})"]
        return lines + [f"{k.name} = _kernels[{k.name!r}]" for k in kernels]


_TRITON = TritonTarget()
_TRITON_INTERPRETED = TritonTarget(interpreted=True)
_CPP = CppTarget()


def kernel_target(device: torch.device | str) -> KernelTarget:
    """The kernel target of graphs on ``device`` (read from ``config.cpu_backend`` at each call,
    so a patched config takes effect). A CPU graph under ``cpu_backend="eager"`` never reaches
    code generation; its lowering decisions are the C++ target's."""
    if torch.device(device).type == "cpu":
        return _TRITON_INTERPRETED if config.cpu_backend == "triton_interpret" else _CPP
    return _TRITON
