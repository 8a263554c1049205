"""20-step training loops jitted whole (forward, ``loss.backward()``, ``optimizer.step()``) with
pyjit's backend: losses and final parameters equal eager's.

CPU only here: once with generated Triton run by Triton's interpreter (internal errors raise),
once with the default C++ path (internal errors fall back per graph, as users get it: the
result must still equal eager).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit
import pyjit.backend as backend
from pyjit import config as cfg


class _Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2, self.head = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        return self.head(h + self.fc2(self.ln(h)))


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01),
}


@pytest.mark.parametrize("cpu_backend", ["triton_interpret", "cpp"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_loop_matches_eager(optimizer: str, cpu_backend: str, tmp_path: Any) -> None:
    if cpu_backend == "cpp":
        from pyjit.runtime import cpp_build
        if cpp_build.compiler() is None:
            pytest.skip("no working C++ compiler")
    torch.manual_seed(0)
    model = _Classifier()
    ref = copy.deepcopy(model)
    opt, ref_opt = OPTIMIZERS[optimizer](model.parameters()), OPTIMIZERS[optimizer](ref.parameters())
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    pyjit.reset()
    backend.metrics.reset()
    with cfg.patch(cpu_backend=cpu_backend, raise_on_internal_error=cpu_backend == "triton_interpret",
                   cache_dir=str(tmp_path)):
        step = pyjit.jit(_step)
        for i in range(20):
            loss = step(model, opt, x, y)
            ref_loss = _step(ref, ref_opt, x, y)
            torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5, msg=f"step {i}")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)
    if cpu_backend == "triton_interpret":
        assert not [r for r in backend.metrics.eager_graphs if "train" in r], backend.metrics.eager_graphs
        assert backend.metrics.compiled_graphs >= 2  # the model's forward and backward
    pyjit.reset()
