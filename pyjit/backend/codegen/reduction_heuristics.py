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
"""
from __future__ import annotations

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
