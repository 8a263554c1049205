"""Trackers of Python functions: user functions (inlined), bound methods, functions created
inside the trace (closures, lambdas, comprehensions), ``functools.partial``, and closure cells.

Calling any of them inlines the callee's bytecode into the current trace
(:meth:`pyjit.trace.translator.Translator.inline`), with Python's own argument binding
(defaults, keywords, ``*args``/``**kwargs``).
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from ..guards.source import AttrSource, FuncAttrSource, ItemSource, Source
from ..trace.graph_breaks import unsupported
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.translator import Translator


class CellVariable(VariableTracker):
    """A closure cell: created by the traced code (mutable) or an existing cell read from outside."""

    __slots__ = ("contents", "real_cell", "_wrapped")

    def __init__(self, contents: VariableTracker | None = None, real_cell: Any = None, source: Source | None = None) -> None:
        super().__init__(source)
        self.contents = contents
        self.real_cell = real_cell
        self._wrapped = False

    def get(self, tx: "Translator", name: str) -> VariableTracker:
        if self.contents is None and self.real_cell is not None and not self._wrapped:
            from .builder import wrap

            try:
                value = self.real_cell.cell_contents
            except ValueError:
                unsupported("exception", f"NameError: free variable {name!r} referenced before assignment")
            self.contents = wrap(tx, value, self.source)
            self._wrapped = True
        if self.contents is None:
            unsupported("exception", f"NameError: free variable {name!r} referenced before assignment")
        return self.contents

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return _cell_expr(cg, self)

    def set(self, tx: "Translator", value: VariableTracker, name: str) -> None:
        if self.real_cell is not None:
            # side-effect replay (pyjit/trace/side_effects.py): the real cell gets the final value
            tx.output.side_effects.store_cell(tx, self, value, name)
            self._wrapped = True
        self.contents = value


def _wrap_defaults(tx: "Translator", values: tuple[Any, ...] | None, source: Source | None, attr: str) -> tuple[VariableTracker, ...] | None:
    """The function's ``__defaults__`` as trackers.

    With a source, the tuple is wrapped whole through ``fn.__defaults__`` (a program may assign
    it): type and length are guarded as well as each value, since a longer or shorter tuple
    shifts which parameter each default belongs to. Library functions (no source) keep their
    defaults as constants.
    """
    from .builder import wrap

    if values is None:
        return None
    if source is None:
        return tuple(ConstantVariable(v) if is_constant_value(v) else wrap(tx, v, None) for v in values)
    return tuple(_items_of(wrap(tx, values, FuncAttrSource(source, attr))))


def _items_of(v: VariableTracker) -> list[VariableTracker]:
    from .lists import BaseListVariable

    if isinstance(v, ConstantVariable):
        return [ConstantVariable(x) for x in v.value]
    assert isinstance(v, BaseListVariable), v
    return list(v.items)


def _wrap_kwdefaults(tx: "Translator", values: dict[str, Any] | None, source: Source | None) -> dict[str, VariableTracker] | None:
    """``__kwdefaults__`` as trackers: with a source, wrapped whole (keys and values guarded)."""
    from .builder import wrap
    from .dicts import DictVariable

    if not values:
        return None
    if source is None:
        return {k: ConstantVariable(v) if is_constant_value(v) else wrap(tx, v, None) for k, v in values.items()}
    d = wrap(tx, values, FuncAttrSource(source, "__kwdefaults__"))
    assert isinstance(d, DictVariable), d
    return dict(d.items)


def function_cells(tx: "Translator", fn: types.FunctionType, source: Source | None) -> tuple[CellVariable, ...]:
    """The trackers of ``fn``'s closure cells: one per real cell for the whole trace
    (:meth:`SideEffects.cell_variable <pyjit.trace.side_effects.SideEffects.cell_variable>`)."""
    cells = []
    for i, cell in enumerate(fn.__closure__ or ()):
        src = AttrSource(ItemSource(FuncAttrSource(source, "__closure__"), i), "cell_contents") if source is not None else None
        cells.append(tx.output.side_effects.cell_variable(cell, src))
    return tuple(cells)


def _special_codes() -> frozenset[types.CodeType]:
    from .optimizer import SPECIAL_CODES

    return SPECIAL_CODES


def _without_compiler_tagging(fn: types.FunctionType) -> types.FunctionType:
    """Once torch.compile has run in the process, TorchDynamo has replaced ``nn.Module.__init__``
    and ``__setstate__`` with wrappers that call the original and then tag the module for
    Dynamo's own bookkeeping (an ``id()``-keyed weak dictionary). That bookkeeping is not the
    program's: trace the original method the wrapper holds instead (recognised by its code's
    name and file, never by importing torch's compiler)."""
    code = fn.__code__
    if code.co_name not in ("patched_init", "patched_setstate") or not fn.__closure__:
        return fn
    path = code.co_filename.replace("\\", "/")
    if "/torch/" not in path or not path.endswith("/mutation_guard.py"):
        return fn
    for name, cell in zip(code.co_freevars, fn.__closure__):
        if name in ("init", "setstate"):
            try:
                original = cell.cell_contents
            except ValueError:
                return fn
            return original if isinstance(original, types.FunctionType) else fn
    return fn


class UserFunctionVariable(VariableTracker):
    """A plain Python function reached from the frame (guarded by identity)."""

    __slots__ = ("fn",)

    def __init__(self, fn: types.FunctionType, source: Source | None = None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return types.FunctionType

    def as_python_constant(self) -> Any:
        return self.fn

    def is_python_constant(self) -> bool:
        return True

    def truth(self, tx: "Translator") -> bool:
        return True  # a function defines neither __bool__ nor __len__

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        fn = self.fn
        if self.source is not None:
            # The function object is guarded by identity where it was read; its bytecode is
            # what gets inlined, and ``fn.__code__`` is assignable.
            from ..guards.guards import GuardKind

            tx.output.guards.add(GuardKind.ID_MATCH, FuncAttrSource(self.source, "__code__"), fn.__code__)
        original = _without_compiler_tagging(fn)
        if fn.__code__ in _special_codes():
            # torch.optim's step wrapper / torch's disable wrapper reached as a method
            # (variables/optimizer.py): the same tracker builder.wrap gives them.
            from .optimizer import special_tracker

            special = special_tracker(tx, fn, None)
            if special is not None:
                return special.call_function(tx, args, kwargs)
        if original is not fn:
            return UserFunctionVariable(original, None).call_function(tx, args, kwargs)
        return tx.inline(
            fn.__code__, fn.__globals__, args, kwargs,
            fn_source=self.source,
            defaults=_wrap_defaults(tx, fn.__defaults__, self.source, "__defaults__"),
            kwdefaults=_wrap_kwdefaults(tx, fn.__kwdefaults__, self.source),
            cells=function_cells(tx, fn, self.source),
        )

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if name == "__get__":  # ``func.__get__(obj, cls)`` binds like attribute access does
            return _FunctionGet(self)
        from .builder import wrap

        return wrap(tx, getattr(self.fn, name), AttrSource(self.source, name) if self.source else None)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()
        return cg.ref(self.fn, self.fn.__name__)

    def __repr__(self) -> str:
        return f"UserFunctionVariable({self.fn.__qualname__})"


class CachedFunctionVariable(UserFunctionVariable):
    """A ``functools.lru_cache``/``cache`` wrapper of a Python function: calls inline the wrapped
    function (as torch.compile does, the cache is bypassed while tracing: the traced result is
    the function's own, and an effect inside it is a graph break that runs the cached call
    natively); the object itself stays the wrapper."""

    __slots__ = ("wrapper", "wrapper_source")

    def __init__(self, wrapper: Any, source: Source | None) -> None:
        super().__init__(wrapper.__wrapped__, AttrSource(source, "__wrapped__") if source is not None else None)
        self.wrapper = wrapper
        self.wrapper_source = source

    def as_python_constant(self) -> Any:
        return self.wrapper

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .logging_calls import call_cached

        # a cached function that only logs (``logger.warning_once``): the cache must decide at run time
        return call_cached(tx, self.wrapper, lambda: super(CachedFunctionVariable, self).call_function(tx, args, kwargs),
                           args, kwargs)

    def python_type(self) -> type:
        return type(self.wrapper)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.wrapper_source is not None:
            return self.wrapper_source.expr()
        return cg.ref(self.wrapper, self.fn.__name__)

    def __repr__(self) -> str:
        return f"CachedFunctionVariable({self.fn.__qualname__})"


class _FunctionGet(VariableTracker):
    """``fn.__get__`` of a Python function: calling it with an object binds a method (the LR
    scheduler's wrapper around ``opt.step`` does this)."""

    __slots__ = ("func",)

    def __init__(self, func: "UserFunctionVariable") -> None:
        super().__init__(None)
        self.func = func

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if kwargs or not 1 <= len(args) <= 2:
            unsupported("builtin_arguments", "function.__get__ with these arguments")
        obj = args[0]
        if obj.is_python_constant() and obj.as_python_constant() is None:
            return self.func
        return UserMethodVariable(self.func.fn, obj, fn_source=self.func.source)


class UserMethodVariable(VariableTracker):
    """A function bound to a tracked ``self`` (``obj.method`` / ``self.helper``)."""

    __slots__ = ("fn", "obj", "fn_source")

    def __init__(self, fn: types.FunctionType, obj: VariableTracker, source: Source | None = None,
                 fn_source: Source | None = None) -> None:
        super().__init__(source)
        self.fn = fn
        self.obj = obj
        self.fn_source = fn_source

    def python_type(self) -> type:
        return types.MethodType

    def truth(self, tx: "Translator") -> bool:
        return True  # a bound method defines neither __bool__ nor __len__

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        from .torch_fns import is_torch_library_function, TorchFunctionVariable

        from .autograd_fn import call_apply, is_function_apply

        if is_function_apply(self.fn):  # MyFunction.apply(...) of a custom autograd.Function
            return call_apply(tx, self.obj, args, kwargs)
        from .tensor import TensorVariable

        # A Tensor method implemented in Python (torch/_tensor.py): one graph call. Python methods of
        # other torch objects are inlined (a graph node cannot take a Python object argument).
        if isinstance(self.obj, TensorVariable) and is_torch_library_function(self.fn) \
                and not getattr(self.fn, "__name__", "") == "forward":
            # e.g. a torch method implemented in Python: record it in the graph as a call.
            return TorchFunctionVariable(self.fn).call_function(tx, [self.obj, *args], kwargs)
        fn_src = self.fn_source
        if fn_src is None and self.source is not None:
            fn_src = AttrSource(self.source, "__func__")
        from .logging_calls import deferred_logger_call

        logged = deferred_logger_call(tx, self.fn, self.obj, args, kwargs)  # logger.warning(...): replayed
        if logged is not None:
            if fn_src is not None:
                from ..guards.guards import GuardKind

                tx.output.guards.add(GuardKind.ID_MATCH, fn_src, self.fn)
            return logged
        return UserFunctionVariable(self.fn, fn_src).call_function(tx, [self.obj, *args], kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:  # graph breaks: fn bound to the rebuilt self
        if self.source is not None:
            return self.source.expr()
        return f"{cg.ref(types.MethodType, 'MethodType')}({cg.ref(self.fn, self.fn.__name__)}, {self.obj.reconstruct(cg)})"

    def __repr__(self) -> str:
        return f"UserMethodVariable({self.fn.__qualname__})"


class NestedFunctionVariable(VariableTracker):
    """A function created while tracing (``def`` inside the frame, lambda, comprehension)."""

    __slots__ = ("code", "f_globals", "defaults", "kwdefaults", "closure", "qualname")

    def __init__(self, code: types.CodeType, f_globals: dict[str, Any], qualname: str) -> None:
        super().__init__(None)
        self.code = code
        self.f_globals = f_globals
        self.qualname = qualname
        self.defaults: tuple[VariableTracker, ...] | None = None
        self.kwdefaults: dict[str, VariableTracker] | None = None
        self.closure: tuple[CellVariable, ...] = ()

    def python_type(self) -> type:
        return types.FunctionType

    def truth(self, tx: "Translator") -> bool:
        return True  # a function defines neither __bool__ nor __len__

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return tx.inline(self.code, self.f_globals, args, kwargs, fn_source=None, defaults=self.defaults,
                         kwdefaults=self.kwdefaults, cells=self.closure)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.code.co_name if name == "__name__" else self.qualname)
        unsupported("unsupported_attr", f"attribute {name} of a function created in the trace")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        """The function made again after the graph: ``FunctionType(code, globals, name,
        defaults, closure)``. Its cells are those of the trace, each made once per replacement
        (two closures over one variable share the cell, as in eager), holding the final value."""
        if self.kwdefaults:
            unsupported("unsupported_return", f"a function with keyword-only defaults created in the trace ({self.qualname})")
        defaults = cg.constant(None) if not self.defaults else f"({''.join(d.reconstruct(cg) + ', ' for d in self.defaults)})"
        closure = cg.constant(None) if not self.closure else f"({''.join(_cell_expr(cg, c) + ', ' for c in self.closure)})"
        make = cg.ref(types.FunctionType, "FunctionType")
        return (f"{make}({cg.constant(self.code)}, {cg.ref(self.f_globals, 'globals')}, "
                f"{cg.constant(self.code.co_name)}, {defaults}, {closure})")

    def __repr__(self) -> str:
        return f"NestedFunctionVariable({self.qualname})"


def _cell_expr(cg: "OutputCodegen", cell: CellVariable) -> str:
    """A closure cell in rebuilt code: a real cell read from outside (its function guarded by
    identity) is itself, a free variable of the compiled frame is the replacement's own; a cell of the trace is a new cell, made the first time the replacement
    needs it and shared by every later use (a local of the replacement)."""
    if cell.real_cell is not None:
        from ..guards.source import ClosureSource

        if isinstance(cell.source, ClosureSource):  # the compiled frame's own free variable
            return cg.frame_cell(cell.source.var)
        if cell.source is None:
            unsupported("unsupported_return", "a closure over a cell pyjit cannot reach from the frame")
        return cg.ref(cell.real_cell, "cell")
    if id(cell) in cg.cells_passed_on:
        unsupported("unsupported_return", "a closure over a variable that a resume function continues to use")
    contents = cell.contents.reconstruct(cg) if cell.contents is not None else None
    return cg.shared_value(("cell", id(cell)), cg.ref(types.CellType, "CellType"), contents, "cell")


class PartialVariable(VariableTracker):
    """``functools.partial(fn, *args, **kw)`` over trackers."""

    __slots__ = ("func", "args", "kwargs")

    def __init__(self, func: VariableTracker, args: list[VariableTracker], kwargs: dict[str, VariableTracker], source: Source | None = None) -> None:
        super().__init__(source)
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def call_function(self, tx: "Translator", args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return self.func.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        from .lists import TupleVariable
        from .dicts import DictVariable

        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(self.args)
        if name == "keywords":
            return DictVariable(dict(self.kwargs))
        unsupported("unsupported_attr", f"partial.{name}")
