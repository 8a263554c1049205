"""Human and machine output of a run: progress bar, terminal tables, JSON and CSV files.

The terminal tables pivot rows per suite: one line per workload, one column per backend, each cell
``median time  speed-up`` (overhead suite: ``median  +overhead``), or the status when the
backend did not produce a timing (FAIL/ERROR/n/a/skip), with the reasons listed under the table.
"""
from __future__ import annotations

import csv
import json
import math
import os
import sys
from typing import Any, IO, Iterable

STATUS_CELL = {"FAIL": "FAIL", "ERROR": "ERROR", "UNAVAILABLE": "n/a", "SKIPPED": "skip"}


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    a = abs(seconds)
    if a >= 1:
        return f"{seconds:.2f}s"
    if a >= 1e-3:
        return f"{seconds * 1e3:.2f}ms"
    if a >= 1e-6:
        return f"{seconds * 1e6:.1f}us"
    return f"{seconds * 1e9:.0f}ns"


class Progress:
    """A one-line progress bar on a terminal; one line per finished row otherwise."""

    def __init__(self, total: int, stream: IO[str] | None = None, enabled: bool = True):
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, row: dict[str, Any]) -> None:
        self.done += 1
        if not self.enabled:
            return
        what = f"{row.get('suite')}/{row.get('workload')}/{row.get('backend')}"
        status = row.get("status", "?")
        if status == "OK" and isinstance(row.get("timing"), dict):
            status += " " + fmt_time(row["timing"]["median"])
        elif status == "OK" and isinstance(row.get("compile"), dict):
            second = "artifact" if row.get("suite") == "artifacts" else "warm"
            status += f" cold {fmt_time(row['compile'].get('cold_s'))} {second} {fmt_time(row['compile'].get(second + '_s'))}"
        total = max(self.total, self.done)
        if self.tty:
            width = 24
            filled = int(width * self.done / total)
            line = f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{total} {what}: {status}"
            self.stream.write(line[:150].ljust(150))
        else:
            self.stream.write(f"[{self.done}/{total}] {what}: {status}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _cell(row: dict[str, Any] | None, suite: str) -> str:
    if row is None:
        return ""
    status = row.get("status")
    if status != "OK":
        return STATUS_CELL.get(status, str(status))
    med = row["timing"]["median"]
    if suite == "overhead" and "overhead_vs_eager_s" in row and row["backend"] != "eager":
        over = row["overhead_vs_eager_s"]
        return f"{fmt_time(med)} {'+' if over >= 0 else '-'}{fmt_time(abs(over))}"
    speed = row.get("speedup_vs_eager")
    flag = "*" if _fell_back(row) else ""
    return f"{fmt_time(med)} {speed:.2f}x{flag}" if speed is not None else fmt_time(med)


def _fell_back(row: dict[str, Any]) -> bool:
    counts = (row.get("pyjit_logs") or {}).get("counts") or {}
    return bool(counts.get("fallbacks") or counts.get("graph_breaks"))


def _table(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def _ordered(values: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def format_results(doc: dict[str, Any]) -> str:
    rows = doc["results"]
    parts: list[str] = []
    backends = doc["backends"]
    unavailable = [f"  {name}: {info['reason']}" for name, info in backends.items() if not info["available"]]
    if unavailable:
        parts.append("Unavailable backends:\n" + "\n".join(unavailable))
    for suite in _ordered(r["suite"] for r in rows):
        # The global-hook row has its own line below the tables, not a backend column.
        srows = [r for r in rows if r["suite"] == suite and r["workload"] != "hook_pure_python"]
        if suite == "compile":
            parts.append(_compile_table(srows))
            continue
        if suite == "artifacts":
            parts.append(_artifacts_table(srows))
            continue
        if suite == "dynamic":
            from bench.dynamic import table

            parts.append(table(srows))
            continue
        names = _ordered(r["backend"] for r in srows)
        table_lines = []
        for wl in _ordered(r["workload"] for r in srows):
            by_backend = {r["backend"]: r for r in srows if r["workload"] == wl}
            shape = next((r["params"].get("shape") for r in by_backend.values() if r["params"].get("shape")), "")
            table_lines.append([wl, str(shape or "")] + [_cell(by_backend.get(b), suite) for b in names])
        what = "median per call and +overhead vs eager" if suite == "overhead" else "median per call and speed-up vs eager"
        parts.append(f"== {suite} ({what}; * = pyjit logged a fallback or graph break)\n"
                     + _table(["workload", "shape"] + names, table_lines))
        bw = [r for r in srows if r.get("bandwidth") and r["status"] == "OK"]
        if bw:
            bw_lines = []
            for wl in _ordered(r["workload"] for r in bw):
                cells = []
                for b in names:
                    r = next((x for x in bw if x["workload"] == wl and x["backend"] == b), None)
                    frac = (r or {}).get("bandwidth", {}).get("fraction_of_copy")
                    cells.append("" if r is None else f"{r['bandwidth']['gbps']:.1f}" + (f" ({frac:.0%})" if frac else ""))
                bw_lines.append([wl] + cells)
            parts.append(f"-- {suite}: achieved GB/s (share of measured copy bandwidth)\n" + _table(["workload"] + names, bw_lines))
        parts.append(_reasons(srows))
    for r in (r for r in rows if r["workload"] == "hook_pure_python"):
        if r["status"] == "OK":
            parts.append(f"global hook (pyjit.enable) on pure Python fib(15): {fmt_time(r['timing_hook_off']['median'])} "
                         f"-> {fmt_time(r['timing']['median'])} ({r['hook_overhead_fraction']:+.1%})")
        else:
            parts.append(f"global hook (pyjit.enable) on pure Python: {r['status']} ({r['reason']})")
    for name, ext in (doc.get("external") or {}).items():
        parts.append(_external(name, ext))
    return "\n\n".join(p for p in parts if p)


def _compile_table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        comp = r.get("compile") or {}
        cold = comp.get("cold") or {}
        phases = (cold.get("pyjit_logs") or {}).get("compile_phases_s") or cold.get("dynamo_phases_s") or {}
        top = ", ".join(f"{k} {fmt_time(v)}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])[:4])
        status = r["status"] if r["status"] != "OK" else "OK"
        lines.append([r["workload"], r["backend"], status, fmt_time(comp.get("cold_s")), fmt_time(comp.get("warm_s")),
                      fmt_time(comp.get("cold_process_s")), top or "-"])
    table = _table(["workload", "backend", "status", "cold", "warm", "cold process", "phases (cold; pyjit or Dynamo)"],
                   lines)
    return "== compile (first call - steady call, new process; cold = empty caches)\n" + table + "\n" + _reasons(rows)


def _artifacts_table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        comp = r.get("compile") or {}
        ratio = comp.get("artifact_over_cold")
        size = comp.get("file_bytes")
        lines.append([r["workload"], r["backend"], r["status"], fmt_time(comp.get("cold_s")),
                      fmt_time(comp.get("artifact_s")), fmt_time(comp.get("load_s")),
                      "-" if ratio is None else f"{ratio:.3f}x", "-" if size is None else f"{size / 1024:.0f} KiB"])
    table = _table(["workload", "backend", "status", "cold", "from artifact", "load", "artifact/cold", "file"], lines)
    return ("== artifacts (first call - steady call in a new process; cold = empty caches, from artifact = "
            "another empty cache + the cold process's artifact file installed first)\n" + table + "\n" + _reasons(rows))


def _reasons(rows: list[dict[str, Any]]) -> str:
    notes = [f"  {r['workload']}/{r['backend']}: {r['status']}: {r['reason']}" for r in rows
             if r["status"] in ("FAIL", "ERROR", "SKIPPED") and r.get("reason")]
    return ("reasons:\n" + "\n".join(notes)) if notes else ""


def _external(name: str, ext: dict[str, Any]) -> str:
    head = f"== {name}: {ext['status']}" + (f" ({ext['reason']})" if ext.get("reason") else "")
    rows = ext.get("rows") or []
    lines = [[str(r.get("name")), str(r.get("backend", "")), f"{r.get('value'):.4g}" if isinstance(r.get("value"), (int, float)) else str(r.get("value")),
              str(r.get("unit"))] for r in rows[:40]]
    if ext.get("data") is not None:
        head += f"\n  (its own numbers are in the JSON under external.{name}.data)"
    if ext.get("output"):
        head += f"\n  (its printed output is in the JSON under external.{name}.output)"
    return head + ("\n" + _table(["name", "backend", "value", "unit"], lines) if lines else "")


def write_json(doc: dict[str, Any], path: str) -> None:
    """Atomic write, so an interrupted run never leaves half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False, default=_json_default)
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    return repr(value)


def sanitize(value: Any) -> Any:
    """Replace NaN/inf by None: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    return value


CSV_FIELDS = ["suite", "workload", "backend", "status", "median_s", "q1_s", "q3_s", "iqr_s", "samples",
              "speedup_vs_eager", "overhead_vs_eager_s", "gbps", "fraction_of_copy", "first_call_s", "cold_s",
              "warm_s", "shape", "reason"]


def write_csv(doc: dict[str, Any], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS)
        writer.writeheader()
        for r in doc["results"]:
            t = r.get("timing") or {}
            bw = r.get("bandwidth") or {}
            comp = r.get("compile") or {}
            writer.writerow({
                "suite": r["suite"], "workload": r["workload"], "backend": r["backend"], "status": r["status"],
                "median_s": t.get("median"), "q1_s": t.get("q1"), "q3_s": t.get("q3"), "iqr_s": t.get("iqr"),
                "samples": len(t.get("samples", [])) or None, "speedup_vs_eager": r.get("speedup_vs_eager"),
                "overhead_vs_eager_s": r.get("overhead_vs_eager_s"), "gbps": bw.get("gbps"),
                "fraction_of_copy": bw.get("fraction_of_copy"), "first_call_s": r.get("first_call_s"),
                "cold_s": comp.get("cold_s"), "warm_s": comp.get("warm_s"),
                "shape": (r.get("params") or {}).get("shape"), "reason": r.get("reason"),
            })
