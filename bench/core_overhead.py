"""C-core benchmarks (pyjit._C): hook overhead, guard check cost, cache-hit dispatch.

Standalone: ``python -m bench.core_overhead [--quick] [--json PATH]`` prints a table;
``--loop WHAT N`` runs one workload N times for instruction counting under callgrind.
For the bench harness: ``run_bench(quick=, device=, time_budget_s=)`` returns rows
``{name, value, unit, median, q1, q3, samples, note}``; the three ``measure_*`` functions
return plain dicts of numbers. Nothing here is a test: no assertions on speed.

Method: each measurement interleaves its variants sample by sample (so the noise of the
shared machine hits them alike) and reports the median and quartiles over samples; per-call
numbers divide a sample's time by its number of calls. Samples are CPU time of this
process (``time.process_time_ns``), not wall time: on the shared CI machine wall time mostly
measures the other jobs.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any, Callable

from pyjit import _C

# ------------------------------------------------------------------ helpers --------------


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 4:
        m = statistics.median(xs)
        return m, min(xs), max(xs)
    q = statistics.quantiles(xs, n=4)
    return q[1], q[0], q[2]


def _interleave(variants: dict[str, Callable[[], float]], samples: int) -> dict[str, list[float]]:
    """Run each variant once per round, `samples` rounds; each call returns one sample."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(samples):
            for name, fn in variants.items():
                out[name].append(fn())
    finally:
        if gc_was:
            gc.enable()
    return out


def _flat_code(fn: Any) -> Any:
    """The function's own code with its argument slots as plain positionals (a no-op 'compile')."""
    import inspect

    code = fn.__code__
    n = (code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
         + bool(code.co_flags & inspect.CO_VARKEYWORDS))
    return code.replace(co_argcount=n, co_kwonlyargcount=0,
                        co_flags=code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))


# ------------------------------------------------------------------ 1. hook overhead -----


class _Vec:
    __slots__ = ("x", "y")

    def __init__(self, x: int, y: int) -> None:
        self.x = x
        self.y = y

    def add(self, o: "_Vec") -> "_Vec":
        return _Vec(self.x + o.x, self.y + o.y)

    def dot(self, o: "_Vec") -> int:
        return self.x * o.x + self.y * o.y


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def call_heavy_workload(n: int) -> int:
    """Many small Python calls and object creations (the hook sees every one of them)."""
    acc = _Vec(0, 0)
    s = 0
    for i in range(n):
        v = _Vec(i, i + 1)
        acc = acc.add(v)
        s += acc.dot(v) % 7
    return s + _fib(12)


def measure_hook_overhead(quick: bool = False) -> dict[str, Any]:
    """Workload time with the hook off vs on with every frame already marked skip."""
    n = 2000 if quick else 5000
    samples = 15 if quick else 41

    marked: list[Any] = []

    def mark_all_skip(func: Any, args: Any) -> None:
        _C.mark_skip(func.__code__)
        marked.append(func.__code__)
        return None

    def off() -> float:
        t0 = time.process_time_ns()
        call_heavy_workload(n)
        return float(time.process_time_ns() - t0)

    def skip() -> float:
        prev = _C.set_callback(mark_all_skip)
        try:
            t0 = time.process_time_ns()
            call_heavy_workload(n)
            return float(time.process_time_ns() - t0)
        finally:
            _C.set_callback(prev)

    def floor() -> float:
        _C._bench_passthrough(True)
        try:
            t0 = time.process_time_ns()
            call_heavy_workload(n)
            return float(time.process_time_ns() - t0)
        finally:
            _C._bench_passthrough(False)

    skip()  # warm-up: marks every code object of the workload skip
    off()
    raw = _interleave({"off": off, "skip": skip, "floor": floor}, samples)
    ratios = [s / o for s, o in zip(raw["skip"], raw["off"])]
    floor_ratios = [f / o for f, o in zip(raw["floor"], raw["off"])]
    med, q1, q3 = _quartiles(ratios)
    for code in marked:  # targeted clean-up: _C.reset() would drop other layers' entries too
        _C.mark_skip(code, False)
    return {
        "floor_pct": (statistics.median(floor_ratios) - 1) * 100,
        "workload_calls": n * 4 + 465,  # Python frames per sample: 4 per iteration + fib(12)
        "off_ms": statistics.median(raw["off"]) / 1e6,
        "skip_ms": statistics.median(raw["skip"]) / 1e6,
        "overhead_pct": (med - 1) * 100,
        "overhead_pct_q1": (q1 - 1) * 100,
        "overhead_pct_q3": (q3 - 1) * 100,
        "ratios": ratios,
    }


# ------------------------------------------------------------------ 2. guard cost --------

GLOBAL_A = 3
GLOBAL_B = "mode"


def four_tensors(a: Any, b: Any, c: Any, d: Any, n: int, flag: bool, name: str, scale: float, opt: Any) -> Any:
    return a


def _guard_tree(args: tuple, with_tensors: bool = True, with_consts: bool = True) -> Any:
    tree = _C.GuardTree()
    i = 0
    if with_tensors:
        for slot in range(4):
            t = args[slot]
            tree.arg(slot).check_tensor(type(t), t.dtype, t.device, t.requires_grad, tuple(t.shape), t.stride(), i)
            i += 1
    if with_consts:
        # 10 constant / identity guards, as a traced module-level function typically has.
        tree.arg(4).check_eq(args[4], i)
        tree.arg(5).check_eq(args[5], i + 1)
        tree.arg(6).check_eq(args[6], i + 2)
        tree.arg(7).check_eq(args[7], i + 3)
        tree.arg(8).check_id(args[8], i + 4)
        tree.global_("GLOBAL_A").check_eq(GLOBAL_A, i + 5)
        tree.global_("GLOBAL_B").check_eq(GLOBAL_B, i + 6)
        tree.global_("_Vec").check_id(_Vec, i + 7)
        tree.builtin("len").check_id(len, i + 8)
        tree.global_("_C").check_id(_C, i + 9)
    return tree


def _tensor_args() -> tuple | None:
    try:
        import torch
    except ImportError:
        return None
    return (torch.randn(8, 4), torch.randn(16), torch.randn(4, 4).t(), torch.randn(2, 3, 4), 4, True, "x", 0.5, None)


def measure_guard_check(quick: bool = False) -> dict[str, Any]:
    """ns per GuardTree.check for 4 tensors + 10 const/identity guards (Python call included
    and, as `net`, with the cost of calling an empty tree subtracted)."""
    args = _tensor_args()
    if args is None:
        return {"skipped": "torch not installed"}
    full = _guard_tree(args)
    tensors = _guard_tree(args, with_consts=False)
    consts = _guard_tree(args, with_tensors=False)
    empty = _C.GuardTree()
    assert full.check(four_tensors, args) == -1
    calls = 2000 if quick else 5000
    samples = 15 if quick else 41

    def timer(tree: Any) -> Callable[[], float]:
        check = tree.check

        def run() -> float:
            t0 = time.process_time_ns()
            for _ in range(calls):
                check(four_tensors, args)
            return (time.process_time_ns() - t0) / calls

        return run

    raw = _interleave({"full": timer(full), "tensors": timer(tensors), "consts": timer(consts),
                       "empty": timer(empty)}, samples)
    med = {k: statistics.median(v) for k, v in raw.items()}
    net_full = [f - e for f, e in zip(raw["full"], raw["empty"])]
    per_tensor = [(t - e) / 4 for t, e in zip(raw["tensors"], raw["empty"])]
    nf, nf1, nf3 = _quartiles(net_full)
    pt, pt1, pt3 = _quartiles(per_tensor)
    return {
        "check_ns": med["full"],
        "check_net_ns": nf, "check_net_ns_q1": nf1, "check_net_ns_q3": nf3,
        "empty_call_ns": med["empty"],
        "consts_net_ns": med["consts"] - med["empty"],
        "ns_per_tensor": pt, "ns_per_tensor_q1": pt1, "ns_per_tensor_q3": pt3,
        "samples_net_ns": net_full,
    }


# ------------------------------------------------------------------ 3. dispatch ----------


def measure_dispatch(quick: bool = False) -> dict[str, Any]:
    """Per-call time: plain call (hook off) vs cache hit through the hook (guard check +
    function creation + call of the replacement), with no guard and with the 14-guard tree."""
    args = _tensor_args()
    calls = 2000 if quick else 5000
    samples = 15 if quick else 41

    def small(x: Any, y: Any) -> Any:
        return x

    def loop_small() -> float:
        t0 = time.process_time_ns()
        for i in range(calls):
            small(i, None)
        return (time.process_time_ns() - t0) / calls

    variants: dict[str, Callable[[], float]] = {}

    def plain() -> float:
        return loop_small()

    def hit_noguard() -> float:
        prev = _C.set_run_only_mode(True)
        try:
            return loop_small()
        finally:
            _C.set_run_only_mode(prev)

    variants["plain"] = plain
    variants["hit_no_guard"] = hit_noguard
    code_small = _flat_code(small)
    code_big = _flat_code(four_tensors)
    tree = None
    if args is not None:
        tree = _guard_tree(args)

        def loop_big() -> float:
            t0 = time.process_time_ns()
            for _ in range(calls):
                four_tensors(*args)
            return (time.process_time_ns() - t0) / calls

        def plain_big() -> float:
            return loop_big()

        def hit_big() -> float:
            prev = _C.set_run_only_mode(True)
            try:
                return loop_big()
            finally:
                _C.set_run_only_mode(prev)

        variants["plain_4_tensors"] = plain_big
        variants["hit_4_tensors_14_guards"] = hit_big

    def install(func: Any, fargs: Any) -> Any:
        if func is small:
            return (None, code_small)
        if func is four_tensors:
            return (tree, code_big)
        _C.mark_skip(func.__code__)
        return None

    _C.set_callback(install)
    try:
        small(0, None)
        if args is not None:
            four_tensors(*args)
    finally:
        _C.set_callback(None)
    for fn in variants.values():
        fn()
    raw = _interleave(variants, samples)
    med = {k: statistics.median(v) for k, v in raw.items()}
    res: dict[str, Any] = {f"{k}_ns": v for k, v in med.items()}
    res["dispatch_overhead_ns"] = med["hit_no_guard"] - med["plain"]
    if args is not None:
        res["dispatch_overhead_4_tensors_ns"] = med["hit_4_tensors_14_guards"] - med["plain_4_tensors"]
    return res


def measure_dynamo_reference(quick: bool = False) -> dict[str, Any]:
    """Context, not a target: per-call cost of a torch.compile(backend="eager") cache hit of a
    function like `four_tensors` (returning `a + 1`) vs calling it plainly, same process."""
    args = _tensor_args()
    if args is None:
        return {"skipped": "torch not installed"}
    import torch

    def plain_fn(a: Any, b: Any, c: Any, d: Any, n: int, flag: bool, name: str, scale: float, opt: Any) -> Any:
        return a + 1

    def compiled_src(a: Any, b: Any, c: Any, d: Any, n: int, flag: bool, name: str, scale: float, opt: Any) -> Any:
        return a + 1

    compiled = torch.compile(compiled_src, backend="eager", dynamic=False)
    compiled(*args)
    calls = 500 if quick else 2000
    samples = 9 if quick else 21

    def timer(fn: Callable[..., Any]) -> Callable[[], float]:
        def run() -> float:
            t0 = time.process_time_ns()
            for _ in range(calls):
                fn(*args)
            return (time.process_time_ns() - t0) / calls

        return run

    raw = _interleave({"plain": timer(plain_fn), "torch_compile": timer(compiled)}, samples)
    med = {k: statistics.median(v) for k, v in raw.items()}
    return {"plain_ns": med["plain"], "torch_compile_hit_ns": med["torch_compile"],
            "torch_compile_overhead_ns": med["torch_compile"] - med["plain"]}


# ------------------------------------------------------------------ harness glue ---------


def run_bench(*, quick: bool = True, device: str = "cpu", time_budget_s: float | None = None) -> list[dict[str, Any]]:
    """Rows for the bench harness (docs/contracts.md, section bench/)."""
    rows: list[dict[str, Any]] = []
    hook = measure_hook_overhead(quick)
    ratios = hook["ratios"]
    rows.append({"name": "core.hook_overhead_skip_frames", "value": hook["overhead_pct"], "unit": "%",
                 "median": hook["overhead_pct"], "q1": hook["overhead_pct_q1"], "q3": hook["overhead_pct_q3"],
                 "samples": [(r - 1) * 100 for r in ratios],
                 "note": f"call-heavy pure Python, every frame marked skip vs hook off; off={hook['off_ms']:.2f} ms"})
    rows.append({"name": "core.hook_overhead_passthrough_floor", "value": hook["floor_pct"], "unit": "%",
                 "note": "a do-nothing C hook vs hook off: what CPython charges any PEP 523 hook"})
    guard = measure_guard_check(quick)
    if "skipped" not in guard:
        rows.append({"name": "core.guard_check_4_tensors_10_consts", "value": guard["check_net_ns"], "unit": "ns",
                     "median": guard["check_net_ns"], "q1": guard["check_net_ns_q1"], "q3": guard["check_net_ns_q3"],
                     "note": f"net of an empty-tree call ({guard['empty_call_ns']:.0f} ns); target <= 1000 ns"})
        rows.append({"name": "core.ns_per_tensor_check", "value": guard["ns_per_tensor"], "unit": "ns",
                     "median": guard["ns_per_tensor"], "q1": guard["ns_per_tensor_q1"], "q3": guard["ns_per_tensor_q3"]})
    disp = measure_dispatch(quick)
    rows.append({"name": "core.cache_hit_dispatch_overhead", "value": disp["dispatch_overhead_ns"], "unit": "ns",
                 "note": f"hit (no guard) {disp['hit_no_guard_ns']:.0f} ns vs plain call {disp['plain_ns']:.0f} ns"})
    if "dispatch_overhead_4_tensors_ns" in disp:
        rows.append({"name": "core.cache_hit_dispatch_overhead_4_tensors", "value": disp["dispatch_overhead_4_tensors_ns"],
                     "unit": "ns", "note": f"hit with 14 guards {disp['hit_4_tensors_14_guards_ns']:.0f} ns vs plain "
                                           f"{disp['plain_4_tensors_ns']:.0f} ns"})
    if not quick:
        ref = measure_dynamo_reference(quick)
        if "skipped" not in ref:
            rows.append({"name": "core.reference_torch_compile_hit_overhead", "value": ref["torch_compile_overhead_ns"],
                         "unit": "ns", "note": "context only: torch.compile(backend='eager') hit of a 4-tensor "
                                               f"function vs plain ({ref['plain_ns']:.0f} ns)"})
    for r in rows:
        r.setdefault("status", "OK")
    return rows


def run_loop(what: str, n: int) -> None:
    """Run one workload n times and nothing else: for instruction counts, which unlike CPU
    time do not depend on the other jobs of a shared machine. Compare two runs that differ
    only in n, e.g. ``valgrind --tool=callgrind python -m bench.core_overhead --loop
    guard-full 2000`` minus the same with 0 (docs/performance.md, "C core")."""
    if what.startswith("hook-"):
        mode = what[len("hook-"):]
        call_heavy_workload(10)
        if mode == "skip":
            _C.set_callback(lambda func, args: _C.mark_skip(func.__code__))
        elif mode == "floor":
            _C._bench_passthrough(True)
        elif mode != "off":
            raise SystemExit(f"unknown hook mode {mode!r}: off, floor, skip")
        call_heavy_workload(10)  # marks every code object of the workload
        call_heavy_workload(n)
        _C.set_callback(None)
        return
    args = _tensor_args()
    if args is None:
        raise SystemExit("guard loops need torch")
    kinds = {"guard-full": (True, True), "guard-tensors": (True, False), "guard-consts": (False, True),
             "guard-empty": (False, False)}
    if what not in kinds:
        raise SystemExit(f"unknown loop {what!r}: {', '.join(kinds)}, hook-off, hook-floor, hook-skip")
    with_tensors, with_consts = kinds[what]
    tree = _guard_tree(args, with_tensors=with_tensors, with_consts=with_consts)
    check = tree.check
    for _ in range(n):
        check(four_tensors, args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--loop", nargs=2, metavar=("WHAT", "N"),
                   help="only run WHAT (guard-full|guard-tensors|guard-consts|guard-empty|hook-off|"
                        "hook-floor|hook-skip) N times, for instruction counting")
    ns = p.parse_args(argv)
    if ns.loop:
        run_loop(ns.loop[0], int(ns.loop[1]))
        return 0
    rows = run_bench(quick=ns.quick)
    print(f"Python {sys.version.split()[0]}")
    for r in rows:
        extra = f"  [q1 {r['q1']:.1f}, q3 {r['q3']:.1f}]" if "q1" in r else ""
        print(f"{r['name']:45s} {r['value']:10.1f} {r['unit']:3s}{extra}  {r.get('note', '')}")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
