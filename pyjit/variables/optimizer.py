"""``torch.optim`` optimizers and torch's profiler ranges inside traced code.

A jitted training step ``loss.backward(); opt.step(); opt.zero_grad()`` breaks at
``backward()`` (autograd runs natively); this module lets the tracer capture ``opt.step()``
in the graph that follows, so the update arithmetic (``_single_tensor_sgd/adam`` or the
``torch._foreach_*`` multi-tensor paths) is compiled. What it owns:

- **Profiler ranges** (``torch.autograd.profiler.record_function``, which ``Optimizer.step``'s
  hook wrapper and ``zero_grad`` open): no-op contexts while tracing. Their ``__enter__`` calls
  a TorchScript op returning a ScriptObject no tracker can hold. Eager semantics are kept (a
  range only labels a profile); a compiled graph records no range (``docs/training.md``).
- **``_use_grad_for_differentiable``** (the decorator on every optimizer's ``step``): it sets
  grad mode to ``defaults['differentiable']`` and calls torch's ``graph_break()`` before and
  after the step, so torch's own compiler hands a pure no-grad graph to its AOT layer. Those two
  breaks are a performance hint for that compiler, not semantics; this narrow rule (recognised
  by the wrapper's code object, nowhere else) records the grad-mode switch in the graph and
  inlines the step instead. ``torch.compiler.disable`` on user functions is still honoured.
- **``torch._disable_dynamo``** wrappers (``Optimizer.zero_grad``, ``add_param_group``...):
  recognised directly as disabled calls (a clean ``disabled`` break at the call site) instead
  of tracing into the wrapper until it imports torch's compiler.
- **The optimizer object**: guarded by identity; ``opt.state[p]`` (a ``defaultdict`` keyed by
  parameters) is answered per parameter: the real per-parameter dict, reached through an
  :class:`OptimizerStateSource` (``G['opt'].state[G['opt'].param_groups[0]['params'][0]]``), so
  its keys are guarded (state created lazily at the first step changes them: the next call
  traces again with the state tensors as graph inputs) and new entries (``exp_avg``,
  ``momentum_buffer``, the ``step`` counter) are replayed into it after the graph.
  As in eager, reading ``opt.state[p]`` inserts an empty dict for a new parameter (done for
  real while tracing: eager does the same on this call, and it is idempotent).
"""
from __future__ import annotations

import dataclasses
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, FrameValues, Source
from ..identity import is_one_of
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .user_defined import UserDefinedObjectVariable

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.pycodegen import PyCodegen
    from ..trace.translator import Translator


# -- what is recognised --------------------------------------------------------------------------

# Each lookup below tolerates a torch without the piece (the torch-free stub the bytecode
# self-checks run on under other Pythons, another torch version): the rule is then inactive.

def _profiler_classes() -> tuple[type, ...]:
    record_function = getattr(getattr(getattr(torch, "autograd", None), "profiler", None), "record_function", None)
    classes: list[type] = [record_function] if isinstance(record_function, type) else []
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if isinstance(fast, type):
        classes.append(fast)
    return tuple(dict.fromkeys(classes))


_PROFILER_CLASSES = _profiler_classes()


def _wrapper_code(decorator: Any) -> types.CodeType | None:
    """The code object of the function ``decorator`` returns (its closure's code is shared by
    every function it decorates)."""
    def probe() -> None:
        return None
    try:
        wrapped = decorator(probe)
    except Exception:  # noqa: BLE001 - another torch version: the rule is simply not active
        return None
    code = getattr(wrapped, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _use_grad_code() -> types.CodeType | None:
    try:
        from torch.optim import optimizer
    except ImportError:
        return None

    return _wrapper_code(getattr(optimizer, "_use_grad_for_differentiable", None))


def _disable_code() -> types.CodeType | None:
    try:
        import torch._compile
    except ImportError:
        return None

    return _wrapper_code(getattr(torch._compile, "_disable_dynamo", None))


_USE_GRAD_CODE = _use_grad_code()
_DISABLE_CODE = _disable_code()
# Functions whose call this module answers even when they are reached as methods (class
# members are bound without going through builder.wrap).
SPECIAL_CODES: frozenset[types.CodeType] = frozenset(c for c in (_USE_GRAD_CODE, _DISABLE_CODE) if c is not None)


def _folded_functions() -> frozenset[Any]:
    """torch helpers the optimizers call that answer from the build alone (which devices have
    foreach/fused kernels): called while tracing, their constant result used."""
    try:
        from torch.utils import _foreach_utils
    except ImportError:
        return frozenset()

    names = ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices")
    return frozenset(f for f in (getattr(_foreach_utils, n, None) for n in names) if f is not None)


_FOLDED = _folded_functions()
_OPTIMIZER: type | None = getattr(getattr(torch, "optim", None), "Optimizer", None)


def special_tracker(tx: "Translator", value: Any, source: Source | None) -> VariableTracker | None:
    """The tracker for ``value`` when this module owns it (builder.wrap asks first), else None."""
    if type(value) is types.FunctionType:
        if value in _FOLDED:
            if source is not None:
                tx.output.guards.add(GuardKind.ID_MATCH, source, value)
            return _FoldedCallVariable(value, source)
        code = value.__code__
        if code is _USE_GRAD_CODE and _USE_GRAD_CODE is not None:
            if source is not None:
                tx.output.guards.add(GuardKind.ID_MATCH, source, value)
            return UseGradStepVariable(value, source)
        if code is _DISABLE_CODE and _DISABLE_CODE is not None:
            from .misc import DisabledCallVariable

            if source is not None:
                tx.output.guards.add(GuardKind.ID_MATCH, source, value)
            return DisabledCallVariable(value, source)
        return None
    if type(value) is weakref.ReferenceType:
        if source is not None:
            # A weakref's referent never changes (it can only die): identity pins both.
            tx.output.guards.add(GuardKind.ID_MATCH, source, value)
        return WeakRefVariable(value, source)
    if issubclass(type(value), type):
        if is_one_of(value, _PROFILER_CLASSES):
            if source is not None:
                tx.output.guards.add(GuardKind.ID_MATCH, source, value)
            return ProfilerRangeClassVariable(value, source)
        return None
    if _OPTIMIZER is not None and issubclass(type(value), _OPTIMIZER):
        known = tx.output.side_effects.known(tx, value, source)
        if known is not None:
            return known
        if source is not None:
            # Identity, not type: opt.state[p] is guarded through this very object (below).
            tx.output.guards.add(GuardKind.ID_MATCH, source, value)
        return tx.output.side_effects.remember(value, OptimizerVariable(value, source))
    return None


class _FoldedCallVariable(VariableTracker):
    """A call answered at trace time with the constant it returns (see ``_folded_functions``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any, source: Source | None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return type(self.fn)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .builder import wrap_constant_result

        if args or kwargs:
            unsupported("builtin_arguments", f"{self.fn.__name__} with arguments")
        return wrap_constant_result(tx, self.fn())

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return self.source.expr() if self.source is not None else cg.ref(self.fn, self.fn.__name__)


class WeakRefVariable(VariableTracker):
    """A ``weakref.ref`` (the LR scheduler's wrapper around ``opt.step`` holds the optimizer
    this way): calling it gives the tracker the trace already has for the referent."""

    __slots__ = ("ref",)

    def __init__(self, ref: "weakref.ReferenceType[Any]", source: Source | None) -> None:
        super().__init__(source)
        self.ref = ref

    def python_type(self) -> type:
        return weakref.ReferenceType

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        target = self.ref()
        if target is None:
            from .constant import ConstantVariable

            return ConstantVariable(None)
        hit = tx.output.side_effects._known.get(id(target))
        if self.source is None or hit is None or hit[0] is not target:
            unsupported("weak_reference", "calling a weakref to an object the frame does not reach otherwise")
        return hit[1]

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return self.source.expr() if self.source is not None else cg.ref(self.ref, "weakref")


# -- profiler ranges -------------------------------------------------------------------------------

class ProfilerRangeClassVariable(VariableTracker):
    """``record_function`` itself: calling it makes a no-op range context."""

    __slots__ = ("value",)

    def __init__(self, value: type, source: Source | None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        try:
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        except Exception:  # noqa: BLE001 - a tensor-valued argument: not a plain label
            unsupported("builtin_arguments", f"{self.value.__name__}() with non-constant arguments")
        return ProfilerRangeVariable(self.value, cargs, ckw)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return self.source.expr() if self.source is not None else cg.ref(self.value, self.value.__name__)


class ProfilerRangeVariable(VariableTracker):
    """A ``record_function(name)`` object: ``with`` on it records nothing in the graph."""

    __slots__ = ("cls", "args", "kwargs")

    def __init__(self, cls: type, args: list[Any], kwargs: dict[str, Any]) -> None:
        super().__init__(None)
        self.cls, self.args, self.kwargs = cls, args, kwargs

    def python_type(self) -> type:
        return self.cls

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "__enter__":
            return _NoOpCall(self)
        if name == "__exit__":
            return _NoOpCall(ConstantVariable(None))
        unsupported("unsupported_attr", f"{self.cls.__name__}.{name}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        # A fresh, not yet entered range with the same label (the object escaped the trace).
        parts = [cg.constant(a) for a in self.args] + [f"{k}={cg.constant(v)}" for k, v in self.kwargs.items()]
        return f"{cg.ref(self.cls, self.cls.__name__)}({', '.join(parts)})"

    def __repr__(self) -> str:
        return f"ProfilerRangeVariable({self.args!r})"


class _NoOpCall(VariableTracker):
    """A bound ``__enter__``/``__exit__`` of a profiler range: returns ``result``, does nothing."""

    __slots__ = ("result",)

    def __init__(self, result: VariableTracker) -> None:
        super().__init__(None)
        self.result = result

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self.result


# -- Optimizer.step's grad-mode wrapper ------------------------------------------------------------

class UseGradStepVariable(VariableTracker):
    """``_use_grad_for_differentiable(step)``: grad mode set to ``self.defaults['differentiable']``
    around the inlined step (recorded in the graph), without torch's two ``graph_break()`` calls
    (see module docstring)."""

    __slots__ = ("fn",)

    def __init__(self, fn: types.FunctionType, source: Source | None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return types.FunctionType

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .functions import UserFunctionVariable
        from .torch_fns import _set_grad

        if not args:
            unsupported("exception", "TypeError: an optimizer step called without self")
        inner = _closure_value(self.fn, "func")
        differentiable = args[0].var_getattr(tx, "defaults").call_method(
            tx, "__getitem__", [ConstantVariable("differentiable")], {})
        mode = bool(differentiable.as_python_constant())
        prev = torch.is_grad_enabled()
        _set_grad(tx, mode)
        # An exception inside the step ends the trace (the frame then runs natively and the
        # real wrapper's ``finally`` restores the mode), so no restore path is traced for it.
        # Inlined as Python (wrap() would make a torch function a graph call).
        result = UserFunctionVariable(inner, None).call_function(tx, args, kwargs)
        _set_grad(tx, prev)
        return result

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return self.source.expr() if self.source is not None else cg.ref(self.fn, self.fn.__name__)


def _closure_value(fn: types.FunctionType, name: str) -> Any:
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        if var == name:
            return cell.cell_contents
    unsupported("unsupported_object", f"{fn.__qualname__} has no closure variable {name!r}")


# -- the optimizer and its per-parameter state -------------------------------------------------------

class OptimizerVariable(UserDefinedObjectVariable):
    """A ``torch.optim.Optimizer`` (guarded by identity): like any object, except ``.state``."""

    __slots__ = ()

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "state" and isinstance(self.value.__dict__.get("state"), dict):
            if self.source is None:
                unsupported("unsupported_object", "the state of an optimizer pyjit cannot reach from the frame")
            return OptimizerStateVariable(self, AttrSource(self.source, "state"))
        return super().var_getattr(tx, name)

    def __repr__(self) -> str:
        return f"OptimizerVariable({type(self.value).__name__})"


class OptimizerStateVariable(VariableTracker):
    """``opt.state``: a dict keyed by parameters; ``opt.state[p]`` is the per-parameter dict."""

    __slots__ = ("opt",)

    def __init__(self, opt: OptimizerVariable, source: Source) -> None:
        super().__init__(source)
        self.opt = opt

    def python_type(self) -> type:
        return type(self.opt.value.state)

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self._entry(tx, args[0])
        unsupported("untracked_method", f"optimizer state .{name}() (only state[param] is traced)")

    def _entry(self, tx: "Translator", key: VariableTracker) -> VariableTracker:
        from .builder import wrap

        param, param_source = _input_tensor(tx, key)
        opt = self.opt.value
        state = opt.state
        if param not in state and not isinstance(state, _defaultdict_type()):
            unsupported("exception", "KeyError: a parameter without optimizer state")
        entry = state[param]  # a defaultdict makes the empty dict here, as eager's read does
        if type(entry) is not dict:
            unsupported("unsupported_object", f"optimizer state entry of type {type(entry).__name__}")
        # The parameter's identity: the entry is looked up by it (a tensor-match guard alone
        # would accept another parameter of the same shape).
        tx.output.guards.add(GuardKind.ID_MATCH, param_source, param)
        assert self.source is not None
        return wrap(tx, entry, OptimizerStateSource(self.source, param_source, _entry_getter(opt, param)))

    def reconstruct(self, cg: "OutputCodegen") -> str:
        assert self.source is not None
        return self.source.expr()


def _defaultdict_type() -> type:
    import collections

    return collections.defaultdict


def _input_tensor(tx: "Translator", var: VariableTracker) -> tuple[torch.Tensor, Source]:
    """The real tensor behind a graph-input tracker, and its source."""
    from .tensor import TensorVariable

    if isinstance(var, TensorVariable) and var.node.op == "placeholder" and var.source is not None:
        for gi in tx.output.inputs:
            if gi.variable is var:
                return gi.value, var.source
    unsupported("unsupported_object", "optimizer state keyed by a tensor that is not a parameter of the frame")


def call_with_tensor_value(tx: "Translator", var: VariableTracker, name: str, args: list[VariableTracker],
                           kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``x.addcdiv_(t1, t2, value=v)`` with ``v`` a 0-d tensor (Adam's ``value=-step_size`` when
    the step counter is a tensor, as it is while compiling). Eagerly ``v`` becomes a Scalar
    through ``item()``, a data-dependent value a graph cannot hold; recorded instead as the
    kernel computes it (``foreach.addc_with_tensor_value``: on CPU ``x + (v * t1) / t2``, ``* t2``
    for addcmul, with ``v`` cast to the compute dtype as the Scalar is)."""
    from .foreach import addc_with_tensor_value
    from .tensor import TensorVariable

    value = kwargs["value"]
    assert isinstance(value, TensorVariable)
    if value.example.dim() != 0 or len(args) != 2 or set(kwargs) != {"value"} \
            or not all(isinstance(a, TensorVariable) for a in args):
        unsupported("data_dependent", f"Tensor.{name}() with a tensor value=")
    t1, t2 = args
    return addc_with_tensor_value(tx, var, t1, t2, value, div=name.startswith("addcdiv"), inplace=name.endswith("_"))


def read_grad(tx: "Translator", var: VariableTracker) -> VariableTracker:
    """``p.grad`` of a graph-input tensor: the real gradient (a tensor or None) as a graph
    input of its own, guarded like any input (``None`` by identity)."""
    from .builder import wrap

    real, source = _input_tensor(tx, var)
    return wrap(tx, real.grad, AttrSource(source, "grad"))


class _EntryGetter:
    """What the guard tree reads for ``opt.state[p]``: ``opt.state.get(p)`` for the optimizer
    and parameter of the trace (both also guarded by identity), without inserting anything."""

    __slots__ = ("opt", "param", "__weakref__")

    def __init__(self, opt: torch.optim.Optimizer, param: torch.Tensor) -> None:
        self.opt = weakref.ref(opt)
        self.param = weakref.ref(param)

    def __call__(self) -> Any:
        opt, param = self.opt(), self.param()
        if opt is None or param is None:
            return None
        state = opt.__dict__.get("state")
        return state.get(param) if isinstance(state, dict) else None


# One getter per (optimizer, parameter): the guard tree shares the accessor node of one callable.
# Keyed by ids (a WeakKeyDictionary would compare tensors with ``==``), checked against the
# getter's weak references; dead entries are dropped as new ones come.
_getters: dict[tuple[int, int], _EntryGetter] = {}


def _entry_getter(opt: torch.optim.Optimizer, param: torch.Tensor) -> _EntryGetter:
    key = (id(opt), id(param))
    getter = _getters.get(key)
    if getter is None or getter.opt() is not opt or getter.param() is not param:
        for k in [k for k, g in _getters.items() if g.opt() is None or g.param() is None]:
            del _getters[k]
        getter = _getters[key] = _EntryGetter(opt, param)
    return getter


@dataclasses.dataclass(frozen=True)
class OptimizerStateSource(Source):
    """``opt.state[p]``: ``base`` is the optimizer's ``.state``, ``param`` the parameter's source.

    Replacement code reads it as ``base[param]``; the guard tree reads it through ``getter``
    (the C tree has no accessor keyed by another node's value), which is sound because the
    optimizer and the parameter are both guarded by identity."""

    base: Source
    param: Source
    getter: _EntryGetter = dataclasses.field(compare=False, hash=False, repr=False)

    def name(self) -> str:
        return f"{self.base.name()}[{self.param.name()}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        from ..bytecode import create_binary_subscr

        self.base.reconstruct(codegen)
        self.param.reconstruct(codegen)
        codegen.append(create_binary_subscr())

    def get(self, frame: FrameValues) -> Any:
        return self.base.get(frame).get(self.param.get(frame))

    def tree_node(self, tree: Any) -> Any:
        return tree.call(self.getter)

    def root(self) -> Source:
        return self.base.root()
