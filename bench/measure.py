"""Timing done right: warm-up excluded, repeated samples, medians with interquartile range.

A *sample* is the mean time of ``calls`` back-to-back calls, each on the next of several
pre-built input sets (rotated so that caches do not hold the inputs of the previous call). On
CPU the clock is ``time.perf_counter``; on CUDA it is a pair of CUDA events around the batch,
so host-side launch work overlaps device work exactly as it does in a real program.
``calls`` is calibrated once after warm-up so that one sample lasts about ``sample_time_s``.
Every raw sample is kept: the JSON report stores them all.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Sequence

import torch


@dataclasses.dataclass
class Timing:
    """Raw samples (seconds per call) and how they were taken."""

    samples: list[float]
    calls_per_sample: int
    warmup_calls: int
    timer: str  # "perf_counter" or "cuda_event"
    input_sets: int

    def summary(self) -> dict[str, Any]:
        stats = summarize(self.samples)
        return {
            "unit": "s",
            "timer": self.timer,
            "calls_per_sample": self.calls_per_sample,
            "warmup_calls": self.warmup_calls,
            "input_sets": self.input_sets,
            "samples": list(self.samples),
            **stats,
        }

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, quartiles (inclusive method, so 2+ samples work), IQR, min and mean."""
    if not samples:
        return {"median": math.nan, "q1": math.nan, "q3": math.nan, "iqr": math.nan, "min": math.nan, "mean": math.nan}
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, med, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = med = q3 = ordered[0]
    return {
        "median": med,
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "min": ordered[0],
        "mean": statistics.fmean(ordered),
    }


@dataclasses.dataclass(frozen=True)
class TimingPlan:
    """How long to measure: ``quick`` runs use fewer, shorter samples."""

    samples: int = 15
    sample_time_s: float = 0.02
    warmup_calls: int = 3
    warmup_time_s: float = 0.05
    max_calls_per_sample: int = 100_000
    # Upper bound on the timed part of one case; slow cases take fewer samples (never under 3).
    max_time_s: float = 3.0

    @staticmethod
    def quick() -> "TimingPlan":
        return TimingPlan(samples=9, sample_time_s=0.01, warmup_calls=2, warmup_time_s=0.02, max_time_s=1.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple[Any, ...]],
    device: torch.device,
    plan: TimingPlan,
) -> Timing:
    """Time ``fn(*inputs)`` rotating over ``input_sets``; the first calls (warm-up) are not timed.

    The caller has already called ``fn`` at least once (the correctness check), so compilation
    is never inside the timed region.
    """
    n_sets = len(input_sets)
    state = {"i": 0}

    def run_batch(calls: int) -> None:
        i = state["i"]
        for _ in range(calls):
            fn(*input_sets[i])
            i += 1
            if i == n_sets:
                i = 0
        state["i"] = i

    # Warm-up: at least warmup_calls calls and warmup_time_s seconds (allocator, caches, JIT state).
    warm = 0
    start = time.perf_counter()
    while warm < plan.warmup_calls or (time.perf_counter() - start) < plan.warmup_time_s:
        run_batch(1)
        warm += 1
        if warm >= 10_000:
            break
    _sync(device)
    # Calibrate calls per sample from one timed call batch that is not kept.
    calls = 1
    while True:
        t = _time_batch(run_batch, calls, device)
        if t >= plan.sample_time_s / 4 or calls >= plan.max_calls_per_sample:
            break
        calls = min(plan.max_calls_per_sample, calls * 4)
    per_call = max(t / calls, 1e-9)
    calls = int(min(plan.max_calls_per_sample, max(1, math.ceil(plan.sample_time_s / per_call))))
    n_samples = max(3, min(plan.samples, int(plan.max_time_s / (per_call * calls))))
    samples = [_time_batch(run_batch, calls, device) / calls for _ in range(n_samples)]
    return Timing(
        samples=samples,
        calls_per_sample=calls,
        warmup_calls=warm,
        timer="cuda_event" if device.type == "cuda" else "perf_counter",
        input_sets=n_sets,
    )


def _time_batch(run_batch: Callable[[int], None], calls: int, device: torch.device) -> float:
    if device.type == "cuda":
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        run_batch(calls)
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3  # ms -> s
    t0 = time.perf_counter()
    run_batch(calls)
    return time.perf_counter() - t0


def rotation_count(bytes_per_set: int, device: torch.device, cap_bytes: int) -> int:
    """How many distinct input sets to rotate so their total exceeds the last-level cache.

    Twice the cache size is enough for the previous call's inputs to be evicted; at most 64 sets
    and ``cap_bytes`` in total so small machines do not run out of memory.
    """
    cache = _last_level_cache_bytes(device)
    if bytes_per_set <= 0:
        return 2
    wanted = math.ceil(2 * cache / bytes_per_set) + 1
    by_cap = max(2, cap_bytes // max(1, bytes_per_set))
    return int(max(2, min(64, wanted, by_cap)))


def _last_level_cache_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        try:
            props = torch.cuda.get_device_properties(device)
            return int(getattr(props, "L2_cache_size", 50 * 2**20)) or 50 * 2**20
        except Exception:  # an exotic build without the property: assume an H100-class L2
            return 50 * 2**20
    for path in ("/sys/devices/system/cpu/cpu0/cache/index3/size", "/sys/devices/system/cpu/cpu0/cache/index2/size"):
        try:
            text = open(path).read().strip().upper()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        try:
            return int(digits) * mult
        except ValueError:
            continue
    return 32 * 2**20


def copy_bandwidth(device: torch.device, nbytes: int, plan: TimingPlan) -> dict[str, Any]:
    """Measured device copy bandwidth (read + write bytes per second) for ``dst.copy_(src)``.

    Memory-bound workloads report their achieved bandwidth as a fraction of this number.
    """
    n = max(1, nbytes // 4)
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    timing = time_calls(lambda s, d: d.copy_(s), [(src, dst)], device, plan)
    moved = 2 * n * 4
    med = timing.median
    return {"bytes": moved, "gbps": moved / med / 1e9 if med > 0 else math.nan, "timing": timing.summary()}
