"""A compiled graph whose first call fails (a generated kernel that does not compile: a pyjit bug)
runs as captured from then on, logged, instead of raising into the user's program."""
from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
import torch

import pyjit.backend as backend
from pyjit import config as cfg


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
def test_first_call_failure_runs_as_captured(cpu_backend: str, tmp_path: Any, caplog: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 2 + 1

    x = torch.randn(64)
    with cfg.patch(cpu_backend=cpu_backend, raise_on_internal_error=False, cache_dir=str(tmp_path)):
        backend.metrics.reset()
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [x])
        module = inspect.getmodule(compiled.pyjit_call)
        kernel = next(name for name in vars(module) if name.startswith("pyjit_fused"))
        original = getattr(module, kernel)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("simulated kernel compile error")

        class Broken:  # Triton kernels are launched as kernel[grid](...)
            def __getitem__(self, grid: Any) -> Any:
                return broken

        setattr(module, kernel, Broken() if cpu_backend == "triton_interpret" else broken)
        try:
            with caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
                torch.testing.assert_close(compiled(x), fn(x))
                torch.testing.assert_close(compiled(x + 1), fn(x + 1))  # stays as captured
        finally:
            setattr(module, kernel, original)
        assert any("failed on its first call" in r.getMessage() for r in caplog.records)
        assert any("first call failed" in reason for reason in backend.metrics.eager_graphs)


def test_first_call_failure_raises_under_raise_on_internal_error(tmp_path: Any) -> None:
    x = torch.randn(16)
    with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True, cache_dir=str(tmp_path)):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(lambda t: t.exp() + 1), [x])
        module = inspect.getmodule(compiled.pyjit_call)
        kernel = next(name for name in vars(module) if name.startswith("pyjit_fused"))
        original = getattr(module, kernel)
        setattr(module, kernel, lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
        try:
            with pytest.raises(RuntimeError, match="boom"):
                compiled(x)
        finally:
            setattr(module, kernel, original)


def test_warm_started_graph_falls_back_to_its_rebuilt_captured_graph(caplog: Any) -> None:
    """A warm-started entry's captured graph is rebuilt from its code text (no fx graph): when
    the compiled module fails on its first call, the fallback runs that code instead of raising
    ``AttributeError: '_CapturedGraph' object has no attribute 'graph'`` while logging."""
    import importlib

    from torch.utils import _pytree as pytree

    from pyjit.frame.warm_start import _CapturedGraph

    compile_fx = importlib.import_module("pyjit.backend.compile_fx")  # the module, not its function

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 2 + 1

    gm = torch.fx.symbolic_trace(fn)
    captured = _CapturedGraph("GraphModule_fn", gm.code, {"torch": torch})
    x = torch.randn(8)
    out_spec = pytree.tree_flatten(fn(x))[1]

    def broken_call(args: list[Any]) -> Any:
        raise NameError("name 'simulated' is not defined")

    compiled = compile_fx._make_callable(captured, broken_call, out_spec, [], [], None,  # type: ignore[arg-type]
                                         inputs_guarded=True)
    with cfg.patch(raise_on_internal_error=False), caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
        torch.testing.assert_close(compiled(x), fn(x))
        torch.testing.assert_close(compiled(x + 1), fn(x + 1))  # stays as captured
    assert any("GraphModule_fn failed on its first call" in r.getMessage() for r in caplog.records)
