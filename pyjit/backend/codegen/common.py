"""Small code-writing helpers shared by the kernel and wrapper generators."""
from __future__ import annotations

import contextlib
import re
from typing import Iterator, Mapping

import torch

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def triton_dtype(dtype: torch.dtype) -> str:
    try:
        return TRITON_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"no Triton type for {dtype}") from None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp16/bf16 values are loaded and computed in fp32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class IndentedBuffer:
    def __init__(self, indent: int = 0):
        self.lines: list[str] = []
        self._indent = indent

    def writeline(self, line: str) -> None:
        self.lines.append(("    " * self._indent + line) if line else "")

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.writeline(line)

    @contextlib.contextmanager
    def indent(self, n: int = 1) -> Iterator[None]:
        self._indent += n
        try:
            yield
        finally:
            self._indent -= n

    def getvalue(self) -> str:
        return "\n".join(self.lines) + "\n"


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def drop_dead_loop_temporaries(sections: Mapping[str, IndentedBuffer], assign: "re.Pattern[str]") -> None:
    """Remove assignments to ``tmpN`` in the ``loop*`` sections that nothing reads (left behind
    when a reduction moved to an earlier loop), until none is left, so a loop with no work left
    is not emitted and reads no memory. ``assign`` matches a line assigning ``tmpN`` (group 1)
    in the generator's syntax (Triton: ``tmp3 = ...``; C++: ``float tmp3 = ...``)."""
    changed = True
    while changed:
        changed = False
        text = "\n".join(line for sec in sections.values() for line in sec.lines)
        counts: dict[str, int] = {}
        for m in re.finditer(r"\btmp\d+\b", text):
            counts[m.group(0)] = counts.get(m.group(0), 0) + 1
        for name, sec in sections.items():
            if not name.startswith("loop"):
                continue
            kept = [line for line in sec.lines if (m := assign.match(line)) is None or counts.get(m.group(1), 0) > 1]
            changed |= len(kept) != len(sec.lines)
            sec.lines = kept
