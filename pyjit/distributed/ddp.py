"""DistributedDataParallel under pyjit: DDP's Python runs natively, the wrapped module compiles,
and its training graph is split at DDP's gradient-bucket boundaries.

Two halves:

- **Frontend** (called by :mod:`pyjit.frame.policy`): DDP's ``forward`` (logger, ``_pre_forward``
  with its buffer broadcast and bucket rebuild, ``_post_forward`` with unused-parameter search
  and ``_DDPSink``) is never traced: :func:`compile_wrapped` registers the forward of the module
  DDP wraps as a jit target with the options of the call (``pyjit.jit(ddp)`` or
  ``pyjit.enable()``), so the frame hook compiles that frame when DDP calls it, even when the
  wrapped module's class is torch's own (``nn.Sequential``). A module jitted before DDP wrapped
  it needs nothing: DDP calls the jitted forward.
- **Split pass** (called by :func:`pyjit.backend.compile_fx.compile_fx` for a graph that needs
  autograd while a DDP forward is active, ``DistributedDataParallel._active_ddp_module``):
  :func:`plan_split` estimates the order in which the graph's parameters get their gradients
  (by first use in the forward, last first), asks torch's own bucket assignment
  (``dist._compute_bucket_assignment_by_size``, DDP's ``first_bucket_bytes_cap`` then
  ``bucket_bytes_cap``, per dtype and device) which bucket each parameter joins, and cuts the
  graph's nodes into contiguous subgraphs, one per bucket (an autocast or grad-mode region is
  never cut; only tensors pass between subgraphs). :func:`split_graph` builds them, each taking
  its parameters in the planned ready order (autograd fires gradient accumulators in input
  order, and DDP rebuilds its buckets in firing order). :class:`SplitGraph` runs them in order;
  each is compiled on its first call by the normal backend (training path: its own
  ``torch.autograd.Function``), so during backward each subgraph's parameter gradients are
  complete when its backward node finishes and DDP's reducer can start that bucket's all-reduce
  while the earlier subgraphs' backward still runs.

DDP's semantics stay DDP's: ignored parameters are not counted in buckets, and
``find_unused_parameters``, ``static_graph``, ``no_sync()``, ``broadcast_buffers`` and
``gradient_as_bucket_view`` are handled by DDP's own code, which runs natively around the
compiled module and sees ordinary autograd nodes. ``pyjit.config.ddp_split = False`` keeps one
graph; ``PYJIT_LOGS=ddp`` prints the buckets and subgraphs. Graphs with symbolic sizes are not
split (one graph, logged).
"""
from __future__ import annotations

import dataclasses
import operator
import sys
import threading
import types
import weakref
from typing import Any, Callable, Sequence

from ..config import config
from ..logs import get_logger
from ..report import profiler

log = get_logger("ddp")

_DDP_MODULE = "torch.nn.parallel.distributed"
# compile_fx.INPUTS_GUARDED, spelled here: this module must not import the backend at import time.
_INPUTS_GUARDED = "pyjit_inputs_guarded"
_MODULES_TRAINING = "pyjit_modules_training"  # backend/aot MODULES_TRAINING


def ddp_class() -> type | None:
    """``DistributedDataParallel`` when torch's DDP module is loaded (never imports it)."""
    mod = sys.modules.get(_DDP_MODULE)
    return getattr(mod, "DistributedDataParallel", None) if mod is not None else None


_forward_code: list[types.CodeType] = []


def is_ddp_forward(code: types.CodeType) -> bool:
    """``code`` is ``DistributedDataParallel.forward``'s code, or the copy ``pyjit.jit`` makes
    of it when DDP is jitted a second time with another backend."""
    if not _forward_code:
        cls = ddp_class()
        if cls is None:
            return False
        fwd = getattr(getattr(cls, "forward", None), "__code__", None)
        if fwd is None:
            return False
        _forward_code.append(fwd)
    fwd = _forward_code[0]
    return code is fwd or (code.co_firstlineno == fwd.co_firstlineno and code.co_name == fwd.co_name
                           and code.co_filename == fwd.co_filename)


def active_ddp_module() -> Any:
    """The DDP module whose forward is running on this process (None outside one)."""
    cls = ddp_class()
    if cls is None:
        return None
    return getattr(cls, "_active_ddp_module", None)


# -- frontend ----------------------------------------------------------------------------------

# DDP module -> the jit state registered for its wrapped module's forward (re-registered when
# pyjit.reset() or other options replaced it).
_registered: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def compile_wrapped(args: Sequence[Any], options: Any) -> None:
    """DDP.forward is about to run natively (``args[0]`` is the DDP module): make the forward of
    the module it wraps a jit target with ``options``, so the frame hook compiles it."""
    from ..frame import policy

    if not args:
        return
    ddp = args[0]
    inner = getattr(ddp, "module", None)
    if inner is None or getattr(type(inner), "_pyjit_forward", None) is not None:
        return  # a module jitted before DDP wrapped it compiles itself
    # The function DDP's ``self.module(...)`` runs: an instance's own ``forward`` (a function
    # or a method bound to it) first, else the class's.
    forward = getattr(inner, "__dict__", {}).get("forward", getattr(type(inner), "forward", None))
    func = forward.__func__ if isinstance(forward, types.MethodType) else forward
    if not isinstance(func, types.FunctionType):
        return
    known = _registered.get(ddp)
    if known is not None and policy.lookup_target(func.__code__) is known and known.options.same_as(options):
        return
    state = policy.lookup_target(func.__code__)
    if state is None or not state.options.same_as(options):
        state = policy.register_target(func.__code__, options)
    state.wrapped_by_ddp = True
    _registered[ddp] = state
    log.info("DDP wraps %s: DDP.forward runs natively, %s.forward is compiled", type(inner).__name__,
             type(inner).__name__)


# -- split pass -------------------------------------------------------------------------------

@dataclasses.dataclass
class Bucket:
    """One DDP gradient bucket as the split sees it: parameter names in gradient-ready order."""

    params: list[str]
    nbytes: int


@dataclasses.dataclass
class SplitPlan:
    """What the split decided for one graph (kept in :data:`plans` for tests and benchmarks)."""

    buckets: list[Bucket]
    # Per subgraph, in forward order: (number of nodes, parameter names it uses).
    subgraphs: list[tuple[int, list[str]]]
    caps: list[int]
    ready_order: list[str]  # parameter names in estimated gradient-ready order

    @property
    def num_subgraphs(self) -> int:
        return len(self.subgraphs)


# The plans made in this process, newest last (bounded: tests and benchmarks read the last ones).
plans: list[SplitPlan] = []
_PLANS_KEPT = 64


def bucket_limits(ddp: Any) -> list[int]:
    """The byte limits DDP's reducer uses when it (re)builds buckets in gradient-ready order:
    per-bucket caps when given, else the first bucket's cap then ``bucket_bytes_cap``."""
    caps = list(getattr(ddp, "bucket_bytes_cap_list", None) or [])
    if caps:
        return [int(c) for c in caps]
    cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
    bucket_config = getattr(ddp, "_bucket_config", None)
    first = int(getattr(bucket_config, "first_bucket_bytes_cap", cap)) if bucket_config is not None else cap
    return [first, cap] if first < cap else [cap]


def _managed_params(ddp: Any) -> dict[int, str]:
    """id(parameter) -> name for the parameters DDP reduces (requires grad, not ignored)."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    out: dict[int, str] = {}
    for name, p in ddp.module.named_parameters():
        if p.requires_grad and name not in ignored:
            out.setdefault(id(p), name)
    return out


def plan_split(gm: Any, example_inputs: Sequence[Any], ddp: Any) -> tuple[SplitPlan, dict[Any, int], dict[Any, int]] | None:
    """Which subgraph each compute node of ``gm`` goes to (forward order) and each parameter
    node's place in the estimated gradient-ready order, or None when the graph uses no
    parameter DDP reduces. Parameters are identified by tensor, not node: a graph may read one
    parameter through several nodes (``get_attr`` per access)."""
    import torch
    import torch.distributed as dist
    import torch.fx

    managed = _managed_params(ddp)
    param_of: dict[Any, Any] = {}   # node -> parameter tensor
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and id(value) in managed:
            param_of[node] = value
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if isinstance(value, torch.Tensor) and id(value) in managed:
                param_of[node] = value
    if not param_of:
        return None
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    # Gradient-ready order: a parameter's gradient is complete when the backward of its first
    # use in the forward has run (a tied weight used first and last is ready last), so the
    # parameter whose first use comes last is ready first; within one node, the last argument
    # first (a linear's bias before its weight).
    first_use: dict[int, Any] = {}
    for node in compute:
        for a in node.all_input_nodes:
            if a in param_of:
                first_use.setdefault(id(param_of[a]), node)
    order: list[Any] = []            # parameter tensors, ready order
    uses: dict[Any, list[int]] = {}  # node -> ids of the parameters first used there
    for node in reversed(compute):
        used: list[int] = []
        for a in reversed(node.all_input_nodes):
            key = id(param_of[a]) if a in param_of else None
            if key is not None and first_use[key] is node and key not in used:
                used.append(key)
                order.append(param_of[a])
        uses[node] = used
    caps = bucket_limits(ddp)
    indices, _ = dist._compute_bucket_assignment_by_size(order, caps, [False] * len(order))
    # Buckets in the order their gradients complete (the first holds the first-ready parameter).
    indices = sorted(indices, key=min)
    bucket_of: dict[int, int] = {}
    for b, members in enumerate(indices):
        for i in members:
            bucket_of[id(order[i])] = b
    # Walk backward: a node joins the newest bucket among the parameters it uses first; nodes
    # without parameters stay with the bucket after them. Subgraphs are contiguous by construction.
    current = 0
    reverse_assign: dict[Any, int] = {}
    for node in reversed(compute):
        fresh = [bucket_of[k] for k in uses[node]]
        if fresh:
            current = max(current, max(fresh))
        reverse_assign[node] = current
    for node in compute:
        # A tuple-valued node's items stay with it: only tensors cross between subgraphs (a
        # compiled static graph takes tensor inputs only).
        source = node.args[0] if node.target is operator.getitem and node.args else None
        if isinstance(source, torch.fx.Node) and source in reverse_assign:
            reverse_assign[node] = reverse_assign[source]
    _keep_state_regions_whole(compute, reverse_assign)
    used_ids = sorted(set(reverse_assign.values()), reverse=True)
    forward_index = {b: i for i, b in enumerate(used_ids)}
    assign = {node: forward_index[b] for node, b in reverse_assign.items()}
    position = {id(t): i for i, t in enumerate(order)}
    ready = {node: position[id(t)] for node, t in param_of.items() if id(t) in position}
    buckets = [Bucket([managed[id(order[i])] for i in sorted(members)],
                      sum(order[i].numel() * order[i].element_size() for i in members)) for members in indices]
    subgraphs: list[tuple[int, list[str]]] = []
    for i in range(len(used_ids)):
        nodes = [n for n in compute if assign[n] == i]
        params: list[str] = []
        for n in nodes:
            for a in n.all_input_nodes:
                if a in param_of and managed[id(param_of[a])] not in params:
                    params.append(managed[id(param_of[a])])
        subgraphs.append((len(nodes), params))
    return SplitPlan(buckets, subgraphs, caps, [managed[id(t)] for t in order]), assign, ready


def _state_delta(node: Any) -> int:
    """+1 where a graph enters a state region (autocast, grad off, inference mode), -1 where it
    leaves one, else 0. A region's enter returns a context object its exit takes, and its nodes
    were traced under its state: it must not be cut."""
    import torch

    target = node.target if node.op == "call_function" else None
    name = getattr(target, "__name__", "")
    if name in ("_enter_autocast", "_enter_inference_mode"):
        return 1
    if name in ("_exit_autocast", "_exit_inference_mode"):
        return -1
    if target in (torch._C._set_grad_enabled, torch.set_grad_enabled) and node.args:
        return 1 if node.args[0] is False else -1
    return 0


def _keep_state_regions_whole(compute: list[Any], assign: dict[Any, int]) -> None:
    """Every node of a state region joins the subgraph of the region's first node (the
    assignment is monotonic along the graph, so subgraphs stay contiguous)."""
    depth = 0
    region = 0
    for node in compute:
        if depth > 0:
            assign[node] = region
        delta = _state_delta(node)
        if delta > 0 and depth == 0:
            region = assign[node]
        depth = max(0, depth + delta)


def _fetch_attr(gm: Any, target: str) -> Any:
    value = gm
    for part in target.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _log_plan(plan: SplitPlan) -> None:
    if not log.isEnabledFor(20):
        return
    lines = [f"DDP buckets (caps {plan.caps} bytes, gradient-ready order):"]
    for i, b in enumerate(plan.buckets):
        lines.append(f"  bucket {i}: {b.nbytes} bytes, {len(b.params)} params: {', '.join(b.params)}")
    lines.append(f"graph split into {plan.num_subgraphs} subgraphs (forward order):")
    for i, (count, params) in enumerate(plan.subgraphs):
        lines.append(f"  subgraph {i}: {count} nodes, params: {', '.join(params) or '-'}")
    log.info("\n".join(lines))


class _Subgraph:
    """One piece of the split graph, compiled by the backend on its first call (with the real
    values of that call, in the grad mode and autocast state the frame's guards fix)."""

    def __init__(self, gm: Any, compile_one: Callable[[Any, list[Any]], Callable[..., Any]]) -> None:
        self.gm = gm
        self.range_name: str = gm.meta["pyjit_range_name"]
        self._compile_one = compile_one
        self._fn: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            with self._lock:
                if self._fn is None:
                    self._fn = self._compile_one(self.gm, list(args))
                fn = self._fn
        if profiler.active():
            with profiler.record(self.range_name):
                return fn(*args)
        return fn(*args)


class SplitGraph:
    """Runs the subgraphs of a split graph in order, passing values between them by slot."""

    def __init__(self, root: Any, n_inputs: int, attrs: list[tuple[int, str]], steps: list[tuple[_Subgraph, list[int],
                 list[int], list[int]]], out_spec: Any, out_leaves: list[Any], n_slots: int) -> None:
        self._root = root              # the graph module get_attr targets are read from
        self._n_inputs = n_inputs
        self._attrs = attrs            # (slot, target) of get_attr nodes
        self._steps = steps            # (subgraph, input slots, output slots, slots dead after it)
        self._out_spec = out_spec
        self._out_leaves = out_leaves  # slot index (int) or ('const', value)
        self._n_slots = n_slots
        self.subgraphs = [s for s, _, _, _ in steps]

    def __call__(self, *args: Any) -> Any:
        from torch.utils import _pytree as pytree

        vals: list[Any] = [None] * self._n_slots
        vals[:self._n_inputs] = args
        for slot, target in self._attrs:
            vals[slot] = _fetch_attr(self._root, target)  # read each call, as the graph would
        for sub, ins, outs, dead in self._steps:
            results = sub(*[vals[i] for i in ins])
            for slot, value in zip(outs, results):
                vals[slot] = value
            for slot in dead:
                vals[slot] = None  # drop references early: activations die with their last user
        leaves = [vals[x] if isinstance(x, int) else x[1] for x in self._out_leaves]
        return pytree.tree_unflatten(leaves, self._out_spec)


def split_graph(gm: Any, assign: dict[Any, int], num: int, ready: dict[Any, int],
                compile_one: Callable[[Any, list[Any]], Callable[..., Any]]) -> SplitGraph:
    """Cut ``gm`` into ``num`` contiguous subgraphs by ``assign`` (compute node -> index).

    Each subgraph takes its parameters in gradient-ready order (``ready``), after its other
    inputs: autograd runs a backward node's gradient accumulators in input order, and DDP
    rebuilds its buckets in the order they run, so the buckets it rebuilds are the planned ones."""
    import torch
    import torch.fx
    from torch.utils import _pytree as pytree

    nodes = list(gm.graph.nodes)
    slot: dict[Any, int] = {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for n in placeholders:
        slot[n] = len(slot)
    attrs: list[tuple[int, str]] = []
    for n in nodes:
        if n.op == "get_attr":
            slot[n] = len(slot)
            attrs.append((slot[n], n.target))
    output = next(n for n in nodes if n.op == "output")
    parts: list[list[Any]] = [[] for _ in range(num)]
    for n in nodes:
        if n in assign:
            parts[assign[n]].append(n)
    steps = []
    last_use: dict[int, int] = {}
    pending = []
    for index, part in enumerate(parts):
        members = set(part)
        graph = torch.fx.Graph()
        env: dict[Any, Any] = {}
        inputs: list[Any] = []
        taken: set[Any] = set()
        for n in part:
            for a in n.all_input_nodes:
                if a not in members and a not in taken:
                    taken.add(a)
                    inputs.append(a)
        inputs.sort(key=lambda a: ready.get(a, -1))  # stable: other inputs keep their order
        for a in inputs:
            ph = graph.placeholder(a.name)
            ph.meta = dict(a.meta)
            env[a] = ph
        for n in part:
            env[n] = graph.node_copy(n, lambda a: env[a])
        outs = [n for n in part if any(u not in members for u in n.users)]
        for n in outs:
            value = n.meta.get("example_value", n.meta.get("val"))
            if value is not None and not isinstance(value, torch.Tensor):
                raise NotSplittable(f"{n.format_node()} passes a {type(value).__name__} to a later subgraph")
        graph.output(tuple(env[n] for n in outs))
        sub_gm = torch.fx.GraphModule(gm, graph, class_name=f"DDPSubgraph{index}")
        # Profiler ranges: "pyjit: <frame> graph <n> piece <i>" and "... backward".
        sub_gm.meta["pyjit_range_name"] = f"{gm.meta.get('pyjit_range_name', 'pyjit: DDP graph')} piece {index}"
        if gm.meta.get(_MODULES_TRAINING):
            sub_gm.meta[_MODULES_TRAINING] = True
        if gm.meta.get(_INPUTS_GUARDED) and not attrs:
            # Every input of a piece is an input of the whole graph, which the frame's guards
            # pin, or an output of an earlier piece: a deterministic function of those inputs
            # (static sizes), so its type, layout and requires_grad are the same on every call.
            # The piece then skips the backend's per-call input check, as the whole graph would.
            sub_gm.meta[_INPUTS_GUARDED] = True
        for n in outs:
            slot[n] = len(slot)
        ins = [slot[a] for a in inputs]
        for s in ins:
            last_use[s] = index
        pending.append((_Subgraph(sub_gm, compile_one), ins, [slot[n] for n in outs]))
    out_struct = torch.fx.map_arg(output.args[0], lambda a: _SlotRef(slot[a]))  # type: ignore[arg-type,return-value]
    flat, spec = pytree.tree_flatten(out_struct, is_leaf=lambda x: isinstance(x, _SlotRef))
    leaves = [x.slot if isinstance(x, _SlotRef) else ("const", x) for x in flat]
    kept = {x for x in leaves if isinstance(x, int)}
    for index, (sub, ins, outs) in enumerate(pending):
        dead = sorted(s for s, last in last_use.items() if last == index and s not in kept)
        steps.append((sub, ins, outs, dead))
    return SplitGraph(gm, len(placeholders), attrs, steps, spec, leaves, len(slot))


class NotSplittable(Exception):
    """The graph cannot be cut at the planned places (the reason says where)."""


@dataclasses.dataclass(frozen=True)
class _SlotRef:
    slot: int


def note_not_split(reason: str) -> None:
    """A training graph compiled inside a DDP forward that is not split: say why on ``ddp``."""
    if config.ddp_split and active_ddp_module() is not None:
        log.info("DDP: training graph not split at buckets (%s): one backward node, all-reduces "
                 "start when its backward ends", reason)


def maybe_split(gm: Any, example_inputs: Sequence[Any],
                compile_one: Callable[[Any, list[Any]], Callable[..., Any]]) -> Callable[..., Any] | None:
    """The split callable for a training graph compiled inside a DDP forward, else None (the
    caller compiles one graph)."""
    if not config.ddp_split:
        return None
    ddp = active_ddp_module()
    if ddp is None:
        return None
    planned = plan_split(gm, example_inputs, ddp)
    if planned is None:
        return None
    plan, assign, ready = planned
    _log_plan(plan)
    split = None
    if plan.num_subgraphs >= 2:
        try:
            split = split_graph(gm, assign, plan.num_subgraphs, ready, compile_one)
        except NotSplittable as e:
            note_not_split(str(e))
            return None
    plans.append(plan)  # the plan in force: one graph for one bucket, else the split
    del plans[:-_PLANS_KEPT]
    return split
