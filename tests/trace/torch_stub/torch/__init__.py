"""A stand-in ``torch`` for running pyjit's symbolic interpreter on Python-only functions under
interpreters without torch (CPython 3.12/3.13 here), see ``tests/trace/opcode_selfcheck.py``.

It provides just the names pyjit's frontend touches at import time and while tracing code that
does no tensor work. It is never on sys.path in normal test runs.
"""
from __future__ import annotations

import sys
import types


class Tensor:
    pass


class Size(tuple):
    pass


class device:  # noqa: N801
    pass


class dtype:  # noqa: N801
    pass


class finfo:  # noqa: N801
    pass


class iinfo:  # noqa: N801
    pass


class _GradCtx:
    mode = False

    def __enter__(self) -> None:
        self.prev = _grad[0]
        _grad[0] = self.mode

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        _grad[0] = self.prev


class no_grad(_GradCtx):  # noqa: N801
    mode = False


class enable_grad(_GradCtx):  # noqa: N801
    mode = True


class set_grad_enabled:  # noqa: N801
    def __init__(self, mode: bool) -> None:
        self.mode = mode


class autocast:  # noqa: N801
    pass


class inference_mode:  # noqa: N801
    pass


amp = types.ModuleType("torch.amp")
amp.autocast = autocast
sys.modules["torch.amp"] = amp

float32 = object()
_grad = [True]


def is_grad_enabled() -> bool:
    return _grad[0]


def get_default_dtype() -> object:
    return float32


def _unused(*args, **kwargs):  # noqa: ANN002, ANN003
    raise RuntimeError("torch stub: no tensor work in the self-check")


is_tensor = is_floating_point = is_complex = numel = broadcast_shapes = _unused
manual_seed = set_default_dtype = _unused

for _fn in (is_grad_enabled, get_default_dtype, _unused):
    _fn.__module__ = "torch"


def _submodule(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    return mod


_C = _submodule("torch._C")


def _set_grad_enabled(mode: bool) -> None:
    _grad[0] = mode


_C._set_grad_enabled = _set_grad_enabled
_C.TensorBase = Tensor
_C._is_any_autocast_enabled = lambda: False

nn = _submodule("torch.nn")


class Module:
    pass


class _Container(Module):
    pass


nn.Module = Module
nn.Sequential = nn.ModuleList = nn.ModuleDict = nn.ParameterList = nn.ParameterDict = _Container
nn.functional = _submodule("torch.nn.functional")
_modules_pkg = _submodule("torch.nn.modules")
_module_mod = _submodule("torch.nn.modules.module")
_module_mod._global_forward_hooks = {}
_module_mod._global_forward_pre_hooks = {}
_module_mod._global_backward_hooks = {}
_modules_pkg.module = _module_mod
nn.modules = _modules_pkg

fx = _submodule("torch.fx")


class _Node:
    pass


class Graph:
    def __init__(self) -> None:
        self.nodes: list[object] = []

    def call_function(self, target, args=(), kwargs=None):  # noqa: ANN001, ANN201
        node = _Node()
        node.meta = {}
        node.target = target
        self.nodes.append(node)
        return node


class GraphModule:
    pass


fx.Graph = Graph
fx.Node = _Node
fx.GraphModule = GraphModule

_subclasses = _submodule("torch._subclasses")
fake_tensor = _submodule("torch._subclasses.fake_tensor")


class FakeTensorMode:
    def __init__(self, **kwargs) -> None:  # noqa: ANN003
        pass


class DataDependentOutputException(Exception):
    pass


class DynamicOutputShapeException(Exception):
    pass


fake_tensor.FakeTensorMode = FakeTensorMode
fake_tensor.DataDependentOutputException = DataDependentOutputException
fake_tensor.DynamicOutputShapeException = DynamicOutputShapeException
_subclasses.fake_tensor = fake_tensor
