"""Tensor trackers: a graph node plus its fake example value.

Static sizes fold to constants: ``x.shape``, ``x.size(1)``, ``x.dim()``, ``x.numel()``... (the
tensor-match guard on every input makes that sound). Sizes of a tensor with symbolic dimensions
(dynamic shapes, ``trace/dynamic.py``) are recorded as graph nodes instead and tracked as
``SymNodeVariable`` / ``SizeVariable`` (``variables/symbolic.py``). Tensor methods are recorded
as ``call_method`` nodes; reading a tensor's *data* (``item()``, ``tolist()``, ``bool(x)``) is a
``data_dependent`` graph break.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..config import config
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    import torch.fx as fx

    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator

# Attributes answered from the (static) fake example without touching the graph.
_STATIC_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "is_sparse", "is_quantized", "is_meta", "layout",
    "requires_grad", "is_nested", "is_mkldnn", "is_complex_dtype", "itemsize",
})
# Methods answered from static metadata.
_STATIC_METHODS = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous", "element_size",
    "get_device", "is_floating_point", "is_complex", "__len__", "is_signed", "storage_offset",
})
# Static methods whose answer is a size: recorded (symbolic) when the tensor has symbolic sizes.
_SIZE_METHODS = frozenset({"size", "numel", "nelement", "stride", "__len__", "storage_offset"})
_DATA_METHODS = frozenset({
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "data_ptr", "__array__",
    "nonzero_static", "cpu_numpy",
})


# Methods whose Scalar ``value=`` may be given as a 0-d tensor (converted with item() eagerly).
_SCALAR_VALUE_METHODS = frozenset({"addcdiv_", "addcmul_", "addcdiv", "addcmul"})


class TensorVariable(VariableTracker):
    __slots__ = ("node", "example", "ptype")

    def __init__(self, node: "fx.Node", example: torch.Tensor, source: Any = None, python_type: type | None = None) -> None:
        super().__init__(source)
        self.node = node
        self.example = example
        self.ptype = python_type or torch.Tensor

    def python_type(self) -> type:
        return self.ptype

    def is_symbolic(self) -> bool:
        """Some size or stride of this tensor is a symbol (dynamic shapes)."""
        ex = self.example
        return any(isinstance(s, torch.SymInt) for s in ex.shape) or \
            any(isinstance(s, torch.SymInt) for s in ex.stride()) if ex.layout == torch.strided else False

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        ex = self.example
        if name == "shape" and self.is_symbolic():
            return tx.output.call(tx, "call_method", "size", [self], {})
        if name in _STATIC_ATTRS:
            return ConstantVariable(getattr(ex, name))
        if name == "T":
            dims = list(range(ex.dim()))[::-1]
            return tx.output.call(tx, "call_method", "permute", [self, ConstantVariable(tuple(dims))], {})
        if name == "mT":
            return tx.output.call(tx, "call_method", "transpose", [self, ConstantVariable(-2), ConstantVariable(-1)], {})
        if name in ("real", "imag"):
            return tx.output.call(tx, "call_function", getattr(torch, name), [self], {})
        if name == "grad" and self.node.op == "placeholder" and self.source is not None:
            from .optimizer import read_grad  # a parameter's gradient after backward (optimizer steps)

            return read_grad(tx, self)
        if name == "data":
            # The same storage without autograd history: detach() (whose in-place updates reach
            # the tensor as well); only the autograd version counter is not shared.
            return tx.output.call(tx, "call_method", "detach", [self], {})
        if name in ("grad", "grad_fn", "_base"):
            unsupported("unsupported_attr", f"Tensor.{name}")
        attr = getattr(torch.Tensor, name, None)
        if attr is not None and callable(attr):
            from .torch_fns import TensorMethodVariable

            return TensorMethodVariable(self, name)
        unsupported("unsupported_attr", f"Tensor.{name}")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        ex = self.example
        if name == "item" and not args and not kwargs and config.capture_scalar_outputs:
            from .captured_scalar import CapturedScalarVariable

            return CapturedScalarVariable.of_item(tx, self)
        if name in _DATA_METHODS:
            unsupported("data_dependent", f"Tensor.{name}()")
        if name in _STATIC_METHODS:
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            if name in _SIZE_METHODS and self.is_symbolic():
                if name == "__len__":
                    return tx.output.call(tx, "call_method", "size", [self, ConstantVariable(0)], {})
                return tx.output.call(tx, "call_method", "numel" if name == "nelement" else name, [self, *args], kwargs)
            return ConstantVariable(_concrete(getattr(ex, name)(*cargs, **ckw)))
        if name == "__getitem__":
            return tx.output.call(tx, "call_function", _getitem, [self, args[0]], {})
        if name == "__setitem__":
            return tx.output.call(tx, "call_function", _setitem, [self, args[0], args[1]], {})
        if name == "untyped_storage":
            from .storage import storage_of  # answered from the fake example's metadata

            return storage_of(self, args, kwargs)
        if name in ("type",) and not args and not kwargs:
            return ConstantVariable(ex.type())
        if name in _SCALAR_VALUE_METHODS and isinstance(kwargs.get("value"), TensorVariable):
            from .optimizer import call_with_tensor_value  # Adam's ``addcdiv_(..., value=-step_size)``

            return call_with_tensor_value(tx, self, name, args, kwargs)
        if name in ("register_hook", "retain_grad", "backward", "record_stream"):
            unsupported("autograd_call", f"Tensor.{name}()")
        return tx.output.call(tx, "call_method", name, [self, *args], kwargs)

    def unpack(self, tx: "Translator") -> list[VariableTracker]:
        if self.example.dim() == 0:
            unsupported("exception", "iteration over a 0-d tensor")
        return [tx.output.call(tx, "call_function", _getitem, [self, ConstantVariable(i)], {})
                for i in range(int(self.example.size(0)))]  # a symbolic length specialises (guarded)

    def truth(self, tx: "Translator") -> bool:
        unsupported("data_dependent", "truth value of a tensor (`if tensor:` / `and`/`or` on tensors)")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.node.op == "placeholder" and self.source is not None:
            return self.source.expr()
        return cg.graph_output(self.node)

    def __repr__(self) -> str:
        return f"TensorVariable({self.node.name}, {tuple(self.example.shape)}, {self.example.dtype})"


import operator as _operator


def _concrete(value: Any) -> Any:
    """A static answer that may still hold Sym* numbers (``is_contiguous()`` on a symbolic
    tensor): their concrete values, guarded through the ShapeEnv."""
    from .symbolic import concrete

    if isinstance(value, (tuple, list)):
        return type(value)(_concrete(v) for v in value) if type(value) in (tuple, list) else torch.Size(_concrete(v) for v in value)
    return concrete(value)


# Indexing nodes use operator.getitem/setitem, like FX's own tracer.
_getitem = _operator.getitem
_setitem = _operator.setitem
