"""C++ kernel generation for CPU graphs: one ``extern "C"`` function per fused group.

``CppKernel`` is the C++ target's ops handler over the same loop IR and fused groups as
:class:`~pyjit.backend.codegen.triton.TritonKernel`, its sibling: both derive from
:class:`~pyjit.backend.codegen.common.Kernel` (placement of nodes into sections ``pre``, then
per reduction loop ``acc{i}`` / ``loop{i}`` / ``post{i}``; scoping; recomputation of values from
earlier loops). Pointwise ops come from ``cpp_ops.py``'s tables. Values are scalar C++
temporaries (``float tmp3 = ...;``, common subexpressions reused). Kernel shapes:

- pointwise: one flat loop over ``xindex`` (``#pragma omp parallel for simd`` above
  ``config.cpp_parallel_min`` elements, else ``#pragma omp simd``);
- transposes/permutes (``codegen/tiling.py`` chooses the split): 16x16 tiles over
  ``(yindex, xindex)`` so loads and stores both touch contiguous runs;
- reductions: an outer (OpenMP-parallel) loop over rows, each row reduced by one thread in as
  many ``rindex`` loops as the group needs, or, for a column reduction, blocks of outputs with
  rows outer (accumulators and the fp32 summation order: ``cpp_reductions.py``); max/min
  propagate NaN through a separate flag so the loop stays a ``#pragma omp simd reduction``;
  variance is ``S2 - S1^2/n`` in double; argmax/argmin keep the first extreme (first NaN wins).

fp16/bf16 are stored as ``uint16_t`` and computed in fp32 (round to nearest even on store).

Static graphs: sizes are literals and a kernel takes only data pointers. Symbolic sizes (a
dynamic-shape graph): the size symbols the kernel uses (``s0``...) are ``int64_t`` parameters
after the pointers (``double`` for a symbolic float scalar input), listed in
:attr:`CppKernelSource.size_args` in order; loop bounds, index expressions and reduction counts
are printed from sympy with those names (:func:`cexpr`). Nothing is specialised to the example
sizes: no 2-D tiling, no per-row value buffers (their length would be symbolic), and OpenMP
parallelism is decided per call (``if(parallel: ...)`` on the element count).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import sympy
import torch

from ...config import config
from ..scheduler import XINDEX, FusedGroup
from ..symbolic import FloorDiv, ModularIndexing, is_static, simplify_with_ranges, sym
from . import cpp_ops
from .common import CSEVar, IndentedBuffer, column_load_bytes, compute_dtype
from .cpp_ops import bound as _bound
from .cpp_ops import cexpr, cpp_type
from .cpp_ops import literal as _literal
from .cpp_ops import math_fn as _math
from .cpp_prelude import HEADER
from .cpp_reductions import COLUMN_BLOCK, CppReductions

X_OUTER, X_INNER = sym("x_outer"), sym("x_inner")  # a split pointwise loop (_inner_split)
# One definition of the generated body: ``<type> tmpN = <expr>;``.
_DEFINITION = re.compile(r"^\s*[\w:<>]+ (tmp\d+) = [^;]*;\s*$")

RINDEX_NAME = "rindex"
TILE = 16
# Rows up to this many elements keep expensive per-element values for later row loops
# (a stack buffer of at most 32 KiB per thread).
ROW_BUFFER_MAX = 8192
_EXPENSIVE = re.compile(r"pyjit_expf|pyjit_erff|pyjit_tanhf|__builtin_|/")

_DEAD_ASSIGN = re.compile(r"\s*[\w:]+ (tmp\d+) = ")  # a loop temporary's assignment line


# Column reductions (loads contiguous along the output index) walk rows outer and a block of
# outputs inner (cpp_reductions.py). Not part of the graph-cache key: flip it with a fresh
# PYJIT_CACHE_DIR.
COLUMN_REDUCTIONS = True

# Fold sum(exp(x - c)) into the row loop of max(x) (see CppKernel._online_exp_sum). Off by
# default: measured slower or equal on the CPU of docs/performance.md (rows are walked again
# from cache, and softmax then computes exp twice per element). Not part of the graph-cache
# key: flip it with a fresh PYJIT_CACHE_DIR.
ONLINE_EXP_SUM = False
# Elements per chunk of an online row loop: the chunk's max is found first (in the row loop,
# the values kept in a stack buffer), then its exp-sum is rescaled into the running sum.
ONLINE_CHUNK = 256


def _chunk(rnumel: Any) -> int:
    if not is_static(rnumel) or int(rnumel) >= ONLINE_CHUNK:
        return ONLINE_CHUNK
    return max(8, int(rnumel))


def _in_dependency_order(group: FusedGroup) -> FusedGroup:
    """The group with its nodes ordered so that every node follows the in-group nodes it reads.

    Creation order is not always dependency order: a value realized into a buffer after a
    reader's loader was made (its second reader appeared later) gets a later index, and the
    placement of nodes into row loops needs producers first (native_layer_norm over a whole
    tensor: mean, rstd = f(var), then the normalized output).
    """
    names = {n.name: n for n in group.nodes}
    order: list[Any] = []
    done: set[str] = set()

    def visit(node: Any, stack: frozenset[str]) -> None:
        if node.name in done or node.name in stack:
            return
        for dep in sorted(node.read_names):
            if dep in names and dep != node.name:
                visit(names[dep], stack | {node.name})
        done.add(node.name)
        order.append(node)

    for node in group.nodes:
        visit(node, frozenset())
    return group if order == group.nodes else FusedGroup(order, group.group)


@dataclasses.dataclass
class CppKernelSource:
    name: str
    source: str
    arg_names: list[str]  # buffer names passed as data pointers, in order
    # Size symbols passed after the pointers, in order, with their C types (int64_t, double).
    size_args: list[str] = dataclasses.field(default_factory=list)
    size_types: list[str] = dataclasses.field(default_factory=list)


class CppKernel(CppReductions):
    """Generates one C++ kernel: the C++ target's ops handler (``CSEVar`` values)."""

    UNARY = cpp_ops.UNARY
    BINARY = cpp_ops.BINARY
    TARGET = "C++"
    COMMENT = "//"
    RINDEX = sym(RINDEX_NAME)
    DEAD_ASSIGN = _DEAD_ASSIGN

    def __init__(self, group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                 node_info: dict[str, tuple[str, str]], size_symbols: frozenset[str] = frozenset(),
                 float_symbols: frozenset[str] = frozenset(), inner: int | None = None, column: bool = False):
        """``inner``: a pointwise kernel walks ``xindex = x_outer * inner + x_inner`` in two
        nested loops (see :func:`_inner_split`); None: one flat loop. Every reduction row is
        walked by explicit ``rindex`` loops (so a symbolic row length needs nothing special).
        ``column``: a reduction walked in blocks of outputs, rows outer (``cpp_reductions.py``)."""
        super().__init__(_in_dependency_order(group), kernel_index, removed, dtypes, node_info, size_symbols)
        self.float_symbols = float_symbols
        self.inner = inner
        self.index_log: list[sympy.Expr] = []  # every index this kernel printed (for _inner_split)
        # Reduction clauses of each rindex loop; None once a loop holds a reduction that cannot
        # be written as one (argmax/argmin), which then runs without ``omp simd``.
        self.simd: dict[int, list[str] | None] = {}
        # Row loops walked in chunks (an online exp-sum lives there): loop -> chunk length.
        self.chunks: dict[int, int] = {}
        self.online = False  # an exp-sum was folded into its max's loop
        self.column = column
        self.column_refused = False  # a reduction with no column form was met (argmax/argmin)

    def _assign(self, name: str, expr: str, dtype: torch.dtype) -> str:
        return f"{cpp_type(dtype)} {name} = {expr};"

    def printer(self, expr: sympy.Expr) -> str:
        return cexpr(expr)

    def _split_index_str(self, index: sympy.Expr) -> str:
        """A load's index in an inner-split loop, its part that does not depend on ``x_inner``
        (a padded or clamped row offset: ``min(31, max(0, x_outer % 34 - 1))``) computed into a
        variable of its own, which :meth:`_hoisted` moves before the inner loop: an index with
        min/max/div/mod per element keeps gcc from vectorizing the load."""
        text = self._index_str(index)
        if self.inner is None:
            return text
        split = simplify_with_ranges(index.subs(XINDEX, X_OUTER * self.inner + X_INNER),
                                     {X_OUTER: int(self.xnumel) // self.inner, X_INNER: self.inner})
        terms = sympy.Add.make_args(split)
        outer = [t for t in terms if X_INNER not in t.free_symbols]
        inner = [t for t in terms if X_INNER in t.free_symbols]
        outer_expr = sympy.Add(*outer)
        if not inner or not outer_expr.free_symbols or outer_expr.is_Symbol:
            return text
        var = self._emit(cexpr(outer_expr), torch.int64)
        return f"{cexpr(sympy.Add(*inner))} + {var.name}"

    @staticmethod
    def _hoisted(lines: list[str]) -> tuple[list[str], list[str]]:
        """``lines`` of an inner loop body split into the definitions that depend on neither
        ``x_inner`` nor another kept line (computed once per outer step) and the rest, in order.
        Loads read inputs the kernel never writes (``const __restrict__``), so reading them before
        the loop gives the same values."""
        if any(line.rstrip().endswith("{") or line.lstrip().startswith("}") for line in lines):
            return [], lines  # a block: its definitions are scoped to it
        hoisted: list[str] = []
        kept: list[str] = []
        inner_vars: set[str] = set()
        for line in lines:
            m = _DEFINITION.match(line)
            names = set(re.findall(r"\btmp\d+\b", line))
            if m is None or "x_inner" in line or "out_ptr" in line or (names - {m.group(1)}) & inner_vars:
                kept.append(line)
                if m is not None:
                    inner_vars.add(m.group(1))
                else:
                    inner_vars.update(names)
                continue
            hoisted.append(line)
        return hoisted, kept

    def _index_str(self, index: sympy.Expr) -> str:
        self.index_log.append(index)
        if self.inner is not None:
            split = index.subs(XINDEX, X_OUTER * self.inner + X_INNER)
            return cexpr(simplify_with_ranges(split, {X_OUTER: int(self.xnumel) // self.inner, X_INNER: self.inner}))
        return super()._index_str(index)

    def _clause(self, clause: str | None, loop: int | None = None) -> None:
        """Record the ``omp simd`` reduction clause loop ``loop`` (default: the current one)
        needs (None: not simd)."""
        loop = self.loop if loop is None else loop
        current = self.simd.setdefault(loop, [])
        if clause is None or current is None:
            self.simd[loop] = None
        else:
            current.append(clause)

    # ------------------------------------------------------------------ ops handler
    def _load_expr(self, name: str, index: sympy.Expr) -> tuple[str, torch.dtype]:
        ptr = self.inputs.setdefault(name, f"in_ptr{len(self.inputs)}")
        dtype = self.dtypes[name]
        expr = f"{ptr}[{self._split_index_str(index)}]"
        if dtype == torch.bfloat16:
            expr = f"pyjit_bf16_to_f32({expr})"
        elif dtype == torch.float16:
            expr = f"pyjit_f16_to_f32({expr})"
        return expr, compute_dtype(dtype)

    def _store_line(self, name: str, index: sympy.Expr, value: CSEVar) -> None:
        ptr = self.outputs.setdefault(name, f"out_ptr{len(self.outputs)}")
        dtype = self.dtypes[name]
        val = str(value)
        if dtype in (torch.bfloat16, torch.float16):
            # A value just rounded to the stored type (a cast) is stored from the unrounded one:
            # rounding twice to the same type changes nothing, and saves a conversion pair.
            fn = "bf16" if dtype == torch.bfloat16 else "f16"
            rounded = re.fullmatch(rf"pyjit_round_{fn}\(static_cast<float>\((tmp\d+)\)\)",
                                   self.defs.get(val, ("", ""))[1])
            if rounded is not None and self.defs.get(rounded.group(1), ("", ""))[0] == self.defs[val][0]:
                val = rounded.group(1)
            val = f"pyjit_f32_to_{fn}({val})"
        elif dtype == torch.bool and value.dtype != torch.bool:
            val = f"({val} != 0)"
        elif value.dtype != dtype:
            val = f"static_cast<{cpp_type(dtype)}>({val})"
        self._section(self.section).writeline(f"{ptr}[{self._index_str(index)}] = {val};")

    def atomic_add(self, name: str, index: sympy.Expr, value: CSEVar, valid: CSEVar | None) -> None:
        """A scatter-add's ``name[index] += value`` where ``valid``: serial (codegen/scatter.py)."""
        from .scatter import cpp_atomic_add
        cpp_atomic_add(self, name, index, value, valid)

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> CSEVar:
        cdt = compute_dtype(dtype)
        if isinstance(value, sympy.Basic) and not value.is_number:
            # A size or a symbolic scalar input: its symbols are kernel parameters.
            text = cexpr(value)
            return self._emit(f"({text}) != 0" if cdt == torch.bool else f"static_cast<{cpp_type(cdt)}>({text})", cdt)
        return self._emit(_literal(value, cdt), cdt)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CSEVar:
        if not expr.free_symbols:
            return self.constant(int(expr), dtype)
        cdt = compute_dtype(dtype)
        return self._emit(f"static_cast<{cpp_type(cdt)}>({self._index_str(expr)})", cdt)

    def to_dtype(self, x: CSEVar, dtype: torch.dtype) -> CSEVar:
        if dtype == torch.bool:
            return x if x.dtype == torch.bool else self._emit(f"{x} != 0", torch.bool)
        if dtype == torch.bfloat16:
            return self._emit(f"pyjit_round_bf16(static_cast<float>({x}))", torch.float32)
        if dtype == torch.float16:
            return self._emit(f"pyjit_round_f16(static_cast<float>({x}))", torch.float32)
        if x.dtype == dtype:
            return x
        return self._emit(f"static_cast<{cpp_type(dtype)}>({x})", dtype)

    def where(self, cond: CSEVar, a: CSEVar, b: CSEVar) -> CSEVar:
        dt = torch.promote_types(a.dtype, b.dtype)
        t = cpp_type(dt)
        return self._emit(f"{cond} ? ({t}){a} : ({t}){b}", dt)

    def indirect_indexing(self, value: CSEVar, size: int) -> sympy.Symbol:
        idx = self._emit(f"static_cast<int64_t>({value})", torch.int64)
        return sympy.Symbol(idx.name, integer=True, nonnegative=True)

    # ------------------------------------------------------------------ reductions
    def _online_exp_sum(self, value: CSEVar, acc: str) -> CSEVar | None:
        """``sum(exp(v - c))`` (``c`` constant per row) in a later loop than ``max(v)``: fold it
        into the max's loop (off unless ``ONLINE_EXP_SUM``).

        The max's loop is then walked in chunks (``self.chunks``): the row loop also finds the
        chunk's max ``cm`` and keeps the chunk's values in a stack buffer; after it, with
        ``new = max(m, cm)``, ``s = s * exp(m - new) + sum(exp(buf - new))`` (a vectorized loop
        over the buffer, from L1) and ``m = new``. One exp per element; chunks of only -inf
        leave ``s`` alone. After the row, ``sum = s * exp(m - c)``. ``c`` is the max (softmax,
        log_softmax, cross_entropy) or an expression of it (logsumexp's ``where(|max| == inf,
        0, max)``). A row whose max or ``c`` is NaN or +-inf takes the two-pass formula instead
        (a scalar loop: eager's NaN/inf results exactly). The sum's own loop is left with dead
        temporaries and disappears: softmax walks each row twice instead of 3 times;
        log_softmax, logsumexp and cross_entropy once for both statistics.
        """
        if not ONLINE_EXP_SUM:
            return None
        vdt = value.dtype
        section, expr = self.defs.get(value.name, ("", ""))
        exp = re.fullmatch(rf"{re.escape(_math('exp', vdt))}\((tmp\d+)\)", expr)
        if not section.startswith("loop") or exp is None:
            return None
        diff = re.fullmatch(r"(tmp\d+) - (tmp\d+)", self.defs.get(exp.group(1), ("", ""))[1])
        if diff is None:
            return None
        x_text = self._canonical(diff.group(1))
        found = [(j, src, big) for big, (j, src) in self.max_of.items()
                 if j < self.loop and self.defs[src][0] == f"loop{j}" and self._canonical(src) == x_text]
        shift = self._row_constant(diff.group(2), found[0][0]) if found else None
        if shift is None:
            return None
        j, src, big = found[0]
        t = cpp_type(vdt)
        chunk = self.chunks.setdefault(j, _chunk(self.rnumel))
        ninf, fexp = f"-({t})INFINITY", _math("exp", vdt)
        m, s_, cm, new, buf = f"{acc}_m", f"{acc}_s", f"{acc}_cm", f"{acc}_new", f"{acc}_buf"
        self._section(f"acc{j}").writelines([f"{t} {m} = {ninf}, {buf}[{chunk}];", f"double {s_} = 0;"])
        self._section(f"chunk_pre{j}").writeline(f"{t} {cm} = {ninf};")
        self._clause(f"max:{cm}", j)
        self._section(f"loop{j}").writelines([f"{cm} = {src} > {cm} ? {src} : {cm};",
                                              f"{buf}[rindex - r0_{j}] = {src};"])
        self._section(f"chunk_post{j}").writelines([
            f"{t} {new} = {cm} > {m} ? {cm} : {m};",
            f"if ({new} != {ninf}) {{",
            f"    {t} {acc}_cs = 0;",
            f"    #pragma omp simd reduction(+:{acc}_cs)",
            f"    for (int64_t l = 0; l < rend_{j} - r0_{j}; ++l) {acc}_cs += {fexp}({buf}[l] - {new});",
            f"    {s_} = {s_} * (double){fexp}({m} - {new}) + (double){acc}_cs;",
            f"    {m} = {new};",
            "}",
        ])
        var = CSEVar(f"tmp{self.counter}", vdt)
        self.counter += 1
        c = f"{acc}_c"
        self._section(f"post{j}").writelines([
            f"{t} {c} = {shift};",
            f"double {acc} = 0;",
            f"if ({big} != {big} || __builtin_isinf({big}) || {c} != {c} || __builtin_isinf({c})) {{",
            "    // NaN or inf in the row or the shift: the two-pass formula, as eager computes it",
            f"    for (int64_t rindex = 0; rindex < {_bound(self.rnumel)}; ++rindex) {{",
            f"        {acc} += {fexp}(({x_text}) - {c});",
            "    }",
            f"}} else if ({m} != {ninf}) {{",
            f"    {acc} = {s_} * (double){fexp}({m} - {c});",
            "}",
            f"{t} {var.name} = static_cast<{t}>({acc});",
        ])
        self.defs[var.name] = (f"post{j}", var.name)
        self.online = True
        return var

    def _row_constant(self, name: str, j: int) -> str | None:
        """``name`` as an expression valid after row loop ``j`` (it reads no ``rindex`` and only
        values of earlier sections), else None."""
        text = self._canonical(name)
        if re.search(rf"\b{RINDEX_NAME}\b", text):
            return None
        visible = {"pre", *(f"post{k}" for k in range(j + 1))}
        for leaf in set(re.findall(r"\btmp\d+\b", text)):
            if self.defs.get(leaf, ("", ""))[0] not in visible:
                return None
        return text

    # ------------------------------------------------------------------ kernel assembly
    def _reuse_row_values(self) -> list[str]:
        """Keep expensive values of an earlier row loop in a per-row buffer for later loops.

        Softmax's normalising loop needs ``exp(x - max)`` again, which the sum loop already
        computed: the sum loop stores it to ``row_tmpN[rindex]`` (on the thread's stack) and the
        later loop reads it instead of recomputing. Matches use the expanded expression
        (``_canonical``), so only the same computation on the same row is shared. Returns the
        buffer declarations for the row body.
        """
        if not is_static(self.rnumel) or self.rnumel > ROW_BUFFER_MAX or self.num_loops < 2:
            return []  # a symbolic row length: the later loops recompute (no stack buffer of unknown size)
        assign = re.compile(r"(\s*)(\w+) (tmp\d+) = (.*);$")
        seen: dict[str, tuple[int, str, str]] = {}
        stored: set[str] = set()
        decls = []
        for i in range(self.num_loops):
            section = self._section(f"loop{i}")
            lines = []
            for line in section.lines:
                m = assign.match(line)
                if m is not None:
                    indent, ctype, name, expr = m.groups()
                    canon = self._canonical(name)
                    hit = seen.get(canon)
                    if hit is not None and hit[0] < i and _EXPENSIVE.search(expr):
                        loop, src, src_type = hit
                        if src not in stored:
                            stored.add(src)
                            decls.append(f"{src_type} row_{src}[{self.rnumel}];")
                            self._section(f"loop{loop}").writeline(f"row_{src}[rindex] = {src};")
                        lines.append(f"{indent}{ctype} {name} = row_{src}[rindex];")
                        continue
                    seen.setdefault(canon, (i, name, ctype))
                lines.append(line)
            section.lines = lines
        return decls

    def column_form(self) -> bool:
        """Whether this column-mode kernel has the one shape column loops support: a single
        row loop, nothing before it, no reduction without a column form."""
        return not self.column_refused and self.num_loops == 1 and not self.sections["pre"].lines \
            and not self.chunks and not self.online

    def _column_loops(self, code: IndentedBuffer, threads: str, xbound: str, rbound: str) -> None:
        """Blocks of ``COLUMN_BLOCK`` outputs (one thread each); per row, an ``omp simd`` loop
        over the block's outputs updates their accumulators; then each output is finalised."""
        blocks = -(-int(self.xnumel) // COLUMN_BLOCK)
        if blocks > 1 and int(self.xnumel) * max(int(self.rnumel), 1) >= config.cpp_parallel_min:
            code.writeline(f"#pragma omp parallel for schedule(static){threads}")
        code.writeline(f"for (int64_t x0 = 0; x0 < {xbound}; x0 += {COLUMN_BLOCK}) {{")
        with code.indent():
            code.writeline(f"const int64_t xn = pyjit_min<int64_t>({COLUMN_BLOCK}, {xbound} - x0);")
            code.writelines(self._section("acc0").lines)
            code.writeline(f"for (int64_t rindex = 0; rindex < {rbound}; ++rindex) {{")
            code.writeline("    #pragma omp simd")
            code.writeline("    for (int64_t xl = 0; xl < xn; ++xl) {")
            code.writeline("        const int64_t xindex = x0 + xl;")
            with code.indent(2):
                code.writelines(self._section("loop0").lines)
            code.writelines(["    }", "}"])
            code.writeline("for (int64_t xl = 0; xl < xn; ++xl) {")
            code.writeline("    const int64_t xindex = x0 + xl;")
            with code.indent():
                code.writelines(self._section("post0").lines)
            code.writeline("}")
        code.writeline("}")

    def cpp_source(self) -> CppKernelSource:
        self.codegen_nodes()
        if self.column and not self.column_form():
            raise _NoColumnForm()
        if self.online:
            self._drop_dead_loop_temporaries()
        row_buffers = self._reuse_row_values() if self.is_reduction else []
        name = self.kernel_name()
        params = [f"const {cpp_type(self.dtypes[n])}* __restrict__ {p}" for n, p in self.inputs.items()]
        params += [f"{cpp_type(self.dtypes[n])}* __restrict__ {p}" for n, p in self.outputs.items()]
        size_args, size_types = self._size_params()
        params += [f"{t} {a}" for a, t in zip(size_args, size_types)]
        code = IndentedBuffer()
        code.writeline(f'extern "C" void {name}({", ".join(params)}) {{')
        with code.indent():
            code.writelines(self._origin_comments())
            threads = " num_threads(pyjit_threads)"
            if self.dynamic:
                # Symbolic sizes: parallel or not is decided per call, on the same rule.
                rn = max(int(self.rnumel), 1) if is_static(self.rnumel) else self.rnumel
                work = sympy.sympify(self.xnumel) * rn
                conds = [f"{cexpr(work)} >= {config.cpp_parallel_min}"]
                if not is_static(self.xnumel):
                    conds.append(f"{cexpr(self.xnumel)} > 1")
                parallel = not is_static(self.xnumel) or int(self.xnumel) > 1
                threads += f" if(parallel: {' && '.join(conds)})"
            else:
                work = self.xnumel * max(self.rnumel, 1)
                parallel = work >= config.cpp_parallel_min and self.xnumel > 1
            xbound, rbound = _bound(self.xnumel), _bound(self.rnumel)
            if self.tiling is not None:
                y, x = self.tiling.ynumel, self.tiling.xnumel
                if parallel:
                    code.writeline(f"#pragma omp parallel for collapse(2) schedule(static){threads}")
                code.writeline(f"for (int64_t y0 = 0; y0 < {y}; y0 += {TILE}) {{")
                code.writeline(f"    for (int64_t x0 = 0; x0 < {x}; x0 += {TILE}) {{")
                code.writeline(f"        for (int64_t yindex = y0; yindex < pyjit_min<int64_t>(y0 + {TILE}, {y}); "
                               "++yindex) {")
                code.writeline("            #pragma omp simd")
                code.writeline(f"            for (int64_t xindex = x0; xindex < pyjit_min<int64_t>(x0 + {TILE}, {x}); "
                               "++xindex) {")
                with code.indent(4):
                    code.writelines(self.sections["pre"].lines)
                code.writelines(["            }", "        }", "    }", "}"])
            elif not self.is_reduction and self.inner is not None:
                # Per-channel (broadcast) indices depend on x_outer only: computed once per outer
                # step, while the inner loop is contiguous and vectorizes (no 64-bit div/mod
                # per element, which has no SIMD form).
                if parallel:
                    code.writeline(f"#pragma omp parallel for schedule(static){threads}")
                code.writeline(f"for (int64_t x_outer = 0; x_outer < {int(self.xnumel) // self.inner}; ++x_outer) {{")
                hoisted, body = self._hoisted(self.sections["pre"].lines)
                with code.indent():
                    code.writelines(hoisted)
                code.writeline("    #pragma omp simd")
                code.writeline(f"    for (int64_t x_inner = 0; x_inner < {self.inner}; ++x_inner) {{")
                with code.indent(2):
                    code.writelines(body)
                code.writelines(["    }", "}"])
            elif not self.is_reduction and self.group.is_scatter:
                # Read-modify-write of targets several sources may share: one thread, no simd.
                code.writeline(f"for (int64_t xindex = 0; xindex < {xbound}; ++xindex) {{")
                with code.indent():
                    code.writelines(self.sections["pre"].lines)
                code.writeline("}")
            elif not self.is_reduction:
                code.writeline(f"#pragma omp parallel for simd schedule(static){threads}" if parallel
                               else "#pragma omp simd")
                code.writeline(f"for (int64_t xindex = 0; xindex < {xbound}; ++xindex) {{")
                with code.indent():
                    code.writelines(self.sections["pre"].lines)
                code.writeline("}")
            elif self.column:
                self._column_loops(code, threads, xbound, rbound)
            else:
                if parallel:
                    code.writeline(f"#pragma omp parallel for schedule(static){threads}")
                code.writeline(f"for (int64_t xindex = 0; xindex < {xbound}; ++xindex) {{")
                with code.indent():
                    code.writelines(row_buffers)
                    code.writelines(self.sections["pre"].lines)
                    for i in range(self.num_loops):
                        code.writelines(self._section(f"acc{i}").lines)
                        if self._section(f"loop{i}").lines:
                            self._row_loop(code, i, rbound)
                        code.writelines(self._section(f"post{i}").lines)
                code.writeline("}")
        code.writeline("}")
        return CppKernelSource(name, code.getvalue(), [*self.inputs.keys(), *self.outputs.keys()], size_args,
                               size_types)

    def _row_loop(self, code: IndentedBuffer, i: int, rbound: str) -> None:
        """Row loop ``i``: one ``rindex`` loop, or chunks of ``self.chunks[i]`` elements with the
        per-chunk code (``chunk_pre{i}``/``chunk_post{i}``) around the ``omp simd`` loop."""
        clauses = self.simd.get(i, [])
        pragma = None if clauses is None else "#pragma omp simd" + "".join(f" reduction({c})" for c in clauses)

        def element_loop(start: str, end: str) -> None:
            if pragma:
                code.writeline(pragma)
            code.writeline(f"for (int64_t rindex = {start}; rindex < {end}; ++rindex) {{")
            with code.indent():
                code.writelines(self._section(f"loop{i}").lines)
            code.writeline("}")

        lanes = self.chunks.get(i)
        if lanes is None:
            element_loop("0", rbound)
            return
        code.writeline(f"for (int64_t r0_{i} = 0; r0_{i} < {rbound}; r0_{i} += {lanes}) {{")
        with code.indent():
            code.writeline(f"const int64_t rend_{i} = pyjit_min<int64_t>(r0_{i} + {lanes}, {rbound});")
            code.writelines(self._section(f"chunk_pre{i}").lines)
            element_loop(f"r0_{i}", f"rend_{i}")
            code.writelines(self._section(f"chunk_post{i}").lines)
        code.writeline("}")

    def _size_params(self) -> tuple[list[str], list[str]]:
        """(size symbols the kernel's code uses, their C types), sorted by name."""
        if not self.size_symbols:
            return [], []
        sizes = [sympy.sympify(self.xnumel), sympy.sympify(self.rnumel)]
        used = {s.name for e in sizes for s in e.free_symbols}
        body = "\n".join(line for sec in self.sections.values() for line in sec.lines)
        used |= {n for n in self.size_symbols if re.search(rf"\b{re.escape(n)}\b", body)}
        names = sorted(used & set(self.size_symbols))
        if used - set(self.size_symbols):
            raise NotImplementedError(f"kernel sizes use unbound symbols {sorted(used - set(self.size_symbols))}")
        return names, ["double" if n in self.float_symbols else "int64_t" for n in names]


class _NoColumnForm(Exception):
    """A column-mode kernel met something column loops do not support."""


def generate_cpp_kernel(group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                        node_info: dict[str, tuple[str, str]], size_symbols: frozenset[str] = frozenset(),
                        float_symbols: frozenset[str] = frozenset()) -> CppKernelSource:
    if COLUMN_REDUCTIONS and not group.is_scatter and group.group[1] != 1 \
            and all(is_static(n) for n in group.group) and column_load_bytes(group, dtypes) is not None:
        # Loads contiguous along the outputs: walk rows outer, a block of outputs inner.
        try:
            return CppKernel(group, kernel_index, removed, dtypes, node_info, size_symbols, float_symbols,
                             column=True).cpp_source()
        except _NoColumnForm:
            pass
    kernel = CppKernel(group, kernel_index, removed, dtypes, node_info, size_symbols, float_symbols)
    source = kernel.cpp_source()
    inner = None if group.is_scatter else _inner_split(kernel)
    if inner is None:
        return source
    return CppKernel(group, kernel_index, removed, dtypes, node_info, size_symbols, float_symbols,
                     inner).cpp_source()


# Shortest inner loop worth splitting for: below it the outer loop's overhead dominates.
_MIN_INNER = 16


def _inner_split(kernel: CppKernel) -> int | None:
    """For a static pointwise kernel whose indices divide or reduce ``xindex`` (a per-channel
    load ``w[(xindex / HW) % C]``), the longest inner extent ``P`` (a trailing product of an
    iteration shape) such that with ``xindex = x_outer * P + x_inner`` no index divides or
    reduces ``x_inner``; None when the flat loop has no such index or no split removes them."""
    if kernel.is_reduction or kernel.tiling is not None or kernel.dynamic:
        return None

    def divides_or_mods(expr: sympy.Expr, var: sympy.Symbol) -> bool:
        return any(isinstance(t, (FloorDiv, ModularIndexing)) and var in t.free_symbols
                   for t in sympy.preorder_traversal(expr))

    exprs = [e for e in kernel.index_log if divides_or_mods(e, XINDEX)]
    if not exprs:
        return None
    xnumel = int(kernel.xnumel)
    candidates: set[int] = set()
    for node in kernel.group.nodes:
        sizes = [int(n) for n in node.sizes] if all(is_static(n) for n in node.sizes) else []
        acc = 1
        for n in reversed(sizes[1:]):
            acc *= n
            candidates.add(acc)
    for inner in sorted(candidates, reverse=True):
        if inner < _MIN_INNER or inner >= xnumel or xnumel % inner:
            continue
        ranges = {X_OUTER: xnumel // inner, X_INNER: inner}
        if not any(divides_or_mods(simplify_with_ranges(e.subs(XINDEX, X_OUTER * inner + X_INNER), ranges), X_INNER)
                   for e in exprs):
            return inner
    return None


def translation_unit(kernels: list[CppKernelSource]) -> str:
    """The one C++ source of a graph: shared helpers, then every kernel."""
    return HEADER + "".join("\n" + k.source for k in kernels)
