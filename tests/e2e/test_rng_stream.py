"""Random ops draw the same numbers as eager in a seeded program (docs/training.md, RNG).

A random op is an extern call to torch's generator, so matching eager needs every draw made,
in program order: an unused dropout still moves the generator (it was dead code, so every
later mask differed), and a dropout independent of earlier ones must not be scheduled ahead of
them (BART's decoder embedding dropout ran before the encoder's, so its language-model loss and
every gradient differed from eager's), and each number must land on the element eager puts it
on (a fill draws in the memory order of the tensor it fills). Compared on outputs, grads and the
generator's next number after the call.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pyjit


def _unused_dropout(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    F.dropout(x, 0.5, training=True)  # nothing reads it; eager still draws its mask
    return F.dropout(y, 0.5, training=True) * 2


@pytest.mark.parametrize("requires_grad", [False, True])
def test_an_unused_random_op_still_draws(fresh_pyjit: Any, requires_grad: bool) -> None:
    x = torch.randn(32, 32)
    y = torch.randn(32, 32, requires_grad=requires_grad)
    jitted = pyjit.jit(_unused_dropout)
    torch.manual_seed(0)
    expected, expected_next = _unused_dropout(x, y), torch.rand(4)
    torch.manual_seed(0)
    got, got_next = jitted(x, y), torch.rand(4)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_next, expected_next)
    if requires_grad:
        (gy,) = torch.autograd.grad(got.sum(), y)
        (ey,) = torch.autograd.grad(expected.sum(), y)
        torch.testing.assert_close(gy, ey)


def test_bart_training_step_with_dropout_matches_eager(fresh_pyjit: Any) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BartConfig(encoder_layers=2, decoder_layers=2, d_model=32, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,
                                  max_position_embeddings=64, dropout=0.1)
    model = transformers.BartForConditionalGeneration(cfg).train()
    ref = copy.deepcopy(model)

    def step(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    ids = torch.randint(2, 64, (2, 8))
    torch.manual_seed(1)
    got, got_next = pyjit.jit(step)(model, ids), torch.rand(4)
    torch.manual_seed(1)
    expected, expected_next = step(ref, ids), torch.rand(4)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_next, expected_next)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if p.grad is not None or q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


_LAYOUTS = {
    "transposed": lambda: torch.randn(4, 3).t(),
    "permuted_3d": lambda: torch.randn(5, 2, 3).permute(2, 0, 1),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "contiguous": lambda: torch.randn(3, 4),
}
_FILLS = {
    "dropout": lambda x: F.dropout(x, p=0.3, training=True),
    "bernoulli_": lambda x: torch.empty_like(x).bernoulli_(0.6) * x,
    "uniform_": lambda x: torch.empty_like(x).uniform_() + x,
    "normal_": lambda x: torch.empty_like(x).normal_() * x,
    "exponential_": lambda x: torch.empty_like(x).exponential_() - x,
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("fill", list(_FILLS))
def test_random_fill_follows_the_input_layout(fresh_pyjit: Any, layout: str, fill: str) -> None:
    """An in-place random fill (eager's dropout: ``empty_like(x).bernoulli_(p)``) draws in the
    memory order of the tensor it fills, which has ``x``'s strides; functionalization made it an
    out-of-place op drawing into a contiguous buffer (a transposed input got another mask)."""
    fn = _FILLS[fill]
    x = _LAYOUTS[layout]()
    torch.manual_seed(0)
    expected, expected_next = fn(x), torch.rand(4)
    torch.manual_seed(0)
    got, got_next = pyjit.jit(fn)(x), torch.rand(4)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_next, expected_next)
