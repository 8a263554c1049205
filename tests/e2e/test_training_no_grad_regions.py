"""Training graphs with ``no_grad`` regions inside (``with torch.no_grad():`` blocks, methods
decorated ``@torch.no_grad()`` such as the rotary embeddings of transformers' Llama family):
compiled by pyjit's backend (the regions become ``detach`` at their edges,
``backend/aot/grad_mode.py``), gradients equal to eager's; an in-place op under ``no_grad`` on a
tensor that requires grad keeps the graph running as captured (logged), still correct."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import pyjit
import pyjit.backend as backend


class Rotary(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Block(nn.Module):
    """Rotary attention-ish block with a no_grad-normalized weight read outside the region."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.scale = nn.Parameter(torch.randn(d))
        self.rotary = Rotary(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1]).expand(x.shape[0], -1)
        cos, sin = self.rotary(x, positions)
        h = self.proj(x)
        h = h * cos + torch.cat((-h[..., 8:], h[..., :8]), dim=-1) * sin
        with torch.no_grad():
            norm = self.scale / self.scale.norm()  # no gradient flows through `norm`
            norm.mul_(0.5)  # in place on a value the region made: still compiled
        return (h * norm + h * self.scale).tanh()


def _compare(model: nn.Module, x: torch.Tensor) -> None:
    ref = copy.deepcopy(model)
    expected = ref(x)
    expected.sum().backward()
    got = pyjit.jit(model)(x)
    got.sum().backward()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert got.requires_grad
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_no_grad_regions_compile_and_match_eager() -> None:
    torch.manual_seed(0)
    backend.metrics.reset()
    pyjit.reset()
    _compare(Block(), torch.randn(2, 5, 16))
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs


class InPlaceUnderNoGrad(nn.Module):
    def __init__(self, through_view: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.through_view = through_view

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        with torch.no_grad():
            if self.through_view:
                h[:, 0].zero_()  # writes h through a view made inside the region
            else:
                h.clamp_(min=-0.1)  # eager: not recorded, the gradient ignores the clamp
            scratch = torch.zeros(4, 8)
            scratch.add_(1)  # a tensor made inside the region: fine
        return h * h + scratch


@pytest.mark.parametrize("through_view", [False, True], ids=["direct", "through_view"])
def test_in_place_under_no_grad_on_a_grad_tensor_runs_as_captured(through_view: bool) -> None:
    torch.manual_seed(0)
    backend.metrics.reset()
    pyjit.reset()
    _compare(InPlaceUnderNoGrad(through_view), torch.randn(4, 8))
    assert any("in-place op under no_grad" in g for g in backend.metrics.eager_graphs), backend.metrics.eager_graphs


@pytest.mark.parametrize("inner", ["enable_grad", "nested_no_grad"])
def test_nested_grad_mode_regions(inner: str) -> None:
    torch.manual_seed(0)

    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                h = self.a(x)
                if inner == "enable_grad":
                    with torch.enable_grad():
                        g = self.b(x)  # requires grad again
                else:
                    with torch.no_grad():
                        g = self.b(x)
            return (h + 1) * g + self.b(x)

    backend.metrics.reset()
    pyjit.reset()
    _compare(Nested(), torch.randn(4, 8))
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs
