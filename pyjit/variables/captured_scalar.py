"""``tensor.item()`` kept in the graph (``config.capture_scalar_outputs``, torch.compile's
``capture_scalar_outputs``).

By default ``.item()`` is a ``data_dependent`` graph break: Python gets the number and the code
after it resumes in a new graph. With the setting on, the number stays a value *of the graph*
while it only feeds tensor operations: a :class:`CapturedScalarVariable` is a 0-d tensor node
holding the Python number (float64 for a ``float``, int64 for an ``int``, bool for a ``bool``,
detached), so ``x * s + 1`` and ``s * 2 + 1`` are recorded instead of breaking.

Semantics follow Python, not torch:

- scalar with scalar (or a Python constant): the result type is Python's (``int / int`` is a
  float, ``True + 1`` an int); both operands are cast to that type's dtype first, so the graph
  computes what Python computes (IEEE doubles, 64-bit ints; ``//`` and ``%`` floor as Python's);
- scalar with a tensor: the scalar takes the dtype a Python number of its type would give
  (``torch.result_type(x, 1.0)``: an int tensor times a float is the default float dtype), the
  way eager treats a Python number in a tensor operation.

Anything else that needs the number (``if s > 0:``, ``int(s)``, ``range(s)``, a torch function
argument, printing) is a ``data_dependent`` break *there*: the graph before it returns the 0-d
tensor and the replacement code reads ``.item()`` of it, so Python sees eager's number.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator
    from .tensor import TensorVariable

_DTYPE_NAMES = {float: "float64", int: "int64", bool: "bool"}


def _dtype(py_type: type) -> torch.dtype:
    # (looked up per call: the torch stub of the torch-free opcode self-check has no dtypes)
    return getattr(torch, _DTYPE_NAMES[py_type])
_SAMPLE = {float: 1.5, int: 3, bool: True}  # representatives for Python's result-type rules

# Binary operators recorded on scalars; the rest (shifts, matmul, divmod...) need the number.
_SCALAR_OPS = frozenset({
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow,
})
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
            operator.ipow: operator.pow}


class CapturedScalarVariable(VariableTracker):
    """A Python number computed in the graph: ``tensor`` (0-d, dtype of ``py_type``)."""

    __slots__ = ("tensor", "py_type")

    def __init__(self, tensor: "TensorVariable", py_type: type) -> None:
        super().__init__(None)
        self.tensor = tensor
        self.py_type = py_type

    @staticmethod
    def of_item(tx: "Translator", value: "TensorVariable") -> VariableTracker:
        """``value.item()``: the one element as a 0-d tensor of its Python type's dtype."""
        example = value.example
        if example.numel() != 1:
            unsupported("data_dependent", f"Tensor.item() of a tensor with {example.numel()} elements")
        if example.dtype.is_complex:
            unsupported("data_dependent", "Tensor.item() of a complex tensor")
        py_type = bool if example.dtype == torch.bool else float if example.dtype.is_floating_point else int
        call = tx.output.call
        flat = call(tx, "call_method", "reshape", [call(tx, "call_method", "detach", [value], {}), ConstantVariable(())], {})
        return CapturedScalarVariable(_cast(tx, flat, _dtype(py_type)), py_type)  # type: ignore[arg-type]

    def python_type(self) -> type:
        return self.py_type

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        unsupported("data_dependent", "the Python value of a captured tensor.item() (config.capture_scalar_outputs)")

    def truth(self, tx: "Translator") -> bool:
        unsupported("data_dependent", "the truth value of a captured tensor.item() (config.capture_scalar_outputs)")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return f"{cg.ref(torch.Tensor.item, 'tensor_item')}({self.tensor.reconstruct(cg)})"

    def __repr__(self) -> str:
        return f"CapturedScalarVariable({self.py_type.__name__}, {self.tensor.node.name})"


def _cast(tx: "Translator", value: "TensorVariable", dtype: torch.dtype) -> "TensorVariable":
    if value.example.dtype == dtype:
        return value
    return tx.output.call(tx, "call_method", "to", [value, ConstantVariable(dtype)], {})  # type: ignore[return-value]


def _python_type(value: VariableTracker) -> type | None:
    if isinstance(value, CapturedScalarVariable):
        return value.py_type
    if isinstance(value, ConstantVariable) and type(value.value) in _DTYPE_NAMES:
        return type(value.value)
    return None


def _as_tensor(tx: "Translator", value: VariableTracker, dtype: torch.dtype) -> VariableTracker:
    """A scalar operand as a 0-d tensor of ``dtype`` (a constant stays a Python number:
    torch then computes in ``dtype`` as well)."""
    if isinstance(value, CapturedScalarVariable):
        return _cast(tx, value.tensor, dtype)
    convert = float if dtype.is_floating_point else bool if dtype == torch.bool else int
    return ConstantVariable(convert(value.as_python_constant()))




def captured_binary(tx: "Translator", op: Callable[[Any, Any], Any], a: VariableTracker,
                    b: VariableTracker) -> VariableTracker | None:
    """``op(a, b)`` where an operand is a captured scalar; None when this module has no say."""
    from .tensor import TensorVariable

    if not (isinstance(a, CapturedScalarVariable) or isinstance(b, CapturedScalarVariable)):
        return None
    base = _INPLACE.get(op, op)
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        # A Python number in a tensor operation: the dtype eager gives such a number.
        tensor, scalar = (a, b) if isinstance(a, TensorVariable) else (b, a)
        assert isinstance(scalar, CapturedScalarVariable) and isinstance(tensor, TensorVariable)
        dtype = torch.result_type(tensor.example, _SAMPLE[scalar.py_type])
        cast = _cast(tx, scalar.tensor, dtype)
        operands: list[VariableTracker] = [a, cast] if tensor is a else [cast, b]
        if base is not op and tensor is not a:  # `s += x`: s is rebound to a new tensor
            op = base
        return tx.output.call(tx, "call_function", op, operands, {})
    ta, tb = _python_type(a), _python_type(b)
    if ta is None or tb is None or base not in _SCALAR_OPS:
        unsupported("data_dependent", f"{getattr(base, '__name__', base)} on a captured tensor.item() and {b if ta else a}")
    assert ta is not None and tb is not None
    try:
        result_type = type(base(_SAMPLE[ta], _SAMPLE[tb]))
    except Exception:  # noqa: BLE001 - Python refuses the operation on these types
        unsupported("data_dependent", f"{getattr(base, '__name__', base)} on {ta.__name__} and {tb.__name__}")
    if result_type not in _DTYPE_NAMES:
        unsupported("data_dependent", f"a {result_type.__name__} result of a captured tensor.item()")
    if base is operator.pow and result_type is int and not (isinstance(b, ConstantVariable) and b.value >= 0):
        # an int to a negative power is a float in Python (torch refuses it for int tensors)
        unsupported("data_dependent", "an int captured tensor.item() to a power that may be negative")
    # Compare and compute in the common type of the operands (bool counts as int).
    operand_type = result_type if result_type is not bool else (float if float in (ta, tb) else int if int in (ta, tb) else bool)
    dtype = _dtype(operand_type)
    result = tx.output.call(tx, "call_function", base, [_as_tensor(tx, a, dtype), _as_tensor(tx, b, dtype)], {})
    from .tensor import TensorVariable as _T

    assert isinstance(result, _T)
    return CapturedScalarVariable(_cast(tx, result, _dtype(result_type)), result_type)


def captured_unary(tx: "Translator", op: Callable[[Any], Any], a: VariableTracker) -> VariableTracker | None:
    """``-s``, ``+s``, ``abs(s)`` of a captured scalar (a bool becomes an int, as in Python)."""
    if not isinstance(a, CapturedScalarVariable):
        return None
    if op not in (operator.neg, operator.pos, operator.abs, abs):
        unsupported("data_dependent", f"{getattr(op, '__name__', op)} of a captured tensor.item()")
    py_type = int if a.py_type is bool else a.py_type
    value = _cast(tx, a.tensor, _dtype(py_type))
    target = operator.abs if op is abs else op
    return CapturedScalarVariable(tx.output.call(tx, "call_function", target, [value], {}), py_type)  # type: ignore[arg-type]
