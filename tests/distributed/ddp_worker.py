"""The rank side of the DDP tests: one process per rank, started by ``test_ddp.py``.

Each scenario builds the same model twice (same seed), wraps one in eager DDP and the other in
DDP compiled by pyjit, runs three optimizer steps on rank-dependent data, and asserts that every
parameter and buffer is equal to eager DDP's on this rank, and that the compiled graph was split
into as many subgraphs as DDP has buckets once it rebuilt them.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 32
# One Linear(32, 32) holds 4096 + 128 bytes: a cap just above its weight closes a bucket after
# each layer's weight and bias, whatever order their gradients arrive in.
CAP_MB = 4100 / 2**20
LAYERS = 3


class Block(nn.Module):
    def __init__(self, norm: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.BatchNorm1d(WIDTH) if norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.norm is not None:
            y = self.norm(y)
        return torch.relu(y)


class Net(nn.Module):
    def __init__(self, norm: bool = False, unused: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(norm) for _ in range(LAYERS)])
        self.unused = nn.Linear(WIDTH, WIDTH) if unused else None
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class AttentionNet(nn.Module):
    """GPT-style blocks (``q @ k.transpose``, SDPA) for the bf16 autocast scenario."""

    def __init__(self, layers: int = 2, d: int = WIDTH, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(2, -1, x.shape[-1])
        B, T, C = x.shape
        for i, (qkv, proj, norm) in enumerate(zip(self.qkv, self.proj, self.norm)):
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in qkv(norm(x)).split(C, 2))
            if i % 2:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = ((q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5)).softmax(-1) @ v
            x = x + proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x.view(B * T, C)


def make(device: str, attention: bool = False, **kw: Any) -> nn.Module:
    torch.manual_seed(0)
    return (AttentionNet() if attention else Net(**kw)).to(device)


def batch(rank: int, step: int, micro: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + micro)
    return torch.randn(8, WIDTH, generator=g).to(device)


def train(ddp: Any, call: Callable[[torch.Tensor], torch.Tensor], rank: int, device: str, *,
          accumulate: int = 1, autocast: bool = False) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(3):
        for micro in range(accumulate):
            sync = micro == accumulate - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                    out = call(batch(rank, step, micro, device))
                out.float().square().mean().backward()
        opt.step()
        opt.zero_grad()


def buckets_of(ddp: Any) -> int:
    return len(ddp.reducer._get_zeros_like_grad_buckets())


# name -> (DDP keyword arguments, model keyword arguments, how pyjit is applied, micro-batches)
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any], str, int]] = {
    "jit": ({}, {}, "jit", 1),
    # DDP's own Python is not traced, so fullgraph=True holds for the module it wraps.
    "fullgraph": ({}, {}, "jit_fullgraph", 1),
    "jit_before_wrap": ({}, {}, "inner", 1),
    "enable": ({}, {}, "enable", 1),
    "ignored_params": ({}, {}, "jit", 1),
    "find_unused_parameters": ({"find_unused_parameters": True}, {"unused": True}, "jit", 1),
    "static_graph": ({"static_graph": True}, {}, "jit", 1),
    "no_sync": ({}, {}, "jit", 2),
    "broadcast_buffers": ({"broadcast_buffers": True}, {"norm": True}, "jit", 1),
    "gradient_as_bucket_view": ({"gradient_as_bucket_view": True}, {}, "jit", 1),
    "no_split": ({}, {}, "jit", 1),
    # GPT-style attention under bf16 autocast (the backward of a saved transposed value): on
    # CUDA only, where it failed; the CPU tests cover it in tests/backend/test_aot_saved_layout.py.
    "gpt_autocast": ({}, {"attention": True}, "jit", 1),
}
CUDA_ONLY = {"gpt_autocast"}


def run_scenario(name: str, rank: int, device: str) -> None:
    import pyjit
    from pyjit.distributed import ddp as pyjit_ddp

    ddp_kw, model_kw, how, accumulate = SCENARIOS[name]
    ddp_kw = {"bucket_cap_mb": CAP_MB, **ddp_kw}
    if device == "cuda":
        ddp_kw["device_ids"] = [rank]
    eager_model, model = make(device, **model_kw), make(device, **model_kw)
    if name == "ignored_params":
        ignored = ["blocks.0.fc.weight", "blocks.0.fc.bias"]
        DDP._set_params_and_buffers_to_ignore_for_model(eager_model, ignored)
        DDP._set_params_and_buffers_to_ignore_for_model(model, ignored)
    autocast = name == "gpt_autocast"
    eager = DDP(eager_model, **ddp_kw)
    train(eager, eager, rank, device, accumulate=accumulate, autocast=autocast)

    pyjit.reset()
    before = len(pyjit_ddp.plans)
    with pyjit.config.patch(ddp_split=name != "no_split"):
        if how == "inner":
            ddp = DDP(pyjit.jit(model), **ddp_kw)
            train(ddp, ddp, rank, device, accumulate=accumulate, autocast=autocast)
        elif how == "enable":
            ddp = DDP(model, **ddp_kw)
            with pyjit.enable():
                train(ddp, ddp, rank, device, accumulate=accumulate, autocast=autocast)
        else:
            ddp = DDP(model, **ddp_kw)
            jitted = pyjit.jit(ddp, fullgraph=how == "jit_fullgraph")
            train(ddp, jitted, rank, device, accumulate=accumulate, autocast=autocast)
    tol = {"atol": 2e-2, "rtol": 2e-2} if autocast else {}  # bf16: kernels round differently
    for (n, a), b in zip(eager.module.state_dict().items(), ddp.module.state_dict().values()):
        torch.testing.assert_close(b, a, msg=lambda m, n=n: f"{name}, rank {rank}, {n}: {m}", **tol)
    new_plans = pyjit_ddp.plans[before:]
    if name == "no_split":
        assert not new_plans, f"no_split: the graph was split ({new_plans})"
        return
    assert new_plans, f"{name}: the wrapped module's training graph was never split (not compiled?)"
    if name != "find_unused_parameters":  # the unused layer has a bucket but no node in the graph
        got = [p.num_subgraphs for p in new_plans]
        assert set(got) == {buckets_of(ddp)}, f"{name}: subgraphs {got}, DDP buckets {buckets_of(ddp)}"


def check_overlap(rank: int, device: str) -> None:
    """Each bucket's all-reduce is launched right after the backward of its subgraph, before the
    earlier subgraphs' backward runs: DDP's comm hook records how many compiled backward nodes
    had finished when it was called for each bucket."""
    import pyjit
    from pyjit.backend.aot.runtime import CompiledFunction
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    finished = [0]
    launched: list[int] = []
    original = CompiledFunction.backward

    def counting_backward(ctx: Any, *grads: Any) -> Any:
        out = original(ctx, *grads)
        finished[0] += 1
        return out

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects annotations it cannot resolve
        launched.append(finished[0])
        return default_hooks.allreduce_hook(None, bucket)

    pyjit.reset()
    ddp = DDP(make(device), bucket_cap_mb=CAP_MB, **({"device_ids": [rank]} if device == "cuda" else {}))
    ddp.register_comm_hook(None, hook)
    jitted = pyjit.jit(ddp)
    CompiledFunction.backward = staticmethod(counting_backward)  # type: ignore[method-assign]
    try:
        for step in range(3):  # DDP rebuilds its buckets in the second step
            finished[0] = 0
            launched.clear()
            jitted(batch(rank, step, 0, device)).square().mean().backward()
    finally:
        CompiledFunction.backward = staticmethod(original)  # type: ignore[method-assign]
    buckets = buckets_of(ddp)
    assert buckets > 1 and launched == list(range(1, buckets + 1)), \
        f"rank {rank}: all-reduce launched after {launched} compiled backward nodes, {buckets} buckets"


def worker(rank: int, world: int, port: int, device: str, cache_dir: str, names: list[str],
           env_init: bool = False) -> None:
    import pyjit

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    if env_init:  # what torchrun sets for each rank; init_process_group reads it (env://)
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
        os.environ["LOCAL_RANK"] = str(rank)
        dist.init_process_group(backend, init_method="env://")
    else:
        dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        # A forward that saves for backward from the first call (no deferred-saving variant):
        # one compile fewer per subgraph, the same training path.
        with pyjit.config.patch(cache_dir=cache_dir, cpp_fast_compile=True, raise_on_internal_error=True,
                                aot_defer_saving=False):
            for name in names:
                if name == "overlap":
                    check_overlap(rank, device)
                elif name not in CUDA_ONLY or device == "cuda":
                    run_scenario(name, rank, device)
    finally:
        dist.destroy_process_group()
