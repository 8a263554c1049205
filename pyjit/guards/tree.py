"""Python-side sugar over ``pyjit._C.GuardTree`` (the compiled guard checker of the C core).

Owns: building accessor paths from plain step tuples (``node_at``), rendering a path as a
Python expression (``path_expr``), walking a tree's checks (``iter_checks``), pretty
printing a tree (``format_tree``) for the ``guards`` log channel and for debugging, and the
pure-Python reference evaluation (``evaluate``), shape guards included: tensor checks that
bind sizes/strides to symbol slots and the root's symbol checks (``check_symbols``, programs
of :mod:`pyjit.guards.shape_program`), printed in source form (``L['x'].size()[0] >= 2``).
Deduplication of shared accessor prefixes happens in C (asking a node twice for the same
child returns the same node), so ``node_at`` can be called once per guard without cost.
This module is torch-free and does not import ``pyjit._C``: it works on the tree objects.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterator, Sequence

from .shape_program import format_program, run_program

# A step of an accessor path: ("arg", slot), ("closure", i), ("global", name),
# ("builtin", name), ("frame_args",), ("call", fn), ("attr", name), ("item", key),
# ("len",), ("type",), ("dict_keys",), ("dict_values",) (a dict's keys/values as a list, in
# storage order: keys that are not constants are reached by position).
Step = tuple[Any, ...]

_ROOT_STEPS = {"arg", "closure", "global", "builtin", "frame_args", "call"}


def node_at(tree: Any, path: Sequence[Step]) -> Any:
    """The node of ``tree`` reached by ``path`` (created on first use, shared afterwards)."""
    if not path:
        raise ValueError("a guard path needs at least one step (e.g. ('arg', 0))")
    node = tree
    for i, step in enumerate(path):
        kind = step[0]
        if (kind in _ROOT_STEPS) != (i == 0):
            position = "the first step" if kind in _ROOT_STEPS else "after a root step such as ('arg', 0)"
            raise ValueError(f"guard path step {step!r} must be {position}")
        if kind == "arg":
            node = node.arg(step[1])
        elif kind == "closure":
            node = node.closure(step[1])
        elif kind == "global":
            node = node.global_(step[1])
        elif kind == "builtin":
            node = node.builtin(step[1])
        elif kind == "frame_args":
            node = node.frame_args()
        elif kind == "call":
            node = node.call(step[1])
        elif kind == "attr":
            node = node.attr(step[1])
        elif kind == "item":
            node = node.item(step[1])
        elif kind == "len":
            node = node.len()
        elif kind == "type":
            node = node.type()
        elif kind == "dict_keys":
            node = node.dict_keys()
        elif kind == "dict_values":
            node = node.dict_values()
        else:
            raise ValueError(f"unknown guard path step {step!r}")
    return node


def _step_expr(base: str, kind: str, key: Any, argnames: Sequence[str] | None) -> str:
    if kind == "arg":
        name = argnames[key] if argnames is not None and key < len(argnames) else f"<arg {key}>"
        return f"L[{name!r}]"
    if kind == "closure":
        return f"<closure {key}>"
    if kind == "global":
        return f"G[{key!r}]"
    if kind == "builtin":
        return f"B[{key!r}]"
    if kind == "frame_args":
        return "<frame args>"
    if kind == "call":
        return f"{getattr(key, '__qualname__', repr(key))}()"
    if kind == "attr":
        return f"{base}.{key}"
    if kind == "item":
        return f"{base}[{key!r}]"
    if kind == "len":
        return f"len({base})"
    if kind == "type":
        return f"type({base})"
    if kind in ("dict_keys", "dict_values"):
        return f"list({base}.{kind[5:]}())"
    return f"<{kind}>"


def path_expr(path: Sequence[Step], argnames: Sequence[str] | None = None) -> str:
    """``(('arg', 0), ('attr', 'weight'))`` -> ``L['self'].weight`` (with argnames)."""
    expr = ""
    for step in path:
        expr = _step_expr(expr, step[0], step[1] if len(step) > 1 else None, argnames)
    return expr


@dataclasses.dataclass(frozen=True)
class CheckInfo:
    """One check of a tree, as ``describe()`` reports it, with its accessor expression."""

    id: int
    kind: str
    payload: Any
    expr: str


_BIND_WHAT = ("size", "stride")


def _slot_names(d: dict[str, Any], argnames: Sequence[str] | None) -> dict[int, str]:
    """Slot -> ``L['x'].size()[0]`` / ``L['x'].stride()[1]``, from the tensor checks' bindings."""
    names: dict[int, str] = {}

    def walk(d: dict[str, Any], expr: str) -> None:
        for kind, _cid, payload in d["checks"]:
            if kind == "tensor":
                for what, dim, slot in payload.get("bind", ()):
                    names.setdefault(slot, f"{expr}.{_BIND_WHAT[what]}()[{dim}]")
        for child in d["children"]:
            walk(child, _step_expr(expr, child["kind"], child["key"], argnames))

    walk(d, "")
    return names


def iter_checks(tree: Any, argnames: Sequence[str] | None = None) -> Iterator[CheckInfo]:
    """Every check of ``tree`` in evaluation order (depth-first, insertion order), then the
    symbol checks, whose ``expr`` is the relation in source form and payload the program."""

    def walk(d: dict[str, Any], expr: str) -> Iterator[CheckInfo]:
        for kind, cid, payload in d["checks"]:
            yield CheckInfo(cid, kind, payload, expr)
        for child in d["children"]:
            yield from walk(child, _step_expr(expr, child["kind"], child["key"], argnames))

    d = tree.describe()
    yield from walk(d, "")
    symbols = d.get("symbols", ())
    if symbols:
        names = _slot_names(d, argnames)
        for kind, cid, program in symbols:
            yield CheckInfo(cid, kind, program, format_program(program, names))


def _format_check(info: CheckInfo) -> str:
    p = info.payload
    if info.kind == "type":
        return f"type is {getattr(p, '__qualname__', p)!s}" if p is not None else "type is <dead>"
    if info.kind == "id":
        return f"is {type(p).__qualname__}@{id(p):#x}" if p is not None else "is <object or None>"
    if info.kind == "eq":
        return f"== {p!r}"
    if info.kind == "tensor":
        text = (f"tensor {getattr(p['tensor_type'], '__qualname__', p['tensor_type'])} {p['dtype']} "
                f"{p['device']} requires_grad={p['requires_grad']} size={list(p['sizes'])} "
                f"stride={list(p['strides']) if p['strides'] is not None else None}")
        binds = p.get("bind", ())
        if binds:
            text += " bind " + ", ".join(f"{_BIND_WHAT[w]}()[{dim}]->s{slot}" for w, dim, slot in binds)
        return text
    if info.kind == "symbols":
        return info.expr
    if info.kind == "dict_keys":
        return f"keys == {list(p)!r}"
    if info.kind == "odict_keys":
        return f"keys == {list(p[0])!r}, storage == {list(p[1])!r}"
    if info.kind == "len":
        return f"len == {p}"
    if info.kind == "not_none":
        return "is not None"
    if info.kind == "contains":
        return f"{p[0]!r} {'in' if p[1] else 'not in'} value"
    if info.kind == "fn":
        return f"{getattr(p, '__qualname__', p)}(value)"
    return f"{info.kind} {p!r}"


def format_tree(tree: Any, argnames: Sequence[str] | None = None) -> str:
    """An indented rendering of the accessor tree with the checks at each node and their ids."""
    lines: list[str] = []

    def walk(d: dict[str, Any], expr: str, depth: int) -> None:
        pad = "  " * depth
        if d["kind"] != "root":
            lines.append(f"{pad}{expr}")
        for kind, cid, payload in d["checks"]:
            lines.append(f"{pad}  [{cid}] {_format_check(CheckInfo(cid, kind, payload, expr))}")
        for child in d["children"]:
            walk(child, _step_expr(expr, child["kind"], child["key"], argnames), depth + (d["kind"] != "root"))

    d = tree.describe()
    walk(d, "", 0)
    symbols = d.get("symbols", ())
    if symbols:
        lines.append("shape relations (after every check above):")
        names = _slot_names(d, argnames)
        for kind, cid, program in symbols:
            lines.append(f"  [{cid}] {format_program(program, names)}")
    return "\n".join(lines) if lines else "<empty guard tree: always passes>"


def failing_check(tree: Any, func: Any, args: tuple[Any, ...], argnames: Sequence[str] | None = None) -> CheckInfo | None:
    """The first check of ``tree`` that fails for this call (``None`` if all pass), with its
    accessor expression, for messages such as ``L['x']: tensor ... (check 3)``."""
    failed = tree.check(func, args)
    if failed < 0:
        return None
    for info in iter_checks(tree, argnames):
        if info.id == failed:
            return info
    return None


# --- reference evaluator ------------------------------------------------------------------
# A pure-Python statement of the C evaluation semantics (docs/internals.md), used as the
# oracle in tests and usable where the compiled check is not available. Not fast.

_MISSING = object()


def _same_constant(value: Any, expected: Any) -> bool:
    if value is expected:
        return True
    if type(value) is not type(expected):
        return False
    if type(value) is float:
        import struct

        return struct.pack("<d", value) == struct.pack("<d", expected)
    if type(value) is tuple:
        return len(value) == len(expected) and all(_same_constant(a, b) for a, b in zip(value, expected))
    if value is None or type(value) is bool:
        return False
    return bool(value == expected)


def _read(kind: str, key: Any, value: Any, func: Any, args: tuple[Any, ...]) -> Any:
    """The value an accessor reads, or _MISSING; may raise like the C accessor's Python calls."""
    if kind == "arg":
        return args[key] if key < len(args) else _MISSING
    if kind == "closure":
        cells = func.__closure__ or ()
        if key >= len(cells):
            return _MISSING
        try:
            return cells[key].cell_contents
        except ValueError:
            return _MISSING
    if kind in ("global", "builtin"):
        d = func.__globals__ if kind == "global" else func.__builtins__
        return dict.get(d, key, _MISSING) if isinstance(d, dict) else _MISSING
    if kind == "frame_args":
        return tuple([*args])  # a fresh tuple per check, as in C (tuple(t) would return t itself)
    if kind == "call":
        return key()
    if kind == "attr":
        return getattr(value, key)
    if kind == "item":
        if type(key) is int and type(value) in (list, tuple):
            i = key + len(value) if key < 0 else key
            return value[i] if 0 <= i < len(value) else _MISSING
        if type(value) is dict:
            return dict.get(value, key, _MISSING)
        return value[key]
    if kind == "len":
        return len(value)
    if kind == "type":
        return type(value)
    if kind in ("dict_keys", "dict_values"):
        if not isinstance(value, dict):
            raise TypeError("dict_keys/dict_values guard accessor on a non-dict")
        return list(dict.keys(value)) if kind == "dict_keys" else list(dict.values(value))
    raise ValueError(f"unknown accessor kind {kind!r}")


def _match_dims(values: Any, expected: Sequence[int | None], bound: Sequence[int]) -> dict[int, int] | None:
    """The C match of a metadata tuple: a tuple of ``len(expected)`` items whose static
    entries equal ``expected``; returns the values of the ``bound`` dims, or None. Only the
    entries it needs are read as ints (a non-int raises: the check fails, as in C)."""
    if not isinstance(values, tuple) or len(values) != len(expected):
        return None
    for e, v in zip(expected, values):
        if e is not None and v.__index__() != e:
            return None
    return {dim: values[dim].__index__() for dim in bound}


def _tensor(p: dict[str, Any], value: Any, slots: dict[int, int]) -> bool:
    """The C tensor match (same facts, same order), storing the bindings into ``slots``."""
    if type(value) is not p["tensor_type"] or value.dtype is not p["dtype"]:
        return False
    if (value.requires_grad is True) != bool(p["requires_grad"]):
        return False
    binds = p.get("bind", ())
    sizes = _match_dims(value.shape, p["sizes"], [dim for what, dim, _s in binds if what == 0])
    if sizes is None:
        return False
    stride_dims = [dim for what, dim, _s in binds if what == 1]
    strides: dict[int, int] | None = {}
    if p["strides"] is not None or stride_dims:
        expected = p["strides"] if p["strides"] is not None else (None,) * len(p["sizes"])
        strides = _match_dims(value.stride(), expected, stride_dims)
        if strides is None:
            return False
    if not (value.device == p["device"]):
        return False
    for what, dim, slot in binds:
        slots[slot] = sizes[dim] if what == 0 else strides[dim]
    return True


def _check(kind: str, payload: Any, value: Any, slots: dict[int, int]) -> bool:
    if kind == "tensor":
        return _tensor(payload, value, slots)
    if kind == "type":
        return payload is not None and type(value) is payload
    if kind == "id":
        return value is payload  # a dead weak target describes as None; None is never weak
    if kind == "eq":
        return _same_constant(value, payload)
    if kind == "not_none":
        return value is not None
    if kind == "len":
        return len(value) == payload
    if kind == "contains":
        return (payload[0] in value) is payload[1]
    if kind == "dict_keys":
        if not isinstance(value, dict) or len(value) != len(payload):
            return False
        if isinstance(value, collections.OrderedDict):  # its own list (iteration) and the storage
            return _keys_match(collections.OrderedDict.keys(value), payload) and _keys_match(dict.keys(value), payload)
        return _keys_match(dict.keys(value), payload)
    if kind == "odict_keys":
        keys, storage = payload
        if not isinstance(value, collections.OrderedDict) or len(value) != len(keys):
            return False
        return _keys_match(collections.OrderedDict.keys(value), keys) and _keys_match(dict.keys(value), storage)
    if kind == "fn":
        return bool(payload(value))
    raise NotImplementedError(f"reference evaluation of {kind!r} checks")


def _keys_match(keys: Any, expected: Sequence[Any]) -> bool:
    keys = list(keys)
    return len(keys) == len(expected) and all(_same_constant(k, e) for k, e in zip(keys, expected))


def evaluate(tree: Any, func: Any, args: tuple[Any, ...]) -> int:
    """What ``tree.check(func, args)`` returns, computed in Python from ``tree.describe()``:
    the depth-first walk, then (if it passed) the symbol checks over the slots bound by it."""
    slots: dict[int, int] = {}

    def first_id(d: dict[str, Any]) -> int:
        if d["checks"]:
            return int(d["checks"][0][1])
        for child in d["children"]:
            cid = first_id(child)
            if cid >= 0:
                return cid
        return -1

    def walk(d: dict[str, Any], value: Any) -> int:
        for kind, cid, payload in d["checks"]:
            try:
                ok = _check(kind, payload, value, slots)
            except Exception:
                ok = False
            if not ok:
                return int(cid)
        for child in d["children"]:
            try:
                child_value = _read(child["kind"], child["key"], value, func, args)
            except Exception:
                child_value = _MISSING
            if child_value is _MISSING:
                cid = first_id(child)
                if cid >= 0:
                    return cid
                continue
            r = walk(child, child_value)
            if r >= 0:
                return r
        return -1

    d = tree.describe()
    r = walk(d, None)
    if r >= 0:
        return r
    for _kind, cid, program in d.get("symbols", ()):
        if not run_program(program, slots):
            return int(cid)
    return -1
