"""``--compare OLD.json``: the change of every matching number against an earlier run.

Rows are matched by (suite, workload, backend). A timing is flagged as a regression only when it
got slower by more than the noise: the larger of ``min_change`` (5 %) and the sum of both runs'
relative interquartile ranges. Compile times are single measurements, so they use a wider fixed
threshold (``compile_change``, 20 %). A status that went from OK to FAIL/ERROR is always flagged.
Runs on different devices or sizes are compared but a warning says so.
"""
from __future__ import annotations

import json
from typing import Any

from bench.report import _table, fmt_time


def load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["suite"], row["workload"], row["backend"]


def _rel_iqr(timing: dict[str, Any]) -> float:
    med = timing.get("median") or 0.0
    return (timing.get("iqr") or 0.0) / med if med > 0 else 0.0


def compare_docs(old: dict[str, Any], new: dict[str, Any], min_change: float = 0.05,
                 compile_change: float = 0.20) -> tuple[list[dict[str, Any]], list[str]]:
    """(one entry per compared number, warnings). Entries carry ``regression``/``improvement`` flags."""
    warnings = []
    for field in ("device",):
        o, n = old["metadata"].get(field, {}), new["metadata"].get(field, {})
        if o.get("name") != n.get("name"):
            warnings.append(f"different {field}: {o.get('name')} vs {n.get('name')}: differences are not regressions")
    if old["metadata"].get("size") != new["metadata"].get("size"):
        warnings.append(f"different sizes: {old['metadata'].get('size')} vs {new['metadata'].get('size')}")
    old_rows = {_key(r): r for r in old["results"]}
    entries = []
    for row in new["results"]:
        prev = old_rows.get(_key(row))
        if prev is None:
            continue
        base = {"suite": row["suite"], "workload": row["workload"], "backend": row["backend"]}
        if prev["status"] == "OK" and row["status"] in ("FAIL", "ERROR"):
            entries.append({**base, "metric": "status", "old": prev["status"], "new": row["status"],
                            "change": None, "threshold": None, "regression": True, "improvement": False})
            continue
        pairs: list[tuple[str, float, float, float]] = []
        if row["status"] == "OK" and prev["status"] == "OK":
            if "timing" in row and "timing" in prev:
                noise = _rel_iqr(row["timing"]) + _rel_iqr(prev["timing"])
                pairs.append(("median", prev["timing"]["median"], row["timing"]["median"], max(min_change, noise)))
            for metric in ("cold_s", "warm_s"):
                o, n = (prev.get("compile") or {}).get(metric), (row.get("compile") or {}).get(metric)
                if isinstance(o, (int, float)) and isinstance(n, (int, float)):
                    pairs.append((metric, o, n, compile_change))
        for metric, o, n, threshold in pairs:
            change = (n - o) / o if o > 0 else 0.0
            entries.append({**base, "metric": metric, "old": o, "new": n, "change": change, "threshold": threshold,
                            "regression": change > threshold, "improvement": change < -threshold})
    return entries, warnings


def format_comparison(entries: list[dict[str, Any]], warnings: list[str], old_path: str) -> str:
    lines = []
    for e in entries:
        if e["metric"] == "status":
            lines.append([e["suite"], e["workload"], e["backend"], "status", e["old"], e["new"], "", "REGRESSION"])
            continue
        flag = "REGRESSION" if e["regression"] else ("improved" if e["improvement"] else "")
        lines.append([e["suite"], e["workload"], e["backend"], e["metric"], fmt_time(e["old"]), fmt_time(e["new"]),
                      f"{e['change']:+.1%} (noise {e['threshold']:.0%})", flag])
    n_reg = sum(1 for e in entries if e["regression"])
    head = f"== compared with {old_path}: {len(entries)} numbers, {n_reg} regression(s) beyond noise"
    body = _table(["suite", "workload", "backend", "metric", "old", "new", "change", ""], lines) if lines else "(no rows in common)"
    return "\n".join([head, *(f"warning: {w}" for w in warnings), body])
