"""Draw one profiled step as a timeline picture: GPU streams (compute and NCCL) and pyjit's
graph ranges on the host, from a Chrome trace that ``torch.profiler`` exported.

    python -m bench.timeline TRACE.json OUT.png [--title TEXT]

The distributed suite writes such traces with ``BENCH_DISTRIBUTED_TRACE=<dir>``. Lanes, top to
bottom: ``host: pyjit graphs`` (``pyjit: <fn> graph <n>`` ranges, their ``... backward`` in
another colour, :mod:`pyjit.report.profiler`), ``host: DDP pieces`` (the ``... piece <i>``
ranges of a graph split at DDP's buckets, forward and backward), then one lane per GPU
stream that ran kernels, named by what ran there (``NCCL`` when its kernels are NCCL's). Times
are milliseconds from the first drawn event.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

HOST_LANE = "host: pyjit graphs"
PIECE_LANE = "host: DDP pieces"


@dataclasses.dataclass
class Lanes:
    """Spans (start ms, duration ms, colour key) per lane, in drawing order."""

    names: list[str]
    spans: dict[str, list[tuple[float, float, str]]]


def _is_kernel(ev: dict[str, Any]) -> bool:
    return ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")


def lanes_of(trace: dict[str, Any]) -> Lanes:
    """Group a Chrome trace's complete events into the lanes drawn."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    host = [e for e in events if str(e.get("name", "")).startswith("pyjit: ") and not _is_kernel(e)
            and e.get("cat") != "gpu_user_annotation" and " compile " not in e["name"]]
    kernels = [e for e in events if _is_kernel(e)]
    drawn = host + kernels
    if not drawn:
        return Lanes([], {})
    t0 = min(float(e["ts"]) for e in drawn)
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for e in host:
        kind = "backward" if e["name"].endswith(" backward") else ("guards" if ": guards " in e["name"] else "forward")
        lane = PIECE_LANE if " piece " in e["name"] else HOST_LANE  # pieces run inside their graph's range
        spans.setdefault(lane, []).append(((float(e["ts"]) - t0) / 1e3, float(e["dur"]) / 1e3, kind))
    by_stream: dict[Any, list[dict[str, Any]]] = {}
    for e in kernels:
        stream = (e.get("args") or {}).get("stream", e.get("tid"))
        by_stream.setdefault(stream, []).append(e)
    names = [lane for lane in (HOST_LANE, PIECE_LANE) if lane in spans]
    for stream, evs in sorted(by_stream.items(), key=lambda kv: str(kv[0])):
        nccl = any("nccl" in str(e.get("name", "")).lower() for e in evs)
        lane = f"stream {stream}: {'NCCL' if nccl else 'compute'}"
        names.append(lane)
        spans[lane] = [((float(e["ts"]) - t0) / 1e3, float(e["dur"]) / 1e3,
                        "nccl" if "nccl" in str(e.get("name", "")).lower() else "kernel") for e in evs]
    return Lanes(names, spans)


COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "guards": "#999999", "kernel": "#55a868", "nccl": "#c44e52"}


def draw(lanes: Lanes, out_png: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.6 * max(1, len(lanes.names))))
    for row, name in enumerate(reversed(lanes.names)):
        by_colour: dict[str, list[tuple[float, float]]] = {}
        for start, dur, kind in lanes.spans[name]:
            by_colour.setdefault(kind, []).append((start, max(dur, 1e-3)))
        for kind, bars in by_colour.items():
            ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLOURS.get(kind, "#8172b3"), label=kind)
    ax.set_yticks(range(len(lanes.names)))
    ax.set_yticklabels(list(reversed(lanes.names)))
    ax.set_xlabel("ms from the step's first event")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        ax.legend(unique.values(), unique.keys(), loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize="small",
                  ncol=len(unique), frameon=False)
    if title:
        ax.set_title(title, loc="right")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__.splitlines()[0])
    p.add_argument("trace", help="Chrome trace JSON exported by torch.profiler")
    p.add_argument("out", help="PNG to write")
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    with open(args.trace) as f:
        lanes = lanes_of(json.load(f))
    if not lanes.names:
        print(f"{args.trace}: no kernel or pyjit range events")
        return 1
    draw(lanes, args.out, args.title)
    print(f"wrote {args.out}: lanes {', '.join(lanes.names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
