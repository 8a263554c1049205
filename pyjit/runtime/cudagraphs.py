"""CUDA graphs for ``pyjit.jit(fn, mode="reduce-overhead")``: record a compiled graph's kernel
launches once per cache entry (one input-shape entry) and replay them.

This module owns:

- :func:`static_reason` - why a captured FX graph cannot be replayed from a CUDA graph (CPU
  tensors or ops, symbolic sizes, non-tensor inputs, in-place updates of its inputs,
  data-dependent ops), or None;
- :class:`CudaGraphRunner` - the callable that wraps a backend's compiled graph: a few warm-up
  calls run it normally (Triton compiles and autotunes there), the next call captures it into a
  ``torch.cuda.CUDAGraph`` over *static input buffers*, and later calls copy their inputs into
  those buffers and replay;
- :func:`wrap_compiled` - puts a backend's compiled graph behind a runner when
  :func:`static_reason` allows it (``pyjit.backends.with_cudagraphs`` calls it).

Inputs. A graph input that is an ``nn.Parameter``, a module attribute (its source reads an
attribute: ``L['self'].fc.bias``) or a global is read *in place*: the graph records its address,
no copy is made. Every replay checks that address; if it changed (the module was moved, an
attribute re-assigned) that input is demoted to a copied one and the graph is captured again
(logged on ``perf_hints``). Every other input is copied into a private buffer before a replay.

Outputs. A replay writes into the same memory every time. The outputs handed out are fresh tensor
objects over that memory (one storage per call). When the next replay starts, every output of
the previous call the user still holds is *invalidated*: reading it raises a RuntimeError that
names the function and says to ``clone()`` it (torch's storage error message, available in CUDA
builds). ``y = f(x)`` in a loop never trips it (the old ``y`` is gone or never read again). Where
torch lacks that API, outputs are returned as clones (always safe, one copy per output; logged).

Not captured, with the reason logged on ``perf_hints`` (the graph then runs as compiled): the
graph has no CUDA inputs, CPU tensors or ops, collectives, symbolic sizes, non-tensor inputs, in-place
updates of an input (seen statically or as a version-counter bump during warm-up), an output
aliasing an input, grad-requiring inputs under grad mode (training), or the capture itself failed.
"""
from __future__ import annotations

import re
import weakref
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree

from ..backends import _set_callback
from ..logs import get_logger

_perf_log = get_logger("perf_hints")

#: Counters for tests and benchmarks: graphs captured, replays, graphs left uncaptured (reasons).
metrics: dict[str, Any] = {"captures": 0, "replays": 0, "not_used": [], "runners": weakref.WeakSet()}


def reset_metrics() -> None:
    metrics.update(captures=0, replays=0, not_used=[], runners=weakref.WeakSet())


#: Normal calls before the capture (Triton compiles on the first launch, autotuning may take more).
WARMUP_CALLS = 2

# Ops that synchronise with the host or produce data-dependent shapes: never capturable.
_SYNC_OPS = frozenset({
    "item", "tolist", "cpu", "numpy", "nonzero", "masked_select", "unique", "unique_consecutive",
    "_local_scalar_dense", "repeat_interleave", "bincount", "argwhere", "synchronize",
})

_OVERWRITTEN = (
    "pyjit: this tensor is an output of {name}, run from a CUDA graph (mode='reduce-overhead'), "
    "and was overwritten by a later call of it. Clone it (out.clone()) before calling the "
    "function again if you need to keep it."
)
_RELEASED = (
    "pyjit: this tensor is an output of {name}, run from a CUDA graph (mode='reduce-overhead'), "
    "whose memory was released (pyjit.reset(), a recompile or the function was freed). Clone "
    "outputs (out.clone()) that must outlive the compiled function."
)


# ----------------------------------------------------------------------------- static checks

def graph_name(gm: Any) -> str:
    """``fn (file.py:12)`` for the graph of ``fn`` (its class is ``GraphModule_<code name>``)."""
    name = type(gm).__name__.removeprefix("GraphModule_")
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
        if trace:
            found = re.findall(r'File "([^"]+)", line (\d+)', trace)
            if found:
                path, line = found[-1]
                return f"{name} ({path.rsplit('/', 1)[-1]}:{line})"
    return name


def _placeholder_values(gm: Any) -> list[Any]:
    return [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]


def _target_name(node: Any) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def _storage_id(value: Any) -> int | None:
    try:
        return value.untyped_storage()._cdata
    except Exception:  # noqa: BLE001 - a fake tensor without storage: unknown
        return None


def static_reason(gm: Any, example_inputs: Sequence[Any]) -> str | None:
    """Why the graph cannot be replayed from a CUDA graph (None: it can)."""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if _symbolic(gm):  # before the inputs: a symbolic graph also has int inputs (its size symbols)
        return _DYNAMIC
    if not example_inputs:
        return "the graph has no inputs"
    for t in example_inputs:
        if not isinstance(t, torch.Tensor):
            return f"a non-tensor graph input ({type(t).__name__}: a symbolic scalar is a dynamic shape)"
        if not all(isinstance(s, int) for s in t.shape):
            return _DYNAMIC
        if t.device.type != "cuda":
            return f"a graph input is a {t.device.type} tensor (CUDA graphs replay CUDA work only)"
    return graph_reason(gm)


def graph_reason(gm: Any, device: str = "cuda") -> str | None:
    """The checks of :func:`static_reason` that read the FX graph only: symbolic placeholders,
    host synchronisations, tensors on another device than ``device``, in-place updates of a
    graph input (or a view of one; an in-place op on an intermediate is fine)."""
    if _symbolic(gm):
        return _DYNAMIC
    placeholders = _placeholder_values(gm)
    input_storages = {s for s in map(_storage_id, placeholders) if s is not None}
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        name = _target_name(node)
        if str(node.target).startswith("_c10d_functional."):
            # Collectives run on the process group's own stream and work objects; not captured.
            return f"the graph calls a collective ({node.target}); collectives are not replayed"
        if name in _SYNC_OPS or name.removeprefix("aten.").split(".")[0] in _SYNC_OPS:
            return f"the graph calls {name} (a host synchronisation or data-dependent shape)"
        for v in pytree.tree_leaves(node.meta.get("example_value")):
            if isinstance(v, torch.Tensor) and v.device.type != device:
                return f"the graph has a {v.device.type} tensor ({name} at {node.name})"
        if _is_inplace(node, name):
            first = node.args[0] if node.args else None
            value = getattr(first, "meta", {}).get("example_value")
            sid = _storage_id(value) if isinstance(value, torch.Tensor) else None
            if sid is None or sid in input_storages:  # unknown storage: conservative
                return f"the graph updates an input in place ({name} at {node.name}); mutations are not replayed"
    return None


_DYNAMIC = "dynamic shapes (symbolic sizes); without dynamic=True each shape gets a static entry and its own CUDA graph"


def _symbolic(gm: Any) -> bool:
    for v in _placeholder_values(gm):
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in (*v.shape, *v.stride()))):
            return True
    return False


def _is_inplace(node: Any, name: str) -> bool:
    import operator

    if "out" in node.kwargs or node.kwargs.get("inplace") is True:
        return True
    if node.target in (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv):
        return True
    return name.endswith("_") and not name.startswith("_")


def in_place_inputs(gm: Any, example_inputs: Sequence[Any]) -> list[bool]:
    """Which inputs the graph reads in place (see module docstring): parameters, module
    attributes and globals, whose address rarely changes between calls."""
    sources = [n.meta.get("source", "") for n in gm.graph.nodes if n.op == "placeholder"]
    if len(sources) != len(example_inputs):
        sources = [""] * len(example_inputs)
    flags = []
    for t, source in zip(example_inputs, sources):
        path = re.sub(r"\[[^\]]*\]", "", str(source))  # L['self'].fc.weight -> L.fc.weight
        flags.append(isinstance(t, torch.nn.Parameter) or str(source).startswith("G[") or "." in path)
    return flags


# ----------------------------------------------------------------------------- capture

Capture = Callable[[Callable[..., Any], list[torch.Tensor]], tuple[Any, Any]]


def capture_cuda(fn: Callable[..., Any], static_args: list[torch.Tensor]) -> tuple[Any, Any]:
    """Record ``fn(*static_args)`` into a CUDA graph; returns (graph, its static outputs).

    One more run on the capture stream first: lazy per-stream state (cuBLAS workspaces) must
    not be created during capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*static_args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        outs = fn(*static_args)
    return graph, outs


def _default_invalidator() -> Callable[[int, str], None] | None:
    """Sets an error message on a storage (by its ``_cdata``) so that any access raises."""
    set_msg = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)
    if set_msg is None:
        return None
    return set_msg


def _version_of(t: torch.Tensor) -> int | None:
    """The version counter (None for inference tensors, which have none)."""
    try:
        return t._version
    except RuntimeError:
        return None


class _Disabled(Exception):
    """Raised inside the runner when this graph must not be replayed (the message says why)."""


class CudaGraphRunner:
    """Replays ``fn`` from a CUDA graph (module docstring). ``capture`` and ``invalidate`` are
    parameters so that the bookkeeping can be tested without a GPU."""

    def __init__(self, fn: Callable[..., Any], example_inputs: Sequence[torch.Tensor], *, name: str = "graph",
                 in_place: Sequence[bool] | None = None, warmup: int = WARMUP_CALLS,
                 capture: Capture = capture_cuda, invalidate: Callable[[int, str], None] | None | str = "default",
                 max_captures: int = 4) -> None:
        self.fn = fn
        self.name = name
        self.in_place = list(in_place) if in_place is not None else [False] * len(example_inputs)
        self.shapes = [(t.shape, t.dtype, t.device) for t in example_inputs]
        self.warmup = warmup
        self.capture = capture
        self.invalidate = _default_invalidator() if invalidate == "default" else invalidate
        self.clone_outputs = self.invalidate is None
        self.max_captures = max_captures
        self.calls = 0
        self.captures = 0
        self.disabled: str | None = None
        self.graph: Any = None
        self.static_args: list[torch.Tensor] = []
        self.static_ptrs: list[int] = []  # addresses the graph reads (in-place inputs are checked)
        self.static_strides: list[tuple[int, ...]] = []
        self.out_leaves: list[Any] = []
        self.out_spec: Any = None
        self.handed_out: list[Any] = []  # StorageWeakRefs of the last call's outputs
        metrics["runners"].add(self)
        if self.clone_outputs:
            _perf_log.info("CUDA graphs for %s: this torch cannot invalidate stale outputs; outputs are cloned",
                           name)

    # -- per call -------------------------------------------------------------------------
    pauses_frame_hook = True  # __call__ runs with pyjit's frame hook off (the runner is not user code)

    def __call__(self, *args: Any) -> Any:
        previous = _set_callback(None)
        try:
            return self._call(args)
        finally:
            _set_callback(previous)

    def _call(self, args: tuple[Any, ...]) -> Any:
        if self.disabled is not None:
            return self.fn(*args)
        if torch.is_grad_enabled() and any(a.requires_grad for a in args):
            return self.fn(*args)  # training calls need autograd: the graph records none
        try:
            if self.graph is None:
                self.calls += 1
                if self.calls <= self.warmup:
                    return self._warm(args)
                self._record(args)
            else:
                self._load(args)
            return self._replay()
        except _Disabled as e:
            self._disable(str(e))
            return self.fn(*args)

    def _warm(self, args: tuple[Any, ...]) -> Any:
        versions = [_version_of(a) for a in args]
        out = self.fn(*args)
        for i, (a, v) in enumerate(zip(args, versions)):
            if v is not None and _version_of(a) != v:
                self._disable(f"the graph updated input {i} in place during warm-up; mutations are not replayed")
                break
        return out

    def _load(self, args: tuple[Any, ...]) -> None:
        """Copy the inputs into the static buffers (in-place inputs: check their address)."""
        for i, (a, s) in enumerate(zip(args, self.static_args)):
            shape, dtype, device = self.shapes[i]
            if a.shape != shape or a.dtype != dtype or a.device != device:
                raise _Disabled(f"input {i} has shape {tuple(a.shape)} {a.dtype} {a.device}, the capture "
                                f"saw {tuple(shape)} {dtype} {device}")
            if self.in_place[i]:
                # Against the address recorded at capture: `param.data = ...` keeps the object.
                if a.data_ptr() != self.static_ptrs[i] or a.stride() != self.static_strides[i]:
                    # The graph reads the old address: copy this input from now on, capture again.
                    _perf_log.info("CUDA graphs for %s: input %d moved in memory; it is copied from now on "
                                   "and the graph is captured again", self.name, i)
                    self.in_place[i] = False
                    self._record(args)
                    return
            elif a is not s:
                s.copy_(a)

    def _replay(self) -> Any:
        self._invalidate_previous()
        self.graph.replay()
        metrics["replays"] += 1
        return self._hand_out()

    # -- capture --------------------------------------------------------------------------
    def _record(self, args: tuple[Any, ...]) -> None:
        if self.captures >= self.max_captures:
            raise _Disabled(f"captured {self.captures} times (inputs read in place keep moving)")
        self.captures += 1
        self._invalidate_previous()
        self.graph = None
        static = []
        for a, keep in zip(args, self.in_place):
            if keep:
                static.append(a)
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                static.append(buf)
        self.static_args = static
        self.static_ptrs = [t.data_ptr() for t in static]
        self.static_strides = [t.stride() for t in static]
        try:
            graph, outs = self.capture(self.fn, static)
        except Exception as e:  # noqa: BLE001 - an op that cannot be captured: run normally
            raise _Disabled(f"capture failed: {type(e).__name__}: {e}") from e
        leaves, spec = pytree.tree_flatten(outs)
        inputs = {t.untyped_storage().data_ptr() for t in static}
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if leaf.untyped_storage().data_ptr() in inputs:
                    raise _Disabled("an output aliases a graph input")
                if leaf.requires_grad:
                    raise _Disabled("an output requires grad")
        self.graph, self.out_leaves, self.out_spec = graph, leaves, spec
        metrics["captures"] += 1
        _perf_log.info("CUDA graphs: captured %s (%d inputs, %d read in place)", self.name, len(static),
                       sum(self.in_place))

    def _disable(self, reason: str) -> None:
        self._invalidate_previous(_RELEASED)  # the graph and its output memory go now
        self.disabled = reason
        self.graph = None
        self.static_args = []
        self.out_leaves = []
        metrics["not_used"].append(reason)
        _perf_log.info("CUDA graphs not used for %s: %s", self.name, reason)

    # -- outputs --------------------------------------------------------------------------
    def _hand_out(self) -> Any:
        """Fresh tensors over the graph's output memory (or clones, see module docstring)."""
        if self.clone_outputs:
            leaves = [t.clone() if isinstance(t, torch.Tensor) else t for t in self.out_leaves]
            return pytree.tree_unflatten(leaves, self.out_spec)
        from torch.multiprocessing.reductions import StorageWeakRef

        storages: dict[int, Any] = {}
        by_id: dict[int, torch.Tensor] = {}
        leaves = []
        refs = []
        for t in self.out_leaves:
            if not isinstance(t, torch.Tensor):
                leaves.append(t)
                continue
            out = by_id.get(id(t))
            if out is None:
                st = t.untyped_storage()
                key = st.data_ptr()
                alias = storages.get(key)
                if alias is None:
                    alias = storages[key] = torch._C._construct_storage_from_data_pointer(key, t.device, st.nbytes())
                    refs.append(StorageWeakRef(alias))
                out = torch.empty((0,), dtype=t.dtype, device=t.device)
                out.set_(alias, t.storage_offset(), t.shape, t.stride())
                by_id[id(t)] = out
            leaves.append(out)
        self.handed_out = refs
        return pytree.tree_unflatten(leaves, self.out_spec)

    def _invalidate_previous(self, template: str = _OVERWRITTEN) -> None:
        """The next replay overwrites the last outputs: those still alive raise when read."""
        if self.invalidate is None:
            return
        msg = template.format(name=self.name)
        for ref in self.handed_out:
            if not ref.expired():
                self.invalidate(ref.cdata, msg)
        self.handed_out = []

    def __del__(self) -> None:
        # Handed-out outputs do not own their memory (the graph's pool does): once the runner
        # and its graph are freed, reading one must raise, never read freed memory.
        try:
            self._invalidate_previous(_RELEASED)
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to protect
            pass


# ----------------------------------------------------------------------------- backend

def wrap_compiled(compiled: Callable[..., Any], gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``compiled`` (a backend's result for ``gm``) behind a :class:`CudaGraphRunner`, or as is
    when the graph cannot be replayed (the reason logged on ``perf_hints``)."""
    try:
        name = graph_name(gm)
        reason = static_reason(gm, example_inputs)
    except Exception as e:  # noqa: BLE001 - a bug here must not break the user's program
        from ..config import config

        if config.raise_on_internal_error:
            raise
        name, reason = type(gm).__name__, f"internal error while checking the graph: {type(e).__name__}: {e}"
    if reason is None and torch.is_grad_enabled() and any(t.requires_grad for t in example_inputs):
        reason = "grad-requiring inputs under grad mode (training is not captured)"
    if reason is not None:
        metrics["not_used"].append(reason)
        _perf_log.info("CUDA graphs not used for %s: %s", name, reason)
        return compiled
    return CudaGraphRunner(compiled, example_inputs, name=name, in_place=in_place_inputs(gm, example_inputs))
