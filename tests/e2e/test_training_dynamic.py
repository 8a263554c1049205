"""Training steps whose sizes vary: the dynamic frame entry's graph needs autograd, and pyjit's
backend compiles a static training graph per input size (``aot.compile_training_per_size``, at
most ``config.aot_static_sizes_max``; beyond that the graph runs as captured, logged). Every
loss and gradient equals eager's."""
from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import torch
import torch.nn as nn

import pyjit
import pyjit.backend as backend


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    loss = out.pow(2).mean() + out[:, : x.shape[0] % 3 + 1].sum()
    loss.backward()
    return loss.detach()


def _run(sizes: list[int], cpu_backend: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    with pyjit.config.patch(cpu_backend=cpu_backend):
        step = pyjit.jit(_step)
        for n in sizes:
            x = torch.randn(n, 8)
            model.zero_grad()
            ref.zero_grad()
            torch.testing.assert_close(step(model, x), _step(ref, x), atol=1e-5, rtol=1e-5)
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
def test_varying_batch_training_compiles_per_size(fresh_pyjit: Any, cpu_backend: str) -> None:
    backend.metrics.reset()
    _run([4, 5, 6, 7, 5, 4, 6], cpu_backend)
    assert backend.metrics.eager_graphs == []  # nothing ran as captured
    assert backend.metrics.dynamic_graphs == 0  # the training graphs are static, one per size


def test_sizes_beyond_the_cap_run_as_captured(fresh_pyjit: Any, caplog: Any) -> None:
    backend.metrics.reset()
    with pyjit.config.patch(aot_static_sizes_max=2), caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        _run([4, 5, 6, 7, 8, 7], "cpp")
    assert any("further sizes run as captured" in r.getMessage() for r in caplog.records)
