"""Shared fixtures for backend tests: device parametrization and an eager-comparison helper.

On CPU the generated Triton runs through Triton's interpreter (``cpu_backend=triton_interpret``);
on CUDA (when available) the same tests run compiled kernels.
"""
from __future__ import annotations

import zlib
from typing import Any, Callable, Sequence

import pytest

torch = pytest.importorskip("torch")  # these tests trace and compile torch programs; skipped where torch is absent

import pyjit.backend as backend
from pyjit import config as cfg

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _seeded_inputs(request: Any) -> None:
    """Each test draws its random inputs from a seed of its own id: the inputs no longer depend
    on which tests ran before it in the same worker (under pytest-xdist, an accident of timing),
    so a tolerance failure on unlucky inputs repeats instead of coming and going."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(params=DEVICES)
def device(request: Any, tmp_path_factory: Any) -> Any:
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache"
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(cache)):
        backend.metrics.reset()
        yield request.param


# Device and CPU code generator pairs: every CPU backend that runs generated code, and CUDA.
TARGET_CASES = [("cpu", b) for b in ("triton_interpret", "cpp")] + \
    ([("cuda", "triton")] if torch.cuda.is_available() else [])


@pytest.fixture(params=TARGET_CASES, ids=[f"{d}-{b}" for d, b in TARGET_CASES])
def target(request: Any, tmp_path_factory: Any) -> Any:
    """The device to run on, with pyjit configured for it (the C++ case is skipped without a
    working compiler); internal errors raised; a cache shared by the session."""
    device, cpu_backend = request.param
    if cpu_backend == "cpp":
        from pyjit.runtime import cpp_build
        if cpp_build.compiler() is None:
            pytest.skip("no C++ compiler")
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache-target"
    with cfg.patch(cpu_backend=cpu_backend if device == "cpu" else "triton_interpret",
                   raise_on_internal_error=True, cache_dir=str(cache)):
        backend.metrics.reset()
        yield device


def compile_graph(fn: Callable[..., Any], inputs: Sequence[Any]) -> Callable[..., Any]:
    """compile_fx on the symbolically traced ``fn``; asserts the backend really compiled it."""
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    before = len(backend.metrics.eager_graphs)
    compiled = backend.compile_fx(gm, list(inputs))
    assert len(backend.metrics.eager_graphs) == before, backend.metrics.eager_graphs[before:]
    return compiled


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    if dtype == torch.bfloat16:
        return {"atol": 2e-2, "rtol": 2e-2}
    return {"atol": 1e-5, "rtol": 1e-5}


def check(fn: Callable[..., Any], *inputs: Any, atol: float | None = None, rtol: float | None = None,
          exact_dtype: bool = True) -> Any:
    """Compile ``fn`` for ``inputs``; assert outputs equal eager's (values, dtypes, shapes)."""
    expected = fn(*[i.clone() if isinstance(i, torch.Tensor) else i for i in inputs])
    compiled = compile_graph(fn, inputs)
    actual = compiled(*inputs)
    exp_leaves, _ = torch.utils._pytree.tree_flatten(expected)
    act_leaves, _ = torch.utils._pytree.tree_flatten(actual)
    assert len(exp_leaves) == len(act_leaves)
    for e, a in zip(exp_leaves, act_leaves):
        if isinstance(e, torch.Tensor):
            tol = tolerances(e.dtype)
            if atol is not None:
                tol = {"atol": atol, "rtol": rtol if rtol is not None else atol}
            torch.testing.assert_close(a, e, equal_nan=True, check_dtype=exact_dtype, **tol)
        else:
            assert a == e
    return compiled


def make(shape: Sequence[int], device: str, dtype: torch.dtype = torch.float32, *, low: float = -3,
         high: float = 3, noncontig: bool = False) -> torch.Tensor:
    return torch.testing.make_tensor(tuple(shape), device=device, dtype=dtype, low=low, high=high,
                                     noncontiguous=noncontig)
