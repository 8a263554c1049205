"""The ``distributed`` suite: data-parallel training steps on two ranks, launched by the suite.

On two or more GPUs: a GPT-style decoder (8 layers, d=1024, T=512, batch 8 per rank, bf16
autocast, fused AdamW) on 2 ranks over NCCL. Without them: a CPU smoke run (a 1-layer d=32
decoder, gloo) that shows the rows work, not how fast anything is. One row per variant:

- ``eager_ddp``: ``DistributedDataParallel(model)``;
- ``torch.compile(ddp)``: torch.compile of the DDP module (Dynamo's DDP optimizer), GPU only;
- ``pyjit(ddp)``: ``pyjit.jit(DDP(model))``, graph split at DDP's buckets;
- ``pyjit(ddp) no split``: the same with ``pyjit.config.ddp_split = False``;
- ``eager_fsdp2``, ``torch.compile(fsdp2)`` (GPU only), ``pyjit(fsdp2)``: the model sharded with
  ``fully_shard`` (FSDP2), one unit per transformer block and the root.

:data:`EXTRA_VARIANTS` is the hook for other wrappings: append a :class:`Variant`.

Each variant: the first step's time (compile included), the median of the next steps, peak
memory (CUDA), and on CUDA the share of NCCL kernel time that overlapped compute kernels in one
profiled step, with the kernel time by kind and the longest kernels (``profiled_step``). The
loss after the measured steps is compared with eager DDP's (``correctness``). The ranks are
processes this module starts (``torch.multiprocessing``), a new group for each variant so that
no variant's leftovers (compile workers, another compiler's hooks) slow the next; rank 0 writes
the rows.

Environment: ``BENCH_DISTRIBUTED_VARIANTS=eager_ddp,pyjit(ddp)`` runs only those rows;
``BENCH_DISTRIBUTED_TRACE=<dir>`` also exports each rank's profiled step as a Chrome trace
(``<variant>.rank<r>.json``; ``python -m bench.timeline`` draws one as a picture);
``BENCH_DISTRIBUTED_CPROFILE=<dir>`` writes five more steps under cProfile per rank
(``<variant>.rank<r>.pstats``); ``BENCH_DISTRIBUTED_WORLD=1`` runs one rank (on one GPU: what the split costs without any
communication to overlap).
"""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import socket
import statistics
import tempfile
import time
from typing import Any, Callable

import torch

from bench.measure import summarize

STATUS_OK, STATUS_SKIPPED, STATUS_ERROR = "OK", "SKIPPED", "ERROR"


@dataclasses.dataclass
class Variant:
    """How one row wraps the model: ``wrap(model, rank, device) -> (module to call, DDP-like)``;
    ``gpu_only`` rows are skipped in the CPU smoke run."""

    name: str
    wrap: Callable[[torch.nn.Module, int, str], Any]
    gpu_only: bool = False
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # pyjit.config.patch(...) for the run


def _ddp(model: torch.nn.Module, rank: int, device: str) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

    # DDP's default buckets on GPU; small ones for the CPU smoke model so that it has several.
    cap = None if device == "cuda" else CPU_BUCKET_CAP_MB
    return DDP(model, device_ids=[rank] if device == "cuda" else None, bucket_cap_mb=cap)


def _fsdp2(model: torch.nn.Module, rank: int, device: str) -> Any:
    """FSDP2: each transformer block its own ``fully_shard`` unit, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _wrap(parallel: Callable[[torch.nn.Module, int, str], Any], compiler: str) -> Callable[..., Any]:
    """A row's ``wrap``: the model made data-parallel by ``parallel``, then compiled by
    ``compiler`` ("eager": not compiled, "torch.compile" or "pyjit")."""
    def wrap(model: torch.nn.Module, rank: int, device: str) -> Any:
        module = parallel(model, rank, device)
        if compiler == "torch.compile":
            return torch.compile(module)
        if compiler == "pyjit":
            import pyjit

            return pyjit.jit(module)
        return module

    return wrap


VARIANTS: list[Variant] = [
    Variant("eager_ddp", _wrap(_ddp, "eager")),
    Variant("torch.compile(ddp)", _wrap(_ddp, "torch.compile"), gpu_only=True),
    Variant("pyjit(ddp)", _wrap(_ddp, "pyjit"), config={"ddp_split": True}),
    Variant("pyjit(ddp) no split", _wrap(_ddp, "pyjit"), config={"ddp_split": False}),
    Variant("eager_fsdp2", _wrap(_fsdp2, "eager")),
    Variant("torch.compile(fsdp2)", _wrap(_fsdp2, "torch.compile"), gpu_only=True),
    Variant("pyjit(fsdp2)", _wrap(_fsdp2, "pyjit")),
]
# Other wrappings measured with the same step: appended by their owners.
EXTRA_VARIANTS: list[Variant] = []


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int
    dim: int
    heads: int
    seq: int
    batch: int
    vocab: int
    steps: int


GPU_SHAPE = Shape(layers=8, dim=1024, heads=16, seq=512, batch=8, vocab=50304, steps=20)
CPU_BUCKET_CAP_MB = 0.01
CPU_SHAPE = Shape(layers=1, dim=32, heads=2, seq=16, batch=2, vocab=64, steps=3)


def _model(shape: Shape, device: str) -> torch.nn.Module:
    from bench.models import GPT2Decoder

    torch.manual_seed(0)
    return GPT2Decoder(shape.vocab, shape.seq, shape.dim, shape.heads, shape.layers).to(device)


def _step(module: Any, opt: Any, idx: torch.Tensor, target: torch.Tensor, device: str) -> torch.Tensor:
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = module(idx)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The spans' union as sorted disjoint intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _union(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _merged(spans))


def _profile_step(module: Any, opt: Any, idx: torch.Tensor, target: torch.Tensor,
                  trace_path: str | None) -> dict[str, Any] | None:
    """One profiled step (CUDA only): the share of the time NCCL kernels ran during which a
    compute kernel ran too (both as unions of their kernels' intervals; profiler ranges are not
    kernels), NCCL time with no compute beside it (``exposed_nccl_s``), kernel time by kind, the
    time some kernel ran (``gpu_busy_s``) against the step's wall time, and the kernels that
    took longest. ``trace_path``: also
    export the step's Chrome trace there (what ``bench.timeline`` draws). None when the
    profiler gives no kernel events; the overlap share is None without NCCL kernels (one rank)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        _step(module, opt, idx, target, "cuda")
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    if trace_path:
        prof.export_chrome_trace(trace_path)
    comm: list[tuple[float, float]] = []
    compute: list[tuple[float, float]] = []
    by_name: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) is None or "cuda" not in str(e.device_type).lower():
            continue
        if getattr(e, "is_user_annotation", False):
            continue  # a range (``record_function`` mirrored on the GPU's timeline), not a kernel
        span = (e.time_range.start, e.time_range.end)
        (comm if "nccl" in e.name.lower() else compute).append(span)
        entry = by_name.setdefault(e.name[:80], [0.0, 0])
        entry[0] += span[1] - span[0]
        entry[1] += 1
    if not comm and not compute:
        return None
    covered = 0.0
    busy = _merged(compute)
    for a, b in _merged(comm):
        for c, d in busy:
            if c >= b:
                break
            covered += max(0.0, min(b, d) - max(a, c))
    total = _union(comm)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]
    return {"overlap_share": min(1.0, covered / total) if total > 0 else None,  # None: no NCCL kernel
            "profiled_wall_s": wall,
            "gpu_busy_s": _union(comm + compute) * 1e-6,  # profiler times are microseconds
            "compute_kernel_s": sum(b - a for a, b in compute) * 1e-6,
            "nccl_kernel_s": total * 1e-6,
            "exposed_nccl_s": (total - covered) * 1e-6,
            "kernels": len(compute) + len(comm),
            "top_kernels": [[name, round(us, 1), int(n)] for name, (us, n) in top]}


class _GcClock:
    """Time spent in Python's garbage collector while the ``with`` block runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> "_GcClock":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._callback)


def _host_profile(module: Any, opt: Any, batches: list[Any], device: str, path: str, steps: int = 5) -> None:
    """``steps`` steps under cProfile (Python's own profiler: where the host's time goes, with
    none of torch.profiler's per-op cost), written to ``path`` for ``pstats``."""
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    for i in range(steps):
        _step(module, opt, *batches[i % 2], device)
    _sync(device)
    prof.disable()
    prof.dump_stats(path)


def _run_variant(v: Variant, rank: int, device: str, shape: Shape) -> dict[str, Any]:
    import pyjit
    from pyjit.distributed import ddp as pyjit_ddp

    row: dict[str, Any] = {"backend": v.name, "status": STATUS_OK, "reason": None}
    pyjit.reset()
    gc.collect()  # the previous variant's model and optimizer state leave before the peak is reset
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    g = torch.Generator().manual_seed(rank)
    batches = [(torch.randint(0, shape.vocab, (shape.batch, shape.seq), generator=g).to(device),
                torch.randint(0, shape.vocab, (shape.batch, shape.seq), generator=g).to(device))
               for _ in range(2)]
    plans_before = len(pyjit_ddp.plans)
    with pyjit.config.patch(**v.config):
        module = v.wrap(_model(shape, device), rank, device)
        opt = torch.optim.AdamW(module.parameters(), lr=1e-4, fused=device == "cuda")
        t0 = time.perf_counter()
        _step(module, opt, *batches[0], device)
        _sync(device)
        first = time.perf_counter() - t0
        samples, loss = [], None
        with _GcClock() as gc_clock:
            for i in range(shape.steps):
                t0 = time.perf_counter()
                loss = _step(module, opt, *batches[i % 2], device)
                _sync(device)
                samples.append(time.perf_counter() - t0)
        trace_dir = os.environ.get("BENCH_DISTRIBUTED_TRACE")
        trace_path = (os.path.join(trace_dir, f"{_slug(v.name)}.rank{rank}.json")
                      if trace_dir and device == "cuda" else None)
        profiled = _profile_step(module, opt, *batches[0], trace_path) if device == "cuda" else None
        pstats_dir = os.environ.get("BENCH_DISTRIBUTED_CPROFILE")
        if pstats_dir:
            _host_profile(module, opt, batches, device, os.path.join(pstats_dir, f"{_slug(v.name)}.rank{rank}.pstats"))
    timing = {"unit": "s", "timer": "perf_counter", "samples": samples, "calls_per_sample": 1, **summarize(samples)}
    new_plans = pyjit_ddp.plans[plans_before:]
    row.update(timing=timing, first_call_s=first,
               distributed={"compile_s_estimate": max(0.0, first - statistics.median(samples)),
                            "peak_memory_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
                            "overlap_share": (profiled or {}).get("overlap_share"),
                            "profiled_step": profiled,
                            "gc_s_per_step": gc_clock.seconds / max(1, shape.steps),
                            "subgraphs": [p.num_subgraphs for p in new_plans],
                            "loss": float(loss) if loss is not None else None})
    return row


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _rank_main(rank: int, world: int, port: int, device: str, out_path: str, names: list[str]) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method="env://")
    shape = GPU_SHAPE if device == "cuda" else CPU_SHAPE
    rows = []
    try:
        for v in [v for v in VARIANTS + EXTRA_VARIANTS if v.name in names]:
            try:
                rows.append(_run_variant(v, rank, device, shape))
            except Exception as exc:  # one variant's failure is its row, not the suite's end
                rows.append({"backend": v.name, "status": STATUS_ERROR, "reason": f"{type(exc).__name__}: {exc}"[:300]})
            dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "shape": dataclasses.asdict(shape)}, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(device: torch.device, on_row: Callable[[dict[str, Any]], None]) -> None:
    """Launch the ranks, then add one row per variant (rank 0's measurements)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    world = int(os.environ.get("BENCH_DISTRIBUTED_WORLD", "2"))
    gpu = device.type == "cuda" and torch.cuda.device_count() >= world
    dev = "cuda" if gpu else "cpu"
    workload = f"gpt_ddp_{world}gpu" if gpu else "gpt_ddp_cpu_smoke"
    variants = VARIANTS + EXTRA_VARIANTS
    chosen = os.environ.get("BENCH_DISTRIBUTED_VARIANTS")
    runnable = [v.name for v in variants if (gpu or not v.gpu_only)
                and (not chosen or v.name in chosen.split(","))]
    params: dict[str, Any] = {"device": dev, "world_size": world}
    if not dist.is_available():
        for v in variants:
            on_row({"suite": "distributed", "workload": workload, "backend": v.name, "status": STATUS_SKIPPED,
                    "reason": "torch.distributed is not built", "params": params})
        return
    # One group of rank processes per variant: a variant's compile workers, caches and leftover
    # state (another compiler's frame hook, its worker pools) never slow the next one's steps.
    result: dict[str, Any] = {"rows": []}
    for name in runnable:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.json")
            try:
                mp.spawn(_rank_main, args=(world, _free_port(), dev, out, [name]), nprocs=world, join=True)
                with open(out) as f:
                    part = json.load(f)
            except Exception as exc:
                result["rows"].append({"backend": name, "status": STATUS_ERROR,
                                       "reason": f"the ranks failed: {type(exc).__name__}: {exc}"[:300]})
                continue
        result["rows"] += part["rows"]
        result["shape"] = part["shape"]
    if "shape" not in result:
        for v in variants:
            on_row({"suite": "distributed", "workload": workload, "backend": v.name, "status": STATUS_ERROR,
                    "reason": "the ranks failed for every variant", "params": params})
        return
    params["shape"] = result["shape"]
    rows = {r["backend"]: r for r in result["rows"]}
    eager_loss = (rows.get("eager_ddp", {}).get("distributed") or {}).get("loss")
    for v in variants:
        row = rows.get(v.name)
        if row is None:
            why = "needs 2 GPUs" if v.gpu_only and not gpu else "not in BENCH_DISTRIBUTED_VARIANTS"
            row = {"backend": v.name, "status": STATUS_SKIPPED, "reason": why}
        row = {"suite": "distributed", "workload": workload, "params": params, **row}
        loss = (row.get("distributed") or {}).get("loss")
        if eager_loss is not None and loss is not None:
            row["correctness"] = {"loss": loss, "eager_loss": eager_loss, "abs_diff": abs(loss - eager_loss)}
        on_row(row)
