"""Child process of the ``compile`` suite: one compile of one workload with one backend.

The parent (:mod:`bench.suites`) starts this module in a fresh interpreter with
``PYJIT_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` pointing at a
directory that is empty (cold) or was filled by the cold run (warm). It prints one line
``BENCH_RESULT <json>`` with: import time, eager first call, compiled first call, steady call,
``compile_s`` = compiled first call - steady call, the correctness verdict, pyjit's
compile-phase breakdown when the ``compile_times`` channel logged one and its warm-start counters
(``warm_start``: frame records loaded, entries installed without tracing, whether the tracer was
imported), and TorchDynamo's (``dynamo_phases_s``) for the backends that run under ``torch.compile``.
With ``--save-artifacts PATH`` it writes the compiled state to a portable file after the calls
(``pyjit.cache.save_artifacts``; for torch.compile ``torch.compiler.save_cache_artifacts``), and
with ``--load-artifacts PATH`` installs one before the first call (the ``artifacts`` suite).
"""
from __future__ import annotations

import time

_T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

RESULT_TAG = "BENCH_RESULT "


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(workload_name: str, backend_name: str, device_name: str, size: str,
            save: str | None = None, load: str | None = None) -> dict[str, Any]:
    from bench import workloads
    from bench.backends import make_backend
    from bench.correctness import compare
    from bench.runner import capture_pyjit_logs, summarize_logs

    out: dict[str, Any] = {"import_torch_s": time.perf_counter() - _T_START}
    device = torch.device(device_name)
    w = workloads.by_name(workload_name)
    backend = make_backend(backend_name, device)
    if not backend.available:
        return {**out, "status": "UNAVAILABLE", "reason": backend.reason}
    built = w.build(device, size)
    inputs = built.make_inputs(torch.Generator().manual_seed(1234))
    if load is not None:
        t0 = time.perf_counter()
        out["artifact_load"] = load_artifacts(backend_name, load)
        out["artifact_load_s"] = time.perf_counter() - t0
    grad = torch.no_grad() if w.inference else torch.enable_grad()
    with grad:
        t0 = time.perf_counter()
        ref = built.callable_for(built.fn)(*inputs)
        _sync(device)
        out["eager_first_call_s"] = time.perf_counter() - t0
        with capture_pyjit_logs(backend.uses_pyjit) as logs:
            t0 = time.perf_counter()
            compiled = built.callable_for(backend.compile(built.fn))
            result = compiled(*inputs)
            _sync(device)
            out["first_call_s"] = time.perf_counter() - t0
            steady = []
            for _ in range(3):
                t0 = time.perf_counter()
                compiled(*inputs)
                _sync(device)
                steady.append(time.perf_counter() - t0)
        verdict = compare(ref, result, w.atol, w.rtol)
    if save is not None:
        t0 = time.perf_counter()
        out["artifact_bytes"] = save_artifacts(backend_name, save)
        out["artifact_save_s"] = time.perf_counter() - t0
    out["steady_call_s"] = sorted(steady)[1]
    out["compile_s"] = max(0.0, out["first_call_s"] - out["steady_call_s"])
    out["correctness"] = verdict.as_dict(w.atol, w.rtol)
    out["status"] = "OK" if verdict.ok else "FAIL"
    out["reason"] = verdict.reason or None
    if backend.uses_pyjit:
        out["pyjit_logs"] = summarize_logs(logs.records)
        out["warm_start"] = warm_start_stats()
    if backend_name in ("torch.compile", "dynamo+pyjit"):
        out["dynamo_phases_s"] = dynamo_phases()
    return out


def save_artifacts(backend_name: str, path: str) -> int:
    """Write the compiled state of this process to ``path``: ``pyjit.cache.save_artifacts`` for
    pyjit, ``torch.compiler.save_cache_artifacts`` (Inductor's portable cache) for torch.compile.
    Returns the file's size."""
    if backend_name == "pyjit":
        import pyjit

        pyjit.cache.save_artifacts(path)
    else:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            raise RuntimeError("torch.compiler.save_cache_artifacts() returned nothing")
        with open(path, "wb") as f:
            f.write(saved[0])
    import os

    return os.path.getsize(path)


def load_artifacts(backend_name: str, path: str) -> str:
    """Install ``path`` (written by :func:`save_artifacts`) before the first call."""
    if backend_name == "pyjit":
        import pyjit

        return str(pyjit.cache.load_artifacts(path))
    with open(path, "rb") as f:
        info = torch.compiler.load_cache_artifacts(f.read())
    return str(info)[:300]


def warm_start_stats() -> dict[str, Any]:
    """What pyjit's warm start did in this process (frame records loaded, entries installed
    without tracing) and whether the tracer was imported at all."""
    mod = sys.modules.get("pyjit.frame.warm_start")
    stats = dict(getattr(mod, "stats", {}) or {})
    stats["tracer_imported"] = "pyjit.frame.convert" in sys.modules
    return stats


# TorchDynamo's own timers, renamed to the phases pyjit logs (the names differ across torch versions;
# missing ones are left out). "total" includes the backend.
_DYNAMO_PHASES = {"_compile.compile_inner": "total", "bytecode_tracing": "trace",
                  "OutputGraph.call_user_compiler": "backend"}


def dynamo_phases() -> dict[str, float]:
    """The peer's compile-phase breakdown, for comparison with pyjit's ``compile_times``."""
    try:
        from torch._dynamo.utils import compile_times

        names, values = compile_times(repr="csv", aggregate=True)
    except Exception:  # an older/newer torch without this helper: no breakdown, not an error
        return {}
    return {_DYNAMO_PHASES[n]: float(v) for n, v in zip(names, values) if n in _DYNAMO_PHASES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="small")
    parser.add_argument("--save-artifacts", default=None, help="after the calls, write the compiled state here")
    parser.add_argument("--load-artifacts", default=None, help="before the first call, install this file")
    args = parser.parse_args(argv)
    try:
        result = measure(args.workload, args.backend, args.device, args.size, args.save_artifacts,
                         args.load_artifacts)
    except Exception as exc:
        first = (f"{type(exc).__name__}: {exc}".splitlines() or [type(exc).__name__])[0]
        result = {"status": "ERROR", "reason": first[:300], "traceback": traceback.format_exc(limit=8)[-2000:]}
    result["process_s"] = time.perf_counter() - _T_START
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
