"""Guard sets to and from a versioned, JSON-shaped form (for the warm start's frame records).

Owns only the translation; the meaning of every guard stays in :mod:`pyjit.guards.guards`.
:func:`dump_guards` turns a :class:`~pyjit.guards.guards.GuardSet` into a list of dicts
``{"kind", "source", "expected", "extra"}`` (values through
:func:`pyjit.runtime.frame_store.encode_value`); :func:`load_guards` rebuilds an equivalent
guard set in another process. What cannot cross processes raises
:class:`~pyjit.runtime.frame_store.NotSerializable` on the way out (the entry gets no record)
and :class:`~pyjit.runtime.frame_store.RebuildError` on the way in (the entry re-traces):

- a guard kind this module does not know (new kinds are *not serialisable* until they are
  added here, so a new kind can never be rebuilt with the wrong meaning);
- a source class it does not know;
- an ``ID_MATCH`` on an object with no importable name (an identity of the old process).

Dynamic shapes (format 2): a ``TENSOR_MATCH`` keeps its ``None`` (symbolic) sizes/strides and
its slot bindings ``bind`` (``(what, dim, slot)`` ints); a ``SHAPE`` guard is recorded as its
:class:`~pyjit.guards.shape_relation.ShapeRelation` parts -- text, slots, slot origins (sources
through :func:`dump_source`), the Python text of its check and its C program. The Python text is
re-executed on load, so it must be a plain expression over ``v[k]``
(:func:`~pyjit.guards.shape_relation.check_python_source`, checked on the way out and in); the
program is validated like the C core does. Records of format 1 are refused (:class:`RebuildError`).

Two rules keep a rebuilt guard as strong as the original:

- a function or user class pinned by identity and re-resolved by name also records a
  fingerprint of its code (``frame_store.frame_key`` of each function body), so an edited
  helper or ``forward`` makes the rebuild fail instead of installing code traced from the old
  body;
- an ``ID_MATCH`` on an ``nn.Module`` instance is recorded as "an instance of class C" and
  re-bound, when the entry is installed, to the object the installing call holds at that source
  (its class checked); every fact the trace read off the module (attributes by value,
  parameters and children by path, hooks, ``__dict__`` shadowing) has its own guard. The same
  holds for the class ``pyjit.jit(module)`` derives (checked to derive from the recorded class)
  and for ``fn.__code__`` identities (re-bound to a code object of the same content, by
  ``frame_key``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import sys
import threading
import types
from typing import Any

from ..runtime.frame_store import (NotSerializable, RebuildError, decode_value, encode_value,
                                   frame_key)
from .guards import Guard, GuardKind, GuardSet, TensorSpec
from .shape_relation import ShapeRelation, SlotOrigin
from .source import (AttrSource, ClosureSource, FrameValues, FuncAttrSource, GlobalSource, ItemSource,
                     LocalSource, ModuleDictSource, ModuleGlobalSource, Source)

# 2: TENSOR_MATCH with symbolic (None) sizes/strides and slot bindings, SHAPE guards. A reader
# refuses any other format (format 1 had neither; an older reader would misread format 2's).
GUARD_FORMAT = 2

# Kinds this module knows how to carry (by value: the enum's string). Anything else is refused.
_KNOWN_KINDS = {k.value: k for k in (
    GuardKind.TYPE_MATCH, GuardKind.ID_MATCH, GuardKind.EQUALS_MATCH, GuardKind.TENSOR_MATCH,
    GuardKind.DICT_KEYS, GuardKind.LEN_MATCH, GuardKind.GLOBAL_STATE, GuardKind.SAME_OBJECT,
    GuardKind.DISTINCT, GuardKind.HASATTR, GuardKind.DICT_CONTAINS, GuardKind.SHAPE)}

_TENSOR_FIELDS = ("type", "dtype", "device", "requires_grad", "sizes", "strides", "bind")
_SLOT_WHAT = ("size", "stride", "scalar")
_MAX_SLOTS = 1024  # as shape_program.MAX_SLOTS (the C core's limit)

_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType,
                types.GetSetDescriptorType, types.MemberDescriptorType)

# Objects with no importable name of their own that generated code and graphs use.
_WELL_KNOWN: dict[str, Any] = {
    "NoneType": type(None), "FunctionType": types.FunctionType, "CodeType": types.CodeType,
    "sys.modules": sys.modules, "builtins.dict": dict,
}


def encode(value: Any) -> Any:
    """:func:`encode_value` plus a few well-known unnamed objects and code fingerprints."""
    for name, known in _WELL_KNOWN.items():
        if value is known:
            return {"known": name}
    if isinstance(value, type) and "_pyjit_original_class" in vars(value):
        # the class pyjit.jit(module) derives for one module object: rebound at install time
        return {"jit_class": encode(vars(value)["_pyjit_original_class"])}
    if type(value) in _DESCRIPTORS and isinstance(getattr(value, "__objclass__", None), type):
        # an unbound C method (torch.Tensor.add): by its class and name
        return {"descr": [encode(value.__objclass__), value.__name__]}
    encoded = encode_value(value)
    if isinstance(encoded, dict) and "ref" in encoded:
        fingerprint = code_fingerprint(value)
        if fingerprint is not None:
            return {"ref": encoded["ref"], "code": fingerprint}
    return encoded


def decode(data: Any) -> Any:
    """Inverse of :func:`encode`; :class:`RebuildError` if a name no longer resolves or the code
    behind a name changed."""
    if isinstance(data, dict) and "known" in data:
        try:
            return _WELL_KNOWN[data["known"]]
        except KeyError:
            raise RebuildError(f"unknown well-known object {data['known']!r}") from None
    if isinstance(data, dict) and "jit_class" in data:
        raise RebuildError("a pyjit.jit module class is only rebuilt from the installing call")
    if isinstance(data, dict) and "descr" in data:
        owner, name = data["descr"]
        try:
            return getattr(decode(owner), name)
        except AttributeError as e:
            raise RebuildError(f"method {name!r} no longer exists ({e})") from None
    if isinstance(data, dict) and "code" in data and "ref" in data:
        value = decode_value({"ref": data["ref"]})
        now = code_fingerprint(value)
        if now != data["code"]:
            raise RebuildError(f"the code of {'.'.join(x for x in data['ref'] if x)} changed since it was traced")
        return value
    return decode_value(data)


def _is_user_code(code: types.CodeType) -> bool:
    from ..frame.policy import is_library_code

    return not is_library_code(code)


# Fingerprints computed during one dump or load of a guard set: the guards of a network name each
# of its module classes many times (one type check per instance), and a class's fingerprint walks
# every member of its MRO, nn.Module's included. Per call, not per process: classes may change.
_fingerprint_memo = threading.local()


@contextlib.contextmanager
def _memoized_fingerprints() -> Any:
    outer = getattr(_fingerprint_memo, "table", None)
    if outer is None:
        _fingerprint_memo.table = {}
    try:
        yield
    finally:
        if outer is None:
            _fingerprint_memo.table = None


def code_fingerprint(value: Any) -> str | None:
    """A hash of the user code behind a function or class (None for library or code-less values).

    A class's fingerprint covers the functions, properties, static and class methods defined in
    the user classes of its MRO (what an inlined method call runs)."""
    table = getattr(_fingerprint_memo, "table", None)
    if table is None:
        return _code_fingerprint(value)
    hit = table.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    fingerprint = _code_fingerprint(value)
    table[id(value)] = (value, fingerprint)
    return fingerprint


def _code_fingerprint(value: Any) -> str | None:
    fn = getattr(value, "__func__", value)
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        return frame_key(code) if _is_user_code(code) else None
    if not isinstance(value, type):
        return None
    parts: list[str] = []
    for cls in value.__mro__:
        for name, member in sorted(vars(cls).items(), key=lambda kv: kv[0]):
            for part in _member_functions(member):
                c = part.__code__
                if _is_user_code(c):
                    parts.append(f"{cls.__qualname__}.{name}:{frame_key(c)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest() if parts else None


def _member_functions(member: Any) -> list[types.FunctionType]:
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if isinstance(f, types.FunctionType)]
    return [member] if isinstance(member, types.FunctionType) else []


# ----------------------------------------------------------------------------- sources

def dump_source(source: Source | None) -> Any:
    if source is None:
        return None
    t = type(source)
    if t is LocalSource:
        return ["L", source.local_name, source.slot]
    if t is GlobalSource:
        return ["G", source.global_name, source.builtin]
    if t is ClosureSource:
        return ["C", source.var, source.index]
    if t is AttrSource or t is FuncAttrSource:
        return ["A" if t is AttrSource else "FA", dump_source(source.base), source.attr]
    if t is ItemSource:
        return ["I", dump_source(source.base), encode(source.key)]
    if t is ModuleDictSource:
        return ["MD", dump_source(source.base), source.dict_name, source.key]
    if t is ModuleGlobalSource:
        return ["MG", source.module, source.global_name]
    raise NotSerializable(f"source kind {t.__name__} ({source.name()}) has no serialised form")


def load_source(data: Any) -> Source | None:
    if data is None:
        return None
    try:
        tag = data[0]
        if tag == "L":
            return LocalSource(str(data[1]), int(data[2]))
        if tag == "G":
            return GlobalSource(str(data[1]), bool(data[2]))
        if tag == "C":
            return ClosureSource(str(data[1]), int(data[2]))
        if tag in ("A", "FA"):
            base = load_source(data[1])
            assert base is not None
            return (AttrSource if tag == "A" else FuncAttrSource)(base, str(data[2]))
        if tag == "I":
            base = load_source(data[1])
            assert base is not None
            return ItemSource(base, decode(data[2]))
        if tag == "MD":
            base = load_source(data[1])
            assert base is not None
            return ModuleDictSource(base, str(data[2]), str(data[3]))
        if tag == "MG":
            return ModuleGlobalSource(str(data[1]), str(data[2]))
    except RebuildError:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed record is a rebuild failure, never a crash
        raise RebuildError(f"malformed source {data!r:.60}: {type(e).__name__}: {e}") from e
    raise RebuildError(f"unknown source tag {data!r:.60}")


# ----------------------------------------------------------------------------- guards

def _is_module_instance(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def dump_guard(g: Guard) -> dict[str, Any]:
    kind = _KNOWN_KINDS.get(g.kind.value) if isinstance(g.kind, GuardKind) else None
    if kind is None or kind is not g.kind:
        raise NotSerializable(f"guard kind {g.kind!r} is not known to the warm start's guard format")
    k = g.kind
    source = dump_source(g.source)
    expected: Any = None
    extra: Any = None
    if k is GuardKind.ID_MATCH:
        target = g.target()
        if target is None and g.expected is not None:
            raise NotSerializable(f"{g.describe()}: the object it was traced with no longer exists")
        if _is_module_instance(target):
            expected = {"module_instance": encode(type(target))}
        elif isinstance(target, types.CodeType):
            # ``fn.__code__ is <code>`` (an inlined function's body): by content
            expected = {"code_object": frame_key(target)}
        else:
            try:
                expected = encode(target)
            except NotSerializable as e:
                raise NotSerializable(f"{g.describe()} pins an object of this process ({e})") from None
    elif k is GuardKind.TENSOR_MATCH:
        t: TensorSpec = g.expected
        for f in dataclasses.fields(t):
            # a field added after this format (dynamic shapes' slot bindings) must be at its default
            if f.name not in _TENSOR_FIELDS and getattr(t, f.name) != f.default:
                raise NotSerializable(f"{g.describe()}: tensor guard field {f.name!r} is not serialised")
        if not all(s is None or type(s) is int for s in (*t.sizes, *t.strides)):
            raise NotSerializable(f"{g.describe()}: sizes other than ints and None are not serialised")
        expected = {"type": encode(t.type), "dtype": encode(t.dtype), "device": encode(t.device),
                    "requires_grad": bool(t.requires_grad), "sizes": list(t.sizes), "strides": list(t.strides),
                    "bind": [[int(w), int(d), int(k)] for w, d, k in t.bind]}
    elif k is GuardKind.SHAPE:
        expected, extra = _dump_relation(g.expected), str(g.extra)
    elif k is GuardKind.GLOBAL_STATE:
        expected, extra = encode(g.expected), encode(g.extra)
    elif k is GuardKind.SAME_OBJECT:
        extra = dump_source(g.extra)
    elif k is GuardKind.DISTINCT:
        expected, extra = g.expected, [dump_source(s) for s in g.extra]
    elif k is GuardKind.DICT_KEYS:
        expected = encode(tuple(g.expected))
        extra = None if g.extra is None else encode(tuple(g.extra))  # an OrderedDict's storage order
    else:  # TYPE_MATCH, EQUALS_MATCH, LEN_MATCH, HASATTR, DICT_CONTAINS: plain values
        expected, extra = encode(g.expected), encode(g.extra)
    return {"kind": k.value, "source": source, "expected": expected, "extra": extra}


def dump_guards(guards: GuardSet) -> list[dict[str, Any]]:
    """The guard set as data (:class:`NotSerializable` if any guard cannot cross processes)."""
    with _memoized_fingerprints():
        return [{"format": GUARD_FORMAT}] + [dump_guard(g) for g in guards]


def load_guards(data: list[dict[str, Any]], frame: FrameValues | None) -> GuardSet:
    """Rebuild a guard set; ``frame`` (the installing call's values) re-binds module identities."""
    with _memoized_fingerprints():
        return _load_guards(data, frame)


def _load_guards(data: list[dict[str, Any]], frame: FrameValues | None) -> GuardSet:
    if not data or not isinstance(data[0], dict) or data[0].get("format") != GUARD_FORMAT:
        raise RebuildError(f"guard format {data[0] if data else None!r:.40}, this pyjit reads {GUARD_FORMAT}")
    out = GuardSet()
    for item in data[1:]:
        kind = _KNOWN_KINDS.get(item.get("kind")) if isinstance(item, dict) else None
        if kind is None:
            raise RebuildError(f"unknown guard kind in record: {item!r:.60}")
        source = load_source(item["source"])
        expected, extra = item["expected"], item["extra"]
        if kind in (GuardKind.ID_MATCH, GuardKind.TYPE_MATCH) and isinstance(expected, dict) and "jit_class" in expected:
            value = _value_at(source, frame)
            expected = _check_class(value if kind is GuardKind.ID_MATCH else type(value), expected, source)
        elif kind is GuardKind.ID_MATCH:
            if isinstance(expected, dict) and "code_object" in expected:
                value = _value_at(source, frame)
                if not isinstance(value, types.CodeType) or frame_key(value) != expected["code_object"]:
                    raise RebuildError(f"the code at {source.name() if source else '?'} changed since it was traced")
                expected = value
            elif isinstance(expected, dict) and "module_instance" in expected:
                value = _value_at(source, frame)
                _check_class(type(value), expected["module_instance"], source)
                expected = value
            else:
                expected = decode(expected)
        elif kind is GuardKind.TENSOR_MATCH:
            expected = _load_tensor_spec(expected, source)
        elif kind is GuardKind.SHAPE:
            expected = _load_relation(expected)
            extra = expected.text
        elif kind is GuardKind.SAME_OBJECT:
            extra = load_source(extra)
        elif kind is GuardKind.DISTINCT:
            extra = tuple(load_source(s) for s in extra)
        else:
            expected, extra = decode(expected), decode(extra)
        if kind is GuardKind.DICT_KEYS and isinstance(expected, list):
            expected = tuple(expected)
        if kind is GuardKind.DICT_KEYS and isinstance(extra, list):
            extra = tuple(extra)
        out.add(kind, source, expected, extra)
    return out


def _dump_relation(rel: ShapeRelation) -> dict[str, Any]:
    from .shape_relation import check_python_source

    try:
        check_python_source(rel.python_source, len(rel.origins))
    except ValueError as e:
        raise NotSerializable(f"shape guard {rel.text}: its Python check cannot be rebuilt ({e})") from None
    return {"text": rel.text, "slots": [int(k) for k in rel.slots],
            "origins": [[dump_source(o.source), o.what, o.dim] for o in rel.origins],
            "python": rel.python_source, "program": None if rel.program is None else [int(x) for x in rel.program]}


def _load_relation(data: Any) -> ShapeRelation:
    """A recorded SHAPE guard's relation; :class:`RebuildError` for anything malformed."""
    try:
        origins = []
        for src, what, dim in data["origins"]:
            source = load_source(src)
            if source is None or what not in _SLOT_WHAT or (dim is None) != (what == "scalar") \
                    or not (dim is None or (type(dim) is int and 0 <= dim)):
                raise ValueError(f"bad slot origin {[src, what, dim]!r:.60}")
            origins.append(SlotOrigin(source, what, dim))
        slots = [k for k in data["slots"] if type(k) is int]
        if len(slots) != len(data["slots"]) or not isinstance(data["text"], str):
            raise ValueError("slots must be ints and the text a string")
        program = data["program"]
        return ShapeRelation.rebuild(data["text"], slots, origins, data["python"],
                                     None if program is None else tuple(program))
    except RebuildError:
        raise
    except Exception as e:  # noqa: BLE001 - malformed or refused: the entry re-traces
        raise RebuildError(f"shape guard record cannot be rebuilt ({type(e).__name__}: {e})") from None


def _load_tensor_spec(data: Any, source: Source | None) -> TensorSpec:
    """A recorded TENSOR_MATCH; symbolic dims are None and each is bound to a slot exactly once."""
    try:
        sizes = tuple(None if s is None else _int(s) for s in data["sizes"])
        strides = tuple(None if s is None else _int(s) for s in data["strides"])
        bind = tuple((_int(w), _int(d), _int(k)) for w, d, k in data.get("bind", ()))
        if len(sizes) != len(strides):
            raise ValueError("sizes and strides differ in length")
        for w, d, k in bind:
            dims = sizes if w == 0 else strides
            if w not in (0, 1) or not 0 <= d < len(dims) or dims[d] is not None or not 0 <= k < _MAX_SLOTS:
                raise ValueError(f"binding {(w, d, k)} does not name a symbolic dimension")
        if len({(w, d) for w, d, _ in bind}) != len(bind):
            raise ValueError("a dimension is bound twice")
        if sum(s is None for s in (*sizes, *strides)) != len(bind):
            raise ValueError("a symbolic dimension is bound to no slot")  # as the tracer writes them
    except Exception as e:  # noqa: BLE001 - malformed: the entry re-traces
        where = source.name() if source is not None else "?"
        raise RebuildError(f"tensor guard on {where} is malformed ({type(e).__name__}: {e})") from None
    return TensorSpec(decode(data["type"]), decode(data["dtype"]), decode(data["device"]),
                      bool(data["requires_grad"]), sizes, strides, bind)


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ValueError(f"{v!r:.20} is not an int")
    return v


def _value_at(source: Source | None, frame: FrameValues | None) -> Any:
    """The installing call's value at ``source`` (what identity guards are re-bound to)."""
    if source is None or frame is None:
        raise RebuildError("an identity guard on a module needs the installing call's frame")
    try:
        return source.get(frame)
    except Exception as e:  # noqa: BLE001 - the path does not resolve on this call
        raise RebuildError(f"{source.name()} cannot be read on this call ({type(e).__name__}: {e})") from e


def _check_class(actual: Any, recorded: Any, source: Source | None) -> Any:
    """``actual`` (a class) is the recorded class, or pyjit.jit's class derived from it."""
    if isinstance(recorded, dict) and "jit_class" in recorded:
        want = decode(recorded["jit_class"])
        ok = isinstance(actual, type) and vars(actual).get("_pyjit_original_class") is want
    else:
        want = decode(recorded)
        ok = actual is want
    if not ok:
        name = source.name() if source is not None else "?"
        raise RebuildError(f"{name} is a {getattr(actual, '__qualname__', actual)}, the record expects "
                           f"{getattr(want, '__qualname__', want)}")
    return actual


def first_global_names(guards: GuardSet) -> dict[str, Any]:
    """Globals pinned by identity (``ID_MATCH`` directly on ``G['name']``): name -> value."""
    out: dict[str, Any] = {}
    for g in guards:
        if g.kind is GuardKind.ID_MATCH and type(g.source) is GlobalSource and not g.source.builtin:
            out[g.source.global_name] = g.target()
    return out

