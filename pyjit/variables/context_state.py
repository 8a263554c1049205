"""``contextvars.ContextVar`` get/set/reset and ``with lock:`` on a ``threading.Lock``, traced
without a graph break where Python's semantics can be kept.

**ContextVar** (transformers' ``output_capturing.py``). A variable reached from the frame is a
:class:`ContextVarVariable` (pinned by identity). The trace keeps its own view of each variable's
value (:class:`_VarState`, one per variable per trace):

- ``var.get()`` before any ``set`` in the trace reads the value in the caller's context now and
  wraps it through :class:`ContextVarValueSource` (``var.get(<missing>)``, evaluated by the guard
  tree as a root call): the value is guarded like any other (identity of ``None``, a dict's keys,
  ...), and re-read through the same source by the replay. An unset variable is guarded unset;
  its default must be an immutable constant;
- ``var.set(v)`` makes ``v`` the value for later reads and records a replayed
  ``var.set(v)`` (:mod:`pyjit.trace.side_effects`, a step in program order); it returns a
  :class:`ContextVarTokenVariable` whose real token, when it is needed after the graph (live at
  a graph break, returned), is the one that replayed ``set`` returned (kept in a blank object
  built by the replay, read by ``token_of``);
- ``var.reset(token)`` of the trace's own newest live token cancels that ``set``: the pair
  leaves the context as it found it, so nothing is replayed (the token is then used: letting it
  escape is a break, since the replay could not give back a used token). A token from outside
  the frame (a resume function after a break between ``set`` and ``reset``) is checked (its
  ``var`` guarded by identity, its ``old_value`` guarded and becoming the value) and the
  ``reset`` is replayed natively. Resetting tokens out of order is a break.

**Locks** (``with _hook_installation_lock:`` in transformers). Tracing ``lock.__enter__`` as a
no-op is only sound when nothing inside the block depends on holding the lock being observable.
The trace runs single-threaded and cannot see other threads, so it accepts a block that (a)
records no side effect and no tensor operation (it only reads state, and every read is guarded at
the call's entry) and (b) meets a lock that is free when traced; the compiled code also guards
``lock.locked() is False`` at entry. Under those conditions running the block without the lock
equals eager acquiring the lock at the moment the guards are checked and releasing it at once,
a schedule eager could have had. A block that changes state or computes with tensors while the
lock is held (eager's mutual exclusion would matter), a lock held at trace time, ``RLock`` (its
owner is per-thread), and explicit ``acquire``/``release`` are graph breaks; a break inside the
block moves out to the ``with`` statement, so the whole block then runs natively, with the lock.
"""
from __future__ import annotations

import _thread
import contextvars
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, Source
from ..trace.graph_breaks import unsupported
from ..trace.side_effects import TokenBox, contextvar_reset, contextvar_set, object_token, token_of
from .base import BoundMethodVariable, VariableTracker
from .constant import ConstantVariable, is_constant_value

if TYPE_CHECKING:
    from ..trace.output_graph import OutputCodegen
    from ..trace.pycodegen import PyCodegen
    from ..trace.translator import Translator

_MISSING: Any = object()  # "no value in this context" for ContextVar.get(default)
_getters: dict[Any, Any] = {}  # ContextVar / lock -> one zero-argument callable (stable guard ids)


def _value_getter(var: contextvars.ContextVar) -> Any:
    getter = _getters.get(var)
    if getter is None:
        getter = _getters[var] = functools.partial(var.get, _MISSING)
    return getter


@dataclasses.dataclass(frozen=True)
class ContextVarValueSource(Source):
    """The value of a ContextVar in the current context (``_MISSING`` when unset): a root call
    of the guard tree, re-read the same way by the replacement code."""

    var: contextvars.ContextVar

    def name(self) -> str:
        return f"ContextVar({self.var.name!r}).get()"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.call_const(_value_getter(self.var), [])

    def get(self, frame: Any) -> Any:
        return _value_getter(self.var)()

    def tree_node(self, tree: Any) -> Any:
        return tree.call(_value_getter(self.var))


class _VarState:
    """The trace's view of one ContextVar: its value (None: as in the caller's context) and the
    tokens of the ``set`` calls still to be replayed, newest last."""

    __slots__ = ("value", "live")

    def __init__(self) -> None:
        self.value: VariableTracker | None = None
        self.live: list["ContextVarTokenVariable"] = []


def _state(tx: "Translator", var: contextvars.ContextVar) -> _VarState:
    states = tx.output.side_effects.context_vars
    st = states.get(id(var))
    if st is None:
        st = states[id(var)] = (var, _VarState())
    return st[1]


class ContextVarVariable(VariableTracker):
    """A ``contextvars.ContextVar`` reached from the frame (identity-guarded by the builder)."""

    __slots__ = ("value",)

    def __init__(self, value: contextvars.ContextVar, source: Source | None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return contextvars.ContextVar

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "name":
            return ConstantVariable(self.value.name)
        if name in ("get", "set", "reset"):
            return BoundMethodVariable(self, name)
        unsupported("unsupported_attr", f"ContextVar.{name}")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if kwargs:
            unsupported("exception", f"TypeError: ContextVar.{name}() takes no keyword arguments")
        if name == "get" and len(args) <= 1:
            return self._get(tx, args[0] if args else None)
        if name == "set" and len(args) == 1:
            return self._set(tx, args[0])
        if name == "reset" and len(args) == 1:
            return self._reset(tx, args[0])
        unsupported("builtin_arguments", f"ContextVar.{name}() with {len(args)} arguments")

    def _get(self, tx: "Translator", default: VariableTracker | None) -> VariableTracker:
        from .builder import wrap

        st = _state(tx, self.value)
        if st.value is not None:
            if not _is_missing(st.value):
                return st.value
        else:
            source = ContextVarValueSource(self.value)
            current = _value_getter(self.value)()
            if current is not _MISSING:
                return wrap(tx, current, source)
            tx.output.guards.add(GuardKind.ID_MATCH, source, _MISSING)
        if default is not None:
            return default
        try:
            var_default = self.value.get()
        except LookupError:
            unsupported("exception", f"LookupError: <ContextVar name={self.value.name!r}>")
        if not is_constant_value(var_default):
            unsupported("context_manager", f"ContextVar {self.value.name!r}: reading its default, a "
                        f"{type(var_default).__name__} object (only immutable defaults are traced)")
        return ConstantVariable(var_default)

    def _set(self, tx: "Translator", value: VariableTracker) -> VariableTracker:
        st = _state(tx, self.value)
        token = ContextVarTokenVariable(self, st.value, TokenBoxVariable())
        token.step = tx.output.side_effects.record_step(contextvar_set, self, (value, token.box))
        st.live.append(token)
        st.value = value
        return token

    def _reset(self, tx: "Translator", token: VariableTracker) -> VariableTracker:
        from .user_defined import UserDefinedObjectVariable

        st = _state(tx, self.value)
        if isinstance(token, ContextVarTokenVariable):
            if token.var.value is not self.value:
                unsupported("exception", "ValueError: the token was created by a different ContextVar")
            if token.used:
                unsupported("exception", "RuntimeError: the token has already been used once")
            if not st.live or st.live[-1] is not token:
                unsupported("context_manager", f"ContextVar {self.value.name!r}: resetting tokens in another order "
                            "than they were set")
            # set + reset of the same token leaves the context unchanged: nothing to replay
            tx.output.side_effects.drop_step(token.step)
            st.live.pop()
            token.used = True
            st.value = token.old
            return ConstantVariable(None)
        if isinstance(token, UserDefinedObjectVariable) and type(token.value) is contextvars.Token \
                and token.source is not None:
            real = token.value
            if real.var is not self.value:
                unsupported("exception", "ValueError: the token was created by a different ContextVar")
            from .builder import wrap

            tx.output.guards.add(GuardKind.ID_MATCH, AttrSource(token.source, "var"), self.value)
            old_src = AttrSource(token.source, "old_value")
            if real.old_value is contextvars.Token.MISSING:
                tx.output.guards.add(GuardKind.ID_MATCH, old_src, contextvars.Token.MISSING)
                st.value = ConstantVariable(_MISSING)
            else:
                st.value = wrap(tx, real.old_value, old_src)
            # replayed natively: it also marks the caller's token used (and raises as eager
            # would for a used token or another context)
            tx.output.side_effects.record_step(contextvar_reset, self, (token,))
            return ConstantVariable(None)
        unsupported("builtin_arguments", f"ContextVar.reset() with {token}")

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()
        return cg.ref(self.value, "context_var")

    def __repr__(self) -> str:
        return f"ContextVarVariable({self.value.name})"


def _is_missing(v: VariableTracker) -> bool:
    return isinstance(v, ConstantVariable) and v.value is _MISSING


class TokenBoxVariable(VariableTracker):
    """A blank :class:`~pyjit.trace.side_effects.TokenBox` the replay builds to keep the token a
    replayed ``ContextVar.set`` returned."""

    __slots__ = ()
    blank_only = True  # the replay builds it with cls.__new__ and sets no state

    def python_type(self) -> type:
        return TokenBox

    def reconstruct(self, cg: "OutputCodegen") -> str:
        return object_token(cg, self)


class ContextVarTokenVariable(VariableTracker):
    """The token a traced ``ContextVar.set`` returned (see module docstring)."""

    __slots__ = ("var", "old", "box", "step", "used")

    def __init__(self, var: ContextVarVariable, old: VariableTracker | None, box: TokenBoxVariable) -> None:
        super().__init__(None)
        self.var = var
        self.old = old  # the trace's value before the set (None: the caller's)
        self.box = box
        self.step: Any = None
        self.used = False

    def python_type(self) -> type:
        return contextvars.Token

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name == "var":
            return self.var
        unsupported("unsupported_attr", f"Token.{name} of a token set in the traced code")

    def truth(self, tx: "Translator") -> bool:
        return True

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.used:
            unsupported("unsupported_return", "a ContextVar token already used by reset() in the traced code, "
                        "kept after it (the replay cannot give back a used token)")
        return f"{cg.ref(token_of, 'token_of')}({self.box.reconstruct(cg)})"

    def __repr__(self) -> str:
        return f"ContextVarTokenVariable({self.var.value.name})"


# -- locks ----------------------------------------------------------------------------------------
def _locked_getter(lock: Any) -> Any:
    getter = _getters.get(lock)
    if getter is None:
        getter = _getters[lock] = lock.locked
    return getter


class LockVariable(VariableTracker):
    """A ``threading.Lock`` reached from the frame, usable as ``with lock:`` around a block that
    only reads (see module docstring)."""

    __slots__ = ("value", "marks")

    def __init__(self, value: Any, source: Source | None) -> None:
        super().__init__(source)
        self.value = value
        self.marks: list[tuple[Any, int]] = []

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: "Translator", name: str) -> VariableTracker:
        if name in ("__enter__", "__exit__"):
            return BoundMethodVariable(self, name)
        unsupported("context_manager", f"lock.{name} inside the traced code (only `with lock:` around a block "
                    "that changes nothing is traced)")

    def call_method(self, tx: "Translator", name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        if name == "__enter__":
            if self.value.locked():
                unsupported("context_manager", "`with lock:` on a lock held (by another thread) while tracing")
            tx.output.guards.add(GuardKind.GLOBAL_STATE, None, False, extra=_locked_getter(self.value))
            self.marks.append((tx.output.side_effects.deferred_mark(), len(tx.output.graph.nodes)))
            return ConstantVariable(True)
        if name == "__exit__":
            if not self.marks:
                unsupported("exception", "RuntimeError: release unlocked lock")
            (effects, deferred), nodes = self.marks.pop()
            se = tx.output.side_effects
            if se.deferred_mark() != (effects, deferred) or len(tx.output.graph.nodes) != nodes:
                unsupported("side_effect", "a `with lock:` block that changes program state or computes with tensors "
                            "(the lock's mutual exclusion matters there): the block runs natively")
            return ConstantVariable(False)
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def reconstruct(self, cg: "OutputCodegen") -> str:
        if self.source is not None:
            return self.source.expr()
        return cg.ref(self.value, "lock")

    def __repr__(self) -> str:
        return "LockVariable()"


def special_state_tracker(tx: "Translator", value: Any, source: Source | None) -> VariableTracker | None:
    """The tracker for a ContextVar or a lock (called by the builder), identity-guarded."""
    if type(value) is contextvars.ContextVar:
        tracker: VariableTracker = ContextVarVariable(value, source)
    elif type(value) is _thread.LockType:
        tracker = LockVariable(value, source)
    else:
        return None
    if source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, source, value)
    return tracker
