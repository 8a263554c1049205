"""Statistics and timers of bench.measure."""
from __future__ import annotations

import random
import statistics

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

from bench.measure import TimingPlan, rotation_count, summarize, time_calls


def test_summarize_matches_statistics_module():
    rng = random.Random(0)
    samples = [rng.uniform(1.0, 2.0) for _ in range(11)]
    s = summarize(samples)
    assert s["median"] == statistics.median(samples)
    assert s["min"] == min(samples)
    assert abs(s["mean"] - statistics.fmean(samples)) < 1e-12
    assert s["q1"] <= s["median"] <= s["q3"]
    assert s["iqr"] == s["q3"] - s["q1"]
    # A quarter of the samples lie at or below q1 (inclusive quantiles).
    assert sum(x <= s["q1"] for x in samples) >= len(samples) // 4


def test_summarize_single_sample_has_zero_spread():
    s = summarize([3.5])
    assert s["median"] == 3.5 and s["iqr"] == 0.0


def test_time_calls_rotates_inputs_and_excludes_warmup():
    seen: list[int] = []

    def fn(tag: int) -> None:
        seen.append(tag)

    sets = [(i,) for i in range(5)]
    plan = TimingPlan(samples=4, sample_time_s=0.001, warmup_calls=3, warmup_time_s=0.0)
    timing = time_calls(fn, sets, torch.device("cpu"), plan)
    assert len(timing.samples) >= 3
    assert timing.warmup_calls >= 3
    assert all(s > 0 for s in timing.samples)
    # consecutive calls use consecutive input sets, wrapping around
    assert all(b == (a + 1) % 5 for a, b in zip(seen, seen[1:]))
    assert set(seen) == set(range(5))
    summary = timing.summary()
    assert summary["samples"] == timing.samples and summary["input_sets"] == 5


def test_rotation_count_bounds():
    cpu = torch.device("cpu")
    assert 2 <= rotation_count(1, cpu, 1 << 30) <= 64
    # sets larger than the cap still rotate between two buffers
    assert rotation_count(1 << 30, cpu, 1 << 20) == 2
    # more sets for smaller inputs
    assert rotation_count(1 << 10, cpu, 1 << 30) >= rotation_count(1 << 24, cpu, 1 << 30)
