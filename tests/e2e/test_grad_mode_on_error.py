"""A jitted graph that switches grad mode and then raises leaves the caller's grad mode as eager does.

Graphs record ``with torch.no_grad():`` (and an optimizer step's ``no_grad`` decorator) as
``_set_grad_enabled`` calls; eager's context managers restore the mode when an op inside
raises, and the next forward of the program must still record autograd. Also: a graph that
pyjit's backend runs as captured is not run a second time after it raised (its in-place
updates before the error would be applied twice).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

import pyjit


def _step(x: torch.Tensor, counter: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        counter.add_(1)
        y = torch.linalg.cholesky(a) * 2  # raises at run time when ``a`` is not positive definite
    return y.sum() * x


@pytest.mark.parametrize("backend", ["eager", "pyjit"])
def test_grad_mode_restored_when_a_graph_raises(backend: str, fresh_pyjit: Any) -> None:
    x = torch.randn(4, requires_grad=True)
    counter = torch.zeros(())
    f = pyjit.jit(_step, backend=backend)
    f(x, counter, torch.eye(3))
    assert counter.item() == 1
    with pytest.raises(torch.linalg.LinAlgError):
        f(x, counter, -torch.eye(3))
    assert torch.is_grad_enabled()
    assert counter.item() == 2  # the update before the error ran once, as in eager
    assert (x * 3).requires_grad


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_error_checks_are_not_dead_code(grad: bool, fresh_pyjit: Any, caplog: Any) -> None:
    """``linalg.cholesky`` checks its ``info`` output with an op whose result nothing reads:
    compiled, it must still raise as eager does (it was dropped as dead code: a silent wrong
    result), and the compiled graph stays in use (no "running the captured graph" fallback)."""
    import logging

    def fn(a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(a) * 2

    f = pyjit.jit(fn)
    a = torch.eye(3, requires_grad=grad)
    with torch.set_grad_enabled(grad), caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
        torch.testing.assert_close(f(a), fn(a))
        with pytest.raises(torch.linalg.LinAlgError):
            f(-torch.eye(3, requires_grad=grad))
        torch.testing.assert_close(f(2 * a), fn(2 * a))
    assert not [r for r in caplog.records if "captured graph from now on" in r.getMessage()]
