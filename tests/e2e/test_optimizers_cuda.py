"""A jitted training step with torch's default CUDA optimizers, 20 steps against eager (CUDA only).

With CUDA parameters, Adam/AdamW default to ``foreach=True`` with 0-d CPU step counters: the
update graph computes on the host and the device (``pyjit/backend/passes/host_values.py``).
Every graph must be compiled by pyjit's backend (none as captured) and the losses and parameters
equal eager's. Skipped without CUDA (CI); run on the lent GPU machine.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

import pyjit
import pyjit.backend as backend

from .test_optimizer_capture import _step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.Tanh(), nn.Linear(128, 16))


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adamw_default": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05),
    "adam_default": lambda p: torch.optim.Adam(p, lr=1e-2),
    "sgd_momentum_default": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adamw_fused": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
    "adam_capturable": lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True),
    "adamw_forloop": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_default_cuda_optimizers_match_eager(name: str, tmp_path: Any) -> None:
    pyjit.reset()
    backend.metrics.reset()
    torch.manual_seed(0)
    model = _net().cuda()
    ref = copy.deepcopy(model)
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](ref.parameters())
    x, y = torch.randn(32, 64, device="cuda"), torch.randn(32, 16, device="cuda")
    with pyjit.config.patch(cache_dir=str(tmp_path)):
        step = pyjit.jit(_step)
        for i in range(20):
            loss, ref_loss = step(model, opt, x, y), _step(ref, ref_opt, x, y)
            torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5, msg=f"loss, step {i}")
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert torch.is_grad_enabled()
    assert backend.metrics.compiled_graphs >= 3 and not backend.metrics.eager_graphs, backend.metrics.eager_graphs
    pyjit.reset()
