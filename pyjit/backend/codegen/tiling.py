"""2-D tiles for pointwise kernels whose accesses disagree on the contiguous dimension.

A transpose-like kernel (``out[i, j] = x[j, i]``) run with 1-D blocks walks the last
iteration dimension across a warp's lanes: every access contiguous in another dimension is
strided, each lane touching its own 32-byte sector. With a 2-D tile ``[YBLOCK, XBLOCK]`` over
(outer dims, inner dims) each access has a tile axis along which it is contiguous; Triton's
coalescing pass lays each load/store's lanes out along that axis and converts between the two
layouts through shared memory, so every access moves whole rows of the tile.

The decision (:func:`choose_tiling`) looks at every load *and* store of the group, in the
group's common iteration dimensions (:func:`common_dims`: the coarsest dims that every node's
sizes split into, so producer/consumer nodes seen through views tile together). An access is
contiguous in the innermost dim along which its address steps by one element. A 1-D kernel
coalesces the accesses contiguous in the last dim, and those that do not move along it (a
per-channel bias: one address per warp). Splitting at ``k + 1`` (y = dims[:k+1],
x = dims[k+1:]) also coalesces those contiguous in dim ``k``, so the split is taken at the ``k``
most of the remaining accesses are contiguous in, whether they are loads
(``x.transpose(1, 2).contiguous()``) or stores (an output in a permuted layout: channels-last,
``x.t() + 1``, saved-for-backward ``q.transpose(-2, -1)``), and none when no access needs it.
Symbolic sizes keep 1-D kernels (the decision and grid would depend on each call).

Block sizes (:func:`tile_blocks`) follow from how NVIDIA GPUs coalesce: a warp's 32 lanes
should cover consecutive addresses, at least 128 bytes (one cache line, four 32-byte sectors)
per tile row, along both axes since one side of the copy is contiguous along each.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

import sympy

from ..ops_handler import RecordHandler
from ..scheduler import XINDEX, FusedGroup, SchedulerNode
from ..symbolic import is_static, prod, simplify_with_ranges, sym, unflatten_index
from .common import next_power_of_2

YINDEX = sym("yindex")
# The y grid dimension is limited to 65535 programs (YBLOCK is at least 32 when ynumel >= 32).
_MAX_Y_PROGRAMS = 65535
# Both tile extents must reach this for a tile to pay: a 1-D warp then spreads an access that
# is contiguous along the other axis over >= 16 rows, <= 2 elements (<= 16 bytes for up to
# 8-byte types) per 32-byte sector it fetches; below it the 1-D kernel wastes little.
_MIN_EXTENT = 16
_ROW_BYTES = 128  # one L2 cache line: a tile row should fill it
_MIN_SIDE = 32  # a warp's lanes along one row
_MAX_SIDE = 64  # 2-byte types fill a line at 64; 1-byte ones stop there (registers, shared memory)


@dataclasses.dataclass(frozen=True)
class Tiling:
    dims: tuple[int, ...]  # the group's common iteration dims (outer to inner)
    split: int  # dims[:split] iterate over yindex, dims[split:] over xindex
    ynumel: int
    xnumel: int


def common_dims(size_lists: Sequence[Sequence[int]]) -> list[int] | None:
    """The coarsest dims every size list refines into, or None if the lists cut across each other.

    A dim boundary of ``sizes`` is a suffix product (the stride of a row-major dim); the common
    dims have the union of all boundaries, which works when each boundary divides the next
    (``[4, 8]`` and ``[32]`` -> ``[4, 8]``; ``[6, 4]`` and ``[4, 6]`` -> None).
    """
    bounds = {1}
    for sizes in size_lists:
        acc = 1
        for s in reversed(sizes):
            acc *= s
            bounds.add(acc)
    ordered = sorted(bounds)
    if any(b % a for a, b in zip(ordered, ordered[1:])):
        return None
    return [b // a for a, b in zip(ordered, ordered[1:])][::-1]


def node_index(sizes: Sequence[int], dims: Sequence[int], dim_vars: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    """Each of a node's dim indices as a combination of the common dims' index variables."""
    inner_of = [prod(dims[j + 1:]) for j in range(len(dims))]  # stride of common dim j
    out: list[sympy.Expr] = []
    for k, s in enumerate(sizes):
        inner = prod(sizes[k + 1:])
        outer = inner * s
        out.append(sympy.Add(*[v * (inner_of[j] // inner) for j, v in enumerate(dim_vars)
                               if inner <= inner_of[j] < outer]))
    return out


def tiled_index(tiling: Tiling, node: SchedulerNode) -> list[sympy.Expr]:
    """A node's dim indices inside the tiled kernel, over ``yindex``/``xindex``."""
    t = tiling
    dim_vars = unflatten_index(YINDEX, t.dims[:t.split]) + unflatten_index(XINDEX, t.dims[t.split:])
    ranges = {XINDEX: t.xnumel, YINDEX: t.ynumel}
    return [simplify_with_ranges(i, ranges) for i in node_index(node.sizes, t.dims, dim_vars)]


def _unclamped(index: sympy.Expr) -> sympy.Expr:
    """``index`` with each clamp of a variable expression to a constant bound dropped.

    A concatenation's masked loads clamp their index into the input (``min(max(c - 128, 0),
    127)`` for the second of three inputs of 128 columns): probed at the origin, where that
    load is masked off, the clamp hid its movement, so a transposed input of a cat (GPT-2's
    q/k/v gradients, the key's read along the sequence) was taken for a broadcast and the
    kernel stayed 1-D, its key loads strided. Unclamped, each access moves as it does where
    it is live."""
    def strip(e: sympy.Expr) -> sympy.Expr:
        moving = [a for a in e.args if not a.is_Number]
        return moving[0] if len(moving) == 1 else e

    return index.replace(lambda e: isinstance(e, (sympy.Min, sympy.Max)), strip)


def _strides(index: sympy.Expr, dim_vars: Sequence[sympy.Symbol]) -> list[int] | None:
    """How far ``index`` moves for one step along each dim, at the origin.

    Probed numerically (index at ``e_j`` minus index at 0), not read off the expression: a
    view of merged dims indexes ``(16*i0 + i1) % 64``, contiguous in ``i1`` but not linear.
    A stride at one point is a layout hint; correctness never depends on it.
    """
    index = _unclamped(index)
    zero = {v: sympy.Integer(0) for v in dim_vars}
    base = index.xreplace(zero)
    if not base.is_Integer:
        return None
    steps = [index.xreplace({**zero, v: sympy.Integer(1)}) - base for v in dim_vars]
    return [int(s) for s in steps] if all(s.is_Integer for s in steps) else None


def _contiguous_dims(group: FusedGroup, dims: list[int]) -> list[int] | None:
    """For each load and store that a tile can help, the innermost dim it is contiguous in.

    Left out: accesses contiguous in no dim (a scalar, a strided slice), and those contiguous
    in another dim that do not move along the last one (a per-channel bias ``b[c]``): the lanes
    of a 1-D warp read one address for them. None if some access cannot be analysed.
    """
    dim_vars = [sym(f"i{j}") for j in range(len(dims))]
    last = len(dims) - 1
    found: list[int] = []
    for node in group.nodes:
        rec = RecordHandler()
        node.buf.store_body()(rec, node_index(node.sizes, dims, dim_vars))  # type: ignore[union-attr]
        if rec.has_indirect:
            return None
        for dep in (*rec.writes, *rec.reads):
            strides = _strides(dep.index, dim_vars)
            unit = [j for j, s in enumerate(strides or []) if s == 1]
            if strides is not None and unit and (unit[-1] == last or strides[last] != 0):
                found.append(unit[-1])
    return found


def choose_tiling(group: FusedGroup) -> Tiling | None:
    """The 2-D split for a pointwise group, or None when a 1-D kernel coalesces as well."""
    if group.group[1] != 1 or any(n.rsizes or n.is_extern or n.is_template for n in group.nodes):
        return None
    sizes = [n.sizes for n in group.nodes]
    if not all(is_static(s) and int(s) > 0 for ss in sizes for s in ss):
        return None
    dims = common_dims([[int(s) for s in ss] for ss in sizes])
    if dims is None or len(dims) < 2:
        return None
    found = _contiguous_dims(group, dims)
    if not found:
        return None
    last = len(dims) - 1  # common dims are all > 1
    counts = Counter(k for k in found if k != last)
    if not counts:
        return None  # every access is contiguous in the last dim: 1-D blocks coalesce
    k = max(counts, key=lambda j: (counts[j], j))
    split = k + 1
    ynumel, xnumel = prod(dims[:split]), prod(dims[split:])
    if ynumel < _MIN_EXTENT or xnumel < _MIN_EXTENT or -(-ynumel // _MIN_SIDE) > _MAX_Y_PROGRAMS:
        return None
    return Tiling(tuple(dims), split, ynumel, xnumel)


def tile_blocks(tiling: Tiling, itemsize: int) -> tuple[int, int, int]:
    """(YBLOCK, XBLOCK, num_warps) for the smallest element size ``itemsize`` the kernel moves.

    Each side holds ``128 / itemsize`` elements (32..64): a full 128-byte line per tile row for
    the accesses contiguous along x, and per tile column for those contiguous along y. A side
    cut short by its extent (a 16-wide head dim) hands its share to the other side so a
    program still moves a full tile. One warp per 256 elements (8 per lane), at most 8 warps
    (16 per lane for 64 x 64 tiles): enough loads in flight per lane to cover memory latency.
    """
    side = min(_MAX_SIDE, max(_MIN_SIDE, _ROW_BYTES // max(itemsize, 1)))
    budget = side * side
    y = min(side, next_power_of_2(tiling.ynumel))
    x = min(side, next_power_of_2(tiling.xnumel))
    if x < side:
        y = min(next_power_of_2(tiling.ynumel), budget // x)
    elif y < side:
        x = min(next_power_of_2(tiling.xnumel), budget // y)
    return y, x, max(1, min(8, y * x // 256))
