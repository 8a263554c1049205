"""Choosing 2-D tiles for pointwise kernels whose accesses disagree on the contiguous dimension.

A transpose-like kernel (``out[i, j] = x[j, i]``) read with 1-D blocks is contiguous for the
store but strided for the load. With a 2-D tile ``[YBLOCK, XBLOCK]`` over (outer dims, inner
dims) both sides touch whole runs of contiguous memory and Triton converts between the two
layouts on chip. :func:`choose_tiling` picks the split of the iteration dimensions from the
access patterns the loop bodies record; it returns None for ordinary (agreeing) kernels.
"""
from __future__ import annotations

import dataclasses

from ..ops_handler import RecordHandler
from ..scheduler import FusedGroup
from ..symbolic import linear_coefficient, prod, sym

# The y grid dimension is limited to 65535 programs.
_MAX_Y_PROGRAMS = 65535
YBLOCK_2D = 32
XBLOCK_2D = 32


@dataclasses.dataclass(frozen=True)
class Tiling:
    split: int  # dims [:split] iterate over yindex, dims [split:] over xindex
    ynumel: int
    xnumel: int


def _contiguous_dims(group: FusedGroup) -> tuple[list[int], list[int]] | None:
    """(contiguous dim of each store, of each load) in the shared iteration space."""
    sizes = group.nodes[0].sizes
    if any(n.sizes != sizes or n.rsizes or n.is_extern for n in group.nodes):
        return None
    index = [sym(f"i{k}") for k in range(len(sizes))]
    stores: list[int] = []
    loads: list[int] = []
    for node in group.nodes:
        rec = RecordHandler()
        node.buf.store_body()(rec, index)  # type: ignore[union-attr]
        if rec.has_indirect:
            return None
        for deps, out in ((rec.writes, stores), (rec.reads, loads)):
            for dep in deps:
                found = None
                for k in range(len(sizes)):
                    if sizes[k] > 1 and linear_coefficient(dep.index, index[k]) == 1:
                        found = k
                if found is not None:
                    out.append(found)
    return stores, loads


def choose_tiling(group: FusedGroup) -> Tiling | None:
    sizes = group.nodes[0].sizes
    if len(sizes) < 2 or group.group[1] != 1:
        return None
    found = _contiguous_dims(group)
    if found is None:
        return None
    stores, loads = found
    last = max((k for k in range(len(sizes)) if sizes[k] > 1), default=None)
    if last is None or not stores or any(k != last for k in stores):
        return None
    other = sorted({k for k in loads if k != last})
    if not other:
        return None
    split = other[-1] + 1
    ynumel, xnumel = prod(sizes[:split]), prod(sizes[split:])
    if ynumel < 16 or xnumel < 16 or -(-ynumel // YBLOCK_2D) > _MAX_Y_PROGRAMS:
        return None
    return Tiling(split, ynumel, xnumel)
