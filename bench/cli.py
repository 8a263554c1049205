"""Command line of ``python -m bench``: pick suites, backends, device, budget; write the outputs.

Examples::

    python -m bench                                   # quick suite, every backend, this machine
    python -m bench --suite kernels,compile,models --out docs/results/2026-11-28_abc1234_h100 --time-budget 540
    python -m bench --suite overhead --backends eager,pyjit --compare bench/out/quick_cpu.json
    python -m bench --list                            # suites, workloads, backend availability
    python -m bench --suite distributed               # DDP training steps on 2 ranks (2 GPUs; else a CPU smoke run)
    python -m bench --suite differential --count 1000 --seed 0 --backend eager   # eager vs pyjit, by category

Outputs go to ``--out`` (default ``bench/out``): ``<name>.json`` (every raw number, schema in
:mod:`bench.schema`), ``<name>_speedup.png`` / ``<name>_compile.png`` and, with ``--csv``,
``<name>.csv``. ``<name>`` defaults to the suites and device type, e.g. ``quick_cpu``. The JSON
is rewritten after every result, so a run that is cut off still leaves its numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from typing import Any

from bench import ALL_BACKENDS, DEFAULT_BACKENDS, SCHEMA_VERSION, SUITES

DEFAULT_BUDGET_S = 540.0  # fits the GPU machine's 10-minute command limit with room to write
QUICK_BUDGET_S = 110.0  # the quick suite's promise: under two minutes on a 2-core CPU


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="pyjit's benchmark harness.",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--suite", default="quick", help=f"comma-separated suites from {', '.join(SUITES)} (default quick)")
    p.add_argument("--backends", default="all",
                   help=f"comma-separated from {', '.join(ALL_BACKENDS)}; 'all' = {','.join(DEFAULT_BACKENDS)}. "
                        "eager is always added (the baseline)")
    p.add_argument("--device", default="auto", help="auto (first GPU, else CPU), cpu or cuda[:N]")
    p.add_argument("--size", default="auto", choices=("auto", "small", "large"),
                   help="workload sizes: auto = large on GPU, small on CPU")
    p.add_argument("--workloads", default=None, help="only these workloads (comma-separated names; see --list)")
    p.add_argument("--out", default=os.path.join("bench", "out"), help="output folder for JSON, CSV and PNGs")
    p.add_argument("--name", default=None, help="file name stem of the outputs (default <suites>_<device>)")
    p.add_argument("--csv", action="store_true", help="also write a flat CSV")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--compare", metavar="OLD.json", default=None, help="print changes against an earlier run")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 2 when --compare flags a regression")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting new work after this many seconds; the rest is SKIPPED (0 = unlimited; "
                        f"default {QUICK_BUDGET_S:.0f} for the quick suite alone, else {DEFAULT_BUDGET_S:.0f}, "
                        "under a 10-minute command limit)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice); 1 gives steadier numbers on a shared machine")
    p.add_argument("--clock", default="auto", choices=("auto", "wall", "process"),
                   help="CPU timer: wall (perf_counter) or process (CPU time of this process: steadier on a shared "
                        "machine, use with --threads 1). auto = wall, unless the CPU machine is overloaded at the "
                        "start (load average above its cores): then process and 1 thread. CUDA uses CUDA events")
    p.add_argument("--samples", type=int, default=None, help="timed samples per case (default 15, quick 9)")
    p.add_argument("--no-external", action="store_true",
                   help="do not run the layers' plug-in scripts (bench/core_overhead.py ...): reported as SKIPPED")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--list", action="store_true", help="list suites, workloads and backend availability, then exit")
    g = p.add_argument_group("differential suite (generated programs, eager vs pyjit; bench/differential.py)")
    g.add_argument("--count", type=int, default=100, help="how many programs (default 100)")
    g.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    g.add_argument("--backend", default="default", choices=("default", "eager"),
                   help="pyjit's backend: default (generated kernels) or eager (the captured graph as is)")
    g.add_argument("--markdown", default=None, metavar="PATH", help="also write the failing seeds as Markdown")
    return p


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _list(device: Any) -> int:
    from bench import models, workloads
    from bench.backends import make_backend
    from bench.suites import COMPILE_WORKLOADS

    print("suites:", ", ".join(SUITES))
    for group, items in (("overhead", workloads.OVERHEAD), ("kernels", workloads.KERNELS), ("models", models.MODELS)):
        print(f"{group} workloads:")
        for w in items:
            print(f"  {w.name:<22} {'(quick) ' if w.quick else ''}{w.description}")
    print("compile workloads:", ", ".join(COMPILE_WORKLOADS))
    from bench.dynamic import DYNAMIC

    print("dynamic workloads (20 sizes of one dimension):", ", ".join(w.name for w in DYNAMIC))
    from bench.hook_overhead import WORKLOADS as HOOK

    print("hook workloads (plain Python under pyjit.enable()):", ", ".join(w.name for w in HOOK))
    print(f"backends on {device}:")
    for name in ALL_BACKENDS:
        b = make_backend(name, device)
        print(f"  {name:<16} {'available' if b.available else 'unavailable: ' + b.reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    if "differential" in _split(args.suite):
        if _split(args.suite) != ["differential"]:
            print("the differential suite runs alone (--suite differential)", file=sys.stderr)
            return 2
        from bench.differential import run

        return run(args.count, args.seed, args.backend, args.markdown)
    from bench import env
    from bench.backends import make_backends

    device = env.pick_device(args.device)
    args.auto_note = None
    if args.clock == "auto":
        args.clock = "wall"
        load, cores = env.load_average(), os.cpu_count() or 1
        if device.type == "cpu" and load and load[0] > cores:
            # Wall time on an overloaded machine mostly measures the other processes.
            args.clock = "process"
            args.threads = args.threads or 1
            args.auto_note = (f"--clock auto: the machine was overloaded at the start (load average {load[0]:.1f} on "
                              f"{cores} cores), so CPU times are this process's CPU time with {args.threads} torch "
                              "thread(s); pass --clock wall to time wall-clock instead")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.list:
        return _list(device)
    suites = _split(args.suite)
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        print(f"unknown suite(s) {bad}; choose from {', '.join(SUITES)}", file=sys.stderr)
        return 2
    names = _split(args.backends)
    if names == ["all"] or not names:
        names = list(DEFAULT_BACKENDS)
    try:
        backends = make_backends(names, device)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    size = args.size if args.size != "auto" else ("large" if device.type == "cuda" else "small")
    workload_filter = set(_split(args.workloads)) or None
    if workload_filter is not None:
        from bench.dynamic import DYNAMIC
        from bench.workloads import by_name

        try:
            from bench.hook_overhead import WORKLOADS as HOOK

            for wname in workload_filter - {w.name for w in DYNAMIC} - {w.name for w in HOOK}:
                by_name(wname)
        except KeyError as exc:
            print(f"{exc.args[0]}; see python -m bench --list", file=sys.stderr)
            return 2
    name = args.name or f"{'-'.join(suites)}_{device.type}"
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"{name}.json")
    return _run(args, device, size, suites, backends, workload_filter, name, json_path)


def _run(args: argparse.Namespace, device: Any, size: str, suites: list[str], backends: list[Any],
         workload_filter: set[str] | None, name: str, json_path: str) -> int:
    from bench import env, report
    from bench.measure import TimingPlan, copy_bandwidth
    from bench.schema import validate
    from bench.suites import RUNNERS, Budget, RunContext, planned_units

    started = time.monotonic()
    total = args.time_budget
    if total is None:
        total = QUICK_BUDGET_S if suites == ["quick"] else DEFAULT_BUDGET_S
    budget = Budget(total if total > 0 else None)
    meta: dict[str, Any] = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": ["python", "-m", "bench", *args.argv],
        "suites": suites, "backends_requested": [b.name for b in backends], "size": size,
        "time_budget_s": budget.total_s, "elapsed_s": 0.0, "copy_bandwidth": None, **env.metadata(device),
    }
    doc: dict[str, Any] = {"schema": SCHEMA_VERSION, "metadata": meta, "backends": {b.name: b.info() for b in backends},
                           "results": [], "external": {}, "plots": [], "notes": []}
    if not args.quiet:
        print(f"pyjit bench: suites {','.join(suites)} on {meta['device']['name']} ({device}), size {size}; "
              f"torch {meta['torch']}, triton {meta['triton']}, pyjit {meta['pyjit'].get('version')}", file=sys.stderr)
        for b in backends:
            if not b.available:
                print(f"  backend {b.name}: unavailable ({b.reason})", file=sys.stderr)

    meta["clock"] = "cuda_event" if device.type == "cuda" else args.clock
    load = meta["host"].get("load_avg_start")
    cores = meta["host"].get("cpu_count") or 1
    if args.auto_note:
        doc["notes"].append(args.auto_note)
    elif load and load[0] > cores and device.type == "cpu" and args.clock == "wall":
        doc["notes"].append(f"the machine was busy at the start (load average {load[0]:.1f} on {cores} cores): "
                            "wall-clock CPU numbers are noisy; consider --clock process --threads 1")

    def save() -> None:
        meta["elapsed_s"] = time.monotonic() - started
        meta["host"]["load_avg_end"] = env.load_average()
        report.write_json(report.sanitize(doc), json_path)

    plan = TimingPlan(clock=args.clock) if not args.samples else TimingPlan(samples=args.samples, clock=args.clock)
    quick_plan = dataclasses.replace(TimingPlan.quick(), clock=args.clock)
    if args.samples:
        quick_plan = dataclasses.replace(quick_plan, samples=args.samples)
    if any(s in ("quick", "kernels") for s in suites):
        bw_bytes = (256 << 20) if device.type == "cuda" else (32 << 20)
        meta["copy_bandwidth"] = copy_bandwidth(device, bw_bytes, quick_plan)
    progress = report.Progress(0, enabled=not args.quiet)

    def on_row(row: dict[str, Any]) -> None:
        progress.update(row)
        save()

    ctx = RunContext(device=device, size=size, plan=plan, backends=backends, budget=budget, quick=False, on_row=on_row,
                     workload_filter=workload_filter, run_external=not args.no_external,
                     copy_gbps=(meta["copy_bandwidth"] or {}).get("gbps"), results=doc["results"],
                     external=doc["external"])
    total = 0
    for s in suites:
        ctx.quick = s == "quick"
        total += planned_units(s, ctx)
    progress.total = max(1, total)
    interrupted = False
    try:
        for i, s in enumerate(suites):
            ctx.quick = s == "quick"
            ctx.plan = quick_plan if ctx.quick else plan
            ctx.suite_deadline = budget.suite_deadline(len(suites) - i)
            try:
                RUNNERS[s](ctx)
            except Exception as exc:  # a harness bug: keep what the other suites measure
                import traceback

                doc["notes"].append(f"suite {s} stopped by a harness error: {type(exc).__name__}: {exc}\n"
                                    + traceback.format_exc(limit=6))
    except KeyboardInterrupt:
        interrupted = True
        doc["notes"].append("interrupted by the user: results are partial")
    finally:
        progress.close()
    if not args.no_plots:
        from bench.plots import write_plots

        try:
            written, why = write_plots(doc, args.out, name)
        except Exception as exc:  # a plot is never worth the numbers
            written, why = [], f"plots failed: {type(exc).__name__}: {exc}"
        doc["plots"] = written
        if why:
            doc["notes"].append(why)
    problems = validate(report.sanitize(doc))
    if problems:  # a harness bug: say so loudly but keep the numbers
        doc["notes"].append("schema problems: " + "; ".join(problems[:5]))
    save()
    if args.csv:
        report.write_csv(doc, os.path.join(args.out, f"{name}.csv"))
    print(report.format_results(doc))
    print(f"\nwrote {json_path}" + (f" and {', '.join(doc['plots'])}" if doc["plots"] else "")
          + f" in {meta['elapsed_s']:.0f} s")
    for note in doc["notes"]:
        print(f"note: {note}")
    code = 130 if interrupted else 0
    if args.compare:
        from bench.compare import compare_docs, format_comparison, load

        entries, warnings = compare_docs(load(args.compare), report.sanitize(doc))
        print("\n" + format_comparison(entries, warnings, args.compare))
        if args.fail_on_regression and any(e["regression"] for e in entries):
            code = code or 2
    return code
