"""The matmul template (codegen/matmul_template.py) with fused epilogues, and autotuning's cache.

On CPU the template runs through Triton's interpreter with ``config.matmul_template="force"``
(the CPU never benchmarks); on CUDA (when present) the same tests run compiled kernels, with
configurations tuned (``force``: template only) or template-vs-extern chosen (``auto``).
Every result is compared with eager; fusion is asserted on kernel / extern counts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.metrics import metrics

from .conftest import DEVICES, check, make

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(params=DEVICES)
def device(request: Any, tmp_path_factory: Any) -> Any:
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache-mm"
    # autotune off: CUDA runs take the first configuration (tuning is tested in new processes
    # below); the CPU never benchmarks anyway.
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(cache),
                   matmul_template="force", autotune=False):
        metrics.reset()
        yield request.param


def counts() -> tuple[int, int]:
    return metrics.generated_kernel_count, metrics.extern_calls


def _tol(dtype: torch.dtype) -> dict[str, float]:
    # K-long dot products: fp32 (TF32 off by default) sums in another order than the BLAS.
    return {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2},
            torch.float16: {"atol": 1e-2, "rtol": 1e-2}}[dtype]


# --------------------------------------------------------------------------- plain products
@pytest.mark.parametrize("shape", [(64, 32, 64), (70, 40, 50), (5, 3, 7), (130, 97, 33)])
def test_mm_ragged(device: str, shape: tuple[int, int, int]) -> None:
    M, K, N = shape

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mm(a, b)

    check(fn, make((M, K), device), make((K, N), device), **_tol(torch.float32))
    assert counts() == (1, 0)


def test_mm_transposed_operands(device: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.t() @ b.t()

    check(fn, make((40, 70), device), make((50, 40), device), **_tol(torch.float32))
    assert counts() == (1, 0)


def test_mm_same_buffer_both_operands(device: str) -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        return a @ a.t()

    check(fn, make((33, 20), device), **_tol(torch.float32))


@pytest.mark.parametrize("bias_shape", [(50,), (1, 50), (70, 50), (70, 1)])
def test_addmm_bias_broadcast(device: str, bias_shape: tuple[int, ...]) -> None:
    def fn(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.addmm(bias, a, b)

    check(fn, make(bias_shape, device), make((70, 40), device), make((40, 50), device), **_tol(torch.float32))
    assert counts() == (1, 0)


def test_addmm_beta_alpha(device: str) -> None:
    def fn(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.addmm(bias, a, b, beta=0.5, alpha=-2.0)

    check(fn, make((50,), device), make((70, 40), device), make((40, 50), device), **_tol(torch.float32))
    assert counts() == (1, 0)


def test_addmm_beta_zero_ignores_nan_bias(device: str) -> None:
    def fn(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.addmm(bias, a, b, beta=0)

    bias = torch.full((50,), float("nan"), device=device)
    check(fn, bias, make((70, 40), device), make((40, 50), device), **_tol(torch.float32))


@pytest.mark.parametrize("shape", [(3, 33, 20, 17), (2, 64, 32, 64)])
def test_bmm_ragged(device: str, shape: tuple[int, int, int, int]) -> None:
    B, M, K, N = shape

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b) * 2 + 1

    check(fn, make((B, M, K), device), make((B, K, N), device), **_tol(torch.float32))
    assert counts() == (1, 0)


def test_bmm_transposed(device: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)

    check(fn, make((2, 24, 16), device), make((2, 24, 16), device), **_tol(torch.float32))
    # softmax is a reduction: never part of the template's epilogue.
    assert metrics.extern_calls == 0


# --------------------------------------------------------------------------- epilogue fusion
def _linear_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b)) + r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_linear_bias_gelu_residual_is_one_kernel(device: str, dtype: torch.dtype) -> None:
    x, w = make((70, 48), device, dtype, low=-1, high=1), make((40, 48), device, dtype, low=-1, high=1)
    b, r = make((40,), device, dtype), make((70, 40), device, dtype)
    check(_linear_gelu_residual, x, w, b, r, **_tol(dtype))
    assert counts() == (1, 0)


def test_linear_3d_input_epilogue(device: str) -> None:
    x, w = make((2, 35, 48), device), make((40, 48), device)
    b, r = make((40,), device), make((2, 35, 40), device)
    check(_linear_gelu_residual, x, w, b, r, **_tol(torch.float32))
    assert counts() == (1, 0)


def test_epilogue_dtype_cast(device: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b).to(torch.float16)

    check(fn, make((70, 40), device), make((40, 50), device), atol=2e-3, rtol=2e-3)
    assert counts() == (1, 0)


def test_matmul_output_also_returned(device: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = a @ b
        return y, torch.tanh(y) + 1

    check(fn, make((70, 40), device), make((40, 50), device), **_tol(torch.float32))
    assert counts() == (1, 0)  # both stored by the template kernel


def test_transposed_reader_is_not_an_epilogue(device: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (a @ b).t() + r  # reads element (j, i) of the product at output (i, j)

    check(fn, make((30, 40), device), make((40, 50), device), make((50, 30), device), **_tol(torch.float32))
    assert counts() == (2, 0)


def test_producer_of_an_operand_is_not_fused(device: str) -> None:
    # K == N: the producer of ``a`` has as many elements as the product, yet the template reads
    # ``a`` at other indices than it stores the product.
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.exp(a * 0.1)
        return (h @ b) + h

    check(fn, make((30, 40), device), make((40, 40), device), **_tol(torch.float32))
    assert metrics.extern_calls == 0


def test_two_matmuls_chain(device: str) -> None:
    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2

    check(fn, make((33, 24), device), make((24, 40), device), make((40, 20), device), **_tol(torch.float32))
    assert counts() == (2, 0)


def test_template_off_keeps_extern(device: str) -> None:
    with cfg.patch(matmul_template="off"):
        check(_linear_gelu_residual, make((70, 48), device), make((40, 48), device), make((40,), device),
              make((70, 40), device), **_tol(torch.float32))
    assert counts() == (1, 1)


def test_cpu_auto_never_uses_template() -> None:
    # On CPU "auto" never benchmarks and keeps the extern (C++ or interpreted kernels alike).
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, matmul_template="auto",
                   backend_disk_cache=False):
        metrics.reset()
        check(_linear_gelu_residual, make((70, 48), "cpu"), make((40, 48), "cpu"), make((40,), "cpu"),
              make((70, 40), "cpu"), **_tol(torch.float32))
        assert counts() == (1, 1)


def test_symbolic_graph_keeps_extern(device: str) -> None:
    from .test_dynamic_backend import symbolic_graph

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) + 1

    example = [torch.randn(9, 16, device=device), torch.randn(16, 8, device=device)]
    gm = symbolic_graph(fn, example, [[True, False], None])
    compiled = backend.compile_fx(gm, example)
    assert metrics.dynamic_graphs == 1 and metrics.eager_graphs == []
    assert metrics.extern_calls == 1
    assert "pyjit_template" not in compiled.pyjit_source
    for n in (9, 17, 40):
        x = torch.randn(n, 16, device=device)
        torch.testing.assert_close(compiled(x, example[1]), fn(x, example[1]), atol=1e-4, rtol=1e-4)


def test_template_kernel_source_shape(device: str) -> None:
    compiled = check(_linear_gelu_residual, make((70, 48), device), make((40, 48), device), make((40,), device),
                     make((70, 40), device), **_tol(torch.float32))
    src = compiled.pyjit_source
    assert "tl.dot(" in src and "GROUP_M" in src
    assert 'input_precision="ieee"' in src  # torch's default: no TF32 for fp32 matmuls


# --------------------------------------------------------------------------- autotune cache
_CHILD = textwrap.dedent("""
    import json, sys, time
    import torch
    sys.path.insert(0, {root!r})
    from pyjit import config as cfg
    from pyjit.runtime import autotune

    def slow():
        time.sleep(0.004)

    def fast():
        pass

    with cfg.patch(cache_dir={cache!r}):
        choice = autotune.choose("test", {{"shape": "8x8", "device": "cpu"}},
                                 {{"slow": lambda: slow, "fast": lambda: fast}}, torch.device("cpu"))
    print(json.dumps({{"choice": choice, **autotune.counters}}))
""")


def _run_child(tmp_path: Any, code: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYJIT_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_autotune_cache_reused_by_new_process(tmp_path: Any) -> None:
    code = _CHILD.format(root=ROOT, cache=str(tmp_path / "cache"))
    first = _run_child(tmp_path, code)
    assert first["choice"] == "fast" and first["benchmarks"] == 2 and first["tunings"] == 1
    second = _run_child(tmp_path, code)
    assert second["choice"] == "fast" and second.get("benchmarks", 0) == 0 and second["cache_hits"] == 1


def test_autotune_failing_candidate_never_chosen(tmp_path: Any) -> None:
    from pyjit.runtime import autotune

    def broken() -> Any:
        raise RuntimeError("does not compile")

    with cfg.patch(cache_dir=str(tmp_path / "cache")):
        choice = autotune.choose("test_fail", {"k": "1"}, {"broken": broken, "ok": lambda: (lambda: None)},
                                 torch.device("cpu"))
    assert choice == "ok"


_CUDA_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, {root!r})
    import pyjit.backend as backend
    from pyjit import config as cfg
    from pyjit.runtime import autotune

    def fn(x, w, b, r):
        return F.gelu(F.linear(x, w, b)) + r

    g = torch.Generator(device="cuda").manual_seed(0)
    args = [torch.randn(s, device="cuda", generator=g) for s in ((512, 256), (384, 256), (384,), (512, 384))]
    args[1] = args[1] / 16  # outputs of order 1: bf16 rounding stays near 1e-2
    args = [a.to(torch.bfloat16) for a in args]
    with cfg.patch(cache_dir={cache!r}, raise_on_internal_error=True, matmul_template={mode!r}):
        out = backend.compile_fx(torch.fx.symbolic_trace(fn), args)(*args)
    ref = fn(*args).float()
    got = (out[0] if isinstance(out, (tuple, list)) else out).float()
    err = (got - ref).abs().max().item() / ref.abs().max().item()  # relative to the output's scale
    print(json.dumps({{"err": err, "kernels": backend.metrics.generated_kernel_count, **autotune.counters}}))
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["auto", "force"])
def test_cuda_tuning_not_repeated_in_new_process(tmp_path: Any, mode: str) -> None:
    code = _CUDA_CHILD.format(root=ROOT, cache=str(tmp_path / "cache"), mode=mode)
    first = _run_child(tmp_path, code)
    # Two tunings: the product's configuration (and template vs extern), then whether the
    # template keeps its fused epilogue (codegen/epilogue_tuning.py).
    assert first["benchmarks"] >= 2 and first["tunings"] == 2 and first["err"] < 2e-2
    # The graph cache would skip compiling altogether: clear it so the lowering runs again.
    import shutil
    for root, dirs, _files in os.walk(tmp_path / "cache"):
        for d in dirs:
            if d == "graphs":
                shutil.rmtree(os.path.join(root, d))
    second = _run_child(tmp_path, code)
    assert second.get("benchmarks", 0) == 0 and second["cache_hits"] == first["tunings"] and second["err"] < 2e-2
    assert second["kernels"] == first["kernels"]


def test_prefetching_builds_candidates_without_benchmarking(tmp_path: Any) -> None:
    """Under ``autotune.prefetching()`` a choice benchmarks nothing and stores nothing: it builds
    each candidate, gathers the compiles they expose, and answers the stored choice or the first."""
    from pyjit.runtime import autotune

    built: list[str] = []

    def candidate(name: str) -> Any:
        def build() -> Any:
            built.append(name)
            run = lambda: None  # noqa: E731
            run.warm_launch = (name, lambda: None)  # type: ignore[attr-defined]
            return run
        return build

    cands = {"first": candidate("first"), "second": candidate("second")}
    before = dict(autotune.counters)
    with cfg.patch(cache_dir=str(tmp_path / "cache")):
        with autotune.prefetching() as warmers:
            assert autotune.choose("test_prefetch", {"k": "1"}, cands, torch.device("cpu")) == "first"
            # A repeat of the same key (a repeated layer) builds nothing more.
            assert autotune.choose("test_prefetch", {"k": "1"}, cands, torch.device("cpu")) == "first"
        assert [k for k, _ in warmers] == ["first", "second"] and built == ["first", "second"]
        assert autotune.counters.get("benchmarks", 0) == before.get("benchmarks", 0)
        assert autotune.lookup("test_prefetch", {"k": "1"}) is None  # nothing stored
        autotune.timer = lambda name, run, device: {"first": 2.0, "second": 1.0}[name]
        try:
            assert autotune.choose("test_prefetch", {"k": "1"}, cands, torch.device("cpu")) == "second"
        finally:
            autotune.timer = None
        with autotune.prefetching() as warmers:  # a stored choice is answered as it is
            assert autotune.choose("test_prefetch", {"k": "1"}, cands, torch.device("cpu")) == "second"
        assert warmers == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matmul_candidates_compile_in_one_prefetch_round(tmp_path: Any, caplog: Any) -> None:
    """A graph of several matmuls gets its tuning candidates compiled in one parallel round before
    the lowering tunes them one by one (``compile_fx._prefetch_tuning``); results as eager's."""
    import logging

    import pyjit.backend as backend

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2

    g = torch.Generator(device="cuda").manual_seed(0)
    args = [torch.randn(s, device="cuda", generator=g).to(torch.bfloat16) / 8 for s in ((512, 256), (256, 384),
                                                                                      (384, 128))]
    with cfg.patch(cache_dir=str(tmp_path / "cache"), raise_on_internal_error=True, matmul_template="auto",
                   autotune=True), caplog.at_level(logging.INFO, logger="pyjit.compile_times"):
        out = backend.compile_fx(torch.fx.symbolic_trace(fn), args)(*args)
    got = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(got.float(), fn(*args).float(), atol=2e-2, rtol=2e-2)
    lines = [r.getMessage() for r in caplog.records if "tuning prefetch:" in r.getMessage()]
    assert len(lines) == 1 and "of 2 matmul(s)" in lines[0], lines


def test_tuning_path_runs_every_candidate(tmp_path: Any, monkeypatch: Any) -> None:
    """The CUDA tuning path (dummy inputs with the operands' layouts, each configuration compiled
    and launched, the extern timed) exercised on CPU with kernels interpreted."""
    import types

    import pyjit.runtime.launcher as launcher
    from pyjit.backend.ir import InputBuffer, Layout, MatmulTemplate, ReinterpretView
    from pyjit.backend.lowering import matmul as mmod
    from pyjit.runtime import autotune

    real_load = launcher.load_module
    monkeypatch.setattr(launcher, "load_module", lambda path, key, interpret: real_load(path, key, True))
    a = InputBuffer("arg0_1", Layout.of(torch.empty(70, 40)))
    w = InputBuffer("arg1_1", Layout.of(torch.empty(50, 40)))
    b = ReinterpretView(w, Layout(torch.device("cpu"), torch.float32, (40, 50), (1, 40), 0))
    out = Layout.contiguous(torch.device("cpu"), torch.float32, [70, 50])
    cand = MatmulTemplate("template_candidate", out, a, b, mmod.INTERPRET_CONFIG, False)
    ctx = types.SimpleNamespace(current_node=None, current_target_name=lambda: "mm")
    configs = mmod.cuda_configs(torch.float32, 70, 50, 40)
    state = torch.random.get_rng_state()
    before = dict(autotune.counters)
    with cfg.patch(cache_dir=str(tmp_path / "cache")):
        chosen = mmod.tune(ctx, torch.ops.aten.mm.default, {"plain": cand}, "tune", configs)
    assert torch.equal(torch.random.get_rng_state(), state)  # dummy inputs use a private generator
    assert autotune.counters["benchmarks"] - before.get("benchmarks", 0) == len(configs) + 1
    assert autotune.counters.get("failures", 0) == before.get("failures", 0)
    assert chosen is None or (chosen[0] == "plain" and chosen[1] in configs)


def test_small_tiles_left_out_where_big_tiles_fill_the_gpu() -> None:
    """16-bit candidates drop tiles under 128x128 once 128x128 tiles give every SM two or more
    (they never won there, and each is a compile on the first call); fp32 (TF32) keeps all."""
    from pyjit.backend.lowering import matmul as mmod

    big = mmod.cuda_configs(torch.bfloat16, 8192, 2304, 768, sm_count=132)
    assert big and all(c["BLOCK_M"] * c["BLOCK_N"] >= 128 * 128 for c in big)
    assert len(big) < len(mmod.cuda_configs(torch.bfloat16, 8192, 2304, 768))
    small = mmod.cuda_configs(torch.bfloat16, 512, 768, 768, sm_count=132)  # 24 tiles: keep them
    assert small == mmod.cuda_configs(torch.bfloat16, 512, 768, 768)
    assert mmod.cuda_configs(torch.float32, 8192, 2304, 768, sm_count=132) == \
        mmod.cuda_configs(torch.float32, 8192, 2304, 768)
