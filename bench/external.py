"""Runs the other layers' standalone benchmark scripts and folds their numbers into the report.

The scripts belong to their layers (see ``docs/contracts.md``, section ``bench/``):
``bench/core_overhead.py`` (C core), ``bench/frontend_overhead.py`` (frontend),
``bench/backend_kernels.py`` (backend). A script that exposes ``run_bench(quick=, device=,
time_budget_s=)`` is called in-process and its rows are kept as they are; one that only has
``run(quick=)`` returning a dict is called in-process and the dict is kept under ``data``; any
other is run as ``python -m bench.<name>`` in a time-limited subprocess (full suites only) and
its output is stored as text. A missing or failing script is reported, never dropped.
"""
from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import traceback
from typing import Any

from bench.env import REPO_ROOT
from bench.runner import CaseTimeout, deadline

SCRIPTS = {
    "core_overhead": "C core: hook overhead, guard check cost, cache-hit dispatch",
    "frontend_overhead": "frontend: per-call overhead 1/4/16 tensors vs torch.compile, capture time",
    "backend_kernels": "backend: GPU kernel workloads",
}


def _script_path(name: str) -> str:
    return os.path.join(REPO_ROOT, "bench", f"{name}.py")


def run_script(name: str, *, quick: bool, device: str, time_budget_s: float | None) -> dict[str, Any]:
    """One entry of the report's ``external`` section: status, reason, rows or raw output."""
    entry: dict[str, Any] = {"description": SCRIPTS.get(name, ""), "status": "UNAVAILABLE", "reason": None,
                             "rows": [], "output": None}
    if not os.path.exists(_script_path(name)):
        entry["reason"] = f"bench/{name}.py does not exist yet"
        return entry
    try:
        module = importlib.import_module(f"bench.{name}")
    except Exception as exc:
        entry.update(status="ERROR", reason=f"import failed: {type(exc).__name__}: {exc}"[:300])
        return entry
    run_bench = getattr(module, "run_bench", None)
    if callable(run_bench):
        return _call_in_process(entry, run_bench, quick=quick, device=device, time_budget_s=time_budget_s)
    run = getattr(module, "run", None)
    if callable(run) and "quick" in inspect.signature(run).parameters:
        # Adapter for a script that returns one dict of its own shape: kept verbatim under "data".
        return _call_run(entry, run, quick=quick, time_budget_s=time_budget_s)
    if quick:
        entry.update(status="SKIPPED", reason=f"no run_bench(); run `python -m bench.{name}` (not part of quick)")
        return entry
    return _run_subprocess(entry, name, time_budget_s)


def _call_in_process(entry: dict[str, Any], run_bench: Any, **kwargs: Any) -> dict[str, Any]:
    params = inspect.signature(run_bench).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    call_kwargs = {k: v for k, v in kwargs.items() if accepts_any or k in params}
    try:
        with deadline(kwargs.get("time_budget_s")):
            rows = run_bench(**call_kwargs)
    except CaseTimeout as exc:
        entry.update(status="ERROR", reason=str(exc))
        return entry
    except Exception as exc:
        entry.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}"[:300],
                     traceback=traceback.format_exc(limit=8)[-2000:])
        return entry
    clean, problems = [], []
    for i, row in enumerate(rows or []):
        if not isinstance(row, dict) or not {"name", "value", "unit"} <= set(row):
            problems.append(f"row {i} lacks name/value/unit")
            continue
        clean.append(_jsonable(row))
    entry.update(status="OK" if not problems else "ERROR", rows=clean,
                 reason="; ".join(problems[:3]) if problems else None)
    return entry


def _call_run(entry: dict[str, Any], run: Any, *, quick: bool, time_budget_s: float | None) -> dict[str, Any]:
    try:
        with deadline(time_budget_s):
            data = run(quick=quick)
    except CaseTimeout as exc:
        entry.update(status="ERROR", reason=str(exc))
        return entry
    except Exception as exc:
        entry.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}"[:300],
                     traceback=traceback.format_exc(limit=8)[-2000:])
        return entry
    entry.update(status="OK", data=_jsonable(data), mode="run(quick=...) in-process; its own dict kept under data")
    return entry


def _run_subprocess(entry: dict[str, Any], name: str, time_budget_s: float | None) -> dict[str, Any]:
    timeout = max(10.0, time_budget_s or 300.0)
    try:
        proc = subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        entry.update(status="ERROR", reason=f"timed out after {timeout:.0f} s", output=text[-4000:])
        return entry
    output = (proc.stdout or "") + (("\n[stderr]\n" + proc.stderr) if proc.stderr else "")
    entry.update(status="OK" if proc.returncode == 0 else "ERROR", output=output[-4000:],
                 reason=None if proc.returncode == 0 else f"exit status {proc.returncode}")
    entry["mode"] = "subprocess (no run_bench(); raw output kept)"
    return entry


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)
