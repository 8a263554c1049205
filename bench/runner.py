"""Runs one workload on every selected backend and returns one result row per backend.

Order inside a case, which is what makes the numbers trustworthy:
1. eager reference outputs on two different input sets;
2. per backend: compile + first call (timed once, as ``first_call_s``), correctness against
   eager on both input sets (a mismatch is ``FAIL`` and is never timed, an exception ``ERROR``),
   warm-up and calibration;
3. the samples of all backends that passed, interleaved round by round over rotated input sets
   (:mod:`bench.measure`);
4. speed-up against eager, achieved bandwidth for memory-bound workloads.
While a pyjit backend runs, pyjit's ``fallbacks``/``graph_breaks``/``recompiles``/``compile_times``
log channels are captured into the row, so a "pyjit" number that really ran eagerly is visible.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import signal
import threading
import time
import traceback
from typing import Any, Callable, Iterator

import torch

from bench.backends import Backend
from bench.correctness import compare
from bench.measure import BatchTimer, TimingPlan, rotation_count, time_interleaved
from bench.spec import Built, Workload

STATUS_OK, STATUS_FAIL, STATUS_ERROR = "OK", "FAIL", "ERROR"
STATUS_UNAVAILABLE, STATUS_SKIPPED = "UNAVAILABLE", "SKIPPED"
STATUSES = (STATUS_OK, STATUS_FAIL, STATUS_ERROR, STATUS_UNAVAILABLE, STATUS_SKIPPED)

CAPTURED_CHANNELS = ("fallbacks", "graph_breaks", "recompiles", "compile_times")


class CaseTimeout(BaseException):
    """The case ran past its share of the time budget.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that a compiler's own ``except Exception``
    fallback cannot swallow it and carry on past the budget."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in this thread after ``seconds`` (main thread on Unix only)."""
    usable = seconds is not None and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"case exceeded its time share of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.5, float(seconds)))  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "pyjit_kind", None) == "choice":
            return  # a statement of which code generator was chosen, not a fallback (no star)
        self.records.append(record)


@contextlib.contextmanager
def capture_pyjit_logs(enabled: bool) -> Iterator[_Capture]:
    """Collect records of pyjit's diagnostic channels without printing them."""
    handler = _Capture()
    if not enabled:
        yield handler
        return
    loggers = [logging.getLogger(f"pyjit.{ch}") for ch in CAPTURED_CHANNELS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if lg.level == logging.NOTSET or lg.level > logging.INFO:
            lg.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(handler)
            lg.setLevel(level)


_PHASE_RE = re.compile(r"([A-Za-z_][\w.+\-]*)\s*[=:]?\s*([0-9]*\.?[0-9]+(?:e-?\d+)?)\s*(ms|us|µs|ns|s)\b")
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_phases(records: list[logging.LogRecord]) -> dict[str, float]:
    """Compile-phase seconds from ``compile_times`` records, summed over the records.

    A record attribute ``phases: dict[str, float]`` is taken as is; otherwise ``name=1.2ms``,
    ``name: 0.5s`` or ``name 3.1 ms`` pairs are read from the message and keyed
    ``<logging module>.<name>`` (``convert.trace``, ``compile_fx.trace``), because the frontend
    and the backend each log their own phases and the same word means different work."""
    phases: dict[str, float] = {}
    for rec in records:
        if not rec.name.endswith("compile_times"):
            continue
        structured = getattr(rec, "phases", None)
        if isinstance(structured, dict):
            for k, v in structured.items():
                if isinstance(v, (int, float)):
                    phases[str(k)] = phases.get(str(k), 0.0) + float(v)
            continue
        for name, value, unit in _PHASE_RE.findall(rec.getMessage()):
            key = f"{rec.module}.{name}"
            phases[key] = phases.get(key, 0.0) + float(value) * _UNIT[unit]
    return phases


def summarize_logs(records: list[logging.LogRecord]) -> dict[str, Any]:
    counts = {ch: 0 for ch in CAPTURED_CHANNELS}
    messages: dict[str, list[str]] = {}
    for rec in records:
        ch = rec.name.rsplit(".", 1)[-1]
        if ch in counts:
            counts[ch] += 1
            bucket = messages.setdefault(ch, [])
            if len(bucket) < 3:
                bucket.append(rec.getMessage()[:300])
    return {"counts": counts, "messages": messages, "compile_phases_s": parse_phases(records)}


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def tensor_bytes(value: Any) -> int:
    from torch.utils import _pytree as pytree

    return sum(t.numel() * t.element_size() for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor))


def _clone(value: Any) -> Any:
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, value)


@dataclasses.dataclass
class _Prepared:
    """A backend that compiled and passed the correctness check, ready for timing."""

    backend: Backend
    row: dict[str, Any]
    timer: BatchTimer
    records: list[logging.LogRecord]


class Case:
    """One workload built once, with its inputs and eager references, run on several backends.

    :meth:`run_all` compiles and checks every backend first, then samples all the ones that passed
    interleaved (see :func:`bench.measure.time_interleaved`), eager included, so speed-ups compare
    numbers taken under the same machine noise.
    """

    def __init__(self, workload: Workload, device: torch.device, size: str, plan: TimingPlan,
                 copy_gbps: float | None, input_cap_bytes: int):
        self.workload = workload
        self.device = device
        self.size = size
        self.plan = plan
        self.copy_gbps = copy_gbps
        self.built: Built = workload.build(device, size)
        gen = torch.Generator().manual_seed(1234)
        first = self.built.make_inputs(gen)
        n_sets = rotation_count(tensor_bytes(first), device, input_cap_bytes)
        self.input_sets = [first] + [self.built.make_inputs(gen) for _ in range(n_sets - 1)]
        with self._grad_mode():
            eager_call = self.built.callable_for(self.built.fn)
            self.refs = [_clone(eager_call(*self.input_sets[i])) for i in (0, 1)]
        self.bytes_moved = tensor_bytes(first) + tensor_bytes(self.refs[0]) if workload.memory_bound else None
        self.eager_median: float | None = None

    def _grad_mode(self) -> contextlib.AbstractContextManager[Any]:
        return torch.no_grad() if self.workload.inference else contextlib.nullcontext()

    def base_row(self, backend: str) -> dict[str, Any]:
        w = self.workload
        return {
            "suite": w.suite,
            "workload": w.name,
            "backend": backend,
            "status": STATUS_SKIPPED,
            "reason": None,
            "params": {"shape": self.built.shape, "size": self.size, "device": str(self.device),
                       "description": w.description},
        }

    def run(self, backend: Backend, time_limit_s: float | None) -> dict[str, Any]:
        """One backend on its own (eager must have run first for a speed-up)."""
        return self.run_all([backend], lambda: time_limit_s)[0]

    def run_all(self, backends: list[Backend], time_limit: Callable[[], float | None]) -> list[dict[str, Any]]:
        """Rows for ``backends`` in order; ``time_limit()`` gives each backend's compile-phase limit
        (None = unlimited; <= 0 = no time left: the row is SKIPPED)."""
        rows: list[dict[str, Any]] = []
        ready: list[_Prepared] = []
        for b in backends:
            row = self.base_row(b.name)
            rows.append(row)
            limit = time_limit()
            if not b.available:
                row.update(status=STATUS_UNAVAILABLE, reason=b.reason)
            elif limit is not None and limit <= 0:
                row["reason"] = "time budget exhausted"
            else:
                prepared = self._prepare(b, row, limit)
                if prepared is not None:
                    ready.append(prepared)
        if ready:
            self._time(ready)
        for p in ready:
            if p.backend.uses_pyjit:
                p.row["pyjit_logs"] = summarize_logs(p.records)
            try:
                p.backend.reset()
            except Exception:
                pass
        return rows

    def _prepare(self, backend: Backend, row: dict[str, Any], limit: float | None) -> _Prepared | None:
        """Compile, first call, correctness on two input sets, warm-up: everything but the samples."""
        w = self.workload
        prepared: _Prepared | None = None
        with capture_pyjit_logs(backend.uses_pyjit) as logs:
            try:
                with deadline(limit), self._grad_mode():
                    t0 = time.perf_counter()
                    compiled = self.built.callable_for(backend.compile(self.built.fn))
                    out0 = compiled(*self.input_sets[0])
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    row["first_call_s"] = time.perf_counter() - t0
                    verdict = compare(self.refs[0], out0, w.atol, w.rtol)
                    if verdict.ok:
                        # A second, different input set catches results baked in at compile time.
                        verdict = compare(self.refs[1], compiled(*self.input_sets[1]), w.atol, w.rtol)
                    row["correctness"] = verdict.as_dict(w.atol, w.rtol)
                    if not verdict.ok:
                        row.update(status=STATUS_FAIL, reason=verdict.reason)
                    else:
                        timer = BatchTimer(compiled, self.input_sets, self.device, self.plan)
                        timer.calibrate()
                        prepared = _Prepared(backend, row, timer, logs.records)
            except CaseTimeout as exc:
                row.update(status=STATUS_ERROR, reason=str(exc))
            except Exception as exc:  # any backend failure is a result, not a harness crash
                row.update(status=STATUS_ERROR, reason=_short_error(exc),
                           traceback=traceback.format_exc(limit=8)[-2000:])
        row.setdefault("correctness", None)
        if prepared is None and backend.uses_pyjit:
            row["pyjit_logs"] = summarize_logs(logs.records)
        if prepared is None:
            try:
                backend.reset()
            except Exception:
                pass
        return prepared

    def _time(self, ready: list[_Prepared]) -> None:
        # Each timer's samples are taken with its own pyjit log capture attached (recompiles
        # during timing would mean the guards reject rotated inputs: worth seeing).
        for p in ready:
            p.timer.sample = _capturing(p.timer.sample, p)  # type: ignore[method-assign]
        with self._grad_mode():
            time_interleaved([p.timer for p in ready], self.plan)
        eager = next((p for p in ready if p.backend.name == "eager"), None)
        if eager is not None:
            self.eager_median = eager.timer.timing().median
        for p in ready:
            timing = p.timer.timing()
            row = p.row
            row["timing"] = timing.summary()
            row["status"] = STATUS_OK
            med = timing.median
            if self.eager_median is not None and med > 0:
                row["speedup_vs_eager"] = self.eager_median / med
            if self.bytes_moved is not None and med > 0:
                gbps = self.bytes_moved / med / 1e9
                row["bandwidth"] = {"bytes": self.bytes_moved, "gbps": gbps,
                                    "fraction_of_copy": (gbps / self.copy_gbps) if self.copy_gbps else None}
            if self.built.flops:
                row["tflops"] = self.built.flops / med / 1e12


def _capturing(sample: Callable[[], float], p: _Prepared) -> Callable[[], float]:
    def sample_with_logs() -> float:
        with capture_pyjit_logs(p.backend.uses_pyjit) as logs:
            t = sample()
        p.records.extend(logs.records)
        return t

    return sample_with_logs
