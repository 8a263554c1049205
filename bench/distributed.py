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
profiled step. The loss after the measured steps is compared with eager DDP's (``correctness``).
The ranks are processes this module starts (``torch.multiprocessing``); rank 0 writes the rows.
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


GPU_SHAPE = Shape(layers=8, dim=1024, heads=16, seq=512, batch=8, vocab=50304, steps=10)
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


def _overlap_share(module: Any, opt: Any, idx: torch.Tensor, target: torch.Tensor) -> float | None:
    """Of the NCCL kernels' time in one profiled step, the share during which a compute kernel
    ran at the same time (CUDA only; None when the profiler gives no kernel events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _step(module, opt, idx, target, "cuda")
        torch.cuda.synchronize()
    comm, compute = [], []
    for e in prof.events():
        if getattr(e, "device_type", None) is None or "cuda" not in str(e.device_type).lower():
            continue
        span = (e.time_range.start, e.time_range.end)
        (comm if "nccl" in e.name.lower() else compute).append(span)
    total = sum(b - a for a, b in comm)
    if not comm or total <= 0:
        return None
    compute.sort()
    covered = 0.0
    for a, b in comm:
        for c, d in compute:
            if c >= b:
                break
            covered += max(0.0, min(b, d) - max(a, c))
    return min(1.0, covered / total)


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
        for i in range(shape.steps):
            t0 = time.perf_counter()
            loss = _step(module, opt, *batches[i % 2], device)
            _sync(device)
            samples.append(time.perf_counter() - t0)
        overlap = _overlap_share(module, opt, *batches[0]) if device == "cuda" else None
    timing = {"unit": "s", "timer": "perf_counter", "samples": samples, "calls_per_sample": 1, **summarize(samples)}
    new_plans = pyjit_ddp.plans[plans_before:]
    row.update(timing=timing, first_call_s=first,
               distributed={"compile_s_estimate": max(0.0, first - statistics.median(samples)),
                            "peak_memory_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
                            "overlap_share": overlap,
                            "subgraphs": [p.num_subgraphs for p in new_plans],
                            "loss": float(loss) if loss is not None else None})
    return row


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

    gpu = device.type == "cuda" and torch.cuda.device_count() >= 2
    dev = "cuda" if gpu else "cpu"
    workload = "gpt_ddp_2gpu" if gpu else "gpt_ddp_cpu_smoke"
    variants = VARIANTS + EXTRA_VARIANTS
    runnable = [v.name for v in variants if gpu or not v.gpu_only]
    params: dict[str, Any] = {"device": dev, "world_size": 2}
    if not dist.is_available():
        for v in variants:
            on_row({"suite": "distributed", "workload": workload, "backend": v.name, "status": STATUS_SKIPPED,
                    "reason": "torch.distributed is not built", "params": params})
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        try:
            mp.spawn(_rank_main, args=(2, _free_port(), dev, out, runnable), nprocs=2, join=True)
            with open(out) as f:
                result = json.load(f)
        except Exception as exc:
            for v in variants:
                on_row({"suite": "distributed", "workload": workload, "backend": v.name, "status": STATUS_ERROR,
                        "reason": f"the ranks failed: {type(exc).__name__}: {exc}"[:300], "params": params})
            return
    params["shape"] = result["shape"]
    rows = {r["backend"]: r for r in result["rows"]}
    eager_loss = (rows.get("eager_ddp", {}).get("distributed") or {}).get("loss")
    for v in variants:
        row = rows.get(v.name)
        if row is None:
            row = {"backend": v.name, "status": STATUS_SKIPPED, "reason": "GPU rows: needs 2 GPUs"}
        row = {"suite": "distributed", "workload": workload, "params": params, **row}
        loss = (row.get("distributed") or {}).get("loss")
        if eager_loss is not None and loss is not None:
            row["correctness"] = {"loss": loss, "eager_loss": eager_loss, "abs_diff": abs(loss - eager_loss)}
        on_row(row)
