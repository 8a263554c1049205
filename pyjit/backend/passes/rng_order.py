"""Random ops draw their numbers in eager's element order (run on the aten graph *before*
functionalization, by ``compile_fx.trace_to_aten``).

An in-place random op fills the tensor it is given in that tensor's *memory* order: eager's
dropout draws ``empty_like(x).bernoulli_(p)``, so a transposed ``x`` gets its mask in column
order. Functionalization replaces the in-place op by its out-of-place variant, which allocates
its own output. Most variants allocate it like their input (``uniform``, ``normal_functional``,
``exponential``... clone its layout), but ``bernoulli.p`` allocates it contiguous: the same
numbers landed on other elements (another mask than eager's for the same seed).

:func:`draw_in_memory_order` makes such an op on a dense, non-contiguous tensor fill a
*contiguous view* of it instead (its dimensions permuted into memory order). The view's logical
order is the tensor's memory order, so the contiguous output of the out-of-place variant holds
the numbers of the same elements as eager's; functionalization writes the view back into the
tensor as for any in-place op on a view. Only those ops are rewritten: for the others the
layout already agrees, and a contiguous view would even change the numbers (CPU ``normal_``
takes a vectorised algorithm for contiguous tensors of 16 elements or more).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

aten = torch.ops.aten

# In-place random ops whose functional variant allocates a contiguous output whatever the
# layout of the tensor they fill.
CONTIGUOUS_FILLS = frozenset({aten.bernoulli_.float})
# Those functional variants (what a functionalized graph holds instead).
FUNCTIONAL_FILLS = frozenset({aten.bernoulli.p})


def has_random_fill(gm: torch.fx.GraphModule) -> bool:
    """Whether a functionalized graph holds the out-of-place variant of such an in-place op."""
    return any(n.op == "call_function" and n.target in FUNCTIONAL_FILLS for n in gm.graph.nodes)


def memory_order(t: Any) -> list[int] | None:
    """The permutation of ``t``'s dimensions that makes it contiguous, or None when it already
    is, is not dense (overlapping or with gaps), or has symbolic strides."""
    if not isinstance(t, torch.Tensor) or t.is_contiguous() or t.dim() < 2:
        return None
    if any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride())):
        return None
    sizes, strides = [int(s) for s in t.shape], [int(s) for s in t.stride()]
    # Larger strides first; size-1 dimensions (any stride) keep their relative place.
    perm = sorted(range(t.dim()), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d))
    expected = 1
    for d in reversed(perm):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return perm


def draw_in_memory_order(gm: torch.fx.GraphModule) -> int:
    """Rewrite each such in-place random op on a dense non-contiguous tensor to fill the
    contiguous permuted view of it (see the module docstring); returns how many were rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in CONTIGUOUS_FILLS or not node.args:
            continue
        target = node.args[0]
        if not isinstance(target, torch.fx.Node):
            continue
        perm = memory_order(target.meta.get("val"))
        if perm is None:
            continue
        with gm.graph.inserting_before(node):
            view = gm.graph.call_function(aten.permute.default, (target, perm))
        view.meta["val"] = target.meta["val"].permute(perm)
        node.replace_all_uses_with(target)  # the op returns its (now permuted) self: users want the tensor
        node.args = (view, *node.args[1:])
        count += 1
    if count:
        gm.recompile()
    return count
