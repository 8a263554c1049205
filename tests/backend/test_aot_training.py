"""Training through pyjit's backend: outputs and every gradient equal eager autograd.

Graphs are compiled by ``compile_fx`` (the joint graph, min-cut partition and
``torch.autograd.Function`` of ``pyjit/backend/aot``) on CPU with generated Triton kernels run by
Triton's interpreter (the ``device`` fixture), and on CUDA when available.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit.backend.aot import partition as aot_partition

from .conftest import compile_graph


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def check_training(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], *, loss: Callable[[Any], torch.Tensor]
                   | None = None, seed: int | None = None, atol: float = 1e-4, rtol: float = 1e-4) -> Any:
    """Compile ``fn`` (a function or module) and compare outputs, input grads, parameter grads
    and mutated inputs with eager; returns the compiled callable."""
    ref_fn = copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn
    ref_inputs = [_leaf(t) for t in inputs]
    gm = torch.fx.symbolic_trace(fn) if not isinstance(fn, torch.fx.GraphModule) else fn
    compiled = compile_graph(gm, list(inputs))
    loss = loss or (lambda out: sum(o.float().sum() for o in torch.utils._pytree.tree_leaves(out)
                                    if isinstance(o, torch.Tensor) and o.requires_grad))
    if seed is not None:
        torch.manual_seed(seed)
    expected = ref_fn(*ref_inputs)
    if seed is not None:
        torch.manual_seed(seed)
    actual = compiled(*inputs)
    for e, a in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
        assert a.requires_grad == e.requires_grad
    loss(expected).backward()
    loss(actual).backward()
    for e, a in zip(ref_inputs, inputs):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)  # mutated inputs
        if e.grad is None:
            assert a.grad is None
        else:
            torch.testing.assert_close(a.grad, e.grad, atol=atol, rtol=rtol)
    if isinstance(fn, nn.Module):
        ref_params = dict(ref_fn.named_parameters())
        for name, p in gm.named_parameters():
            q = ref_params[name]
            assert (p.grad is None) == (q.grad is None), name
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, atol=atol, rtol=rtol, msg=name)
        ref_buffers = dict(ref_fn.named_buffers())
        for name, b in gm.named_buffers():
            if name in ref_buffers:  # batch-norm running stats updated as eager
                torch.testing.assert_close(b, ref_buffers[name], atol=atol, rtol=rtol, msg=name)
    assert aot_partition.last_report is not None
    report = aot_partition.last_report
    assert report.min_cut_bytes <= report.reference_bytes
    return compiled


class MLP(nn.Module):
    """Residual MLP with layer norm and GELU."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    """A GPT-2 style block: pre-norm causal self-attention and a GELU MLP, dropout."""

    def __init__(self, d: int = 16, heads: int = 2, p: float = 0.0, t: int = 8) -> None:
        super().__init__()
        self.heads, self.d = heads, d
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).tril())
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape[0], self.mask.shape[0], self.d
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = torch.softmax(att.masked_fill(~self.mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


def test_mlp_residual_layer_norm(device: str) -> None:
    model = MLP().to(device)
    check_training(model, [torch.randn(4, 16, device=device, requires_grad=True)])
    assert backend.metrics.compiled_graphs >= 2  # forward and (lazily) backward


def test_gpt2_block(device: str) -> None:
    torch.manual_seed(0)
    check_training(Block().to(device), [torch.randn(2, 8, 16, device=device)])


def test_gpt2_block_with_tiled_transposes(device: str) -> None:
    """64 tokens, heads of 16: the saved k^T copies are transposes large enough for 2-D tiles,
    and one tiled kernel recomputes a node it also stores (wrong gradients before the fix in
    ``TritonKernel._recompute``)."""
    torch.manual_seed(0)
    check_training(Block(d=32, heads=2, t=64).to(device), [torch.randn(2, 64, 32, device=device)])


def test_dropout_same_mask_forward_and_backward(device: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.GELU(), nn.Dropout(0.3)).to(device)
    x = torch.randn(8, 16, device=device, requires_grad=True)
    check_training(model, [x], seed=123)
    report = aot_partition.last_report
    assert report is not None and not any("bernoulli" in str(r) or "dropout" in str(r) for r in report.recomputed)


def test_conv_batch_norm_relu_train_mode(device: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).to(device).train()
    check_training(model, [torch.randn(2, 3, 6, 6, device=device)])


def test_running_statistics_written_back_in_one_fused_copy(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several batch norms trained through ``pyjit.jit``: their running statistics (mutated
    inputs without grad) are written back by one ``_foreach_copy_`` per dtype, and every
    buffer and gradient equals eager's after three steps."""
    import pyjit

    calls: list[list[torch.dtype]] = []
    fused = torch._foreach_copy_

    def counting(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
        calls.append([t.dtype for t in dst])
        fused(dst, src)

    monkeypatch.setattr(torch, "_foreach_copy_", counting)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)).to(device).train()
    ref = copy.deepcopy(model)
    jitted = pyjit.jit(model)
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6, device=device)
        jitted(x).sum().backward()
        ref(x).sum().backward()
    for (name, got), (_, want) in zip([*model.state_dict().items(), *((n, p.grad) for n, p in model.named_parameters())],
                                      [*ref.state_dict().items(), *((n, p.grad) for n, p in ref.named_parameters())]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=name)
    assert [torch.float32] * 4 in calls, calls  # two means and two variances in one call


def test_write_back_keeps_order_when_a_value_reads_a_written_input(device: str) -> None:
    """``a.copy_(b); b.add_(1)``: ``a``'s new value is ``b``'s old memory, so the write-backs
    stay ordered copies (a fused copy could read ``b`` after writing it)."""
    def fn(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.copy_(b)
        b.add_(1)
        return (x * a).sum()

    x = torch.randn(4, device=device, requires_grad=True)
    check_training(fn, [x, torch.zeros(4, device=device), torch.arange(4.0, device=device)])


def test_cross_entropy_loss(device: str) -> None:
    logits = torch.randn(6, 5, device=device, requires_grad=True)
    target = torch.randint(0, 5, (6,), device=device)
    check_training(lambda lg, t: F.cross_entropy(lg, t), [logits, target])


def test_outputs_not_requiring_grad_and_none_grads(device: str) -> None:
    def fn(x: torch.Tensor, unused: torch.Tensor, w: torch.Tensor) -> Any:
        y = x * w
        return y.sum(), y.detach() * 2, y.argmax(dim=1), (w > 0), x.detach()

    x = torch.randn(4, 5, device=device, requires_grad=True)
    unused = torch.randn(3, device=device, requires_grad=True)
    w = torch.randn(5, device=device)  # no grad
    compiled = check_training(fn, [x, unused, w])
    out = compiled(x, unused, w)
    assert [o.requires_grad for o in out] == [True, False, False, False, False]
    assert out[4].data_ptr() == x.data_ptr()  # x.detach() aliases x, as in eager
    assert unused.grad is None and w.grad is None


def test_in_place_ops_on_activations(device: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        y.mul_(2).add_(1)
        y[0].zero_()  # in place on a view of an activation
        z = torch.sin(y)
        z.add_(y)
        return z

    check_training(fn, [torch.randn(4, 6, device=device, requires_grad=True),
                        torch.randn(6, 3, device=device, requires_grad=True)])


def test_mutated_input_not_requiring_grad(device: str) -> None:
    def fn(x: torch.Tensor, counter: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        counter.add_(1)
        return (x * w * counter).tanh()

    check_training(fn, [torch.randn(4, 3, device=device, requires_grad=True), torch.zeros(3, device=device),
                        torch.randn(3, device=device, requires_grad=True)])


def test_inputs_that_are_views_and_aliased_outputs(device: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> Any:
        return (x * w).sin(), x[0], x.view(-1)

    base = torch.randn(5, 4, device=device, requires_grad=True)
    w = torch.randn(4, device=device, requires_grad=True)
    x = base[1:]  # a non-leaf view input
    ref_base, ref_w = _leaf(base), _leaf(w)
    compiled = compile_graph(torch.fx.symbolic_trace(fn), [x, w])
    out = compiled(x, w)
    exp = fn(ref_base[1:], ref_w)
    for a, e in zip(out, exp):
        torch.testing.assert_close(a, e)
    assert out[1].data_ptr() == x[0].data_ptr() and out[2].data_ptr() == x.data_ptr()  # aliases as eager
    (out[0].sum() + 2 * out[1].sum() + 3 * out[2].sum()).backward()
    (exp[0].sum() + 2 * exp[1].sum() + 3 * exp[2].sum()).backward()
    torch.testing.assert_close(base.grad, ref_base.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)


def test_grad_enabled_inference_and_no_grad_call(device: str) -> None:
    model = MLP().to(device).eval()
    x = torch.randn(3, 16, device=device)
    compiled = compile_graph(torch.fx.symbolic_trace(model), [x])
    compiled_bw = backend.metrics.compiled_graphs
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(compiled(x), expected)
    out = compiled(x)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad
    assert backend.metrics.compiled_graphs == compiled_bw  # the backward is never compiled


def test_double_backward_raises_clear_error(device: str) -> None:
    x = torch.randn(4, device=device, requires_grad=True)
    compiled = compile_graph(torch.fx.symbolic_trace(lambda a: (a * a).sin()), [x])
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
    (g,) = torch.autograd.grad(compiled(x).sum(), x)  # first order still works
    torch.testing.assert_close(g, 2 * x.detach() * torch.cos(x.detach() * x.detach()))


@pytest.mark.parametrize("model", ["mlp", "gpt2_block"])
def test_cpu_cpp_backend(model: str, tmp_path: Any) -> None:
    """The default CPU path (C++ kernels) on forward and backward graphs, internal errors raised."""
    from pyjit import config as cfg
    from pyjit.runtime import cpp_build

    if cpp_build.compiler() is None:
        pytest.skip("no working C++ compiler")
    torch.manual_seed(0)
    module, x = (MLP(), torch.randn(4, 16, requires_grad=True)) if model == "mlp" else (Block(), torch.randn(2, 8, 16))
    with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True, cache_dir=str(tmp_path)):
        backend.metrics.reset()
        check_training(module, [x])


def _state(compiled: Callable[..., Any]) -> Any:
    return compiled.pyjit_state  # type: ignore[attr-defined]


def test_deferred_saving_grad_inference_then_training(device: str) -> None:
    """Grad-enabled inference runs the forward without saved values (the saving forward is never
    compiled); the first backward replays it, later calls save in the forward; every gradient
    equals eager across the switch."""
    model = MLP().to(device)
    ref = copy.deepcopy(model)
    x = torch.randn(3, 16, device=device)
    before = backend.metrics.compiled_graphs
    compiled = compile_graph(torch.fx.symbolic_trace(model), [x])
    state = _state(compiled)
    assert state.inference_fw is not None and state.fw is None
    for _ in range(3):  # inference with grad enabled: one graph compiled, nothing else
        out = compiled(x)
        torch.testing.assert_close(out, ref(x), atol=1e-4, rtol=1e-4)
        assert out.requires_grad
    assert backend.metrics.compiled_graphs == before + 1 and state.fw is None
    for step in range(3):  # step 0 replays the forward in the backward; steps 1-2 save in it
        model.zero_grad()
        ref.zero_grad()
        xs = torch.randn(3, 16, device=device)
        (compiled(xs) * (step + 1)).sum().backward()
        (ref(xs) * (step + 1)).sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
        assert state.inference_fw is None and state.fw is not None
    assert backend.metrics.compiled_graphs == before + 3  # inference fw, saving fw, backward


def test_deferred_saving_outstanding_forward_after_switch(device: str) -> None:
    """Two forwards before any backward: both saved only inputs; their backwards (the second after
    the switch to the saving forward) each replay correctly."""
    w = torch.randn(8, 8, device=device, requires_grad=True)
    fn = torch.fx.symbolic_trace(lambda a, b: torch.tanh(a @ b).exp())
    xs = [torch.randn(4, 8, device=device) for _ in range(2)]
    compiled = compile_graph(fn, [xs[0], w])
    outs = [compiled(x, w) for x in xs]
    for x, out in zip(xs, outs):
        (g,) = torch.autograd.grad(out.sum(), w)
        w_ref = w.detach().clone().requires_grad_()
        (g_ref,) = torch.autograd.grad(torch.tanh(x @ w_ref).exp().sum(), w_ref)
        torch.testing.assert_close(g, g_ref, atol=1e-4, rtol=1e-4)


def test_deferred_saving_input_modified_in_place_raises(device: str) -> None:
    """The deferred forward saves its inputs: modifying one in place before the backward is
    autograd's usual error, never a gradient computed from the new value."""
    w = torch.randn(8, device=device, requires_grad=True)
    x = torch.randn(8, device=device)
    compiled = compile_graph(torch.fx.symbolic_trace(lambda a, b: (a * b).sin()), [x, w])
    out = compiled(x, w)
    x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_graphs_that_cannot_replay_always_save(device: str) -> None:
    """Random ops (dropout) and mutated inputs (train-mode batch norm) keep the saving forward."""
    torch.manual_seed(0)
    block = Block(p=0.5).to(device).train()
    x = torch.randn(2, 8, 16, device=device)
    compiled = compile_graph(torch.fx.symbolic_trace(block), [x])
    assert _state(compiled).inference_fw is None and _state(compiled).fw is not None
    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(device).train()
    img = torch.randn(2, 3, 6, 6, device=device)
    compiled = compile_graph(torch.fx.symbolic_trace(bn), [img])
    assert _state(compiled).inference_fw is None and _state(compiled).fw is not None


@pytest.mark.parametrize("training", [True, False])
def test_modules_in_training_mode_save_at_once(device: str, training: bool) -> None:
    """Through the frontend, a graph traced from a module in training mode compiles its saving
    forward on the first call (a training loop compiles one forward, not two); a module in eval
    mode defers saving (grad-enabled inference). Gradients equal eager's either way."""
    import pyjit

    pyjit.reset()
    model = MLP().to(device).train(training)
    ref = copy.deepcopy(model)
    x = torch.randn(3, 16, device=device)
    jitted = pyjit.jit(model)
    before = backend.metrics.compiled_graphs
    out = jitted(x)
    assert backend.metrics.compiled_graphs == before + 1
    out.sum().backward()
    ref(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
    # Training: the saving forward and the backward. Eval: the inference forward, then the
    # saving forward and the backward at the first backward.
    assert backend.metrics.compiled_graphs == before + (2 if training else 3)
    pyjit.reset()


def test_deferred_saving_off(device: str) -> None:
    from pyjit import config as cfg

    model = MLP().to(device)
    x = torch.randn(3, 16, device=device)
    with cfg.patch(aot_defer_saving=False):
        compiled = check_training(model, [x])
    assert _state(compiled).inference_fw is None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RopeAttention(nn.Module):
    """Llama-style attention: heads split by ``view(...).transpose(1, 2)``, a rotary-like
    pointwise on q/k (eager keeps the transposed strides), a cat onto an empty cache tensor,
    fused attention, and the ``transpose(1, 2).reshape`` back. The saving forward's outputs
    (saved activations) must have eager's strides: the backward graph views them."""

    def __init__(self, b: int = 2, t: int = 8, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.b, self.t, self.heads, self.d = b, t, heads, d
        self.register_buffer("empty", torch.zeros(b, heads, 0, d // heads))  # an empty cache, as DynamicCache
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(self.d, dim=2)
        q = q.view(self.b, self.t, self.heads, -1).transpose(1, 2)
        k = k.view(self.b, self.t, self.heads, -1).transpose(1, 2)
        v = v.view(self.b, self.t, self.heads, -1).transpose(1, 2)
        q, k = q * cos + _rotate_half(q), k * cos + _rotate_half(k)
        k = torch.cat([self.empty, k], dim=-2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(self.b, self.t, -1))


def test_saved_values_keep_eager_strides(device: str) -> None:
    """Regression (transformers Llama/Mistral/Qwen2/Gemma/Mixtral training): a saved value
    realized contiguous, an attention output following its inputs' strides and a cat that is a
    view of its one non-empty part had other strides than the joint trace gave them, and the
    backward's ``view`` of them failed (compiled and as captured)."""
    torch.manual_seed(0)
    model = RopeAttention().to(device)
    check_training(model, [torch.randn(2, 8, 32, device=device), torch.randn(8, 16, device=device)])


def test_outputs_have_eager_strides(device: str) -> None:
    """Every dense output of a compiled graph has eager's strides, whatever layout the backend
    realized the value in first (several readers, an extern, a cat of an empty tensor)."""
    def f(x: torch.Tensor) -> Any:
        q = x.transpose(1, 2) * 2  # eager: the transposed strides
        s = q.sum(-1)  # a second reader: realized before the output is seen
        c = torch.cat([x.new_zeros(2, 4, 0, 16), q], dim=2)  # eager: a new contiguous tensor
        a = F.scaled_dot_product_attention(q + 1, q, q)  # extern fed a contiguous buffer
        return q, s, c, a

    x = torch.randn(2, 8, 4, 16, device=device)
    compiled = compile_graph(f, [x])
    for e, a in zip(f(x), compiled(x)):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride()


class BiasedAttention(nn.Module):
    """T5/Swin-style attention: a learned additive bias (a parameter: it requires grad) as
    ``attn_mask`` of ``scaled_dot_product_attention``."""

    def __init__(self, d: int = 16, heads: int = 2, t: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, heads, t, t))
        self.lin = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.lin(x)
        return F.scaled_dot_product_attention(q, q.sin(), q, attn_mask=self.bias)


def test_attention_with_a_mask_that_requires_grad(device: str) -> None:
    """Regression (transformers T5, Swin training): the forward trace ran under ``no_grad``, so
    the composite attention picked the CPU flash kernel, which has no gradient for the mask, and
    the graph ran as captured; traced with the inputs' requires_grad it takes eager's math path
    and the mask gets its gradient."""
    torch.manual_seed(0)
    check_training(BiasedAttention().to(device), [torch.randn(2, 2, 8, 16, device=device)])


def test_flip_in_a_training_graph(device: str) -> None:
    """Regression: ``flip`` decomposes to ``prims.rev``, which has no autograd formula; the
    forward-only trace keeps it whole so autograd differentiates it (the graph used to fail)."""
    torch.manual_seed(0)
    check_training(torch.fx.symbolic_trace(lambda x, w: (x @ w).flip(-1).tanh() * x.flip(0)),
                   [torch.randn(4, 8, device=device, requires_grad=True),
                    torch.randn(8, 8, device=device, requires_grad=True)])


class MaskedShortAttention(nn.Module):
    """BART/Whisper decoder attention over 5 positions: an additive mask of 5 columns built in
    the graph, or (``permuted``) a Swin-style learned bias read through a permutation."""

    def __init__(self, d: int = 16, heads: int = 2, t: int = 5, permuted: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.t = t
        self.bias = nn.Parameter(torch.randn(t, t, heads)) if permuted else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.lin(x)
        t = self.t
        if self.bias is not None:
            mask = self.bias.permute(2, 0, 1).unsqueeze(0)  # last dimension of stride `heads`
        else:
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            mask = torch.zeros(2, 1, t, t, device=x.device).masked_fill(causal, -1e4)
        return F.scaled_dot_product_attention(q, q.cos(), q, attn_mask=mask)


@pytest.mark.parametrize("permuted", [False, True], ids=["mask_5_columns", "permuted_bias"])
def test_attention_bias_rows_not_aligned(device: str, permuted: bool) -> None:
    """Regression (transformers BART, Whisper, Wav2Vec2 training, Swin on CUDA): the
    memory-efficient attention kernels need the bias rows 16-byte aligned and its last
    dimension contiguous; eager pads the mask, pyjit realized it with rows of 5 (the backward
    raised). The bias is now copied into padded rows when its strides are not so."""
    torch.manual_seed(0)
    check_training(MaskedShortAttention(permuted=permuted).to(device), [torch.randn(2, 2, 5, 16, device=device)])


@pytest.mark.parametrize("channels_last", [True, False])
def test_global_average_pooling_trains_without_a_functionalizing_retrace(channels_last: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """ATen's global average pooling of a channels-last input restrides its mean in place
    (``as_strided_``); the joint trace takes it as a clone into channels-last, so the backward
    has no in-place op and the joint graph is not traced a second time to functionalize it.
    The pooled output keeps eager's strides."""
    from pyjit.backend.aot import joint

    retraces: list[int] = []
    original = joint._functionalize

    def counting(*args: Any, **kwargs: Any) -> Any:
        retraces.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(joint, "_functionalize", counting)

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pooled = F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
            return pooled, self.fc(pooled.flatten(1))

    torch.manual_seed(0)
    model = Head()
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    compiled = check_training(model, [x])
    pooled, _ = compiled(x)
    expected, _ = Head.forward(model, x)
    assert pooled.stride() == expected.stride()
    assert not retraces


def test_training_graphs_are_lowered_as_the_joint_trace_made_them() -> None:
    """The forward and backward of a partition are functional aten graphs with traced values:
    compile_fx lowers them without tracing them again, with the same results."""
    from pyjit import config as cfg

    backend.metrics.reset()
    torch.manual_seed(0)
    with cfg.patch(backend_disk_cache=False, aot_defer_saving=False):  # lowered here, not read from the cache
        check_training(MLP(), [torch.randn(4, 16, requires_grad=True)])
    assert backend.metrics.traced_already == 2


def test_a_graph_with_random_ops_is_traced_again() -> None:
    """Random ops draw in eager's element order only when traced before functionalization."""
    from pyjit import config as cfg

    backend.metrics.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x.sin(), 0.5, training=True) * 2

    with cfg.patch(backend_disk_cache=False, aot_defer_saving=False):
        check_training(f, [torch.randn(64, requires_grad=True)], seed=3)
    assert backend.metrics.compiled_graphs == 2
    assert backend.metrics.traced_already == 1  # the backward has no random op
