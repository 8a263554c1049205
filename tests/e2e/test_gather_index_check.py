"""Out-of-range gather indices raise in compiled CPU graphs, as in eager (``runtime/checks.py``).

Generated kernels clamp gathered indices (they never read outside a tensor); without the
wrapper's check an index outside the dimension would give a value where eager raises. Checked:
``embedding`` and ``index_select``/``gather`` take ``[0, size)``, ``x[idx]`` ``[-size, size)``;
the error is an ``IndexError`` naming the op and the user's line; the compiled graph is kept
(the error is the program's, not a reason to run the graph as captured).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import pyjit
import pyjit.backend as backend
from pyjit.errors import GatherIndexError

W = torch.randn(10, 4)
X = torch.randn(6, 3)


def _embedding(i: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(i, W) * 2


def _index_select(i: torch.Tensor) -> torch.Tensor:
    return torch.index_select(X, 0, i) + 1


def _subscript(i: torch.Tensor) -> torch.Tensor:
    return X[i] + 1


def _gather(i: torch.Tensor) -> torch.Tensor:
    return torch.gather(X, 0, i) * 3


CASES: list[tuple[Callable[..., Any], torch.Tensor, list[torch.Tensor], str]] = [
    (_embedding, torch.tensor([0, 9]), [torch.tensor([1, 10]), torch.tensor([-1, 2])], "embedding"),
    (_index_select, torch.tensor([0, 5]), [torch.tensor([0, 6]), torch.tensor([-1, 0])], "index_select"),
    (_subscript, torch.tensor([0, -6, 5]), [torch.tensor([0, -7, 1]), torch.tensor([6, 0, 0])], "index"),
    (_gather, torch.tensor([[0, 5, 1]]), [torch.tensor([[0, 6, 1]]), torch.tensor([[-1, 0, 0]])], "gather"),
]


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
@pytest.mark.parametrize("fn,good,bad,op", CASES, ids=[c[3] for c in CASES])
def test_out_of_range_index_raises_like_eager(fn: Callable[..., Any], good: torch.Tensor, bad: list[torch.Tensor],
                                              op: str, cpu_backend: str, tmp_path: Any) -> None:
    pyjit.reset()
    backend.metrics.reset()
    with pyjit.config.patch(cpu_backend=cpu_backend, cache_dir=str(tmp_path)):
        if cpu_backend == "cpp":
            from pyjit.runtime import cpp_build
            if cpp_build.compiler() is None:
                pytest.skip("no working C++ compiler")
        jitted = pyjit.jit(fn)
        torch.testing.assert_close(jitted(good), fn(good))  # in range (negative where eager allows it)
        for index in bad:
            with pytest.raises((IndexError, RuntimeError)):
                fn(index)  # eager raises
            with pytest.raises(GatherIndexError, match=op) as err:
                jitted(index)
            assert isinstance(err.value, IndexError)
            if op != "embedding":
                assert "test_gather_index_check.py" in str(err.value)  # the user's line
        torch.testing.assert_close(jitted(good), fn(good))
    assert backend.metrics.compiled_graphs == 1 and not backend.metrics.eager_graphs, backend.metrics.eager_graphs
    pyjit.reset()
