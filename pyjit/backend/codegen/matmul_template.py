"""Triton code for matmul templates (:class:`pyjit.backend.ir.MatmulTemplate`) and their epilogues.

A template group (scheduler.py) holds one matmul node plus the pointwise nodes fused into its
epilogue. The kernel is tiled: each program computes a ``[BLOCK_M, BLOCK_N]`` tile of one
batch's output (``program_id(1)`` is the batch), walking K in ``BLOCK_K`` steps with
``tl.dot`` into an fp32 accumulator; programs are ordered in groups of ``GROUP_M`` tile rows
(the "swizzle") so that concurrently running programs share A and B tiles in L2. Ragged edges
are masked (the K mask is dropped when ``BLOCK_K`` divides K). fp32 inputs use TF32 only when
``torch.backends.cuda.matmul.allow_tf32`` allowed it at compile time.

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

from ..ir import MatmulTemplate, ReinterpretView
from ..scheduler import XINDEX, FusedGroup, SchedulerNode
from ..symbolic import simplify_with_ranges, unflatten_index
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

    def source(self) -> KernelSource:
        tmpl = self.tmpl
        a_name, a_lay = _layout_of(tmpl.a)
        b_name, b_lay = _layout_of(tmpl.b)
        a_ptr = self.inputs.setdefault(a_name, f"in_ptr{len(self.inputs)}")
        b_ptr = self.inputs.setdefault(b_name, f"in_ptr{len(self.inputs)}")
        self.codegen_nodes()
        batch, M, N, K = matmul_dims(tmpl)
        cfg = tmpl.config
        batched = len(a_lay.size) == 3
        sab, sam, sak = (a_lay.stride if batched else (0, *a_lay.stride))
        sbb, sbk, sbn = (b_lay.stride if batched else (0, *b_lay.stride))
        spans = [a_lay.storage_span(), b_lay.storage_span(), batch * M * N]
        i64 = ".to(tl.int64)" if self.int64 or max(spans) >= 2 ** 31 else ""
        even_k = K % cfg["BLOCK_K"] == 0
        if a_lay.dtype == torch.float32:
            precision = ', input_precision="tf32"' if tmpl.allow_tf32 else ', input_precision="ieee"'
        else:
            precision = ""
        # Triton's interpreter (CPU) multiplies 16-bit blocks wrongly (bf16) or in 16 bits
        # (fp16): widen them first; products of 16-bit values are exact in fp32 anyway.
        widen = ".to(tl.float32)" if tmpl.get_device().type == "cpu" and a_lay.dtype != torch.float32 else ""
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
                f"a_ptrs = {a_ptr} + ({a_lay.offset} + bz * {sab} + rm[:, None] * {sam} + rk[None, :] * {sak})",
                f"b_ptrs = {b_ptr} + ({b_lay.offset} + bz * {sbb} + rk[:, None] * {sbk} + rn[None, :] * {sbn})",
                "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                f"for k in range(0, {K}, BLOCK_K):",
            ])
            with code.indent():
                kmask_a = "" if even_k else f" & (rk[None, :] < {K} - k)"
                kmask_b = "" if even_k else f"(rk[:, None] < {K} - k) & "
                code.writelines([
                    f"a = tl.load(a_ptrs, mask=(rm[:, None] < {M}){kmask_a}, other=0.0)",
                    f"b = tl.load(b_ptrs, mask={kmask_b}(rn[None, :] < {N}), other=0.0)",
                    f"acc += tl.dot(a{widen}, b{widen}{precision})",
                    f"a_ptrs += BLOCK_K * {sak}",
                    f"b_ptrs += BLOCK_K * {sbk}",
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


def standalone_source(tmpl: MatmulTemplate) -> tuple[str, KernelSource]:
    """A module holding only ``tmpl``'s kernel with no epilogue (for benchmarking its configs)."""
    node = SchedulerNode(tmpl, 0)
    group = FusedGroup([node], node.group)
    dtypes = {tmpl.name: tmpl.get_dtype()}
    for inp in tmpl.tensor_inputs():
        name, lay = _layout_of(inp)
        dtypes[name] = lay.dtype
    ks = generate_template_kernel(group, 0, set(), dtypes, {})
    header = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
    return header + ks.source, ks
