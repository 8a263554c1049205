"""Launch autotuning of generated Triton kernels: time a few launch configurations, keep the fastest.

The heuristics (``reduction_heuristics.py`` for reductions, ``TritonKernel._launch_meta`` for
pointwise kernels) pick ``XBLOCK``/``RBLOCK``/``num_warps`` from the sizes alone. They are near
copy bandwidth for most shapes but miss at some (docs/performance.md "Reductions across row
widths"). This module owns the optional correction: for each static-size kernel big enough to
matter it builds a handful of candidates, the heuristic's choice first, times them on the
device through ``runtime/autotune.choose`` and returns the winner's :class:`KernelSource`,
which the wrapper then launches like any other (the choice is *baked into the generated
module*: the module cache, the graph cache and the warm start reuse it without tuning).

What a candidate may change (``triton.py``): ``XBLOCK``, ``RBLOCK`` and ``YBLOCK`` are
``tl.constexpr`` parameters and ``num_warps`` a launch option, so they change at launch time
with the same source. Persistent vs looped rows changes the source (a persistent kernel has no
loop and needs ``RBLOCK >= rnumel``), so for reductions near that boundary the other form is
generated too (``generate_kernel`` with ``force_persistent`` or a persistent limit of 0) and
its own heuristic launch joins the candidates:

- persistent rows: ``num_warps`` x2 and /2, ``XBLOCK`` x2 (with twice the warps: same values
  per thread) and /2, and the looped form (``RBLOCK`` 2048 and 4096) for rows >= 4096;
- looped rows: ``RBLOCK`` x2 and /2, ``num_warps`` x2 and /2, and the persistent form for rows
  up to ``config.backend_persistent_multi_pass_max``;
- column reductions (``reduction_heuristics.column_meta``): ``num_warps`` x2 and /2 and the
  tile's shape (``XBLOCK`` x2 with ``RBLOCK`` /2 and the reverse); their form is not changed;
- pointwise kernels (only above 16x ``config.autotune_launch_min_bytes``): ``num_warps`` x2 and
  /2, ``XBLOCK`` x2 and /2 (2-D tiles: ``num_warps`` only).

Candidates are benchmarked on scratch buffers of each argument's storage span and dtype
(floats from a private generator, integers and booleans zero so gathered indices stay in
range), never on the user's tensors: tuning runs while code is generated, before any input is
seen, and an input the graph mutates in place is therefore never written by it. The cache key
holds the kernel's source (with its name normalised, so the same kernel in another graph or
position reuses the choice), both forms' sources, the sizes, the argument dtypes and spans,
the device name, the Triton version and the candidate list. Kernels are tuned only where
:func:`enabled` says so: CUDA graphs with static sizes under ``config.autotune`` (and
``config.autotune_launch`` != "off"); the Triton interpreter only under "force" (tests). Graphs
with symbolic sizes keep the heuristics: one module serves every size, and its persistent
kernels pick their launch per call (``wrapper.py``).
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
from ..symbolic import is_static
from .common import next_power_of_2
from .reduction_heuristics import looped_meta
from .target import kernel_target
from .triton import KernelSource, generate_kernel

if TYPE_CHECKING:
    from ..ir import Layout
    from ..scheduler import FusedGroup

time_log = get_logger("compile_times")

# At most this many candidates per kernel (each is a Triton compile plus a benchmark on CUDA).
MAX_REDUCTION_CANDIDATES = 6
MAX_POINTWISE_CANDIDATES = 5
# Pointwise heuristics measured near copy bandwidth: only much larger kernels are tuned.
POINTWISE_MIN_BYTES_FACTOR = 16
# Tuning time per graph after which further kernels keep the heuristic launch (choices already
# stored on disk are still used): bounds the first compile of a large graph.
GRAPH_BUDGET_S = 60.0
# Rows at least this long (next power of 2) also try the looped form of a persistent kernel.
LOOPED_ALTERNATIVE_MIN_R = 4096
_MAX_WARPS = 32  # 1024 threads per program
_MAX_TILE = 32768  # the largest register block the heuristics use (64 fp32 values per thread at 16 warps)
_MAX_VALUES_PER_THREAD = 128


def enabled(device: torch.device) -> bool:
    """Whether kernels of a graph on ``device`` are tuned (see the module docstring)."""
    mode = config.autotune_launch
    if mode == "off":
        return False
    if device.type == "cuda":
        return config.autotune or mode == "force"
    return mode == "force" and kernel_target(device).interpreted


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    kernel: KernelSource  # the source and the launch (meta, grid) this candidate runs


@dataclasses.dataclass
class LaunchTuner:
    """Tunes the Triton kernels of one graph (created by the wrapper when :func:`enabled`)."""

    device: torch.device
    layouts: dict[str, "Layout"]  # every buffer a kernel may take, by name
    dtypes: dict[str, torch.dtype]
    node_info: dict[str, tuple[str, str]]
    persistent_rmax: int
    kernels_tuned: int = 0  # kernels with a choice (tuned now or read from the disk cache)
    seconds: float = 0.0  # time spent in tune(), compiling and benchmarking included
    budget_logged: bool = False

    def report(self) -> None:
        """One line per graph on ``compile_times``: kernels tuned and the time it took."""
        if self.kernels_tuned:
            time_log.info("launch autotuning: %d kernel(s), %.1f ms", self.kernels_tuned, self.seconds * 1e3)

    def tune(self, ks: KernelSource, group: "FusedGroup", index: int, removed: set[str]) -> KernelSource:
        """The launch of ``ks`` to use: the fastest candidate's (``ks`` itself when not tuned)."""
        if not self._worth_tuning(ks):
            return ks
        start = time.perf_counter()
        try:
            candidates = self.candidates(ks, lambda persistent: self._variant(group, index, removed, persistent))
            candidates = [c for c in candidates if all(n in self.layouts for n in c.kernel.arg_names)]
            if len(candidates) < 2:
                return ks
            dims = (ks.xnumel, ks.rnumel) if ks.ynumel == 1 else (ks.ynumel, ks.xnumel)
            return self._tune(ks, candidates, f"{ks.name} {dims[0]}x{dims[1]}")
        finally:
            self.seconds += time.perf_counter() - start

    def _tune(self, ks: KernelSource, candidates: list[Candidate], label: str) -> KernelSource:
        from ...runtime import autotune

        scratch = Scratch({n: self.layouts[n] for c in candidates for n in c.kernel.arg_names}, self.device)
        runners: dict[str, Callable[[], Callable[[], object]]] = {
            c.name: functools.partial(kernel_runner, c.kernel, scratch, self._interpret()) for c in candidates}
        names = [c.name for c in candidates]
        fields = {"sources": _sources_hash(candidates), "sizes": f"{ks.ynumel}x{ks.xnumel}x{ks.rnumel}",
                  # Positional (the source calls them in_ptr0...): the same kernel in another graph,
                  # with other buffer names, shares the choice.
                  "args": repr([(str(self.layouts[n].dtype), self.layouts[n].storage_span()) for n in ks.arg_names]),
                  "device": autotune.device_name(self.device), "triton": triton_version(),
                  "candidates": ",".join(names)}
        try:
            if self.seconds > GRAPH_BUDGET_S:
                # Over the graph's budget: stored choices still apply, nothing new is timed.
                record = autotune.lookup("launch", fields)
                if record is None or record["choice"] not in runners:
                    if not self.budget_logged:
                        self.budget_logged = True
                        time_log.info("launch autotuning: over the graph's %.0f s budget, later kernels keep "
                                      "the heuristic launch", GRAPH_BUDGET_S)
                    return ks
            choice = autotune.choose("launch", fields, runners, self.device, label)
        except Exception as e:  # noqa: BLE001 - every candidate failed (out of memory...): keep the heuristic
            time_log.info("launch autotuning of %s failed, keeping the heuristic launch: %s: %s", label,
                          type(e).__name__, e)
            return ks
        finally:
            scratch.release()
        self.kernels_tuned += 1
        return next(c.kernel for c in candidates if c.name == choice)

    # ------------------------------------------------------------------ what is tuned
    def _interpret(self) -> bool:
        return self.device.type == "cpu"

    def _worth_tuning(self, ks: KernelSource) -> bool:
        if not all(is_static(v) for v in (ks.xnumel, ks.rnumel, ks.ynumel)) or ks.size_args:
            return False  # symbolic sizes keep the heuristics (module docstring)
        if any(n not in self.layouts or not _static_layout(self.layouts[n]) for n in ks.arg_names):
            return False
        if config.autotune_launch == "auto" and (ks.rnumel == 1 or int(ks.rnumel) < config.autotune_launch_min_row):
            # Measured on an H100 (docs/performance.md "Launch autotuning"): the heuristics were
            # within noise of the best launch below rows of 16384 (tuning there picked slower
            # launches on noise, for 1-3 s of compiling per kernel), and 8-12 points of copy
            # bandwidth behind it at rows of 32768. "auto" tunes where it paid; "force" all.
            return False
        moved = sum(int(self.layouts[n].numel()) * self.layouts[n].dtype.itemsize for n in ks.arg_names)
        least = config.autotune_launch_min_bytes
        return moved >= (least if ks.rnumel != 1 else least * POINTWISE_MIN_BYTES_FACTOR)

    def _variant(self, group: "FusedGroup", index: int, removed: set[str], persistent: bool) -> KernelSource:
        """The kernel in the other form: rows held whole (persistent) or walked in chunks."""
        if persistent:
            return generate_kernel(group, index, removed, self.dtypes, self.persistent_rmax, self.node_info,
                                   0, force_persistent=True)
        return generate_kernel(group, index, removed, self.dtypes, 0, self.node_info, 0)

    def candidates(self, ks: KernelSource, variant: Callable[[bool], KernelSource]) -> list[Candidate]:
        """The candidates for ``ks``, its own launch first; ``variant(persistent)`` generates the
        kernel's other form when one is tried."""
        if ks.rnumel == 1:
            return pointwise_candidates(ks)
        return reduction_candidates(ks, variant, config.backend_persistent_multi_pass_max)


# ---------------------------------------------------------------------- candidate generation
def is_persistent(ks: KernelSource) -> bool:
    """A reduction kernel that holds whole rows (no ``for roffset`` loop in its source)."""
    return ks.rnumel != 1 and "for roffset in range(" not in ks.source


def with_meta(ks: KernelSource, meta: dict[str, int]) -> KernelSource:
    """``ks`` launched with ``meta`` (its grid follows the block sizes)."""
    grid: tuple[Any, ...] = (-(-int(ks.xnumel) // meta["XBLOCK"]),)
    if "YBLOCK" in meta:
        grid = (grid[0], -(-int(ks.ynumel) // meta["YBLOCK"]))
    return dataclasses.replace(ks, meta=dict(meta), grid=grid)


def candidate_name(ks: KernelSource, meta: dict[str, int]) -> str:
    form = ("persistent" if is_persistent(ks) else "looped") if ks.rnumel != 1 else "pointwise"
    short = {"XBLOCK": "X", "YBLOCK": "Y", "RBLOCK": "R", "num_warps": "w"}
    return form + "_" + "_".join(f"{short.get(k, k)}{v}" for k, v in meta.items())


def _add(out: list[Candidate], ks: KernelSource, meta: dict[str, int], limit: int) -> None:
    if len(out) >= limit:
        return
    c = Candidate(candidate_name(ks, meta), with_meta(ks, meta))
    if all(c.name != o.name for o in out):
        out.append(c)


def _legal(meta: dict[str, int], ks: KernelSource, persistent: bool) -> bool:
    x, w = meta["XBLOCK"], meta["num_warps"]
    if not (1 <= w <= _MAX_WARPS) or x < 1 or x > next_power_of_2(int(ks.xnumel)):
        return False
    if "RBLOCK" not in meta:
        tile = x * meta.get("YBLOCK", 1)
    else:
        r = meta["RBLOCK"]
        if r < 1 or r > next_power_of_2(int(ks.rnumel)) or (persistent and r < int(ks.rnumel)):
            return False
        tile = x * r
    # Enough work for every thread, not so much that registers spill.
    return 32 * w <= tile <= _MAX_TILE and tile // (32 * w) <= _MAX_VALUES_PER_THREAD


def _neighbours(ks: KernelSource, changes: list[dict[str, float]], persistent: bool, limit: int,
                out: list[Candidate]) -> None:
    """Add ``ks.meta`` scaled by each change (``{"num_warps": 2}``: twice the warps) if legal."""
    for change in changes:
        meta = dict(ks.meta)
        for key, factor in change.items():
            meta[key] = int(meta[key] * factor)
        if _legal(meta, ks, persistent):
            _add(out, ks, meta, limit)


def reduction_candidates(ks: KernelSource, variant: Callable[[bool], KernelSource],
                         persistent_limit: int) -> list[Candidate]:
    limit = MAX_REDUCTION_CANDIDATES
    out: list[Candidate] = []
    _add(out, ks, ks.meta, limit)
    persistent = is_persistent(ks)
    r = next_power_of_2(int(ks.rnumel))
    if ks.column_bytes is not None:
        # Column reductions: the tile's shape and warps; the form stays (short columns only
        # are persistent, see reduction_heuristics.column_meta).
        changes: list[dict[str, float]] = [{"num_warps": 2}, {"num_warps": 0.5}]
        changes += [{"XBLOCK": 2}, {"XBLOCK": 0.5}] if persistent else \
            [{"XBLOCK": 2, "RBLOCK": 0.5}, {"XBLOCK": 0.5, "RBLOCK": 2}, {"RBLOCK": 2}]
        _neighbours(ks, changes, persistent, limit, out)
        return out
    if persistent:
        # Launch changes, with room kept for two launches of the looped form (generated here).
        looped_alt: KernelSource | None = None
        if r >= LOOPED_ALTERNATIVE_MIN_R:
            looped_alt = variant(False)
            if is_persistent(looped_alt):
                looped_alt = None
        changes = [{"num_warps": 2}, {"num_warps": 0.5}, {"XBLOCK": 2, "num_warps": 2},
                   {"XBLOCK": 0.5, "num_warps": 0.5}, {"XBLOCK": 0.5}]
        _neighbours(ks, changes, True, limit - (2 if looped_alt is not None else 0), out)
        if looped_alt is not None:
            base = looped_meta(int(ks.xnumel), int(ks.rnumel))
            for meta in (base, {**base, "RBLOCK": base["RBLOCK"] * 2}):
                if _legal(meta, looped_alt, False):
                    _add(out, looped_alt, meta, limit)
        return out
    persistent_alt: KernelSource | None = None
    if int(ks.rnumel) <= persistent_limit:
        persistent_alt = variant(True)
        if not is_persistent(persistent_alt):
            persistent_alt = None
    changes = [{"RBLOCK": 2}, {"RBLOCK": 0.5}, {"num_warps": 0.5}, {"num_warps": 2}]
    _neighbours(ks, changes, False, limit - (1 if persistent_alt is not None else 0), out)
    if persistent_alt is not None and _legal(persistent_alt.meta, persistent_alt, True):
        _add(out, persistent_alt, persistent_alt.meta, limit)
    return out


def pointwise_candidates(ks: KernelSource) -> list[Candidate]:
    out: list[Candidate] = []
    _add(out, ks, ks.meta, MAX_POINTWISE_CANDIDATES)
    changes: list[dict[str, float]] = [{"num_warps": 2}, {"num_warps": 0.5}]
    if "YBLOCK" not in ks.meta:
        changes += [{"XBLOCK": 2}, {"XBLOCK": 0.5}]
    _neighbours(ks, changes, False, MAX_POINTWISE_CANDIDATES, out)
    return out


# ---------------------------------------------------------------------- benchmarking
def _static_layout(layout: "Layout") -> bool:
    return all(is_static(v) for v in (*layout.size, *layout.stride, layout.offset))


def _normalised(ks: KernelSource) -> str:
    """The source without comments and with the kernel's own name replaced: the same kernel
    generated for another layer shares the key (and the stored choice)."""
    return ks.code_key()


def _sources_hash(candidates: list[Candidate]) -> str:
    h = hashlib.sha256()
    for text in sorted({_normalised(c.kernel) for c in candidates}):
        h.update(text.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    import triton
    return str(triton.__version__)


class Scratch:
    """Tensors standing in for a kernel's arguments (created on first use, shared by candidates)."""

    def __init__(self, layouts: dict[str, "Layout"], device: torch.device):
        self.layouts = layouts
        self.device = device
        self._made: dict[str, torch.Tensor] | None = None

    def get(self, name: str) -> torch.Tensor:
        if self._made is None:
            # A private generator: compiling must not advance the program's random stream.
            gen = torch.Generator(device=self.device)
            gen.manual_seed(0)
            made = {}
            for n, lay in self.layouts.items():
                span = max(1, int(lay.storage_span()))
                if lay.dtype.is_floating_point:
                    made[n] = torch.randn(span, device=self.device, generator=gen).to(lay.dtype)
                else:
                    # Zero: an index read from it is in range whatever it indexes.
                    made[n] = torch.zeros(span, device=self.device, dtype=lay.dtype)
            self._made = made
        return self._made[name]

    def release(self) -> None:
        self._made = None


MODULE_HEADER = """import torch
import triton
import triton.language as tl

from pyjit.runtime.triton_compat import libdevice
"""


def kernel_runner(ks: KernelSource, scratch: Scratch, interpret: bool, size_args: bool = True) -> Callable[[], object]:
    """Load ``ks`` in a standalone module; return a launch of it on the scratch buffers.
    ``size_args``: pass the element counts after the pointers (not for matmul templates)."""
    from ...runtime import cache
    from ...runtime.launcher import load_module

    key, path, _ = cache.write_module(MODULE_HEADER + "\n\n" + ks.source)
    kernel = getattr(load_module(path, key, interpret), ks.name)
    args: list[Any] = [scratch.get(n) for n in ks.arg_names]
    if size_args:
        args += ([int(ks.ynumel)] if ks.ynumel != 1 else []) + [int(ks.xnumel)]
        args += [int(ks.rnumel)] if ks.rnumel != 1 else []
    launch = kernel[ks.grid]
    meta = dict(ks.meta)

    def run() -> None:
        launch(*args, **meta)

    if hasattr(kernel, "warmup"):  # compiled Triton: autotune compiles all candidates at once first
        run.warm_launch = (kernel, lambda: kernel.warmup(*args, grid=ks.grid, **meta))  # type: ignore[attr-defined]
    return run
