"""The JSON schema of a harness run (``pyjit-bench/1``) and a dependency-free validator.

The same description is written out for people in ``docs/performance.md`` (section Harness);
tests validate every run against :func:`validate`. Top level::

    {"schema": "pyjit-bench/1",
     "metadata": {...},            # see METADATA_KEYS
     "backends": {name: {"available": bool, "reason": str|null, "description": str}},
     "results": [row, ...],        # see ROW_KEYS; one per (suite, workload, backend)
     "external": {script: {"status", "reason", "rows", "output", "description"}},
     "plots": [file names], "notes": [str]}

Times are seconds. ``timing`` holds every raw sample plus median/q1/q3/iqr/min/mean.
"""
from __future__ import annotations

from typing import Any

from bench import SCHEMA_VERSION

STATUSES = ("OK", "FAIL", "ERROR", "UNAVAILABLE", "SKIPPED")
TOP_KEYS = {"schema": str, "metadata": dict, "backends": dict, "results": list, "external": dict, "plots": list,
            "notes": list}
METADATA_KEYS = {"created": str, "command": list, "suites": list, "backends_requested": list, "device": dict,
                 "python": str, "torch": str, "triton": (str, type(None)), "pyjit": dict, "git": dict,
                 "host": dict, "size": str, "time_budget_s": (int, float, type(None)), "elapsed_s": (int, float),
                 "copy_bandwidth": (dict, type(None)), "clock": str}
ROW_KEYS = {"suite": str, "workload": str, "backend": str, "status": str, "reason": (str, type(None)),
            "params": dict}
TIMING_KEYS = {"unit": str, "timer": str, "samples": list, "calls_per_sample": int, "median": (int, float),
               "q1": (int, float), "q3": (int, float), "iqr": (int, float), "min": (int, float),
               "mean": (int, float)}
OPTIONAL_ROW_KEYS = {"timing": dict, "speedup_vs_eager": (int, float), "bandwidth": dict, "correctness": (dict, type(None)),
                     "first_call_s": (int, float), "compile": dict, "pyjit_logs": dict, "overhead_vs_eager_s": (int, float),
                     "tflops": (int, float), "traceback": str, "timing_hook_off": dict,
                     "hook_overhead_fraction": (int, float, type(None)), "per_tensor_s": (int, float),
                     "dynamic": dict}


def _check(obj: dict[str, Any], spec: dict[str, Any], where: str, errors: list[str], required: bool = True) -> None:
    for key, typ in spec.items():
        if key not in obj:
            if required:
                errors.append(f"{where}: missing key {key!r}")
            continue
        if not isinstance(obj[key], typ) or (typ in (int, (int, float)) and isinstance(obj[key], bool)):
            errors.append(f"{where}.{key}: expected {typ}, got {type(obj[key]).__name__}")


def validate(doc: Any) -> list[str]:
    """Every way ``doc`` departs from the schema (empty list = valid)."""
    errors: list[str] = []
    if not isinstance(doc, dict):
        return ["top level is not an object"]
    _check(doc, TOP_KEYS, "$", errors)
    if doc.get("schema") != SCHEMA_VERSION:
        errors.append(f"$.schema: expected {SCHEMA_VERSION!r}, got {doc.get('schema')!r}")
    if isinstance(doc.get("metadata"), dict):
        _check(doc["metadata"], METADATA_KEYS, "$.metadata", errors)
    for name, info in (doc.get("backends") or {}).items():
        if not isinstance(info, dict):
            errors.append(f"$.backends[{name!r}] is not an object")
            continue
        _check(info, {"available": bool, "reason": (str, type(None)), "description": str}, f"$.backends[{name!r}]",
               errors)
    for i, row in enumerate(doc.get("results") or []):
        where = f"$.results[{i}]"
        if not isinstance(row, dict):
            errors.append(f"{where} is not an object")
            continue
        _check(row, ROW_KEYS, where, errors)
        _check(row, OPTIONAL_ROW_KEYS, where, errors, required=False)
        if row.get("status") not in STATUSES:
            errors.append(f"{where}.status: {row.get('status')!r} not in {STATUSES}")
        if row.get("status") == "OK" and row.get("suite") not in ("compile", "artifacts") and "timing" not in row:
            errors.append(f"{where}: status OK without timing")
        if row.get("status") == "FAIL" and "timing" in row:
            errors.append(f"{where}: a FAIL row must never be timed")
        if row.get("status") in ("FAIL", "ERROR", "UNAVAILABLE") and not row.get("reason"):
            errors.append(f"{where}: status {row.get('status')} without a reason")
        if isinstance(row.get("timing"), dict):
            _check(row["timing"], TIMING_KEYS, f"{where}.timing", errors)
            samples = row["timing"].get("samples")
            if isinstance(samples, list) and not all(isinstance(s, (int, float)) for s in samples):
                errors.append(f"{where}.timing.samples: not all numbers")
        if row.get("suite") == "compile" and row.get("status") == "OK":
            comp = row.get("compile")
            if not isinstance(comp, dict) or not all(k in comp for k in ("cold_s", "warm_s")):
                errors.append(f"{where}: compile row without compile.cold_s/warm_s")
        if row.get("suite") == "artifacts" and row.get("status") == "OK":
            comp = row.get("compile")
            if not isinstance(comp, dict) or not all(k in comp for k in ("cold_s", "artifact_s")):
                errors.append(f"{where}: artifacts row without compile.cold_s/artifact_s")
    for name, ext in (doc.get("external") or {}).items():
        if not isinstance(ext, dict):
            errors.append(f"$.external[{name!r}] is not an object")
            continue
        _check(ext, {"status": str, "reason": (str, type(None)), "rows": list}, f"$.external[{name!r}]", errors)
    return errors
