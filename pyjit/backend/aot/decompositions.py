"""Decompositions for training graphs: pyjit's table plus the backward ops autograd emits.

The joint graph differentiates already-decomposed forward ops, so its backward contains the
derivative helpers of those primitives (``threshold_backward`` of relu, ``select_backward`` of
indexing, ``_softmax_backward_data``...). None has a lowering; their ``torch._decomp``
decompositions are pointwise ops, ``where`` and ``*_scatter`` ops that do, so they fuse into
the backward's kernels instead of running as extern aten calls. Backward ops whose
decomposition needs an unlowered op (``embedding_dense_backward``: ``index_put``) stay extern.
``forward_table`` leaves normalizations, softmax and GELU/SiLU whole in the forward-only trace
so autograd uses their fused backward formulas (decomposed in the joint trace).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch._decomp import get_decompositions

from ..decompositions import decomposition_table

aten = torch.ops.aten

BACKWARD_DECOMPOSE = [
    aten.threshold_backward, aten.select_backward, aten.slice_backward, aten.native_dropout_backward,
    aten._softmax_backward_data, aten._log_softmax_backward_data, aten.gelu_backward, aten.silu_backward,
    aten.sigmoid_backward, aten.tanh_backward, aten.diagonal_backward, aten.native_layer_norm_backward,
    aten.hardtanh_backward, aten.leaky_relu_backward, aten.elu_backward, aten.softplus_backward,
    aten.native_group_norm_backward,
]

# Composite ops kept whole in the first (forward-only) trace, so that autograd differentiates
# them with their own backward formula (``native_layer_norm_backward``...) instead of
# differentiating their decomposition piece by piece (which recomputes means and saves more).
# The joint trace then decomposes forward and backward alike. Also kept: ops whose
# decomposition reaches a prim without an autograd formula (``flip`` -> ``prims.rev``), which
# autograd could not differentiate at all.
KEEP_FOR_AUTOGRAD = {
    aten.native_layer_norm.default, aten._softmax.default, aten._log_softmax.default, aten.gelu.default,
    aten.silu.default, aten.native_group_norm.default, aten.flip.default,
}


@functools.lru_cache(maxsize=None)
def training_decomposition_table() -> dict[Any, Callable[..., Any]]:
    table = dict(decomposition_table())
    table.update(get_decompositions(BACKWARD_DECOMPOSE))
    return table


def forward_table(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``table`` without the ops autograd should see whole (for the forward-only trace)."""
    return {op: fn for op, fn in table.items() if op not in KEEP_FOR_AUTOGRAD}
