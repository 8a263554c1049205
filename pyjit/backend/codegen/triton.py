"""Triton kernel generation: one kernel per fused group of loop nodes.

``TritonKernel`` is the Triton target's ops handler (see ``ops_handler.py``; the shared part is
``common.Kernel``, the pointwise ops are ``triton_ops.py``'s tables) whose values are named
Triton temporaries (:class:`CSEVar`, common subexpressions reused). Kernel shapes:
- pointwise: 1-D ``xindex`` blocks, masked by ``xmask``; or, when some load or store is
  contiguous in another dim than the last (transposes, permuted layouts), 2-D
  ``[YBLOCK, XBLOCK]`` tiles over ``(yindex, xindex)`` (``tiling.py`` decides and sizes them);
- persistent reduction: a ``[XBLOCK, RBLOCK]`` block holds whole rows (``rnumel <= RBLOCK``);
- looped reduction: accumulators over ``for roffset in range(0, rnumel, RBLOCK)``, with
  x-only nodes before the loop (producers) or after it (epilogues).
fp16/bf16 are loaded as fp32 and rounded only when stored or explicitly cast. Variance uses
two passes over registers (persistent) or per-lane Welford accumulators (looped).

Dynamic shapes: a symbolic ``xnumel``/``rnumel`` is a kernel argument, the size symbols the
index expressions use (``s0``...) are kernel arguments (``size_args``), block sizes come from
the example sizes (``symbolic.hint``), and a reduction over a symbolic ``rnumel`` is looped.
Kernels index in int32 when the example sizes fit; the wrapper checks at run time that every
size fits (``int32_limits``) and otherwise runs the graph as captured.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from typing import Any, Iterator

import sympy
import torch

from ..ops_handler import ReductionType
from ..scheduler import RINDEX, FusedGroup
from ..symbolic import FloorDiv, hint, is_static, texpr
from . import triton_ops
from .common import CSEVar, IndentedBuffer, Kernel, column_load_bytes, compute_dtype, next_power_of_2, triton_dtype
from .reduction_heuristics import (COLUMN_PERSISTENT_RMAX, column_meta, column_multi_pass_rmax,
                                   looped_meta, persistent_meta)
from .tiling import tile_blocks


_DEAD_ASSIGN = re.compile(r"\s*(tmp\d+) = ")  # a loop temporary's assignment line


@dataclasses.dataclass
class KernelSource:
    name: str
    source: str
    arg_names: list[str]  # buffer names passed as pointers, in order
    xnumel: int
    rnumel: int
    meta: dict[str, int]  # XBLOCK, RBLOCK, num_warps
    grid: tuple[Any, ...]  # ints, or sympy expressions over size symbols
    ynumel: int = 1  # > 1 for 2-D tiled pointwise kernels
    size_args: list[str] = dataclasses.field(default_factory=list)  # size symbols passed after the pointers
    int64: bool = False  # indexes in int64
    column_bytes: int | None = None  # a column reduction: element bytes of its x-contiguous loads

    def code_key(self) -> str:
        """The source without its comment lines and with its own name replaced: what the kernel
        computes, equal for the same kernel generated for another layer (whose comments name other
        graph nodes). Keys of shared kernels and of stored tuning choices."""
        body = "\n".join(line for line in self.source.split("\n") if not line.lstrip().startswith(("#", "//")))
        return re.sub(rf"\b{re.escape(self.name)}\b", "KERNEL", body)


def _literal(value: Any, dtype: torch.dtype) -> str:
    if isinstance(value, bool) or dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    return str(int(value))


def _symbolic_literal(value: sympy.Expr, dtype: torch.dtype) -> str:
    """A kernel-invariant value computed from size symbols / symbolic scalar inputs."""
    text = texpr(value)
    if dtype == torch.bool:
        return f"({text}) != 0"
    return f"({text})"


class TritonKernel(Kernel):
    """Generates one Triton kernel: the Triton target's ops handler (``CSEVar`` values)."""

    UNARY = triton_ops.UNARY
    BINARY = triton_ops.BINARY
    TARGET = "Triton"
    RINDEX = RINDEX
    DEAD_ASSIGN = _DEAD_ASSIGN

    def __init__(self, group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                 persistent_rmax: int, node_info: dict[str, tuple[str, str]], size_symbols: frozenset[str] = frozenset(),
                 force_persistent: bool = False):
        super().__init__(group, kernel_index, removed, dtypes, node_info, size_symbols)
        # A column reduction (loads contiguous along x, strided along r) gets wide-x tiles; it
        # holds whole columns only when they are short (reduction_heuristics.py).
        self.column_bytes = column_load_bytes(group, dtypes) if self.is_reduction else None
        if self.column_bytes is not None:
            persistent_rmax = min(persistent_rmax, COLUMN_PERSISTENT_RMAX)
        # A symbolic row length is looped (correct for every length); the wrapper may also get
        # a persistent variant (``force_persistent``, RBLOCK chosen per call) for short rows.
        self.persistent = not self.is_reduction or force_persistent or (
            is_static(self.rnumel) and self.rnumel <= persistent_rmax)
        self.rnumel_text = str(self.rnumel) if is_static(self.rnumel) else "rnumel"
        self.load_masks: list[str] = []  # conditions of enclosing mask_loads blocks
        # Symbolic sizes: decided on the example sizes; the wrapper checks each call's sizes.
        self.int64 = hint(self.xnumel * self.rnumel) >= 2 ** 31
        # Shape of kernel-invariant values: Triton broadcasts only between blocks of equal rank.
        self.unit = "[1, 1]" if (self.is_reduction or self.tiling) else "[1]"
        self.full_shape = "[YBLOCK, XBLOCK]" if self.tiling else "[XBLOCK]"

    def _assign(self, name: str, expr: str, dtype: torch.dtype) -> str:
        return f"{name} = {expr}"

    def printer(self, expr: sympy.Expr) -> str:
        return texpr(expr)

    # ------------------------------------------------------------------ ops handler
    def _pointer(self, ptr: str, index: sympy.Expr, store: bool = False) -> tuple[str, str | None]:
        """Pointer expression and mask for an access at ``index``.

        Triton does not broadcast a pointer to its mask's shape, so the mask is built from the
        kernel variables the index uses; gathered (indirect) indices take the node's full shape.
        """
        text = f"{ptr} + ({self._index_str(index)})"
        names = {s.name for s in index.free_symbols} - self.size_symbols  # sizes are kernel-invariant
        if not names and not store:
            # One address for every lane: a unit block (not a 0-d scalar) keeps ranks uniform.
            return f"{text} + tl.zeros({self.unit}, tl.int32)", None
        partial_store = store and ("xindex" not in names or (self.tiling is not None and "yindex" not in names))
        if (names - {"xindex", "rindex", "yindex"}) or partial_store:
            # Gathered index, or a store whose address ignores a kernel axis (e.g. a full
            # reduction): give the pointer the node's shape so it matches the value and mask.
            if self.is_reduction:
                shape = "[XBLOCK, RBLOCK]" if "rmask" in self.mask else "[XBLOCK, 1]"
            else:
                shape = self.full_shape
            text = f"tl.broadcast_to({text}, {shape})"
            return text, self.mask
        parts = [m for m, n in (("rmask", "rindex"), ("ymask", "yindex"), ("xmask", "xindex")) if n in names]
        return text, " & ".join(parts)

    def _load_expr(self, name: str, index: sympy.Expr) -> tuple[str, torch.dtype]:
        ptr = self.inputs.setdefault(name, f"in_ptr{len(self.inputs)}")
        pointer, mask = self._pointer(ptr, index)
        if self.load_masks:
            # Lanes where a caller's condition is false skip memory (ops_handler.loads_masked_by).
            # The pointer takes the node's shape so that the condition's shape always fits.
            pointer, mask = self._pointer(ptr, index, store=True)
            if not pointer.startswith("tl.broadcast_to("):
                pointer = f"tl.broadcast_to({pointer}, {self._node_shape()})"
            mask = " & ".join([*([mask] if mask else []), *(f"({c})" for c in self.load_masks)])
        dtype = self.dtypes[name]
        mask_text = f", {mask}, other=0" if mask else ""
        expr = f"tl.load({pointer}{mask_text})"
        cdt = compute_dtype(dtype)
        if cdt != dtype:
            expr += f".to({triton_dtype(cdt)})"
        return expr, cdt

    @contextlib.contextmanager
    def mask_loads(self, cond: CSEVar) -> Iterator[None]:
        """Loads inside skip memory where ``cond`` is false (see ``ops_handler.loads_masked_by``)."""
        self.load_masks.append(str(cond))
        try:
            yield
        finally:
            self.load_masks.pop()

    def _node_shape(self) -> str:
        """The block shape of the node being generated (as ``_pointer`` gives gathered accesses)."""
        if self.is_reduction:
            return "[XBLOCK, RBLOCK]" if "rmask" in self.mask else "[XBLOCK, 1]"
        return self.full_shape

    def _store_line(self, name: str, index: sympy.Expr, value: CSEVar) -> None:
        ptr = self.outputs.setdefault(name, f"out_ptr{len(self.outputs)}")
        dtype = self.dtypes[name]
        val = str(value)
        if value.dtype != dtype:
            val = f"{val}.to({triton_dtype(dtype)})"
        pointer, mask = self._pointer(ptr, index, store=True)
        mask_text = f", {mask}" if mask else ""
        self._section(self.section).writeline(f"tl.store({pointer}, {val}{mask_text})")

    def atomic_add(self, name: str, index: sympy.Expr, value: CSEVar, valid: CSEVar | None) -> None:
        """A scatter-add's ``name[index] += value`` where ``valid`` (codegen/scatter.py)."""
        from .scatter import triton_atomic_add
        triton_atomic_add(self, name, index, value, valid)

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> CSEVar:
        cdt = compute_dtype(dtype)
        if isinstance(value, sympy.Basic) and not value.is_number:
            # A size or a symbolic scalar input: its symbols are kernel arguments.
            return self._emit(f"tl.full({self.unit}, 0, {triton_dtype(cdt)}) + {_symbolic_literal(value, cdt)}"
                              if cdt != torch.bool else f"tl.full({self.unit}, 0, tl.int1) | "
                              f"{_symbolic_literal(value, cdt)}", cdt)
        return self._emit(f"tl.full({self.unit}, {_literal(value, cdt)}, {triton_dtype(cdt)})", cdt)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CSEVar:
        text = texpr(expr)
        if not expr.free_symbols:
            return self.constant(int(expr), dtype)
        return self._emit(f"({text}).to({triton_dtype(dtype)})", dtype)

    def to_dtype(self, x: CSEVar, dtype: torch.dtype) -> CSEVar:
        cdt = compute_dtype(dtype)
        if dtype == torch.bool:
            return x if x.dtype == torch.bool else self._emit(f"{x} != 0", torch.bool)
        if cdt != dtype:
            # Round to the narrow type (as eager would) but keep computing in fp32.
            return self._emit(f"{x}.to({triton_dtype(dtype)}).to({triton_dtype(cdt)})", cdt)
        if x.dtype == dtype:
            return x
        return self._emit(f"{x}.to({triton_dtype(dtype)})", dtype)

    def where(self, cond: CSEVar, a: CSEVar, b: CSEVar) -> CSEVar:
        return self._emit(f"tl.where({cond}, {a}, {b})", torch.promote_types(a.dtype, b.dtype))

    def indirect_indexing(self, value: CSEVar, size: int) -> sympy.Symbol:
        return sympy.Symbol(value.name, integer=True, nonnegative=True)

    # ------------------------------------------------------------------ reductions
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType,
                  value: CSEVar) -> CSEVar:
        vdt = value.dtype
        tdt = triton_dtype(vdt)
        out_dt = torch.int64 if reduction_type in ("argmax", "argmin") else (
            torch.bool if reduction_type in ("any", "all") else vdt)
        if self.persistent:
            return self._persistent_reduction(reduction_type, value, vdt, tdt, out_dt)
        return self._looped_reduction(reduction_type, value, vdt, tdt, out_dt)

    def _identity(self, rtype: ReductionType, dtype: torch.dtype) -> str:
        if rtype in ("sum", "m2", "any"):
            return "0"
        if rtype == "all":
            return "1"
        if rtype in ("max", "argmax"):
            return 'float("-inf")' if dtype.is_floating_point else str(torch.iinfo(dtype).min if dtype != torch.bool else 0)
        if rtype in ("min", "argmin"):
            return 'float("inf")' if dtype.is_floating_point else str(torch.iinfo(dtype).max if dtype != torch.bool else 1)
        raise NotImplementedError(f"reduction {rtype}")

    def _persistent_reduction(self, rtype: ReductionType, value: CSEVar, vdt: torch.dtype, tdt: str,
                              out_dt: torch.dtype) -> CSEVar:
        full = self._emit(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])", vdt)
        mask = "rmask & xmask"
        fp = vdt.is_floating_point
        if rtype == "sum":
            m = self._emit(f"tl.where({mask}, {full}, 0)", vdt)
            return self._emit(f"tl.sum({m}, 1)[:, None]", vdt)
        if rtype in ("any", "all"):
            ident = self._identity(rtype, vdt)
            m = self._emit(f"tl.where({mask}, ({full} != 0).to(tl.int8), {ident})", torch.int8)
            fn = "tl.max" if rtype == "any" else "tl.min"
            return self._emit(f"{fn}({m}, 1)[:, None] != 0", torch.bool)
        if rtype == "m2":
            # The same temporaries as a plain sum, so a mean of the same row (layer norm's
            # var_mean) shares this reduction instead of running a second one.
            m = self._emit(f"tl.where({mask}, {full}, 0)", vdt)
            s = self._emit(f"tl.sum({m}, 1)[:, None]", vdt)
            count = f"{float(self.rnumel)!r}" if is_static(self.rnumel) else "rnumel"
            mean = self._emit(f"{s} / {count}", vdt)
            d = self._emit(f"tl.where({mask}, {full} - {mean}, 0)", vdt)
            return self._emit(f"tl.sum({d} * {d}, 1)[:, None]", vdt)
        if rtype in ("max", "min"):
            ident = self._identity(rtype, vdt)
            fn = "tl.max" if rtype == "max" else "tl.min"
            m = self._emit(f"tl.where({mask}, {full}, {ident})", vdt)
            red = self._emit(f"{fn}({m}, 1)[:, None]", vdt)
            if not fp:
                return red
            # tl.max/tl.min may skip NaN; torch propagates it.
            nan = self._emit(f"tl.max(({m} != {m}).to(tl.int8), 1)[:, None] > 0", torch.bool)
            return self._emit(f'tl.where({nan}, float("nan"), {red})', vdt)
        if rtype in ("argmax", "argmin"):
            ident = self._identity(rtype, vdt)
            fn = "tl.max" if rtype == "argmax" else "tl.min"
            rfull = self._emit("tl.broadcast_to(rindex, [XBLOCK, RBLOCK])", torch.int32)
            if fp:
                isnan = self._emit(f"({full} != {full}) & {mask}", torch.bool)
                m = self._emit(f"tl.where({mask} & ~{isnan}, {full}, {ident})", vdt)
                best = self._emit(f"{fn}({m}, 1)[:, None]", vdt)
                idx = self._emit(f"tl.min(tl.where(({m} == {best}) & {mask}, {rfull}, {self.rnumel_text}), 1)[:, None]",
                                 torch.int32)
                nan_idx = self._emit(f"tl.min(tl.where({isnan}, {rfull}, {self.rnumel_text}), 1)[:, None]",
                                     torch.int32)
                idx = self._emit(f"tl.where({nan_idx} < {self.rnumel_text}, {nan_idx}, {idx})", torch.int32)
            else:
                m = self._emit(f"tl.where({mask}, {full}, {ident})", vdt)
                best = self._emit(f"{fn}({m}, 1)[:, None]", vdt)
                idx = self._emit(f"tl.min(tl.where(({m} == {best}) & {mask}, {rfull}, {self.rnumel_text}), 1)[:, None]",
                                 torch.int32)
            return self._emit(f"{idx}.to(tl.int64)", torch.int64)
        raise NotImplementedError(f"reduction {rtype}")

    def _looped_reduction(self, rtype: ReductionType, value: CSEVar, vdt: torch.dtype, tdt: str,
                          out_dt: torch.dtype) -> CSEVar:
        acc_buf, _post = self._section(f"acc{self.loop}"), self._section(f"post{self.loop}")
        k = self.counter
        self.counter += 1
        acc = f"acc{k}"
        mask = "rmask & xmask"
        if rtype == "sum" and vdt == torch.float32:
            online = self._online_exp_sum(value, acc)
            if online is not None:
                return online
        full = self._emit(f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])", vdt)
        fp = vdt.is_floating_point
        loop = self._section(f"loop{self.loop}")
        if rtype in ("sum", "any", "all"):
            ident = self._identity(rtype, vdt)
            if rtype == "sum":
                acc_buf.writeline(f"{acc} = tl.full([XBLOCK, RBLOCK], 0, {tdt})")
                loop.writeline(f"{acc} = {acc} + tl.where({mask}, {full}, 0)")
                return self._post(f"tl.sum({acc}, 1)[:, None]", vdt)
            acc_buf.writeline(f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, tl.int8)")
            fn = "tl.maximum" if rtype == "any" else "tl.minimum"
            loop.writeline(f"{acc} = tl.where({mask}, {fn}({acc}, ({full} != 0).to(tl.int8)), {acc})")
            red = "tl.max" if rtype == "any" else "tl.min"
            return self._post(f"{red}({acc}, 1)[:, None] != 0", torch.bool)
        if rtype in ("max", "min", "argmax", "argmin"):
            ident = self._identity(rtype, vdt)
            cmp = ">" if rtype in ("max", "argmax") else "<"
            acc_buf.writeline(f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, {tdt})")
            nan_take = f" | (({full} != {full}) & ({acc} == {acc}))" if fp else ""
            take = f"{acc}_take"
            loop.writeline(f"{take} = {mask} & (({full} {cmp} {acc}){nan_take})")
            loop.writeline(f"{acc} = tl.where({take}, {full}, {acc})")
            if rtype in ("argmax", "argmin"):
                acc_buf.writeline(f"{acc}_idx = tl.full([XBLOCK, RBLOCK], 0, tl.int64) + {self.rnumel_text}")
                loop.writeline(f"{acc}_idx = tl.where({take}, tl.broadcast_to(rindex, [XBLOCK, RBLOCK]).to(tl.int64), "
                               f"{acc}_idx)")
            fn = "tl.max" if cmp == ">" else "tl.min"
            best = self._post(f"{fn}({acc}, 1)[:, None]", vdt)
            if fp:
                nan = self._post(f"tl.max(({acc} != {acc}).to(tl.int8), 1)[:, None] > 0", torch.bool)
                best = self._post(f'tl.where({nan}, float("nan"), {best})', vdt)
            if rtype in ("max", "min"):
                if rtype == "max" and vdt == torch.float32:
                    self.max_of[best.name] = (self.loop, value.name)
                return best
            hit = f"({acc} == {best})" + (f" | (({acc} != {acc}) & ({best} != {best}))" if fp else "")
            return self._post(f"tl.min(tl.where({hit}, {acc}_idx, {self.rnumel_text}), 1)[:, None]", torch.int64)
        if rtype == "m2":
            acc_buf.writeline(f"{acc}_mean = tl.zeros([XBLOCK, RBLOCK], {tdt})")
            acc_buf.writeline(f"{acc}_m2 = tl.zeros([XBLOCK, RBLOCK], {tdt})")
            acc_buf.writeline(f"{acc}_n = tl.zeros([XBLOCK, RBLOCK], {tdt})")
            loop.writeline(f"{acc}_n = {acc}_n + tl.where({mask}, 1.0, 0.0)")
            loop.writeline(f"{acc}_delta = {full} - {acc}_mean")
            loop.writeline(f"{acc}_mean = tl.where({mask}, {acc}_mean + {acc}_delta / tl.maximum({acc}_n, 1.0), "
                           f"{acc}_mean)")
            loop.writeline(f"{acc}_m2 = tl.where({mask}, {acc}_m2 + {acc}_delta * ({full} - {acc}_mean), {acc}_m2)")
            # Combine the per-lane (count, mean, M2) triples: Chan et al.'s parallel formula.
            total = self._post(f"tl.sum({acc}_n, 1)[:, None]", vdt)
            mean = self._post(f"tl.sum({acc}_mean * {acc}_n, 1)[:, None] / tl.maximum({total}, 1.0)", vdt)
            return self._post(
                f"tl.sum({acc}_m2 + {acc}_n * ({acc}_mean - {mean}) * ({acc}_mean - {mean}), 1)[:, None]", vdt)
        raise NotImplementedError(f"reduction {rtype}")

    def _online_exp_sum(self, value: CSEVar, acc: str) -> CSEVar | None:
        """``sum(exp(v - max(v)))`` in a later loop than ``max(v)``: fold it into the max's loop.

        Each lane keeps a running max ``m`` and ``s = sum exp(v - m)``, rescaled by
        ``exp(m_old - m_new)`` when the max grows; the lanes combine as
        ``sum(s * exp(m - M))``. The row is then read once for both (softmax/log_softmax/
        cross_entropy over rows too long to hold in registers). Rows whose max is NaN or
        +-inf get NaN, as the two-pass formula gives in eager.
        """
        section, expr = self.defs.get(value.name, ("", ""))
        exp = re.fullmatch(r"tl\.exp\((tmp\d+)\)", expr)
        if not section.startswith("loop") or exp is None:
            return None
        diff = re.fullmatch(r"(tmp\d+) - (tmp\d+)", self.defs.get(exp.group(1), ("", ""))[1])
        if diff is None or diff.group(2) not in self.max_of:
            return None
        j, src = self.max_of[diff.group(2)]
        if j >= self.loop or self._canonical(diff.group(1)) != self._canonical(src):
            return None
        big = diff.group(2)
        ninf = 'float("-inf")'
        self._section(f"acc{j}").writelines([f"{acc}_m = tl.full([XBLOCK, RBLOCK], {ninf}, tl.float32)",
                                             f"{acc}_s = tl.zeros([XBLOCK, RBLOCK], tl.float32)"])
        self._section(f"loop{j}").writelines([
            f"{acc}_x = tl.where(rmask & xmask, tl.broadcast_to({src}, [XBLOCK, RBLOCK]), {ninf})",
            f"{acc}_new = tl.maximum({acc}_m, {acc}_x)",
            f"{acc}_empty = {acc}_new == {ninf}",
            f"{acc}_s = {acc}_s * tl.where({acc}_empty, 0.0, tl.exp({acc}_m - {acc}_new)) + "
            f"tl.where({acc}_empty, 0.0, tl.exp({acc}_x - {acc}_new))",
            f"{acc}_m = {acc}_new",
        ])
        var = CSEVar(f"tmp{self.counter}", torch.float32)
        self.counter += 1
        self._section(f"post{j}").writelines([
            f"{var.name} = tl.sum(tl.where({acc}_m == {ninf}, 0.0, {acc}_s * tl.exp({acc}_m - {big})), 1)[:, None]",
            f'{var.name} = tl.where(({big} != {big}) | (tl.abs({big}) == float("inf")), float("nan"), {var.name})',
        ])
        return var

    # ------------------------------------------------------------------ kernel assembly
    def source(self) -> KernelSource:
        self.codegen_nodes()
        if self.is_reduction and not self.persistent:
            self._drop_dead_loop_temporaries()
        name = self.kernel_name()
        meta = self._launch_meta()
        body = "\n".join(line for sec in self.sections.values() for line in sec.lines)
        size_args = sorted(n for n in self.size_symbols if re.search(rf"\b{n}\b", body))
        params = [*self.inputs.values(), *self.outputs.values(), *size_args] + (["ynumel"] if self.tiling else []) \
            + ["xnumel"]
        if self.is_reduction:
            params.append("rnumel")
        params += (["YBLOCK: tl.constexpr"] if self.tiling else []) + ["XBLOCK: tl.constexpr"]
        params += ["RBLOCK: tl.constexpr"] if self.is_reduction else []
        code = IndentedBuffer()
        code.writeline("@triton.jit")
        code.writeline(f"def {name}({', '.join(params)}):")
        with code.indent():
            for line in self._origin_comments():
                code.writeline(line)
            if self.tiling is not None:
                code.writeline("yoffset = tl.program_id(1) * YBLOCK")
                code.writeline(f"yindex = yoffset + tl.arange(0, YBLOCK)[:, None]{self._i64()}")
                code.writeline("ymask = yindex < ynumel")
                code.writeline("xoffset = tl.program_id(0) * XBLOCK")
                code.writeline(f"xindex = xoffset + tl.arange(0, XBLOCK)[None, :]{self._i64()}")
                code.writeline("xmask = xindex < xnumel")
            elif self.is_reduction:
                code.writeline("xoffset = tl.program_id(0) * XBLOCK")
                code.writeline(f"xindex = xoffset + tl.arange(0, XBLOCK)[:, None]{self._i64()}")
                code.writeline("xmask = xindex < xnumel")
            else:
                code.writeline("xoffset = tl.program_id(0) * XBLOCK")
                code.writeline(f"xindex = xoffset + tl.arange(0, XBLOCK){self._i64()}")
                code.writeline("xmask = xindex < xnumel")
            if self.is_reduction and self.persistent:
                code.writeline("rindex = tl.arange(0, RBLOCK)[None, :]")
                code.writeline("rmask = rindex < rnumel")
            code.writelines(self.sections["pre"].lines)
            for i in range(self.num_loops if self.is_reduction and not self.persistent else 0):
                code.writelines(self._section(f"acc{i}").lines)
                if not self._section(f"loop{i}").lines:  # its work moved to an earlier loop
                    code.writelines(self._section(f"post{i}").lines)
                    continue
                # The trip count is a literal (shapes are static per kernel): Triton 3.6's
                # interpreter passes int arguments as 1-element arrays that ``range`` rejects,
                # and a compile-time bound lets the compiler drop the loop's bound checks.
                code.writeline(f"for roffset in range(0, {self.rnumel_text}, RBLOCK):")
                with code.indent():
                    code.writeline(f"rindex = roffset + tl.arange(0, RBLOCK)[None, :]{self._i64()}")
                    code.writeline("rmask = rindex < rnumel")
                    code.writelines(self._section(f"loop{i}").lines)
                code.writelines(self._section(f"post{i}").lines)
        arg_names = [*self.inputs.keys(), *self.outputs.keys()]
        if self.tiling is not None:
            t = self.tiling
            grid: tuple[Any, ...] = (-(-t.xnumel // meta["XBLOCK"]), -(-t.ynumel // meta["YBLOCK"]))
            return KernelSource(name, code.getvalue(), arg_names, t.xnumel, self.rnumel, meta, grid, t.ynumel,
                                size_args, self.int64)
        if is_static(self.xnumel):
            grid = (-(-self.xnumel // meta["XBLOCK"]),)
        else:
            grid = (FloorDiv(self.xnumel + meta["XBLOCK"] - 1, meta["XBLOCK"]),)
        return KernelSource(name, code.getvalue(), arg_names, self.xnumel, self.rnumel, meta, grid, 1, size_args,
                            self.int64, self.column_bytes)

    def _i64(self) -> str:
        return ".to(tl.int64)" if self.int64 else ""

    def _launch_meta(self) -> dict[str, int]:
        X, R = hint(self.xnumel), hint(self.rnumel)  # symbolic sizes: tuned for the example sizes
        itemsize = min((self.dtypes[n].itemsize for n in [*self.inputs, *self.outputs]), default=4)
        if self.tiling is not None:
            # Rows of >= 128 bytes of the narrowest element the kernel moves (codegen/tiling.py).
            yblock, xblock, warps = tile_blocks(self.tiling, itemsize)
            return {"YBLOCK": yblock, "XBLOCK": xblock, "num_warps": warps}
        if not self.is_reduction:
            xblock = min(1024, next_power_of_2(X))
            # 16 bytes per thread of the narrowest element moved, so its loads and stores are
            # 128-bit: 4 fp32 or 8 bf16 values. With 4 bf16 values per thread (8 warps for 1024)
            # a bf16 GELU over [4096,16384] ran 114 us against eager's 94 on an H100.
            per_thread = min(8, max(4, 16 // itemsize))
            return {"XBLOCK": xblock, "num_warps": max(1, min(8, xblock // (32 * per_thread)))}
        if self.column_bytes is not None:
            return column_meta(X, R, self.persistent, self.column_bytes)
        if self.persistent:
            return persistent_meta(X, R)
        return looped_meta(X, R)

    def row_passes(self) -> int:
        """How many times a looped kernel reads its rows: its loops that still hold work
        (a loop whose reductions moved into an earlier one, e.g. online log-sum-exp, is empty)."""
        return sum(1 for i in range(self.num_loops) if self._section(f"loop{i}").lines)


def generate_kernel(group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                    persistent_rmax: int, node_info: dict[str, tuple[str, str]],
                    multi_pass_rmax: int = 0, size_symbols: frozenset[str] = frozenset(),
                    force_persistent: bool = False) -> KernelSource:
    kernel = TritonKernel(group, kernel_index, removed, dtypes, persistent_rmax, node_info, size_symbols,
                          force_persistent)
    source = kernel.source()
    if force_persistent:
        return source
    if kernel.column_bytes is not None:
        # Whole columns in registers only while a coalesced tile (>= 128-byte rows) fits.
        multi_pass_rmax = min(multi_pass_rmax, column_multi_pass_rmax(kernel.column_bytes))
    if kernel.is_reduction and not kernel.persistent and kernel.row_passes() > 1 and is_static(kernel.rnumel) \
            and kernel.rnumel <= multi_pass_rmax:
        # Several passes over each row (statistics, then the normalising pass) would read it
        # from memory once per pass: hold the row in registers instead and read it once. A
        # kernel whose passes were folded into one loop (online log-sum-exp) keeps its loop:
        # measured faster than a 32768-wide register block (docs/performance.md).
        return TritonKernel(group, kernel_index, removed, dtypes, kernel.rnumel, node_info, size_symbols,
                            force_persistent=True).source()
    return source
