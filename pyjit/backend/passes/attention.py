"""Scaled-dot-product attention written out by hand -> torch's fused attention kernel.

Recognises, in the aten graph, ``softmax(mask(scale(q @ kT))) @ v`` and replaces it with the
aten graph of ``F.scaled_dot_product_attention`` on the same operands, traced on the graph's
fake tensors, so torch's own dispatcher picks the fused kernel (flash / memory-efficient /
cuDNN on CUDA, the flash kernel for CPU) and its meta function gives the output layout. The
fused ops are extern calls of the backend (``lowering/fallbacks.EXTERN_BY_DESIGN``).

What is matched (walking back from the second matmul):

* ``P @ v`` -- ``bmm`` with its ``expand``/``view`` plumbing, batch dims equal (no broadcast);
  ``clone``/``alias`` between softmax and the matmul are transparent (eval dropout).
* softmax over the last dim: pyjit's decomposition (``[_to_copy fp32] amax, sub, exp, sum, div
  [_to_copy back]``), ``_softmax`` or ``_safe_softmax``; the result must be back in q's dtype.
* mask steps, at most one boolean and one additive, in either order:
  ``S + M`` (M a tensor of S's dtype that broadcasts into S), ``masked_fill(S, c, fill)``,
  ``where(c, S, fill)`` / ``where(c, fill, S)`` with ``fill`` a constant that is ``-inf``
  ("hard") or at most half the dtype's lowest value (``finfo.min``, "soft").
* scale steps: ``S * c`` / ``S / c`` with ``c`` a constant (number or constant 0-d tensor such
  as ``torch.full([], sqrt(d))``); a pre-scaled q (or k) is simply the operand.
* ``q @ kT`` -- the scores matmul; k is ``kT.transpose(-2, -1)`` (a view; no copy).

Exactness (docs/passes.md has the full table):

* scale: the product of the constants (``1/c`` for divisions), passed as ``scale=``. Only
  literals are constants; a module's parameter or buffer may change in place after compiling.
* a mask built only from constants (``torch.ones(L, L).tril()``...) is evaluated at compile
  time; if it is the top-left causal pattern and L == S it becomes ``is_causal=True``.
* fills: ``-inf`` -> bool ``attn_mask``; fills <= -1e30 (fp32/bf16 ``finfo.min``) are absorbed
  by any score in the kernels' fp32 arithmetic -> additive ``where(keep, 0, fill)``; other
  fills <= -1e9 or <= ``finfo.min / 2`` (fp16's ``finfo.min``) only as the sole mask -> bool
  ``attn_mask`` plus ``where(row has a kept key, out, v.mean(-2))`` (eager's uniform rows).
* mask values in (-inf, -1e30) are raised to -1e30: CUDA's memory-efficient kernel overflows
  ``finfo.min * log2(e)`` to -inf and gives 0 for a fully masked row instead of uniform.
* a row whose scores are all ``-inf`` is NaN in eager but 0 in torch's fused kernels; for
  runtime masks that can do that (hard fills, additive masks) the rewrite adds
  ``where(row_has_a_finite_score, out, nan)`` so results stay eager's.
* fp32 softmax accumulation: the fused kernels accumulate in fp32 for fp16/bf16.
* refused (graph left as is, reason on the ``perf_hints`` channel and in
  ``metrics.attention_skipped``): softmax over another dim, a mask that broadcasts the scores
  to a larger shape or has another dtype, fills above -1e9, a non-absorbing fill with another
  mask, fp16 additive masks (eager adds in fp16), nodes read elsewhere (e.g. the attention
  weights are also returned), other ops between the steps, more than 2 batch dims, mixed
  dtypes, masks on CUDA whose rows are not 16-byte aligned, and shapes/dtypes for which
  torch's dispatcher picks its math fallback anyway.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx import Node

from ...logs import get_logger
from ..metrics import metrics
from .graph_utils import (
    broadcasts_into,
    constant_value,
    finish_rewrite,
    inline_traced,
    is_target,
    known_true,
    matmul_operands,
    only_used_by,
    scalar_constant,
    shape,
    trace_replacement,
    val,
)

aten = torch.ops.aten
log = get_logger("perf_hints")

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# A fill at most this is absorbed by any realistic score in fp32: the fp32 spacing near 1e30 is
# 2**76 (7.6e22), so ``score + fill`` rounds back to ``fill`` for |score| < 3.8e22.
_ABSORBING = -1e30
# Finite fills accepted besides the dtype's lowest value: exp(fill - max) is 0 for any
# score above fill + 104 (fp32 underflow), i.e. for every score of magnitude below ~1e9.
_SOFT_FILL_MAX = -1e9
# Mask values below this (and above -inf) are raised to it in the mask given to the kernels:
# CUDA's memory-efficient kernel scales scores by log2(e) after adding the mask, so finfo.min
# overflows to -inf there and a fully masked row comes out 0 instead of eager's uniform
# weights. -1e30 is still absorbing (see _ABSORBING), so every row's softmax is unchanged.
_KERNEL_FLOOR = -1e30
_TRANSPARENT = (aten.clone.default, aten.alias.default)
_CASTS = (aten._to_copy.default, torch.ops.prims.convert_element_type.default)
# torch's fused attention ops (what a traced F.scaled_dot_product_attention calls when it does
# not fall back to its math composition).
FUSED_ATTENTION = {
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}


class _NoMatch(Exception):
    """This node is not (or not safely) an attention pattern; the message says why."""


@dataclasses.dataclass
class _MaskStep:
    kind: str  # "add" (additive tensor) or "keep" (boolean: keep where True, else fill)
    tensor: Node
    negate: bool = False  # keep = ~tensor (masked_fill's condition marks what is dropped)
    fill: float = 0.0  # the fill as the scores' dtype holds it
    # "hard": -inf; "absorbing": so large (<= _ABSORBING) that score + fill == fill in the fused
    # kernels' fp32 (or fp64) arithmetic; "soft": finite and not absorbed there (fp16's
    # finfo.min, -1e9): exp(fill - max) is 0 but a fully masked row is uniform, not NaN.
    fill_kind: str = "hard"


@dataclasses.dataclass
class _Match:
    out: Node  # the node whose value the rewrite replaces
    q: Node
    kt: Node  # k transposed: the scores are q @ kt
    v: Node
    scale: float
    masks: list[_MaskStep]  # in program order
    safe_softmax: bool  # ``_safe_softmax``: fully masked rows are 0, as in the fused kernels
    internal: set[Node]


def rewrite_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite every attention pattern of ``gm`` in place; returns how many were rewritten."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.graph is not gm.graph or not is_target(node, aten.bmm.default):
            continue
        # The matmul's value: ``_unsafe_view(bmm)`` for torch.matmul on 4-d operands, the bmm
        # itself for 3-d ones.
        users = list(node.users)
        candidates = [node]
        if len(users) == 1 and is_target(users[0], aten._unsafe_view.default, aten.view.default):
            candidates.insert(0, users[0])
        match: _Match | None = None
        for out in candidates:
            try:
                match = _match(gm, out)
                break
            except _NoMatch as e:
                if getattr(e, "near_miss", False):
                    metrics.attention_skipped.append(str(e))
                    log.info("attention at %s not rewritten: %s", _where(out), e)
                    break
        if match is None:
            continue
        try:
            replaced = _replace(gm, match)
        except _NoMatch as e:
            metrics.attention_skipped.append(str(e))
            log.info("attention at %s not rewritten: %s", _where(out), e)
            continue
        if replaced:
            done += 1
    if done:
        finish_rewrite(gm)
        metrics.attention_rewrites += done
    return done


def _where(node: Node) -> str:
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    files = [ln.strip() for ln in trace if ln.strip().startswith("File ")]
    return files[-1] if files else node.name


def _fail(reason: str, near_miss: bool = True) -> _NoMatch:
    e = _NoMatch(reason)
    e.near_miss = near_miss  # type: ignore[attr-defined]
    return e


# ---------------------------------------------------------------------------------------- match
def _match(gm: torch.fx.GraphModule, out: Node) -> _Match:
    mm = matmul_operands(out)
    if mm is None:
        raise _fail("not a batched matmul", near_miss=False)
    p, v, bmm2, internal_list = mm
    internal = set(internal_list)
    # P's plumbing into bmm2 (expand/view) belongs to the pattern too.
    node = bmm2.args[0]
    while node is not p:
        internal.add(node)
        node = node.args[0]
    while is_target(p, *_TRANSPARENT):
        internal.add(p)
        p = p.args[0]
    scores, safe = _match_softmax(p, internal)  # raises when P is not a softmax
    dtype = val(out).dtype
    if dtype not in _FLOAT_DTYPES:
        raise _fail(f"dtype {dtype} is not a floating type SDPA supports")
    if val(p).dtype != dtype:
        raise _fail("the softmax result is not cast back to q's dtype before the second matmul")
    scores_shape = shape(scores)
    masks: list[_MaskStep] = []
    scale = 1.0
    node = scores
    # Mask steps (walking backwards), then scale steps, then the scores matmul.
    while True:
        if val(node).dtype != dtype:
            raise _fail("the scores change dtype before the softmax")
        step = _mask_step(gm, node, scores_shape, dtype)
        if step is None:
            break
        mask_step, prev = step
        masks.insert(0, mask_step)
        internal.add(node)
        node = prev
    if sum(m.kind == "add" for m in masks) > 1 or sum(m.kind == "keep" for m in masks) > 1:
        raise _fail("more than one additive or more than one boolean mask")
    while True:
        factor = _scale_step(gm, node)
        if factor is None:
            break
        scale *= factor[0]
        internal.add(node)
        node = factor[1]
    if _mask_step(gm, node, scores_shape, dtype) is not None:
        raise _fail("a mask applied before the scale (SDPA adds the mask after scaling)")
    mm1 = matmul_operands(node)
    if mm1 is None:
        raise _fail(f"the scores come from {node.target}, not from a batched q @ k^T")
    q, kt, bmm1, internal1 = mm1
    internal.update(internal1)
    for arg in bmm1.args:
        n = arg
        while n is not q and n is not kt:
            internal.add(n)
            n = n.args[0]
    dtypes = {val(q).dtype, val(kt).dtype, val(v).dtype}
    if dtypes != {dtype}:
        raise _fail(f"q, k, v dtypes {sorted(map(str, dtypes))} differ from the output's {dtype}")
    if len(shape(q)) not in (3, 4):
        raise _fail(f"{len(shape(q)) - 2} batch dims (1 or 2 supported)")
    if not only_used_by(internal - {out}, internal):
        raise _fail("an intermediate (scores or attention weights) is also used elsewhere")
    if not math.isfinite(scale) or scale == 0.0:
        raise _fail(f"scale {scale} is not a finite non-zero number")
    return _Match(out, q, kt, v, scale, masks, safe, internal)


def _match_softmax(p: Node, internal: set[Node]) -> tuple[Node, bool]:
    """The softmax input of ``p`` (softmax over the last dim) and whether it is ``_safe_softmax``."""
    nodes: list[Node] = []
    node = p
    if is_target(node, *_CASTS):
        nodes.append(node)
        node = node.args[0]
    ndim = len(shape(node) or ())
    last = {-1, ndim - 1}
    if is_target(node, aten._softmax.default, aten._safe_softmax.default):
        if node.args[1] not in last:
            raise _fail(f"softmax over dim {node.args[1]}, not the last")
        nodes.append(node)
        x = node.args[0]
        if is_target(x, *_CASTS) and x.args[0] is not None:
            nodes.append(x)
            x = x.args[0]
        internal.update(nodes)
        return x, node.target is aten._safe_softmax.default
    # exp(x - amax(x)) / sum(exp(x - amax(x)))
    if not is_target(node, aten.div.Tensor):
        raise _fail("not a softmax", near_miss=False)
    exp, total = node.args
    if not (is_target(exp, aten.exp.default) and is_target(total, aten.sum.dim_IntList)
            and total.args[0] is exp):
        raise _fail("not a softmax", near_miss=False)
    sub = exp.args[0]
    if not is_target(sub, aten.sub.Tensor) or not is_target(sub.args[1], aten.amax.default):
        raise _fail("not a softmax", near_miss=False)
    x, amax = sub.args
    if amax.args[0] is not x:
        raise _fail("not a softmax", near_miss=False)
    for red in (amax, total):
        dims = list(red.args[1]) if len(red.args) > 1 else []
        keep = red.args[2] if len(red.args) > 2 else red.kwargs.get("keepdim", False)
        if len(dims) != 1 or dims[0] not in last or not keep:
            raise _fail(f"softmax over dims {dims}, not the last")
    nodes += [node, exp, total, sub, amax]
    if is_target(x, *_CASTS):
        nodes.append(x)
        x = x.args[0]
    internal.update(nodes)
    return x, False


def _mask_step(gm: torch.fx.GraphModule, node: Node, scores_shape: tuple[int, ...], dtype: torch.dtype
               ) -> tuple[_MaskStep, Node] | None:
    """``node`` as a mask step on the scores: (step, the scores before it), or None."""
    if is_target(node, aten.add.Tensor) and node.kwargs.get("alpha", 1) == 1 and len(node.args) == 2:
        for s, m in (node.args, node.args[::-1]):
            if isinstance(m, Node) and shape(s) == scores_shape and _is_scores_chain(s):
                if val(m).dtype != dtype:
                    raise _fail(f"additive mask of dtype {val(m).dtype} on scores of {dtype}")
                if not broadcasts_into(shape(m), scores_shape):
                    raise _fail(f"mask of shape {list(shape(m))} does not broadcast into the scores "
                                f"{list(scores_shape)}")
                return _MaskStep("add", m), s
        return None
    if is_target(node, aten.masked_fill.Scalar, aten.masked_fill.Tensor):
        s, cond, fill = node.args[:3]
        return _keep_step(gm, cond, fill, negate=True, scores_shape=scores_shape, dtype=dtype), s
    if is_target(node, aten.where.self):
        cond, a, b = node.args
        if shape(a) == scores_shape and _is_scores_chain(a) and not _is_scores_chain(b):
            return _keep_step(gm, cond, b, negate=False, scores_shape=scores_shape, dtype=dtype), a
        if shape(b) == scores_shape and _is_scores_chain(b) and not _is_scores_chain(a):
            return _keep_step(gm, cond, a, negate=True, scores_shape=scores_shape, dtype=dtype), b
    return None


def _keep_step(gm: torch.fx.GraphModule, cond: Any, fill: Any, negate: bool, scores_shape: tuple[int, ...],
               dtype: torch.dtype) -> _MaskStep:
    """A boolean mask step; the fill must be -inf or so negative that masked weights are 0."""
    if not isinstance(cond, Node) or val(cond).dtype != torch.bool:
        raise _fail("the mask condition is not a boolean tensor")
    if not broadcasts_into(shape(cond), scores_shape):
        raise _fail(f"mask of shape {list(shape(cond))} does not broadcast into the scores {list(scores_shape)}")
    value = scalar_constant(gm, fill)
    if value is None:
        raise _fail("the masked value is not a compile-time constant")
    # The value the scores' dtype holds (masked_fill / where cast the scalar).
    value = float(torch.tensor(value, dtype=torch.float64).to(dtype))
    if value == -math.inf:
        kind = "hard"
    elif value <= _ABSORBING:
        kind = "absorbing"
    elif value <= torch.finfo(dtype).min / 2 or value <= _SOFT_FILL_MAX:
        kind = "soft"
    else:
        raise _fail(f"masked value {value} is neither -inf nor near the dtype's lowest value nor <= "
                    f"{_SOFT_FILL_MAX:g} (its weight would not be 0)")
    return _MaskStep("keep", cond, negate=negate, fill=value, fill_kind=kind)


def _is_scores_chain(node: Any) -> bool:
    """Cheap test: does ``node`` descend from a ``bmm`` through scale/mask ops (not a mask tensor)?"""
    for _ in range(8):
        if not isinstance(node, Node):
            return False
        if is_target(node, aten.bmm.default):
            return True
        if is_target(node, aten._unsafe_view.default, aten.view.default, aten.mul.Tensor, aten.mul.Scalar,
                     aten.div.Tensor, aten.div.Scalar, aten.masked_fill.Scalar, aten.masked_fill.Tensor):
            node = node.args[0]
        elif is_target(node, aten.add.Tensor):
            node = node.args[0] if _is_scores_chain(node.args[0]) else node.args[1]
        elif is_target(node, aten.where.self):
            node = node.args[1] if _is_scores_chain(node.args[1]) else node.args[2]
        else:
            return False
    return False


def _scale_step(gm: torch.fx.GraphModule, node: Node) -> tuple[float, Node] | None:
    if is_target(node, aten.mul.Tensor, aten.mul.Scalar):
        for s, c in (node.args, node.args[::-1]):
            if _is_scores_chain(s):
                value = scalar_constant(gm, c)
                return (value, s) if value is not None else None
    if is_target(node, aten.div.Tensor, aten.div.Scalar) and _is_scores_chain(node.args[0]):
        value = scalar_constant(gm, node.args[1])
        if value is not None and value != 0.0:
            return 1.0 / value, node.args[0]
    return None


# ---------------------------------------------------------------------------------------- rewrite
def _replace(gm: torch.fx.GraphModule, m: _Match) -> bool:
    dtype = val(m.out).dtype
    lq, s_len = shape(m.q)[-2], shape(m.kt)[-1]
    # is_causal means the top-left causal pattern on every backend for L == S only (flash
    # kernels have aligned it bottom-right for L != S): other shapes keep the constant mask.
    causal = known_true(lq == s_len) and _constant_causal(gm, m.masks, dtype, lq, s_len)
    masks = [] if causal else m.masks
    if dtype == torch.float16 and any(s.kind == "add" for s in masks):
        # Eager adds the mask in fp16, where a finfo.min sentinel absorbs the score (fully
        # masked rows become uniform); the fused kernels add in fp32 and keep the scores.
        raise _fail("an fp16 additive mask (eager adds in fp16, the fused kernels in fp32)")
    soft = [s for s in masks if s.kind == "keep" and s.fill_kind == "soft"]
    if soft and len(masks) > 1:
        raise _fail(f"a masked value of {soft[0].fill:g} (not absorbed by a score in fp32) combined with "
                    f"another mask")
    # A lone soft fill is passed as a boolean mask (its weights are 0 either way); the rows it
    # masks entirely are uniform in eager: the mean of v there.
    uniform_rows = bool(soft) and not m.safe_softmax
    # Eager gives NaN rows where every score is -inf; the fused kernels give 0 there.
    nan_rows = not m.safe_softmax and any(s.kind == "add" or s.fill_kind == "hard" for s in masks)
    mask_nodes = [s.tensor for s in masks]
    three_d = len(shape(m.q)) == 3
    out_val = val(m.out)
    to_output = any(u.op == "output" for u in m.out.users)
    device = out_val.device

    def replacement(q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, *mask_args: torch.Tensor) -> torch.Tensor:
        k = kt.transpose(-2, -1)
        mask = _combined_mask(masks, list(mask_args), dtype, device)
        v_mean = v.mean(-2, keepdim=True) if uniform_rows else None
        if three_d:
            q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
            if mask is not None and mask.dim() == 3:
                mask = mask.unsqueeze(0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=causal,
                                             scale=m.scale)
        if three_d:
            out = out.squeeze(0)
        if nan_rows and mask is not None:
            alive = mask.any(-1, keepdim=True) if mask.dtype == torch.bool else (mask > -math.inf).any(-1, keepdim=True)
            if three_d and alive.dim() == 4:
                alive = alive.squeeze(0)
            out = torch.where(alive, out, torch.full((), math.nan, dtype=dtype, device=device))
        if v_mean is not None and mask is not None:
            alive = mask.any(-1, keepdim=True)
            if three_d and alive.dim() == 4:
                alive = alive.squeeze(0)
            out = torch.where(alive, out, v_mean)
        if to_output and out_val.is_contiguous() and not out.is_contiguous():
            # The user sees this tensor: give it eager's (contiguous) layout.
            out = out.contiguous()
        return out

    if device.type == "cuda" and masks:
        # The memory-efficient kernel needs 16-byte aligned mask rows; torch pads an unaligned
        # mask and slices it, but the backend computes the slice into a dense buffer again.
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not known_true((s_len * itemsize) % 16 == 0):
            raise _fail(f"a mask with {s_len} keys on CUDA (rows not 16-byte aligned for the "
                        f"memory-efficient kernel, and the backend does not keep torch's padded layout)")
    inputs = [m.q, m.kt, m.v, *mask_nodes]
    sub = trace_replacement(replacement, inputs)
    fused = [n for n in sub.graph.nodes if n.op == "call_function" and n.target in FUSED_ATTENTION]
    if not fused:
        raise _fail(f"torch's dispatcher picks its math fallback for {dtype} q {list(shape(m.q))} on "
                    f"{device.type} (no fused kernel applies)")
    new = inline_traced(gm, sub, inputs, before=m.out)
    if shape(new) != shape(m.out) or val(new).dtype != dtype:
        raise AssertionError(f"attention rewrite changed the value's type: {val(new)} vs {out_val}")
    m.out.replace_all_uses_with(new)
    log.info("attention at %s rewritten to %s (scale=%g, causal=%s, masks=%s)", _where(m.out),
             fused[0].target, m.scale, causal, [s.kind for s in masks])
    return True


def _combined_mask(masks: list[_MaskStep], tensors: list[torch.Tensor], dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor | None:
    """One ``attn_mask`` equivalent to the mask steps, applied in program order (traced)."""
    mask: torch.Tensor | None = None
    for step, t in zip(masks, tensors):
        if step.kind == "add":
            mask = t if mask is None else _as_additive(mask, dtype, device) + t
            continue
        keep = ~t if step.negate else t
        if step.fill_kind != "absorbing" and mask is None:
            mask = keep  # -inf, or a lone soft fill (see _replace)
        else:
            base = torch.zeros((), dtype=dtype, device=device) if mask is None else _as_additive(mask, dtype, device)
            mask = torch.where(keep, base, torch.full((), step.fill, dtype=dtype, device=device))
    if mask is not None and mask.dtype != torch.bool:
        floor = torch.full((), _KERNEL_FLOOR, dtype=dtype, device=device)
        mask = torch.where((mask < _KERNEL_FLOOR) & (mask > -math.inf), floor, mask)
    return mask


def _as_additive(mask: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if mask.dtype != torch.bool:
        return mask
    return torch.where(mask, torch.zeros((), dtype=dtype, device=device),
                       torch.full((), -math.inf, dtype=dtype, device=device))


def _constant_causal(gm: torch.fx.GraphModule, masks: list[_MaskStep], dtype: torch.dtype,
                     lq: Any, s_len: Any) -> bool:
    """True when the masks are compile-time constants equal to the top-left causal pattern."""
    if not masks:
        return False
    if len(masks) == 1 and _built_causal(masks[0], lq, s_len):
        return True
    values = [constant_value(gm, s.tensor) for s in masks]
    if any(not isinstance(v, torch.Tensor) for v in values):
        return False
    if any(v.dim() < 2 or tuple(v.shape[-2:]) != (lq, s_len) for v in values):
        return False
    batch = torch.broadcast_shapes(*[v.shape[:-2] for v in values])
    total = torch.zeros(*batch, lq, s_len, dtype=torch.float64)
    for step, v in zip(masks, values):
        v = v.cpu()
        if step.kind == "add":
            total = total + v.double()
        else:
            keep = ~v if step.negate else v
            total = torch.where(keep, total, torch.full((), step.fill, dtype=torch.float64))
    tril = torch.ones(lq, s_len, dtype=torch.bool).tril()
    dropped = (total <= _SOFT_FILL_MAX) | (total <= torch.finfo(dtype).min / 2)  # -inf included
    return bool(torch.where(tril, total == 0, dropped).all())


def _built_causal(step: _MaskStep, lq: Any, s_len: Any) -> bool:
    """The mask is built in the graph as ``tril(ones(L, S))`` (``full(..., True)``), kept where
    True, with a fill that drops the score: the causal pattern whatever L and S are. Read from
    the graph's structure, so it holds for symbolic sizes too (the value cannot be computed)."""
    if step.kind != "keep" or step.fill_kind not in ("hard", "absorbing"):
        return False
    node, keep_where_true = step.tensor, not step.negate
    while is_target(node, aten.bitwise_not.default, aten.logical_not.default):
        node, keep_where_true = node.args[0], not keep_where_true
    if not keep_where_true:
        return False
    if is_target(node, aten.tril.default):
        if (node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0)) != 0:
            return False
        ones = node.args[0]
    elif is_target(node, aten.logical_and.default) and _is_lower_triangle(node.args[0]):
        ones = node.args[1]  # tril decomposed: (col - row <= 0) & x
    else:
        return False
    if is_target(ones, aten.full.default):
        if ones.args[1] not in (True, 1, 1.0):
            return False
    elif not is_target(ones, aten.ones.default):
        return False
    size = shape(ones)
    return len(size) == 2 and known_true(size[0] == lq) and known_true(size[1] == s_len)


def _is_lower_triangle(node: Any) -> bool:
    """``arange(S).unsqueeze(-2) - arange(L).unsqueeze(-1) <= 0``: True on and below the
    diagonal (torch's decomposition of ``tril``)."""
    if not is_target(node, aten.le.Scalar) or node.args[1] != 0 or not is_target(node.args[0], aten.sub.Tensor):
        return False
    cols, rows = node.args[0].args[:2]

    def arange_unsqueezed(n: Any, dim: int) -> bool:
        if not is_target(n, aten.unsqueeze.default) or n.args[1] not in (dim, dim + 2):
            return False
        a = n.args[0]
        return is_target(a, aten.arange.default) and len(a.args) == 1  # arange(end): from 0 step 1

    return arange_unsqueezed(cols, -2) and arange_unsqueezed(rows, -1)
