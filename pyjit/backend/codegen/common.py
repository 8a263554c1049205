"""Small code-writing helpers shared by the kernel and wrapper generators."""
from __future__ import annotations

import contextlib
from typing import Iterator

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
