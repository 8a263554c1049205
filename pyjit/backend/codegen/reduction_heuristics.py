"""Launch parameters of Triton reduction kernels: rows per program, block sizes, warps.

A reduction kernel reduces ``xnumel`` rows of ``rnumel`` elements. Two shapes exist (see
``triton.py``): a *persistent* kernel holds whole rows in registers (``[XBLOCK, RBLOCK]`` with
``RBLOCK >= rnumel``); a *looped* kernel walks each row in ``RBLOCK`` chunks. These kernels are
memory bound, so the rules aim at (a) enough bytes in flight per SM, (b) few enough values per
thread that nothing spills, (c) enough programs to fill the GPU. Measured on an H100
(``python -m bench.reduction_sweep --explore``, see docs/performance.md "Reductions across row
widths"); the rules depend only on the sizes, never on a benchmark's exact shape:

- persistent: a program covers a tile of about ``_TILE`` elements (several short rows per
  program, one long row), ``num_warps = tile / 256`` (8 fp32 values per thread, two 16-byte
  loads) clamped to 2..16; rows over 4096 use 16 warps and more values per thread (up to 64 at
  32768, still no spill). Rows per program are capped so that at least ``_MIN_PROGRAMS``
  programs run when there are that many rows.
- looped: one row per program, ``RBLOCK`` 2048 with 16 warps (4 values per thread per
  chunk). Measured: 8 warps lose up to 16 points on 128000-wide rows, ``RBLOCK`` 4096 ties
  at 65536 and loses 4-5 points on cross-entropy rows.
- multi-pass rows (a looped kernel that would read each row more than once: softmax's
  normalising pass, layer norm's) stay persistent up to ``backend_persistent_multi_pass_max``;
  a looped kernel whose passes were folded into one loop (online log-sum-exp: cross-entropy)
  is not multi-pass and keeps its loop (decided in ``triton.generate_kernel``).

Column reductions (``x.sum(0)`` of a row-major ``[N, C]``, a bias gradient) read memory that is
contiguous along the *kept* dimension and strided along the reduced one. One output per program
(``XBLOCK=1``) then makes every lane of a warp load from a different row: 32 sectors per warp
request instead of 4. :func:`column_element_bytes` recognises such kernels from their loads'
index expressions; :func:`column_meta` gives them a tile of ``XBLOCK`` >= 32 output columns
(>= 128 contiguous bytes per tile row, a whole cache line per warp access; Triton's coalescing
pass orders the layout along the contiguous x axis) by a few rows, walked down the columns in a
loop (or held whole when the columns are short). A wide tile leaves few programs (768 columns:
24), so :func:`column_split` cuts long columns into chunks reduced in parallel (partials laid
out ``[split, columns]``, the combining reduction is again a short column reduction; see
``lowering/reductions.py``). Measured on an H100 (docs/performance.md, "Column reductions"):
GELU backward + ``sum(0)`` of 4096x3072 went from 204 us (``XBLOCK=1``) to 39 us.
"""
from __future__ import annotations

from typing import Iterable

import sympy

from ..symbolic import hint, sym
from .common import next_power_of_2

_TILE_SMALL_ROWS = 2048  # rows of at most 256 elements
_TILE = 4096
_MIN_PROGRAMS = 512  # about 4 programs per SM on a 132-SM H100
_LOOPED_RBLOCK = 2048


def persistent_meta(xnumel: int, rnumel: int) -> dict[str, int]:
    """XBLOCK, RBLOCK, num_warps for rows held whole in registers."""
    rblock = next_power_of_2(rnumel)
    tile = _TILE_SMALL_ROWS if rblock <= 256 else _TILE
    xblock = max(1, tile // rblock)
    # Keep at least _MIN_PROGRAMS programs where the rows allow it.
    while xblock > 1 and -(-xnumel // xblock) < _MIN_PROGRAMS:
        xblock //= 2
    xblock = min(xblock, next_power_of_2(xnumel))
    num_warps = max(2, min(16, xblock * rblock // 256))
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}


def looped_meta(xnumel: int, rnumel: int) -> dict[str, int]:
    """XBLOCK, RBLOCK, num_warps for rows walked in chunks."""
    rblock = min(_LOOPED_RBLOCK, next_power_of_2(rnumel))
    return {"XBLOCK": 1, "RBLOCK": rblock, "num_warps": max(2, min(16, rblock // 128))}


# ---------------------------------------------------------------------------- column reductions
_XINDEX, _RINDEX = sym("xindex"), sym("rindex")
_COLUMN_ROW_BYTES = 128  # one tile row: a full 128-byte line per warp access
_COLUMN_MIN_XBLOCK = 32
_COLUMN_MAX_XBLOCK = 128
# Looped chunk: 2048 elements, 8 warps -> 8 values per thread per chunk (two 16-byte loads),
# as the persistent row rule; with XBLOCK 32 that is 64 rows per chunk.
_COLUMN_TILE = 2048
# Whole columns held in registers: the largest tile the row rules use (64 values per thread
# at 16 warps).
_COLUMN_MAX_TILE = 32768
# Columns of at most this many rows run persistent (one chunk: a loop gains nothing).
COLUMN_PERSISTENT_RMAX = 64
# Split: columns of at least this many rows, when the kernel would have fewer programs than
# about 2 per SM of an H100; chunks of at least _COLUMN_SPLIT_MIN_CHUNK rows keep the partials'
# extra traffic under 1/256 of the input.
COLUMN_SPLIT_MIN_RNUMEL = 1024
_COLUMN_SPLIT_PROGRAMS = 256
_COLUMN_SPLIT_MIN_CHUNK = 256
_COLUMN_SPLIT_MAX = 1024


def _step(index: sympy.Expr, x: int, r: int) -> int | None:
    """``index`` at ``xindex=x, rindex=r``; size symbols at their example values, any other
    symbol (a gathered index) at 0. None when it does not evaluate to an integer."""
    values: dict[sympy.Symbol, sympy.Integer] = {_XINDEX: sympy.Integer(x), _RINDEX: sympy.Integer(r)}
    for s in index.free_symbols - {_XINDEX, _RINDEX}:
        try:
            values[s] = sympy.Integer(hint(s))
        except NotImplementedError:
            values[s] = sympy.Integer(0)
    try:
        out = index.xreplace(values)
    except ZeroDivisionError:
        return None
    return int(out) if out.is_Integer else None


def index_steps(index: sympy.Expr) -> tuple[int | None, int | None]:
    """(address step from xindex 0 to 1, step from rindex 0 to 1) of a kernel-coordinate index.

    ``xindex`` is flat over the kept dimensions, so its first step is the stride of the
    innermost kept dimension (of size > 1); likewise ``rindex`` for the reduced ones.
    """
    base = _step(index, 0, 0)
    dx, dr = _step(index, 1, 0), _step(index, 0, 1)
    if base is None:
        return None, None
    return (None if dx is None else dx - base), (None if dr is None else dr - base)


def column_element_bytes(loads: Iterable[tuple[sympy.Expr, int]]) -> int | None:
    """The element size of a column reduction's x-contiguous loads, or None when the kernel is
    not one. ``loads``: (index in ``xindex``/``rindex`` coordinates, element bytes).

    A column reduction: more loads advance by one element along x (and not along r) than along
    r. Loads constant along r (a bias read once per output) do not decide.
    """
    along_x, along_r = 0, 0
    sizes: list[int] = []
    for index, nbytes in loads:
        dx, dr = index_steps(index)
        if not dr:
            continue
        if abs(dr) == 1:
            along_r += 1
        elif dx == 1:
            along_x += 1
            sizes.append(nbytes)
    return min(sizes) if along_x > along_r else None


def _least_xblock(elem_bytes: int) -> int:
    return max(_COLUMN_MIN_XBLOCK, _COLUMN_ROW_BYTES // max(1, elem_bytes))


def column_multi_pass_rmax(elem_bytes: int) -> int:
    """Longest columns a multi-pass column kernel (softmax over dim 0) holds whole in registers:
    while the narrowest coalesced tile (128 bytes of each row) fits ``_COLUMN_MAX_TILE``."""
    return _COLUMN_MAX_TILE // _least_xblock(elem_bytes)


def column_xblock(xnumel: int, elem_bytes: int = 4) -> int:
    """Output columns per program: at least 128 bytes (32 fp32) of each row, up to 128 columns
    while at least ``_MIN_PROGRAMS`` programs remain; never more than the columns there are."""
    least = _least_xblock(elem_bytes)
    xblock = min(_COLUMN_MAX_XBLOCK, next_power_of_2(xnumel))
    while xblock > least and -(-xnumel // xblock) < _MIN_PROGRAMS:
        xblock //= 2
    return xblock


def column_meta(xnumel: int, rnumel: int, persistent: bool, elem_bytes: int = 4) -> dict[str, int]:
    """XBLOCK, RBLOCK, num_warps for a column reduction (see the module docstring).

    Looped: a chunk of ``_COLUMN_TILE`` elements (``RBLOCK`` rows of ``XBLOCK`` columns).
    Persistent: ``RBLOCK`` covers the column; ``XBLOCK`` shrinks only if the tile would pass
    ``_COLUMN_MAX_TILE`` (correct for any ``rnumel``: the per-call choice of a symbolic kernel).
    """
    xblock = column_xblock(xnumel, elem_bytes)
    if persistent:
        rblock = next_power_of_2(rnumel)
        xblock = max(1, min(xblock, _COLUMN_MAX_TILE // rblock))
    else:
        rblock = min(next_power_of_2(rnumel), max(1, _COLUMN_TILE // xblock))
    num_warps = max(2, min(16, xblock * rblock // 256))
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": num_warps}


def column_split(xnumel: int, rnumel: int, elem_bytes: int = 4) -> int:
    """Chunks to cut each column into (1: no split), for static sizes.

    Split when the columns are long (>= ``COLUMN_SPLIT_MIN_RNUMEL`` rows) and the column kernel
    would run fewer than ``_COLUMN_SPLIT_PROGRAMS`` programs. The split is the smallest divisor
    of ``rnumel`` (chunks need no tail mask) that gives the first kernel (``split * xnumel``
    columns) ``_MIN_PROGRAMS`` programs, keeping chunks of at least ``_COLUMN_SPLIT_MIN_CHUNK``
    rows and at most ``_COLUMN_SPLIT_MAX`` chunks (else the largest such divisor).
    """
    def programs(columns: int) -> int:
        return -(-columns // column_xblock(columns, elem_bytes))

    if rnumel < COLUMN_SPLIT_MIN_RNUMEL or programs(xnumel) >= _COLUMN_SPLIT_PROGRAMS:
        return 1
    best = 1
    for s in range(2, min(_COLUMN_SPLIT_MAX, rnumel // _COLUMN_SPLIT_MIN_CHUNK) + 1):
        if rnumel % s == 0:
            best = s
            if programs(s * xnumel) >= _MIN_PROGRAMS:
                break
    return best
