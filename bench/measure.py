"""Timing done right: warm-up excluded, repeated samples, medians with interquartile range.

A *sample* is the mean time of ``calls`` back-to-back calls, each on the next of several
pre-built input sets (rotated so that caches do not hold the inputs of the previous call). On
CPU the clock is ``time.perf_counter``; on CUDA it is a pair of CUDA events around the batch,
so host-side launch work overlaps device work exactly as it does in a real program.
``calls`` is calibrated once after warm-up so that one sample lasts about ``sample_time_s``.
Several variants (backends) of one workload are sampled *interleaved*, round by round, so the
noise of a shared machine hits all of them alike. Every raw sample is kept in the JSON.
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
    timer: str  # "perf_counter", "process_time" or "cuda_event"
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
    # Warm-up: at least this many calls and this long (slow calls: 2 calls or 1 s), never timed.
    warmup_calls: int = 5
    warmup_time_s: float = 0.05
    max_calls_per_sample: int = 100_000
    # Upper bound on the timed part of one case; slow cases take fewer samples (never under 3).
    max_time_s: float = 3.0
    # CPU clock: "wall" (perf_counter) or "process" (CPU time of this process: on a shared machine
    # it leaves out the time other processes held the cores; use with one torch thread).
    clock: str = "wall"

    @staticmethod
    def quick() -> "TimingPlan":
        return TimingPlan(samples=9, sample_time_s=0.01, warmup_calls=4, warmup_time_s=0.02, max_time_s=1.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class BatchTimer:
    """Times ``fn(*inputs)`` over rotated input sets, one sample (batch of calls) at a time.

    :meth:`calibrate` runs the warm-up (never timed) and picks the calls per sample from the
    *fastest* warm-up call, so one call slowed down by another process on a shared machine does
    not shrink the batches. The caller has already called ``fn`` once (the correctness check),
    so compilation is never inside a timed region.
    """

    def __init__(self, fn: Callable[..., Any], input_sets: Sequence[tuple[Any, ...]], device: torch.device,
                 plan: TimingPlan):
        self.fn = fn
        self.input_sets = input_sets
        self.device = device
        self.plan = plan
        self.next_set = 0
        self.calls = 1
        self.warmup_calls = 0
        self.per_call_s = 0.0
        self.samples: list[float] = []

    def _run(self, calls: int) -> None:
        fn, sets, i, n = self.fn, self.input_sets, self.next_set, len(self.input_sets)
        for _ in range(calls):
            fn(*sets[i])
            i += 1
            if i == n:
                i = 0
        self.next_set = i

    def _time(self, calls: int) -> float:
        if self.device.type == "cuda":
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            self._run(calls)
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1e3  # ms -> s
        clock = time.process_time if self.plan.clock == "process" else time.perf_counter
        t0 = clock()
        self._run(calls)
        return clock() - t0

    def calibrate(self) -> None:
        plan = self.plan
        fastest = math.inf
        start = time.perf_counter()
        while True:
            fastest = min(fastest, self._time(1))
            self.warmup_calls += 1
            elapsed = time.perf_counter() - start
            if self.warmup_calls >= plan.warmup_calls and elapsed >= plan.warmup_time_s:
                break
            if (self.warmup_calls >= 2 and elapsed >= 1.0) or self.warmup_calls >= 10_000:
                break  # slow calls: two are enough to warm up and to estimate
        self.per_call_s = max(fastest, 1e-9)
        self.calls = int(min(plan.max_calls_per_sample, max(1, math.ceil(plan.sample_time_s / self.per_call_s))))

    def sample(self) -> float:
        """One sample: mean seconds per call over a batch of ``calls`` calls."""
        t = self._time(self.calls) / self.calls
        self.samples.append(t)
        return t

    def timing(self) -> Timing:
        cpu_timer = "process_time" if self.plan.clock == "process" else "perf_counter"
        return Timing(samples=list(self.samples), calls_per_sample=self.calls, warmup_calls=self.warmup_calls,
                      timer="cuda_event" if self.device.type == "cuda" else cpu_timer,
                      input_sets=len(self.input_sets))


def sample_count(timers: Sequence[BatchTimer], plan: TimingPlan) -> int:
    """Samples per timer so that all of them together take about ``max_time_s`` each (>= 3)."""
    per_round = sum(t.per_call_s * t.calls for t in timers)
    if per_round <= 0:
        return plan.samples
    return max(3, min(plan.samples, int(plan.max_time_s * len(timers) / per_round)))


def time_interleaved(timers: Sequence[BatchTimer], plan: TimingPlan) -> None:
    """Take the samples of several timers round by round, so that noise from other processes hits
    every variant alike; the order within a round rotates so no variant always goes first."""
    n = sample_count(timers, plan)
    for r in range(n):
        for k in range(len(timers)):
            timers[(r + k) % len(timers)].sample()


def time_calls(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple[Any, ...]],
    device: torch.device,
    plan: TimingPlan,
) -> Timing:
    """Time one callable on its own (warm-up excluded)."""
    timer = BatchTimer(fn, input_sets, device, plan)
    timer.calibrate()
    time_interleaved([timer], plan)
    return timer.timing()


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
    # The best sample, not the median: this is the reference of what the memory system can do,
    # and on a shared machine noise only ever makes a copy slower.
    best = min(timing.samples)
    return {"bytes": moved, "gbps": moved / best / 1e9 if best > 0 else math.nan, "statistic": "best sample",
            "timing": timing.summary()}
