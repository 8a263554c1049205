"""Decompositions for training graphs: pyjit's table plus the backward ops autograd emits.

The joint graph differentiates already-decomposed forward ops, so its backward contains the
derivative helpers of those primitives (``threshold_backward`` of relu, ``select_backward`` of
indexing, ``_softmax_backward_data``...). None has a lowering; their ``torch._decomp``
decompositions are pointwise ops, ``where`` and ``*_scatter`` ops that do, so they fuse into
the backward's kernels instead of running as extern aten calls. Backward ops whose
decomposition needs an unlowered op (``embedding_dense_backward``: ``index_put``) stay extern.
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
]


@functools.lru_cache(maxsize=None)
def training_decomposition_table() -> dict[Any, Callable[..., Any]]:
    table = dict(decomposition_table())
    table.update(get_decompositions(BACKWARD_DECOMPOSE))
    return table
