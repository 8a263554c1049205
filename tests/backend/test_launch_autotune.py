"""Launch autotuning of generated Triton kernels (backend/codegen/launch_autotune.py).

Run on CPU through Triton's interpreter with ``config.autotune_launch="force"`` (the CPU is
never tuned by default) and a fake timer (``runtime.autotune.timer``) that runs each candidate
on its scratch buffers and returns a time the test chooses, so the choice is known. Checked:
the candidates (heuristic first, both forms near the persistent/looped boundary), that the
choice is baked into the generated module, that every candidate computes what eager does, that
a new process reuses the stored choice without benchmarking (and the graph cache skips tuning
altogether), that a failing candidate is never chosen, that benchmarking never touches the
user's tensors, and what is not tuned (CPU by default, small kernels, symbolic sizes).
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.codegen import launch_autotune
from pyjit.backend.codegen.reduction_heuristics import looped_meta, persistent_meta
from pyjit.backend.metrics import metrics
from pyjit.runtime import autotune

from .conftest import compile_graph
from .test_dynamic_backend import symbolic_graph


class FakeTimer:
    """Runs each candidate once (so a broken one raises) and returns ``times[name]`` (default 1 ms,
    plus a little per call so the first of equal candidates, the heuristic's, keeps winning)."""

    def __init__(self, times: dict[str, float] | None = None, run: bool = True):
        self.times = times or {}
        self.run = run
        self.seen: list[str] = []

    def __call__(self, name: str, fn: Callable[[], object], device: torch.device) -> float:
        self.seen.append(name)
        if self.run:
            fn()
        return self.times.get(name, 1.0 + 0.001 * len(self.seen))


@pytest.fixture
def tuned(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTimer]:
    """Interpreter, tuning forced for every kernel size, a fresh cache, the fake timer installed."""
    timer = FakeTimer()
    monkeypatch.setattr(autotune, "timer", timer)
    autotune.clear_memo()
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(tmp_path / "cache"),
                   autotune_launch="force", autotune_launch_min_bytes=0):
        metrics.reset()
        yield timer
    autotune.clear_memo()


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _cross_entropy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, t)


def _column_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


def _pointwise(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + 1


WORKLOADS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    # Rows of 4096: persistent by the heuristics, the looped form is a candidate too.
    "softmax_8x4096": (_softmax, lambda: [torch.randn(8, 4096)]),
    "layer_norm_32x512": (_layer_norm, lambda: [torch.randn(32, 512), torch.randn(512), torch.randn(512)]),
    # Rows of 10000: looped by the heuristics (one online pass), the persistent form is a candidate.
    "cross_entropy_4x10000": (_cross_entropy, lambda: [torch.randn(4, 10000), torch.randint(0, 10000, (4,))]),
    "column_sum_256x64": (_column_sum, lambda: [torch.randn(256, 64)]),
    "pointwise_64x64": (_pointwise, lambda: [torch.randn(64, 64)]),
}


def _compile_and_check(name: str) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    fn, make = WORKLOADS[name]
    torch.manual_seed(0)
    inputs = make()
    compiled = compile_graph(fn, inputs)
    out = compiled(*inputs)
    actual = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(actual, fn(*inputs), atol=1e-4, rtol=1e-4)
    return compiled, inputs


def _launches(source: str) -> list[str]:
    return re.findall(r"pyjit_fused_\w+\[\(.*\)\]\(.*\)", source)


# ----------------------------------------------------------------------------- candidates
def test_candidates_start_with_the_heuristic_and_try_both_forms(tuned: FakeTimer) -> None:
    _compile_and_check("softmax_8x4096")
    base = persistent_meta(8, 4096)
    assert tuned.seen[0] == f"persistent_X{base['XBLOCK']}_R4096_w{base['num_warps']}"
    looped = looped_meta(8, 4096)
    assert f"looped_X1_R{looped['RBLOCK']}_w{looped['num_warps']}" in tuned.seen
    assert len(tuned.seen) == len(set(tuned.seen)) <= launch_autotune.MAX_REDUCTION_CANDIDATES
    assert autotune.counters["tunings"] >= 1


def test_looped_kernel_tries_the_persistent_form(tuned: FakeTimer) -> None:
    _compile_and_check("cross_entropy_4x10000")
    assert tuned.seen[0].startswith("looped_X1_R2048_")
    assert any(n.startswith("persistent_X1_R16384_") for n in tuned.seen)
    assert any("_R4096_" in n and n.startswith("looped") for n in tuned.seen)


def test_column_reduction_keeps_its_form(tuned: FakeTimer) -> None:
    _compile_and_check("column_sum_256x64")
    forms = {n.split("_")[0] for n in tuned.seen}
    assert len(forms) == 1 and len(tuned.seen) >= 3


def test_pointwise_candidates(tuned: FakeTimer) -> None:
    _compile_and_check("pointwise_64x64")
    assert tuned.seen[0] == "pointwise_X1024_w8"  # min(1024, elements), 8 warps
    assert {"pointwise_X2048_w8", "pointwise_X512_w8", "pointwise_X1024_w4"} <= set(tuned.seen)
    assert len(tuned.seen) <= launch_autotune.MAX_POINTWISE_CANDIDATES


# ----------------------------------------------------------------------------- the choice
def test_choice_is_baked_into_the_module(tuned: FakeTimer) -> None:
    tuned.times = {"looped_X1_R2048_w16": 0.1}
    compiled, _ = _compile_and_check("softmax_8x4096")
    assert "looped_X1_R2048_w16" in tuned.seen
    source = compiled.pyjit_source
    assert "for roffset in range(0, 4096, RBLOCK):" in source  # the looped form's source
    (launch,) = _launches(source)
    assert "XBLOCK=1, RBLOCK=2048, num_warps=16" in launch and "[(8,)]" in launch


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_candidate_matches_eager(tuned: FakeTimer, workload: str, tmp_path: Any) -> None:
    tuned.run = False
    _compile_and_check(workload)
    names = list(tuned.seen)
    assert len(names) >= 3
    for i, name in enumerate(names):
        # A fresh cache each time: the stored choice of the previous round must not answer.
        autotune.clear_memo()
        with cfg.patch(cache_dir=str(tmp_path / f"c{i}")):
            tuned.times, tuned.seen = {name: 0.01}, []
            _compile_and_check(workload)
        assert tuned.seen == names
        assert any(r["choice"] == name for r in autotune._memo.values())


# ----------------------------------------------------------------------------- caching
def test_new_process_reuses_the_choice(tuned: FakeTimer) -> None:
    tuned.times = {"looped_X1_R2048_w16": 0.1}
    first, _ = _compile_and_check("softmax_8x4096")
    assert tuned.seen  # tuned once
    # A "new process": nothing in memory. Another graph with the same kernel (other FX code,
    # so no graph cache entry): the module is generated again, and the stored choice answers
    # without a benchmark.
    autotune.clear_memo()
    tuned.seen, tuned.times = [], {}
    hits = autotune.counters["cache_hits"]
    x = torch.randn(8, 4096)
    again = compile_graph(lambda t: t.softmax(dim=-1), [x])
    torch.testing.assert_close(again(x), torch.softmax(x, -1))
    assert tuned.seen == []
    assert autotune.counters["cache_hits"] == hits + 1
    assert _launches(again.pyjit_source) == _launches(first.pyjit_source)
    # With the graph cache the module itself is reused: no tuning code runs at all.
    autotune.clear_memo()
    graph_hits, hits = metrics.graph_cache_hits, autotune.counters["cache_hits"]
    warm, _ = _compile_and_check("softmax_8x4096")
    assert metrics.graph_cache_hits == graph_hits + 1
    assert tuned.seen == [] and autotune.counters["cache_hits"] == hits
    assert "RBLOCK=2048, num_warps=16" in _launches(warm.pyjit_source)[0]


def test_other_settings_do_not_share_graph_cache_entries(tuned: FakeTimer) -> None:
    tuned.times = {"looped_X1_R2048_w16": 0.1}
    _compile_and_check("softmax_8x4096")
    with cfg.patch(autotune_launch="off"):
        plain, _ = _compile_and_check("softmax_8x4096")
    base = persistent_meta(8, 4096)
    assert f"RBLOCK=4096, num_warps={base['num_warps']}" in _launches(plain.pyjit_source)[0]


# ----------------------------------------------------------------------------- failures
def test_failing_candidate_is_never_chosen(tuned: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    original = launch_autotune.reduction_candidates

    def with_a_broken_one(ks: Any, variant: Any, limit: int) -> list[launch_autotune.Candidate]:
        out = original(ks, variant, limit)
        broken = {**ks.meta, "XBLOCK": 3}  # tl.arange needs a power of 2: fails to build
        out.append(launch_autotune.Candidate("broken", launch_autotune.with_meta(ks, broken)))
        return out

    monkeypatch.setattr(launch_autotune, "reduction_candidates", with_a_broken_one)
    tuned.times = {"broken": 0.0001}
    failures = autotune.counters["failures"]
    compiled, _ = _compile_and_check("layer_norm_32x512")
    assert "broken" in tuned.seen
    assert autotune.counters["failures"] == failures + 1
    assert all(r["choice"] != "broken" for r in autotune._memo.values())
    assert "XBLOCK=3" not in compiled.pyjit_source


def test_all_candidates_failing_keeps_the_heuristic(tuned: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(name: str, fn: Callable[[], object], device: torch.device) -> float:
        raise RuntimeError("out of resources")

    monkeypatch.setattr(autotune, "timer", failing)
    compiled, _ = _compile_and_check("layer_norm_32x512")
    base = persistent_meta(32, 512)
    assert f"XBLOCK={base['XBLOCK']}, RBLOCK=512, num_warps={base['num_warps']}" in compiled.pyjit_source


def test_benchmarking_never_touches_the_users_tensors(tuned: FakeTimer) -> None:
    def fn(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        acc.add_(x.sum(-1))  # an input mutated in place, from a tuned reduction
        x.mul_(2)
        return torch.softmax(x, -1)

    x, acc = torch.randn(8, 4096), torch.randn(8)
    x0, acc0 = x.clone(), acc.clone()
    compiled = compile_graph(fn, [x, acc])
    assert len(tuned.seen) >= 3  # candidates ran, on scratch buffers
    torch.testing.assert_close(x, x0, rtol=0, atol=0)  # compiling changed nothing
    torch.testing.assert_close(acc, acc0, rtol=0, atol=0)
    out = compiled(x, acc)
    ex, eacc = x0.clone(), acc0.clone()
    expected = fn(ex, eacc)
    torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, expected)
    torch.testing.assert_close(x, ex)  # mutated exactly once
    torch.testing.assert_close(acc, eacc)


def test_graph_budget_keeps_stored_choices(tuned: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    tuned.times = {"looped_X1_R2048_w16": 0.1}
    _compile_and_check("softmax_8x4096")  # tuned and stored
    monkeypatch.setattr(launch_autotune, "GRAPH_BUDGET_S", -1.0)  # every graph is over budget
    tuned.seen = []

    def two_kernels(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.softmax(x, -1), F.layer_norm(y, (512,))

    x, y = torch.randn(8, 4096), torch.randn(32, 512)
    compiled = compile_graph(two_kernels, [x, y])
    sm, ln = compiled(x, y)
    torch.testing.assert_close(sm, torch.softmax(x, -1))
    torch.testing.assert_close(ln, F.layer_norm(y, (512,)), atol=1e-5, rtol=1e-5)
    assert tuned.seen == []  # nothing new timed
    launches = _launches(compiled.pyjit_source)
    assert any("RBLOCK=2048, num_warps=16" in launch for launch in launches)  # the stored choice
    base = persistent_meta(32, 512)
    assert any(f"RBLOCK=512, num_warps={base['num_warps']}" in launch for launch in launches)  # heuristic


# ----------------------------------------------------------------------------- what is not tuned
def test_cpu_is_not_tuned_by_default(tuned: FakeTimer) -> None:
    with cfg.patch(autotune_launch="auto"):
        _compile_and_check("softmax_8x4096")
    assert tuned.seen == []


def test_small_kernels_are_not_tuned(tuned: FakeTimer) -> None:
    with cfg.patch(autotune_launch_min_bytes=1 << 20):
        _compile_and_check("softmax_8x4096")  # 256 KB moved
        _compile_and_check("pointwise_64x64")
    assert tuned.seen == []
    # A pointwise kernel needs 16x the bytes of a reduction.
    with cfg.patch(autotune_launch_min_bytes=8 * 4096 * 4 * 2):
        _compile_and_check("softmax_8x4096")
        assert tuned.seen
        tuned.seen = []
        _compile_and_check("pointwise_64x64")
    assert tuned.seen == []


def test_symbolic_sizes_keep_the_heuristics(tuned: FakeTimer) -> None:
    x = torch.randn(8, 4096)
    gm = symbolic_graph(_softmax, [x], [[True, False]])
    compiled = backend.compile_fx(gm, [x])
    torch.testing.assert_close(compiled(x), _softmax(x))
    assert metrics.dynamic_graphs == 1
    assert tuned.seen == []


def test_tuning_time_is_reported(tuned: FakeTimer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyjit.compile_times")
    before = autotune.counters["tuning_ms"]
    _compile_and_check("layer_norm_32x512")
    assert autotune.counters["tuning_ms"] > before
    text = caplog.text
    assert "autotuned launch pyjit_fused_" in text and "chose persistent_" in text
    assert re.search(r"launch autotuning: 1 kernel\(s\), [\d.]+ ms", text)
