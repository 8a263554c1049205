"""Launching the two ranks of a distributed test and collecting what each rank reported."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def devices() -> list[Any]:
    """``cpu`` (gloo) always; ``cuda`` (NCCL) where two GPUs are present."""
    two_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not two_gpus, reason="needs 2 CUDA GPUs and NCCL"))]


def run_ranks(worker: Callable[..., None], device: str, tmp_path: Path) -> dict[str, list[str]]:
    """Spawn the ranks once (``worker(rank, port, device, out_dir)`` writes ``rank<r>.json``: a
    traceback per failed check); every check's failures by name. One test per device, so that
    pytest-xdist never spawns the same group twice on two workers."""
    mp.spawn(worker, args=(free_port(), device, str(tmp_path)), nprocs=WORLD)
    merged: dict[str, list[str]] = {}
    for rank in range(WORLD):
        with open(tmp_path / f"rank{rank}.json") as f:
            for name, tb in json.load(f).items():
                merged.setdefault(name, []).append(f"rank {rank}:\n{tb}")
    return merged


def init_rank(rank: int, port: int, device: str) -> str:
    """Join the process group (gloo on CPU, NCCL on CUDA) the way torchrun's env:// does; the
    device this rank runs on."""
    import datetime
    import os

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    # A check failing on one rank only leaves the other in a collective: time out, never hang.
    dist.init_process_group(backend, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    import pyjit

    pyjit.config.config.warm_start = False
    return device


def run_checks(rank: int, out_dir: str, checks: list[tuple[str, Callable[[], None]]]) -> None:
    """Run each check in step with the other rank, write the tracebacks of the failed ones to
    ``rank<r>.json`` (read by :func:`run_ranks`) and leave the process group."""
    import os
    import traceback

    import pyjit

    failures: dict[str, str] = {}
    for name, check in checks:
        try:
            check()
        except Exception:  # noqa: BLE001 - reported per check to the test process
            failures[name] = traceback.format_exc()
        dist.barrier()
        pyjit.reset()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(failures, f)
    dist.barrier()
    dist.destroy_process_group()
