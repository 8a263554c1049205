"""Symbolic scalars: a size of a dynamic dimension (``x.size(0)``), arithmetic on it, and Python
``int``/``float`` inputs made symbolic after they changed between calls.

A :class:`SymNodeVariable` is a graph node whose fake value is a ``torch.SymInt`` /
``torch.SymFloat`` / ``torch.SymBool`` of the trace's ``ShapeEnv`` (``pyjit/trace/dynamic.py``).
Arithmetic and comparisons with other symbols or constants record ``operator.*`` nodes, so
``x.view(b, t, h, d)`` receives nodes and the graph stays valid for every size.

Wherever Python needs the concrete value (``if n > 4:``, ``range(n)``, a list index, any
function pyjit folds at trace time) the value is *specialised*: :meth:`as_python_constant`
evaluates it through the ``ShapeEnv``, which records the relation as a guard (``Eq(s0, 8)``
or ``s0 > 4``). So every consumer that only knows constants stays correct, and only loses
generality. ``is_python_constant()`` is True for that reason.

:class:`SymSliceVariable` is a slice with a symbolic bound (``x[:, :n]``).
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..logs import get_logger
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    import torch.fx as fx

    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

_dyn_log = get_logger("dynamic")

# (getattr: the torch stub the torch-free opcode self-check runs under has none of them)
SYM_TYPES: tuple[type, ...] = tuple(getattr(torch, n) for n in ("SymInt", "SymFloat", "SymBool") if hasattr(torch, n))


def is_symbolic(value: Any) -> bool:
    """A SymInt/SymFloat/SymBool that is not secretly a constant."""
    return isinstance(value, SYM_TYPES) and not _is_constant_sym(value)


def _is_constant_sym(value: Any) -> bool:
    try:
        return value.node.expr.is_number
    except Exception:  # noqa: BLE001 - unknown node kind: treat as symbolic
        return False


def concrete(value: Any) -> Any:
    """The plain Python value of a Sym* that is a number (or the value itself)."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    return value


def _python_type_of(value: Any) -> type:
    if isinstance(value, torch.SymInt):
        return int
    if isinstance(value, torch.SymFloat):
        return float
    return bool


class SymNodeVariable(VariableTracker):
    """A symbolic int/float/bool computed in the graph (``node``) with fake value ``example``."""

    __slots__ = ("node", "example")

    def __init__(self, node: "fx.Node", example: Any, source: Any = None) -> None:
        super().__init__(source)
        self.node = node
        self.example = example

    @staticmethod
    def create(tx: "Translator", node: "fx.Node", example: Any) -> VariableTracker:
        """A tracker for ``node`` whose fake value is ``example``: constant when it is one."""
        if isinstance(example, SYM_TYPES) and not _is_constant_sym(example):
            node.meta["example_value"] = example
            return SymNodeVariable(node, example)
        value = concrete(example)
        if not node.users:
            tx.output.graph.erase_node(node)
        return ConstantVariable(value)

    def python_type(self) -> type:
        return _python_type_of(self.example)

    # -- specialisation -----------------------------------------------------------------------
    def is_python_constant(self) -> bool:
        return True  # by specialising (see the module docstring)

    def as_python_constant(self) -> Any:
        value = concrete(self.example)  # the ShapeEnv records the equality as a guard
        if _dyn_log.isEnabledFor(20):
            tx = _current_tx(self.example)
            where = f" at {tx.location().filename}:{tx.location().lineno}" if tx is not None else ""
            _dyn_log.info("specialised %s = %s to %r%s (the value was needed as a Python constant; "
                          "the entry is guarded on it)", self.node.name, self.example, value, where)
        return value

    def truth(self, tx: "Translator") -> bool:
        return bool(self.example)  # guarded through the ShapeEnv like any relation

    # -- operations ---------------------------------------------------------------------------
    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in ("real",):
            return self
        if name == "imag":
            return ConstantVariable(0)
        from .builtins import ConstantMethodVariable

        return ConstantMethodVariable(self, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        op = _DUNDER_BINARY.get(name)
        if op is not None and len(args) == 1 and not kwargs:
            return symbolic_binary(tx, op, self, args[0])
        if name in ("__int__", "__index__") and not args:
            return symbolic_call(tx, int, [self]) if self.python_type() is not bool else ConstantVariable(int(self.as_python_constant()))
        if name == "__float__" and not args:
            return symbolic_call(tx, float, [self])
        if name in ("is_integer", "bit_length", "conjugate", "as_integer_ratio", "hex", "to_bytes"):
            return ConstantVariable(getattr(self.as_python_constant(), name)(*[a.as_python_constant() for a in args]))
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        """The value after the graph ran: computed from the inputs' sizes (not a constant, so a
        resume function or the caller keeps the generality)."""
        if self.source is not None:  # a scalar input: read it again from the frame
            return self.source.expr()
        from ..trace.dynamic import reconstruct_symbolic

        return reconstruct_symbolic(cg, self.example)

    def __repr__(self) -> str:
        return f"SymNodeVariable({self.node.name}, {self.example})"


def contains_symbolic(value: VariableTracker) -> bool:
    """Does ``value`` (a tuple/list, possibly nested) hold a symbolic size or scalar? Folding
    such a container into a Python constant would specialise every symbol in it."""
    if isinstance(value, (SymNodeVariable, SymSliceVariable)):
        return True
    items = getattr(value, "items", None)
    return isinstance(items, list) and any(contains_symbolic(i) for i in items)


def _current_tx(example: Any) -> Any:
    """The translator running the step that needs ``example`` (for log locations), if known."""
    shape_env = getattr(getattr(example, "node", None), "shape_env", None)
    ref = getattr(shape_env, "pyjit_output", None)
    return getattr(ref() if ref is not None else None, "current_tx", None)


class SymSliceVariable(VariableTracker):
    """``slice(start, stop, step)`` with at least one symbolic bound."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[VariableTracker]) -> None:
        super().__init__(None)
        self.parts = parts

    def python_type(self) -> type:
        return slice

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return slice(*[p.as_python_constant() for p in self.parts])

    def to_fx(self, output: Any) -> slice:
        return slice(*[output.to_fx(p) for p in self.parts])

    def to_fake(self, output: Any) -> slice:
        return slice(*[output.to_fake(p) for p in self.parts])

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return f"{cg.ref(slice)}({', '.join(p.reconstruct(cg) for p in self.parts)})"

    def __repr__(self) -> str:
        return f"SymSliceVariable({self.parts})"


_DUNDER_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul, "__floordiv__": operator.floordiv,
    "__truediv__": operator.truediv, "__mod__": operator.mod, "__pow__": operator.pow,
    "__eq__": operator.eq, "__ne__": operator.ne, "__lt__": operator.lt, "__le__": operator.le,
    "__gt__": operator.gt, "__ge__": operator.ge,
}

# Operators on symbolic values recorded into the graph (everything else specialises).
SYMBOLIC_BINARY = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod, operator.pow,
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
})
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.ifloordiv: operator.floordiv, operator.itruediv: operator.truediv, operator.imod: operator.mod,
            operator.ipow: operator.pow}


def involves_symbol(*vs: VariableTracker) -> bool:
    return any(isinstance(v, SymNodeVariable) for v in vs)


def _numeric_operand(v: VariableTracker) -> bool:
    if isinstance(v, SymNodeVariable):
        return True
    if isinstance(v, ConstantVariable):
        return type(v.value) in (int, float, bool)
    return False


def symbolic_binary(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``op(a, b)`` recorded as a graph node when one side is symbolic and the other a number;
    None when this is not such a case (the caller goes on with its other rules)."""
    op = _INPLACE.get(op, op)
    if op not in SYMBOLIC_BINARY or not (_numeric_operand(a) and _numeric_operand(b)) or not involves_symbol(a, b):
        return None
    return symbolic_call(tx, op, [a, b])


def symbolic_call(tx: "Translator", fn: Callable[..., Any], args: list[VariableTracker]) -> VariableTracker:
    """Record ``fn(*args)`` over symbolic/constant numbers as a graph node."""
    output = tx.output
    fake_args = [output.to_fake(a) for a in args]
    try:
        example = fn(*fake_args)
    except ZeroDivisionError as e:
        from ..trace.graph_breaks import unsupported

        unsupported("exception", f"{getattr(fn, '__name__', fn)} on sizes raised ZeroDivisionError: {e}")
    node = output.graph.create_node("call_function", fn, tuple(output.to_fx(a) for a in args), {})
    node.meta["stack_trace"] = tx.stack_trace()
    return SymNodeVariable.create(tx, node, example)
