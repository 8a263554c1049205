"""Peak device memory and time of a training step, per backend (a compiled step should not need more memory than eager).

For each workload (default: the ``models`` suite's training steps) and backend, in a fresh
subprocess: build the workload, run 3 warm-up steps (compiles included), then 10 timed steps;
report the time per step (median of the 10, each synchronised) and the peak of
``torch.cuda.max_memory_allocated`` during those steps *above* what was allocated before them
(model, inputs and whatever the backend keeps between steps), plus the absolute peak.

    python -m bench.train_memory [--workloads gpt2_decoder_train,mlp_classifier_train]
                                 [--backends eager,pyjit,torch.compile] [--json out.json]

CUDA only (CPU has no allocator statistics to compare).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

RESULT_TAG = "TRAIN_MEMORY "


def measure(workload: str, backend_name: str, size: str) -> dict[str, Any]:
    import torch

    from bench import workloads
    from bench.backends import make_backend

    device = torch.device("cuda")
    w = workloads.by_name(workload)
    backend = make_backend(backend_name, device)
    if not backend.available:
        return {"status": "UNAVAILABLE", "reason": backend.reason}
    built = w.build(device, size)
    inputs = built.make_inputs(torch.Generator().manual_seed(1234))
    step = built.callable_for(backend.compile(built.fn))
    with torch.enable_grad():
        for _ in range(3):
            step(*inputs)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(10):
            start = time.perf_counter()
            step(*inputs)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated()
    return {"status": "OK", "step_ms": sorted(times)[len(times) // 2] * 1e3,
            "peak_above_start_mib": (peak - before) / 2**20, "peak_mib": peak / 2**20,
            "device": torch.cuda.get_device_name()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="gpt2_decoder_train,mlp_classifier_train")
    p.add_argument("--backends", default="eager,pyjit,torch.compile")
    p.add_argument("--size", default="large")
    p.add_argument("--json", default=None)
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "BACKEND"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        try:
            result = measure(args.child[0], args.child[1], args.size)
        except Exception as e:  # noqa: BLE001 - reported as the row's status
            result = {"status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:300]}
        print(RESULT_TAG + json.dumps(result), flush=True)
        return 0
    rows = []
    for workload in args.workloads.split(","):
        for backend in args.backends.split(","):
            proc = subprocess.run([sys.executable, "-m", "bench.train_memory", "--size", args.size,
                                   "--child", workload, backend], capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
            row = json.loads(lines[-1][len(RESULT_TAG):]) if lines else \
                {"status": "ERROR", "reason": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
            row.update(workload=workload, backend=backend)
            rows.append(row)
            if row["status"] == "OK":
                print(f"{workload:24s} {backend:14s} {row['step_ms']:8.2f} ms  peak above start "
                      f"{row['peak_above_start_mib']:8.0f} MiB  peak {row['peak_mib']:8.0f} MiB", flush=True)
            else:
                print(f"{workload:24s} {backend:14s} {row['status']}: {row.get('reason')}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
