"""Epilogue tuning (codegen/epilogue_tuning.py): a matmul template keeps its fused epilogue only
when the fused kernel is the fastest of fused / template then epilogue kernel / cuBLAS then
epilogue kernel.

Run on CPU through Triton's interpreter (``autotune_launch="force"`` enables the pass there)
with a fake timer that runs every candidate (so a broken one raises) and returns times the test
chooses: each winner is checked against eager and on the graph's kernel and extern counts.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
import torch.nn.functional as F

from pyjit import config as cfg
from pyjit.backend.metrics import metrics
from pyjit.runtime import autotune

from .conftest import check, make
from .test_launch_autotune import FakeTimer


@pytest.fixture
def timer(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTimer]:
    t = FakeTimer()
    monkeypatch.setattr(autotune, "timer", t)
    autotune.clear_memo()
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(tmp_path / "cache"),
                   autotune_launch="force", autotune_launch_min_bytes=1 << 40, matmul_template="auto"):
        metrics.reset()
        yield t
    autotune.clear_memo()


def _linear_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x + F.gelu(F.linear(x, w, b))


def _inputs() -> tuple[torch.Tensor, ...]:
    return (make((40, 32), "cpu", low=-1, high=1), make((32, 32), "cpu", low=-1, high=1), make((32,), "cpu"))


def _force_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lowering takes the template (the CPU never times it) while the extern stays allowed."""
    from pyjit.backend.lowering import matmul as mmod
    monkeypatch.setattr(mmod, "_template_mode", lambda ctx, a, b: "force")


@pytest.mark.parametrize("winner,expected", [
    ("fused", (1, 0)),            # one kernel: product and epilogue
    ("split_template", (2, 0)),   # the template, then the epilogue kernel
    ("split_extern", (1, 1)),     # aten.mm, then the epilogue kernel
])
def test_each_choice_runs_what_eager_computes(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch, winner: str,
                                              expected: tuple[int, int]) -> None:
    _force_template(monkeypatch)
    timer.times = {"fused": 5.0, "split_template": 5.0, "split_extern": 5.0}
    timer.times[winner] = 0.5
    check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
    assert {"split_template", "split_extern"} <= set(timer.seen)
    assert "fused" in timer.seen
    assert (metrics.generated_kernel_count, metrics.extern_calls) == expected


def test_no_extern_candidate_when_the_template_is_forced(timer: FakeTimer) -> None:
    with cfg.patch(matmul_template="force"):
        check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
    assert "split_template" in timer.seen and "split_extern" not in timer.seen


def test_no_extern_candidate_for_a_prologue_template(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_template(monkeypatch)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x @ w.to(torch.bfloat16)) * 2

    timer.times = {"split_template": 0.5}
    check(fn, make((40, 32), "cpu", torch.bfloat16, low=-1, high=1), make((32, 24), "cpu", low=-1, high=1),
          atol=6e-2, rtol=5e-2)
    assert "split_template" in timer.seen and "split_extern" not in timer.seen
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (2, 0)


def test_product_that_is_also_an_output(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The product is stored in every choice (a graph output); splitting keeps it correct."""
    _force_template(monkeypatch)

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x @ w
        return y, torch.tanh(y) + 1

    timer.times = {"split_extern": 0.5}
    check(fn, make((24, 16), "cpu", low=-1, high=1), make((16, 20), "cpu", low=-1, high=1), atol=1e-4, rtol=1e-4)
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (1, 1)


def test_choice_reused_without_timing(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_template(monkeypatch)
    timer.times = {"split_template": 0.5, "split_extern": 5.0}
    with cfg.patch(backend_disk_cache=False):
        check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
        seen = len(timer.seen)
        metrics.reset()
        check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
    assert len(timer.seen) == seen  # the stored choice: nothing timed again
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (2, 0)


def test_repeated_layers_share_one_tuning(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Identical layers of one graph (a network's repeated blocks) generate the same candidates,
    differing only in the comments naming their graph nodes: the first layer's choice serves the
    others, nothing is timed twice."""
    _force_template(monkeypatch)
    timer.times = {"split_template": 0.5, "split_extern": 5.0}

    def two_layers(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
        return _linear_gelu_residual(_linear_gelu_residual(x, w1, b1), w2, b2)

    x, w, b = _inputs()
    check(two_layers, x, w, b, make((32, 32), "cpu", low=-1, high=1), make((32,), "cpu"), atol=1e-4, rtol=1e-4)
    assert timer.seen.count("split_template") == 1
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (4, 0)


def test_failing_tuning_keeps_the_fused_kernel(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    _force_template(monkeypatch)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(autotune, "choose", broken)
    check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (1, 0)


def test_light_epilogue_stays_fused_without_timing(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bias and residual adds (no unary function, few operations) are not timed: fused."""
    _force_template(monkeypatch)
    timer.times = {"split_extern": 0.1, "split_template": 0.1}

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w, b) + r

    check(fn, *_inputs(), make((40, 32), "cpu"), atol=1e-4, rtol=1e-4)
    assert not any(n in timer.seen for n in ("fused", "split_template", "split_extern"))
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (1, 0)


def test_every_group_is_built_once_before_any_is_timed(timer: FakeTimer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph with several template groups to decide walks them all once without timing (the
    prefetch pass: on CUDA their kernels then compile in one parallel round), then decides each
    with one timing per candidate; the choices are those of the timings."""
    from pyjit.backend.codegen import epilogue_tuning

    _force_template(monkeypatch)
    events: list[str] = []
    original = epilogue_tuning.EpilogueTuner._decide_group

    def spy(self: Any, group: Any, epilogue: Any) -> Any:
        events.append("prefetch" if getattr(autotune._state, "prefetch", None) is not None else "decide")
        return original(self, group, epilogue)

    monkeypatch.setattr(epilogue_tuning.EpilogueTuner, "_decide_group", spy)

    def two_layers(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = x + F.gelu(F.linear(x, w, b))
        return h - torch.tanh(h @ w2)

    timer.times = {"fused": 5.0, "split_template": 5.0, "split_extern": 0.5}
    check(two_layers, *_inputs(), make((32, 32), "cpu", low=-1, high=1), atol=1e-4, rtol=1e-4)
    assert events == ["prefetch", "prefetch", "decide", "decide"], events
    assert timer.seen.count("split_extern") == 2 and timer.seen.count("fused") == 2
    assert (metrics.generated_kernel_count, metrics.extern_calls) == (2, 2)
