"""Frontend benchmarks: cache-hit call overhead and capture time, pyjit vs torch.compile.

Owns two measurements, each a function returning a plain dict, the harness plug-in
:func:`run_bench` (rows as ``docs/contracts.md`` specifies for ``bench/`` scripts) and a table
printer for ``python -m bench.frontend_overhead``:

- :func:`measure_call_overhead`: per-call time of a function with 1, 4 and 16 tiny tensor
  arguments (``a + 1`` chains) called plainly, through ``pyjit.jit(backend="eager")`` and
  through ``torch.compile(backend="eager")``, all in the same process, samples interleaved so
  that machine noise hits every variant alike. Overhead = median of the paired per-sample
  differences compiled - plain.
- :func:`measure_capture_time`: wall time of the first call (tracing, guard building and the
  "eager" backend, plus one run of the tiny graph) for the end-to-end corpus functions
  (``tests/e2e/corpus.py``), each after a full reset, pyjit vs torch.compile, compared only
  where both captured a graph (a frame run as plain Python is fast but captured nothing).

A variant that cannot run (for example ``pyjit.jit`` before the frontend exists) is reported
with ``None`` values and the reason, never silently dropped.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------------------------
# the functions under test: n tiny tensors in, one tiny tensor out


def add1_args1(a):
    return a + 1


def add1_args4(a, b, c, d):
    return a + b + c + d + 1


def add1_args16(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p):  # noqa: E741
    return a + b + c + d + e + f + g + h + i + j + k + l + m + n + o + p + 1


OVERHEAD_FUNCTIONS: dict[int, Callable[..., Any]] = {1: add1_args1, 4: add1_args4, 16: add1_args16}


# ----------------------------------------------------------------------------------------------
# statistics


def summarize(samples: list[float]) -> dict[str, float]:
    """Median and interquartile range of per-call times (seconds)."""
    qs = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [samples[0]] * 3
    return {"median": statistics.median(samples), "q1": qs[0], "q3": qs[2], "iqr": qs[2] - qs[0],
            "min": min(samples), "n": len(samples), "samples": list(samples)}


def _time_batch(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    """Seconds per call over ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


# ----------------------------------------------------------------------------------------------
# variants


def _pyjit_eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    import pyjit

    return pyjit.jit(fn, backend="eager")


def _torch_compile_eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    return torch.compile(fn, backend="eager")


def _reset_all() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        import pyjit

        pyjit.reset()
    except (ImportError, AttributeError):
        pass


COMPILERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "pyjit": _pyjit_eager,
    "torch.compile": _torch_compile_eager,
}


class _GraphCountingEager:
    """The "eager" backend (run the graph as is) that also counts graphs, so capture times of
    frames that fell back to plain Python (no graph: fast, but nothing captured) are excluded."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def _capture_compilers() -> dict[str, Callable[[Callable[..., Any], Any], Callable[..., Any]]]:
    def pyjit_jit(fn: Callable[..., Any], backend: Any) -> Callable[..., Any]:
        import pyjit

        return pyjit.jit(fn, backend=backend)

    def torch_compile(fn: Callable[..., Any], backend: Any) -> Callable[..., Any]:
        return torch.compile(fn, backend=backend)

    return {"pyjit": pyjit_jit, "torch.compile": torch_compile}


# ----------------------------------------------------------------------------------------------
# (a) cache-hit overhead


def _mlp8() -> torch.nn.Module:
    """A module whose guards cover 16 parameters plus the input (17 tensors)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(8)]).eval()


def measure_call_overhead(n_args: tuple[int, ...] = (1, 4, 16), *, samples: int = 41, calls_per_sample: int = 2000,
                          numel: int = 8, include_module: bool = True, device: str = "cpu") -> dict[str, Any]:
    """Per-call time (s) of plain, pyjit and torch.compile calls, and their overhead over plain.

    Workloads: the ``add1_args<n>`` functions for each n in ``n_args`` (labels "1", "4", "16"),
    plus, with ``include_module``, an 8-layer ``nn.Sequential`` of ``Linear(8, 8)`` called on
    one (2, 8) tensor (label "mlp8": 17 tensors to guard, parameters included).

    Returns ``{"config": {...}, "results": {label: {"plain": stats, "<compiler>": stats | None,
    "<compiler>_overhead": stats | None, "<compiler>_error": str}}}`` where stats come from
    :func:`summarize` over ``samples`` samples of ``calls_per_sample`` calls each. Overhead
    samples are paired differences (compiled sample i - plain sample i, taken back to back).
    """
    _reset_all()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: intra-op threads only add noise
    try:
        return _measure_call_overhead(n_args, samples, calls_per_sample, numel, include_module, device)
    finally:
        torch.set_num_threads(threads)
        _reset_all()


def _measure_call_overhead(n_args: tuple[int, ...], samples: int, calls_per_sample: int, numel: int,
                           include_module: bool, device: str) -> dict[str, Any]:
    workloads: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        str(n): (OVERHEAD_FUNCTIONS[n], tuple(torch.randn(numel, device=device) for _ in range(n))) for n in n_args
    }
    if include_module:
        workloads["mlp8"] = (_mlp8().to(device), (torch.randn(2, 8, device=device),))
    results: dict[str, dict[str, Any]] = {}
    for label, (fn, args) in workloads.items():
        variants: dict[str, Callable[..., Any]] = {"plain": fn}
        row: dict[str, Any] = {}
        for name, compile_fn in COMPILERS.items():
            try:
                compiled = compile_fn(fn)
                for _ in range(3):  # compile, then make sure the next calls are cache hits
                    out = compiled(*args)
                torch.testing.assert_close(out, fn(*args), rtol=0, atol=0)
                variants[name] = compiled
            except Exception as e:  # report, do not drop
                row[name] = None
                row[f"{name}_overhead"] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {e}"
        for v in variants.values():  # warm-up of every path
            _time_batch(v, args, calls_per_sample // 4 or 1)
        raw: dict[str, list[float]] = {k: [] for k in variants}
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(samples):
                for k, v in variants.items():  # interleaved: noise hits all variants alike
                    raw[k].append(_time_batch(v, args, calls_per_sample))
        finally:
            if gc_was_enabled:
                gc.enable()
        row["plain"] = summarize(raw["plain"])
        for k in variants:
            if k == "plain":
                continue
            row[k] = summarize(raw[k])
            row[f"{k}_overhead"] = summarize([c - p for c, p in zip(raw[k], raw["plain"])])
        results[label] = row
    return {
        "config": {"samples": samples, "calls_per_sample": calls_per_sample, "numel": numel, "device": device,
                   "torch": torch.__version__, "python": sys.version.split()[0], "unit": "s"},
        "results": results,
    }


# ----------------------------------------------------------------------------------------------
# (b) capture time


def _corpus_cases() -> list[Any]:
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    from tests.e2e.corpus import CASES

    return list(CASES)


def measure_capture_time(case_names: list[str] | None = None, *, repeats: int = 3, limit: int | None = None) -> dict[str, Any]:
    """First-call wall time (s) per corpus case for each compiler, best of ``repeats`` (each
    repeat after a full reset of both compilers), with the number of graphs captured.

    The summary (per-compiler medians and totals, and the median/geomean of per-case ratios
    pyjit/torch.compile) covers only the cases where *both* compilers captured at least one
    graph; ``excluded`` lists the others (a frame that falls back to plain Python is fast but
    captured nothing). Cases a compiler raises on get ``None`` and an error string."""
    cases = _corpus_cases()
    if case_names:
        wanted = set(case_names)
        cases = [c for c in cases if c.name in wanted]
    if limit is not None:
        cases = cases[:limit]
    compilers = _capture_compilers()
    # One throwaway compile per compiler: first-use imports are not capture time.
    for name, compile_fn in compilers.items():
        try:
            _reset_all()
            compile_fn(add1_args1, _GraphCountingEager())(torch.randn(4))
        except Exception:
            pass
    per_case: dict[str, dict[str, Any]] = {}
    for case in cases:
        row: dict[str, Any] = {}
        for name, compile_fn in compilers.items():
            times = []
            try:
                for _ in range(repeats):
                    _reset_all()
                    fn = case.build_fn()
                    args, kwargs = case.make_inputs(0)
                    backend = _GraphCountingEager()
                    compiled = compile_fn(fn, backend)
                    start = time.perf_counter()
                    compiled(*args, **kwargs)
                    times.append(time.perf_counter() - start)
                row[name] = min(times)
                row[f"{name}_graphs"] = backend.graphs
            except Exception as e:
                row[name] = None
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        per_case[case.name] = row
    _reset_all()
    both = {k: r for k, r in per_case.items()
            if all(r.get(n) is not None and r.get(f"{n}_graphs", 0) > 0 for n in compilers)}
    summary: dict[str, Any] = {"compared_cases": len(both), "excluded": sorted(set(per_case) - set(both))}
    for name in compilers:
        vals = [r[name] for r in both.values()]
        summary[name] = {"cases": len(vals), "median": statistics.median(vals) if vals else None,
                         "total": sum(vals) if vals else None}
    ratios = [r["pyjit"] / r["torch.compile"] for r in both.values()]
    summary["ratio_pyjit_over_torch_compile"] = {
        "cases": len(ratios),
        "median": statistics.median(ratios) if ratios else None,
        "geomean": (statistics.geometric_mean(ratios) if ratios else None),
    }
    return {"config": {"repeats": repeats, "cases": len(cases), "unit": "s", "torch": torch.__version__},
            "per_case": per_case, "summary": summary}


def run_bench(*, quick: bool = False, device: str = "cpu", time_budget_s: float | None = None) -> list[dict[str, Any]]:
    """The bench harness plug-in (docs/contracts.md, ``bench/``): one row per measurement.

    Rows: ``call_time/<workload>`` (us per call; backends plain, pyjit, torch.compile),
    ``call_overhead/<workload>`` (us over plain; pyjit, torch.compile), ``capture_time/median``
    (ms; pyjit, torch.compile) and ``capture_time/ratio`` (pyjit / torch.compile, geomean over
    the corpus cases both captured). Call overhead runs on ``device``; capture time on the CPU
    corpus. ``quick`` or a small ``time_budget_s`` trims samples and corpus cases."""
    small = quick or (time_budget_s is not None and time_budget_s < 240)
    overhead = measure_call_overhead(samples=7 if small else 41, calls_per_sample=300 if small else 2000,
                                     device=device)
    capture = measure_capture_time(repeats=1 if small else 3, limit=12 if small else None)
    rows: list[dict[str, Any]] = []
    for label, row in overhead["results"].items():
        for backend in ("plain", *COMPILERS):
            for key, name in ((backend, "call_time"), (f"{backend}_overhead", "call_overhead")):
                if backend == "plain" and name == "call_overhead":
                    continue
                stats = row.get(key)
                entry: dict[str, Any] = {"name": f"{name}/{label}", "backend": backend, "unit": "us"}
                if stats is None:
                    entry.update(value=float("nan"), status="ERROR", note=row.get(f"{backend}_error", ""))
                else:
                    entry.update(value=stats["median"] * 1e6, median=stats["median"] * 1e6, q1=stats["q1"] * 1e6,
                                 q3=stats["q3"] * 1e6, samples=[v * 1e6 for v in stats["samples"]], status="OK")
                rows.append(entry)
    summary = capture["summary"]
    for backend in COMPILERS:
        med = summary[backend]["median"]
        rows.append({"name": "capture_time/median", "backend": backend, "unit": "ms",
                     "value": float("nan") if med is None else med * 1e3, "status": "OK" if med is not None else "ERROR",
                     "note": f"{summary['compared_cases']} corpus cases captured by both, best of "
                             f"{capture['config']['repeats']}"})
    ratio = summary["ratio_pyjit_over_torch_compile"]
    rows.append({"name": "capture_time/ratio", "backend": "pyjit", "unit": "x",
                 "value": float("nan") if ratio["geomean"] is None else ratio["geomean"],
                 "status": "OK" if ratio["geomean"] is not None else "ERROR",
                 "note": f"geomean of per-case pyjit/torch.compile over {ratio['cases']} cases; "
                         f"median {ratio['median']}"})
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    """Both measurements; ``quick`` trims samples and cases (for smoke runs of the harness)."""
    if quick:
        return {"call_overhead": measure_call_overhead(samples=7, calls_per_sample=300),
                "capture_time": measure_capture_time(repeats=1, limit=12)}
    return {"call_overhead": measure_call_overhead(), "capture_time": measure_capture_time()}


# ----------------------------------------------------------------------------------------------
# printing


def _us(v: float | None) -> str:
    return "     n/a" if v is None else f"{v * 1e6:8.2f}"


def _ms(v: float | None) -> str:
    return "     n/a" if v is None else f"{v * 1e3:8.2f}"


def format_call_overhead(res: dict[str, Any]) -> str:
    cfg = res["config"]
    lines = [f"Cache-hit call time, median [IQR] in us per call ({cfg['samples']} samples x "
             f"{cfg['calls_per_sample']} calls, backend=eager). Workloads: 1/4/16 = a + 1 chains over "
             f"that many tensors of {cfg['numel']} floats; mlp8 = 8 x Linear(8, 8) module on a (2, 8) input",
             f"{'workload':>8} | {'plain':>18} | {'pyjit':>18} | {'torch.compile':>18} | "
             f"{'pyjit overhead':>20} | {'t.c overhead':>20} | ratio"]
    for n, row in res["results"].items():
        def cell(key: str) -> str:
            s = row.get(key)
            return "n/a".rjust(18) if s is None else f"{_us(s['median'])} [{s['iqr'] * 1e6:6.2f}]"

        def ocell(key: str) -> str:
            s = row.get(key)
            return "n/a".rjust(20) if s is None else f"{_us(s['median'])} [{s['iqr'] * 1e6:6.2f}]  "

        po, to = row.get("pyjit_overhead"), row.get("torch.compile_overhead")
        ratio = f"{po['median'] / to['median']:.2f}" if po and to and to["median"] > 0 else "n/a"
        lines.append(f"{n:>8} | {cell('plain')} | {cell('pyjit')} | {cell('torch.compile')} | "
                     f"{ocell('pyjit_overhead')} | {ocell('torch.compile_overhead')} | {ratio}")
        for k, v in row.items():
            if k.endswith("_error"):
                lines.append(f"        {k}: {v}")
    return "\n".join(lines)


def format_capture_time(res: dict[str, Any], *, per_case: bool = False) -> str:
    s = res["summary"]
    r = s["ratio_pyjit_over_torch_compile"]
    lines = [f"Capture time (first call, backend=eager), best of {res['config']['repeats']}, "
             f"{res['config']['cases']} corpus cases, ms",
             f"{'':>14} | {'cases':>5} | {'median':>8} | {'total':>9}"]
    for name in COMPILERS:
        total = "n/a" if s[name]["total"] is None else f"{s[name]['total'] * 1e3:9.1f}"
        lines.append(f"{name:>14} | {s[name]['cases']:>5} | {_ms(s[name]['median'])} | {total:>9}")
    if r["median"] is not None:
        lines.append(f"pyjit / torch.compile per case: median {r['median']:.3f}, geomean {r['geomean']:.3f} "
                     f"over {r['cases']} cases")
    if s["excluded"]:
        lines.append(f"excluded (a compiler captured no graph or raised): {len(s['excluded'])} case(s): "
                     f"{', '.join(s['excluded'][:12])}{' ...' if len(s['excluded']) > 12 else ''}")
    errors = {k: v for k, v in res["per_case"].items() if any(key.endswith("_error") for key in v)}
    if errors:
        lines.append(f"{len(errors)} case(s) failed under a compiler, e.g.:")
        for name, row in list(errors.items())[:5]:
            msgs = "; ".join(f"{k}={v}" for k, v in row.items() if k.endswith("_error"))
            lines.append(f"  {name}: {msgs[:160]}")
    if per_case:
        lines.append(f"{'case':>40} | {'pyjit':>8} | {'t.c':>8} | graphs (pyjit, t.c)")
        for name, row in res["per_case"].items():
            lines.append(f"{name:>40} | {_ms(row.get('pyjit'))} | {_ms(row.get('torch.compile'))} | "
                         f"{row.get('pyjit_graphs', '-')}, {row.get('torch.compile_graphs', '-')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pyjit frontend benchmarks")
    parser.add_argument("--what", choices=["all", "overhead", "capture"], default="all")
    parser.add_argument("--samples", type=int, default=41)
    parser.add_argument("--calls", type=int, default=2000, help="calls per sample")
    parser.add_argument("--repeats", type=int, default=3, help="capture repeats per case (best of)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N corpus cases")
    parser.add_argument("--per-case", action="store_true", help="print every case's capture time")
    parser.add_argument("--json", default=None, help="also write every number (dicts above) to this file")
    opts = parser.parse_args(argv)
    report: dict[str, Any] = {"load_average_at_start": os.getloadavg()}
    if opts.what in ("all", "overhead"):
        report["call_overhead"] = measure_call_overhead(samples=opts.samples, calls_per_sample=opts.calls)
        print(format_call_overhead(report["call_overhead"]))
        print()
    if opts.what in ("all", "capture"):
        report["capture_time"] = measure_capture_time(repeats=opts.repeats, limit=opts.limit)
        print(format_capture_time(report["capture_time"], per_case=opts.per_case))
    report["load_average_at_end"] = os.getloadavg()
    print(f"\nload average (1, 5, 15 min) at start {report['load_average_at_start']}, at end {report['load_average_at_end']}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
