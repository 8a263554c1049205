"""Reductions of the C++ target: accumulators, their loops' ``omp simd`` clauses, finalisation.

Mixed into :class:`~pyjit.backend.codegen.cpp.CppKernel`. Two loop shapes:

- **Rows** (the default): each row is reduced by one thread in ``rindex`` loops. An fp32 sum
  is blocked: the row loop is walked in chunks of ``SUM_BLOCK`` elements, each summed by a
  plain fp32 ``omp simd`` reduction (every vector lane adds ``SUM_BLOCK / width`` values), and
  each chunk's sum is added to a double. The error stays that of a short fp32 sum whatever the
  row length, and no element is converted to double (a compensated per-lane sum measured
  slower: its lanes live in memory). Other sums (fp64, integers) keep one accumulator of their
  type; an fp16/bf16 sum is computed in fp32 like fp32.
- **Columns** (``CppKernel.column``, chosen by ``cpp.generate_cpp_kernel`` for a reduction whose
  loads are contiguous along the output index): blocks of ``COLUMN_BLOCK`` outputs; for each
  row ``rindex`` an ``omp simd`` loop over the block's outputs updates one accumulator per
  output (``acc[xl]``), so memory is read in order instead of one strided walk per output.
  fp32 sums are Kahan-compensated per output. argmax/argmin have no column form (the kernel
  is then generated in rows).

NaN and inf: a compensation term is reset to 0 when the running sum is not finite, so inf
stays inf and NaN stays NaN as in a plain sum; max/min carry NaN in a flag (the loop stays a
``reduction(max:...)``); variance is ``S2 - S1^2/n`` in double.
"""
from __future__ import annotations

import torch

from ..ops_handler import ReductionType
from ..symbolic import is_static
from .common import CSEVar, Kernel
from .cpp_ops import cexpr, cpp_type, literal

# Elements per fp32 block of a row sum: the row loop is walked in chunks of this many elements.
SUM_BLOCK = 512
# Outputs per block of a column reduction (accumulators of one block stay in L1).
COLUMN_BLOCK = 64


def kahan_update(s: str, c: str, value: str) -> str:
    """One compensated addition of ``value`` into sum ``s`` with compensation ``c`` (fp32)."""
    return (f"{{ float y_ = {value} - {c}; float t_ = {s} + y_; float d_ = (t_ - {s}) - y_; "
            f"{c} = (t_ - t_ == 0.0f) ? d_ : 0.0f; {s} = t_; }}")


class CppReductions(Kernel):
    """The C++ handler's ``reduction`` and the accumulator helpers it uses (the rest of the
    handler is :class:`~pyjit.backend.codegen.cpp.CppKernel`)."""

    column: bool
    column_refused: bool
    chunks: dict[int, int]

    def _clause(self, clause: str | None, loop: int | None = None) -> None:
        raise NotImplementedError

    def _online_exp_sum(self, value: CSEVar, acc: str) -> CSEVar | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ accumulators
    def _acc_decl(self, ctype: str, name: str, init: str) -> None:
        """Declare an accumulator in the current loop's ``acc`` section (one per output of the
        block in column mode)."""
        buf = self._section(f"acc{self.loop}")
        if self.column:
            buf.writeline(f"{ctype} {name}[{COLUMN_BLOCK}];")
            buf.writeline(f"for (int64_t l_ = 0; l_ < {COLUMN_BLOCK}; ++l_) {name}[l_] = {init};")
        else:
            buf.writeline(f"{ctype} {name} = {init};")

    def _acc(self, name: str) -> str:
        """The accumulator as the loop body and the post section see it."""
        return f"{name}[xl]" if self.column else name

    def _sum_fp32(self, acc: str, value: CSEVar, t: str, vdt: torch.dtype) -> CSEVar:
        loop = self._section(f"loop{self.loop}")
        if self.column:
            self._acc_decl("float", acc, "0.0f")
            self._acc_decl("float", f"{acc}_c", "0.0f")
            loop.writeline(kahan_update(f"{acc}[xl]", f"{acc}_c[xl]", str(value)))
            return self._post(f"static_cast<{t}>({acc}[xl] - {acc}_c[xl])", vdt)
        # Rows: blocks of SUM_BLOCK elements summed in fp32 (the simd lanes each add a few
        # dozen values), each block's sum added to a double: the rounding error no longer grows
        # with the row length, and the element loop stays a plain fp32 simd reduction.
        block = self.chunks.setdefault(self.loop, SUM_BLOCK)
        assert block <= SUM_BLOCK, block
        self._section(f"acc{self.loop}").writeline(f"double {acc} = 0;")
        self._section(f"chunk_pre{self.loop}").writeline(f"float {acc}_b = 0.0f;")
        loop.writeline(f"{acc}_b += {value};")
        self._clause(f"+:{acc}_b")
        self._section(f"chunk_post{self.loop}").writeline(f"{acc} += (double){acc}_b;")
        return self._post(f"static_cast<{t}>({acc})", vdt)

    # ------------------------------------------------------------------ the handler method
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType,
                  value: CSEVar) -> CSEVar:
        vdt = value.dtype
        t = cpp_type(vdt)
        fp = vdt.is_floating_point
        loop = self._section(f"loop{self.loop}")
        acc = f"acc{self.counter}"
        self.counter += 1
        a = self._acc(acc)
        if reduction_type == "sum":
            online = None if self.column else (
                self._online_exp_sum(value, acc) if vdt in (torch.float32, torch.float64) else None)
            if online is not None:
                return online
            if vdt == torch.float32:
                return self._sum_fp32(acc, value, t, vdt)
            at = "double" if fp else ("int64_t" if vdt == torch.bool else t)
            self._acc_decl(at, acc, "0")
            loop.writeline(f"{a} += {value};")
            self._clause(f"+:{acc}")
            return self._post(f"static_cast<{t}>({a})", vdt)
        if reduction_type in ("any", "all"):
            self._acc_decl("int", acc, "0" if reduction_type == "any" else "1")
            op = "|" if reduction_type == "any" else "&"
            loop.writeline(f"{a} {op}= ({value} != 0);")
            self._clause(f"{op}:{acc}")
            return self._post(f"{a} != 0", torch.bool)
        if reduction_type in ("max", "min"):
            cmp = ">" if reduction_type == "max" else "<"
            if fp:
                ident = f"-({t})INFINITY" if reduction_type == "max" else f"({t})INFINITY"
            else:
                info = torch.iinfo(vdt) if vdt != torch.bool else None
                ident = (literal(info.min if reduction_type == "max" else info.max, vdt) if info is not None
                         else ("false" if reduction_type == "max" else "true"))
            self._acc_decl(t, acc, ident)
            loop.writeline(f"{a} = {value} {cmp} {a} ? {value} : {a};")
            self._clause(f"{reduction_type}:{acc}")
            if not fp:
                return self._post(a, vdt)
            # NaN tracked apart so the loop stays a plain max/min reduction.
            self._acc_decl("int", f"{acc}_nan", "0")
            nan = self._acc(f"{acc}_nan")
            loop.writeline(f"{nan} |= ({value} != {value});")
            self._clause(f"|:{acc}_nan")
            best = self._post(f"{nan} ? ({t})NAN : {a}", vdt)
            if reduction_type == "max" and not self.column:
                self.max_of[best.name] = (self.loop, value.name)
            return best
        if reduction_type in ("argmax", "argmin"):
            if self.column:
                self.column_refused = True  # generated again in rows
            cmp = ">" if reduction_type == "argmax" else "<"
            acc_buf = self._section(f"acc{self.loop}")
            acc_buf.writeline(f"{t} {acc}_v = 0;")
            acc_buf.writeline(f"int64_t {acc} = -1;")
            nan = f" || ({value} != {value} && {acc}_v == {acc}_v)" if fp else ""
            loop.writeline(f"if ({acc} < 0 || {value} {cmp} {acc}_v{nan}) {{ {acc}_v = {value}; {acc} = rindex; }}")
            self._clause(None)
            return self._post(f"{acc} < 0 ? 0 : {acc}", torch.int64)
        if reduction_type == "m2":
            # Sum and sum of squares in double (exact squares of fp32 inputs), so the loop stays
            # an ``omp simd`` reduction: M2 = S2 - S1^2 / n loses digits only when |mean| / std
            # approaches 1e6 for fp32 data (Welford would cost the vectorisation).
            self._acc_decl("double", acc, "0")
            self._acc_decl("double", f"{acc}_sq", "0")
            sq = self._acc(f"{acc}_sq")
            loop.writeline(f"{a} += {value}; {sq} += (double){value} * (double){value};")
            self._clause(f"+:{acc},{acc}_sq")
            if is_static(self.rnumel):
                n = repr(float(max(self.rnumel, 1)))
            else:
                n = f"(double)pyjit_max<int64_t>({cexpr(self.rnumel)}, 1)"
            return self._post(f"static_cast<{t}>(pyjit_max<double>({sq} - {a} * {a} / {n}, 0.0))", vdt)
        raise NotImplementedError(f"reduction {reduction_type}")


__all__ = ["COLUMN_BLOCK", "SUM_BLOCK", "CppReductions", "kahan_update"]
