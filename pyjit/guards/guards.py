"""Guard kinds, the guard set of one trace, and its compilation into checkers.

A guard is one assumption the trace made about a value reached through a :class:`Source`
(``L['x']`` is a float32 CPU tensor of size (8, 4); ``G['scale'] == 2.0``; ``L['self'].fc`` is
that very module object). Guards are installed once, when the tracer makes the assumption
(``GuardSet.add``), deduplicated by (kind, source).

A guard set compiles two ways:

- :func:`compile_c_tree`: into ``pyjit._C.GuardTree`` (the fast path; the C core evaluates it
  and reports the id of the first failing check); the id is the index of the guard here;
- :func:`compile_python`: into a generated Python function with the frame's flat signature
  (used when the C core is not built, and in tests).

:meth:`Guard.failure_reason` renders why a guard failed on a given frame, in source form:
``L['x'].size()[0]: expected 8, got 16`` (logged on the ``recompiles`` channel).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import math
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable

from .shape_relation import ShapeRelation
from .source import FrameValues, LocalSource, Source

if TYPE_CHECKING:
    from ..trace.pycodegen import PyCodegen


class GuardKind(enum.Enum):
    TYPE_MATCH = "type"          # type(v) is expected
    ID_MATCH = "id"              # v is expected (modules, functions, classes, None)
    EQUALS_MATCH = "equals"      # type(v) is type(expected) and v == expected (Python constants)
    TENSOR_MATCH = "tensor"      # type, dtype, device, requires_grad, sizes, strides
    DICT_KEYS = "dict_keys"      # keys in iteration order == expected (OrderedDict: storage order too, == extra or expected)
    LEN_MATCH = "len"            # len(v) == expected (containers whose length was used)
    GLOBAL_STATE = "global_state"  # fn() == expected for grad mode, default dtype, autocast
    SAME_OBJECT = "alias"        # v is <other source> (f(x, x) traced with one graph input)
    # the listed objects are pairwise different; expected "memory": tensors in different memory
    # (no two are views of one base), for graphs that mutate inputs in place
    DISTINCT = "distinct"
    HASATTR = "hasattr"          # hasattr(v, extra) == expected (attributes probed by hasattr/getattr default)
    # (extra in v) == expected: a method found on the class is not shadowed by the instance __dict__
    DICT_CONTAINS = "dict_contains"
    # A relation between symbolic sizes (dynamic shapes) the trace relied on: expected is a
    # ShapeRelation over the slots the tensor guards bind (TensorSpec.bind); no source.
    SHAPE = "shape"


@dataclasses.dataclass(eq=False)
class Guard:
    kind: GuardKind
    source: Source | None
    expected: Any = None
    # GLOBAL_STATE: the zero-argument callable read; SAME_OBJECT: the other source;
    # DISTINCT: the tuple of sources; HASATTR: the attribute name.
    extra: Any = None

    def __post_init__(self) -> None:
        # ID_MATCH keeps only a weak reference where it can: a guard set (kept for recompile
        # reasons) must not keep modules and functions alive. A dead object fails the guard.
        if self.kind is GuardKind.ID_MATCH and self.expected is not None:
            try:
                self.expected = _Weak(weakref.ref(self.expected))
            except TypeError:
                pass

    def target(self) -> Any:
        """The expected object of an ID_MATCH guard (None-like sentinel when it died)."""
        e = self.expected
        return e.ref() if isinstance(e, _Weak) else e

    def describe(self) -> str:
        """The guard as a Python expression (what ``guards`` logging prints)."""
        s = self.source.name() if self.source is not None else ""
        k = self.kind
        if k is GuardKind.TYPE_MATCH:
            return f"type({s}) is {_qual(self.expected)}"
        if k is GuardKind.ID_MATCH:
            return f"{s} is {_short_obj(self.target())}"
        if k is GuardKind.EQUALS_MATCH:
            return f"{s} == {self.expected!r}"
        if k is GuardKind.TENSOR_MATCH:
            t = self.expected
            return (f"check_tensor({s}, {_qual(t.type)}, {t.dtype}, {t.device}, requires_grad={t.requires_grad}, "
                    f"size={list(t.sizes)}, stride={list(t.strides)})")
        if k is GuardKind.DICT_KEYS:
            if self.extra is not None:
                return f"list({s}.keys()) == {list(self.expected)!r} and list(dict.keys({s})) == {list(self.extra)!r}"
            return f"list({s}.keys()) == {list(self.expected)!r}"
        if k is GuardKind.LEN_MATCH:
            return f"len({s}) == {self.expected}"
        if k is GuardKind.GLOBAL_STATE:
            return f"{_qual(self.extra)}() == {self.expected!r}"
        if k is GuardKind.SAME_OBJECT:
            return f"{s} is {self.extra.name()}"
        if k is GuardKind.DISTINCT:
            what = "distinct_memory" if self.expected == "memory" else "distinct"
            return f"{what}({', '.join(x.name() for x in self.extra)})"
        if k is GuardKind.HASATTR:
            return f"hasattr({s}, {self.extra!r}) == {self.expected}"
        if k is GuardKind.DICT_CONTAINS:
            return f"({self.extra!r} in {s}) == {self.expected}"
        if k is GuardKind.SHAPE:
            return self.expected.text
        raise AssertionError(k)

    def failure_reason(self, frame: FrameValues) -> str | None:
        """Why this guard fails on ``frame`` (source form, expected vs actual), or None if it holds."""
        k = self.kind
        try:
            if k is GuardKind.GLOBAL_STATE:
                got = self.extra()
                return None if got == self.expected else f"{_qual(self.extra)}(): expected {self.expected!r}, got {got!r}"
            if k is GuardKind.SHAPE:
                rel: ShapeRelation = self.expected
                return None if rel.holds_on(frame) else f"{rel.text} (with {rel.describe_values(frame)})"
            if k is GuardKind.DISTINCT:
                vals = [x.get(frame) for x in self.extra]
                if _distinct(*vals, memory=self.expected == "memory"):
                    return None
                return f"{self.describe()}: some inputs are the same tensor or views of one tensor"
            assert self.source is not None
            value = self.source.get(frame)
        except Exception as e:  # the path itself broke: the source no longer resolves
            return f"{self.source.name() if self.source else self.describe()}: cannot be read ({type(e).__name__}: {e})"
        s = self.source.name()
        if k is GuardKind.TYPE_MATCH:
            return None if type(value) is self.expected else f"type({s}): expected {_qual(self.expected)}, got {_qual(type(value))}"
        if k is GuardKind.ID_MATCH:
            want = self.target()
            if isinstance(self.expected, _Weak) and want is None:
                return f"{s}: the object it was traced with no longer exists"
            return None if value is want else f"{s}: expected the object {_short_obj(want)}, got {_short_obj(value)}"
        if k is GuardKind.EQUALS_MATCH:
            if _same_constant(value, self.expected):
                return None
            return f"{s}: expected {self.expected!r}, got {value!r}"
        if k is GuardKind.TENSOR_MATCH:
            return self.expected.mismatch(s, value)
        if k is GuardKind.DICT_KEYS:
            if _dict_keys_ok(value, tuple(self.expected), self.extra):
                return None
            keys = dict_keys_in_order(value) if isinstance(value, dict) else None
            if keys is not None and _keys_equal(keys, tuple(self.expected)):  # only the storage order moved
                want = list(self.expected if self.extra is None else self.extra)
                return f"{s} (storage order): expected {want!r}, got {list(dict.keys(value))!r}"
            return f"{s}.keys(): expected {list(self.expected)!r}, got {keys!r}"
        if k is GuardKind.LEN_MATCH:
            n = len(value)
            return None if n == self.expected else f"len({s}): expected {self.expected}, got {n}"
        if k is GuardKind.HASATTR:
            got = hasattr(value, self.extra)
            return None if got == self.expected else f"hasattr({s}, {self.extra!r}): expected {self.expected}, got {got}"
        if k is GuardKind.DICT_CONTAINS:
            got = self.extra in value
            return None if got == self.expected else f"{self.extra!r} in {s}: expected {self.expected}, got {got}"
        if k is GuardKind.SAME_OBJECT:
            other = self.extra.get(frame)
            return None if value is other else f"{s} is {self.extra.name()}: expected the same object, got different ones"
        raise AssertionError(k)


@dataclasses.dataclass(frozen=True)
class _Weak:
    ref: "weakref.ref[Any]"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What TENSOR_MATCH checks, captured from the real input tensor at trace time."""

    type: type
    dtype: Any
    device: Any
    requires_grad: bool
    sizes: tuple[int | None, ...]   # None: a symbolic size (not checked here; see bind)
    strides: tuple[int | None, ...]
    # Dynamic shapes: (what, dim, slot) -- what 0 = size, 1 = stride -- values stored into the
    # shape slots that SHAPE guards read (evaluated after every tensor check passed).
    bind: tuple[tuple[int, int, int], ...] = ()

    @staticmethod
    def of(t: Any) -> "TensorSpec":
        return TensorSpec(type(t), t.dtype, t.device, bool(t.requires_grad), tuple(t.size()), tuple(t.stride()))

    def mismatch(self, s: str, v: Any) -> str | None:
        if type(v) is not self.type:
            return f"type({s}): expected {_qual(self.type)}, got {_qual(type(v))}"
        if v.dtype != self.dtype:
            return f"{s}.dtype: expected {self.dtype}, got {v.dtype}"
        if v.device != self.device:
            return f"{s}.device: expected {self.device}, got {v.device}"
        if bool(v.requires_grad) != self.requires_grad:
            return f"{s}.requires_grad: expected {self.requires_grad}, got {v.requires_grad}"
        size = tuple(v.size())
        if len(size) != len(self.sizes):
            return f"{s}.dim(): expected {len(self.sizes)}, got {len(size)}"
        for i, (a, b) in enumerate(zip(self.sizes, size)):
            if a is not None and a != b:
                return f"{s}.size()[{i}]: expected {a}, got {b}"
        for i, (a, b) in enumerate(zip(self.strides, v.stride())):
            if a is not None and a != b:
                return f"{s}.stride()[{i}]: expected {a}, got {b}"
        return None


class GuardSet:
    """The guards of one trace, deduplicated, in installation order."""

    def __init__(self) -> None:
        self.guards: list[Guard] = []
        self._seen: dict[tuple[Any, ...], Guard] = {}

    def add(self, kind: GuardKind, source: Source | None, expected: Any = None, extra: Any = None) -> None:
        key = (kind, source, _dedup_key(extra) if kind is not GuardKind.GLOBAL_STATE else id(extra))
        if kind is GuardKind.DISTINCT:
            key = (kind, tuple(extra), expected)
        if key in self._seen:
            return
        g = Guard(kind, source, expected, extra)
        self._seen[key] = g
        self.guards.append(g)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.guards)

    def replace_expected(self, kind: GuardKind, source: Source | None, expected: Any) -> None:
        """Change what an installed guard expects (a tensor guard whose sizes became symbolic)."""
        g = self._seen.get((kind, source, None))
        if g is None:
            raise KeyError(f"no {kind.name} guard on {source}")
        g.expected = expected

    def __len__(self) -> int:
        return len(self.guards)

    def describe(self) -> str:
        return "\n".join(f"  [{i}] {g.describe()}" for i, g in enumerate(self.guards))

    def first_failure(self, frame: FrameValues) -> tuple[int, str] | None:
        for i, g in enumerate(self.guards):
            reason = g.failure_reason(frame)
            if reason is not None:
                return i, reason
        return None


def _dedup_key(extra: Any) -> Any:
    """``extra`` as part of a de-duplication key: pyjit's own values (names, sources, numbers)
    by value, anything else by identity (hashing or comparing a user object would run its
    ``__hash__``/``__eq__``; the guard keeps ``extra`` alive, so the id stays unique)."""
    t = type(extra)
    if extra is None or t is str or t is int or t is bool or issubclass(t, Source):
        return extra
    if t is tuple and all(type(e) is str or issubclass(type(e), Source) for e in extra):
        return extra
    return ("id", id(extra))


def _qual(obj: Any) -> str:
    mod = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    if mod in (None, "builtins"):
        return str(name)
    return f"{mod}.{name}"


def _short_obj(obj: Any) -> str:
    if obj is None:
        return "None"
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return _qual(obj)
    return f"<{_qual(type(obj))} at {id(obj):#x}>"


# ---------------------------------------------------------------------------------------------
# Compilation into a generated Python checker (pure-Python runtime, and the reference in tests).


def compile_python(guards: GuardSet, original: types.CodeType, func: types.FunctionType) -> Callable[..., bool]:
    """A function with the frame's flat signature returning True when every guard holds.

    Assembled with :mod:`pyjit.bytecode` like the replacement code: each guard pushes its
    verdict (sources read with ``Source.reconstruct``, expected values as constants) and a
    false verdict jumps to ``return False``; so the checks run in order and stop at the first
    failure, exactly like the C tree.
    """
    from ..trace.pycodegen import PyCodegen, make_function

    cg = PyCodegen(original)
    fail = cg.new_label()
    for g in guards:
        _emit_condition(cg, g)
        cg.pop_jump_if(False, fail)
    cg.load_const(True)
    cg.return_value()
    cg.place(fail)
    cg.load_const(False)
    cg.return_value()
    return make_function(cg.finish(f"__pyjit_guard_{original.co_name}"), func)


def _emit_condition(cg: PyCodegen, g: Guard) -> None:
    """Push the truth of one guard."""
    k = g.kind
    src = g.source

    def load() -> None:
        assert src is not None
        src.reconstruct(cg)

    def const(value: Any) -> Callable[[], None]:
        return lambda: cg.load_const(value)

    if k is GuardKind.ID_MATCH:
        target = g.target()
        if target is None and isinstance(g.expected, _Weak):
            cg.load_const(False)  # the traced object no longer exists: like the C tree, fail
            return
        load()
        cg.load_const(target)
        cg.is_same()
    elif k is GuardKind.SAME_OBJECT:
        load()
        g.extra.reconstruct(cg)
        cg.is_same()
    elif k is GuardKind.TYPE_MATCH:
        cg.call_const(_type_is, [load, const(g.expected)])
    elif k is GuardKind.EQUALS_MATCH:
        cg.call_const(_same_constant, [load, const(g.expected)])
    elif k is GuardKind.TENSOR_MATCH:
        cg.call_const(_tensor_ok, [load, const(g.expected)])
    elif k is GuardKind.SHAPE:
        rel: ShapeRelation = g.expected
        cg.call_const(rel.check_sources, [functools.partial(s.reconstruct, cg) for s in rel.sources()])
    elif k is GuardKind.DICT_KEYS:
        cg.call_const(_dict_keys_ok, [load, const(tuple(g.expected)), const(g.extra)])
    elif k is GuardKind.LEN_MATCH:
        cg.call_const(_len_is, [load, const(int(g.expected))])
    elif k is GuardKind.GLOBAL_STATE:
        cg.call_const(_state_is, [const(g.extra), const(g.expected)])
    elif k is GuardKind.HASATTR:
        cg.call_const(_hasattr_is, [load, const(g.extra), const(bool(g.expected))])
    elif k is GuardKind.DICT_CONTAINS:
        cg.call_const(_contains_is, [load, const(g.extra), const(bool(g.expected))])
    elif k is GuardKind.DISTINCT:
        check = _distinct_memory if g.expected == "memory" else _distinct
        cg.call_const(check, [functools.partial(s.reconstruct, cg) for s in g.extra])
    else:
        raise AssertionError(k)


def _type_is(v: Any, t: type) -> bool:
    return type(v) is t


def _len_is(v: Any, n: int) -> bool:
    return len(v) == n


def _state_is(fn: Callable[[], Any], expected: Any) -> bool:
    return bool(fn() == expected)


def _hasattr_is(v: Any, name: str, expected: bool) -> bool:
    return hasattr(v, name) is expected


def _contains_is(v: Any, key: Any, expected: bool) -> bool:
    return (key in v) is expected


def _needs_exact_float(c: Any) -> bool:
    """0.0/-0.0 compare equal and NaN equals nothing, but they fold to different results."""
    return type(c) is float and (c == 0.0 or c != c)


def _same_constant(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(b) is float and _needs_exact_float(b):
        return (a != a and b != b) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    return bool(a == b)


def _tensor_ok(v: Any, spec: TensorSpec) -> bool:
    return (
        type(v) is spec.type
        and v.dtype == spec.dtype
        and v.device == spec.device
        and v.requires_grad == spec.requires_grad
        and _dims_match(v.size(), spec.sizes)
        and _dims_match(v.stride(), spec.strides)
    )


def _dims_match(actual: Any, expected: tuple[int | None, ...]) -> bool:
    if len(actual) != len(expected):
        return False
    return all(e is None or a == e for a, e in zip(actual, expected))


def dict_keys_in_order(v: dict[Any, Any]) -> list[Any]:
    """A dict's keys in iteration order: an OrderedDict's (or subclass's) own linked list
    (``move_to_end``, ``popitem(last=False)`` reorder it, not the storage), the storage order
    for any other dict. Never a subclass's Python ``keys``/``__iter__`` (the tracer inlines those)."""
    if isinstance(v, collections.OrderedDict):
        return list(collections.OrderedDict.keys(v))
    return list(dict.keys(v))


def dict_keys_expected(v: dict[Any, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """``(expected, extra)`` of the DICT_KEYS guard for ``v``: the keys in iteration order, and
    for an OrderedDict whose storage order differs (reordered when traced) the storage order,
    which the guard then pins too (else ``extra`` is None: storage must equal ``expected``)."""
    keys = tuple(dict_keys_in_order(v))
    storage = tuple(dict.keys(v))
    return keys, (storage if isinstance(v, collections.OrderedDict) and not _keys_equal(storage, keys) else None)


def _keys_equal(got: Any, keys: tuple[Any, ...]) -> bool:
    got = list(got)
    return len(got) == len(keys) and all(a is b or _same_constant(a, b) for a, b in zip(got, keys))


def _dict_keys_ok(v: Any, keys: tuple[Any, ...], storage: tuple[Any, ...] | None = None) -> bool:
    """What the C check computes: iteration order ``keys``; for an OrderedDict also storage order
    ``storage`` (``keys`` when None); for other dicts iteration is the storage order."""
    if not isinstance(v, dict) or len(v) != len(keys):
        return False
    if not isinstance(v, collections.OrderedDict):
        return storage is None and _keys_equal(dict.keys(v), keys)
    return _keys_equal(collections.OrderedDict.keys(v), keys) and _keys_equal(dict.keys(v), keys if storage is None else storage)


def _memory_root(v: Any) -> Any:
    """The tensor whose memory ``v`` uses: its view base (``Tensor._base``), else itself."""
    base = getattr(v, "_base", None)
    return v if base is None else base


def _distinct(*vals: Any, memory: bool = False) -> bool:
    if memory:
        vals = tuple(_memory_root(v) for v in vals)
    return len({id(v) for v in vals}) == len(vals)


def _distinct_memory(*vals: Any) -> bool:
    return _distinct(*vals, memory=True)


# ---------------------------------------------------------------------------------------------
# Compilation into the C guard tree.


def compile_c_tree(guards: GuardSet, C: Any, frame_context: Callable[[Any], FrameValues] | None = None) -> Any:
    """Build a ``C.GuardTree`` whose check ids are the indices of ``guards``."""
    tree = C.GuardTree()
    # Shape relations run in C over the slots the tensor checks bind, when this build of the C
    # core has that and the relation compiled to a program; else it is a Python check.
    c_symbols = hasattr(tree, "check_symbols")
    for i, g in enumerate(guards):
        k = g.kind
        if k is GuardKind.SHAPE:
            rel = g.expected
            if c_symbols and rel.program is not None:
                tree.check_symbols(rel.program, i)
            elif frame_context is None:
                raise NotImplementedError("shape guards without the C core's symbol checks need a frame context")
            else:
                tree.frame_args().check_fn(_shape_check(rel, frame_context), i)
            continue
        if k is GuardKind.GLOBAL_STATE:
            tree.call(g.extra).check_eq(g.expected, i)
            continue
        if k is GuardKind.DISTINCT or k is GuardKind.SAME_OBJECT:
            srcs = tuple(g.extra) if k is GuardKind.DISTINCT else (g.source, g.extra)
            if all(isinstance(s, LocalSource) for s in srcs):
                slots = tuple(s.slot for s in srcs)  # type: ignore[union-attr]
                fn = _distinct_slots(slots, g.expected == "memory") if k is GuardKind.DISTINCT else _same_slots(slots)
                tree.frame_args().check_fn(fn, i)
                continue
            if frame_context is None:
                raise NotImplementedError("aliasing guards on non-argument sources need a frame context")
            tree.frame_args().check_fn(_generic_alias_check(g, frame_context), i)
            continue
        assert g.source is not None
        node = g.source.tree_node(tree)
        if k is GuardKind.TYPE_MATCH:
            node.check_type(g.expected, i)
        elif k is GuardKind.ID_MATCH:
            node.check_id(g.target(), i)
        elif k is GuardKind.EQUALS_MATCH:
            node.check_type(type(g.expected), i)
            if _needs_exact_float(g.expected):
                node.check_fn(functools.partial(_same_constant, b=g.expected), i)
            else:
                node.check_eq(g.expected, i)
        elif k is GuardKind.TENSOR_MATCH:
            t = g.expected
            if t.bind and c_symbols:
                node.check_tensor(t.type, t.dtype, t.device, t.requires_grad, t.sizes, t.strides, i, bind=t.bind)
            else:
                node.check_tensor(t.type, t.dtype, t.device, t.requires_grad, t.sizes, t.strides, i)
        elif k is GuardKind.DICT_KEYS:
            if g.extra is not None:  # an OrderedDict reordered when traced: both orders pinned
                node.check_odict_keys(tuple(g.expected), tuple(g.extra), i)
            else:  # an OrderedDict: iteration and storage order (preceded by a TYPE_MATCH, or not: _modules)
                node.check_dict_keys(tuple(g.expected), i)
        elif k is GuardKind.LEN_MATCH:
            node.check_len(int(g.expected), i)
        elif k is GuardKind.HASATTR:
            node.check_fn(_hasattr_check(g.extra, bool(g.expected)), i)
        elif k is GuardKind.DICT_CONTAINS:
            node.check_contains(g.extra, bool(g.expected), i)  # in C: one per parameter of a module
        else:
            raise AssertionError(k)
    return tree


def _shape_check(rel: ShapeRelation, frame_context: Callable[[Any], FrameValues]) -> Callable[[Any], bool]:
    def check(args: Any) -> bool:
        return rel.holds_on(frame_context(args))

    return check


def _hasattr_check(name: str, expected: bool) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return hasattr(v, name) is expected

    return check


def _generic_alias_check(g: Guard, frame_context: Callable[[Any], FrameValues]) -> Callable[[Any], bool]:
    """``g`` (DISTINCT or SAME_OBJECT over paths that are not plain arguments: a module's
    parameters and buffers) as one check reading all its values in one generated function
    (guards/source_reader.py): it runs on every call, over every input of a graph."""
    from .source_reader import compile_reader

    if g.kind is GuardKind.SAME_OBJECT:
        read = compile_reader((g.source, g.extra))

        def same(args: Any) -> bool:
            try:
                a, b = read(frame_context(args))
            except Exception:  # noqa: BLE001 - a path that no longer resolves fails the guard
                return False
            return a is b

        return same
    read = compile_reader(tuple(g.extra))
    memory = g.expected == "memory"

    def distinct(args: Any) -> bool:
        try:
            vals = read(frame_context(args))
        except Exception:  # noqa: BLE001 - a path that no longer resolves fails the guard
            return False
        return _distinct(*vals, memory=memory)

    return distinct


def _distinct_slots(slots: tuple[int, ...], memory: bool = False) -> Callable[[Any], bool]:
    if memory:
        n = len(slots)

        def distinct_memory(args: Any) -> bool:
            roots = set()
            for s in slots:
                v = args[s]
                base = getattr(v, "_base", None)
                roots.add(id(v if base is None else base))
            return len(roots) == n

        return distinct_memory

    def distinct(args: Any) -> bool:
        return len({id(args[s]) for s in slots}) == len(slots)

    return distinct


def _same_slots(slots: tuple[int, ...]) -> Callable[[Any], bool]:
    a, b = slots

    def same(args: Any) -> bool:
        return args[a] is args[b]

    return same
