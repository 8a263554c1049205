"""The per-call input check of a compiled graph: every input still has what its kernels assume.

A graph whose inputs the caller's guards do not pin (a training step's backward graph, a graph
compiled outside pyjit's frontend) compares each input's type, sizes, strides, dtype and device
with the example's on every call, and under grad mode sends a call with an input that requires
grad to the captured graph (the kernels record no autograd). In Python that is about 0.7 us an
input, and a ResNet-50 backward graph takes about 300.

After the first call it accepts, calls without grad mode are checked by a compiled guard tree
(``pyjit._C.GuardTree``, about a third of the time) built from that call's inputs. The tree also
pins each input's exact type and ``requires_grad`` flag, so it accepts a subset of what the
Python check accepts; a call it refuses goes through the Python check, which decides.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

_Expected = tuple[Any, Any, Any, Any]


def _probe(*args: Any) -> None:
    """The function a guard tree is evaluated for: its arguments are the graph's inputs."""


class InputCheck:
    """``check(args, grad)``: whether ``args`` may run through the compiled kernels."""

    __slots__ = ("expected", "tree", "_tensors_only")

    def __init__(self, example_inputs: Sequence[Any]):
        # A scalar input of a static graph (a symbolic int the trace specialised) was baked
        # into the kernels: it must be that value (type and value stand in for layout, dtype).
        self.expected: list[_Expected] = [
            (t.shape, t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else (type(t), t, None, None)
            for t in example_inputs]
        self._tensors_only = all(isinstance(t, torch.Tensor) for t in example_inputs)
        self.tree: Any = None

    def __call__(self, args: tuple[Any, ...], grad: bool) -> bool:
        tree = self.tree
        if tree is not None and not grad and len(args) == len(self.expected):
            from .. import _C
            if tree.check(_probe, args) == _C.PASS:
                return True
        if not self._python(args, grad):
            return False
        if tree is None and not grad and self._tensors_only and len(args) == len(self.expected):
            self.tree = _tree_for(args)
        return True

    def _python(self, args: Sequence[Any], grad: bool) -> bool:
        if len(args) != len(self.expected):
            return False
        for a, (shape, stride, dtype, dev) in zip(args, self.expected):
            if dev is None:  # a scalar: (type, value)
                if type(a) is not shape or a != stride:
                    return False
                continue
            if not isinstance(a, torch.Tensor) or a.shape != shape or a.stride() != stride or a.dtype != dtype \
                    or a.device != dev or (grad and a.requires_grad):
                return False
        return True


def _tree_for(args: Sequence[torch.Tensor]) -> Any:
    """A guard tree accepting exactly inputs like ``args``: type, dtype, device, requires_grad,
    sizes and strides of each (check ids are the positions)."""
    from .. import _C

    tree = _C.GuardTree()
    for i, t in enumerate(args):
        tree.arg(i).check_tensor(type(t), t.dtype, t.device, t.requires_grad, list(t.shape), list(t.stride()), i)
    return tree
