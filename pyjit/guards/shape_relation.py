"""One relation between symbolic sizes that a trace relied on (``s0 >= 2``, ``s1 == s0``,
``s0 % 8 == 0``), as a guard: its source-form text, its slots and three ways to check it.

Slots are filled by the tensor guards' bindings (``TensorSpec.bind``): slot ``k`` holds
``origins[k]`` = ``L['x'].size()[0]``, a stride, or a scalar input. The relation is checked

- in C (:mod:`pyjit.guards.shape_program` compiles it to a small reverse-Polish program the
  guard tree evaluates after every other check passed) -- the normal path;
- in Python, from the slot values (:meth:`ShapeRelation.holds`), for the pure-Python runtime
  and when a relation uses a function the program language lacks;
- from a frame's values (:meth:`holds_on`), for diagnostics (``recompiles``).

Torch-free: sympy is used only while building (by the tracer).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .source import FrameValues, Source


@dataclasses.dataclass(frozen=True)
class SlotOrigin:
    """Where a slot's value is read: ``source.size(dim)``, ``source.stride(dim)`` or the scalar."""

    source: "Source"
    what: str  # "size" | "stride" | "scalar"
    dim: int | None

    def read(self, value: Any) -> Any:
        if self.what == "size":
            return value.size(self.dim)
        if self.what == "stride":
            return value.stride(self.dim)
        return value

    def text(self) -> str:
        if self.what == "scalar":
            return self.source.name()
        return f"{self.source.name()}.{self.what}()[{self.dim}]"


@dataclasses.dataclass(eq=False)
class ShapeRelation:
    text: str                           # in source form: "L['x'].size()[0] >= 2"
    slots: tuple[int, ...]              # the slots it reads (indices into origins)
    origins: tuple[SlotOrigin, ...]     # every slot of the trace (shared by its relations)
    python: Callable[[Sequence[int]], bool]  # the check over all slot values
    python_source: str                  # the body of ``python`` (for dumps and debugging)
    program: tuple[int, ...] | None     # the C program, None when the language lacks a function

    @staticmethod
    def build(expr: Any, slot_symbols: Sequence[Any], origins: Sequence[Any], names: Sequence[str]) -> "ShapeRelation":
        """From a sympy relation over ``slot_symbols`` (slot ``k`` is ``slot_symbols[k]``)."""
        import sympy
        from torch.utils._sympy.printers import PythonPrinter

        index = {sym: k for k, sym in enumerate(slot_symbols)}
        used = tuple(sorted(index[s] for s in expr.free_symbols))
        printer = PythonPrinter()
        text = printer.doprint(expr.xreplace({slot_symbols[k]: sympy.Symbol(names[k]) for k in used}))
        body = printer.doprint(expr.xreplace({slot_symbols[k]: sympy.Symbol(f"v[{k}]") for k in used}))
        namespace: dict[str, Any] = {}
        exec(f"def ___pyjit_shape_check(v):\n    return bool({body})\n", namespace)  # noqa: S102 - our own text
        slot_origins = tuple(o if isinstance(o, SlotOrigin) else SlotOrigin(o.source, o.what, o.dim) for o in origins)
        program = None
        try:
            if any(slot_origins[k].what == "scalar" for k in used):
                raise ValueError("scalar slots are read from Python")
            from .shape_program import compile_relation

            program = compile_relation(expr, {slot_symbols[k]: k for k in used})
        except ImportError:
            program = None
        except ValueError:  # NotCompilable: checked from Python instead
            program = None
        return ShapeRelation(text, used, slot_origins, namespace["___pyjit_shape_check"], body, program)

    # -- evaluation ------------------------------------------------------------------------------
    def holds(self, values: Sequence[int]) -> bool:
        try:
            return bool(self.python(values))
        except (ZeroDivisionError, OverflowError, ValueError):
            return False

    def slot_values(self, read: Callable[["Source"], Any]) -> list[Any]:
        """All slot values, reading each slot's source with ``read``."""
        cache: dict[Any, Any] = {}
        out: list[Any] = []
        for o in self.origins:
            if o.source not in cache:
                cache[o.source] = read(o.source)
            out.append(o.read(cache[o.source]))
        return out

    def holds_on(self, frame: "FrameValues") -> bool:
        return self.holds(self.slot_values(lambda s: s.get(frame)))

    def describe_values(self, frame: "FrameValues") -> str:
        values = self.slot_values(lambda s: s.get(frame))
        return ", ".join(f"{self.origins[k].text()} = {values[k]}" for k in self.slots)

    def check_sources(self, *source_values: Any) -> bool:
        """The check given the values of ``self.sources()`` (the generated Python guard)."""
        by_source = dict(zip(self.sources(), source_values))
        return self.holds(self.slot_values(by_source.__getitem__))

    def sources(self) -> list["Source"]:
        seen: list[Any] = []
        for o in self.origins:
            if o.source not in seen:
                seen.append(o.source)
        return seen
