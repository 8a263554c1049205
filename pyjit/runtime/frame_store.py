"""Per-frame records for a warm start that skips tracing: their format, key, storage and checks.

A *frame record* holds what a cache hit in a new process needs for one user code object: for
each compiled entry the serialised guard set, the replacement code object (its unpicklable
constants -- the compiled graph, guarded objects -- replaced by *placeholders* that name how to
rebuild them), the graph artefact keys and the resume functions of graph breaks; plus the
identities of the globals the frame read, to be re-resolved by name in the new process.

This module owns the storage half only (the frontend, ``pyjit/frame``, builds and installs
records). It provides:

- :func:`frame_key_fields` / :func:`frame_key`: the key of a code object -- hashes of
  ``co_code``, the constants (nested code objects recursively), the names, the file name and
  first line; the pyjit/torch/Triton/Python versions are the store's version directory;
- :func:`encode_value` / :func:`decode_value`: a tagged, JSON-shaped encoding of guard values
  (constants, dtypes, devices, and modules/classes/functions by qualified name); an object with
  no name (an identity from the old process) raises :class:`NotSerializable`;
- :func:`strip_constants` / :func:`restore_constants`: code objects <-> marshal-safe code with
  placeholders;
- :func:`global_identity` / :func:`globals_mismatch`: how a read global is recorded and checked;
- :func:`save` / :func:`load`: the record in the ``frames`` namespace of
  :mod:`pyjit.runtime.cache` (trust checks, atomic write, sha256 on load) as
  ``MAGIC + marshal((FORMAT, record dict))``. A record of another format, a wrong shape or
  undecodable bytes is logged, removed and reported as a miss. Every load logs a hit or a miss
  on the ``cache`` channel; a miss next to an earlier record of the same function names the key
  field that differed (code, constants, names, first line, a version).

Marshal (not pickle) is used: loading it runs no code; code objects in it are only run after the
frontend's guard checks, and only from entries that passed :mod:`trust`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import marshal
import sys
import types
from typing import Any, Callable

from ..logs import get_logger
from . import cache

log = get_logger("cache")

NAMESPACE = "frames"
FORMAT = 2
MAGIC = b"PYJITFR\n"
_PLACEHOLDER_TAG = "\x00pyjit-frame-placeholder\x00"


class NotSerializable(ValueError):
    """A value (guard expectation, code constant) that cannot be rebuilt in another process."""


class RebuildError(ValueError):
    """A recorded value that cannot be re-resolved in this process (the entry must re-trace)."""


@dataclasses.dataclass
class FrameEntry:
    """One compiled entry of a frame: what to install and what to check."""

    guards: list[dict[str, Any]]          # {"kind", "source", "expected", "extra"}: encoded values
    code: types.CodeType                  # replacement code (placeholders in its constants)
    placeholders: list[dict[str, Any]]    # what placeholder i stands for (e.g. {"graph": key})
    graph_keys: list[str] = dataclasses.field(default_factory=list)
    resumes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # {"name", "code", "placeholders", "native"}
    unrebuildable: str | None = None      # why this entry must re-trace in a new process
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # JSON-shaped facts for the installer


@dataclasses.dataclass
class FrameRecord:
    """Everything stored for one code object."""

    qualname: str
    filename: str
    firstlineno: int
    globals: dict[str, dict[str, Any]]     # name -> global_identity(value)
    entries: list[FrameEntry]


# ----------------------------------------------------------------------------- keys

def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _const_text(value: Any) -> str:
    """A process-independent text of a code constant (nested code objects by content)."""
    if isinstance(value, types.CodeType):
        return "code(" + _code_text(value) + ")"
    if isinstance(value, (tuple, list)):
        return type(value).__name__ + "(" + ",".join(_const_text(v) for v in value) + ")"
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(_const_text(v) for v in value)) + ")"
    if isinstance(value, float):
        return "float(" + value.hex() + ")"
    if isinstance(value, (str, bytes, int, bool, complex, type(None), type(Ellipsis))):
        return type(value).__name__ + "(" + repr(value) + ")"
    raise NotSerializable(f"code constant of type {type(value).__name__} has no stable text")


def _code_text(code: types.CodeType) -> str:
    return "|".join([code.co_code.hex(), _const_text(code.co_consts), repr(code.co_names),
                     repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars),
                     repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags))])


def frame_key_fields(code: types.CodeType) -> dict[str, str]:
    """The named parts of a code object's key (each a hash, or the value where it is short)."""
    return {
        "code": _sha(code.co_code),
        "constants": _sha(_const_text(code.co_consts)),
        "names": _sha(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                            code.co_argcount, code.co_kwonlyargcount, code.co_flags))),
        "nested code": _sha("".join(_code_text(c) for c in code.co_consts if isinstance(c, types.CodeType))),
        "file": code.co_filename,
        "first line": str(code.co_firstlineno),
        "function": code.co_qualname,
    }


def frame_key(code: types.CodeType) -> str:
    return _sha(json.dumps(frame_key_fields(code), sort_keys=True))


def _family(code: types.CodeType) -> str:
    return f"{code.co_filename}:{code.co_qualname}"


# ----------------------------------------------------------------------------- values

def _qualified(obj: Any) -> tuple[str, str] | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__, ""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return None
    # Builtins of C types (torch.relu's qualname is _VariableFunctionsClass.relu) by plain name too.
    for name in (getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)):
        if not isinstance(name, str) or "<locals>" in name or "<lambda>" in name:
            continue
        try:
            if _resolve(module, name) is obj:
                return module, name
        except RebuildError:
            pass
    return None


def _resolve(module: str, qualname: str) -> Any:
    try:
        value: Any = importlib.import_module(module) if module not in sys.modules else sys.modules[module]
        for part in qualname.split(".") if qualname else []:
            value = getattr(value, part)
    except Exception as e:  # noqa: BLE001 - any failure means "cannot rebuild"
        raise RebuildError(f"{module}.{qualname} cannot be resolved ({type(e).__name__}: {e})") from e
    return value


def encode_value(value: Any) -> Any:
    """JSON-shaped, tagged encoding of a guard value; :class:`NotSerializable` when impossible."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [encode_value(v) for v in value]}
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": str(value)}
    named = _qualified(value)
    if named is not None:
        return {"ref": list(named)}
    raise NotSerializable(f"{type(value).__name__} object {value!r:.60} has no name to rebuild it by")


def decode_value(data: Any) -> Any:
    """Inverse of :func:`encode_value`; :class:`RebuildError` when a name no longer resolves."""
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise RebuildError(f"malformed encoded value {data!r:.60}")
    (tag, payload), = data.items()
    if tag == "float":
        return float.fromhex(payload)
    if tag in ("tuple", "list"):
        items = [decode_value(v) for v in payload]
        return tuple(items) if tag == "tuple" else items
    if tag in ("dtype", "device"):
        import torch
        return getattr(torch, payload) if tag == "dtype" else torch.device(payload)
    if tag == "ref":
        return _resolve(payload[0], payload[1])
    raise RebuildError(f"unknown value tag {tag!r}")


def global_identity(value: Any) -> dict[str, Any]:
    """How a global the frame read is recorded: its name for modules/classes/functions (plus the
    code hash of functions), its value for constants; ``{"unrebuildable": why}`` otherwise."""
    try:
        encoded = encode_value(value)
    except NotSerializable as e:
        return {"unrebuildable": str(e)}
    identity: dict[str, Any] = {"value": encoded}
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        identity["code"] = frame_key(code)
    return identity


def globals_mismatch(recorded: dict[str, dict[str, Any]], f_globals: dict[str, Any],
                     builtins: dict[str, Any] | None = None) -> str | None:
    """Why the recorded globals do not hold in ``f_globals`` (None: all re-resolved and equal)."""
    builtins = builtins if builtins is not None else vars(__import__("builtins"))
    for name, identity in recorded.items():
        if "unrebuildable" in identity:
            return f"global {name!r} cannot be rebuilt: {identity['unrebuildable']}"
        if name in f_globals:
            value = f_globals[name]
        elif name in builtins:
            value = builtins[name]
        else:
            return f"global {name!r} is no longer defined"
        now = global_identity(value)
        if now != identity:
            return f"global {name!r} changed ({_short(identity)} -> {_short(now)})"
    return None


def _short(identity: dict[str, Any]) -> str:
    return json.dumps(identity.get("value", identity), sort_keys=True)[:60]


# ----------------------------------------------------------------------------- code objects

def strip_constants(code: types.CodeType, placeholder_for: Callable[[Any], dict[str, Any] | None]
                    ) -> tuple[types.CodeType, list[dict[str, Any]]]:
    """Replace constants that marshal cannot store (recursively) by placeholders.

    ``placeholder_for(value)`` describes how to rebuild such a constant (e.g. ``{"graph": key}``)
    or returns None, which raises :class:`NotSerializable`.
    """
    placeholders: list[dict[str, Any]] = []

    def strip(c: types.CodeType) -> types.CodeType:
        consts = []
        for value in c.co_consts:
            if isinstance(value, types.CodeType):
                consts.append(strip(value))
                continue
            try:
                marshal.dumps(value)
                consts.append(value)
                continue
            except ValueError:
                pass
            described = placeholder_for(value)
            if described is None:
                raise NotSerializable(f"constant {type(value).__name__} of {c.co_qualname} has no placeholder")
            placeholders.append(described)
            consts.append((_PLACEHOLDER_TAG, len(placeholders) - 1))
        return c.replace(co_consts=tuple(consts))

    return strip(code), placeholders


def restore_constants(code: types.CodeType, placeholders: list[dict[str, Any]],
                      resolve: Callable[[dict[str, Any]], Any]) -> types.CodeType:
    """Inverse of :func:`strip_constants`; ``resolve`` may raise :class:`RebuildError`."""
    values = [resolve(p) for p in placeholders]

    def restore(c: types.CodeType) -> types.CodeType:
        consts = []
        for value in c.co_consts:
            if isinstance(value, types.CodeType):
                value = restore(value)
            elif type(value) is tuple and len(value) == 2 and value[0] == _PLACEHOLDER_TAG:
                value = values[value[1]]
            consts.append(value)
        return c.replace(co_consts=tuple(consts))

    return restore(code)


# ----------------------------------------------------------------------------- storage

def _to_payload(record: FrameRecord) -> bytes:
    entries = [{"code": e.code, "graph_keys": list(e.graph_keys), "unrebuildable": e.unrebuildable,
                "guards": json.dumps(e.guards), "placeholders": json.dumps(e.placeholders), "meta": json.dumps(e.meta),
                "resumes": [{"name": r["name"], "code": r["code"], "placeholders": json.dumps(r.get("placeholders", [])),
                             "native": bool(r.get("native", False))} for r in e.resumes]} for e in record.entries]
    body = {"qualname": record.qualname, "filename": record.filename, "firstlineno": record.firstlineno,
            "globals": json.dumps(record.globals), "entries": entries}
    return MAGIC + marshal.dumps((FORMAT, body))


def _from_payload(data: bytes) -> FrameRecord:
    if not data.startswith(MAGIC):
        raise ValueError("not a frame record (bad magic)")
    fmt, body = marshal.loads(data[len(MAGIC):])
    if fmt != FORMAT:
        raise ValueError(f"frame record format {fmt}, this pyjit reads {FORMAT}")
    entries = []
    for e in body["entries"]:
        resumes = [{"name": str(r["name"]), "code": _check_code(r["code"]),
                    "placeholders": json.loads(r["placeholders"]), "native": bool(r["native"])} for r in e["resumes"]]
        entries.append(FrameEntry(guards=json.loads(e["guards"]), code=_check_code(e["code"]),
                                  placeholders=json.loads(e["placeholders"]), graph_keys=list(e["graph_keys"]),
                                  resumes=resumes, unrebuildable=e["unrebuildable"], meta=json.loads(e["meta"])))
    record = FrameRecord(qualname=str(body["qualname"]), filename=str(body["filename"]),
                         firstlineno=int(body["firstlineno"]), globals=json.loads(body["globals"]), entries=entries)
    if not isinstance(record.globals, dict) or not all(isinstance(e.guards, list) and isinstance(e.placeholders, list)
                                                       and isinstance(e.meta, dict) for e in entries):
        raise ValueError("frame record has the wrong shape")
    return record


def _check_code(value: Any) -> types.CodeType:
    if not isinstance(value, types.CodeType):
        raise ValueError(f"expected a code object, found {type(value).__name__}")
    return value


def save(code: types.CodeType, record: FrameRecord) -> str | None:
    """Store (replace) the record of ``code``; the stored path, or None without a store.

    Raises :class:`NotSerializable` when the record holds a value marshal cannot store (strip
    such constants with :func:`strip_constants` first).
    """
    try:
        payload = _to_payload(record)
    except ValueError as e:
        raise NotSerializable(f"frame record of {code.co_qualname} cannot be stored: {e}") from e
    fields = frame_key_fields(code)
    path = cache.put_bytes(NAMESPACE, frame_key(code), payload, ".rec", overwrite=True)
    cache.record_neighbour(NAMESPACE, _family(code), fields)
    return path


def load(code: types.CodeType) -> FrameRecord | None:
    """The record of ``code`` from an earlier process, or None (a miss, logged with its reason)."""
    key = frame_key(code)
    where = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
    data = cache.get_bytes(NAMESPACE, key, ".rec")
    if data is None:
        log.info("frame cache miss for %s: %s", where,
                 cache.explain_miss(NAMESPACE, _family(code), frame_key_fields(code)))
        return None
    try:
        record = _from_payload(data)
    except Exception as e:  # noqa: BLE001 - a bad record is a miss, never a crash
        log.warning("pyjit: frame record of %s is unusable (%s: %s); removing it, it will be rebuilt",
                    where, type(e).__name__, e)
        cache.remove(NAMESPACE, key, ".rec")
        return None
    log.info("frame cache hit for %s: %d entr%s", where, len(record.entries), "y" if len(record.entries) == 1 else "ies")
    return record


def remove(code: types.CodeType) -> None:
    cache.remove(NAMESPACE, frame_key(code), ".rec")
