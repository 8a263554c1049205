"""PNG plots of a run with matplotlib: speed-up per workload per backend, compile time cold/warm.

matplotlib is optional (the GPU machine may lack it): :func:`write_plots` then writes nothing
and returns the reason, which the report records in ``notes``.
"""
from __future__ import annotations

import os
from typing import Any


def _matplotlib() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_plots(doc: dict[str, Any], out_dir: str, prefix: str) -> tuple[list[str], str | None]:
    """Write the PNGs; returns (file names written, reason when none could be written)."""
    try:
        plt = _matplotlib()
    except Exception as exc:
        return [], f"plots skipped: matplotlib unavailable ({type(exc).__name__}: {exc})"
    written = []
    title = _title(doc)
    speed = _speedup_plot(plt, doc, title)
    if speed is not None:
        name = f"{prefix}_speedup.png"
        speed.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(speed)
        written.append(name)
    comp = _compile_plot(plt, doc, title)
    if comp is not None:
        name = f"{prefix}_compile.png"
        comp.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(comp)
        written.append(name)
    return written, None


def _title(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    dev = meta["device"]
    commit = (meta["git"].get("commit") or "unknown")[:10]
    return f"{dev.get('name')} | torch {meta['torch']} | triton {meta.get('triton')} | pyjit @ {commit}"


def _speedup_plot(plt: Any, doc: dict[str, Any], title: str) -> Any:
    rows = [r for r in doc["results"] if r["suite"] != "compile" and r.get("speedup_vs_eager") is not None
            and r["backend"] != "eager"]
    if not rows:
        return None
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig, axes = plt.subplots(len(suites), 1, figsize=(max(6, 1.2 * len({r['workload'] for r in rows})), 3.2 * len(suites)),
                             squeeze=False)
    width = 0.8 / max(1, len(backends))
    for ax, suite in zip(axes[:, 0], suites):
        srows = [r for r in rows if r["suite"] == suite]
        names = list(dict.fromkeys(r["workload"] for r in srows))
        for j, b in enumerate(backends):
            xs, ys = [], []
            for i, wl in enumerate(names):
                r = next((x for x in srows if x["workload"] == wl and x["backend"] == b), None)
                if r is not None:
                    xs.append(i + (j - (len(backends) - 1) / 2) * width)
                    ys.append(r["speedup_vs_eager"])
            ax.bar(xs, ys, width, label=b)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("speed-up vs eager")
        ax.set_title(f"{suite}", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


def _compile_plot(plt: Any, doc: dict[str, Any], title: str) -> Any:
    rows = [r for r in doc["results"] if r["suite"] == "compile" and r["status"] == "OK"]
    if not rows:
        return None
    labels = [f"{r['workload']}\n{r['backend']}" for r in rows]
    cold = [r["compile"]["cold_s"] for r in rows]
    warm = [r["compile"]["warm_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], cold, 0.4, label="cold (empty caches)")
    ax.bar([x + 0.2 for x in xs], warm, 0.4, label="warm (populated caches)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("compile time (s), new process")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    return fig
