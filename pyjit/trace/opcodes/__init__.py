"""The opcode handler registry: opname -> handler(tx, inst), filled by the family modules.

Families: :mod:`.loads` (loads/stores/stack shuffles), :mod:`.calls` (calls, function creation,
``with``), :mod:`.control` (jumps, loops, returns), :mod:`.build` (containers, unpacking,
strings), :mod:`.arith` (operators, comparisons, subscripts). Covers the opcodes ordinary
PyTorch code compiles to on CPython 3.11, 3.12 and 3.13.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..translator import Instruction, Translator

Handler = Callable[["Translator", "Instruction"], None]
OPCODES: dict[str, Handler] = {}


def register(*opnames: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for name in opnames:
            assert name not in OPCODES, f"duplicate handler for {name}"
            OPCODES[name] = fn
        return fn

    return deco


from . import arith, build, calls, control, loads  # noqa: E402,F401  (fill the registry)

__all__ = ["OPCODES", "register", "arith", "build", "calls", "control", "loads"]
