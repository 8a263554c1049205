"""Extern kernels whose output layout follows their inputs' strides (CPU flash attention
follows ``query``): the wrapper must view the output as the kernel actually lays it out, also
when lowering realized a strided input into a contiguous buffer. (A Llama model gave wrong
results through pyjit's backend before this was fixed.)"""
import pytest
import torch
import torch.nn.functional as F

import pyjit

pytestmark = pytest.mark.usefixtures("fresh_pyjit")


def attention_after_pointwise_on_a_transposed_query(x, k, v):
    q = (x * 2 + 1).transpose(1, 2)  # eager: (b, h, t, d) with (b, t, h, d) strides
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    return o.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1), o


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
def test_extern_output_layout_follows_the_passed_inputs(cpu_backend, monkeypatch):
    from pyjit.config import config

    monkeypatch.setattr(config, "cpu_backend", cpu_backend)
    torch.manual_seed(0)
    x = torch.randn(2, 8, 2, 16)
    k = torch.randn(2, 8, 2, 16).transpose(1, 2)
    v = torch.randn(2, 2, 8, 16)
    fn = attention_after_pointwise_on_a_transposed_query
    with torch.no_grad():
        expected = fn(x, k, v)
        got = pyjit.jit(fn)(x, k, v)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
