"""Channels-last layout A/B on a GPU (convolution networks on tensor cores): run from the repo root on an H100,

    python -m bench.layout_sweep            # all three workloads, ~60-90 s
    python -m bench.layout_sweep --no-peer  # without torch.compile (faster)
    python -m bench.layout_sweep --cl       # also conv_bn_relu_block_cl, resnet_block_cl (module
                                             # and input already channels_last; adds ~30 s)
    python -m bench.layout_sweep --cpu-smoke --no-peer  # logic check on CPU (small sizes, "on")

For small_resnet (bench/models.py), resnet_block and conv_bn_relu_block (bench/workloads.py,
`large` sizes, fp32, eval BN, torch's default cuDNN TF32) it compiles the module with pyjit's
backend (`compile_fx` on the fx-traced module: independent callables, so the variants can be
timed interleaved in one process) with `layout_opt` "off" and "auto", checks each against
eager (values and output strides), and prints median CUDA-event times per call for eager,
pyjit off, pyjit auto and torch.compile (the peer), plus kernels/externs per variant.
"""
from __future__ import annotations

import statistics
import sys
import time

import os

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

import torch  # noqa: E402

import pyjit.backend as backend  # noqa: E402
from bench.workloads import by_name  # noqa: E402
from pyjit import config as cfg  # noqa: E402

ROUNDS, CALLS = 7, 20


def compile_pyjit(module: torch.nn.Module, x: torch.Tensor, layout: str) -> tuple:
    backend.metrics.reset()
    with cfg.patch(layout_opt=layout, backend_disk_cache=False, raise_on_internal_error=True):
        fn = backend.compile_fx(torch.fx.symbolic_trace(module), [x])
        fn(x)  # Triton compiles the kernels on their first launch
    m = backend.metrics
    assert not m.eager_graphs, m.eager_graphs
    return fn, f"kernels={m.generated_kernel_count} externs={m.extern_calls} layout_graphs={m.layout_graphs}" \
        + (f" skipped={m.layout_skipped}" if m.layout_skipped else "")


def time_all(fns: dict, x: torch.Tensor) -> dict:
    """Median per-call time (us) of each callable, rounds interleaved across callables."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(3):
            fn(x)
    cuda = x.is_cuda
    if cuda:
        torch.cuda.synchronize()
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            if not cuda:  # --cpu-smoke: wall clock
                t = time.perf_counter()
                for _ in range(CALLS):
                    fn(x)
                samples[name].append((time.perf_counter() - t) * 1e6 / CALLS)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(CALLS):
                fn(x)
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / CALLS)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    peer = "--no-peer" not in sys.argv
    smoke = "--cpu-smoke" in sys.argv
    assert smoke or torch.cuda.is_available(), "needs a GPU (or --cpu-smoke)"
    dev = torch.device("cpu" if smoke else "cuda")
    size, layouts = ("small", ("off", "on")) if smoke else ("large", ("off", "auto"))
    print(f"{torch.cuda.get_device_name() if not smoke else 'CPU smoke'} torch {torch.__version__} "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}")
    t0 = time.perf_counter()
    names = ["conv_bn_relu_block", "resnet_block", "small_resnet"]
    if "--cl" in sys.argv:
        names += ["conv_bn_relu_block_cl", "resnet_block_cl"]
    for name in names:
        wl = by_name(name)
        built = wl.build(dev, size)
        module = built.fn
        (x,) = built.make_inputs(torch.Generator().manual_seed(0))
        with torch.no_grad():
            ref = module(x)
            fns = {"eager": module}
            for layout in layouts:
                try:
                    fn, info = compile_pyjit(module, x, layout)
                except Exception as e:  # report and go on with the other variants
                    print(f"  {name} pyjit layout_opt={layout}: FAILED {type(e).__name__}: {e}")
                    continue
                out = fn(x)
                err = (out - ref).abs().max().item()
                ok = torch.allclose(out, ref, atol=wl.atol, rtol=wl.rtol) and out.stride() == ref.stride()
                print(f"  {name} pyjit layout_opt={layout}: {'OK' if ok else 'MISMATCH'} max|err|={err:.2e} "
                      f"strides {out.stride()} vs eager {ref.stride()}; {info}")
                fns[f"pyjit {layout}"] = fn
            if peer:
                torch._dynamo.reset()
                tc = torch.compile(module)
                out = tc(x)
                print(f"  {name} torch.compile: max|err|={(out - ref).abs().max().item():.2e}")
                fns["torch.compile"] = tc
            times = time_all(fns, x)
        base = times["eager"]
        row = "  ".join(f"{k} {v:8.1f} us ({base / v:4.2f}x)" for k, v in times.items())
        print(f"{name} [{built.shape}]: {row}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
