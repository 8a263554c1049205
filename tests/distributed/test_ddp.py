"""DistributedDataParallel compiled by pyjit against eager DDP: two ranks (gloo on CPU, NCCL on
two GPUs when present), every DDP option of ``pyjit/distributed/ddp.py``, equal parameters after
three optimizer steps, one compiled subgraph per DDP bucket, and each bucket's all-reduce
launched right after its subgraph's backward (before the earlier subgraphs' backward). The ranks
are processes started here (``torch.multiprocessing``); all scenarios share one start-up, and
the ranks share one cache directory (two processes compiling the same graphs at once)."""
from __future__ import annotations

import socket
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import ddp_worker

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cache_dir(tmp_path: Any) -> Any:
    """A fresh cache the two ranks share: both compile the same graphs at once."""
    return tmp_path / "pyjit-cache"


def spawn(device: str, names: list[str], cache_dir: Any, env_init: bool = False) -> None:
    mp.spawn(ddp_worker.worker, args=(2, free_port(), device, str(cache_dir), names, env_init), nprocs=2, join=True)


@pytest.mark.parametrize("device", DEVICES)
def test_ddp_options_match_eager(device: str, cache_dir: Any) -> None:
    """Every scenario, on ranks initialised as torchrun starts them: env:// with MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK in each rank's environment."""
    spawn(device, [*ddp_worker.SCENARIOS, "overlap"], cache_dir, env_init=True)
