"""Whether a matmul template keeps its fused epilogue, decided by timing the real kernels.

The lowering (``lowering/matmul.py``) picks a template's launch configuration, and the template
over the extern ``aten.mm``, by timing the product alone: the epilogue is unknown until the
scheduler fuses the pointwise readers of the product into the template's kernel. A fused
epilogue is not free: its tile-sized temporaries and loads in the accumulator's layout add
register pressure, and on an H100 a bf16 ``[8192,2048]x[2048,2048]`` + bias + GELU + residual
template ran 161 us where the product alone had timed 116 us and cuBLAS plus a separate
epilogue kernel takes ~125 us (docs/performance.md). So after fusion, for each template group
with an epilogue, this pass times on scratch buffers:

- ``fused``: the fused kernel (under the launch configuration the lowering chose);
- ``split_template``: the template alone (its chosen configuration), then the epilogue as a
  pointwise kernel of its own reading the stored product;
- ``split_extern``: ``aten.mm``/``aten.bmm`` (cuBLAS), then that kernel; only where the
  operands are buffers (no prologue) and the extern is allowed (``matmul_template`` "auto");

and rewrites the groups to the fastest: the fused group, or the
template (or an extern node of the same name and layout) followed by the epilogue's own group.
Choices go through ``runtime/autotune.choose`` (stored on disk, keyed by the candidates'
sources with kernel names normalised, argument dtypes and spans, device and Triton version).

Light epilogues (a few adds, multiplies and casts: a bias, a residual) stay fused without
timing: they were always fastest fused on the H100, and each decision costs ~1 s of compiling
on the first call.

Runs where :func:`enabled`: CUDA graphs under ``config.autotune`` with templates allowed; the
Triton interpreter only under ``config.autotune_launch == "force"`` (tests, with a fake timer).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from ...config import config
from ...logs import get_logger
from ..ir import ExternKernel, MatmulTemplate, ReinterpretView
from ..lowering.registry import aten
from ..ops_handler import CountingHandler
from ..scheduler import FusedGroup, SchedulerNode
from ..symbolic import sym
from .launch_autotune import Scratch, kernel_runner, triton_version
from .target import kernel_target
from .matmul_template import generate_template_kernel, matmul_dims
from .triton import KernelSource, generate_kernel

if TYPE_CHECKING:
    from ..ir import Layout

time_log = get_logger("compile_times")


def enabled(device: torch.device) -> bool:
    if device.type == "cuda":
        return config.autotune and config.matmul_template != "off"
    return kernel_target(device).interpreted and config.autotune_launch == "force"


@dataclasses.dataclass
class EpilogueTuner:
    """Decides the template groups of one graph (created by the wrapper when :func:`enabled`)."""

    device: torch.device
    layouts: dict[str, "Layout"]  # every buffer a kernel may take, by name
    dtypes: dict[str, torch.dtype]
    node_info: dict[str, tuple[str, str]]
    persistent_rmax: int
    keep: set[str]  # buffers that must be stored whatever the fusion (outputs, inputs)
    seconds: float = 0.0

    decided: int = 0

    def report(self) -> None:
        """One line per graph on ``compile_times`` when a template group was decided."""
        if self.decided:
            time_log.info("epilogue tuning: %d template group(s), %.1f ms", self.decided, self.seconds * 1e3)

    def decide(self, groups: list[FusedGroup]) -> list[FusedGroup]:
        """``groups`` with each template group that has an epilogue kept fused (with the fastest
        configuration) or split into the product and the epilogue's own kernel."""
        tuned = {id(g): e for g, e in ((g, [n for n in g.nodes if not n.is_template]) for g in groups if g.is_template)
                 if e and not _light(e)}
        if len(tuned) > 1:
            self._prefetch([g for g in groups if id(g) in tuned], tuned)
        out: list[FusedGroup] = []
        for group in groups:
            epilogue = tuned.get(id(group))
            if epilogue is None:
                out.append(group)
                continue
            start = time.perf_counter()
            try:
                out.extend(self._decide_group(group, epilogue))
                self.decided += 1
            except Exception as e:  # noqa: BLE001 - tuning must never break compilation: keep the fusion
                time_log.info("epilogue tuning of %s failed, keeping the fused kernel: %s: %s",
                              group.nodes[0].name, type(e).__name__, e)
                out.append(group)
            finally:
                self.seconds += time.perf_counter() - start
        return out

    def _prefetch(self, groups: list[FusedGroup], epilogues: dict[int, list[SchedulerNode]]) -> None:
        """Compile the candidates of every group to decide in one parallel round.

        Each decision compiles its two or three kernels before timing them: one round of Triton
        compiles per template group, each as long as its slowest kernel (about 2 s on the lent
        H200's host; ConvNeXt-T has 6 such groups per graph, 20 s of a training step's first
        call over its three graphs). So the groups are first walked with
        ``autotune.prefetching()`` (candidates built, nothing timed, choices discarded), every
        kernel gathered is compiled at once, and the decisions that follow time compiled
        kernels. The scratch buffers of the gathered launches live until the round is done."""
        from ...runtime import autotune, precompile

        start = time.perf_counter()
        with autotune.prefetching() as warmers:
            for group in groups:
                try:
                    self._decide_group(group, epilogues[id(group)])
                except Exception:  # noqa: BLE001 - the real decision reports its own failure
                    continue
        if warmers:
            precompile.warm_launches(warmers)
            time_log.info("epilogue tuning prefetch: %d candidate kernel(s) of %d template group(s) compiled in one "
                          "round in %.1f ms", len(warmers), len(groups), (time.perf_counter() - start) * 1e3)
        self.seconds += time.perf_counter() - start

    # ------------------------------------------------------------------ one template group
    def _decide_group(self, group: FusedGroup, epilogue: list[SchedulerNode]) -> list[FusedGroup]:
        from ...runtime import autotune

        node = next(n for n in group.nodes if n.is_template)
        tmpl = node.buf
        assert isinstance(tmpl, MatmulTemplate)
        _, M, N, K = matmul_dims(tmpl)
        alone = FusedGroup([node], node.group)
        rest = FusedGroup(epilogue, group.group)
        split_removed = self._removed([alone, rest])
        # The fused kernel under the lowering's configuration only: on an H100 the fastest fused
        # kernel always had it (8 groups of bf16/fp16 GPT-2 blocks and linear layers), and each
        # other configuration is another ~1 s Triton compile on the first call.
        epilogue_kernel = generate_kernel(rest, 1, split_removed, self.dtypes, self.persistent_rmax,
                                          self.node_info, config.backend_persistent_multi_pass_max)
        candidates: dict[str, list[Any]] = {  # name -> steps: KernelSource, or ("extern", operands)
            "fused": [generate_template_kernel(group, 0, self._removed([group]), self.dtypes, self.node_info)],
            "split_template": [generate_template_kernel(alone, 0, split_removed, self.dtypes, self.node_info),
                               epilogue_kernel],
        }
        extern = self._extern_operands(tmpl)
        if extern is not None:
            candidates["split_extern"] = [("extern", extern), epilogue_kernel]
        names = {n for steps in candidates.values() for s in steps for n in _arg_names(s)}
        if not all(n in self.layouts for n in names):
            return [group]
        scratch = Scratch({n: self.layouts[n] for n in names}, self.device)
        runners = {name: functools.partial(_runner, steps, scratch, self.device.type == "cpu")
                   for name, steps in candidates.items()}
        fields = {"sources": _sources_hash(candidates), "device": autotune.device_name(self.device),
                  "args": repr(sorted({(str(self.layouts[n].dtype), self.layouts[n].storage_span(),
                                        tuple(self.layouts[n].stride)) for n in names})),
                  "triton": triton_version(), "candidates": ",".join(candidates)}
        label = f"{tmpl.name} [{M}x{K}]x[{K}x{N}] {tmpl.get_dtype()} + {len(epilogue)} epilogue node(s)"
        try:
            choice = autotune.choose("epilogue", fields, runners, self.device, label)
        finally:
            scratch.release()
        if choice == "fused":
            return [group]
        if choice == "split_template":
            return [alone, rest]
        assert extern is not None
        mm = aten.bmm.default if len(tmpl.a.get_size()) == 3 else aten.mm.default
        ext = ExternKernel(tmpl.name, tmpl.layout, mm, [tmpl.a, tmpl.b], {}, tmpl.get_origins())
        ext_node = SchedulerNode(ext, node.index)
        ext_node.users = set(node.users)
        return [FusedGroup([ext_node], ext_node.group), rest]

    def _extern_operands(self, tmpl: MatmulTemplate) -> tuple[Any, Any] | None:
        """The operands as (storage name, layout) pairs when the extern may replace the template."""
        if config.matmul_template != "auto" or tmpl.prologues():
            return None
        out = []
        for operand in (tmpl.a, tmpl.b):
            if isinstance(operand, ReinterpretView):
                out.append((operand.data.name, operand.layout))
            else:
                out.append((operand.name, operand.layout))  # type: ignore[attr-defined]
        return out[0], out[1]

    def _removed(self, groups: list[FusedGroup]) -> set[str]:
        """As ``WrapperCodegen._removed_buffers``, for these groups: buffers computed and
        consumed inside one kernel."""
        removed = set()
        for g in groups:
            for n in g.nodes:
                if n.name not in self.keep and n.users and n.users <= g.names:
                    removed.add(n.name)
        return removed


# Epilogues of at most this many arithmetic operations, none of them a unary function (exp,
# tanh, erf...), stay fused without timing: bias adds, residual adds and casts were always
# fastest fused on the H100 (GPT-2 QKV and output projections, bf16 and fp16), and each
# decision costs ~1 s of compiling on the first call.
_LIGHT_MAX_OPS = 4


class _OpKinds(CountingHandler):
    def __init__(self) -> None:
        super().__init__()
        self.unary_ops = 0

    def unary(self, op: Any, x: Any) -> Any:
        self.unary_ops += 1
        return super().unary(op, x)


def _light(epilogue: list[SchedulerNode]) -> bool:
    """An epilogue that stays fused without timing (see ``_LIGHT_MAX_OPS``)."""
    rec = _OpKinds()
    for node in epilogue:
        body = getattr(node.buf, "store_body", None)
        if body is None:
            return False
        body()(rec, [sym(f"i{k}") for k in range(len(node.sizes))])
    return rec.unary_ops == 0 and rec.ops <= _LIGHT_MAX_OPS and not rec.reductions


def _arg_names(step: Any) -> list[str]:
    if isinstance(step, KernelSource):
        return list(step.arg_names)
    (a_name, _), (b_name, _) = step[1]
    return [a_name, b_name]


def _normalised(step: Any) -> str:
    if isinstance(step, KernelSource):
        return step.code_key() + repr(sorted(step.meta.items()))
    (_, a_lay), (_, b_lay) = step[1]
    return f"extern {tuple(a_lay.size)}:{tuple(a_lay.stride)}+{a_lay.offset} {tuple(b_lay.size)}:" \
           f"{tuple(b_lay.stride)}+{b_lay.offset} {a_lay.dtype}"


def _sources_hash(candidates: dict[str, list[Any]]) -> str:
    h = hashlib.sha256()
    for name in sorted(candidates):
        h.update(name.encode())
        for step in candidates[name]:
            h.update(_normalised(step).encode())
    return h.hexdigest()


def _runner(steps: list[Any], scratch: Scratch, interpret: bool) -> Callable[[], object]:
    """Run ``steps`` (template or pointwise kernels, extern products) in order on the scratch buffers."""
    calls: list[Callable[[], object]] = []
    warm: tuple[Any, Callable[[], object]] | None = None
    for step in steps:
        if isinstance(step, KernelSource):  # a template (BLOCK_M) takes no size arguments
            run = kernel_runner(step, scratch, interpret, size_args="BLOCK_M" not in step.meta)
        else:
            run = _extern_runner(step[1], scratch)
        calls.append(run)
        warm = warm or getattr(run, "warm_launch", None)

    def run_all() -> None:
        for call in calls:
            call()

    if warm is not None:
        run_all.warm_launch = warm  # type: ignore[attr-defined]
    return run_all


def _extern_runner(operands: tuple[Any, Any], scratch: Scratch) -> Callable[[], object]:
    views = []
    for name, lay in operands:
        views.append(torch.as_strided(scratch.get(name), [int(s) for s in lay.size], [int(s) for s in lay.stride],
                                      int(lay.offset)))
    mm = torch.bmm if views[0].dim() == 3 else torch.mm
    a, b = views
    return lambda: mm(a, b)
