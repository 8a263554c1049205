"""Triton code for matmul templates (:class:`pyjit.backend.ir.MatmulTemplate`) and their epilogues.

A template group (scheduler.py) holds one matmul node plus the pointwise nodes fused into its
epilogue. The kernel is tiled: each program computes a ``[BLOCK_M, BLOCK_N]`` tile of one
batch's output (``program_id(1)`` is the batch), walking K in ``BLOCK_K`` steps with
``tl.dot`` into an fp32 accumulator; programs are ordered in groups of ``GROUP_M`` tile rows
(the "swizzle") so that concurrently running programs share A and B tiles in L2. Ragged edges
are masked (the K mask is dropped when ``BLOCK_K`` divides K). fp32 inputs use TF32 only when
``torch.backends.cuda.matmul.allow_tf32`` allowed it at compile time.

An operand that is a :class:`MatmulPrologue` (an elementwise value, e.g. a weight cast to
bf16) is computed tile by tile inside the K loop through the same ops handler, at indices made
of the tile's row/column and K variables (``am``/``ak``, ``bk``/``bn``), instead of being loaded
from a buffer a separate kernel wrote; lanes outside the operand are set to 0.

The epilogue reuses :class:`TritonKernel`'s ops handler: after the K loop, ``xindex`` is the
2-D block of flat output indices and ``xmask`` the in-bounds mask, so the epilogue nodes'
``store_body`` produce exactly the loads/arithmetic/stores of a pointwise kernel, with the
matmul's value (rounded to its dtype, as eager's separate ``mm`` would store it) taken from
registers instead of memory. The matmul's own output is stored only when something outside
the kernel reads it.
"""
from __future__ import annotations

from typing import Any

import torch

from ..ir import MatmulPrologue, MatmulTemplate, ReinterpretView
from ..scheduler import XINDEX, FusedGroup, SchedulerNode
from ..symbolic import simplify_with_ranges, sym, unflatten_index
from .common import IndentedBuffer, triton_dtype
from .triton import CSEVar, KernelSource, TritonKernel

# Template launch parameters passed as constexprs / launch options.
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def _layout_of(node: Any) -> tuple[str, Any]:
    """(storage name, layout) of a realized template input."""
    if isinstance(node, ReinterpretView):
        return node.data.name, node.layout
    return node.name, node.layout


def matmul_dims(tmpl: MatmulTemplate) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a template (batch 1 for ``mm``)."""
    a_size = list(tmpl.a.get_size())
    b_size = list(tmpl.b.get_size())
    batch = a_size[0] if len(a_size) == 3 else 1
    return batch, a_size[-2], b_size[-1], a_size[-1]


# Unary ops with f(0) == 0 (what a masked load's 0 becomes through them).
_ZERO_PRESERVING = frozenset({"neg", "abs", "sqrt", "sin", "tan", "tanh", "asin", "atan", "sinh", "asinh", "atanh",
                              "erf", "erfinv", "expm1", "log1p", "floor", "ceil", "trunc", "round", "sign",
                              "square"})


class _ZeroProbe:
    """Ops handler asking: is a prologue's value 0 wherever its tile loads are masked off?

    Loads indexed by the tile's variables give 0 (their ``other``); every other value is a
    known float or None (unknown: a scalar load, an index, a comparison). A known 0 result
    means the masked lanes already hold 0, so the kernel needs no ``tl.where`` on the tile."""

    def __init__(self, tile_vars: set[str]):
        self.tile_vars = tile_vars

    def load(self, name: str, index: Any) -> float | None:
        return 0.0 if {s.name for s in getattr(index, "free_symbols", ())} & self.tile_vars else None

    def constant(self, value: Any, dtype: torch.dtype) -> float | None:
        try:
            v = float(value)
        except TypeError:
            return None
        return v if v == v and abs(v) != float("inf") else None

    def index_expr(self, expr: Any, dtype: torch.dtype) -> None:
        return None

    def to_dtype(self, x: float | None, dtype: torch.dtype) -> float | None:
        return x if dtype.is_floating_point else None

    def unary(self, op: str, x: float | None) -> float | None:
        return 0.0 if x == 0.0 and op in _ZERO_PRESERVING else None

    def binary(self, op: str, a: float | None, b: float | None) -> float | None:
        if op == "mul" and ((a == 0.0 and b is not None) or (b == 0.0 and a is not None)):
            return 0.0
        if op == "truediv" and a == 0.0 and b is not None and b != 0.0:
            return 0.0
        if a is None or b is None:
            return None
        if op in ("add", "sub"):
            return a + b if op == "add" else a - b
        if op in ("maximum", "minimum"):
            return max(a, b) if op == "maximum" else min(a, b)
        return None

    def where(self, cond: Any, a: float | None, b: float | None) -> float | None:
        return 0.0 if a == 0.0 and b == 0.0 else None

    def indirect_indexing(self, value: Any, size: int) -> Any:
        raise NotImplementedError  # prologues never gather (lowering/matmul.py)

    def reduction(self, *args: Any) -> None:
        return None


def masked_lanes_are_zero(operand: MatmulPrologue, index: list[Any]) -> bool:
    """Whether ``operand`` at ``index`` is 0 where its tile loads are masked (see :class:`_ZeroProbe`)."""
    try:
        return operand.make_loader()(_ZeroProbe({s.name for s in index}), index) == 0.0  # type: ignore[arg-type]
    except NotImplementedError:
        return False


class MatmulTemplateKernel(TritonKernel):
    """One template kernel: the matmul main loop, then the fused epilogue through the ops handler."""

    def __init__(self, group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                 node_info: dict[str, tuple[str, str]]):
        super().__init__(group, kernel_index, removed, dtypes, 1, node_info)
        # The epilogue runs over the 2-D output tile, never a tiled/looped pointwise shape.
        self.tiling = None
        self.unit = "[1, 1]"
        self.full_shape = "[BLOCK_M, BLOCK_N]"
        self.template: SchedulerNode = next(n for n in group.nodes if n.is_template)
        tmpl = self.template.buf
        assert isinstance(tmpl, MatmulTemplate)
        self.tmpl = tmpl

    def kernel_name(self) -> str:
        return super().kernel_name().replace("pyjit_fused_", "pyjit_template_", 1)

    def codegen_nodes(self) -> None:
        tmpl = self.tmpl
        self.section, self.mask = "pre", "xmask"
        value = CSEVar("acc", torch.float32)
        if tmpl.get_dtype() != torch.float32:
            # What a separate mm kernel would have stored (and its readers loaded back).
            value = self._emit(f"acc.to({triton_dtype(tmpl.get_dtype())}).to(tl.float32)", torch.float32)
        ranges = {XINDEX: self.xnumel}
        index = unflatten_index(XINDEX, self.template.sizes)
        self.store(tmpl.name, simplify_with_ranges(tmpl.layout.index(index), ranges), value)
        for node in self.group.nodes:
            if node is self.template:
                continue
            placed = node.kernel_index(self.group.group)
            assert placed is not None and not node.is_reduction, node.name
            node.buf.store_body()(self, placed[0])  # type: ignore[union-attr]

    def _prologue(self, operand: MatmulPrologue, which: str, index: list[Any], mask: str,
                  shape: str) -> tuple[list[str], CSEVar]:
        """Lines computing ``operand``'s ``shape`` tile at ``index`` (kernel variables) inside the
        K loop, and the value. Its own section and scope: nothing it computes is visible to the
        epilogue (values defined in a Triton loop body do not outlive it)."""
        saved = (self.section, self.mask, self.full_shape)
        self.section, self.mask, self.full_shape = f"prologue_{which}", mask, shape
        try:
            value = operand.make_loader()(self, index)
        finally:
            self.section, self.mask, self.full_shape = saved
        return self.sections[f"prologue_{which}"].lines, value

    def _scopes(self) -> tuple[str, ...]:
        if self.section.startswith("prologue_"):
            return (self.section,)
        return super()._scopes()

    def _operand_lines(self, which: str, operand: Any, batched: bool, sizes: tuple[int, int],
                       even_k: bool) -> tuple[list[str], list[str], str]:
        """(lines before the K loop, lines in it, the pointer stride along K or "") that put
        ``which``'s tile (``a``: [BLOCK_M, BLOCK_K]; ``b``: [BLOCK_K, BLOCK_N]) in variable ``which``."""
        M_or_N, K = sizes
        if which == "a":
            outer, outer_var, k_shape = "rm[:, None]", "am", "k + rk[None, :]"
        else:
            outer, outer_var, k_shape = "rn[None, :]", "bn", "k + rk[:, None]"
        if isinstance(operand, MatmulPrologue):
            k_var = f"{which}k"
            index = [sym(outer_var), sym(k_var)] if which == "a" else [sym(k_var), sym(outer_var)]
            if batched:
                index = [sym("bz"), *index]
            mask = f"{which}_mask"
            shape = "[BLOCK_M, BLOCK_K]" if which == "a" else "[BLOCK_K, BLOCK_N]"
            body, value = self._prologue(operand, which, index, mask, shape)
            in_bounds = f"({outer_var} < {M_or_N})" + ("" if even_k else f" & ({k_var} < {K})")
            result = f"{value}.to({triton_dtype(operand.get_dtype())})"
            if not masked_lanes_are_zero(operand, index):
                # Masked lanes must hold 0, not the prologue's value of the loads' 0 (exp(0) is
                # 1): the padding of a ragged K tile enters the dot product.
                result = f"tl.where({mask}, {value}, 0.0).to({triton_dtype(operand.get_dtype())})"
            return [f"{outer_var} = {outer}"], [
                f"{k_var} = {k_shape}",
                f"{mask} = {in_bounds}",
                *body,
                f"{which} = {result}",
            ], ""
        name, lay = _layout_of(operand)
        ptr = self.inputs.setdefault(name, f"in_ptr{len(self.inputs)}")
        stride = lay.stride if batched else (0, *lay.stride)
        if which == "a":
            sb, so, sk = stride
            addr = f"rm[:, None] * {so} + rk[None, :] * {sk}"
            kmask = "" if even_k else f" & (rk[None, :] < {K} - k)"
            load = f"a = tl.load(a_ptrs, mask=(rm[:, None] < {M_or_N}){kmask}, other=0.0)"
        else:
            sb, sk, so = stride
            addr = f"rk[:, None] * {sk} + rn[None, :] * {so}"
            kmask = "" if even_k else f"(rk[:, None] < {K} - k) & "
            load = f"b = tl.load(b_ptrs, mask={kmask}(rn[None, :] < {M_or_N}), other=0.0)"
        before = [f"{which}_ptrs = {ptr} + ({lay.offset} + bz * {sb} + {addr})"]
        return before, [load], f"{which}_ptrs += BLOCK_K * {sk}"

    def source(self) -> KernelSource:
        tmpl = self.tmpl
        batch, M, N, K = matmul_dims(tmpl)
        cfg = tmpl.config
        batched = len(tmpl.a.get_size()) == 3
        even_k = K % cfg["BLOCK_K"] == 0
        spans = [batch * M * N]
        for operand in (tmpl.a, tmpl.b):
            spans.append(operand.numel() if isinstance(operand, MatmulPrologue)
                         else _layout_of(operand)[1].storage_span())
        i64 = ".to(tl.int64)" if self.int64 or max(spans) >= 2 ** 31 else ""
        a_before, a_loop, a_step = self._operand_lines("a", tmpl.a, batched, (M, K), even_k)
        b_before, b_loop, b_step = self._operand_lines("b", tmpl.b, batched, (N, K), even_k)
        self.codegen_nodes()
        operand_dtype = tmpl.a.get_dtype()
        if operand_dtype == torch.float32:
            precision = ', input_precision="tf32"' if tmpl.allow_tf32 else ', input_precision="ieee"'
        else:
            precision = ""
        # Triton's interpreter (CPU) multiplies 16-bit blocks wrongly (bf16) or in 16 bits
        # (fp16): widen them first; products of 16-bit values are exact in fp32 anyway.
        widen = ".to(tl.float32)" if tmpl.get_device().type == "cpu" and operand_dtype != torch.float32 else ""
        name = self.kernel_name()
        params = [*self.inputs.values(), *self.outputs.values()]
        params += [f"{k}: tl.constexpr" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")]
        code = IndentedBuffer()
        code.writeline("@triton.jit")
        code.writeline(f"def {name}({', '.join(params)}):")
        with code.indent():
            for line in self._origin_comments():
                code.writeline(line)
            code.writelines([
                "pid = tl.program_id(0)",
                f"num_pid_m = tl.cdiv({M}, BLOCK_M)",
                f"num_pid_n = tl.cdiv({N}, BLOCK_N)",
                # Programs walk GROUP_M tile rows column by column: neighbours share B tiles.
                "num_pid_in_group = GROUP_M * num_pid_n",
                "first_pid_m = (pid // num_pid_in_group) * GROUP_M",
                "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
                "pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
                "pid_n = (pid % num_pid_in_group) // group_size_m",
                f"bz = tl.program_id(1){i64}" if batched else "bz = 0",
                f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){i64}",
                f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){i64}",
                f"rk = tl.arange(0, BLOCK_K){i64}",
                *a_before,
                *b_before,
                "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                f"for k in range(0, {K}, BLOCK_K):",
            ])
            with code.indent():
                code.writelines([
                    *a_loop,
                    *b_loop,
                    f"acc += tl.dot(a{widen}, b{widen}{precision})",
                    *[step for step in (a_step, b_step) if step],
                ])
            code.writelines([
                f"xindex = bz * {M * N} + rm[:, None] * {N} + rn[None, :]",
                f"xmask = (rm[:, None] < {M}) & (rn[None, :] < {N})",
            ])
            code.writelines(self.sections["pre"].lines)
        meta = {k: int(cfg[k]) for k in CONFIG_KEYS}
        tiles = -(-M // meta["BLOCK_M"]) * -(-N // meta["BLOCK_N"])
        grid: tuple[Any, ...] = (tiles, batch) if batched else (tiles,)
        return KernelSource(name, code.getvalue(), [*self.inputs.keys(), *self.outputs.keys()], self.xnumel, 1,
                            meta, grid)


def generate_template_kernel(group: FusedGroup, kernel_index: int, removed: set[str],
                             dtypes: dict[str, torch.dtype], node_info: dict[str, tuple[str, str]]) -> KernelSource:
    return MatmulTemplateKernel(group, kernel_index, removed, dtypes, node_info).source()


def launch_line(ks: KernelSource, grid_text: str) -> str:
    """The wrapper's launch statement of a template kernel (no size arguments: all static)."""
    meta = ", ".join(f"{k}={v}" for k, v in ks.meta.items())
    return f"{ks.name}[{grid_text}]({', '.join(ks.arg_names)}, {meta})"


def standalone_source(tmpl: MatmulTemplate, read_dtypes: dict[str, torch.dtype] | None = None
                      ) -> tuple[str, KernelSource]:
    """A module holding only ``tmpl``'s kernel (its prologues included) with no epilogue, for
    benchmarking its configs; ``read_dtypes``: the dtypes of the buffers its prologues read."""
    node = SchedulerNode(tmpl, 0)
    group = FusedGroup([node], node.group)
    dtypes = {tmpl.name: tmpl.get_dtype(), **(read_dtypes or {})}
    for inp in tmpl.tensor_inputs():
        name, lay = _layout_of(inp)
        dtypes[name] = lay.dtype
    ks = generate_template_kernel(group, 0, set(), dtypes, {})
    header = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    return header + ks.source, ks
