"""Lowerings from aten ops to loop IR, split by family; importing this package registers them all."""
from . import collectives, convolution, creation, indexing, matmul, pointwise, pooling, reductions, scatter, views  # noqa: F401  (registration side effects)
from .registry import LOWERINGS, register_lowering

__all__ = ["LOWERINGS", "register_lowering"]
