"""The ops-handler Protocol that loop bodies call, and the two analysis handlers.

A loop body (``inner_fn``) never computes anything itself: it calls methods of the handler it
is given (``ops.load``, ``ops.binary("add", a, b)``...). The same body is therefore
- printed by :class:`PrintHandler` (debugging, tests),
- analysed by :class:`RecordHandler` (which buffers it reads/writes, at which indices),
- turned into kernel source by the device's kernel target: ``codegen.triton.TritonKernel`` or
  ``codegen.cpp.CppKernel`` (both ``codegen.common.Kernel``; their op tables are
  ``codegen/triton_ops.py`` and ``codegen/cpp_ops.py``).
The handler is always passed explicitly (no implicit global handler).
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, ContextManager, Literal, Protocol, TypeVar

import sympy
import torch

T = TypeVar("T")

UnaryOp = Literal[
    "abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "erf", "erfc", "erfinv", "sigmoid", "floor", "ceil", "trunc", "round", "sign",
    "reciprocal", "logical_not", "bitwise_not", "isnan", "isinf", "signbit", "lgamma", "square",
]
BinaryOp = Literal[
    "add", "sub", "mul", "truediv", "floordiv", "truncdiv", "mod", "fmod", "pow", "maximum",
    "minimum", "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift", "copysign",
    "hypot", "remainder",
]
ReductionType = Literal["sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "m2"]
"""``m2`` is the sum of squared deviations from the mean (Welford's M2), used for var/std."""

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor"})


class OpsHandler(Protocol[T]):
    """What a loop body may do. ``T`` is the handler's value type (a string of code, a record...)."""

    def load(self, name: str, index: sympy.Expr) -> T: ...

    def store(self, name: str, index: sympy.Expr, value: T) -> None: ...

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> T: ...

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> T: ...

    def to_dtype(self, x: T, dtype: torch.dtype) -> T: ...

    def unary(self, op: UnaryOp, x: T) -> T: ...

    def binary(self, op: BinaryOp, a: T, b: T) -> T: ...

    def where(self, cond: T, a: T, b: T) -> T: ...

    def indirect_indexing(self, value: T, size: int) -> sympy.Symbol:
        """Turn a loaded integer value into an index symbol usable in load/store indices."""
        ...

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType, value: T) -> T: ...


def loads_masked_by(ops: Any, cond: Any) -> ContextManager[None]:
    """Within the block, ``ops``' loads may skip memory where ``cond`` is false (their values
    there are never used: the caller selects with ``where(cond, ...)``). Optional for handlers:
    one with a ``mask_loads(cond)`` context manager (Triton kernels: the load's mask) uses it,
    any other loads as usual. ``cat`` reads each input only inside its own range with it."""
    mask_loads = getattr(ops, "mask_loads", None)
    if mask_loads is None or cond is None:
        return contextlib.nullcontext()
    return mask_loads(cond)


# --------------------------------------------------------------------------- printing
class PrintHandler:
    """Renders a body as pseudo-code strings: ``ops.binary('add', load(arg0_1, i0), 1.0)``."""

    def load(self, name: str, index: sympy.Expr) -> str:
        return f"load({name}, {index})"

    def store(self, name: str, index: sympy.Expr, value: str) -> None:
        self.lines.append(f"store({name}, {index}, {value})")

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> str:
        return f"constant({value!r}, {dtype})"

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> str:
        return f"index_expr({expr}, {dtype})"

    def to_dtype(self, x: str, dtype: torch.dtype) -> str:
        return f"to_dtype({x}, {dtype})"

    def unary(self, op: UnaryOp, x: str) -> str:
        return f"{op}({x})"

    def binary(self, op: BinaryOp, a: str, b: str) -> str:
        return f"{op}({a}, {b})"

    def where(self, cond: str, a: str, b: str) -> str:
        return f"where({cond}, {a}, {b})"

    def indirect_indexing(self, value: str, size: int) -> sympy.Symbol:
        name = f"ind{len(self.lines)}"
        self.lines.append(f"{name} = indirect({value}, {size})")
        return sympy.Symbol(name, integer=True)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType, value: str) -> str:
        return f"{reduction_type}({value})"

    def __init__(self) -> None:
        self.lines: list[str] = []


# --------------------------------------------------------------------------- dependency recording
@dataclasses.dataclass(frozen=True)
class MemoryDep:
    """A read or write of buffer ``name`` at ``index`` (an expression of the node's index variables)."""

    name: str
    index: sympy.Expr


_indirect_counter = itertools.count()


class RecordHandler:
    """Records the loads, stores and index expressions a body performs (dependency analysis).

    Values are ``None``: only side effects on the record matter. Indirect indices become fresh
    ``indirectN`` symbols so that the loaded buffer and the gathering index are both visible.
    """

    def __init__(self) -> None:
        self.reads: list[MemoryDep] = []
        self.writes: list[MemoryDep] = []
        self.index_exprs: list[sympy.Expr] = []
        self.reductions: list[str] = []
        self.has_indirect = False

    def load(self, name: str, index: sympy.Expr) -> Any:
        self.reads.append(MemoryDep(name, sympy.sympify(index)))
        return None

    def store(self, name: str, index: sympy.Expr, value: Any) -> None:
        self.writes.append(MemoryDep(name, sympy.sympify(index)))

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Any:
        return None

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> Any:
        self.index_exprs.append(sympy.sympify(expr))
        return None

    def to_dtype(self, x: Any, dtype: torch.dtype) -> Any:
        return None

    def unary(self, op: UnaryOp, x: Any) -> Any:
        return None

    def binary(self, op: BinaryOp, a: Any, b: Any) -> Any:
        return None

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return None

    def indirect_indexing(self, value: Any, size: int) -> sympy.Symbol:
        self.has_indirect = True
        return sympy.Symbol(f"indirect{next(_indirect_counter)}", integer=True, nonnegative=True)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: ReductionType, value: Any) -> Any:
        self.reductions.append(reduction_type)
        return None


class CountingHandler(RecordHandler):
    """Dependency recorder that also counts the arithmetic a body performs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def to_dtype(self, x: Any, dtype: torch.dtype) -> Any:
        self.ops += 1

    def unary(self, op: Any, x: Any) -> Any:
        self.ops += 1

    def binary(self, op: Any, a: Any, b: Any) -> Any:
        self.ops += 1

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        self.ops += 1


# Static check that the handlers satisfy the Protocol (mypy reads these assignments).
_p: OpsHandler[str] = PrintHandler()
_r: OpsHandler[Any] = RecordHandler()
