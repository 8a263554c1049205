"""Side effects of a trace on Python objects that outlive the frame, and their replay.

One :class:`SideEffects` per trace (``output.side_effects``). Mutations are applied to the
symbolic state at once (the mutated tracker's items, a pending attribute / global value read back
by later loads) and recorded here, one entry per mutated *place*, in the order of its first
mutation:

- the contents of a list or dict that came from outside (``xs.append(v)``, ``d[k] = v``);
- an attribute of an outside object or ``nn.Module`` (``self.x = v``, ``setattr``, ``del``);
- a global (``global g; g = v``) of the root frame's module or of an inlined function's module,
  also stored as a module attribute (``mod.g = v``, read back by ``mod.g``: one place);
- a closure cell of an outside function (``nonlocal n; n += 1``); each real cell has one tracker
  for the whole trace (:meth:`SideEffects.cell_variable`), however many calls reach it;
- a replayed step (:meth:`SideEffects.record_step`): ``ContextVar.set``/``reset`` run natively
  in program order (``set`` and ``reset`` of the same token inside the trace cancel out);
- a deferred call (:meth:`SideEffects.defer_call`): a ``logging.Logger`` method call (and an
  ``lru_cache`` wrapper whose only effect is one, transformers' ``logger.warning_once``), run
  natively by the replay, in order with the places above, with the same arguments.

Each entry is replayed after the graph runs (or before a graph break) as the *final* value of its
place: only the end state is observable to the caller, so a list mutated five times is replayed
once, as ``xs[:] = [...]`` on the caller's own list object (identity is kept). Objects created
inside the trace that escape (:class:`pyjit.variables.objects.ObjectVariable`, modules built in
``forward``) are materialised by the same replay into locals of the replacement code: a blank
``cls.__new__(cls)`` first (so objects can refer to each other), then their state. A list or dict
built by the trace that a replayed store or a built object holds is materialised the same way,
so every holder (and the return value) gets one object.

Replay protocol (see :meth:`OutputCodegen.capture_side_effects
<pyjit.trace.output_graph.OutputCodegen.capture_side_effects>`): one helper call per place, its
arguments expressions of the reconstruct protocol. Every read of the caller's state through a
source other than an argument slot (``L['t'].y``, a global, a cell), by the replay or by any other
rebuilt value (the return value, a graph break's stack and locals), is evaluated into a local
*before* the first mutation (:meth:`OutputCodegen._source_token
<pyjit.trace.output_graph.OutputCodegen._source_token>`): such a tracker stands for the state the
trace read before its own mutations, so ``t.x, t.y = t.y, t.x`` swaps and ``p = xs.pop()``
returns the popped item. The replay calls the generic store the trace modelled (``object.__setattr__`` or
``Module.__setattr__``): a Python ``__setattr__`` of the class already ran symbolically.

Aliasing: lists, dicts and objects reached from the frame are remembered by identity (the builder
asks :meth:`SideEffects.known` before wrapping one), so the same object reached twice is one
tracker (with a ``SAME_OBJECT`` guard); for each type with a mutated outside object, one
``DISTINCT`` guard over every object of that type the trace read makes a later call where they
alias trace again.

The recorder has no rollback: a failed speculation must restart the trace (a new OutputGraph).
"""
from __future__ import annotations

import ast
import collections
import types
from typing import TYPE_CHECKING, Any

from ..guards.guards import GuardKind
from ..guards.source import AttrSource, ClosureSource, Source, sources_as_tokens
from .graph_breaks import unsupported

if TYPE_CHECKING:
    from ..variables.base import VariableTracker
    from .output_graph import OutputCodegen
    from .translator import Translator


class _Deleted:
    """The value of a place after ``del`` in the trace."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETED: Any = _Deleted()


def call_later(fn: Any, args: tuple, kwargs: dict) -> None:
    """A deferred call (logging), run by the replay."""
    fn(*args, **kwargs)


# -- replay helpers: called by the replacement code ---------------------------------------------
def replace_list(target: list, items: list) -> None:
    """The caller's list gets the traced final contents (same object), with list's own method
    (a subclass's Python ``__setitem__`` already ran symbolically)."""
    list.__setitem__(target, slice(None), items)


def replace_dict(target: dict, items: dict) -> None:
    """The caller's dict gets the traced final contents in the traced order (same object). The
    base type's own methods: the trace modelled dict's (or OrderedDict's) behaviour."""
    base = collections.OrderedDict if isinstance(target, collections.OrderedDict) else dict
    base.clear(target)
    for k, v in items.items():
        base.__setitem__(target, k, v)


def store_attr(target: Any, base: type, name: str, value: Any) -> None:
    """The store the trace modelled: ``base`` is ``object`` or ``nn.Module`` (whose ``__setattr__``
    keeps a reassigned buffer a buffer); a Python ``__setattr__`` of the class already ran
    symbolically, so it is not run again here."""
    if value is DELETED:
        base.__delattr__(target, name)
    else:
        base.__setattr__(target, name, value)


def store_global(namespace: dict, name: str, value: Any) -> None:
    if value is DELETED:
        del namespace[name]
    else:
        namespace[name] = value


def store_cell(cell: Any, value: Any) -> None:
    cell.cell_contents = value


def new_object(cls: type) -> Any:
    """A blank instance of a class built by the traced code (its state is set afterwards)."""
    return cls.__new__(cls)


def build_module(cls: type, args: tuple, kwargs: dict) -> Any:
    """A parameter-free ``torch.nn`` module the traced code built, built again the same way."""
    return cls(*args, **kwargs)


def set_object_state(obj: Any, attrs: dict, items: dict | list | None) -> None:
    """The state of an object built by the traced code: its ``__dict__`` and ``__slots__`` and,
    for a dict or list subclass, its items (set with the base type's methods, like the trace did)."""
    if isinstance(items, list):
        list.__setitem__(obj, slice(None), items)
    elif items is not None:
        replace_dict(obj, items)
    cls = type(obj)
    plain = {}
    for name, value in attrs.items():
        if isinstance(getattr(cls, name, None), types.MemberDescriptorType):
            object.__setattr__(obj, name, value)  # a slot: its descriptor holds the value
        else:
            plain[name] = value
    if plain:
        obj.__dict__.update(plain)


class TokenBox:
    """Holds the token a replayed ``ContextVar.set`` returned (built blank by the replay), for
    the token tracker that stands for it (pyjit/variables/context_state.py)."""

    token: Any


def contextvar_set(var: Any, value: Any, box: TokenBox) -> None:
    box.token = var.set(value)


def contextvar_reset(var: Any, token: Any) -> None:
    var.reset(token)


def token_of(box: TokenBox) -> Any:
    return box.token


class _Entry:
    __slots__ = ("helper", "target", "args")

    def __init__(self, helper: Any, target: Any, args: tuple[Any, ...]) -> None:
        self.helper = helper
        self.target = target  # tracker, or a callable ``(cg) -> expression text``
        self.args = args      # trackers, or plain constants


class SideEffects:
    """The recorded mutations of one trace (see module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[Any, _Entry] = {}  # key of the place -> entry, in first-mutation order
        self._attrs: dict[int, dict[str, "VariableTracker"]] = {}  # id(real obj) -> name -> value
        self._globals: dict[tuple[int, str], "VariableTracker"] = {}
        self._known: dict[int, tuple[Any, "VariableTracker"]] = {}  # id(real obj) -> (obj, tracker)
        self._cells: dict[int, Any] = {}  # id(real cell) -> its one CellVariable
        self._mutated_outside: list["VariableTracker"] = []
        self.new_objects: list[Any] = []  # ObjectVariables referenced by reconstruct, in order
        self.created: list[Any] = []  # every ObjectVariable the trace constructed
        self._shared: tuple[tuple[int, int], set[int]] | None = None
        self._keep: list[Any] = []  # real objects whose ids are keys above
        self.replay: "Replay | None" = None  # set by OutputCodegen.capture_side_effects
        self.effects = 0  # recorded effects other than deferred calls (see defer_call)
        self._deferred = 0
        self._steps = 0
        # id(ContextVar) -> (var, the trace's view of it): pyjit/variables/context_state.py
        self.context_vars: dict[int, tuple[Any, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    # -- identity of outside objects --------------------------------------------------------
    def known(self, tx: "Translator", value: Any, source: Source | None) -> "VariableTracker | None":
        """The tracker already standing for ``value`` (reached through another source), if any."""
        if source is None:
            return None
        hit = self._known.get(id(value))
        if hit is None:
            return None
        tracker = hit[1]
        if tracker.source is not None and tracker.source != source:
            tx.output.guards.add(GuardKind.SAME_OBJECT, source, extra=tracker.source)
        return tracker

    def remember(self, value: Any, tracker: "VariableTracker") -> "VariableTracker":
        if tracker.source is not None:
            self._known[id(value)] = (value, tracker)
        return tracker

    def _outside_mutated(self, tracker: "VariableTracker") -> None:
        if all(t is not tracker for t in self._mutated_outside):
            self._mutated_outside.append(tracker)

    # -- containers ---------------------------------------------------------------------------
    def mutate_container(self, tx: "Translator", container: "VariableTracker") -> None:
        """A list/dict tracker that came from outside is about to change (its items are the truth)."""
        from ..variables.dicts import DictVariable

        self.effects += 1
        if container.source is None:
            return
        key = ("container", id(container))
        if key not in self._entries:
            helper = replace_dict if isinstance(container, DictVariable) else replace_list
            self._entries[key] = _Entry(helper, container, ("items",))
            self._outside_mutated(container)

    # -- attributes ---------------------------------------------------------------------------
    def pending_attr(self, obj: "VariableTracker", name: str) -> "VariableTracker | None":
        """The value the trace stored into ``obj.name`` (an outside object), or None."""
        if not self._attrs:  # the common case: every attribute load asks
            return None
        real = getattr(obj, "value", None)
        if real is None:
            return None
        value = self._attrs.get(id(real), {}).get(name)
        if value is DELETED:
            unsupported("exception", f"AttributeError: {type(real).__name__!r} object has no attribute {name!r}")
        return value

    def pending_attrs(self, obj: "VariableTracker") -> dict[str, Any]:
        """Every attribute the trace stored into (or deleted from, DELETED) the outside object
        ``obj`` so far, in first-store order."""
        real = getattr(obj, "value", None)
        if not self._attrs or real is None:
            return {}
        return dict(self._attrs.get(id(real), {}))

    def store_attr(self, tx: "Translator", obj: "VariableTracker", name: str, value: Any, base: type) -> None:
        """``obj.name = value`` (``value`` is DELETED for ``del obj.name``) on an outside object
        whose class uses the generic ``__setattr__`` (checked by the caller)."""
        real = getattr(obj, "value", None)
        if obj.source is None or real is None:
            unsupported("side_effect", f"assigning the attribute {name!r} of a {type(real).__name__} object that "
                        "pyjit cannot reach from the frame (a library object or one built by torch)")
        self.effects += 1
        self._keep.append(real)
        self._attrs.setdefault(id(real), {})[name] = value
        key = ("attr", id(real), name)
        args = (base, name, ("attr", id(real), name))
        if key in self._entries:
            self._entries[key].args = args  # the place keeps its position; the last store's kind
        else:
            self._entries[key] = _Entry(store_attr, obj, args)
        self._outside_mutated(obj)

    # -- globals ------------------------------------------------------------------------------
    def pending_global(self, tx: "Translator", name: str, namespace: dict | None = None) -> "VariableTracker | None":
        """The value the trace stored into global ``name`` of ``namespace`` (the current frame's
        globals by default; a module's ``__dict__`` for ``module.name``), or None."""
        if not self._globals:
            return None
        ns = tx.f_globals if namespace is None else namespace
        value = self._globals.get((id(ns), name))
        if value is DELETED:
            if namespace is not None:
                unsupported("exception", f"AttributeError: module {ns.get('__name__')!r} has no attribute {name!r}")
            unsupported("exception", f"NameError: name {name!r} is not defined")
        return value

    def store_global(self, tx: "Translator", name: str, value: Any, namespace: dict | None = None) -> None:
        """``global name; name = value`` (``namespace`` None: the frame's globals), or
        ``module.name = value`` (``namespace``: the module's ``__dict__``, the module's identity
        guarded where it was read): one place either way, so ``global`` stores in a module's
        function and attribute reads of that module see each other."""
        self.effects += 1
        ns = tx.f_globals if namespace is None else namespace
        key = (id(ns), name)
        self._globals[key] = value
        self._keep.append(ns)
        if ("global",) + key in self._entries:
            return
        if namespace is None and ns is tx.root_globals:
            # The replacement code runs with the frame's globals: ``globals()`` called there.
            def target(cg: "OutputCodegen") -> str:
                return f"{cg.ref(globals, 'globals')}()"
        else:
            # An inlined function's module: its __globals__ dict is fixed for the function
            # object, whose identity the trace guarded where it was read (a module's likewise).
            def target(cg: "OutputCodegen") -> str:
                return cg.ref(ns, "globals")
        self._entries[("global",) + key] = _Entry(store_global, target, (name, ("global",) + key))

    # -- closure cells ------------------------------------------------------------------------
    def cell_variable(self, real_cell: Any, source: Source | None) -> Any:
        """The one tracker of a closure cell that lives outside the trace. A closure called
        twice (or two closures sharing a variable) reaches the same cell each time: its second
        call must read what the first one stored, and the replay store it once."""
        hit = self._cells.get(id(real_cell))
        if hit is None:
            from ..variables.functions import CellVariable

            hit = CellVariable(real_cell=real_cell, source=source)
            self._cells[id(real_cell)] = hit
            self._keep.append(real_cell)
        return hit

    def store_cell(self, tx: "Translator", cell: Any, value: "VariableTracker", name: str) -> None:
        """``nonlocal name; name = value`` on a cell of an outside function (a CellVariable)."""
        self.effects += 1
        source = cell.source
        if isinstance(source, ClosureSource):
            var = source.var

            def target(cg: "OutputCodegen") -> str:
                from ..bytecode import create_load_closure

                # the replacement code keeps the frame's free variables: push the cell itself
                return cg._token(("cell", var), lambda pcg: pcg.append(create_load_closure(var)), f"cell_{var}")
        elif isinstance(source, AttrSource) and source.attr == "cell_contents":
            cell_source = source.base

            def target(cg: "OutputCodegen") -> str:
                return cell_source.expr()
        else:
            unsupported("side_effect", f"assigning the outer variable {name!r} (nonlocal) of a cell pyjit cannot reach")
        key = ("cell", id(cell))
        if key not in self._entries:
            self._entries[key] = _Entry(store_cell, target, (("cell", cell),))

    # -- deferred calls -------------------------------------------------------------------------
    def defer_call(self, fn: Any, args: "VariableTracker", kwargs: "VariableTracker") -> None:
        """Run ``fn(*args, **kwargs)`` in the replay instead of tracing it (``fn`` a constant;
        ``args``/``kwargs`` a tuple and a dict tracker the replay rebuilds). For calls whose
        result is None and whose effect is outside the program's values (logging): the replay
        runs it once per call of the compiled code, where eager would, so a logger's level,
        handlers and ``lru_cache`` are consulted at run time as in eager."""
        self._deferred += 1
        self._entries[("call", self._deferred)] = _Entry(call_later, lambda cg: cg.ref(fn, "deferred_fn"), (args, kwargs))

    # -- replayed steps --------------------------------------------------------------------------
    def record_step(self, helper: Any, target: "VariableTracker", args: tuple[Any, ...]) -> Any:
        """Replay ``helper(target, *args)`` natively, in program order with the places above
        (``ContextVar.set``/``reset``); returns a key for :meth:`drop_step`."""
        self.effects += 1
        self._steps += 1
        key = ("step", self._steps)
        self._entries[key] = _Entry(helper, target, args)
        return key

    def drop_step(self, key: Any) -> None:
        """Forget a recorded step (a ``ContextVar.set`` the trace itself reset)."""
        del self._entries[key]

    def deferred_mark(self) -> tuple[int, int]:
        """Where the record stands now: (effects, deferred calls)."""
        return self.effects, self._deferred

    def drop_deferred_since(self, mark: tuple[int, int]) -> bool:
        """When nothing but deferred calls was recorded since ``mark``, forget those calls and
        say True (the caller defers the enclosing call instead); else False."""
        if self.effects != mark[0]:
            return False
        for n in range(mark[1] + 1, self._deferred + 1):
            del self._entries[("call", n)]
        return True

    # -- lists and dicts of the trace reachable from two places -------------------------------
    def shared_container_token(self, cg: "OutputCodegen", container: "VariableTracker") -> str | None:
        """A list/dict built by the trace that a replayed store or an object built by the trace
        holds is rebuilt once, in a local, so every place that holds it gets the same object
        (``self.cache = []; return self.cache``); None for the others (rebuilt as a display)."""
        if container.source is not None or not (self._entries or self.created):
            return None
        key = (len(self._entries), len(self.created))
        if self._shared is None or self._shared[0] != key:
            self._shared = (key, self._reachable())
        if id(container) not in self._shared[1]:
            return None
        return object_token(cg, container)

    def _reachable(self) -> set[int]:
        """ids of the source-less lists/dicts reachable from recorded values and built objects."""
        from ..variables.dicts import DictVariable
        from ..variables.lists import BaseListVariable, ListVariable
        from ..variables.objects import ObjectVariable

        found: set[int] = set()
        seen: set[int] = set()
        stack: list[Any] = [self._value(a) for e in self._entries.values() for a in e.args if a != "items"]
        stack += [e.target for e in self._entries.values() if isinstance(e.target, (BaseListVariable, DictVariable))]
        stack += self.created
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, (ListVariable, DictVariable)) and v.source is None:
                found.add(id(v))
            if isinstance(v, BaseListVariable):
                stack.extend(v.items)
            elif isinstance(v, DictVariable):
                stack.extend(v.items.values())
            elif isinstance(v, ObjectVariable):
                stack.extend(v.attrs.values())
                if v.items is not None:
                    stack.append(v.items)
        return found

    # -- replay -------------------------------------------------------------------------------
    def _value(self, arg: Any) -> Any:
        """The tracker (or constant) an entry argument stands for at capture time."""
        if isinstance(arg, tuple) and arg and arg[0] == "attr":
            return self._attrs[arg[1]][arg[2]]
        if isinstance(arg, tuple) and arg and arg[0] == "global":
            return self._globals[(arg[1], arg[2])]
        if isinstance(arg, tuple) and arg and arg[0] == "cell":
            return arg[1].contents
        return arg

    def capture(self, cg: "OutputCodegen") -> "Replay":
        """The replay of everything recorded so far, as expressions of the reconstruct protocol
        (registers the graph outputs it needs); see :meth:`OutputCodegen.capture_side_effects`."""
        from ..variables.base import VariableTracker
        from ..variables.dicts import DictVariable
        from ..variables.objects import NewModuleVariable, ObjectVariable

        def text(v: Any) -> str:
            if isinstance(v, VariableTracker):
                return v.reconstruct(cg)
            if v is DELETED:
                return cg.ref(DELETED, "deleted")
            return cg.constant(v)

        self._install_distinct_guards(cg)
        steps: list[tuple[Any, list[str]]] = []
        with sources_as_tokens(cg._source_token):
            for entry in self._entries.values():
                if isinstance(entry.target, VariableTracker):
                    target = entry.target.reconstruct(cg)  # an outside object: its source
                else:
                    target = entry.target(cg)
                args = [target]
                for a in entry.args:
                    args.append(_items_text(cg, entry.target, text) if a == "items" else text(self._value(a)))
                steps.append((entry.helper, args))
            # Objects built by the trace and referenced so far (by the return value, a break's
            # stack, the mutations above), then those their state refers to.
            states: list[tuple[Any, list[str]]] = []
            done = 0
            while done < len(self.new_objects):
                obj = self.new_objects[done]
                done += 1
                if isinstance(obj, ObjectVariable):
                    states.append((set_object_state, [object_token(cg, obj), *obj.state_texts(cg, text)]))
                elif isinstance(obj, NewModuleVariable) or getattr(obj, "blank_only", False):
                    pass  # built whole by its constructor below (or a blank holder)
                else:  # a list/dict of the trace that two places share
                    helper = replace_dict if isinstance(obj, DictVariable) else replace_list
                    states.append((helper, [object_token(cg, obj), _items_text(cg, obj, text)]))
        replay = Replay()
        for obj in self.new_objects:
            cls_text = cg.ref(obj.python_type(), obj.python_type().__name__)  # guarded where it was read
            if isinstance(obj, NewModuleVariable):
                call = f"{cg.ref(build_module, 'build_module')}({cls_text}, {cg.constant(obj.args)}, {cg.constant(obj.kwargs)})"
            else:
                call = f"{cg.ref(new_object, 'new_object')}({cls_text})"
            replay.blanks.append((object_local(self, obj), parse(call)))
        # Arguments that read the caller's state load what OutputCodegen read before the first
        # mutation (OutputCodegen._source_token).
        for helper, args in states + steps:
            replay.calls.append(parse(f"{cg.ref(helper, helper.__name__)}({', '.join(args)})"))
        replay.objects = list(self.new_objects)
        return replay

    def _install_distinct_guards(self, cg: "OutputCodegen") -> None:
        """The trace assumed each mutated outside object is no other object it read: one
        ``DISTINCT`` guard per type that has a mutated object, over every object of that type the
        trace read (they were distinct when traced: one object reached twice is one tracker).
        Objects of different (guarded) types cannot be the same object; modules are ID-guarded."""
        from ..variables.nn_module import NNModuleVariable

        types_mutated = {t.python_type() for t in self._mutated_outside
                         if not isinstance(t, NNModuleVariable) and t.source is not None}
        for ptype in types_mutated:
            sources = tuple(tracker.source for value, tracker in self._known.values()
                            if type(value) is ptype and tracker.source is not None)
            if len(sources) > 1:
                cg.output.guards.add(GuardKind.DISTINCT, None, extra=sources)


class Replay:
    """What :meth:`OutputCodegen.emit_side_effects` emits, in order: ``local = expr`` for each
    blank new object, then each call (its result popped)."""

    def __init__(self) -> None:
        self.blanks: list[tuple[str, ast.expr]] = []
        self.calls: list[ast.expr] = []
        self.objects: list[Any] = []

    def check_complete(self, se: SideEffects) -> None:
        """Every object built by the trace that something rebuilds was captured (a rebuild
        captured after the replay would read a local nobody set)."""
        if len(se.new_objects) != len(self.objects):
            raise AssertionError("an object built by the trace was referenced after capture_side_effects()")


def _loader(local: str) -> Any:
    return lambda pcg: pcg.load_local(local)


def _items_text(cg: "OutputCodegen", container: Any, text: Any) -> str:
    from ..variables.dicts import DictVariable

    if isinstance(container, DictVariable):
        from ..variables.identity_keys import key_text  # a tensor key is rebuilt like a value

        return "{" + ", ".join(f"{key_text(cg, k)}: {text(v)}" for k, v in container.items.items()) + "}"
    return "[" + ", ".join(text(v) for v in container.items) + "]"


def object_token(cg: "OutputCodegen", obj: Any) -> str:
    """The name under which the replay keeps an object built by the trace (a local of the
    replacement code, created by :meth:`OutputCodegen.emit_side_effects`)."""
    se: SideEffects = cg.output.side_effects
    if all(o is not obj for o in se.new_objects):
        se.new_objects.append(obj)
    return cg._token(("newobj", id(obj)), _loader(object_local(se, obj)), f"new_{obj.python_type().__name__}")


def object_local(se: SideEffects, obj: Any) -> str:
    index = next(i for i, o in enumerate(se.new_objects) if o is obj)
    return f"___new_object_{index}"


def parse(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body
