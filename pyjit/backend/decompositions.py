"""The decomposition table used when tracing to aten: composite ops the IR does not lower directly.

Built from ``torch._decomp`` (facts about aten ops, no Inductor code). What stays
undecomposed is lowered directly (``var_mean``, ``amax``, ``sum``...) or is an extern kernel
(``addmm``, ``convolution``...).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

DECOMPOSE = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.silu, aten.mish, aten.hardtanh,
    aten.logsumexp, aten.native_group_norm, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional, aten.native_batch_norm, aten.rms_norm,
    aten.sigmoid_backward, aten.tanh_backward, aten.stack, aten.flip, aten.roll, aten.repeat, aten.tril, aten.triu,
    aten.linspace, aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty, aten.glu, aten.smooth_l1_loss,
    aten.mse_loss, aten.nll_loss_forward, aten.std_mean, aten.norm, aten.linalg_vector_norm, aten.cumsum,
    aten.index_add, aten.unfold, aten.hardsigmoid, aten.hardswish, aten.leaky_relu, aten.elu, aten.softplus,
    aten.clamp_min, aten.clamp_max, aten.masked_fill, aten.addcmul, aten.addcdiv, aten.lerp, aten.xlogy,
    aten.celu, aten.selu, aten.rsub, aten.im2col, aten.upsample_nearest2d, aten.upsample_bilinear2d,
    aten.pixel_shuffle, aten.affine_grid_generator, aten.expand_as, aten.special_xlog1py, aten.logit,
    aten.diag_embed, aten.trace, aten.baddbmm, aten.addmv, aten.addr, aten.binary_cross_entropy,
    aten.soft_margin_loss, aten.huber_loss, aten.native_dropout,
    # Every batch-norm variant an inference or training graph can contain, on any device: on CUDA
    # ``_batch_norm_impl_index`` picks ``cudnn_batch_norm`` (CPU tracing never shows it), newer
    # pre-dispatch graphs carry ``_batch_norm_{with,no}_update``. All decompose to pointwise ops
    # (plus mean/var reductions in training) that fuse with the following relu/add; an undecomposed
    # one would be an extern aten call that reads and writes the whole activation once more.
    aten.cudnn_batch_norm, aten._native_batch_norm_legit, aten._batch_norm_with_update,
    aten._batch_norm_no_update, aten._batch_norm_with_update_functional,
]
# Decompositions we do NOT take even when torch offers them: a direct lowering is better.
KEEP = {aten.clamp_min, aten.clamp_max, aten.masked_fill, aten.addcmul, aten.addcdiv, aten.lerp, aten.xlogy,
        aten.hardsigmoid, aten.hardswish, aten.leaky_relu, aten.elu, aten.softplus, aten.rsub, aten.expand_as,
        aten.logit, aten.hardtanh, aten.native_dropout, aten.cumsum, aten.baddbmm}


def _miopen_batch_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                       exponential_average_factor: float, epsilon: float) -> tuple[torch.Tensor, ...]:
    """ROCm's cuDNN twin has no torch decomposition: same schema as ``native_batch_norm``."""
    return aten.native_batch_norm.default(input, weight, bias, running_mean, running_var, training,
                                          exponential_average_factor, epsilon)


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict[Any, Callable[..., Any]]:
    table = get_decompositions([op for op in DECOMPOSE if op not in KEEP])
    table[aten.miopen_batch_norm.default] = _miopen_batch_norm
    return table
