"""Per-kernel device time of one workload under several backends (``torch.profiler``).

    python -m bench.profile_kernels --workload gpt2_decoder_train --backends pyjit,torch.compile \
        [--size large] [--device cuda] [--calls 5] [--top 25] [--json out.json] [--gemms]

For each backend: build the workload (``bench.models`` / ``bench.workloads``), compile it, run
3 warm-up calls, then profile ``--calls`` calls and aggregate device kernel time by kernel name.
Prints, per backend, the total device time per call split into GEMM/convolution library kernels
(cuBLAS/cuDNN/CUTLASS names) and everything else (the compiler's own kernels and aten's
non-GEMM kernels), and the ``--top`` kernels by time with their launch counts per call. This is
the tool behind "where does the gap to torch.compile come from" notes in ``docs/``: it reads no
compiler internals, only kernel names and times, so the peers are profiled the same way.

``--gemms`` also attributes every library GEMM/convolution kernel to the aten call that launched
it (op name, operand shapes, and strides where the profiler records them: torch 2.11 left
them empty), from the profiler's CPU events, one row per distinct
(call, kernel): the tool for "the same product got a different cuBLAS kernel" questions.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from typing import Any

import torch

from bench.backends import make_backend
from bench.models import MODELS
from bench.workloads import KERNELS

_LIBRARY_GEMM = re.compile(r"gemm|sgemm|hgemm|cutlass|cublas|cudnn|xmma|nvjet|wgmma|conv|implicit_convolve",
                           re.IGNORECASE)


def _workload(name: str) -> Any:
    for w in (*MODELS, *KERNELS):
        if w.name == name:
            return w
    raise SystemExit(f"unknown workload {name!r}")


def _kernel_rows(prof: Any, calls: int) -> list[dict[str, Any]]:
    """Device kernels of the profile: name, microseconds per call, launches per call."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        t = totals[evt.name]
        t[0] += evt.device_time if hasattr(evt, "device_time") else evt.cuda_time
        t[1] += 1
    rows = [{"kernel": k, "us_per_call": v[0] / calls, "launches_per_call": v[1] / calls,
             "library_gemm": bool(_LIBRARY_GEMM.search(k))} for k, v in totals.items()]
    return sorted(rows, key=lambda r: -r["us_per_call"])


def _gemm_calls(prof: Any, calls: int) -> list[dict[str, Any]]:
    """Library GEMM kernels by the aten call that launched them: op, shapes, strides, kernel,
    microseconds and launches per profiled call."""
    totals: dict[tuple[str, str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        kernels = [k for k in getattr(evt, "kernels", ()) if _LIBRARY_GEMM.search(k.name)]
        if not kernels or not evt.name.startswith("aten::"):
            continue
        shapes = str(getattr(evt, "input_shapes", ""))
        strides = str(getattr(evt, "structured_input_strides", "") or "")
        for k in kernels:
            t = totals[(evt.name, shapes, strides, k.name)]
            t[0] += getattr(k, "duration", 0.0)
            t[1] += 1
    rows = [{"op": op, "shapes": shapes, "strides": strides, "kernel": kernel, "us_per_call": v[0] / calls,
             "launches_per_call": v[1] / calls} for (op, shapes, strides, kernel), v in totals.items()]
    return sorted(rows, key=lambda r: (r["op"], r["shapes"], r["strides"]))


def profile_one(workload: Any, backend_name: str, device: torch.device, size: str, calls: int,
                gemms: bool = False) -> dict[str, Any]:
    backend = make_backend(backend_name, device)
    if not backend.available:
        return {"backend": backend_name, "error": backend.reason}
    built = workload.build(device, size)
    gen = torch.Generator().manual_seed(0)
    args = built.make_inputs(gen)
    fn = built.callable_for(backend.compile(built.fn))
    grad = torch.no_grad() if workload.inference else torch.enable_grad()
    with grad:
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize(device)
        activities = [torch.profiler.ProfilerActivity.CUDA]
        if gemms:
            activities.append(torch.profiler.ProfilerActivity.CPU)
        with torch.profiler.profile(activities=activities, record_shapes=gemms) as prof:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize(device)
    rows = _kernel_rows(prof, calls)
    gemm_calls = _gemm_calls(prof, calls) if gemms else []
    backend.reset()
    gemm = sum(r["us_per_call"] for r in rows if r["library_gemm"])
    other = sum(r["us_per_call"] for r in rows if not r["library_gemm"])
    return {"backend": backend_name, "shape": built.shape, "gemm_us": gemm, "other_us": other,
            "launches": sum(r["launches_per_call"] for r in rows), "kernels": rows, "gemm_calls": gemm_calls}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--backends", default="pyjit,torch.compile")
    p.add_argument("--size", default="large")
    p.add_argument("--device", default="cuda")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", default=None, help="write every kernel row here")
    p.add_argument("--gemms", action="store_true", help="attribute library GEMM kernels to their aten calls")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        print("profile_kernels needs a CUDA device (kernel times come from the CUDA profiler)", file=sys.stderr)
        return 2
    w = _workload(a.workload)
    results = []
    for name in ["eager", *[b for b in a.backends.split(",") if b and b != "eager"]]:
        r = profile_one(w, name, device, a.size, a.calls, a.gemms)
        results.append(r)
        if "error" in r:
            print(f"== {name}: unavailable ({r['error']})")
            continue
        print(f"== {a.workload} [{r['shape']}] under {name}: device time per call {r['gemm_us'] + r['other_us']:.0f} us "
              f"(library GEMM/conv {r['gemm_us']:.0f} us, other {r['other_us']:.0f} us), "
              f"{r['launches']:.0f} launches")
        for k in r["kernels"][:a.top]:
            print(f"  {k['us_per_call']:9.1f} us  x{k['launches_per_call']:5.1f}  {'G' if k['library_gemm'] else ' '} "
                  f"{k['kernel'][:110]}")
        for g in r["gemm_calls"]:
            print(f"  GEMM {g['us_per_call']:9.1f} us  x{g['launches_per_call']:4.1f}  {g['op']} {g['shapes']} "
                  f"strides {g['strides']}  {g['kernel'][:90]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"workload": a.workload, "size": a.size, "device": torch.cuda.get_device_name(device),
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
