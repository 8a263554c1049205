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
    """Grouped bars on a log axis (2x faster and 2x slower look alike); a backend without a
    number for a workload gets its status written where its bar would be (FAIL, ERROR, n/a)."""
    rows = [r for r in doc["results"] if r["suite"] != "compile" and r["backend"] != "eager"
            and r["workload"] != "hook_pure_python" and r["backend"] != "pyjit._C"]
    if not any(r.get("speedup_vs_eager") is not None for r in rows):
        return None
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    n_workloads = max(len({r["workload"] for r in rows if r["suite"] == s}) for s in suites)
    fig, axes = plt.subplots(len(suites), 1, figsize=(max(7, 1.6 * n_workloads), 3.6 * len(suites)), squeeze=False)
    width = 0.8 / max(1, len(backends))
    for ax, suite in zip(axes[:, 0], suites):
        srows = [r for r in rows if r["suite"] == suite]
        names = list(dict.fromkeys(r["workload"] for r in srows))
        for j, b in enumerate(backends):
            xs, ys = [], []
            for i, wl in enumerate(names):
                r = next((x for x in srows if x["workload"] == wl and x["backend"] == b), None)
                x = i + (j - (len(backends) - 1) / 2) * width
                if r is not None and r.get("speedup_vs_eager") is not None:
                    xs.append(x)
                    ys.append(r["speedup_vs_eager"])
                elif r is not None:
                    label = {"UNAVAILABLE": "n/a", "SKIPPED": "skip"}.get(r["status"], r["status"])
                    ax.text(x, 1.0, label, rotation=90, ha="center", va="bottom", fontsize=6)
            # Bars grow from 1x, up for faster and down for slower than eager.
            ax.bar(xs, [y - 1.0 for y in ys], width, bottom=1.0, label=b)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        _x_ticks(ax)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("speed-up vs eager (log)")
        ax.set_title(suite, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def _x_ticks(ax: Any) -> None:
    """Plain "0.5x / 2x" labels on a log axis instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:g}x")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt)
    ax.tick_params(axis="y", which="minor", labelsize=7)


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
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    return fig
