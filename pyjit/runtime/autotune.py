"""Autotuning: benchmark candidate implementations of one operation and keep the fastest.

``choose(kind, key_fields, candidates, device)`` times each candidate (a zero-argument callable
that runs it once on dummy inputs) on the device, and returns the fastest one's name. Results
are stored in pyjit's on-disk cache (``runtime/cache.py``: namespace ``autotune``, integrity
and trust checks included) under a key hashing ``key_fields`` (the caller puts in the kernel
source or its generator's hash, shapes, strides, dtypes, the device name and whatever else the
timings depend on), so a new process reuses the choice and never re-benchmarks. A candidate
that fails to build or run is logged on ``compile_times`` and never chosen. Time spent tuning
is reported on the ``compile_times`` channel.

Only CUDA candidates are benchmarked by pyjit's backend (``config.autotune``); CPU callables
are accepted too (timed with ``time.perf_counter``), which tests use to exercise the cache.
``counters`` counts benchmarks run, tunings done and cache hits in this process, and the
milliseconds spent tuning (``tuning_ms``). Tests may set :data:`timer` to replace the
measurement (a fake timer that still runs the candidate, so its results can be checked).

:func:`prefetching` serves the first call's compile time: inside it, ``choose`` benchmarks
nothing, only builds each candidate and collects the Triton compiles it would need, and
answers the stored choice or its first candidate. The backend lowers a graph once that way,
compiles every matmul's candidates in one parallel round, and then lowers it for real, where
each ``choose`` finds its kernels compiled (``compile_fx._prefetch_tuning``).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import threading
import time
from typing import Any, Callable, Iterator, Mapping

import torch

from ..logs import get_logger
from . import cache

time_log = get_logger("compile_times")
# benchmarks: candidate timings run; tunings: choices made by benchmarking; cache_hits: choices
# read from disk; failures: candidates that raised while building or running.
counters: collections.Counter = collections.Counter()
_memo: dict[str, dict] = {}  # key -> stored record (this process)
# Test hook: ``timer(candidate_name, run, device) -> ms`` replaces :func:`benchmark` when set.
# It may raise (the candidate then counts as failed, as a real failure would).
timer: Callable[[str, Callable[[], object], torch.device], float] | None = None
# While :func:`prefetching` (per thread: a backward compiling on autograd's thread is tuned as
# usual): the (kernel, warm) compiles the candidates built so far need.
_state = threading.local()


@contextlib.contextmanager
def prefetching() -> Iterator[list[tuple[Any, Callable[[], object]]]]:
    """Within: :func:`choose` builds candidates without benchmarking them and answers the stored
    choice or the first candidate; yields the list of ``(kernel, warm)`` compiles they need."""
    previous = getattr(_state, "prefetch", None), getattr(_state, "prefetch_keys", None)
    gathered: list[Any] = []
    _state.prefetch = gathered
    # Keys already gathered: the repeats of a layer share one key, and once the first of them
    # is decided the others read its choice, so their candidates are never compiled.
    _state.prefetch_keys = set()
    try:
        yield gathered
    finally:
        _state.prefetch, _state.prefetch_keys = previous

FORMAT = 1


def tuning_key(kind: str, key_fields: Mapping[str, str]) -> str:
    text = json.dumps({"kind": kind, "format": FORMAT, **{k: str(v) for k, v in key_fields.items()}}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def benchmark(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds per call of ``fn`` (median over repetitions)."""
    counters["benchmarks"] += 1
    if device.type == "cuda":
        from triton.testing import do_bench

        from .conv_warmup import timing
        with timing():  # no convolution warm-up starts while this measures
            return float(do_bench(fn, warmup=10, rep=40))
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def lookup(kind: str, key_fields: Mapping[str, str]) -> dict | None:
    """The stored record ``{"choice", "timings"}`` for these fields, or None."""
    key = tuning_key(kind, key_fields)
    if key in _memo:
        return _memo[key]
    data = cache.get_bytes("autotune", key, ".json")
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("choice"), str):
        return None
    _memo[key] = record
    return record


def choose(kind: str, key_fields: Mapping[str, str], candidates: Mapping[str, Callable[[], Callable[[], object]]],
           device: torch.device, label: str = "") -> str:
    """Name of the fastest candidate; ``candidates[name]()`` builds it and returns a runner.

    A stored choice for the same key (this process or an earlier one) is returned without
    benchmarking, as long as it still names a candidate.
    """
    prefetch = getattr(_state, "prefetch", None)
    record = lookup(kind, key_fields)
    if record is not None and record["choice"] in candidates:
        if prefetch is None:
            counters["cache_hits"] += 1
        return record["choice"]
    if prefetch is not None:
        key = tuning_key(kind, key_fields)
        if key in _state.prefetch_keys:
            return next(iter(candidates))
        _state.prefetch_keys.add(key)
        for build in candidates.values():
            try:
                warm = getattr(build(), "warm_launch", None)
            except Exception:  # noqa: BLE001 - it fails again, and is reported, when tuned for real
                continue
            if warm is not None:
                prefetch.append(warm)
        return next(iter(candidates))
    start = time.perf_counter()
    timings: dict[str, float] = {}
    runners: dict[str, Callable[[], object]] = {}
    for name, build in candidates.items():
        try:
            runners[name] = build()
        except Exception as e:  # noqa: BLE001 - a config that does not build is never chosen
            _failed(kind, name, e, timings)
    if device.type == "cuda":
        # Candidates that are Triton kernels expose (kernel, warm): compile them all at once first.
        from .precompile import warm_launches
        warm_launches(getattr(run, "warm_launch", None) for run in runners.values())
    for name, run in runners.items():
        try:
            timings[name] = timer(name, run, device) if timer is not None else benchmark(run, device)
        except Exception as e:  # noqa: BLE001 - a config that does not compile/run is never chosen
            _failed(kind, name, e, timings)
    timings = {name: timings[name] for name in candidates if name in timings}  # candidates' order
    best = min(timings, key=lambda n: timings[n])
    if math.isinf(timings[best]):
        raise RuntimeError(f"autotune {kind}: every candidate failed")
    counters["tunings"] += 1
    elapsed_ms = (time.perf_counter() - start) * 1e3
    counters["tuning_ms"] += elapsed_ms
    record = {"choice": best, "timings": {k: (v if math.isfinite(v) else None) for k, v in timings.items()}}
    key = tuning_key(kind, key_fields)
    _memo[key] = record
    cache.put_bytes("autotune", key, json.dumps(record, sort_keys=True).encode(), ".json", overwrite=True)
    shown = ", ".join(f"{k} {v:.4f} ms" for k, v in sorted(timings.items(), key=lambda kv: kv[1]))
    time_log.info("autotuned %s%s in %.1f ms: chose %s (%s)", kind, f" {label}" if label else "",
                  elapsed_ms, best, shown)
    return best


def _failed(kind: str, name: str, error: Exception, timings: dict[str, float]) -> None:
    counters["failures"] += 1
    time_log.info("autotune %s: candidate %s failed (%s: %s)", kind, name, type(error).__name__, error)
    timings[name] = math.inf


def clear_memo() -> None:
    """Forget this process's in-memory records (tests: force a disk read)."""
    _memo.clear()
