"""Warm start without re-tracing: building frame records after a compile, installing them in a
new process before tracing.

Two halves, both called by the frame layer (storage is :mod:`pyjit.runtime.frame_store`):

- :func:`record` (from :func:`pyjit.frame.convert.convert_frame`, after a successful compile):
  turns the :class:`~pyjit.frame.convert.CompiledFrame` into a
  :class:`~pyjit.runtime.frame_store.FrameEntry` -- guards through
  :mod:`pyjit.guards.serialize`, the replacement code with its unpicklable constants replaced by
  placeholders (the compiled graph by its graph-cache key, resume functions by index, globals
  dicts by module, named objects by name), the resume functions' code -- and saves the code
  object's record (all its entries of this process and the ones loaded from disk). Anything
  that cannot cross processes (an object identity of this process, a graph from a user backend,
  a training graph, one that ran as captured, a guard kind the format does not know) means no
  record for that entry, logged on ``cache`` with the reason.
- :func:`install` (from :func:`pyjit.frame.policy.callback`, on a cache miss, before tracing):
  on the first miss of a code object in this process, loads its record (trust and integrity
  checks are :func:`frame_store.load`'s), re-resolves the globals it pinned by name
  (:func:`frame_store.globals_mismatch`), and keeps its entries pending. On each miss, a pending
  entry whose rebuilt guards pass for the call is rebuilt completely (compiled graph loaded from
  the backend's cache, code constants restored, resume functions registered) and returned for
  the C core to install, so later calls hit it in C. A rebuild failure drops that entry (it
  re-traces), logged with the reason.

Dynamic-shape entries are recorded too: their guards (symbolic tensor specs, shape relations)
through the guard format, their graph by the key the backend computed from the symbolic inputs
(``pyjit_graph_key`` on the backend's callable), rebuilt with the module's ``check(args)``.

Nothing here imports the tracer or creates fake tensors: ``stats`` counts what happened, and
tests assert that ``pyjit.frame.convert`` was never imported by a warm process.
Switch: ``pyjit.config.warm_start`` (``PYJIT_WARM_START=0/1``), active only with the disk cache.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import sys
import types
from typing import Any, Callable

from ..config import config
from ..guards import serialize
from ..guards.guards import GuardSet
from ..logs import get_logger
from ..runtime import cache, frame_store
from ..runtime.frame_store import FrameEntry, FrameRecord, NotSerializable, RebuildError

log = get_logger("cache")

# What the warm start did in this process (tests and benchmarks print it).
stats: "collections.Counter[str]" = collections.Counter()


def active() -> bool:
    """Warm start is on: the setting, the disk cache, and the C core (the pure-Python runtime has
    no per-code cache to install into)."""
    from .policy import _C

    return bool(config.warm_start and config.backend_disk_cache and _C is not None)


@dataclasses.dataclass
class WarmFrame:
    """An installed entry from a record: what :class:`~pyjit.frame.policy.CodeState` keeps of it
    (the attributes recompile logging and concurrent-miss checks read off a compiled frame)."""

    guards: GuardSet
    code: types.CodeType
    arg_names: list[str]
    resume_codes: list[types.CodeType]
    graph: Any = None
    compiled: Any = None
    graph_break: Any = None
    from_record: bool = True


@dataclasses.dataclass
class _Pending:
    entry: FrameEntry
    restored: tuple[types.CodeType, list[types.CodeType]] | None = None


@dataclasses.dataclass
class _CodeRecord:
    """This process's view of one code object's record: entries to save, entries to install."""

    code: types.CodeType
    entries: list[FrameEntry] = dataclasses.field(default_factory=list)
    pending: list[_Pending] = dataclasses.field(default_factory=list)
    globals: dict[str, Any] = dataclasses.field(default_factory=dict)
    conflicting: set[str] = dataclasses.field(default_factory=set)


# id(code) -> its record state; _CodeRecord.code keeps the key alive.
_records: dict[int, _CodeRecord] = {}


def reset() -> None:
    """Forget loaded and recorded entries (``pyjit.reset``-like; the store is untouched)."""
    _records.clear()


def _where(code: types.CodeType) -> str:
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"


def _arg_names(code: types.CodeType) -> list[str]:
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    return list(code.co_varnames[:n])


# ----------------------------------------------------------------------------- the backend

_backend_fields: list[dict[str, str]] = []


def _backend_fingerprint() -> dict[str, str]:
    """The backend settings and source hash that are part of every graph-cache key, and the hash
    of pyjit's whole source: an entry recorded under other settings (``PYJIT_CPU_BACKEND``) or by
    an edited pyjit (frontend or backend) is not installed."""
    if not _backend_fields:
        import torch
        import torch.fx

        from ..backend import graph_cache

        empty = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
        fields = graph_cache.graph_key_fields(empty, []) or {}
        _backend_fields.append({k: v for k, v in fields.items() if k in ("backend settings", "backend source")})
    return {**_backend_fields[0], "cpu backend": config.cpu_backend, "pyjit source": cache.source_hash()}


def _is_pyjit_backend(backend: Any) -> bool:
    from .. import backends

    try:
        return backend is backends.lookup("pyjit")
    except Exception:  # noqa: BLE001 - registry unavailable: not ours to record
        return False


# ----------------------------------------------------------------------------- recording

def record(func: types.FunctionType, frame: Any, example_inputs: list[Any], backend: Any) -> None:
    """Save the record of ``func``'s code with this new entry (never raises; logged on ``cache``)."""
    if not active():
        return
    code = func.__code__
    try:
        entry = _build_entry(func, frame, example_inputs, backend)
    except NotSerializable as e:
        stats["not_serializable"] += 1
        log.info("no frame record for an entry of %s: %s", _where(code), e)
        return
    except Exception as e:  # noqa: BLE001 - recording is an optimisation: never break the compile
        stats["not_serializable"] += 1
        log.warning("pyjit: could not record an entry of %s for warm start (%s: %s)", _where(code),
                    type(e).__name__, e)
        return
    state = _records.get(id(code))
    if state is None or state.code is not code:
        state = _records[id(code)] = _CodeRecord(code)
    state.entries.append(entry)
    del state.entries[:-max(1, config.entry_limit)]  # the newest entries, as many as the C cache holds
    for name, value in serialize.first_global_names(frame.guards).items():
        identity = frame_store.global_identity(value)
        if "unrebuildable" in identity:
            continue  # its guard made the entry unserialisable already
        if state.globals.get(name, identity) != identity:
            state.conflicting.add(name)  # bound to different objects by different entries: guards decide
        state.globals[name] = identity
    saved = {k: v for k, v in state.globals.items() if k not in state.conflicting}
    rec = FrameRecord(code.co_qualname, code.co_filename, code.co_firstlineno, saved, list(state.entries))
    try:
        path = frame_store.save(code, rec)
    except Exception as e:  # noqa: BLE001 - a store failure costs the warm start only
        log.warning("pyjit: could not save the frame record of %s (%s: %s)", _where(code), type(e).__name__, e)
        return
    if path is not None:
        stats["records_saved"] += 1
        log.info("frame record saved for %s: %d entr%s", _where(code), len(rec.entries),
                 "y" if len(rec.entries) == 1 else "ies")


def _build_entry(func: types.FunctionType, frame: Any, example_inputs: list[Any], backend: Any) -> FrameEntry:
    code = func.__code__
    if not _is_pyjit_backend(backend):
        raise NotSerializable(f"its graph comes from the user backend {getattr(backend, '__name__', backend)!r}")
    frame_store.frame_key(code)  # the key must exist (raises NotSerializable for odd constants)
    guards = serialize.dump_guards(frame.guards)
    graph_ph = _graph_placeholder(frame, example_inputs) if frame.compiled is not None else None
    resume_index = {id(c): i for i, c in enumerate(frame.resume_codes)}

    def placeholder_for(value: Any) -> dict[str, Any] | None:
        if graph_ph is not None and value is frame.compiled:
            return graph_ph
        if isinstance(value, types.FunctionType) and id(value.__code__) in resume_index:
            where = _globals_ref(value.__globals__, func)
            if value.__closure__ or value.__defaults__ or value.__kwdefaults__ or where is None:
                return None
            return {"resume": resume_index[id(value.__code__)], "globals": where}
        if type(value) is dict:
            where = _globals_ref(value, func)
            return None if where is None else {"globals": where}
        try:
            return {"value": serialize.encode(value)}
        except NotSerializable:
            return None

    try:
        stripped, placeholders = frame_store.strip_constants(frame.code, placeholder_for)
        resumes = []
        from ..trace.breaks import runs_natively

        for rc in frame.resume_codes:
            rstripped, rph = frame_store.strip_constants(rc, placeholder_for)
            resumes.append({"name": rc.co_qualname, "code": rstripped, "placeholders": rph,
                            "native": runs_natively(rc)})
    except NotSerializable as e:
        raise NotSerializable(f"its code holds an object of this process ({e})") from None
    meta = {"backend": _backend_fingerprint(), "graph_break": frame.graph_break is not None,
            "arg_names": list(frame.arg_names)}
    return FrameEntry(guards=guards, code=stripped, placeholders=placeholders,
                      graph_keys=[graph_ph["graph"]] if graph_ph else [], resumes=resumes, meta=meta)


def _globals_ref(d: dict[str, Any], func: types.FunctionType) -> str | None:
    """How a globals dict constant is found again: the frame's own, or a module's by name."""
    if d is func.__globals__:
        return "<frame>"
    for name, module in list(sys.modules.items()):
        if getattr(module, "__dict__", None) is d:
            return name
    return None


def _graph_placeholder(frame: Any, example_inputs: list[Any]) -> dict[str, Any]:
    """The compiled graph by its graph-cache key, plus what the loader needs without the FX
    graph: input metadata (the compiled callable's own check) and the graph's Python code and
    globals (its as-captured fallback)."""
    from .. import backends
    from ..backend import graph_cache

    compiled = frame.compiled
    if type(compiled) is not backends._GuardedCompiled or not hasattr(compiled.fn, "pyjit_call"):
        raise NotSerializable("its graph was not compiled by pyjit's code generator (it runs as captured, "
                              "or it is a training graph)")
    gm = frame.graph
    # A dynamic graph is keyed by the backend on its symbolic inputs and the ShapeEnv as it was
    # before the aten trace: only the backend knows that key, and attaches it to its callable.
    key = getattr(compiled.fn, "pyjit_graph_key", None)
    dynamic = _is_dynamic(frame)
    if key is None and not dynamic:
        key = graph_cache.graph_key(gm, example_inputs)
    if key is None:
        raise NotSerializable("its graph is not kept in the graph cache (it calls code outside torch, "
                              "or holds constants)")
    if cache.entry_path(graph_cache.NAMESPACE, key, ".json") is None or \
            cache.get_bytes(graph_cache.NAMESPACE, key, ".json") is None:
        raise NotSerializable("its compiled graph is not in the graph cache (constants, or the cache is off)")
    pc = gm.graph.python_code(root_module="self")
    try:
        glb = {name: serialize.encode(value) for name, value in pc.globals.items()}
    except NotSerializable as e:
        raise NotSerializable(f"its graph code uses an object of this process ({e})") from None
    if dynamic:
        # The module's own check(args) verifies each call against its symbolic layouts.
        devices = sorted({str(t.device) for t in example_inputs if hasattr(t, "device")})
        if len(devices) > 1 or not all(isinstance(t, (int, float)) or hasattr(t, "device") for t in example_inputs):
            raise NotSerializable("its dynamic graph has inputs other than tensors on one device and scalars")
        return {"graph": key, "name": type(gm).__name__, "src": pc.src, "globals": glb, "dynamic": True,
                "device": devices[0] if devices else "cpu"}
    inputs = [[list(t.shape), list(t.stride()), str(t.dtype).removeprefix("torch."), str(t.device)]
              for t in example_inputs]
    from ..backend.aliasing import aliases_to_data, output_aliases

    # Eager's relation of each output to the inputs, which the rebuilt graph (no fake values) keeps.
    aliases = output_aliases(gm)
    return {"graph": key, "name": type(gm).__name__, "src": pc.src, "globals": glb, "inputs": inputs,
            "aliases": aliases_to_data(aliases) if aliases is not None else None}


def _is_dynamic(frame: Any) -> bool:
    """The entry's graph was compiled with symbolic sizes or scalars (as the backend decides)."""
    import importlib

    compile_fx = importlib.import_module("pyjit.backend.compile_fx")  # the module, not its function
    return frame.graph is not None and compile_fx.symbolic_inputs(frame.graph) is not None


# ----------------------------------------------------------------------------- installing

def install(func: types.FunctionType, args: tuple[Any, ...], state: Any) -> tuple[Any, types.CodeType] | None:
    """A recorded entry for this call, rebuilt: ``(guard tree, replacement code)`` for the C core
    to install, or None (trace as usual). Called on a cache miss, under the code's compile lock."""
    if not active() or not _is_pyjit_backend(state.options.backend):
        return None
    code = func.__code__
    rec = _records.get(id(code))
    if rec is None or rec.code is not code:
        rec = _records[id(code)] = _load(func)
    if not rec.pending:
        return None
    from .policy import _C, frame_values

    for pending in list(rec.pending):
        entry = pending.entry
        if entry.meta.get("graph_break") and state.options.fullgraph:
            continue  # fullgraph=True: a broken frame must raise, so trace it
        names = [str(n) for n in entry.meta.get("arg_names", _arg_names(code))]
        try:
            if entry.meta.get("backend") != _backend_fingerprint():
                raise RebuildError("the backend settings or pyjit's source changed since it was recorded")
            guards = serialize.load_guards(entry.guards, frame_values(func, names, args))
            from ..guards.guards import compile_c_tree

            tree = compile_c_tree(guards, _C, lambda a: frame_values(func, names, tuple(a)))
            if tree.check(func, args) != _C.PASS:
                continue  # another entry's, or none: the guards decide, as for installed entries
            if pending.restored is None:
                pending.restored = _restore_code(func, entry)
        except (RebuildError, NotSerializable) as e:
            _drop(rec, pending, f"{e}")
            continue
        except Exception as e:  # noqa: BLE001 - a bad record must never break the call
            _drop(rec, pending, f"{type(e).__name__}: {e}")
            continue
        repl, resume_codes = pending.restored
        rec.pending.remove(pending)
        state.frames.append(WarmFrame(guards, repl, names, resume_codes))
        stats["entries_installed"] += 1
        log.info("warm start: installed an entry of %s from its frame record (no tracing)", _where(code))
        return tree, repl
    return None


def _drop(rec: _CodeRecord, pending: _Pending, reason: str) -> None:
    """A recorded entry that cannot be rebuilt: never tried again, and left out of the next save."""
    stats["rebuild_failures"] += 1
    rec.pending.remove(pending)
    if pending.entry in rec.entries:
        rec.entries.remove(pending.entry)
    log.info("warm start: an entry of %s cannot be rebuilt (%s); it re-traces", _where(rec.code), reason)


def _load(func: types.FunctionType) -> _CodeRecord:
    code = func.__code__
    rec = _CodeRecord(code)
    try:
        stored = frame_store.load(code)
    except Exception as e:  # noqa: BLE001 - the store's own failure is a miss
        log.warning("pyjit: frame record of %s could not be read (%s: %s)", _where(code), type(e).__name__, e)
        return rec
    if stored is None:
        return rec
    stats["records_loaded"] += 1
    why = frame_store.globals_mismatch(stored.globals, func.__globals__)
    if why is not None:
        stats["globals_mismatch"] += 1
        log.info("warm start: frame record of %s not used: %s; its entries re-trace", _where(code), why)
        return rec
    rec.globals = dict(stored.globals)
    rec.entries = list(stored.entries)
    rec.pending = [_Pending(e) for e in stored.entries]
    return rec


def _restore_code(func: types.FunctionType, entry: FrameEntry) -> tuple[types.CodeType, list[types.CodeType]]:
    """The replacement code with its constants rebuilt, and the resume functions' code objects
    (registered with the graph-break layer, as when they were made)."""
    resumes: list[types.CodeType] = []

    def resolve(ph: dict[str, Any]) -> Any:
        if "graph" in ph:
            return _load_graph(ph)
        if "resume" in ph:
            code = resumes[int(ph["resume"])]
            return types.FunctionType(code, _globals_of(ph["globals"], func), code.co_name)
        if "globals" in ph:
            return _globals_of(ph["globals"], func)
        if "value" in ph:
            return serialize.decode(ph["value"])
        raise RebuildError(f"unknown placeholder {ph!r:.60}")

    for r in entry.resumes:
        resumes.append(frame_store.restore_constants(r["code"], r["placeholders"], resolve))
    repl = frame_store.restore_constants(entry.code, entry.placeholders, resolve)
    if not entry.resumes:
        return repl, resumes  # no graph break: the graph-break layer is not even imported
    from ..trace import breaks

    native = {r["name"] for r in entry.resumes if r.get("native")}
    names = {r["name"] for r in entry.resumes}
    # A resume function is a constant of the replacement (or of a nested code object made into a
    # function when it runs): register every copy the replacement holds.
    for c in [*resumes, *_nested_codes(repl)]:
        if c.co_qualname in names:
            breaks._resume_codes.add(c)
            if c.co_qualname in native:
                breaks._native_resume_codes.add(c)
    return repl, resumes


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    out = []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.append(c)
            out.extend(_nested_codes(c))
        elif isinstance(c, types.FunctionType):
            out.append(c.__code__)
    return out


def _globals_of(where: str, func: types.FunctionType) -> dict[str, Any]:
    if where == "<frame>":
        return func.__globals__
    module = sys.modules.get(where)
    if module is None:
        raise RebuildError(f"module {where!r} (whose globals the entry uses) is not imported")
    return module.__dict__


class _InputMeta:
    """What the compiled callable checks of each input (sizes, strides, dtype, device)."""

    __slots__ = ("shape", "_stride", "dtype", "device")

    def __init__(self, sizes: list[int], strides: list[int], dtype: str, device: str) -> None:
        import torch

        self.shape = torch.Size(int(s) for s in sizes)
        self._stride = tuple(int(s) for s in strides)
        self.dtype = getattr(torch, dtype)
        self.device = torch.device(device)
        if not isinstance(self.dtype, torch.dtype):
            raise RebuildError(f"unknown dtype {dtype!r}")

    def stride(self) -> tuple[int, ...]:
        return self._stride


class _CapturedGraph:
    """The graph's own Python code, run when the compiled kernels cannot take an input (the
    captured-graph fallback of ``compile_fx``), rebuilt from the recorded code text."""

    def __init__(self, name: str, src: str, globals_: dict[str, Any]) -> None:
        namespace = dict(globals_)
        # '<pyjit...' file names are library code to the frame policy: never compiled.
        exec(compile(src, f"<pyjit-warm-graph {name}>", "exec"), namespace)  # noqa: S102 - our own trusted record
        self._forward: Callable[..., Any] = namespace["forward"]
        self.name = name

    def forward(self, *args: Any) -> Any:
        return self._forward(self, *args)


def _load_graph(ph: dict[str, Any]) -> Any:
    """The compiled graph of a placeholder, loaded from the backend's cache (no tracing,
    lowering or code generation); :class:`RebuildError` when it is gone or broken."""
    from torch.utils import _pytree as pytree

    import importlib

    from .. import backends
    from ..backend import graph_cache
    from ..backend.metrics import metrics

    compile_fx = importlib.import_module("pyjit.backend.compile_fx")  # the module, not its function
    from ..runtime.launcher import load_module

    key = str(ph["graph"])
    data = cache.get_bytes(graph_cache.NAMESPACE, key, ".json")
    if data is None:
        raise RebuildError(f"compiled graph {key[:12]} is no longer in the graph cache")
    try:
        entry = json.loads(data)
        module_key = str(entry["module_key"])
        out_spec = pytree.treespec_loads(entry["out_spec"])
    except Exception as e:  # noqa: BLE001 - the graph cache's own loader removes such entries
        raise RebuildError(f"graph cache entry {key[:12]} is unreadable ({type(e).__name__}: {e})") from None
    path = cache.get_path("modules", module_key, ".py")
    if path is None:
        raise RebuildError(f"the module of graph {key[:12]} is missing or corrupt")
    import torch

    dynamic = bool(ph.get("dynamic"))
    metas = [] if dynamic else [_InputMeta(*i) for i in ph["inputs"]]
    device = torch.device(str(ph["device"])) if dynamic else metas[0].device if metas else None
    interpret = (device is None or device.type == "cpu") and config.cpu_backend == "triton_interpret"
    module = load_module(path, module_key, interpret)
    # A dynamic graph's module checks each call against its symbolic layouts (as compile_fx's
    # callable does).
    check = getattr(module, "check", None)
    if dynamic and not callable(check):
        raise RebuildError(f"the module of dynamic graph {key[:12]} has no check(args)")
    fallback = _CapturedGraph(str(ph["name"]), str(ph["src"]),
                              {k: serialize.decode(v) for k, v in ph["globals"].items()})
    # A static graph's inputs are pinned by the frame's restored TENSOR_MATCH guards, as when
    # it was compiled (compile_fx.INPUTS_GUARDED).
    from ..backend.aliasing import aliases_from_data

    aliases = aliases_from_data(ph["aliases"]) if ph.get("aliases") is not None else None
    fn = compile_fx._make_callable(fallback, module.call, out_spec, metas, [],  # type: ignore[arg-type]
                                   check if dynamic else None, inputs_guarded=not dynamic, aliases=aliases)
    backends._mark_skip(fn)
    metrics.graph_cache_hits += 1
    log.info("graph cache hit for %s (key %s), from a frame record", fallback.name, key[:12])
    return backends._GuardedCompiled(fn, fallback)


# ----------------------------------------------------------------------------- portable artifacts

def artifact_frames(targets: list[Any] | None) -> list[tuple[types.CodeType, str]]:
    """``(code, frame-record key)`` of the frames a portable artifact holds: every code object
    with recorded entries in this process (``targets=None``), or the given functions, jitted
    functions, jitted modules or code objects together with the resume functions of their graph
    breaks (recursively). Codes with no record in the store are left out."""
    from .policy import lookup_target

    if targets is None:
        codes = [rec.code for rec in _records.values() if rec.entries]
    else:
        codes = []
        todo = [_code_of(t) for t in targets]
        seen: set[int] = set()
        while todo:
            code = todo.pop()
            if id(code) in seen:
                continue
            seen.add(id(code))
            codes.append(code)
            state = lookup_target(code)
            for frame in state.frames if state is not None else []:
                todo.extend(getattr(frame, "resume_codes", []))
    out = []
    for code in codes:
        try:
            key = frame_store.frame_key(code)
        except NotSerializable:
            key = None
        if key is not None and cache.get_bytes(frame_store.NAMESPACE, key, ".rec") is not None:
            out.append((code, key))
        elif targets is not None:
            log.info("artifacts: %s has no frame record (not compiled yet, or not recordable: PYJIT_LOGS=cache "
                     "said why when it compiled); left out", _where(code))
    return out


def _code_of(target: Any) -> types.CodeType:
    """The code object whose frames ``target`` runs (functions, methods, jit wrappers, modules)."""
    if isinstance(target, types.CodeType):
        return target
    jitted = getattr(type(target), "_pyjit_forward", None)  # a jitted nn.Module
    if jitted is not None:
        target = jitted
    func = getattr(target, "_func", None)  # a pyjit.jit wrapper
    if isinstance(func, types.FunctionType):
        return func.__code__
    while isinstance(target, types.MethodType):
        target = target.__func__
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType):
        return code
    forward = getattr(type(target), "forward", None)  # an nn.Module: its forward
    if isinstance(forward, types.FunctionType):
        return forward.__code__
    raise TypeError(f"pyjit.cache.save_artifacts(frames=...): cannot find the code of {type(target).__name__} "
                    f"object {target!r:.60}; pass functions, jitted functions or modules, or code objects")
