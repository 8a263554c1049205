"""``tensor.untyped_storage()`` while tracing: the storage of a traced tensor, answered from the fake
example's metadata (its size in bytes, device, type) without touching data.

A storage has no graph value: it is used by library code for cheap checks (``isinstance(s,
torch.UntypedStorage)``, ``s.nbytes()``, ``s.size()``), whose answers are fixed by the tensor's
sizes, strides and dtype, which the tensor-match guard pins. Its address (``data_ptr()``) is data:
a ``data_dependent`` break, as for the tensor's own ``data_ptr()``. When a storage escapes (returned,
live at a break) it is read again from the rebuilt tensor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator
    from .tensor import TensorVariable

_SIZE_METHODS = frozenset({"nbytes", "size", "__len__"})


class StorageVariable(VariableTracker):
    """``t.untyped_storage()`` of a traced tensor ``t``."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: "TensorVariable") -> None:
        super().__init__(None)
        self.tensor = tensor

    def python_type(self) -> type:
        return torch.UntypedStorage

    def _nbytes(self) -> int:
        if self.tensor.is_symbolic():
            unsupported("builtin_arguments", "the storage size of a tensor with symbolic sizes")
        return int(self.tensor.example.untyped_storage().nbytes())

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "device":
            return ConstantVariable(self.tensor.example.device)
        if name in ("is_cuda", "is_sparse"):
            return ConstantVariable(getattr(self.tensor.example, name))
        from .base import method_or_unsupported

        return method_or_unsupported(self, name)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name in _SIZE_METHODS and not args and not kwargs:
            return ConstantVariable(self._nbytes())
        if name == "element_size" and not args and not kwargs:
            return ConstantVariable(1)  # an untyped storage counts bytes
        if name == "data_ptr":
            unsupported("data_dependent", "UntypedStorage.data_ptr()")
        unsupported("untracked_method", f"UntypedStorage.{name}()")

    def truth(self, tx: "Translator") -> bool:
        return self._nbytes() > 0

    def reconstruct(self, cg: "OutputCodegen") -> str:
        method = f"{cg.ref(getattr, 'getattr')}({self.tensor.reconstruct(cg)}, {cg.constant('untyped_storage')})"
        return f"{method}()"

    def __repr__(self) -> str:
        return f"StorageVariable({self.tensor!r})"


def storage_of(tensor: "TensorVariable", args: list[Any], kwargs: dict[str, Any]) -> VariableTracker:
    if args or kwargs:
        unsupported("builtin_arguments", "Tensor.untyped_storage() with arguments")
    return StorageVariable(tensor)
