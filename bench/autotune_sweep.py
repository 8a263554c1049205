"""Launch autotuning on a GPU: pyjit with autotune_launch off vs on, torch.compile as peer.

    python -m bench.autotune_sweep [--no-inductor] [--only softmax,layer_norm,...]
    python -m bench.autotune_sweep --smoke   # CPU, Triton interpreter, tiny shapes (checks the script)

Per workload (fp32): eager, torch.compile, pyjit with the heuristics (``autotune_launch="off"``)
and pyjit tuned (``"on"``: a fresh disk cache, so it really tunes). Times: median over 15
samples of 10 back-to-back calls (CUDA events; bench/reduction_sweep.py's helper), as us and %
of the measured copy bandwidth. Also: tuning time (``autotune.counters['tuning_ms']``), compile
time with and without tuning, the chosen launches, the candidate timings, a "new process"
re-compile (memo cleared, another graph with the same kernels) that must not benchmark, and
every result checked against eager. Runs in about 1-2 minutes on an H100.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reduction_sweep import _time_ms, copy_bandwidth_gbs  # noqa: E402

import pyjit.backend as pb  # noqa: E402
from pyjit import config as cfg  # noqa: E402
from pyjit.runtime import autotune  # noqa: E402

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TUNE_MODE = "auto"  # "force" in --smoke (the CPU is not tuned by default)
_LAUNCH = re.compile(r"(pyjit_fused_\w+)\[\(.*?\)\]\(.*?(XBLOCK=\d+(?:, RBLOCK=\d+)?, num_warps=\d+)\)")


def workloads(scale: int) -> list[tuple[str, Callable[..., Any], list[torch.Tensor]]]:
    out: list[tuple[str, Callable[..., Any], list[torch.Tensor]]] = []
    def layer_norm(n: int) -> Callable[..., Any]:
        return lambda a, g, b: F.layer_norm(a, (n,), g, b)

    for rows, n in ((8192, 1024), (2048, 32768), (16384, 4096)):
        rows //= scale
        x = torch.randn(rows, n, device=DEV)
        out.append((f"layer_norm {rows}x{n}", layer_norm(n),
                    [x, torch.randn(n, device=DEV), torch.randn(n, device=DEV)]))
        out.append((f"softmax {rows}x{n}", lambda a: F.softmax(a, -1), [x]))
    r = 4096 // scale
    out.append((f"cross_entropy {r}x32000", lambda a, t: F.cross_entropy(a, t),
                [torch.randn(r, 32000, device=DEV), torch.randint(0, 32000, (r,), device=DEV)]))
    # Bias gradients: a column sum, plain and with GELU's backward as prologue.
    out.append((f"bias_grad sum(0) {r}x3072", lambda g: g.sum(0), [torch.randn(r, 3072, device=DEV)]))

    def gelu_bias_grad(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
        pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
        return (g * (cdf + x * pdf)).sum(0)

    out.append((f"gelu_bwd+sum(0) {r}x3072", gelu_bias_grad,
                [torch.randn(r, 3072, device=DEV), torch.randn(r, 3072, device=DEV)]))
    return out


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


def _compile(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[Callable[..., Any], float]:
    start = time.perf_counter()
    compiled = pb.compile_fx(torch.fx.symbolic_trace(fn), inputs)
    if DEV.type == "cuda":
        torch.cuda.synchronize()
    return compiled, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated name prefixes")
    ap.add_argument("--smoke", action="store_true", help="CPU, Triton interpreter, rows / 512")
    args = ap.parse_args()
    global TUNE_MODE
    scale = 1
    if args.smoke or DEV.type != "cuda":
        scale, TUNE_MODE, args.no_inductor = 512, "force", True
        cfg.config.cpu_backend = "triton_interpret"
        cfg.config.autotune_launch_min_bytes = 1 << 16
    t0 = time.time()
    peak = copy_bandwidth_gbs(1 << 30 if DEV.type == "cuda" else 1 << 24)
    device = torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu (Triton interpreter)"
    print(f"# {device} torch {torch.__version__} copy {peak:.0f} GB/s", flush=True)
    cfg.config.raise_on_internal_error = True
    rows_out = []
    failures = 0
    for name, fn, inputs in workloads(scale):
        if args.only and not any(name.startswith(p) for p in args.only.split(",")):
            continue
        with torch.no_grad():
            expected = _first(fn(*inputs))
            nbytes = sum(t.numel() * t.element_size() for t in [*inputs, expected])
            row: dict[str, Any] = {"workload": name, "MB": round(nbytes / 2 ** 20, 1)}

            def pct(ms: float) -> str:
                return f"{100 * nbytes / (ms * 1e-3) / 1e9 / peak:.0f}% ({ms * 1e3:.0f} us)"

            row["eager"] = pct(_time_ms(lambda: fn(*inputs)))
            if not args.no_inductor:
                try:
                    torch._dynamo.reset()
                    ind = torch.compile(fn, dynamic=False)
                    ind(*inputs)
                    row["torch.compile"] = pct(_time_ms(lambda: ind(*inputs)))
                except Exception as e:  # reported, not fatal
                    row["torch.compile"] = f"error {type(e).__name__}: {e}"[:200]
            for mode in ("off", TUNE_MODE):
                # A fresh cache per mode: "auto" really tunes (no stored choice, no graph entry).
                with cfg.patch(cache_dir=tempfile.mkdtemp(prefix=f"pyjit-at-{mode}-"), autotune_launch=mode):
                    autotune.clear_memo()
                    before = dict(autotune.counters)
                    compiled, compile_s = _compile(fn, inputs)
                    out = _first(compiled(*inputs))
                    ok = torch.allclose(out, expected, atol=1e-3, rtol=1e-3)
                    failures += int(not ok)
                    tag = "pyjit off" if mode == "off" else "pyjit tuned"
                    row[tag] = pct(_time_ms(lambda: compiled(*inputs)))
                    row[f"{tag} compile_s"] = round(compile_s, 2)
                    row[f"{tag} matches eager"] = ok
                    row[f"{tag} launches"] = [f"{m.group(1).split('_')[-1]}: {m.group(2)}"
                                              for m in _LAUNCH.finditer(compiled.pyjit_source)]
                    if mode != "off":
                        row["tuning_ms"] = round(autotune.counters["tuning_ms"] - before.get("tuning_ms", 0.0), 1)
                        row["kernels tuned"] = autotune.counters["tunings"] - before.get("tunings", 0)
                        row["candidate timings (ms)"] = [
                            {k: (round(v, 4) if v is not None else "failed") for k, v in r["timings"].items()}
                            for r in autotune._memo.values()]
                        # A "new process": memo cleared; a graph-cache key setting these kernels
                        # ignore is changed so the module is generated again: the stored choices
                        # must answer without a benchmark.
                        autotune.clear_memo()
                        bench_before = autotune.counters["benchmarks"]
                        with cfg.patch(backend_split_reduction_min=cfg.config.backend_split_reduction_min + 1):
                            again, again_s = _compile(fn, inputs)
                        row["re-compile launches equal"] = _LAUNCH.findall(again.pyjit_source) == \
                            _LAUNCH.findall(compiled.pyjit_source)
                        failures += int(not row["re-compile launches equal"])
                        row["re-compile benchmarks (must be 0)"] = autotune.counters["benchmarks"] - bench_before
                        row["re-compile s"] = round(again_s, 2)
                        same = torch.allclose(_first(again(*inputs)), expected, atol=1e-3, rtol=1e-3)
                        failures += int(not same) + int(row["re-compile benchmarks (must be 0)"] != 0)
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    print("\n| workload | MB | eager | torch.compile | pyjit off | pyjit tuned | tuning ms | launches off -> tuned |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows_out:
        print(f"| {r['workload']} | {r['MB']} | {r['eager']} | {r.get('torch.compile', '-')} | {r['pyjit off']} | "
              f"{r['pyjit tuned']} | {r.get('tuning_ms')} | {'; '.join(r['pyjit off launches'])} -> "
              f"{'; '.join(r['pyjit tuned launches'])} |")
    print(f"\n# {time.time() - t0:.0f} s, {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
