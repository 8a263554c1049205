"""Render a directory of compile traces (:mod:`pyjit.report.events`) as one self-contained HTML page.

``python -m pyjit report <dir> -o report.html``. The page needs no network: its CSS and its
small script are inline and the timeline is inline SVG. Sections, each per rank side by side
when the directory holds several ranks:

- a summary (frames compiled/skipped/eager, graphs, breaks, recompiles, compile seconds);
- a timeline of compile spans (one lane per phase);
- the frames as a tree by user stack (the program's calls down to the compiled function);
- one section per graph: its FX code, its frame's guards, its kernels and cache lookups;
- tables of graph breaks and recompiles (file:line, kind/failing guard), each row linking to
  its frame.

Torch-free: only the standard library.
"""
from __future__ import annotations

import glob
import html
import json
import os
from collections import defaultdict
from typing import Any, Iterable

PHASES = ("frame", "imports", "init", "trace", "backend", "aten", "lowering", "codegen", "kernel_compile", "load",
          "replacement")

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f7f8fa}
header{background:#1d2330;color:#fff;padding:12px 20px}header h1{margin:0;font-size:20px}
main{padding:8px 20px}section{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:12px 0;padding:8px 14px}
h2{font-size:17px;margin:6px 0}h3{font-size:15px;margin:10px 0 4px}
.ranks{display:flex;gap:14px;align-items:flex-start}.rank{flex:1 1 0;min-width:0}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border-bottom:1px solid #e6e9ef;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#eef1f6}pre{background:#f3f5f9;padding:6px;overflow:auto;
font-size:12px;max-height:420px}code{font-size:12px}.muted{color:#6b7385}.tag{border-radius:3px;padding:0 4px;
font-size:12px}.compiled{background:#d8f3dc}.skipped{background:#eceff3}.eager,.failed{background:#ffd9d6}
.warm_start{background:#dbe9ff}ul.tree{list-style:none;padding-left:16px;margin:2px 0}
input#filter{width:320px;padding:3px}svg text{font-size:10px;font-family:system-ui,sans-serif}
.hidden{display:none}
"""

_JS = """
(function(){
  var box=document.getElementById('filter');
  if(box){box.addEventListener('input',function(){
    var q=box.value.toLowerCase();
    document.querySelectorAll('tr.row').forEach(function(tr){
      tr.classList.toggle('hidden',q!=='' && tr.textContent.toLowerCase().indexOf(q)<0);});
  });}
  document.body.setAttribute('data-report-ready','1');
})();
"""

_COLORS = {"frame": "#c9d3e6", "imports": "#e0e0e0", "init": "#e0e0e0", "trace": "#7fb3e0", "backend": "#b8a4e3",
           "aten": "#f0b86e", "lowering": "#8fd19e", "codegen": "#5fb37a", "kernel_compile": "#e57f7f",
           "load": "#d9c15b", "replacement": "#9bd3d9"}


def load(directory: str) -> tuple[dict[int, list[dict[str, Any]]], list[str]]:
    """Events per rank (sorted by time) from every ``*.jsonl`` under ``directory``, and
    problems met (unreadable lines are skipped, each reported once)."""
    ranks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    problems: list[str] = []
    files = sorted(glob.glob(os.path.join(directory, "**", "*.jsonl"), recursive=True))
    if not files:
        problems.append(f"no *.jsonl trace files under {directory}")
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    problems.append(f"{os.path.basename(path)}:{n}: not JSON ({e})")
                    continue
                if not isinstance(ev, dict) or "event" not in ev:
                    problems.append(f"{os.path.basename(path)}:{n}: not an event")
                    continue
                ranks[int(ev.get("rank", 0))].append(ev)
    for evs in ranks.values():
        evs.sort(key=lambda e: e.get("t", 0.0))
    return dict(sorted(ranks.items())), problems


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _where(ev: dict[str, Any]) -> str:
    if not ev.get("file"):
        return ""
    return f"{ev['file']}:{ev.get('line')}"


def _frame_anchor(rank: int, frame_id: Any) -> str:
    return f"r{rank}-{frame_id}"


def _frame_link(rank: int, frame_id: Any) -> str:
    if not frame_id:
        return ""
    return f'<a href="#{_frame_anchor(rank, frame_id)}">{_e(frame_id)}</a>'


class _Rank:
    """One rank's events, indexed for rendering."""

    def __init__(self, rank: int, evs: list[dict[str, Any]]) -> None:
        self.rank = rank
        self.events = evs
        self.by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for ev in evs:
            self.by_kind[ev["event"]].append(ev)
        self.frames = {f["id"]: f for f in self.by_kind["frame"]}
        self.per_frame: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for ev in evs:
            if ev.get("frame") and ev["event"] != "frame":
                self.per_frame[ev["frame"]][ev["event"]].append(ev)

    def compile_seconds(self) -> float:
        return sum(f.get("dur", 0.0) for f in self.frames.values() if not f.get("frame"))


def _summary(r: _Rank) -> str:
    status: dict[str, int] = defaultdict(int)
    for f in r.frames.values():
        status[f.get("status", "?")] += 1
    procs = r.by_kind["process"]
    argv = " ".join(procs[0].get("argv", [])) if procs else ""
    rows = [("process", f"pid {', '.join(sorted({str(p.get('pid')) for p in procs}))} — {argv}"),
            ("frames", ", ".join(f"{n} {s}" for s, n in sorted(status.items())) or "none"),
            ("graphs", len(r.by_kind["graph"])), ("graph breaks", len(r.by_kind["graph_break"])),
            ("recompiles", len(r.by_kind["recompile"])),
            ("graph cache", f"{sum(c.get('result') == 'hit' for c in r.by_kind['cache'])} hits, "
                            f"{sum(c.get('result') == 'miss' for c in r.by_kind['cache'])} misses"),
            ("warm-start installs", len(r.by_kind["warm_start"])),
            ("kernels", sum(len(k.get("kernels", [])) for k in r.by_kind["kernels"])),
            ("compile time", f"{r.compile_seconds():.3f} s")]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<h3>rank {r.rank}</h3><table>{body}</table>"


def _timeline(r: _Rank) -> str:
    spans = [s for s in r.by_kind["span"] if isinstance(s.get("start"), (int, float))]
    if not spans:
        return "<p class='muted'>no compile spans</p>"
    t0 = min(s["start"] for s in spans)
    t1 = max(s["start"] + s.get("dur", 0.0) for s in spans)
    total = max(t1 - t0, 1e-6)
    lanes = [p for p in PHASES if any(s.get("phase") == p for s in spans)]
    lanes += sorted({s.get("phase", "?") for s in spans} - set(lanes))
    width, left, lane_h = 900, 110, 18
    height = lane_h * len(lanes) + 24
    parts = [f'<svg viewBox="0 0 {width + left} {height}" width="100%" role="img" '
             f'aria-label="compile timeline of rank {r.rank}">']
    for i, lane in enumerate(lanes):
        y = i * lane_h
        parts.append(f'<text x="2" y="{y + 13}">{_e(lane)}</text>'
                     f'<line x1="{left}" x2="{left + width}" y1="{y + lane_h}" y2="{y + lane_h}" stroke="#eee"/>')
    for s in spans:
        i = lanes.index(s.get("phase", "?"))
        x = left + (s["start"] - t0) / total * width
        w = max(s.get("dur", 0.0) / total * width, 1.0)
        label = f"{s.get('phase')} {s.get('name', '')}: {s.get('dur', 0.0) * 1e3:.1f} ms"
        link = f'#{_frame_anchor(r.rank, s["frame"])}' if s.get("frame") else None
        rect = (f'<rect x="{x:.1f}" y="{i * lane_h + 2}" width="{w:.1f}" height="{lane_h - 4}" '
                f'fill="{_COLORS.get(s.get("phase", ""), "#aaa")}"><title>{_e(label)}</title></rect>')
        parts.append(f'<a href="{link}">{rect}</a>' if link else rect)
    for k in range(5):
        x = left + k / 4 * width
        parts.append(f'<text x="{x:.0f}" y="{height - 4}" text-anchor="middle">{total * k / 4:.2f} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _frame_tree(r: _Rank) -> str:
    tree: dict[str, Any] = {}
    for f in r.frames.values():
        node = tree
        stack = f.get("stack") or []
        for entry in stack[:-1]:
            key = f"{entry.get('function')} ({entry.get('file')}:{entry.get('line')})"
            node = node.setdefault(key, {})
        node.setdefault("\0frames", []).append(f)

    def render(node: dict[str, Any]) -> str:
        out = ["<ul class='tree'>"]
        for f in node.get("\0frames", []):
            status = f.get("status", "?")
            reason = f" — {_e(f.get('reason'))}" if f.get("reason") else ""
            out.append(f"<li id='{_frame_anchor(r.rank, f['id'])}'><span class='tag {_e(status)}'>{_e(status)}</span> "
                       f"<b>{_e(f.get('qualname') or f.get('name'))}</b> <code>{_e(_where(f))}</code> "
                       f"<span class='muted'>{_e(f['id'])}, {f.get('dur', 0.0) * 1e3:.1f} ms{reason}</span>")
            graphs = r.per_frame[f["id"]]["graph"]
            if graphs:
                out.append(" graphs: " + ", ".join(f"<a href='#r{r.rank}-{_e(g['id'])}'>{_e(g.get('name'))}</a>"
                                                    for g in graphs))
            out.append("</li>")
        for key, child in node.items():
            if key == "\0frames":
                continue
            out.append(f"<li><details open><summary><code>{_e(key)}</code></summary>{render(child)}</details></li>")
        out.append("</ul>")
        return "".join(out)

    return render(tree) if r.frames else "<p class='muted'>no frames</p>"


def _graphs(r: _Rank) -> str:
    out = []
    for g in r.by_kind["graph"]:
        fid = g.get("frame")
        related = r.per_frame[fid] if fid else {}
        guards = "\n".join(g.get("guards", []))
        kernels = [k for ev in related.get("kernels", []) for k in ev.get("kernels", [])]
        modules = ", ".join(_e(ev.get("module")) for ev in related.get("kernels", []))
        krows = "".join(f"<tr><td><code>{_e(k.get('name'))}</code></td><td><code>{_e(k.get('launch'))}</code></td></tr>"
                        for k in kernels)
        cache = "".join(f"<li>{_e(c.get('result'))} {_e(c.get('graph'))} (key {_e(c.get('key'))}) {_e(c.get('reason'))}</li>"
                        for c in related.get("cache", []))
        out.append(
            f"<section id='r{r.rank}-{_e(g['id'])}'><h3>{_e(g.get('name'))} <span class='muted'>"
            f"{_e(_where(g))}, {_e(g.get('nodes'))} nodes, frame {_frame_link(r.rank, fid)}</span></h3>"
            f"<p>inputs: <code>{_e(', '.join(g.get('inputs', [])))}</code></p>"
            f"<details open><summary>FX code</summary><pre>{_e(g.get('code', '').strip())}</pre></details>"
            f"<details><summary>guards ({len(g.get('guards', []))})</summary><pre>{_e(guards)}</pre></details>"
            f"<details><summary>kernels ({len(kernels)})</summary><p class='muted'>{modules}</p>"
            f"<table><tr><th>kernel</th><th>launch</th></tr>{krows}</table></details>"
            + (f"<details><summary>graph cache</summary><ul>{cache}</ul></details>" if cache else "")
            + "</section>")
    return "".join(out) or "<p class='muted'>no graphs</p>"


def _table(headers: Iterable[str], rows: list[list[str]], name: str) -> str:
    if not rows:
        return f"<p class='muted'>no {name}</p>"
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr class='row'>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{name.replace(' ', '-')}'><tr>{head}</tr>{body}</table>"


def _breaks(r: _Rank) -> str:
    rows = []
    for b in r.by_kind["graph_break"]:
        chain = "<br>".join(_e(f"{c.get('function')} ({c.get('file')}:{c.get('line')})") for c in b.get("inline_chain", []))
        rows.append([f"<code class='where'>{_e(_where(b))}</code>", _e(b.get("kind")),
                     _e(b.get("explanation")) + (f"<br><code>{_e(b.get('source_line'))}</code>" if b.get("source_line") else ""),
                     chain, _e(b.get("resolution")), _e(b.get("hint")), _frame_link(r.rank, b.get("frame"))])
    return _table(["file:line", "kind", "reason", "inline chain", "what pyjit did", "hint", "frame"], rows, "graph breaks")


def _recompiles(r: _Rank) -> str:
    rows = []
    for c in r.by_kind["recompile"]:
        fails = "<br>".join(f"entry {_e(f.get('entry'))}: <code>{_e(f.get('guard'))}</code> — {_e(f.get('reason'))}"
                            for f in c.get("failures", []))
        rows.append([f"<code class='where'>{_e(_where(c))}</code>", _e(c.get("function")), _e(c.get("entries")), fails,
                     _frame_link(r.rank, c.get("frame"))])
    return _table(["file:line", "function", "entries before", "failing guard", "frame"], rows, "recompiles")


def _cache(r: _Rank) -> str:
    rows = [[_e(c.get("result")), _e(c.get("graph")), _e(c.get("key")), _e(", ".join(c.get("fields", [])) or c.get("reason")),
             _frame_link(r.rank, c.get("frame"))] for c in r.by_kind["cache"]]
    rows += [["warm start", _e(w.get("function")), "", _e(_where(w)), ""] for w in r.by_kind["warm_start"]]
    return _table(["result", "graph", "key", "differing key fields", "frame"], rows, "cache lookups")


def _side_by_side(ranks: list[_Rank], render: Any) -> str:
    if len(ranks) == 1:
        return render(ranks[0])
    return "<div class='ranks'>" + "".join(
        f"<div class='rank'><h3>rank {r.rank}</h3>{render(r)}</div>" for r in ranks) + "</div>"


def render(directory: str) -> str:
    """The report page for the traces under ``directory``."""
    loaded, problems = load(directory)
    ranks = [_Rank(rank, evs) for rank, evs in loaded.items()]
    notes = "".join(f"<li>{_e(p)}</li>" for p in problems)
    sections = [
        ("summary", "Summary", _side_by_side(ranks, _summary)),
        ("timeline", "Compile timeline", _side_by_side(ranks, _timeline)),
        ("frames", "Frames by user stack", _side_by_side(ranks, _frame_tree)),
        ("breaks", "Graph breaks", _side_by_side(ranks, _breaks)),
        ("recompiles", "Recompiles", _side_by_side(ranks, _recompiles)),
        ("cache", "Graph cache and warm start", _side_by_side(ranks, _cache)),
        ("graphs", "Graphs", _side_by_side(ranks, _graphs)),
    ]
    nav = " · ".join(f"<a href='#{sid}' style='color:#cde'>{_e(title)}</a>" for sid, title, _ in sections)
    body = "".join(f"<section id='{sid}'><h2>{_e(title)}</h2>{content}</section>" for sid, title, content in sections)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "script-src 'unsafe-inline'; img-src data:\">"
            f"<title>pyjit compile report</title><style>{_CSS}</style></head><body>"
            f"<header><h1>pyjit compile report</h1><div>{_e(os.path.abspath(directory))} — "
            f"{len(ranks)} rank(s)</div><nav>{nav}</nav></header><main>"
            f"<p><input id='filter' placeholder='filter table rows'></p>"
            + (f"<section><h2>Problems reading the trace</h2><ul>{notes}</ul></section>" if notes else "")
            + body + f"</main><script>{_JS}</script></body></html>")


def write(directory: str, out: str) -> str:
    """Render ``directory`` into the file ``out``; returns its path."""
    page = render(directory)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return out
