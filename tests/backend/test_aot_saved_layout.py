"""A saved value whose layout differs from the traced one, viewed in the backward.

The backward graph's ``view`` calls are recorded for the strides the joint trace saw. When the
forward returns a saved value in another layout (a compiled forward storing a transposed value
row-major) or an extern kernel's real output layout differs from its meta, an ``aten.view`` of
it raised "view size is not compatible with input tensor's size and stride" in the backward
(as on two GPUs, a GPT block under bf16 autocast). The runtime now hands the backward its saved
values in the traced layout, and runs a captured backward with views as reshapes. The last
test trains a GPT-style attention block (``q @ k.transpose``, SDPA) under bf16 autocast through
``pyjit.jit`` with a cold and then a warm cache.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import pyjit
from pyjit import config as cfg
from pyjit.backend.aot import aot_compile
from pyjit.backend.aot.runtime import views_as_reshapes


def _column_major_forward(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
    """A forward 'compiler' that returns every output of two or more dimensions column-major:
    the values are right, the layout is not the traced one."""
    def run(*args: Any) -> tuple[Any, ...]:
        return tuple(o.transpose(-1, -2).contiguous().transpose(-1, -2) if isinstance(o, torch.Tensor) and o.dim() >= 2
                     else o for o in gm.forward(*args))
    return run


def _as_captured(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
    return gm.forward


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    s = torch.exp((x @ w).transpose(1, 2))        # its backward reads a view of the saved matmul
    return s.transpose(1, 2).view(x.shape[0], -1) ** 2


@pytest.mark.parametrize("partition", ["min_cut", "reference"])
def test_saved_value_in_another_layout_under_autocast(partition: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 16, 8)
    w = torch.randn(8, 8, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_(True)
    # raise_on_internal_error: no fallback to the captured backward with reshapes; the saved
    # values themselves must come in the traced layout.
    with cfg.patch(raise_on_internal_error=True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            compiled = aot_compile(torch.fx.symbolic_trace(block), [x, w], _column_major_forward, _as_captured,
                                   partition=partition)
            out = compiled(x, w)
            expected = block(x, w_ref)
        out.float().sum().backward()
        expected.float().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_captured_graph_views_tolerate_other_strides() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return a.view(-1) * 2

    aten_gm = torch.fx.experimental.proxy_tensor.make_fx(f)(torch.randn(4, 3))
    assert any(n.target is torch.ops.aten.view.default for n in aten_gm.graph.nodes)
    transposed = torch.randn(3, 4).t()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        aten_gm(transposed)
    torch.testing.assert_close(views_as_reshapes(aten_gm)(transposed), transposed.reshape(-1) * 2)


class AttentionBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 2, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5)
            y = att.softmax(dim=-1) @ v
        return x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


@pytest.mark.parametrize("sdpa", [False, True], ids=["matmul", "sdpa"])
def test_attention_block_backward_under_autocast_cold_and_warm(sdpa: bool, tmp_path: Any) -> None:
    torch.manual_seed(0)
    model, ref = AttentionBlock(sdpa=sdpa), AttentionBlock(sdpa=sdpa)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 32)
    with cfg.patch(cache_dir=str(tmp_path), raise_on_internal_error=True, cpp_fast_compile=True):
        for cache in ("cold", "warm"):
            pyjit.reset()  # the warm round compiles again from the disk cache the cold one filled
            jitted = pyjit.jit(model)
            for step in range(2):
                for m in (model, ref):
                    m.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out, expected = jitted(x), ref(x)
                out.float().square().mean().backward()
                expected.float().square().mean().backward()
                torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
                for (name, p), q in zip(ref.named_parameters(), model.parameters()):
                    torch.testing.assert_close(q.grad, p.grad, atol=2e-2, rtol=2e-2,
                                               msg=lambda m, n=name: f"{cache} cache, step {step}, {n}: {m}")
    pyjit.reset()


def test_guarded_forward_restrides_the_values_found_on_its_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs pinned by the caller's guards: the saved values that came in another layout are
    found on the first call; later calls restride those alone, every gradient still eager's."""
    from pyjit.backend.aot import runtime
    from pyjit.backend.compile_fx import INPUTS_GUARDED

    gm = torch.fx.symbolic_trace(block)
    gm.meta[INPUTS_GUARDED] = True
    x = torch.randn(2, 16, 8)
    w = torch.randn(8, 8, requires_grad=True)
    looked_at: list[Any] = []
    real = runtime.keep_traced_strides

    def spy(saved: list[Any], strides: Any, only: Any = None) -> list[int]:
        looked_at.append(None if only is None else list(only))
        return real(saved, strides, only)

    monkeypatch.setattr(runtime, "keep_traced_strides", spy)
    with cfg.patch(raise_on_internal_error=True, aot_defer_saving=False):
        compiled = aot_compile(gm, [x, w], _column_major_forward, _as_captured)
        for _ in range(3):
            w.grad = None
            w_ref = w.detach().clone().requires_grad_(True)
            compiled(x, w).sum().backward()
            block(x, w_ref).sum().backward()
            torch.testing.assert_close(w.grad, w_ref.grad)
    first = compiled.pyjit_state.restride
    assert first, "the column-major forward returns a saved value in another layout"
    assert looked_at == [None, first, first]
