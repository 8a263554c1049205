"""The benchmark workloads (bench/backend_kernels.py) at small sizes: results equal eager and
the kernels stay few. Driven through torch.compile like users do."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit
import pyjit.backend as backend

from .conftest import make


def _compiled(fn):
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend.compile_fx, dynamic=False)


def _check(fn, *inputs, atol=1e-4, rtol=1e-4):
    with torch.no_grad():
        expected = fn(*inputs)
        actual = _compiled(fn)(*inputs)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs


def test_rms_norm_bf16(device: str) -> None:
    x, g = make([6, 32], device, torch.bfloat16), make([32], device, torch.bfloat16)

    def rms_norm(a, w):
        af = a.float()
        return (af * torch.rsqrt(af.pow(2).mean(-1, keepdim=True) + 1e-6)).to(a.dtype) * w

    _check(rms_norm, x, g, atol=2e-2, rtol=2e-2)
    assert backend.metrics.generated_kernel_count == 1


def test_cross_entropy(device: str) -> None:
    logits = make([8, 17], device)
    target = torch.randint(0, 17, (8,), device=device)
    _check(lambda lg, t: F.cross_entropy(lg, t), logits, target)


def test_linear_gelu_residual_fp16(device: str) -> None:
    """One generated kernel: on the CPU the epilogue after the extern addmm; on CUDA the matmul
    template with its fused bias/GELU/residual epilogue (template forced and tuning off: with
    tuning, which of template, cuBLAS and a split epilogue wins on this tiny shape is a matter
    of timing -- the choice itself is tested in test_epilogue_tuning.py)."""
    if device == "cpu":
        dt = torch.float32  # CPU addmm has no fp16 kernel worth testing against
    else:
        dt = torch.float16
    x, w, b, r = make([8, 16], device, dt), make([32, 16], device, dt), make([32], device, dt), make([8, 32], device, dt)
    settings = {"matmul_template": "force", "autotune": False} if device == "cuda" else {}
    with pyjit.config.patch(**settings):
        _check(lambda a, ww, bb, rr: F.gelu(F.linear(a, ww, bb)) + rr, x, w, b, r, atol=1e-2, rtol=1e-2)
    assert backend.metrics.generated_kernel_count == 1


def test_attention(device: str) -> None:
    q, k, v = (make([2, 8, 16], device) for _ in range(3))
    _check(lambda qq, kk, vv: torch.softmax(qq @ kk.transpose(-1, -2) / 4.0, -1) @ vv, q, k, v)


class Block(nn.Module):
    """A GPT-2 style block: pre-LN attention (causal) and MLP with residuals."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        mask = torch.tril(torch.ones(t, t, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


@pytest.mark.parametrize("use_sdpa", [False])
def test_gpt2_block(device: str, use_sdpa: bool) -> None:
    torch.manual_seed(0)
    block = Block().to(device).eval()
    x = make([2, 8, 32], device, low=-1, high=1)
    _check(block, x, atol=1e-4, rtol=1e-4)


def test_bench_workloads_compile_and_match(device: str) -> None:
    """Every workload of bench/backend_kernels.py, at tiny sizes, equals eager under pyjit."""
    import importlib
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    bench = importlib.import_module("bench.backend_kernels")
    for name, (fn, inputs, _) in bench.workloads(True, device=device, tiny=True).items():
        backend.metrics.reset()
        tol = 2e-2 if any(t.dtype in (torch.float16, torch.bfloat16) for t in inputs) else 1e-4
        _check(fn, *inputs, atol=tol, rtol=tol)
        # compiled: generated kernels, or a rewrite into one extern call (attention -> SDPA)
        m = backend.metrics
        assert m.generated_kernel_count >= 1 or m.attention_rewrites >= 1, name
        assert not m.eager_graphs, (name, m.eager_graphs)
