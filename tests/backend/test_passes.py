"""The aten-graph passes (pyjit/backend/passes): hand-written attention -> fused SDPA, and eval
batch norm folded into the convolution before it.

Every case runs through pyjit's frontend and backend (``pyjit.jit(fn, backend="pyjit")``) on
both CPU code generators (``cpp`` and ``triton_interpret``), compares with eager PyTorch, and
checks in ``pyjit.backend.metrics`` that the pass rewrote (or refused, with its reason) what it
should. A few structural checks (``is_causal``, the mask passed to the fused op) look at the
aten graph after ``run_passes`` directly.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit
import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.compile_fx import trace_to_aten
from pyjit.backend.passes import run_passes
from pyjit.backend.passes.attention import FUSED_ATTENTION

aten = torch.ops.aten
# CPU code generators, and CUDA (compiled Triton) where a GPU is present.
TARGETS = ["cpp", "triton_interpret"] + (["cuda"] if torch.cuda.is_available() else [])
_DEVICE = {"now": "cpu"}  # the current target's device: run_jit / run_module move inputs there


@pytest.fixture(params=TARGETS)
def target(request: Any, tmp_path_factory: Any) -> Iterator[str]:
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache-passes"
    cpu = request.param if request.param != "cuda" else "cpp"
    _DEVICE["now"] = "cuda" if request.param == "cuda" else "cpu"
    # No disk graph cache: a warm graph would skip the passes and their metrics.
    # The conv+BN scale fold is off by default (config.backend_fold_conv_bn); these tests check
    # it on, test_fold_off_by_default_moves_only_the_bias checks the default.
    with cfg.patch(cpu_backend=cpu, raise_on_internal_error=True, backend_disk_cache=False, cache_dir=str(cache),
                   backend_fold_conv_bn=True):
        backend.metrics.reset()
        yield request.param
    _DEVICE["now"] = "cpu"


def _cpu_only(target: str) -> None:
    if target == "cuda":
        pytest.skip("graph-level behaviour, checked on the CPU targets")


def _clone(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _moved(x: Any) -> Any:
    return x.to(_DEVICE["now"]) if isinstance(x, (torch.Tensor, nn.Module)) else x


def run_jit(fn: Callable[..., Any], *inputs: Any, atol: float = 1e-5, rtol: float = 1e-5) -> Any:
    """Run ``fn`` eagerly and through pyjit's backend on the target's device; assert equal
    results (NaNs included). Returns pyjit's result on the CPU."""
    fn, inputs = _moved(fn), tuple(_moved(i) for i in inputs)
    expected = fn(*[_clone(i) for i in inputs])
    pyjit.reset()
    backend.metrics.reset()
    actual = pyjit.jit(fn, backend="pyjit", fullgraph=True)(*inputs)
    assert backend.metrics.compiled_graphs == 1, backend.metrics
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs
    exp_leaves = torch.utils._pytree.tree_leaves(expected)
    act_leaves = torch.utils._pytree.tree_leaves(actual)
    assert len(exp_leaves) == len(act_leaves)
    for e, a in zip(exp_leaves, act_leaves):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
    return torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)


def passes_graph(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    """The aten graph of ``fn`` after ``run_passes`` (no lowering)."""
    backend.metrics.reset()
    gm, _ = trace_to_aten(torch.fx.symbolic_trace(fn), list(inputs))
    return run_passes(gm)


def fused_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in FUSED_ATTENTION]


def qkv(b: int = 2, h: int = 3, lq: int = 8, s: int = 8, d: int = 16, dtype: torch.dtype = torch.float32,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, h, lq, d, generator=g, dtype=dtype), torch.randn(b, h, s, d, generator=g, dtype=dtype),
            torch.randn(b, h, s, d, generator=g, dtype=dtype))


def _assert_rewritten(n: int = 1) -> None:
    assert backend.metrics.attention_rewrites == n, backend.metrics.attention_skipped


def _assert_refused(reason: str) -> None:
    assert backend.metrics.attention_rewrites == 0
    assert any(reason in r for r in backend.metrics.attention_skipped), backend.metrics.attention_skipped


# ----------------------------------------------------------------------------- attention: spellings
def attn_div_sqrt(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def attn_mul_scale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (q @ k.transpose(-2, -1) * 0.125).softmax(-1) @ v


def attn_prescaled_q(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q = q * q.shape[-1] ** -0.5
    return F.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


def attn_torch_matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(2, 3)) / 4.0
    return torch.matmul(torch.nn.functional.softmax(scores, dim=3), v)


def attn_three_d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)
    return torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.25, -1), v)


@pytest.mark.parametrize("fn", [attn_div_sqrt, attn_mul_scale, attn_prescaled_q, attn_torch_matmul, attn_three_d])
def test_attention_spellings(target: str, fn: Callable[..., Any]) -> None:
    run_jit(fn, *qkv())
    _assert_rewritten()


def test_attention_scale_passed(target: str) -> None:
    gm = passes_graph(attn_mul_scale, *qkv())
    (call,) = fused_calls(gm)
    assert _arg(call, "scale") == pytest.approx(0.125)


def test_attention_bf16(target: str) -> None:
    run_jit(attn_div_sqrt, *qkv(dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    _assert_rewritten()


def test_attention_bf16_fp32_softmax(target: str) -> None:
    """The common mixed-precision spelling: softmax in fp32, weights cast back before ``@ v``."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * 0.25
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v

    run_jit(fn, *qkv(dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    _assert_rewritten()


def test_attention_rewritten_twice(target: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = attn_div_sqrt(q, k, v)
        return attn_mul_scale(y, k, v)

    run_jit(fn, *qkv())
    _assert_rewritten(2)


# ----------------------------------------------------------------------------- attention: masks
def _unaligned_on_cuda(target: str, s: int, dtype: torch.dtype = torch.float32) -> bool:
    """On CUDA a mask whose rows are not 16-byte aligned is refused (see attention._replace)."""
    return target == "cuda" and (s * torch.empty((), dtype=dtype).element_size()) % 16 != 0


@pytest.mark.parametrize("s", [10, 16])
def test_additive_float_mask(target: str, s: int) -> None:
    q, k, v = qkv(s=s)
    mask = torch.randn(2, 1, 8, s)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * 0.25 + m, dim=-1) @ v

    run_jit(fn, q, k, v, mask)
    if _unaligned_on_cuda(target, s):
        _assert_refused("not 16-byte aligned")
    else:
        _assert_rewritten()


def test_additive_mask_with_neg_inf_rows(target: str) -> None:
    """An additive mask whose rows are all -inf: eager's softmax gives NaN rows; so must we."""
    q, k, v = qkv()
    mask = torch.zeros(8, 8)
    mask[2] = -math.inf
    mask[5, ::2] = -math.inf

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * 0.25 + m, dim=-1) @ v

    out = run_jit(fn, q, k, v, mask)
    assert out[:, :, 2].isnan().all() and not out[:, :, 5].isnan().any()
    _assert_rewritten()


def test_bool_masked_fill_neg_inf(target: str) -> None:
    q, k, v = qkv()
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(2, 1, 8, 8, generator=g) > 0.3
    keep[..., 0] = True  # no fully masked row here

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) / 4.0
        return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v

    run_jit(fn, q, k, v, keep)
    _assert_rewritten()


def test_bool_where_neg_inf(target: str) -> None:
    q, k, v = qkv()
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(2)) > 0.3
    keep[:, 3] = True

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = torch.where(keep, q @ k.transpose(-2, -1) / 4.0, torch.tensor(float("-inf"), device=q.device))
        return s.softmax(-1) @ v

    run_jit(fn, q, k, v, keep)
    _assert_rewritten()


@pytest.mark.parametrize("fill", ["-inf", "finfo_min"])
def test_fully_masked_rows(target: str, fill: str) -> None:
    """Rows with every key masked: NaN in eager with -inf, uniform weights with finfo.min."""
    q, k, v = qkv()
    keep = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(3)) > 0.5
    keep[0, :, 1] = False
    keep[1, :, 6] = False
    value = float("-inf") if fill == "-inf" else torch.finfo(torch.float32).min

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * 0.25
        return s.masked_fill(keep.logical_not(), value).softmax(-1) @ v

    out = run_jit(fn, q, k, v, keep)
    if fill == "-inf":
        assert out[0, :, 1].isnan().all() and out[1, :, 6].isnan().all()
    else:
        torch.testing.assert_close(out[0, :, 1], v[0].mean(-2).expand_as(out[0, :, 1]))
    assert not out[0, :, 0].isnan().any()
    _assert_rewritten()


def test_finfo_min_soft_fill_bf16(target: str) -> None:
    q, k, v = qkv(dtype=torch.bfloat16)
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(4)) > 0.4
    keep[4] = False

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * 0.25
        s = s.masked_fill(~keep, torch.finfo(s.dtype).min)
        return torch.softmax(s.float(), -1).to(s.dtype) @ v

    run_jit(fn, q, k, v, keep, atol=2e-2, rtol=2e-2)
    _assert_rewritten()


def _causal_fn(lq: int, s: int) -> Callable[..., torch.Tensor]:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        causal = torch.tril(torch.ones(lq, s, dtype=torch.bool, device=q.device))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
    return fn


def _arg(call: torch.fx.Node, name: str) -> Any:
    """Argument ``name`` of a call of an aten op, positional or keyword (None when absent)."""
    for i, a in enumerate(call.target._schema.arguments):
        if a.name == name:
            if name in call.kwargs:
                return call.kwargs[name]
            return call.args[i] if i < len(call.args) else a.default_value
    return None


def _is_causal(call: torch.fx.Node) -> bool:
    return bool(_arg(call, "is_causal"))


@pytest.mark.parametrize("lq,s", [(8, 8), (6, 10), (10, 6)])
def test_causal_tril(target: str, lq: int, s: int) -> None:
    """A constant ``tril`` mask becomes ``is_causal`` for L == S; for L != S (where kernels have
    disagreed on the diagonal's alignment) the constant mask is passed as it is."""
    q, k, v = qkv(lq=lq, s=s)
    run_jit(_causal_fn(lq, s), q, k, v)
    if lq != s and _unaligned_on_cuda(target, s):
        _assert_refused("not 16-byte aligned")
    else:
        _assert_rewritten()
    (call,) = fused_calls(passes_graph(_causal_fn(lq, s), q, k, v))
    assert _is_causal(call) == (lq == s), call
    assert (_arg(call, "attn_mask") is None) == (lq == s), call


def test_causal_float_mask_triu(target: str) -> None:
    """The additive spelling: ``triu(full(-inf), 1)`` added to the scores."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = torch.triu(torch.full((8, 8), float("-inf"), device=q.device), diagonal=1)
        return torch.softmax(q @ k.transpose(-2, -1) * 0.25 + mask, -1) @ v

    run_jit(fn, *qkv())
    _assert_rewritten()


def test_constant_non_causal_mask(target: str) -> None:
    """A constant mask that is *not* the causal pattern stays a mask (not is_causal)."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keep = torch.triu(torch.ones(8, 8, dtype=torch.bool, device=q.device))  # anti-causal
        s = (q @ k.transpose(-2, -1)) * 0.25
        return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v

    run_jit(fn, *qkv())
    _assert_rewritten()
    (call,) = fused_calls(passes_graph(fn, *qkv()))
    assert not _is_causal(call)


def test_fp16_soft_fill_fully_masked_rows(target: str) -> None:
    """fp16's finfo.min (-65504) is not absorbed by a score in the kernels' fp32 arithmetic:
    a fully masked row must still get eager's uniform weights."""
    q, k, v = qkv(dtype=torch.float16)
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(8)) > 0.4
    keep[3] = False

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * 0.25
        return s.masked_fill(~keep, torch.finfo(s.dtype).min).softmax(-1) @ v

    out = run_jit(fn, q, k, v, keep, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(out[:, :, 3], v.float().mean(-2).half(), atol=2e-3, rtol=2e-3)


def test_strided_qkv_then_view(target: str) -> None:
    """q/k/v are transposed views (as after a head split); the result is ``view``-ed, which
    needs the contiguous layout eager's matmul gave."""
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 8, 3, 16, generator=g) for _ in range(3))

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1) @ v
        return y.view(6, 8, 16).sum(0) + 1

    run_jit(fn, q, k, v)
    _assert_rewritten()


class LearnedScale(nn.Module):
    """Attention whose temperature and mask are module state."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.25))
        self.register_buffer("keep", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * self.scale
        return s.masked_fill(self.keep.logical_not(), float("-inf")).softmax(-1) @ v


def test_parameter_is_not_a_compile_time_constant(target: str) -> None:
    """In an fx-traced graph a parameter is a ``get_attr`` the compiled code reads by reference:
    an in-place update after compiling must be seen, so its value is never baked in."""
    _cpu_only(target)
    from tests.backend.conftest import compile_graph

    m = LearnedScale()
    q, k, v = qkv()
    backend.metrics.reset()

    def first(out: Any) -> torch.Tensor:
        return out[0] if isinstance(out, (list, tuple)) else out

    with torch.no_grad():
        compiled = compile_graph(torch.fx.symbolic_trace(m), [q, k, v])
        torch.testing.assert_close(first(compiled(q, k, v)), m(q, k, v))
        m.scale.fill_(0.7)
        torch.testing.assert_close(first(compiled(q, k, v)), m(q, k, v))
    assert backend.metrics.attention_rewrites == 0


def test_module_buffer_mask_updates(target: str) -> None:
    """Through pyjit's frontend the mask buffer is a graph input: rewritten, and a later
    in-place change of the buffer is honoured."""
    _cpu_only(target)
    m = LearnedScale()
    q, k, v = qkv()
    pyjit.reset()
    backend.metrics.reset()
    jm = pyjit.jit(m, backend="pyjit")
    with torch.no_grad():
        torch.testing.assert_close(jm(q, k, v), LearnedScale.forward(m, q, k, v), atol=1e-5, rtol=1e-5)
        m.keep.copy_(torch.rand(8, 8, generator=torch.Generator().manual_seed(10)) > 0.5)
        m.scale.fill_(0.5)
        torch.testing.assert_close(jm(q, k, v), LearnedScale.forward(m, q, k, v), atol=1e-5, rtol=1e-5,
                                   equal_nan=True)


def test_minus_1e9_fill_fully_masked_rows(target: str) -> None:
    """The annotated-transformer spelling ``masked_fill(mask == 0, -1e9)``: masked weights are 0,
    and a row with no key left is uniform (eager), not NaN."""
    q, k, v = qkv()
    mask = (torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(11)) > 0.5).int()
    mask[1, :, 2] = 0

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return F.softmax(s.masked_fill(mask == 0, -1e9), dim=-1) @ v

    out = run_jit(fn, q, k, v, mask)
    assert not out.isnan().any()
    _assert_rewritten()


def test_soft_fill_with_additive_mask_refused(target: str) -> None:
    q, k, v = qkv()
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(12)) > 0.5
    bias = torch.randn(8, 8)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, bias: torch.Tensor
           ) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * 0.25 + bias
        return s.masked_fill(~keep, -1e9).softmax(-1) @ v

    run_jit(fn, q, k, v, keep, bias)
    _assert_refused("combined with another mask")


def test_absorbing_fill_with_additive_mask(target: str) -> None:
    """fp32's finfo.min after an additive bias: exact as one additive mask (fully masked rows
    uniform as in eager)."""
    q, k, v = qkv()
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(13)) > 0.5
    keep[0] = False
    bias = torch.randn(8, 8)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, bias: torch.Tensor
           ) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * 0.25 + bias
        return s.masked_fill(~keep, torch.finfo(torch.float32).min).softmax(-1) @ v

    run_jit(fn, q, k, v, keep, bias)
    _assert_rewritten()


# ----------------------------------------------------------------------------- attention: refusals
def test_weights_also_returned_refused(target: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        return w @ v, w

    run_jit(fn, *qkv())
    _assert_refused("also used elsewhere")


def test_softmax_other_dim_refused(target: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-2) @ v

    run_jit(fn, *qkv())
    assert backend.metrics.attention_rewrites == 0


def test_mask_before_scale_refused(target: str) -> None:
    q, k, v = qkv()
    mask = torch.randn(8, 8)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.softmax((q @ k.transpose(-2, -1) + m) * 0.25, -1) @ v

    run_jit(fn, q, k, v, mask)
    _assert_refused("before the scale")


def test_non_constant_scale_not_rewritten(target: str) -> None:
    q, k, v = qkv()
    t = torch.tensor(0.3)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * t, -1) @ v

    run_jit(fn, q, k, v, t)
    assert backend.metrics.attention_rewrites == 0


def test_moderate_fill_refused(target: str) -> None:
    """``masked_fill(-1e4)`` is not -inf: exp(-1e4 - max) is 0 only when scores are small."""
    q, k, v = qkv()
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(5)) > 0.5

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)) * 0.25
        return s.masked_fill(~keep, -1e4).softmax(-1) @ v

    run_jit(fn, q, k, v, keep)
    _assert_refused("neither -inf")


# ----------------------------------------------------------------------------- attention: SDPA, dropout
@pytest.mark.parametrize("s", [10, 16])
@pytest.mark.parametrize("variant", ["plain", "causal", "bool_mask", "float_mask", "scale"])
def test_sdpa_direct(target: str, variant: str, s: int) -> None:
    if "mask" in variant and _unaligned_on_cuda(target, s):
        pytest.xfail("backend bug: the memory-efficient kernel's mask is computed into a dense buffer "
                     "with unaligned rows (torch pads it; the lowering drops the padding)")
    q, k, v = qkv(s=s)
    bool_mask = torch.rand(8, s, generator=torch.Generator().manual_seed(6)) > 0.3
    bool_mask[:, 0] = True
    float_mask = torch.randn(2, 3, 8, s)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bm: torch.Tensor, fm: torch.Tensor) -> torch.Tensor:
        if variant == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if variant == "bool_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bm)
        if variant == "float_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=fm)
        if variant == "scale":
            return F.scaled_dot_product_attention(q, k, v, scale=0.3)
        return F.scaled_dot_product_attention(q, k, v)

    run_jit(fn, q, k, v, bool_mask, float_mask)
    assert backend.metrics.attention_rewrites == 0  # already fused: nothing to rewrite
    assert not backend.metrics.attention_skipped


class MHA(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, p: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.drop = nn.Dropout(p)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = self.drop(att.softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


def test_eval_dropout_transparent(target: str) -> None:
    torch.manual_seed(0)
    m = MHA().eval()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        run_jit(m, x, atol=1e-5, rtol=1e-5)
    _assert_rewritten()


def test_train_dropout_not_rewritten(target: str) -> None:
    """Train-mode dropout on the weights draws random numbers: the graph is left alone."""
    _cpu_only(target)
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        return F.dropout(w, p=0.5, training=True) @ v

    q, k, v = qkv()
    pyjit.reset()
    backend.metrics.reset()
    out = pyjit.jit(fn, backend="pyjit", fullgraph=True)(q, k, v)
    assert backend.metrics.compiled_graphs == 1 and not backend.metrics.eager_graphs
    assert backend.metrics.attention_rewrites == 0
    assert out.shape == q.shape and out.isfinite().all()
    # p=1 drops everything: exactly zeros both ways.
    def drop_all(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        return F.dropout(w, p=1.0, training=True) @ v

    run_jit(drop_all, q, k, v)
    assert backend.metrics.attention_rewrites == 0


# ----------------------------------------------------------------------------- conv + batch norm
class ConvBN(nn.Module):
    def __init__(self, conv: nn.Module, bn: nn.Module, relu: bool = True, residual: bool = False) -> None:
        super().__init__()
        self.conv, self.bn, self.relu, self.residual = conv, bn, relu, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        if self.residual:
            y = y + x
        return torch.relu(y) if self.relu else y


def _randomize_bn(bn: nn.Module) -> nn.Module:
    """Non-trivial running stats and affine parameters (a fresh BN is the identity)."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        if getattr(bn, "running_mean", None) is not None:
            bn.running_mean.copy_(torch.randn(bn.num_features, generator=g) * 0.5)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
        if bn.affine:
            bn.weight.copy_(torch.randn(bn.num_features, generator=g))
            bn.bias.copy_(torch.randn(bn.num_features, generator=g))
    return bn


def run_module(m: nn.Module, x: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    """Run ``m`` and a copy through pyjit; outputs and buffers (running stats) must agree."""
    m, x = _moved(m), _moved(x)
    ref = copy.deepcopy(m)
    with torch.no_grad():
        expected = ref(x.clone())
        pyjit.reset()
        backend.metrics.reset()
        actual = pyjit.jit(m, backend="pyjit", fullgraph=True)(x)
    assert backend.metrics.compiled_graphs == 1, backend.metrics
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    for (name, b_ref), (_, b) in zip(ref.named_buffers(), m.named_buffers()):
        torch.testing.assert_close(b, b_ref, atol=1e-6, rtol=1e-6, msg=lambda s: f"buffer {name}: {s}")


def test_fold_off_by_default_moves_only_the_bias(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1, bias=True), _randomize_bn(nn.BatchNorm2d(4)), residual=True).eval()
    with cfg.patch(backend_fold_conv_bn=False):
        run_module(m, torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 0


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_conv2d_bn_relu_folded(target: str, bias: bool, residual: bool) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1, bias=bias), _randomize_bn(nn.BatchNorm2d(4)), residual=residual).eval()
    run_module(m, torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 1


def test_conv_bn_bf16_not_folded(target: str) -> None:
    """A bf16 batch norm computes in fp32 and rounds once: the chain changes dtype, so it is not
    folded into bf16 weights (which would round the scaled weights instead)."""
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(8, 8, 3, padding=1), _randomize_bn(nn.BatchNorm2d(8))).eval().to(torch.bfloat16)
    run_module(m, torch.randn(2, 8, 8, 8, dtype=torch.bfloat16), atol=5e-2, rtol=5e-2)
    assert backend.metrics.conv_bn_folds == 0


def test_grouped_conv_bn(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(6, 8, 3, padding=1, groups=2), _randomize_bn(nn.BatchNorm2d(8))).eval()
    run_module(m, torch.randn(2, 6, 7, 7))
    assert backend.metrics.conv_bn_folds == 1


def test_depthwise_strided_conv_bn(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),
               _randomize_bn(nn.BatchNorm2d(8))).eval()
    run_module(m, torch.randn(2, 8, 9, 9))
    assert backend.metrics.conv_bn_folds == 1


def test_conv1d_bn(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv1d(3, 5, 3), _randomize_bn(nn.BatchNorm1d(5))).eval()
    run_module(m, torch.randn(4, 3, 16))
    assert backend.metrics.conv_bn_folds == 1


def test_bn_train_mode_not_folded(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1), _randomize_bn(nn.BatchNorm2d(4))).train()
    run_module(m, torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 0


def test_bn_affine_false(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1), _randomize_bn(nn.BatchNorm2d(4, affine=False))).eval()
    run_module(m, torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 1


def test_bn_no_running_stats(target: str) -> None:
    """track_running_stats=False normalises with the batch's statistics even in eval: no fold."""
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1), _randomize_bn(nn.BatchNorm2d(4, track_running_stats=False))).eval()
    run_module(m, torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 0


def test_conv_transpose_bn_not_folded(target: str) -> None:
    torch.manual_seed(0)
    m = ConvBN(nn.ConvTranspose2d(4, 6, 3), _randomize_bn(nn.BatchNorm2d(6))).eval()
    run_module(m, torch.randn(2, 4, 5, 5))
    assert backend.metrics.conv_bn_folds == 0


def test_conv_output_also_used(target: str) -> None:
    """The convolution's output is read twice: folding would need the unfolded value too."""
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), _randomize_bn(nn.BatchNorm2d(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            return torch.relu(self.bn(y)) + y

    torch.manual_seed(0)
    run_module(Two().eval(), torch.randn(2, 4, 8, 8))
    assert backend.metrics.conv_bn_folds == 0


def test_folded_weights_follow_parameter_updates(target: str) -> None:
    """The fold is computed from the current parameters on every call, never baked in."""
    _cpu_only(target)
    torch.manual_seed(0)
    m = ConvBN(nn.Conv2d(4, 4, 3, padding=1), _randomize_bn(nn.BatchNorm2d(4))).eval()
    x = torch.randn(2, 4, 8, 8)
    pyjit.reset()
    backend.metrics.reset()
    jm = pyjit.jit(m, backend="pyjit")
    with torch.no_grad():
        jm(x)
        m.bn.running_var.mul_(3.0)
        m.bn.weight.add_(0.5)
        m.conv.weight.mul_(-1.0)
        torch.testing.assert_close(jm(x), ConvBN.forward(m, x), atol=1e-4, rtol=1e-4)
    assert backend.metrics.conv_bn_folds == 1


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-bn-relu, conv-bn, (downsample conv-bn) residual, relu."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def test_resnet_block(target: str) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      BasicBlock(8, 8), BasicBlock(8, 16, stride=2))
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            _randomize_bn(mod)
    run_module(m.eval(), torch.randn(2, 3, 12, 12))
    assert backend.metrics.conv_bn_folds == 6


# --------------------------------------------------------------------------- random fills
def test_bernoulli_fill_draws_in_the_memory_order_of_its_tensor(target: str) -> None:
    """Eager's dropout fills ``empty_like(x)`` (``x``'s strides) in memory order; the functional
    ``bernoulli.p`` it becomes allocates contiguously, so ``trace_to_aten`` first makes the fill
    go through a contiguous permuted view (passes/rng_order.py): same mask as eager."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p=0.3, training=True) + torch.empty_like(x).bernoulli_(0.5)

    x = _moved(torch.randn(5, 2, 3).permute(2, 0, 1))
    aten_gm, _ = trace_to_aten(torch.fx.symbolic_trace(fn), [x])
    permutes = [n for n in aten_gm.graph.nodes if n.target is aten.permute.default]
    assert len(permutes) >= 2, aten_gm.code  # each fill through a view in memory order
    compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [x])
    torch.manual_seed(3)
    expected, expected_next = fn(x), torch.rand(3)
    torch.manual_seed(3)
    got, got_next = compiled(x), torch.rand(3)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_next, expected_next)
