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

import ast
import dataclasses
import math
import types
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
        return ShapeRelation(text, used, slot_origins, _make_check(body), body, program)

    @staticmethod
    def rebuild(text: str, slots: Sequence[int], origins: Sequence[SlotOrigin], python_source: str,
                program: tuple[int, ...] | None) -> "ShapeRelation":
        """A relation from its recorded parts (the warm start's frame records), without sympy.

        ``python_source`` is re-executed, so it must pass :func:`check_python_source` (a plain
        expression over ``v[k]``); ``ValueError`` says what is wrong with any part."""
        check_python_source(python_source, len(origins))
        if any(not isinstance(k, int) or not 0 <= k < len(origins) for k in slots):
            raise ValueError(f"relation slots {list(slots)!r:.60} out of range for {len(origins)} slot origins")
        if program is not None:
            from .shape_program import validate_program

            try:
                n = validate_program(tuple(program))
            except TypeError as e:
                raise ValueError(str(e)) from None
            if n > len(origins):
                raise ValueError(f"relation program reads slot {n - 1}, only {len(origins)} slots exist")
            program = tuple(program)
        return ShapeRelation(str(text), tuple(slots), tuple(origins), _make_check(python_source),
                             python_source, program)

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


# What torch's PythonPrinter may print in a relation (``math.ceil(...)``, ``torch.sym_float(...)``):
# the names the generated check runs with (a stand-in for torch: this module is torch-free).
_PRINTED_NAMES: dict[str, Any] = {
    "math": math,
    "torch": types.SimpleNamespace(sym_float=float, _sym_sqrt=math.sqrt),
}


def _make_check(body: str) -> Callable[[Sequence[int]], bool]:
    """The Python check ``v -> bool(body)`` (``body`` is our own printed relation)."""
    namespace: dict[str, Any] = dict(_PRINTED_NAMES)
    exec(f"def ___pyjit_shape_check(v):\n    return bool({body})\n", namespace)  # noqa: S102 - our own text
    return namespace["___pyjit_shape_check"]


# What a relation's Python text may contain when it is rebuilt from a record: the printed forms
# of the relations the tracer builds over slot values (PythonPrinter output).
_ALLOWED_CALLS = frozenset({"min", "max", "abs", "int", "float"})
_ALLOWED_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div,
                  ast.FloorDiv, ast.Mod, ast.Pow, ast.UnaryOp, ast.USub, ast.UAdd, ast.Not, ast.Compare, ast.Eq,
                  ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Constant, ast.Subscript, ast.Name, ast.Call,
                  ast.Load)
_MAX_SOURCE = 4096


def check_python_source(source: str, n_slots: int) -> None:
    """Refuse (``ValueError``) a relation text that is not a plain expression over ``v[k]``:
    arithmetic, comparisons and boolean operators, int/float/bool constants, ``v[k]`` with an
    int constant ``k < n_slots``, and calls of ``min``/``max``/``abs``/``int``/``float``; a power
    only with a small constant exponent. Anything else (attributes, other names, lambdas,
    comprehensions...) is refused, so re-executing a recorded relation cannot run other code."""
    if not isinstance(source, str) or len(source) > _MAX_SOURCE:
        raise ValueError("relation source is not a string of reasonable length")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"relation source {source!r:.60} does not parse ({e.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"relation source {source!r:.60} uses {type(node).__name__}")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float, bool):
            raise ValueError(f"relation source {source!r:.60} has a {type(node.value).__name__} constant")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _ALLOWED_CALLS) or node.keywords \
                    or not node.args:
                raise ValueError(f"relation source {source!r:.60} calls {ast.unparse(node.func)!r:.30}")
        elif isinstance(node, ast.Subscript):
            ok = isinstance(node.value, ast.Name) and node.value.id == "v" and isinstance(node.slice, ast.Constant) \
                and type(node.slice.value) is int and 0 <= node.slice.value < n_slots
            if not ok:
                raise ValueError(f"relation source {source!r:.60} indexes {ast.unparse(node)!r:.30}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if not (isinstance(exponent, ast.Constant) and type(exponent.value) is int and 0 <= exponent.value <= 64):
                raise ValueError(f"relation source {source!r:.60} has a power with a non-constant exponent")
    # Names: ``v`` under a subscript, or a called builtin of the allowed set.
    allowed_names = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Subscript)} | \
        {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in allowed_names:
            raise ValueError(f"relation source {source!r:.60} reads the name {node.id!r}")
