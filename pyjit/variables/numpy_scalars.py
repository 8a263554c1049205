"""NumPy scalars (``np.float32(2.0)``, ``np.int64(3)``, ``np.bool_``) as Python constants.

A numpy number or bool scalar is immutable, so the tracer treats it like an ``int``/``float``
constant: built from constants at trace time (its constructor is numpy's and deterministic),
folded in arithmetic with other constants (numpy's own rules give the result type), guarded by
type and value when read from the frame.

Where one meets a tensor in an operator (``x * np.float32(2.0)``), the graph receives the
equivalent Python scalar (``.item()``): torch reads a numpy scalar through the same path as a
Python number (a "wrapped number" that does not promote the tensor's dtype; on the left side,
numpy defers to the tensor's reflected operator), so the result is the same, and graph
consumers never see numpy objects. NumPy is never imported here: a value can only be a numpy
scalar when numpy is loaded already.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator


def _numpy() -> Any:
    return sys.modules.get("numpy")


def is_numpy_scalar(value: Any) -> bool:
    """A numpy number or bool scalar (exact numpy types only: a subclass may run user code)."""
    np = _numpy()
    if np is None or type(value).__module__ != "numpy":
        return False
    return isinstance(value, (np.number, np.bool_))


def is_numpy_scalar_type(cls: Any) -> bool:
    np = _numpy()
    return np is not None and isinstance(cls, type) and cls.__module__ == "numpy" and issubclass(cls, (np.number, np.bool_))


def construct_numpy_scalar(tx: "Translator", cls: type, args: list[VariableTracker],
                           kwargs: dict[str, VariableTracker]) -> VariableTracker | None:
    """``np.float32(2.0)`` from constants: folded; None when an argument is no constant."""
    from .builtins import all_constant, fold

    if not all_constant(args, kwargs):
        return None
    return fold(tx, cls, args, kwargs)


def as_torch_operand(v: VariableTracker) -> VariableTracker:
    """The operand a tensor operator receives for ``v``: numpy scalars become Python scalars."""
    if isinstance(v, ConstantVariable) and is_numpy_scalar(v.value):
        return ConstantVariable(v.value.item())
    return v
