"""Which calls of a torch-level FX graph write their first argument in place.

Shared by the tracer (``trace/output_graph.py``: a graph with in-place ops assumes its inputs do
not alias) and the training backend (``backend/aot/grad_mode.py``: an in-place write under
``no_grad`` must not be replayed with autograd on). Torch-free: it looks at names only.
"""
from __future__ import annotations

import operator
from typing import Any, Mapping

_IN_PLACE_OPERATORS = frozenset({
    operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
    operator.ilshift, operator.irshift,
})


def is_in_place(kind: str, target: Any, kwargs: Mapping[str, Any]) -> bool:
    """``kind``/``target`` as in an FX node (``call_method`` with a method name, or
    ``call_function``): ``x.add_(...)``, ``torch.relu_``, ``x += y``, ``out=``."""
    if kind == "call_method" and isinstance(target, str):
        return target.endswith("_") and not target.startswith("__")
    if target in _IN_PLACE_OPERATORS or "out" in kwargs:
        return True
    name = getattr(target, "__name__", "")
    return name.endswith("_") and not name.startswith("_")  # torch.relu_, F.relu_ ...
