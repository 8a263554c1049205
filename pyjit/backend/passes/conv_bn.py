"""Eval-mode batch norm (and any per-channel affine chain) folded into the preceding convolution.

After decomposition an eval ``BatchNorm`` is ``((y - mean) * invstd) * gamma + beta`` on the
convolution's output ``y``, each operand a per-channel vector. This pass collects such a chain
(``sub``/``add``/``mul``/``div`` by per-channel or scalar values, each node read only by the
next) into ``A * conv(x, w) + B`` and rewrites it to

    conv(x, w * A[:, None, ...], bias=None) + B[:, None, ...]

so the activation is read once by a single ``+ B`` epilogue (which the scheduler fuses with a
following ReLU / residual add) instead of a chain of four per-channel operations.

Parameters reach pyjit's backend as graph *inputs* (they may change between calls: an optimizer
step, ``load_state_dict``), so the folded weight is computed inside the graph from the current
parameters on every call -- a pass over the weight (``Cout*Cin*k*k`` elements), far smaller than
the activation -- never baked in at compile time.

A convolution whose bias is followed by a pointwise op also gets its bias moved into that
epilogue (``conv(x, w, None) + b``): on CUDA aten adds a convolution's bias in a separate
pass over the output anyway, while the epilogue kernel adds it for free.

The scale fold is off by default (``pyjit.config.backend_fold_conv_bn``): on an H100 it made
the measured blocks slower, because the unfolded chain already fuses into the convolution's
epilogue and the fold adds a weight kernel per call (``docs/passes.md``); the bias move stays.

Not folded (left as is): transposed convolutions, chains that change dtype (e.g. an fp32 batch
norm after an fp16 convolution: the eager rounding differs), values that are not per-channel.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.fx import Node

from ...config import config
from ...logs import get_logger
from ..metrics import metrics
from .graph_utils import broadcasts_into, finish_rewrite, inline_traced, is_target, shape, trace_replacement, val

aten = torch.ops.aten
log = get_logger("perf_hints")

_CHAIN_OPS = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)


def fold_conv_bn(gm: torch.fx.GraphModule) -> int:
    """Fold per-channel affine chains into convolutions of ``gm`` (in place); returns the folds."""
    folds = 0
    changed = False
    for conv in list(gm.graph.nodes):
        if not is_target(conv, aten.convolution.default) or conv.args[6]:  # transposed
            continue
        steps, last = _affine_chain(conv)
        bias = conv.args[2]
        scales = any(op in (aten.mul.Tensor, aten.div.Tensor) for op, _ in steps)
        if scales and not config.backend_fold_conv_bn:
            # Folding is off (see config): only move the bias into the conv's epilogue.
            steps, last, scales = [], conv, False
        if not scales and (bias is None or not _has_pointwise_user(last)):
            continue  # nothing to fold, and no epilogue to take the bias
        _replace(gm, conv, steps, last)
        changed = True
        if scales:
            folds += 1
            log.info("folded a per-channel scale (eval batch norm) into convolution %s", conv.name)
    if changed:
        finish_rewrite(gm)
        metrics.conv_bn_folds += folds
    return folds


def _per_channel(c: Any, out_shape: tuple[int, ...]) -> bool:
    """``c`` is a number or a tensor that varies at most along dim 1 of ``out_shape``."""
    if isinstance(c, (int, float)) and not isinstance(c, bool):
        return True
    s = shape(c)
    if s is None or not broadcasts_into(s, out_shape):
        return False
    padded = (1,) * (len(out_shape) - len(s)) + s
    return padded[0] == 1 and all(d == 1 for d in padded[2:])


def _affine_chain(conv: Node) -> tuple[list[tuple[Any, Any]], Node]:
    """The per-channel ops applied to ``conv``'s output, in order, and the last node of the chain."""
    out_shape = shape(conv)
    dtype = val(conv).dtype
    steps: list[tuple[Any, Any]] = []
    node = conv
    while len(node.users) == 1:
        user = next(iter(node.users))
        if not is_target(user, *_CHAIN_OPS) or user.kwargs.get("alpha", 1) != 1 or len(user.args) != 2:
            break
        a, b = user.args
        if a is node and b is not node:
            c = b
        elif b is node and user.target in (aten.add.Tensor, aten.mul.Tensor):
            c = a
        else:
            break
        if not _per_channel(c, out_shape) or val(user).dtype != dtype or shape(user) != out_shape:
            break
        steps.append((user.target, c))
        node = user
    return steps, node


def _has_pointwise_user(node: Node) -> bool:
    return len(node.users) == 1 and torch.Tag.pointwise in getattr(next(iter(node.users)).target, "tags", ())


def _replace(gm: torch.fx.GraphModule, conv: Node, steps: list[tuple[Any, Any]], last: Node) -> None:
    x, w, bias, *conv_args = conv.args
    dtype = val(conv).dtype
    ndim = len(shape(conv))
    channels = shape(conv)[1]
    consts = [c for _, c in steps if isinstance(c, Node)]
    has_bias = bias is not None

    def replacement(x: torch.Tensor, w: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        it = iter(rest)
        b = next(it) if has_bias else None
        scale = None
        shift = b.reshape(channels) if b is not None else None
        for op, c in steps:
            cv = next(it) if isinstance(c, Node) else c
            if isinstance(cv, torch.Tensor):
                cv = cv.reshape(-1) if cv.numel() == channels else cv.reshape(())
            if op is aten.add.Tensor:
                shift = cv if shift is None else shift + cv
            elif op is aten.sub.Tensor:
                shift = -cv if shift is None else shift - cv
            elif op is aten.mul.Tensor:
                scale = cv if scale is None else scale * cv
                shift = None if shift is None else shift * cv
            else:
                scale = 1 / cv if scale is None else scale / cv
                shift = None if shift is None else shift / cv
        if isinstance(scale, torch.Tensor):
            factor = scale.to(w.dtype).expand(channels)
            w = w * factor.reshape((channels,) + (1,) * (w.dim() - 1))
        elif scale is not None:
            w = w * scale
        y = torch.ops.aten.convolution.default(x, w, None, *conv_args)
        if isinstance(shift, torch.Tensor):
            y = y + shift.to(dtype).expand(channels).reshape((channels,) + (1,) * (ndim - 2))
        elif shift is not None:
            y = y + shift
        return y

    inputs = [x, w] + ([bias] if has_bias else []) + consts
    sub = trace_replacement(replacement, inputs)
    new = inline_traced(gm, sub, inputs, before=last)
    if shape(new) != shape(last) or val(new).dtype != val(last).dtype:
        raise AssertionError(f"conv fold changed the value's type: {val(new)} vs {val(last)}")
    last.replace_all_uses_with(new)
