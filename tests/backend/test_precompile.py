"""Parallel compilation before a module's first call (``pyjit/runtime/precompile.py``).

The dry run must predict exactly the launches the real call makes (same kernels, grids, integer
arguments, dtypes and pointer alignment: Triton's specialisation key), and must leave no trace:
inputs, mutated inputs and the random stream unchanged. On CPU the predicted launches are
compared with the launches of the real (interpreted) call; on CUDA the test also checks that
the real first call compiles nothing the warm-up did not.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime import fast_launch, launcher, precompile


def _graphs() -> list[tuple[str, Callable[..., Any], Callable[[str], list[torch.Tensor]]]]:
    def pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * y + 1

    def norm_softmax(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w[0])
        return torch.softmax(h @ w.t(), -1)

    def views(x: torch.Tensor) -> torch.Tensor:
        # An input view at an odd element offset: its address is not 16-byte aligned.
        return x[:, 1:].exp() + x[:, :-1].t().t()

    def mutation(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return (x + y).sum(0)

    def random(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)

    return [
        ("pointwise", pointwise, lambda d: [torch.randn(64, 33, device=d), torch.randn(33, device=d)]),
        ("norm_softmax", norm_softmax, lambda d: [torch.randn(16, 40, device=d), torch.randn(40, 40, device=d)]),
        ("views", views, lambda d: [torch.randn(12, 9, device=d)]),
        ("mutation", mutation, lambda d: [torch.randn(8, 16, device=d), torch.randn(8, 16, device=d)]),
        ("random", random, lambda d: [torch.randn(128, device=d)]),
    ]


def _spec(value: Any, address: int | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, (value.data_ptr() if address is None else address) % 16 == 0)
    return value


class _Recording:
    """Wraps a launched kernel: records the launch (as the specialisation sees it), then runs it."""

    def __init__(self, name: str, kernel: Any, seen: list[Any]):
        self.name, self.kernel, self.seen = name, kernel, seen

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.seen.append((self.name, grid, [_spec(a) for a in args], sorted(kwargs.items())))
            self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.parametrize("name,fn,make", _graphs(), ids=[g[0] for g in _graphs()])
def test_dry_run_predicts_the_real_launches(name: str, fn: Any, make: Any, tmp_path: Any) -> None:
    inputs = make("cpu")
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(tmp_path)):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [t.clone() for t in inputs])
        interpreted = inspect.getmodule(compiled.pyjit_call)
        # The same source with compiled-Triton kernel objects (never launched here: only recorded).
        jit_module = launcher.load_module(interpreted.__file__, f"drytest{name}"[:16], False)
    args = [t.clone() for t in inputs]
    before = [t.clone() for t in args]
    rng = torch.get_rng_state()
    launches, addresses = precompile.record_launches(jit_module.call, args)
    # The dry run changed nothing: inputs (one is mutated by the graph) and the random stream.
    for a, b in zip(args, before):
        assert torch.equal(a, b)
    assert torch.equal(torch.get_rng_state(), rng)
    assert launches, "the dry run recorded no launch"
    names = {id(fast_launch.unwrap(v)): n for n, v in vars(jit_module).items()}
    predicted = [(names[id(k)], grid, [_spec(a, addresses.address(a)) if isinstance(a, torch.Tensor) else a
                                       for a in largs], sorted(kw.items()))
                 for k, grid, largs, kw in launches]
    # The real call, through the interpreted kernels, recording what each launch passes.
    seen: list[Any] = []
    call = compiled.pyjit_call
    recording = dict(call.__globals__)
    for n in {p[0] for p in predicted}:
        recording[n] = _Recording(n, recording[n], seen)
    real_call = type(call)(call.__code__, recording, call.__name__, call.__defaults__, call.__closure__)
    real_args = [t.clone() for t in inputs]
    real_call(real_args)
    assert predicted == seen


def test_warm_module_is_a_no_op_on_cpu_and_when_disabled(tmp_path: Any) -> None:
    x = torch.randn(32)
    with cfg.patch(cpu_backend="triton_interpret", cache_dir=str(tmp_path)):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(lambda t: t.exp() + 1), [x])
        assert precompile.warm_module(compiled.pyjit_call, [x]) == 0
    with cfg.patch(parallel_compile="off"):
        assert not precompile.enabled()


def test_environment_switch() -> None:
    from pyjit.config import _from_environment

    assert _from_environment({}).parallel_compile == "processes"
    assert _from_environment({"PYJIT_PARALLEL_COMPILE": "1"}).parallel_compile == "processes"
    assert _from_environment({"PYJIT_PARALLEL_COMPILE": "threads"}).parallel_compile == "threads"
    assert _from_environment({"PYJIT_PARALLEL_COMPILE": "0"}).parallel_compile == "off"
    assert _from_environment({"PYJIT_COMPILE_THREADS": "4"}).compile_threads == 4
    assert _from_environment({"LOCAL_WORLD_SIZE": "8"}).compile_share == 8
    assert _from_environment({"LOCAL_WORLD_SIZE": "x"}).compile_share == 1
    with pytest.raises(ValueError, match="PYJIT_COMPILE_THREADS"):
        _from_environment({"PYJIT_COMPILE_THREADS": "many"})
    with pytest.raises(ValueError, match="PYJIT_PARALLEL_COMPILE"):
        _from_environment({"PYJIT_PARALLEL_COMPILE": "yes"})


def _compiled_kernels(cache_dir: Any) -> set[str]:
    """Triton's on-disk cache entries holding a compiled kernel (a cubin)."""
    return {entry.name for entry in cache_dir.iterdir() if any(f.suffix == ".cubin" for f in entry.iterdir())} \
        if cache_dir.exists() else set()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles CUDA kernels")
@pytest.mark.parametrize("parallel", ["processes", "threads"])
@pytest.mark.parametrize("name,fn,make", _graphs(), ids=[g[0] for g in _graphs()])
def test_cuda_first_call_compiles_nothing_new(name: str, fn: Any, make: Any, parallel: str, tmp_path: Any,
                                             monkeypatch: Any) -> None:
    triton_cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))  # cold: every kernel compiles
    import sys
    for module_name in [m for m in sys.modules if m.startswith("pyjit_generated_")]:
        monkeypatch.delitem(sys.modules, module_name)  # fresh kernel objects: nothing compiled in memory
    with cfg.patch(parallel_compile=parallel):
        if not precompile.enabled():
            pytest.skip(f"no parallel compile with {parallel} here")
    inputs = make("cuda")
    with cfg.patch(raise_on_internal_error=True, cache_dir=str(tmp_path), parallel_compile=parallel):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [t.clone() for t in inputs])
        args = [t.clone() for t in inputs]
        if parallel == "processes":  # batches this small do not wait for starting workers
            import time
            from pyjit.runtime import compile_pool
            pool = compile_pool.get(precompile._threads())
            deadline = time.monotonic() + 120
            while pool.ready == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
        in_workers = precompile.stats["in_workers"]
        submitted = precompile.warm_module(compiled.pyjit_call, args)
        assert submitted > 0
        if parallel == "processes":  # compiled by the workers, not by this process's fallback
            assert precompile.stats["in_workers"] > in_workers
        warmed = _compiled_kernels(triton_cache)
        assert len(warmed) >= submitted
        torch.manual_seed(0)
        out = compiled(*args)
        torch.cuda.synchronize()
        assert _compiled_kernels(triton_cache) == warmed  # every launch found its kernel compiled
        if name != "random":
            ref_args = [t.clone() for t in inputs]
            torch.testing.assert_close(out, fn(*ref_args))
            for a, b in zip(args, ref_args):
                torch.testing.assert_close(a, b)


def test_ranks_of_one_machine_share_the_workers() -> None:
    with cfg.patch(parallel_compile="processes", compile_threads=0, compile_share=1):
        alone = precompile._threads()
    with cfg.patch(parallel_compile="processes", compile_threads=0, compile_share=64):
        shared = precompile._threads()
    assert shared == 2 and alone >= shared  # at least 2 workers, never more than a rank's share
    with cfg.patch(compile_threads=3, compile_share=64):
        assert precompile._threads() == 3  # an explicit count wins
