"""C++ generator specifics: layouts, reductions over every dim, fp16/bf16, cache, fallback, logs."""
from __future__ import annotations

import logging
import re
import sys
from typing import Any

import pytest
import torch

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime import cpp_build

from .conftest import check, make

pytestmark = pytest.mark.skipif(cpp_build.compiler() is None, reason="no working C++ compiler")


@pytest.fixture
def cpp(tmp_path: Any) -> Any:
    with cfg.patch(cpu_backend="cpp", cpp_fast_compile=True, raise_on_internal_error=True,
                   cache_dir=str(tmp_path / "cache")):
        backend.metrics.reset()
        yield str(tmp_path / "cache")


def _fn(x: torch.Tensor, y: torch.Tensor) -> Any:
    return torch.sigmoid(x * y + 1.0) - y, (x - y).abs().amax(-1)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "broadcast", "sliced", "channels_last"])
def test_layouts_match_eager(cpp: Any, layout: str) -> None:
    if layout == "contiguous":
        x, y = make((4, 6, 5, 7), "cpu"), make((4, 6, 5, 7), "cpu")
    elif layout == "transposed":
        x, y = make((4, 6, 7, 5), "cpu").transpose(-1, -2), make((4, 6, 5, 7), "cpu")
    elif layout == "broadcast":
        x, y = make((4, 6, 5, 7), "cpu"), make((5, 1), "cpu")
    elif layout == "sliced":
        x, y = make((8, 6, 5, 9), "cpu")[::2, :, :, 1:8], make((4, 6, 5, 7), "cpu")
    else:
        x = make((4, 6, 5, 7), "cpu").to(memory_format=torch.channels_last)
        y = make((4, 6, 5, 7), "cpu").to(memory_format=torch.channels_last)
    check(_fn, x, y)


def test_transpose_copy_is_tiled(cpp: Any) -> None:
    compiled = check(lambda x: x.t().contiguous() * 2, make((67, 129), "cpu"))
    assert "y0 += 16" in compiled.pyjit_source


@pytest.mark.parametrize("dim", [0, 1, 2, (0, 2), None])
@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "mean", "var", "argmax", "logsumexp"])
def test_reductions_over_every_dim(cpp: Any, dim: Any, kind: str) -> None:
    x = make((5, 33, 17), "cpu")
    if kind == "argmax":
        if not isinstance(dim, int):
            pytest.skip("argmax takes one dim")
        check(lambda t: t.argmax(dim), x)
    elif kind == "var":
        check(lambda t: t.var(dim), x)
    elif kind == "logsumexp":
        check(lambda t: torch.logsumexp(t, dim if dim is not None else (0, 1, 2)), x)
    else:
        check(lambda t: getattr(t, kind)(dim) if dim is not None else getattr(t, kind)(), x)


def test_var_of_offset_data(cpp: Any) -> None:
    x = make((4, 5000), "cpu") + 1000.0
    check(lambda t: (t.var(1), t.std(0)), x)


def test_whole_tensor_layer_norm_orders_nodes_by_dependency(cpp: Any) -> None:
    # rstd is realized after the normalized output's loader was made: it must still be
    # placed before it in the kernel's row loops.
    x, w = make((1, 2, 3), "cpu"), make((1, 2, 3), "cpu")
    gm = torch.fx.experimental.proxy_tensor.make_fx(
        lambda a, b: torch.ops.aten.native_layer_norm.default(a, [1, 2, 3], b, None, 0.5))(x, w)
    check(gm, x, w)


def test_nan_and_inf_in_reductions(cpp: Any) -> None:
    x = make((6, 40), "cpu")
    x[1, 3] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    check(lambda t: (t.amax(1), t.amin(1), t.argmax(1), t.argmin(1), torch.softmax(t, 1)), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types(cpp: Any, dtype: torch.dtype) -> None:
    x, y = make((33, 65), "cpu", dtype), make((33, 65), "cpu", dtype)
    check(lambda a, b: (torch.relu(a * b) + a, torch.softmax(a, -1), a.to(torch.float32) * 3), x, y)
    # a + b is kept in fp32 inside the kernel (eager rounds it to the narrow type first), as on Triton.
    check(lambda a, b: (a + b).sum(0), x, y, atol=0.25, rtol=0.02)


def test_int_and_bool(cpp: Any) -> None:
    a = torch.randint(-50, 50, (9, 13), dtype=torch.int64)
    b = torch.randint(1, 7, (9, 13), dtype=torch.int32)
    check(lambda a, b: (a // b, a % b, torch.remainder(a, b), a & 6, (a > 0) | (b < 3), (a > 0).sum(1)), a, b)
    check(lambda a: (a.to(torch.uint8) + 3, a.to(torch.int8) * 5, (a != 0).all(1), (a > 40).any(0)), a)


def test_large_kernels_run_parallel(cpp: Any) -> None:
    x = make((300, 700), "cpu")
    compiled = check(lambda t: (torch.nn.functional.gelu(t) * 2, torch.softmax(t, -1), t.sum(0)), x)
    assert "omp parallel for" in compiled.pyjit_source


def test_fusion_counts(cpp: Any) -> None:
    x = make((64, 100), "cpu")
    check(lambda t: torch.softmax(torch.relu(t) * 2, -1), x)
    assert backend.metrics.generated_kernel_count == 1


def test_warm_start_loads_the_shared_object_without_compiling(cpp: Any, caplog: Any) -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.tanh(t) * 3 + 0.125

    x = make((17, 19), "cpu")
    check(fn, x)
    before = cpp_build.compile_count
    # A fresh process: no imported generated modules, no graph-cache state in memory.
    for name in [m for m in sys.modules if m.startswith("pyjit_generated_")]:
        del sys.modules[name]
    with caplog.at_level(logging.INFO, logger="pyjit.cache"):
        check(fn, x)
    assert cpp_build.compile_count == before
    assert any("loaded from the cache" in r.getMessage() for r in caplog.records)


def test_missing_compiler_falls_back_with_one_log_line(cpp: Any, monkeypatch: Any, caplog: Any) -> None:
    monkeypatch.setattr(cpp_build, "_checked", False)
    monkeypatch.setattr(cpp_build, "_compiler", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    with cfg.patch(raise_on_internal_error=False), caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        for _ in range(2):
            gm = torch.fx.symbolic_trace(lambda t: t + 1)
            out = backend.compile_fx(gm, [torch.ones(3)])(torch.ones(3))
            assert torch.equal(out, torch.full((3,), 2.0))
    lines = [r.getMessage() for r in caplog.records if "no working C++ compiler" in r.getMessage()
             and "CPU backend" in r.getMessage()]
    assert len(lines) == 1, lines
    assert len(backend.metrics.eager_graphs) == 2
    monkeypatch.setattr(cpp_build, "_checked", False)  # re-check with the real PATH afterwards


def test_output_code_log_prints_the_cpp(cpp: Any, caplog: Any) -> None:
    with caplog.at_level(logging.INFO, logger="pyjit.output_code"):
        check(lambda t: t * t + 1, make((8,), "cpu"))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert 'extern "C" void pyjit_fused_mul_add_0' in text


def _special_rows(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows with NaN, all -inf, +inf (one and two), -inf entries, a wide range, zeros."""
    x = make((10, n), "cpu", dtype)
    x[1, 3] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    x[4, 5] = float("-inf")
    x[5, ::2] = float("-inf")
    x[6, 2] = x[6, 9] = float("inf")
    x[7, 1], x[7, 2] = float("inf"), float("-inf")
    x[8] *= 100
    x[9] = 0.0
    return x


@pytest.mark.parametrize("n", [10, 300, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_online_exp_sum_matches_eager_on_special_rows(cpp: Any, monkeypatch: Any, n: int, dtype: torch.dtype) -> None:
    from pyjit.backend.codegen import cpp as cpp_gen

    monkeypatch.setattr(cpp_gen, "ONLINE_EXP_SUM", True)
    x = _special_rows(n, dtype)
    compiled = check(lambda t: (torch.softmax(t, -1), torch.log_softmax(t, -1), torch.logsumexp(t, -1)), x)
    assert "r0_0 += " in compiled.pyjit_source  # the online chunked loop really ran
    y = torch.randint(0, n, (10,))
    check(lambda t, y: torch.nn.functional.cross_entropy(t.float(), y, reduction="none"), x, y)
    check(lambda t: torch.softmax(t, 0), x)


@pytest.mark.parametrize("online", [False, True])
def test_online_exp_sum_walks_rows_fewer_times(cpp: Any, monkeypatch: Any, online: bool) -> None:
    from pyjit.backend.codegen import cpp as cpp_gen

    monkeypatch.setattr(cpp_gen, "ONLINE_EXP_SUM", online)
    x = make((16, 999), "cpu")
    softmax = check(lambda t: torch.softmax(t, -1), x).pyjit_source
    log_softmax = check(lambda t: torch.log_softmax(t, -1) * 2, x).pyjit_source
    # Full-row loops; with online: the chunked max+sum loop, the normalising loop and the
    # scalar NaN/inf fallback loop. Without: max, the blocked sum (chunks of SUM_BLOCK) and
    # the normalising loop.
    walks = [src.count("for (int64_t rindex = 0; rindex < 999; ++rindex)") for src in (softmax, log_softmax)]
    chunked = [src.count("for (int64_t r0_0 = 0; r0_0 < 999; r0_0 += 256)") for src in (softmax, log_softmax)]
    blocked = [src.count("for (int64_t r0_1 = 0; r0_1 < 999; r0_1 += 512)") for src in (softmax, log_softmax)]
    assert walks == [2, 2], walks
    assert chunked == ([1, 1] if online else [0, 0]), chunked
    assert blocked == ([0, 0] if online else [1, 1]), blocked
    assert backend.metrics.generated_kernel_count == 2


def test_cpu_backend_choice_is_one_fallbacks_line_per_process(tmp_path: Any) -> None:
    import subprocess

    code = (
        "import torch, pyjit.backend as backend\n"
        "from pyjit import config as cfg\n"
        "with cfg.patch(cpp_fast_compile=True):\n"
        "    for f in (lambda t: t + 1, lambda t: t * 3, lambda t: t.sum(0)):\n"
        "        gm = torch.fx.symbolic_trace(f)\n"
        "        assert torch.allclose(backend.compile_fx(gm, [torch.ones(3)])(torch.ones(3)), f(torch.ones(3)))\n"
    )
    env = {**__import__("os").environ, "PYJIT_LOGS": "fallbacks,output_code", "PYJIT_CACHE_DIR": str(tmp_path),
           "PYJIT_CPU_BACKEND": "cpp"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if "pyjit CPU backend:" in ln]
    assert len(lines) == 1, lines
    assert "cpp (C++ kernels compiled with" in lines[0] and "PYJIT_CPU_BACKEND" in lines[0]
    assert 'extern "C" void pyjit_fused_' in out  # output_code still prints the generated C++


@pytest.mark.parametrize("exponent", [3, -1, -2, -0.5, 2, 0.5, 2.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_pow_small_exponents_as_multiplies(cpp: Any, exponent: float, dtype: torch.dtype) -> None:
    """pow by 3, -1, -2, -0.5 (like 2 and 0.5) lowers to the multiplies/rsqrt aten's kernels use:
    a powf call per element would stop the loop vectorising (GELU's tanh form has ``x ** 3``)."""
    x = make([257], "cpu", dtype)
    x[:4] = torch.tensor([0.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    compiled = check(lambda t: torch.pow(t, exponent) * 0.5, x)
    source = compiled.pyjit_source  # type: ignore[attr-defined]
    # fp16 keeps pow for +-0.5: aten's CPU kernel does (pow(-inf, 0.5) = inf where sqrt gives nan).
    keeps_pow = exponent == 2.5 or (dtype == torch.float16 and exponent in (0.5, -0.5))
    assert ("powf(" in source or "pow(" in source) == keeps_pow, source


@pytest.mark.parametrize("shape", [(4, 16, 32, 32), (2, 6, 17, 3), (3, 5, 7)])
def test_per_channel_pointwise_splits_the_loop(cpp: Any, shape: tuple[int, ...]) -> None:
    """A batch-norm-like pointwise kernel reads per-channel values at ``(xindex / HW) % C``: the
    loop is split into x_outer (the channel index computed once per step) and a contiguous,
    vectorizable x_inner loop, when the inner extent is at least 16 elements."""
    x, r = make(shape, "cpu"), make(shape, "cpu")
    c = shape[1]
    mean, var, w, b = (make([c], "cpu") for _ in range(4))
    view = [1, c] + [1] * (len(shape) - 2)

    def bn_add_relu(t: torch.Tensor, res: torch.Tensor, m: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                    h: torch.Tensor) -> torch.Tensor:
        y = (t - m.view(view)) / torch.sqrt(v.abs().view(view) + 1e-5) * g.view(view) + h.view(view)
        return torch.relu(y + res)

    compiled = check(bn_add_relu, x, r, mean, var, w, b, atol=1e-5, rtol=1e-5)
    inner = 1
    for n in shape[2:]:
        inner *= n
    split = inner >= 16
    assert ("x_outer" in compiled.pyjit_source) == split, compiled.pyjit_source  # type: ignore[attr-defined]


def test_split_loop_with_channels_last_and_broadcast_inputs(cpp: Any) -> None:
    x = make([2, 8, 5, 6], "cpu").to(memory_format=torch.channels_last)
    bias = make([8, 1, 1], "cpu")
    row = make([6], "cpu")
    check(lambda t, b, r: (t * 2 + b) * r, x, bias, row)


@pytest.mark.parametrize("pad", [(1, 1, 1, 1), (0, 1, 0, 1), (2, 0, 1, 3)])
def test_padded_channels_last_pointwise_hoists_its_row_offset(cpp: Any, pad: tuple[int, int, int, int]) -> None:
    """A batch norm, ReLU6 and zero padding fused over a channels-last activation (MobileNet's
    "same" padding): each load's clamped, padded row offset depends on x_outer only, so it is
    computed once per outer step before the contiguous channel loop (which then vectorizes),
    and the values equal eager's, padding included."""
    x = make([2, 24, 9, 7], "cpu").to(memory_format=torch.channels_last)
    mean, var, w, b = (make([24], "cpu") for _ in range(4))

    def bn_relu6_pad(t: torch.Tensor, m: torch.Tensor, v: torch.Tensor, g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.batch_norm(t, m, v.abs() + 0.1, g, h, training=False, eps=1e-3)
        return torch.nn.functional.pad(torch.clamp(y, 0.0, 6.0), pad)

    compiled = check(bn_relu6_pad, x, mean, var, w, b, atol=1e-5, rtol=1e-5)
    source = compiled.pyjit_source  # type: ignore[attr-defined]
    loop = source.index("for (int64_t x_inner")
    outer_part = source[source.rindex("for (int64_t x_outer", 0, loop):loop]
    assert "pyjit_min" in outer_part or "pyjit_max" in outer_part, source
    body = source[loop:source.index("}", loop)]
    assert not [line for line in body.splitlines() if "in_ptr" in line and "x_outer" in line], body


@pytest.mark.parametrize("fn", ["erf", "exp", "tanh", "gelu"])
def test_vectorized_fp32_math_close_to_eager(cpp: Any, fn: str) -> None:
    """The C++ prelude's own fp32 erf/exp/tanh (vectorizable, no libm calls): within a few ulp of
    eager over a dense range, special values exact. erf's polynomials switch at |x| = 1 and
    saturate at 3.92: both boundaries are in the range."""
    x = torch.cat([torch.linspace(-6, 6, 200001), torch.tensor([0.0, -0.0, 1.0, -1.0, 3.92, -3.92, 1e-30, -1e-30,
                                                                float("inf"), float("-inf"), float("nan")])])
    f = {"erf": torch.erf, "exp": torch.exp, "tanh": torch.tanh,
         "gelu": torch.nn.functional.gelu}[fn]
    if fn == "gelu":  # eager's CPU GELU (MKL) returns NaN at +-inf; pyjit gives inf and NaN
        x = x[~x.isinf()]
    expected = f(x.double()).float()  # correctly rounded reference
    # eager's CPU GELU (MKL) is itself ~1e-6 off in the negative tail, where pyjit is within a
    # few ulp of the double reference below
    tol = 3e-6 if fn == "gelu" else 1e-6
    compiled = check(lambda t: f(t), x, atol=tol, rtol=1e-6)
    got = compiled(x)
    finite = expected.isfinite() & (expected != 0)
    ulp = (torch.nextafter(expected[finite].abs(), torch.tensor(float("inf"))) - expected[finite].abs())
    if fn == "gelu":  # x * (1 + erf) / 2 cancels in the negative tail: an absolute bound there
        err = (got[finite] - expected[finite]).abs() - 1e-6 * expected[finite].abs()
        assert err.max().item() <= 3e-7, err.max().item()
    else:
        worst = ((got[finite] - expected[finite]).abs() / ulp).max().item()
        assert worst <= 4, f"{fn}: {worst} ulp"
    torch.testing.assert_close(got[~finite], expected[~finite], equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape", [(64, 48), (1, 33), (33, 1), (0, 5), (5, 7, 3)])
def test_cast_of_a_transposed_tensor_keeps_its_layout(cpp: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    """``x.t().to(dtype)`` keeps ``x``'s strides, as eager's ``preserve_format`` does, when it is
    realized (a matmul reads it): the cast is then one contiguous walk, never a transposing copy."""
    def fn(w: torch.Tensor, a: torch.Tensor) -> Any:
        wt = w.transpose(0, -1).to(dtype)
        return wt, a.to(dtype) @ wt.reshape(a.shape[-1], -1)

    w = make(shape, "cpu")
    a = make((3, shape[-1]), "cpu")
    compiled = check(fn, w, a, atol=2e-2, rtol=2e-2)
    got, want = compiled(w, a), fn(w, a)
    def strides(t: torch.Tensor) -> list[int]:  # size-1 dims' strides mean nothing
        return [st for n, st in zip(t.shape, t.stride()) if n != 1]

    assert strides(got[0]) == strides(want[0]) or 0 in shape
    if len(shape) == 2 and min(shape) > 1:
        assert "y0 += 16" not in compiled.pyjit_source  # no 2-D tile: every access is contiguous


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cast_rounds_once_and_matches_eager(cpp: Any, dtype: torch.dtype) -> None:
    """A cast stored to a half type converts once (no round-then-convert pair), with eager's
    rounding (ties to even, NaN and inf kept)."""
    x = torch.tensor([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 65504.0, 1e30, -1e-30, float("nan"), float("inf"),
                      -float("inf"), 0.0, -0.0, 3.3e-5] * 3)
    compiled = check(lambda t: (t * 1.0).to(dtype), x)
    got, want = compiled(x), (x * 1.0).to(dtype)
    assert torch.equal(got.isnan(), want.isnan())
    ok = ~want.isnan()
    assert torch.equal(got[ok].view(torch.int16), want[ok].view(torch.int16))
    fn = "bf16" if dtype == torch.bfloat16 else "f16"
    kernel = compiled.pyjit_source.split('extern "C"')[-1]
    stored = re.findall(rf"= pyjit_f32_to_{fn}\((tmp\d+)\);", kernel)
    rounded = re.findall(rf"(tmp\d+) = pyjit_round_{fn}\(", kernel)
    assert stored and not set(stored) & set(rounded), kernel
