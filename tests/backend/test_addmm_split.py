"""``addmm`` as an extern: cuBLASLt's fused-bias ``addmm`` or ``mm`` with the bias added by the
product's pointwise reader, chosen by autotuning (``lowering/matmul.py`` ``_split_addmm_wins``).

Run on CPU through Triton's interpreter (``autotune_launch="force"`` enables the choice there)
with the fake timer of ``test_launch_autotune``: each winner is checked against eager, on the
aten calls of the generated module, and on what the ``mm`` candidate is charged for moving the
bias out of the GEMM (nothing / one store of the product / a bias kernel of its own).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pyjit import config as cfg
from pyjit.backend.metrics import metrics
from pyjit.runtime import autotune

from . import test_epilogue_tuning
from .conftest import check, make
from .test_launch_autotune import FakeTimer

timer = test_epilogue_tuning.timer  # the fixture: interpreter, forced tuning, the fake timer


@pytest.fixture
def charges(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``charge`` key field of every addmm choice made."""
    seen: list[str] = []
    choose = autotune.choose

    def recording(kind: str, fields: Any, *args: Any, **kwargs: Any) -> str:
        if kind == "addmm_extern":
            seen.append(fields["charge"])
        return choose(kind, fields, *args, **kwargs)

    monkeypatch.setattr(autotune, "choose", recording)
    return seen


def _linear_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return r + F.gelu(F.linear(x, w, b))


def _inputs() -> tuple[torch.Tensor, ...]:
    return make((40, 32), "cpu"), make((24, 32), "cpu"), make((24,), "cpu"), make((40, 24), "cpu")


@pytest.mark.parametrize("winner", ["addmm", "mm_then_bias"])
def test_each_choice_computes_what_eager_does(timer: FakeTimer, charges: list[str], winner: str) -> None:
    timer.times = {winner: 0.5}
    compiled = check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
    assert set(timer.seen) == {"addmm", "mm_then_bias"}
    assert charges == ["none"]  # the only reader, GELU, fuses the bias add
    source = compiled.pyjit_source  # type: ignore[attr-defined]
    if winner == "addmm":
        assert "torch.addmm(" in source and "torch.mm(" not in source
    else:
        assert "torch.mm(" in source and "torch.addmm(" not in source
    assert metrics.generated_kernel_count == 1  # (bias +) GELU + residual in one kernel either way


def test_a_stored_product_charges_its_store(timer: FakeTimer, charges: list[str]) -> None:
    """The product is returned too (as a saved activation would be): the mm candidate pays its store."""
    timer.times = {"mm_then_bias": 0.5}

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.linear(x, w, b).view(4, 10, 24)
        return h, torch.tanh(h)

    check(fn, *_inputs()[:3], atol=1e-5, rtol=1e-5)
    assert charges == ["store"]


def test_a_product_without_pointwise_reader_charges_a_bias_kernel(timer: FakeTimer, charges: list[str]) -> None:
    timer.times = {"mm_then_bias": 0.5}

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w, b) @ w2  # read by another matmul only

    check(fn, *_inputs()[:3], make((24, 8), "cpu"), atol=1e-4, rtol=1e-4)
    assert charges == ["bias_kernel"]


def test_alpha_and_beta_survive_the_split(timer: FakeTimer) -> None:
    timer.times = {"mm_then_bias": 0.5}

    def fn(b: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(b, x, w, beta=0.5, alpha=-2.0))

    check(fn, make((24,), "cpu"), make((40, 32), "cpu"), make((32, 24), "cpu"), atol=1e-4, rtol=1e-4)
    assert "mm_then_bias" in timer.seen


def test_the_cpu_never_tunes_by_default(tmp_path: Any) -> None:
    """Without forced tuning (the default on CPU) addmm stays one extern call, as before."""
    calls: list[str] = []
    with cfg.patch(cpu_backend="triton_interpret", cache_dir=str(tmp_path / "cache")):
        original = autotune.choose
        try:
            autotune.choose = lambda kind, *a, **k: calls.append(kind) or original(kind, *a, **k)  # type: ignore
            compiled = check(_linear_gelu_residual, *_inputs(), atol=1e-4, rtol=1e-4)
        finally:
            autotune.choose = original  # type: ignore[assignment]
    assert "addmm_extern" not in calls
    assert "torch.addmm(" in compiled.pyjit_source  # type: ignore[attr-defined]
