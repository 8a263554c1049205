"""Matrix products: ``mm``, ``addmm`` and ``bmm`` as a Triton template or an extern aten call.

On CUDA, a static-shape float matmul (fp32/bf16/fp16, both operands of one dtype) is a
:class:`~pyjit.backend.ir.MatmulTemplate` candidate; autotuning (``runtime/autotune.py``)
times the template's launch configurations against the extern ``aten.mm``/``aten.bmm`` on
dummy inputs of the real layouts, once per shape and device (the result is cached on disk),
and the fastest wins. When the template wins, ``addmm``'s ``beta * bias + alpha * (a @ b)``
is a pointwise node over the template's output, so the scheduler fuses it (and whatever
pointwise ops follow: activation, residual add, cast) into the template's epilogue; when the
extern wins, the graph is what it always was (extern call + fused pointwise kernel).

Under ``"auto"``, fp32 matmuls are candidates only where torch allows TF32 (IEEE fp32 dots lost
to cuBLAS 2x on an H100). ``config.matmul_template`` = ``"force"`` takes the template without timing the extern (CUDA,
and CPU under ``PYJIT_CPU_BACKEND=triton_interpret`` for tests: the CPU never benchmarks, it
uses :data:`INTERPRET_CONFIG`); ``"off"`` always keeps the extern. Symbolic sizes, other
dtypes, empty operands and ``baddbmm`` keep the extern.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
from typing import TYPE_CHECKING, Any, Callable

import torch

from ...config import config
from ...logs import get_logger
from ..codegen.target import kernel_target
from ..ir import (Buffer, ExternKernel, InputBuffer, IRNode, Layout, MatmulPrologue, MatmulTemplate, MultiOutput,
                  Pointwise, ReinterpretView, ScatterAdd, StorageBox, View)
from ..ops_handler import CountingHandler, PrintHandler, RecordHandler
from ..symbolic import is_static, sym
from .fallbacks import make_extern
from .registry import aten, make_pointwise, register_lowering

if TYPE_CHECKING:
    from ..graph import GraphLowering

time_log = get_logger("compile_times")

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The interpreter runs each program as numpy block operations: large tiles mean few programs.
INTERPRET_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 1}
# Candidate launch configurations on CUDA (clamped to the problem, duplicates dropped). Few on
# purpose: each is a Triton compile at graph-compile time for every new shape.
_CUDA_CONFIGS_16BIT = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
]
_CUDA_CONFIGS_FP32 = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
]


def _pow2_at_least(n: int, floor: int = 16) -> int:
    p = floor
    while p < n:
        p *= 2
    return p


# Tiles smaller than 128x128 only pay where 128x128 tiles leave SMs idle: with at least this
# many 128x128 tiles per SM they never won (measured on an H100: 16 bf16/fp16 shapes from
# 2048x1024x4096 to 16384x3072x768, the 64x128 tile last or second to last every time), and
# each candidate is a Triton compile on the first call.
_SMALL_TILES_USEFUL_BELOW = 2


def cuda_configs(dtype: torch.dtype, M: int, N: int, K: int, epilogue: bool = False,
                 sm_count: int | None = None) -> list[dict[str, int]]:
    """Candidate launch configurations. With a fused epilogue, tiles wider than 128 columns are
    left out: tuning times the product alone, and the epilogue's temporaries on a 128x256 tile
    spill registers (measured on an H100: the fused kernel 50% slower than the product alone).
    With ``sm_count`` (the device's multiprocessors), 16-bit tiles smaller than 128x128 are
    left out where 128x128 tiles already give every SM ``_SMALL_TILES_USEFUL_BELOW`` tiles or
    more."""
    out: list[dict[str, int]] = []
    big_tiles = -(-M // 128) * -(-N // 128)
    # Measured for 16-bit dots only: TF32 candidates (smaller tiles by design) keep them all.
    many_tiles = sm_count is not None and dtype != torch.float32 and big_tiles >= _SMALL_TILES_USEFUL_BELOW * sm_count
    for cfg in _CUDA_CONFIGS_FP32 if dtype == torch.float32 else _CUDA_CONFIGS_16BIT:
        if epilogue and cfg["BLOCK_M"] * cfg["BLOCK_N"] > 128 * 128:
            continue
        if many_tiles and cfg["BLOCK_M"] * cfg["BLOCK_N"] < 128 * 128:
            continue
        c = dict(cfg)
        c["BLOCK_M"] = min(c["BLOCK_M"], _pow2_at_least(M))
        c["BLOCK_N"] = min(c["BLOCK_N"], _pow2_at_least(N))
        c["BLOCK_K"] = min(c["BLOCK_K"], _pow2_at_least(K))
        if c not in out:
            out.append(c)
    return out


@functools.lru_cache(maxsize=1)
def generator_hash() -> str:
    """Hash of the template generator's source: a changed generator re-tunes."""
    from ..codegen import matmul_template
    h = hashlib.sha256()
    for mod in (matmul_template, __import__(__name__, fromlist=["_"])):
        with open(os.path.abspath(mod.__file__), "rb") as f:  # type: ignore[arg-type]
            h.update(f.read())
    return h.hexdigest()[:32]


def _static_layout(node: IRNode) -> Layout | None:
    layout = getattr(node, "layout", None)
    if layout is None or not all(is_static(x) for x in (*layout.size, *layout.stride, layout.offset)):
        return None
    return layout


def _allow_tf32() -> bool:
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _template_mode(ctx: "GraphLowering", a: IRNode, b: IRNode) -> str | None:
    """"tune" (template vs extern by autotuning), "force" (template), or None (extern)."""
    mode = config.matmul_template
    if mode == "off":
        return None
    device = a.get_device()
    if device.type == "cuda":
        if mode == "auto" and not config.autotune:
            return None
    elif not (mode == "force" and kernel_target(device).interpreted):
        return None
    if a.get_dtype() != b.get_dtype() or a.get_dtype() not in _DTYPES or b.get_device() != device:
        return None
    if mode == "auto" and device.type == "cuda" and a.get_dtype() == torch.float32 and not _allow_tf32():
        # IEEE fp32 dots (TF32 not allowed, torch's default) lost to cuBLAS by 2.0-2.2x on every
        # shape measured on an H100 (docs/performance.md "Matmul template"): not worth the
        # ~5 s of compiling four configurations per shape.
        return None
    sizes = [*a.get_size(), *b.get_size()]
    if not all(is_static(s) for s in sizes) or any(int(s) == 0 for s in sizes) or _symbolic_graph(ctx):
        return None
    return "force" if mode == "force" else "tune"


def _symbolic_graph(ctx: "GraphLowering") -> bool:
    """A graph compiled for every size (symbolic placeholders) keeps its externs: one
    artefact must serve all sizes, and tuning is per shape."""
    for p in ctx.placeholders:
        layout = getattr(p, "layout", None)
        if layout is None or not all(is_static(x) for x in (*layout.size, *layout.stride)):
            return True
    return False


def _choose_config(ctx: "GraphLowering", target: Any, cands: dict[str, MatmulTemplate], mode: str
                   ) -> tuple[str, dict[str, int]] | None:
    """(variant, launch configuration) of the template, or None when the extern wins.

    ``cands``: the variants to consider, ``"plain"`` (operands read from buffers) and/or
    ``"prologue"`` (elementwise operands computed in the template's loads)."""
    first = next(iter(cands.values()))
    device = first.get_device()
    variant = "prologue" if "prologue" in cands else "plain"
    if device.type != "cuda":
        return variant, dict(INTERPRET_CONFIG)  # the CPU never benchmarks
    from ..codegen.matmul_template import matmul_dims
    _, M, N, K = matmul_dims(first)
    configs = cuda_configs(first.get_dtype(), M, N, K, epilogue=_expects_epilogue(ctx, target),
                           sm_count=torch.cuda.get_device_properties(device).multi_processor_count)
    if not config.autotune:
        return variant, configs[0]
    return tune(ctx, target, cands, mode, configs)


def tune(ctx: "GraphLowering", target: Any, cands: dict[str, MatmulTemplate], mode: str,
         configs: list[dict[str, int]]) -> tuple[str, dict[str, int]] | None:
    """Benchmark ``configs`` of each template variant in ``cands`` (and the extern when ``mode``
    is "tune"). Variants that leave an operand to a separate elementwise kernel (the plain
    template and the extern, when a prologue is possible) are charged one copy of that
    operand: the write and read of it that computing it in the loads saves."""
    from ...runtime import autotune
    from ..codegen.matmul_template import matmul_dims
    first = next(iter(cands.values()))
    device = first.get_device()
    _, M, N, K = matmul_dims(first)
    candidates: dict[str, Callable[[], Callable[[], object]]] = {}
    inputs = _DummyInputs(ctx, cands)
    materialized = [k for k in ("a", "b") if isinstance(getattr(cands.get("prologue"), k, None), MatmulPrologue)]
    names: dict[str, tuple[str, dict[str, int]]] = {}
    for variant, cand in cands.items():
        charged = materialized if variant == "plain" else []
        for cfg in configs:
            name = ("prologue_" if variant == "prologue" else "") + _config_name(cfg)
            names[name] = (variant, cfg)
            candidates[name] = functools.partial(_template_runner, cand, cfg, inputs, charged)
    if mode == "tune":
        candidates["extern"] = functools.partial(_extern_runner, first, inputs, _expects_epilogue(ctx, target),
                                                 materialized)
    fields = {"generator": generator_hash(), "mode": mode, "device": autotune.device_name(device),
              "allow_tf32": str(first.allow_tf32), "candidates": ",".join(candidates)}
    for variant, cand in cands.items():
        for key in ("a", "b"):
            fields[f"{variant}_{key}"] = _operand_text(ctx, getattr(cand, key))
    label = f"{ctx.current_target_name()} [{M}x{K}]x[{K}x{N}] {first.get_dtype()}"
    if "prologue" in cands:
        label += " (prologue " + "+".join(materialized) + ")"
    choice = autotune.choose("matmul", fields, candidates, device, label)
    return None if choice == "extern" else names[choice]


def _expects_epilogue(ctx: "GraphLowering", target: Any) -> bool:
    """Whether the product is likely to get a fused pointwise epilogue (addmm's bias; a reader
    that is lowered to loops rather than being another extern)."""
    if target is aten.addmm.default:
        return True
    from .fallbacks import EXTERN_BY_DESIGN
    node = ctx.current_node
    return node is not None and any(u.op == "call_function" and u.target not in EXTERN_BY_DESIGN
                                    for u in node.users)


def _extern_runner(cand: MatmulTemplate, inputs: "_DummyInputs", epilogue: bool,
                   materialized: list[str]) -> Callable[[], object]:
    """The extern product on dummy inputs; with ``epilogue``, plus one copy of its output: the
    read and write of the product that a separate epilogue kernel costs and fusion into the
    template saves (timings compare the whole, not the matmul alone); plus one copy of each
    operand in ``materialized`` (written by a separate kernel when not computed in the loads)."""
    extern = aten.bmm.default if len(cand.a.get_size()) == 3 else aten.mm.default
    a, b, dst = inputs.a(), inputs.b(), inputs.by_name(cand.name)
    copies = inputs.operand_copies(materialized)
    if not epilogue and not copies:
        return lambda: extern(a, b)

    def run() -> None:
        for operand_dst, operand_src in copies:
            operand_dst.copy_(operand_src)
        if epilogue:
            dst.copy_(extern(a, b))
        else:
            extern(a, b)

    return run


def _config_name(cfg: dict[str, int]) -> str:
    return "template_" + "_".join(f"{k}{v}" for k, v in cfg.items())


def _layout_text(lay: Layout) -> str:
    return f"{tuple(lay.size)}:{tuple(lay.stride)}+{lay.offset}:{lay.dtype}"


def _operand_text(ctx: "GraphLowering", operand: IRNode) -> str:
    """An operand for the tuning cache key: its layout, or its prologue's code with the buffers
    it reads named by their layouts (so equal prologues of other graphs share a result)."""
    if not isinstance(operand, MatmulPrologue):
        return _layout_text(_storage(operand)[1])
    printer = PrintHandler()
    text = str(operand.make_loader()(printer, [sym(f"i{k}") for k in range(len(operand.get_size()))]))
    for name, lay in sorted(_prologue_layouts(ctx, operand).items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"\b{re.escape(name)}\b", f"<{_layout_text(lay)}>", text)
    return f"{tuple(operand.get_size())}:{operand.get_dtype()}:{text}"


def _buffer_named(ctx: "GraphLowering", name: str) -> Buffer | None:
    for buf in (*ctx.graph_inputs, *(c for c, _ in ctx.constants), *ctx.buffers):
        if buf.name == name:
            return buf
    return None


def _prologue_layouts(ctx: "GraphLowering", operand: IRNode) -> dict[str, Layout]:
    """The buffers an operand's loader reads, with their layouts."""
    rec = RecordHandler()
    operand.make_loader()(rec, [sym(f"i{k}") for k in range(len(operand.get_size()))])
    out: dict[str, Layout] = {}
    for dep in rec.reads:
        buf = _buffer_named(ctx, dep.name)
        assert buf is not None and buf.layout is not None, dep.name
        out[dep.name] = buf.layout
    return out


class _DummyInputs:
    """Random tensors with the layouts the template variants read (created on first use,
    shared by candidates): each storage buffer by name (a prologue's reads, the plain variant's
    operands), the operands ``a``/``b`` as the plain variant and the extern read them, and ``out``."""

    def __init__(self, ctx: "GraphLowering", cands: dict[str, MatmulTemplate]):
        self.cand = next(iter(cands.values()))
        self.layouts: dict[str, Layout] = {}
        self.prologue_keys: set[str] = set()
        for cand in cands.values():
            for key in ("a", "b"):
                node = getattr(cand, key)
                if isinstance(node, MatmulPrologue):
                    self.layouts.update(_prologue_layouts(ctx, node))
                    self.prologue_keys.add(key)
                else:
                    name, lay = _storage(node)
                    self.layouts[name] = lay
        self._made: dict[str, torch.Tensor] | None = None

    def read_dtypes(self) -> dict[str, torch.dtype]:
        return {name: lay.dtype for name, lay in self.layouts.items()}

    def _make(self) -> dict[str, torch.Tensor]:
        if self._made is None:
            device = self.cand.get_device()
            made: dict[str, torch.Tensor] = {}
            spans: dict[str, tuple[int, torch.dtype]] = {}
            for name, lay in self.layouts.items():
                spans[name] = (max(spans.get(name, (0, lay.dtype))[0], lay.storage_span()), lay.dtype)
            # A private generator: compiling must not advance the program's random stream.
            gen = torch.Generator(device=device)
            gen.manual_seed(0)
            for name, (span, dtype) in spans.items():
                made[name] = _random(int(span), dtype, device, gen)
            for key in ("a", "b"):
                # The plain variant's operand (for a prologue: the buffer a separate kernel writes).
                name, lay = _storage(getattr(self.cand, key))
                made[key] = torch.as_strided(made[name], [int(s) for s in lay.size], [int(s) for s in lay.stride],
                                             int(lay.offset))
                if key in self.prologue_keys:
                    made[key + "_src"] = torch.empty_like(made[key])
            made["out"] = torch.empty([int(s) for s in self.cand.layout.size], device=device,
                                      dtype=self.cand.get_dtype())
            self._made = made
        return self._made

    def a(self) -> torch.Tensor:
        return self._make()["a"]

    def b(self) -> torch.Tensor:
        return self._make()["b"]

    def operand_copies(self, keys: list[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(destination, source) pairs standing for the kernels that would write ``keys``."""
        made = self._make()
        return [(made[k], made[k + "_src"]) for k in keys if k + "_src" in made]

    def by_name(self, name: str) -> torch.Tensor:
        made = self._make()
        return made["out"] if name == self.cand.name else made[name]


def _storage(node: IRNode) -> tuple[str, Layout]:
    if isinstance(node, ReinterpretView):
        return node.data.name, node.layout
    return node.name, node.layout  # type: ignore[attr-defined]


def _random(numel: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(numel, device=device, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0, 2, (numel,), device=device, generator=gen).to(dtype)
    return torch.randn(numel, device=device, generator=gen).to(dtype)


def _template_runner(cand: MatmulTemplate, cfg: dict[str, int], inputs: _DummyInputs,
                     materialized: list[str]) -> Callable[[], object]:
    """Compile the template (its prologues included, no epilogue) with ``cfg``; return a
    launcher on dummy inputs, plus one copy per operand in ``materialized`` (see :func:`tune`)."""
    from ...runtime import cache
    from ...runtime.launcher import load_module
    from ..codegen.matmul_template import standalone_source

    probe = MatmulTemplate(cand.name, cand.layout, cand.a, cand.b, cfg, cand.allow_tf32, cand.origins)
    source, ks = standalone_source(probe, inputs.read_dtypes())
    key, path, _ = cache.write_module(source)
    kernel = getattr(load_module(path, key, False), ks.name)
    args = [inputs.by_name(n) for n in ks.arg_names]
    launch = kernel[ks.grid]
    copies = inputs.operand_copies(materialized)

    def run() -> None:
        for operand_dst, operand_src in copies:
            operand_dst.copy_(operand_src)
        launch(*args, **ks.meta)

    if hasattr(kernel, "warmup"):  # compiled Triton: autotune compiles all candidates at once first
        run.warm_launch = (kernel, lambda: kernel.warmup(*args, grid=ks.grid, **ks.meta))  # type: ignore[attr-defined]
    return run


# Which elementwise operands are computed in the template's loads: few operations, few loads,
# no gathers or reductions, and loads only of buffers no loop kernel writes (graph inputs,
# extern outputs). A value of a loop kernel's output would otherwise be fused into that
# kernel, so a prologue would save nothing there; and a template's output takes the value
# into its epilogue.
_PROLOGUE_MAX_OPS = 6
_PROLOGUE_MAX_READS = 2
_PROLOGUE_SOURCES = (InputBuffer, ExternKernel, MultiOutput, ScatterAdd)


def _unrealized_elementwise(node: IRNode) -> bool:
    """``node`` is a not-yet-realized pointwise value, possibly through views."""
    while True:
        if isinstance(node, StorageBox):
            node = node.data
        elif isinstance(node, View):
            node = node.base
        else:
            return isinstance(node, Pointwise)


def _prologue_operand(ctx: "GraphLowering", node: IRNode) -> MatmulPrologue | None:
    """``node`` as an operand computed in the template's loads, or None (read from a buffer)."""
    if not config.matmul_prologue or not _unrealized_elementwise(node):
        return None
    rec = CountingHandler()
    try:
        node.make_loader()(rec, [sym(f"i{k}") for k in range(len(node.get_size()))])
    except Exception:  # a body the recorder cannot walk: keep the buffer
        return None
    if rec.has_indirect or rec.reductions or rec.ops > _PROLOGUE_MAX_OPS:
        return None
    names = {d.name for d in rec.reads}
    if len(names) > _PROLOGUE_MAX_READS:
        return None
    for name in names:
        buf = _buffer_named(ctx, name)
        if not isinstance(buf, _PROLOGUE_SOURCES) or buf.layout is None or _static_layout(buf) is None \
                or buf.layout.storage_span() >= 2 ** 31:
            return None
    return MatmulPrologue(node)


def _matmul(ctx: "GraphLowering", target: Any, args: tuple, kwargs: dict, a: IRNode, b: IRNode,
            epilogue: Callable[[IRNode], IRNode] | None = None) -> Any:
    """The template (plus ``epilogue``) when it is wanted and wins, else ``target(*args, **kwargs)`` extern."""
    mode = _template_mode(ctx, a, b)
    if mode is None:
        return _extern(ctx, target, args, kwargs, a, b, epilogue)
    size = [*a.get_size()[:-1], b.get_size()[-1]]
    layout = Layout.contiguous(a.get_device(), a.get_dtype(), [int(s) for s in size])
    allow_tf32 = _allow_tf32() if a.get_dtype() == torch.float32 else False
    origins = ctx.current_origins()
    prologue = {"a": _prologue_operand(ctx, a), "b": _prologue_operand(ctx, b)}
    # Operands read from buffers; one that could be a prologue is, for the plain variant's
    # timing, a stand-in buffer of the layout realizing it would give (realizing it now
    # would make the prologue read that buffer).
    plain: dict[str, IRNode] = {}
    for key, node in (("a", a), ("b", b)):
        if prologue[key] is not None:
            plain[key] = Buffer(f"template_operand_{key}", Layout.contiguous(node.get_device(), node.get_dtype(),
                                                                             [int(s) for s in node.get_size()]))
        else:
            plain[key] = ctx.realize(node, allow_view=True, read_only=True)
            if _static_layout(plain[key]) is None:
                return _extern(ctx, target, args, kwargs, a, b, epilogue)
    cands = {"plain": MatmulTemplate("template_candidate", layout, plain["a"], plain["b"], INTERPRET_CONFIG,
                                     allow_tf32, origins)}
    if prologue["a"] is not None or prologue["b"] is not None:
        pa, pb = prologue["a"] or plain["a"], prologue["b"] or plain["b"]
        cands["prologue"] = MatmulTemplate("template_candidate", layout, pa, pb, INTERPRET_CONFIG, allow_tf32, origins)
    choice = _choose_config(ctx, target, cands, mode)
    if choice is None:
        return _extern(ctx, target, args, kwargs, a, b, epilogue)
    variant, cfg = choice
    if variant == "prologue":
        operands = [cands["prologue"].a, cands["prologue"].b]
        for p in cands["prologue"].prologues():
            origins = origins | p.get_origins()
    else:
        operands = [ctx.realize(x, allow_view=True, read_only=True) if prologue[k] is not None else plain[k]
                    for k, x in (("a", a), ("b", b))]
        if not all(_static_layout(x) is not None for x in operands):
            return _extern(ctx, target, args, kwargs, a, b, epilogue)
    tmpl = MatmulTemplate(ctx.new_buffer_name(), layout, operands[0], operands[1], cfg, allow_tf32, origins)
    ctx.register_buffer(tmpl)
    return epilogue(tmpl) if epilogue is not None else tmpl


def _extern(ctx: "GraphLowering", target: Any, args: tuple, kwargs: dict, a: IRNode, b: IRNode,
            epilogue: Callable[[IRNode], IRNode] | None) -> Any:
    """The extern product. For ``addmm`` on CUDA, autotuning picks between cuBLASLt's ``addmm``
    (bias in the GEMM's epilogue) and ``mm`` with the bias added by the pointwise kernel that
    reads the product (``epilogue``): the fused-bias GEMM is not always the faster one. On an
    H100, fp32 ``addmm`` over ``[4096,3072]x[3072,768]`` got 64x64 tiles and 494 us where ``mm``
    of the same operands got 128x128 and 414 us (GPT-2's MLP output projection, four per step)."""
    if target is aten.addmm.default and epilogue is not None and _split_addmm_wins(ctx, args, kwargs, a, b):
        return epilogue(make_extern(ctx, aten.mm.default, (a, b), {}))
    return make_extern(ctx, target, args, kwargs)


def _readers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``node``'s value, looking through views of it (a view is no kernel)."""
    out: list[torch.fx.Node] = []
    for user in node.users:
        target = user.target
        schema = getattr(target, "_schema", None)
        is_view = target is aten._unsafe_view.default or (
            schema is not None and any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns))
        if user.op == "call_function" and is_view:
            out += _readers(user)
        else:
            out.append(user)
    return out


def _split_tunable(device: torch.device) -> bool:
    if device.type == "cuda":
        return config.autotune
    return kernel_target(device).interpreted and config.autotune_launch == "force"


def _split_addmm_wins(ctx: "GraphLowering", args: tuple, kwargs: dict, a: IRNode, b: IRNode) -> bool:
    """Whether ``mm`` plus the bias in the product's pointwise reader times faster than ``addmm``.

    The ``mm`` candidate is charged what moving the bias out of the GEMM costs: nothing when
    every reader of the product is a pointwise kernel (the add fuses into it), one write of
    the product when it is also stored (a graph output, saved for the backward, read by an
    extern: the reader then stores product + bias besides its own result), and a whole bias
    kernel (read and write of the product) when no pointwise kernel reads it."""
    from ...runtime import autotune
    from .fallbacks import EXTERN_BY_DESIGN

    bias = args[0]
    device = a.get_device()
    if not _split_tunable(device) or _symbolic_graph(ctx) or not isinstance(bias, IRNode):
        return False
    operands = [ctx.realize(x, allow_view=True, read_only=True) for x in (bias, a, b)]
    layouts = [_static_layout(x) for x in operands]
    if any(lay is None for lay in layouts):
        return False
    users = _readers(ctx.current_node) if ctx.current_node is not None else []
    fused = [u for u in users if u.op == "call_function" and u.target not in EXTERN_BY_DESIGN]
    charge = "none" if fused and len(fused) == len(users) else "store" if fused else "bias_kernel"
    fields = {"device": autotune.device_name(device), "torch": torch.__version__,
              "allow_tf32": str(_allow_tf32()), "kwargs": repr(sorted(kwargs.items())), "charge": charge,
              "operands": ",".join(_layout_text(lay) for lay in layouts if lay is not None)}
    gen = torch.Generator(device=device)
    gen.manual_seed(0)  # a private generator: compiling must not advance the program's stream
    dummies = [torch.as_strided(_random(int(lay.storage_span()), lay.dtype, device, gen),
                                [int(s) for s in lay.size], [int(s) for s in lay.stride], int(lay.offset))
               for lay in layouts if lay is not None]
    d_bias, d_a, d_b = dummies

    def fused_bias() -> Callable[[], object]:
        return lambda: aten.addmm.default(d_bias, d_a, d_b, **kwargs)

    def split() -> Callable[[], object]:
        if charge == "none":
            return lambda: aten.mm.default(d_a, d_b)
        out = torch.empty([int(s) for s in (*a.get_size()[:-1], b.get_size()[-1])], device=device,
                          dtype=a.get_dtype())
        if charge == "store":
            return lambda: (aten.mm.default(d_a, d_b), out.zero_())
        return lambda: torch.add(aten.mm.default(d_a, d_b), d_bias, out=out)

    label = f"{ctx.current_target_name()} {list(a.get_size())}x{list(b.get_size())} {a.get_dtype()} ({charge})"
    choice = autotune.choose("addmm_extern", fields, {"addmm": fused_bias, "mm_then_bias": split}, device, label)
    return choice == "mm_then_bias"


@register_lowering(aten.mm.default)
def mm(ctx: "GraphLowering", a: IRNode, b: IRNode) -> Any:
    return _matmul(ctx, aten.mm.default, (a, b), {}, a, b)


@register_lowering(aten.bmm.default)
def bmm(ctx: "GraphLowering", a: IRNode, b: IRNode) -> Any:
    return _matmul(ctx, aten.bmm.default, (a, b), {}, a, b)


@register_lowering(aten.addmm.default)
def addmm(ctx: "GraphLowering", bias: IRNode, a: IRNode, b: IRNode, **kwargs: Any) -> Any:
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    if not isinstance(bias, IRNode) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in (beta, alpha)) or bias.get_dtype() != a.get_dtype():
        return make_extern(ctx, aten.addmm.default, (bias, a, b), kwargs)
    dtype = a.get_dtype()

    def add_bias(prod: IRNode) -> IRNode:
        # beta * bias + alpha * (a @ b), bias broadcast; beta == 0 ignores the bias (NaNs too).
        def fn(ops: Any, m: Any, c: Any) -> Any:
            if alpha != 1:
                m = ops.binary("mul", m, ops.constant(float(alpha), torch.float32))
            if beta == 0:
                return m
            if beta != 1:
                c = ops.binary("mul", c, ops.constant(float(beta), torch.float32))
            return ops.binary("add", m, c)
        return make_pointwise(ctx, [prod, bias], fn, dtype)

    # The extern alternative (taken inside _matmul) is addmm itself, with its kwargs.
    return _matmul(ctx, aten.addmm.default, (bias, a, b), kwargs, a, b, add_bias)
