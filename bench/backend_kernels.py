"""Backend GPU kernel benchmark: eager vs torch.compile (inductor) vs pyjit's backend, one run.

``run(quick=True) -> dict`` (called by the bench harness, kept verbatim) or
``python -m bench.backend_kernels``. Workloads: pointwise chain, GELU, softmax, layer norm,
RMS norm (bf16), cross-entropy, linear + GELU + residual (fp16), attention (fp16), a GPT-2
style block (fp16). For each: ms per call (median of CUDA-event timings), speedup over
eager, and for memory-bound workloads the achieved bandwidth
(bytes of inputs + outputs / time) as a % of the measured device-to-device copy bandwidth.
pyjit's backend is driven through ``torch.compile(fn, backend=pyjit.backend.compile_fx)``.
On a machine without CUDA it returns ``{"skipped": ...}``.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Callable

import torch
import torch.nn.functional as F


def _time_ms(fn: Callable[[], Any], iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), 10)
    return 2 * nbytes / (ms * 1e-3) / 1e9


class Gpt2Block(torch.nn.Module):
    """A GPT-2 style block: pre-LN causal attention and a tanh-GELU MLP, with residuals."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.tril(torch.ones(t, t, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def workloads(quick: bool, device: str = "cuda", tiny: bool = False
              ) -> dict[str, tuple[Callable[..., Any], list[torch.Tensor], bool]]:
    """name -> (fn, inputs, memory_bound). ``tiny``: small shapes for a CPU smoke test."""
    d = torch.device(device)
    n = 64 if tiny else (4096 if quick else 8192)
    vocab = 96 if tiny else (4096 if quick else 8192)
    h = 32 if tiny else 1024
    rows = 16 if tiny else 2048
    seq, heads, hd = (16, 2, 16) if tiny else (1024, 16, 64)
    half = torch.float32 if device == "cpu" else torch.float16  # CPU matmuls are not the point
    x = torch.randn(n, n, device=d)
    y = torch.randn(n, n, device=d)
    xb = torch.randn(n, n, device=d, dtype=torch.bfloat16)
    wb = torch.randn(n, device=d, dtype=torch.bfloat16)
    w, b = torch.randn(n, device=d), torch.randn(n, device=d)
    logits = torch.randn(n, vocab, device=d)
    target = torch.randint(0, vocab, (n,), device=d)
    xl = torch.randn(rows, h, device=d, dtype=half)
    wl = torch.randn(4 * h, h, device=d, dtype=half)
    bl = torch.randn(4 * h, device=d, dtype=half)
    res = torch.randn(rows, 4 * h, device=d, dtype=half)
    q, k, v = (torch.randn(heads, seq, hd, device=d, dtype=half) for _ in range(3))
    dm, nh = (32, 4) if tiny else (768, 12)
    block = Gpt2Block(d=dm, heads=nh).to(device=d, dtype=half).eval()
    xblock = torch.randn(2 if tiny else (8 if quick else 16), 8 if tiny else (256 if quick else 1024), dm,
                         device=d, dtype=half)

    def rms_norm(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        af = a.float()
        return (af * torch.rsqrt(af.pow(2).mean(-1, keepdim=True) + 1e-6)).to(a.dtype) * g

    return {
        "pointwise_chain": (lambda a, c: ((a + c).relu() * 2 - a).sigmoid(), [x, y], True),
        "gelu": (lambda a: F.gelu(a), [x], True),
        "softmax": (lambda a: F.softmax(a, -1), [x], True),
        "layer_norm": (lambda a, g, bb: F.layer_norm(a, (n,), g, bb), [x, w, b], True),
        "rms_norm_bf16": (rms_norm, [xb, wb], True),
        "cross_entropy": (lambda lg, t: F.cross_entropy(lg, t), [logits, target], True),
        "linear_gelu_residual": (lambda a, ww, bb, r: F.gelu(F.linear(a, ww, bb)) + r, [xl, wl, bl, res], False),
        "attention": (lambda qq, kk, vv: torch.softmax(qq @ kk.transpose(-1, -2) / math.sqrt(hd), -1) @ vv,
                      [q, k, v], False),
        "gpt2_block": (block, [xblock], False),
    }


def run(quick: bool = True) -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    import pyjit.backend

    torch._dynamo.reset()
    peak = copy_bandwidth_gbs()
    iters = 20 if quick else 100
    rows = []
    for name, (fn, inputs, memory_bound) in workloads(quick).items():
        with torch.no_grad():
            out = fn(*inputs)
            nbytes = sum(t.numel() * t.element_size() for t in inputs) + sum(
                t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            row: dict[str, Any] = {"workload": name, "bytes": nbytes}
            for label, compiled in (("eager", fn),
                                    ("inductor", torch.compile(fn, dynamic=False)),
                                    ("pyjit", torch.compile(fn, backend=pyjit.backend.compile_fx, dynamic=False))):
                try:
                    ms = _time_ms(lambda: compiled(*inputs), iters)
                    row[f"{label}_ms"] = ms
                    if memory_bound:
                        row[f"{label}_pct_copy_bw"] = 100 * nbytes / (ms * 1e-3) / 1e9 / peak
                except Exception as e:  # a failing backend is reported, not fatal
                    row[f"{label}_error"] = f"{type(e).__name__}: {e}"[:200]
            for label in ("inductor", "pyjit"):
                if f"{label}_ms" in row and "eager_ms" in row:
                    row[f"{label}_speedup"] = row["eager_ms"] / row[f"{label}_ms"]
        rows.append(row)

    def geomean(key: str) -> float | None:
        vals = [r[key] for r in rows if key in r]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None

    return {"copy_bandwidth_gbs": peak, "rows": rows, "geomean_speedup_inductor": geomean("inductor_speedup"),
            "geomean_speedup_pyjit": geomean("pyjit_speedup"), "device": torch.cuda.get_device_name()}


_COMPILE_CHILD = r"""
import json, sys, time
import torch, torch.nn.functional as F
import pyjit.backend as pb
from pyjit import config
config.config.cpu_backend = "triton_interpret"
config.config.cache_dir = sys.argv[1]
device = sys.argv[2]
def f(x, w, b):
    for _ in range(12):
        x = F.layer_norm(x + F.gelu(x @ w), (64,), b, b)
    return x.softmax(-1)
x, w, b = (torch.randn(16, 64, device=device), torch.randn(64, 64, device=device), torch.randn(64, device=device))
gm = torch.fx.symbolic_trace(f)
t = time.perf_counter()
pb.compile_fx(gm, [x, w, b])
print(json.dumps({"ms": (time.perf_counter() - t) * 1e3, "graph_cache_hit": pb.metrics.graph_cache_hits == 1,
                  "kernels": pb.metrics.generated_kernel_count}))
"""


def compile_times(device: str = "cpu") -> dict[str, Any]:
    """Cold and warm (graph-cache hit, fresh process) compile_fx time of a 12-layer graph."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as cache:
        runs = [json.loads(subprocess.run([sys.executable, "-c", _COMPILE_CHILD, cache, device], env=env,
                                          capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                for _ in range(2)]
    return {"cold_ms": runs[0]["ms"], "warm_ms": runs[1]["ms"], "warm_hit": runs[1]["graph_cache_hit"],
            "kernels": runs[0]["kernels"]}


if __name__ == "__main__":
    import json
    import sys

    if "--compile-times" in sys.argv:
        print(json.dumps(compile_times("cuda" if torch.cuda.is_available() else "cpu"), indent=2))
    else:
        print(json.dumps(run(quick=False), indent=2))
