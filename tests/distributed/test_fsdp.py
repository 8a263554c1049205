"""FSDP under pyjit.jit: a model sharded with ``fully_shard`` (FSDP2) and one wrapped in
``FullyShardedDataParallel(use_orig_params=True)`` (FSDP1) train for three optimizer steps
with losses and gathered parameters equal to eager FSDP's on every rank; the FSDP modules'
calls break the graph with kind ``distributed`` (their hooks run natively) while their
forwards compile as frames of their own.

Two processes per device (gloo on CPU, NCCL on CUDA when two GPUs are present), spawned once
per device; each check reports its failure by name.
"""
from __future__ import annotations


import pytest
import torch
import torch.distributed as dist
from torch import nn

from .spawn import WORLD, devices, init_rank, run_checks, run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

STEPS = 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(8, 16)
        self.lin2 = nn.Linear(16, 8)

    def forward(self, x):
        return x + self.lin2(torch.relu(self.lin1(x)))


class Net(nn.Module):
    """Two FSDP units called in turn, then a head whose parameters the root unit manages: the
    head compiles in the resume function after the second unit, reading the root's gathered
    parameters. (Units called in a ``for`` loop compile too, but the loop's frame runs eagerly
    after its first break: docs/distributed.md.)"""

    def __init__(self) -> None:
        super().__init__()
        self.b0 = Block()
        self.b1 = Block()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.b0(x)
        x = self.b1(x)
        return self.head(x).square().mean()


def _fsdp2(device: str):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Net().to(device)
    mesh = init_device_mesh(torch.device(device).type, (WORLD,))
    fully_shard(model.b0, mesh=mesh)
    fully_shard(model.b1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _fsdp1(device: str):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(0)
    return FSDP(Net().to(device), auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                device_id=torch.device(device))


def _full_params(kind: str, model) -> list[torch.Tensor]:
    if kind == "fsdp2":
        return [p.full_tensor().detach().clone() for p in model.parameters()]
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(model):
        return [p.detach().clone() for p in model.parameters()]


def _train(kind: str, device: str, rank: int, jit: bool):
    import pyjit

    model = (_fsdp2 if kind == "fsdp2" else _fsdp1)(device)
    run = pyjit.jit(model) if jit else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    losses = []
    for _ in range(STEPS):
        loss = run(torch.randn(4, 8, generator=gen).to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, _full_params(kind, model)


def _check_training(kind: str, device: str, rank: int) -> None:
    import pyjit
    from pyjit.backend.metrics import metrics

    expected_losses, expected_params = _train(kind, device, rank, jit=False)
    pyjit.reset()
    metrics.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        losses, params = _train(kind, device, rank, jit=True)
    torch.testing.assert_close(losses, expected_losses)
    torch.testing.assert_close(params, expected_params)
    # The blocks' forwards and the head (with their backwards) were compiled by pyjit's
    # backend, none run as captured.
    compiled = metrics.compiled_graphs  # graph-cache hits included
    assert compiled >= 6 and not metrics.eager_graphs, (compiled, metrics.eager_graphs)


def _check_breaks(kind: str, device: str, rank: int) -> None:
    """Every graph break of the jitted forward is an FSDP module call (kind ``distributed``)."""
    import pyjit

    model = (_fsdp2 if kind == "fsdp2" else _fsdp1)(device)
    with torch.no_grad():
        explained = pyjit.explain(model)(torch.randn(4, 8).to(device))
    assert explained.graph_count == 3 and not explained.eager_frames, str(explained)  # b0, b1, head
    assert explained.break_count >= 2, str(explained)
    for gb in explained.graph_breaks:
        assert gb.kind == "distributed" and ("FSDP" in gb.explanation or "torch.distributed" in gb.explanation), gb.format()


def _worker(rank: int, port: int, device: str, out_dir: str) -> None:
    device = init_rank(rank, port, device)
    run_checks(rank, out_dir, [(f"{kind}_{what}", lambda k=kind, c=check: c(k, device, rank))
                               for kind in ("fsdp2", "fsdp1")
                               for what, check in (("training", _check_training), ("breaks", _check_breaks))])


@pytest.mark.parametrize("device", devices())
def test_fsdp_trains_like_eager(device, tmp_path):
    """FSDP2 and FSDP1 (use_orig_params=True): three steps under pyjit.jit give eager FSDP's
    losses and gathered parameters on both ranks, compiled (fsdp*_training); every graph break
    is an FSDP call of kind ``distributed`` (fsdp*_breaks)."""
    failures = run_ranks(_worker, device, tmp_path)
    assert not failures, "\n".join(f"--- {name}\n" + "\n".join(tbs) for name, tbs in failures.items())
