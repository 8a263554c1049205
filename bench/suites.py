"""The suites: ``overhead``, ``compile``, ``artifacts`` (cold compile vs a warm start from a
portable artifact file on a fresh cache), ``kernels``, ``models``, ``dynamic`` (see
:mod:`bench.dynamic`), ``hook`` (see :mod:`bench.hook_overhead`), ``distributed`` (see
:mod:`bench.distributed`) and ``quick`` (the default).

Each suite appends result rows to a :class:`RunContext`. Time is shared out by
:class:`Budget`: a suite gets an equal share of what is left when it starts (so time a suite does
not use flows to the next), a single backend run is stopped when it overruns, and whatever does
not fit is reported as SKIPPED with the reason, never dropped.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import torch

from bench import dynamic, external, hook_overhead, models, probes, workloads
from bench.backends import Backend
from bench.compile_worker import RESULT_TAG
from bench.env import REPO_ROOT
from bench.measure import TimingPlan
from bench.runner import STATUS_ERROR, STATUS_OK, STATUS_SKIPPED, STATUS_UNAVAILABLE, Case
from bench.spec import Workload

from bench import SUITES  # noqa: E402,F401  (re-exported)
# Workloads of the compile suite (full and quick): one pointwise, one reduction, one block.
COMPILE_WORKLOADS = ("pointwise_chain", "softmax", "gpt2_block")
COMPILE_WORKLOADS_QUICK = ("pointwise_chain",)
# The quick suite compiles with pyjit and its peer only: each cold compile is a new process
# (10-40 s for Inductor on 2 cores); the crossings are in the full compile suite.
COMPILE_BACKENDS_QUICK = ("pyjit", "torch.compile")


class Budget:
    """Wall-clock budget of a run (``None`` = unlimited)."""

    def __init__(self, total_s: float | None):
        self.total_s = total_s
        self.start = time.monotonic()

    def remaining(self) -> float | None:
        if self.total_s is None:
            return None
        return self.total_s - (time.monotonic() - self.start)

    def suite_deadline(self, suites_left: int) -> float | None:
        left = self.remaining()
        if left is None:
            return None
        return time.monotonic() + max(0.0, left) / max(1, suites_left)


@dataclasses.dataclass
class RunContext:
    device: torch.device
    size: str  # "small" or "large"
    plan: TimingPlan
    backends: list[Backend]
    budget: Budget
    quick: bool
    on_row: Callable[[dict[str, Any]], None]  # progress bar + incremental JSON
    workload_filter: set[str] | None = None
    run_external: bool = True  # run the layers' plug-in scripts (bench/core_overhead.py ...)
    copy_gbps: float | None = None
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    external: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    suite_deadline: float | None = None

    def add(self, row: dict[str, Any]) -> None:
        self.results.append(row)
        self.on_row(row)

    def time_left(self) -> float | None:
        if self.suite_deadline is None:
            return None
        return self.suite_deadline - time.monotonic()

    def selected(self, items: tuple[Workload, ...]) -> list[Workload]:
        return [w for w in items if self.workload_filter is None or w.name in self.workload_filter]

    @property
    def input_cap_bytes(self) -> int:
        return (4 << 30) if self.device.type == "cuda" else (256 << 20)


def planned_units(suite: str, ctx: RunContext) -> int:
    """How many rows a suite will add (for the progress bar)."""
    n_b = len(ctx.backends)
    if suite == "quick":
        return sum(planned_units(s, ctx) for s in ("overhead", "kernels", "models", "compile"))
    if suite == "overhead":
        return len(_overhead_workloads(ctx)) * n_b + 4
    if suite == "kernels":
        return len(_kernel_workloads(ctx)) * n_b
    if suite == "models":
        return len(_model_workloads(ctx)) * n_b
    if suite == "compile":
        return len(_compile_workloads(ctx)) * len(_compile_backends(ctx))
    if suite == "dynamic":
        return len(dynamic.selected(ctx.quick, ctx.workload_filter)) * len(_dynamic_backends(ctx))
    if suite == "artifacts":
        return len(_compile_workloads(ctx)) * len(_artifact_backends(ctx))
    if suite == "hook":
        return len(hook_overhead.selected(ctx.workload_filter))
    if suite == "distributed":
        from bench import distributed
        return len(distributed.VARIANTS) + len(distributed.EXTRA_VARIANTS)
    return 0


def _overhead_workloads(ctx: RunContext) -> list[Workload]:
    return [w for w in ctx.selected(workloads.OVERHEAD) if w.quick or not ctx.quick]


def _kernel_workloads(ctx: RunContext) -> list[Workload]:
    return [w for w in ctx.selected(workloads.KERNELS) if w.quick or not ctx.quick]


def _model_workloads(ctx: RunContext) -> list[Workload]:
    return [w for w in ctx.selected(models.MODELS) if w.quick or not ctx.quick]


def _compile_workloads(ctx: RunContext) -> list[Workload]:
    names = COMPILE_WORKLOADS_QUICK if ctx.quick else COMPILE_WORKLOADS
    return [w for w in ctx.selected(workloads.KERNELS + models.MODELS) if w.name in names]


def _compile_backends(ctx: RunContext) -> list[Backend]:
    return [b for b in ctx.backends if b.name != "eager" and (not ctx.quick or b.name in COMPILE_BACKENDS_QUICK)]


def _skip_rows(ctx: RunContext, suite: str, w: Workload, reason: str, backends: list[Backend]) -> None:
    for b in backends:
        ctx.add({"suite": suite, "workload": w.name, "backend": b.name, "status": STATUS_SKIPPED, "reason": reason,
                 "params": {"size": ctx.size, "device": str(ctx.device), "description": w.description}})


def _run_time_limit(ctx: RunContext, runs_left: int) -> float | None:
    """Time limit of one backend run: a fair share of the suite's time, at least 20 s."""
    left = ctx.time_left()
    if left is None:
        return None
    return max(min(left, 20.0), min(left, 3 * left / max(1, runs_left)))


def run_workloads(ctx: RunContext, suite: str, items: list[Workload]) -> None:
    """Run workloads on every backend (overhead, kernels and models suites)."""
    runs_left = len(items) * len(ctx.backends)
    for w in items:
        left = ctx.time_left()
        if left is not None and left < 2.0:
            _skip_rows(ctx, suite, w, "time budget exhausted", ctx.backends)
            runs_left -= len(ctx.backends)
            continue
        try:
            case = Case(w, ctx.device, ctx.size, ctx.plan, ctx.copy_gbps, ctx.input_cap_bytes)
        except Exception as exc:
            _skip_rows(ctx, suite, w, f"workload could not be built: {type(exc).__name__}: {exc}"[:300],
                       ctx.backends)
            runs_left -= len(ctx.backends)
            continue

        def limit() -> float | None:
            nonlocal runs_left
            runs_left -= 1
            left = ctx.time_left()
            if left is not None and left < 1.0:
                return 0.0
            return _run_time_limit(ctx, runs_left + 1)

        for row in case.run_all(ctx.backends, limit):
            row["suite"] = suite
            if suite == "overhead" and row.get("status") == STATUS_OK and case.eager_median is not None:
                # Per-call cost over plain eager, the number the overhead suite is about.
                row["overhead_vs_eager_s"] = row["timing"]["median"] - case.eager_median
            ctx.add(row)
        del case


def run_overhead(ctx: RunContext) -> None:
    run_workloads(ctx, "overhead", _overhead_workloads(ctx))
    ctx.add(probes.hook_overhead_row(ctx.plan))
    for n in (1, 4, 16):
        ctx.add(probes.guard_check_row(n, ctx.plan))
    for name in ("core_overhead", "frontend_overhead"):
        _external(ctx, name)


def run_kernels(ctx: RunContext) -> None:
    run_workloads(ctx, "kernels", _kernel_workloads(ctx))
    if not ctx.quick:
        _external(ctx, "backend_kernels")


def _external(ctx: RunContext, name: str) -> None:
    if not ctx.run_external:
        ctx.external[name] = {"description": external.SCRIPTS.get(name, ""), "status": STATUS_SKIPPED,
                              "reason": "--no-external", "rows": [], "output": None}
        return
    left = ctx.time_left()
    if left is not None and left < 5.0:
        ctx.external[name] = {"description": external.SCRIPTS.get(name, ""), "status": STATUS_SKIPPED,
                              "reason": "time budget exhausted", "rows": [], "output": None}
        return
    ctx.external[name] = external.run_script(name, quick=ctx.quick, device=str(ctx.device),
                                             time_budget_s=None if left is None else left / 2)


def run_models(ctx: RunContext) -> None:
    run_workloads(ctx, "models", _model_workloads(ctx))


def run_compile(ctx: RunContext) -> None:
    """Cold and warm compile time per workload and backend, each in a new process."""
    items = _compile_workloads(ctx)
    compilers = _compile_backends(ctx)
    runs_left = len(items) * len(compilers) * 2
    for w in items:
        for b in compilers:
            row: dict[str, Any] = {"suite": "compile", "workload": w.name, "backend": b.name,
                                   "status": STATUS_SKIPPED, "reason": None,
                                   "params": {"size": ctx.size, "device": str(ctx.device),
                                              "description": w.description}}
            if not b.available:
                row.update(status=STATUS_UNAVAILABLE, reason=b.reason)
            else:
                _compile_row(ctx, w, b, row, runs_left)
            runs_left -= 2
            ctx.add(row)


def _compile_row(ctx: RunContext, w: Workload, b: Backend, row: dict[str, Any], runs_left: int) -> None:
    root = tempfile.mkdtemp(prefix="pyjit-bench-compile-")
    env = dict(os.environ)
    env.update(PYJIT_CACHE_DIR=os.path.join(root, "pyjit"), TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               TRITON_CACHE_DIR=os.path.join(root, "triton"))
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    compile_info: dict[str, Any] = {"repeats": 1}
    try:
        for phase in ("cold", "warm"):
            left = ctx.time_left()
            if left is not None and left < 5.0:
                row.update(reason=f"time budget exhausted before the {phase} run")
                break
            limit = _run_time_limit(ctx, runs_left)
            runs_left -= 1
            result = _spawn_worker(w, b, ctx, env, limit)
            compile_info[phase] = result
            if result.get("status") != STATUS_OK:
                row.update(status=result.get("status", STATUS_ERROR), reason=f"{phase}: {result.get('reason')}")
                break
        else:
            row["status"] = STATUS_OK
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for phase in ("cold", "warm"):
        if phase in compile_info and "compile_s" in compile_info[phase]:
            compile_info[f"{phase}_s"] = compile_info[phase]["compile_s"]
            compile_info[f"{phase}_process_s"] = compile_info[phase].get("wall_s")
    if compile_info.get("cold_s") and "warm_s" in compile_info:
        # warm start's figure of merit: the new process's first call with a populated cache
        compile_info["warm_over_cold"] = compile_info["warm_s"] / compile_info["cold_s"]
    row["compile"] = compile_info


def _spawn_worker(w: Workload, b: Backend, ctx: RunContext, env: dict[str, str],
                  limit: float | None, extra: list[str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.compile_worker", "--workload", w.name, "--backend", b.name,
           "--device", str(ctx.device), "--size", ctx.size, *(extra or [])]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=limit if limit is not None else 600)
    except subprocess.TimeoutExpired:
        return {"status": STATUS_ERROR, "reason": f"compile process exceeded {limit:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG):])
            result["wall_s"] = wall
            return result
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    return {"status": STATUS_ERROR, "reason": f"compile process exited {proc.returncode} without a result: "
                                              + " | ".join(tail)[:300], "wall_s": wall}


ARTIFACT_BACKENDS = ("pyjit", "torch.compile")


def _artifact_backends(ctx: RunContext) -> list[Backend]:
    return [b for b in ctx.backends if b.name in ARTIFACT_BACKENDS]


def run_artifacts(ctx: RunContext) -> None:
    """Cold compile vs a new machine's warm start from a portable artifact file, per workload and
    backend: a cold process compiles on an empty cache and saves the file, then a process on
    another empty cache directory installs it and makes the first call (pyjit:
    ``pyjit.cache.save_artifacts``/``load_artifacts``; torch.compile: ``torch.compiler.
    save_cache_artifacts``/``load_cache_artifacts``). ``artifact_over_cold`` is the second
    process's compile time over the cold one's; ``load_s`` is the time the install took."""
    items = _compile_workloads(ctx)
    compilers = _artifact_backends(ctx)
    runs_left = len(items) * len(compilers) * 2
    for w in items:
        for b in compilers:
            row: dict[str, Any] = {"suite": "artifacts", "workload": w.name, "backend": b.name,
                                   "status": STATUS_SKIPPED, "reason": None,
                                   "params": {"size": ctx.size, "device": str(ctx.device),
                                              "description": w.description}}
            if not b.available:
                row.update(status=STATUS_UNAVAILABLE, reason=b.reason)
            else:
                _artifact_row(ctx, w, b, row, runs_left)
            runs_left -= 2
            ctx.add(row)


def _artifact_row(ctx: RunContext, w: Workload, b: Backend, row: dict[str, Any], runs_left: int) -> None:
    root = tempfile.mkdtemp(prefix="pyjit-bench-artifacts-")
    path = os.path.join(root, "state.artifact")
    info: dict[str, Any] = {"repeats": 1}
    try:
        for phase in ("cold", "artifact"):
            left = ctx.time_left()
            if left is not None and left < 5.0:
                row.update(reason=f"time budget exhausted before the {phase} run")
                break
            # each process gets its own empty cache directories: the second one is a new machine
            env = dict(os.environ)
            env.update(PYJIT_CACHE_DIR=os.path.join(root, phase, "pyjit"),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(root, phase, "inductor"),
                       TRITON_CACHE_DIR=os.path.join(root, phase, "triton"))
            env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            extra = ["--save-artifacts", path] if phase == "cold" else ["--load-artifacts", path]
            result = _spawn_worker(w, b, ctx, env, _run_time_limit(ctx, runs_left), extra)
            runs_left -= 1
            info[phase] = result
            if result.get("status") != STATUS_OK:
                row.update(status=result.get("status", STATUS_ERROR), reason=f"{phase}: {result.get('reason')}")
                break
        else:
            row["status"] = STATUS_OK
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for phase in ("cold", "artifact"):
        if phase in info and "compile_s" in info[phase]:
            info[f"{phase}_s"] = info[phase]["compile_s"]
    if "artifact" in info:
        info["load_s"] = info["artifact"].get("artifact_load_s")
        info["file_bytes"] = info.get("cold", {}).get("artifact_bytes")
    if info.get("cold_s") and "artifact_s" in info:
        info["artifact_over_cold"] = info["artifact_s"] / info["cold_s"]
        info["artifact_with_load_over_cold"] = (info["artifact_s"] + (info.get("load_s") or 0.0)) / info["cold_s"]
    row["compile"] = info


def run_quick(ctx: RunContext) -> None:
    """The default: a slice of every suite, small sizes (under two minutes on a 2-core CPU).

    Each part gets an equal share of the quick suite's time left when it starts, so the slow
    compile part (new processes) cannot starve the others, nor they it."""
    end = ctx.suite_deadline
    parts = (run_overhead, run_kernels, run_models, run_compile)
    try:
        for i, fn in enumerate(parts):
            if end is not None:
                now = time.monotonic()
                ctx.suite_deadline = now + max(0.0, end - now) / (len(parts) - i)
            fn(ctx)
    finally:
        ctx.suite_deadline = end


def _dynamic_backends(ctx: RunContext) -> list[Backend]:
    """The compilers with a dynamic=False switch to compare against (the crossings have none)."""
    return [b for b in ctx.backends if b.name in dynamic.COMPILERS]


def run_dynamic(ctx: RunContext) -> None:
    """20 sizes per workload: first-call totals, compile counts, dynamic vs static steady state."""
    for w in dynamic.selected(ctx.quick, ctx.workload_filter):
        for b in _dynamic_backends(ctx):
            left = ctx.time_left()
            if left is not None and left < 5.0:
                _skip_rows(ctx, "dynamic", w, "time budget exhausted", [b])  # type: ignore[arg-type]
                continue
            ctx.add(dynamic.run_one(w, b, ctx.device, ctx.size, ctx.plan))


def run_hook(ctx: RunContext) -> None:
    """Plain-Python (and mixed) workloads natively vs inside ``pyjit.enable()``: one line each."""
    for w in hook_overhead.selected(ctx.workload_filter):
        row = hook_overhead.run_one(w, ctx.size, ctx.plan.samples)
        print(hook_overhead.describe(row), flush=True)
        ctx.add(row)


def run_distributed(ctx: RunContext) -> None:
    """DDP training steps on two ranks the suite launches (GPT on 2 GPUs; a CPU smoke run)."""
    from bench import distributed

    distributed.run(ctx.device, ctx.add)


RUNNERS: dict[str, Callable[[RunContext], None]] = {
    "quick": run_quick,
    "overhead": run_overhead,
    "compile": run_compile,
    "kernels": run_kernels,
    "models": run_models,
    "dynamic": run_dynamic,
    "hook": run_hook,
    "artifacts": run_artifacts,
    "distributed": run_distributed,
}
