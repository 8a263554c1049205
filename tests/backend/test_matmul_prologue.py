"""Matmul template prologues: elementwise operands computed in the template's loads.

``lowering/matmul.py`` turns a template operand that is a cheap elementwise value of graph
inputs or extern outputs (a weight cast to bf16, a scaled or shifted input) into a
:class:`~pyjit.backend.ir.MatmulPrologue`; ``codegen/matmul_template.py`` computes it tile by
tile inside the K loop. Checked against eager: casts and arithmetic on either operand, through
transposes and batch dims, ragged K (the masked lanes of a prologue whose value at 0 is not 0
must not enter the dot), a value that is also an output or read by another kernel, and the
operands that must stay buffers (values a loop kernel or a template produces, gathers,
reductions, long bodies). Fusion is asserted on kernel counts and on which operands became
prologues. On CPU the kernels run in Triton's interpreter (``matmul_template="force"``); the
tuning path (prologue vs plain template vs extern, each charged what it leaves to another
kernel) runs there with a fake timer that picks each winner in turn.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from pyjit import config as cfg
from pyjit.backend.ir import MatmulPrologue
from pyjit.backend.lowering import matmul as mmod
from pyjit.backend.metrics import metrics

from .conftest import DEVICES, check, make


@pytest.fixture(params=DEVICES)
def device(request: Any, tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache-mm-prologue"
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(cache),
                   matmul_template="force", autotune=False):
        metrics.reset()
        yield request.param


@pytest.fixture
def prologues(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records, per operand the lowering considered, "prologue" or "buffer"."""
    seen: list[str] = []
    real = mmod._prologue_operand

    def spy(ctx: Any, node: Any) -> MatmulPrologue | None:
        out = real(ctx, node)
        seen.append("prologue" if out is not None else "buffer")
        return out

    monkeypatch.setattr(mmod, "_prologue_operand", spy)
    return seen


def counts() -> tuple[int, int]:
    return metrics.generated_kernel_count, metrics.extern_calls


_TOL = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.bfloat16: {"atol": 6e-2, "rtol": 5e-2},
        torch.float16: {"atol": 1e-2, "rtol": 1e-2}}


# --------------------------------------------------------------------------- prologues taken
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_weight_cast_is_computed_in_the_loads(device: str, dtype: torch.dtype, prologues: list[str]) -> None:
    """``F.linear(x, w.to(dtype), b)``: the cast of the fp32 weight (the transposed B operand)
    runs inside the template; one kernel, no separate cast kernel."""
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w.to(dtype), b)

    x, w, b = make((70, 48), device, dtype, low=-1, high=1), make((40, 48), device, low=-1, high=1), \
        make((40,), device, dtype)
    check(fn, x, w, b, **_TOL[dtype])
    assert prologues == ["buffer", "prologue"]
    assert counts() == (1, 0)


@pytest.mark.parametrize("K", [48, 37])
def test_input_arithmetic_prologue_3d(device: str, K: int, prologues: list[str]) -> None:
    """``(x * 0.5 + 1).to(bf16) @ w`` over a 3-d input (flattened to mm), ragged K included."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * 0.5 + 1).to(torch.bfloat16) @ w

    check(fn, make((3, 23, K), device), make((K, 40), device, torch.bfloat16, low=-1, high=1),
          **_TOL[torch.bfloat16])
    assert "prologue" in prologues
    assert counts() == (1, 0)


@pytest.mark.parametrize("K", [32, 37])
def test_masked_lanes_are_zero_not_the_prologue_of_zero(device: str, K: int, prologues: list[str]) -> None:
    """exp(0) = 1 and 0 + 1 = 1: a ragged K tile's padding must still enter the dot as 0."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) @ (w + 1)

    check(fn, make((33, K), device, low=-1, high=1), make((K, 29), device, low=-1, high=1), **_TOL[torch.float32])
    assert prologues == ["prologue", "prologue"]
    assert counts() == (1, 0)


def test_bmm_prologues_on_both_operands(device: str, prologues: list[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.bmm(q * 0.125, k.transpose(1, 2).to(torch.float32))

    q, k = make((3, 20, 16), device), make((3, 18, 16), device, torch.float16)
    check(fn, q, k, atol=1e-3, rtol=1e-3)
    assert prologues == ["prologue", "prologue"]
    assert counts() == (1, 0)


def test_broadcast_scale_vector_prologue(device: str, prologues: list[str]) -> None:
    """Two loads: the input and a per-column scale broadcast over the rows."""
    def fn(x: torch.Tensor, s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * s) @ w

    check(fn, make((50, 24), device, low=-1, high=1), make((24,), device), make((24, 30), device, low=-1, high=1),
          **_TOL[torch.float32])
    assert prologues == ["prologue", "buffer"]
    assert counts() == (1, 0)


def test_prologue_value_also_returned(device: str, prologues: list[str]) -> None:
    """The cast is also a graph output: it is written once, and the template still gives
    eager's product (it recomputes the cast or reads the written buffer; never a stale one)."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w16 = w.to(torch.bfloat16)
        return x @ w16, w16

    check(fn, make((40, 32), device, torch.bfloat16, low=-1, high=1), make((32, 24), device, low=-1, high=1),
          **_TOL[torch.bfloat16])


def test_prologue_value_read_by_another_kernel(device: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ws = w * 2
        return x @ ws, ws.sum(0)

    check(fn, make((40, 32), device, low=-1, high=1), make((32, 24), device, low=-1, high=1), **_TOL[torch.float32])


def test_prologue_extern_output(device: str, prologues: list[str]) -> None:
    """A value of an extern's output (here a sort) qualifies: no loop kernel could take it."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        s = torch.sort(x, dim=1).values
        return torch.relu(s) @ w

    check(fn, make((30, 16), device, low=-1, high=1), make((16, 20), device, low=-1, high=1), **_TOL[torch.float32])
    assert prologues == ["prologue", "buffer"]


# --------------------------------------------------------------------------- prologues refused
def test_value_of_a_template_output_stays_in_its_epilogue(device: str, prologues: list[str]) -> None:
    """``relu(x @ w1) @ w2``: the relu is the first template's epilogue, not the second's prologue."""
    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2

    check(fn, make((30, 16), device, low=-1, high=1), make((16, 24), device, low=-1, high=1),
          make((24, 20), device, low=-1, high=1), **_TOL[torch.float32])
    assert prologues == ["buffer", "buffer", "buffer", "buffer"]
    assert counts() == (2, 0)


def test_value_of_a_reduction_stays_a_buffer(device: str, prologues: list[str]) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],)).to(torch.bfloat16) @ w

    check(fn, make((30, 16), device), make((16, 20), device, torch.bfloat16), **_TOL[torch.bfloat16])
    assert prologues[0] == "buffer"


def test_gather_and_long_bodies_stay_buffers(device: str, prologues: list[str]) -> None:
    def fn(table: torch.Tensor, idx: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        long = torch.tanh(torch.sin(torch.cos(torch.exp(x) + 1) * 2) - 3) / 5
        return table[idx] @ w + long @ w

    check(fn, make((10, 16), device, low=-1, high=1), torch.randint(0, 10, (12,), device=device),
          make((12, 16), device, low=-1, high=1), make((16, 8), device, low=-1, high=1), **_TOL[torch.float32])
    assert prologues == ["buffer", "buffer", "buffer", "buffer"]


def test_config_off_keeps_the_cast_kernel(device: str, prologues: list[str]) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.to(torch.bfloat16)

    with cfg.patch(matmul_prologue=False):
        check(fn, make((30, 16), device, torch.bfloat16), make((16, 20), device), **_TOL[torch.bfloat16])
    assert prologues == ["buffer", "buffer"]
    assert counts() == (2, 0)


# --------------------------------------------------------------------------- training graphs
def test_autocast_linear_training_step_cpu(tmp_path: Any, prologues: list[str]) -> None:
    """A bf16 autocast forward and backward through ``pyjit.jit`` on CPU: weights cast in the
    forward (prologues) and gradients equal eager's."""
    import pyjit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 16))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 16))
    ref.load_state_dict(model.state_dict())
    x = torch.randn(20, 32)

    def step(m: torch.nn.Module, inp: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(inp)
        return out.float().square().mean()

    with cfg.patch(cpu_backend="triton_interpret", matmul_template="force", autotune=False,
                   cache_dir=str(tmp_path / "cache")):
        loss = pyjit.jit(step)(model, x)
        loss.backward()
    expected = step(ref, x)
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=2e-2, rtol=2e-2)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=3e-2, rtol=3e-2)
    assert "prologue" in prologues, prologues


# --------------------------------------------------------------------------- tuning
@pytest.mark.parametrize("winner", ["prologue", "plain", "extern"])
def test_tuning_chooses_between_prologue_plain_and_extern(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                          winner: str) -> None:
    """The CUDA tuning path on CPU (kernels interpreted): every candidate builds and runs, the
    plain and extern ones also run the operand copy they are charged, and whichever the timer
    makes fastest is what the graph runs, with eager's result."""
    import pyjit.runtime.launcher as launcher
    from pyjit.runtime import autotune

    real_load = launcher.load_module
    monkeypatch.setattr(launcher, "load_module", lambda path, key, interpret: real_load(path, key, True))
    seen: list[str] = []

    def timer(name: str, run: Callable[[], object], dev: torch.device) -> float:
        seen.append(name)
        run()
        kind = "extern" if name == "extern" else ("prologue" if name.startswith("prologue_") else "plain")
        return 1.0 if kind == winner else 2.0

    monkeypatch.setattr(autotune, "timer", timer)
    real_choose = mmod._choose_config

    def choose(ctx: Any, target: Any, cands: Any, mode: str) -> Any:
        assert ctx is not None and real_choose is not None
        return mmod.tune(ctx, target, cands, "tune", [dict(mmod.INTERPRET_CONFIG)])

    monkeypatch.setattr(mmod, "_choose_config", choose)
    autotune.clear_memo()

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w.to(torch.bfloat16)) * 2

    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(tmp_path / "cache"),
                   matmul_template="force"):
        metrics.reset()
        check(fn, make((40, 32), "cpu", torch.bfloat16, low=-1, high=1), make((24, 32), "cpu", low=-1, high=1),
              **_TOL[torch.bfloat16])
    autotune.clear_memo()
    assert sorted(n.split("_")[0] for n in seen) == ["extern", "prologue", "template"]
    # prologue: one kernel; plain: the cast kernel + the template; extern: cast + mm + epilogue.
    assert counts() == {"prologue": (1, 0), "plain": (2, 0), "extern": (2, 1)}[winner]
