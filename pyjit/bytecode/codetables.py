"""Binary formats of ``co_linetable`` and ``co_exceptiontable`` (CPython 3.11-3.13).

Both tables are described in CPython's ``Objects/locations.md`` and
``Objects/exception_handling_notes.txt``. This module only converts between bytes and plain
per-code-unit records; attaching them to instructions is :mod:`.decode`'s and
:mod:`.assemble`'s job.

The encoders choose exactly the entry forms the CPython compiler chooses, so an unedited code
object re-encodes byte-identically (the stdlib round-trip test checks this).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

# A location as stored in the line table: (lineno, end_lineno, col, end_col); None = absent.
Location = tuple[Optional[int], Optional[int], Optional[int], Optional[int]]
NO_LOCATION: Location = (None, None, None, None)

# Line-table entry codes (the 4 bits after the entry-start bit).
_CODE_NONE = 15
_CODE_LONG = 14
_CODE_NO_COLUMN = 13
_CODE_ONE_LINE0 = 10  # 10, 11, 12: line delta 0, 1, 2


# ---------------------------------------------------------------- line table: decode


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Little-endian 6-bit varint (bit 6 = more chunks follow)."""
    b = data[pos]
    pos += 1
    val = b & 63
    shift = 0
    while b & 64:
        b = data[pos]
        pos += 1
        shift += 6
        val |= (b & 63) << shift
    return val, pos


def _read_svarint(data: bytes, pos: int) -> tuple[int, int]:
    uval, pos = _read_varint(data, pos)
    return (-(uval >> 1) if uval & 1 else uval >> 1), pos


def decode_linetable(linetable: bytes, firstlineno: int) -> list[tuple[int, Location]]:
    """Entries of a line table as (length in code units, location)."""
    out: list[tuple[int, Location]] = []
    line = firstlineno
    pos = 0
    n = len(linetable)
    while pos < n:
        first = linetable[pos]
        pos += 1
        code = (first >> 3) & 15
        length = (first & 7) + 1
        loc: Location
        if code == _CODE_NONE:
            loc = NO_LOCATION
        elif code == _CODE_LONG:
            delta, pos = _read_svarint(linetable, pos)
            line += delta
            end_delta, pos = _read_varint(linetable, pos)
            col, pos = _read_varint(linetable, pos)
            end_col, pos = _read_varint(linetable, pos)
            loc = (line, line + end_delta, col - 1 if col else None, end_col - 1 if end_col else None)
        elif code == _CODE_NO_COLUMN:
            delta, pos = _read_svarint(linetable, pos)
            line += delta
            loc = (line, line, None, None)
        elif code >= _CODE_ONE_LINE0:
            line += code - _CODE_ONE_LINE0
            col = linetable[pos]
            end_col = linetable[pos + 1]
            pos += 2
            loc = (line, line, col, end_col)
        else:  # short form: same line, column group in the code
            second = linetable[pos]
            pos += 1
            col = code * 8 + (second >> 4)
            loc = (line, line, col, col + (second & 15))
        out.append((length, loc))
    return out


# ---------------------------------------------------------------- line table: encode


def _write_varint(out: bytearray, val: int) -> None:
    while val >= 64:
        out.append(64 | (val & 63))
        val >>= 6
    out.append(val)


def _write_svarint(out: bytearray, val: int) -> None:
    _write_varint(out, ((-val) << 1) | 1 if val < 0 else val << 1)


class LineTableWriter:
    """Accumulates (location, size) runs and encodes them the way CPython's assembler does."""

    def __init__(self, firstlineno: int, merge: bool = True) -> None:
        # CPython 3.11 writes one entry per instruction; 3.12+ merge runs of equal locations.
        self.merge = merge
        self.out = bytearray()
        self.lineno = firstlineno  # line of the last entry that carried a line
        self._loc: Location = NO_LOCATION
        self._size = 0

    def add(self, loc: Location, size: int) -> None:
        """Append ``size`` code units at ``loc`` (merged with the previous run if equal)."""
        if loc != self._loc or not self.merge:
            self._flush()
            self._loc = loc
        self._size += size

    def finish(self) -> bytes:
        self._flush()
        return bytes(self.out)

    def _flush(self) -> None:
        size = self._size
        self._size = 0
        while size > 8:
            self._entry(self._loc, 8)
            size -= 8
        if size:
            self._entry(self._loc, size)

    def _header(self, code: int, size: int) -> None:
        self.out.append(0x80 | (code << 3) | (size - 1))

    def _entry(self, loc: Location, size: int) -> None:
        line, end_line, col, end_col = loc
        if line is None:
            self._header(_CODE_NONE, size)
            return
        delta = line - self.lineno
        if col is None or end_col is None:
            if end_line == line or end_line is None:
                self._header(_CODE_NO_COLUMN, size)
                _write_svarint(self.out, delta)
                self.lineno = line
                return
        elif end_line == line:
            if delta == 0 and col < 80 and end_col - col < 16 and end_col >= col:
                self._header(col // 8, size)
                self.out.append(((col % 8) << 4) | (end_col - col))
                return
            if 0 <= delta < 3 and col < 128 and end_col < 128:
                self._header(_CODE_ONE_LINE0 + delta, size)
                self.out.append(col)
                self.out.append(end_col)
                self.lineno = line
                return
        self._header(_CODE_LONG, size)
        _write_svarint(self.out, delta)
        _write_varint(self.out, (end_line if end_line is not None else line) - line)
        _write_varint(self.out, col + 1 if col is not None else 0)
        _write_varint(self.out, end_col + 1 if end_col is not None else 0)
        self.lineno = line


# ---------------------------------------------------------------- exception table


@dataclasses.dataclass(frozen=True)
class RawExnEntry:
    """One exception-table entry in code units: [start, end) -> target, at stack depth."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


def _read_exn_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Big-endian 6-bit varint (bit 6 = more chunks follow; bit 7 marks an entry start)."""
    b = data[pos]
    pos += 1
    val = b & 63
    while b & 64:
        b = data[pos]
        pos += 1
        val = (val << 6) | (b & 63)
    return val, pos


def decode_exceptiontable(table: bytes) -> list[RawExnEntry]:
    out = []
    pos = 0
    while pos < len(table):
        start, pos = _read_exn_varint(table, pos)
        length, pos = _read_exn_varint(table, pos)
        target, pos = _read_exn_varint(table, pos)
        dl, pos = _read_exn_varint(table, pos)
        out.append(RawExnEntry(start, start + length, target, dl >> 1, bool(dl & 1)))
    return out


def _write_exn_varint(out: bytearray, val: int, start_bit: int) -> None:
    chunks = [val & 63]
    val >>= 6
    while val:
        chunks.append(val & 63)
        val >>= 6
    chunks.reverse()
    for i, chunk in enumerate(chunks):
        byte = chunk | (64 if i < len(chunks) - 1 else 0)
        if i == 0:
            byte |= start_bit
        out.append(byte)


def encode_exceptiontable(entries: list[RawExnEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        _write_exn_varint(out, e.start, 128)
        _write_exn_varint(out, e.end - e.start, 0)
        _write_exn_varint(out, e.target, 0)
        _write_exn_varint(out, (e.depth << 1) | int(e.lasti), 0)
    return bytes(out)


def iter_units(entries: list[tuple[int, Location]]) -> Iterator[Location]:
    """Expand decoded line-table entries into one location per code unit."""
    for length, loc in entries:
        for _ in range(length):
            yield loc
