"""Split a joint forward/backward graph into a forward and a backward graph.

The forward graph computes the user outputs, the new values of mutated inputs and the *saved*
values; the backward graph takes the saved values and the tangents and returns the grads,
recomputing whatever else it needs from the saved values.

Two partitioners choose what to save:

- ``"reference"`` (save what the backward uses): every value computed without tangents is
  computed in the forward, and every such value the backward reads is saved. This is what
  eager autograd does.
- ``"min_cut"``: a max-flow/min-cut (``networkx``) over the data-flow graph. Each value is an
  edge ``in -> out`` of capacity its size in bytes; primals and values that must not be
  recomputed (anything but cheap pointwise, view and constant ops; random ops never; values
  that both the forward and the backward read from memory, e.g. the input of a matmul in
  each) hang from the source; values the backward reads hang from the sink. The cut edges are the values to
  save, so the bytes saved are minimal among partitions that only recompute cheap ops. Since
  the reference partition is one such cut, min-cut never saves more bytes than it.

``partition_joint`` returns both graphs and a :class:`PartitionReport` with the bytes each
partitioner would save (``last_report`` keeps the latest one, for tests and benchmarks).
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Iterable, Sequence

import torch
import torch.fx

from ...logs import get_logger
from ..passes.graph_utils import is_error_check, is_random
from .joint import JointGraph

aten = torch.ops.aten
log = get_logger("compile_times")

# Ops the min-cut partitioner may recompute in the backward besides pointwise ones: views
# (free) and constants without inputs.
_VIEW_OPS = {
    aten.t.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.permute.default,
    aten.transpose.int, aten.select.int, aten.slice.Tensor, aten.as_strided.default, aten.alias.default,
    aten.detach.default, aten._to_copy.default, aten.clone.default,
}
_CONSTANT_OPS = {aten.full.default, aten.scalar_tensor.default, aten.zeros.default, aten.ones.default}


@dataclasses.dataclass
class PartitionReport:
    """Bytes of saved values under each partitioner, and what the chosen one saved/recomputed."""
    partition: str
    saved_bytes: int
    reference_bytes: int
    min_cut_bytes: int
    saved: list[str]
    recomputed: list[Any]  # targets (OpOverloads) of forward values the backward recomputes


@dataclasses.dataclass
class Partitioned:
    """``fw_gm``: primals -> user outputs, mutated inputs' new values, saved tensors.
    ``bw_gm``: saved tensors, saved sizes, tangents -> grads of the primals that have one."""
    fw_gm: torch.fx.GraphModule
    bw_gm: torch.fx.GraphModule
    num_saved: int  # saved tensors
    saved_primals: list[int]  # per saved tensor: the primal index it is, or -1
    report: PartitionReport
    # The forward without saved values (user outputs and mutated inputs' new values only), for
    # calls whose backward may never come; None when the forward cannot be replayed in the
    # backward (random ops: the replay would draw other numbers).
    inference_gm: torch.fx.GraphModule | None = None
    # Symbolic graphs: the size scalars the backward reads (SymInt/SymFloat values of forward
    # nodes), passed to it after the saved tensors; the runtime evaluates them from the
    # primals' sizes (aot/symbolic.py). Empty for static graphs.
    saved_sizes: list[Any] = dataclasses.field(default_factory=list)


last_report: PartitionReport | None = None


def recomputable(node: torch.fx.Node) -> bool:
    """Cheap to recompute in the backward: pointwise, view or constant; never random."""
    if node.op == "placeholder":
        return False
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return torch.Tag.pointwise in target.tags or target in _VIEW_OPS or target in _CONSTANT_OPS


def node_bytes(node: torch.fx.Node) -> float:
    """Bytes of the value ``node`` computes: a tensor's at its sizes' example values when they
    are symbolic (never a guard on them); 0 for a size scalar (``sym_size``: saved for free, the
    runtime computes it from the inputs' sizes); infinite for anything else."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return float(_example_int(val.numel()) * val.element_size())
    if is_size_value(node):
        return 0.0
    return math.inf


def _example_int(value: Any) -> int:
    """A size's example value: no guard is added (``int()`` of a SymInt would specialise it)."""
    if isinstance(value, torch.SymInt):
        node = value.node
        return int(node.hint if node.hint is not None else node.shape_env.size_hint(node.expr))
    return int(value)


def is_size_value(node: torch.fx.Node) -> bool:
    """``node`` computes a symbolic size scalar (``sym_size``, ``sym_numel``, arithmetic on them)."""
    return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool))


class _Roles:
    """Which joint-graph nodes are primals, tangents, tangent-dependent, and the outputs."""

    def __init__(self, joint: JointGraph) -> None:
        graph = joint.gm.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.primals = placeholders[:joint.num_primals]
        self.tangents = placeholders[joint.num_primals:]
        self.output = next(n for n in graph.nodes if n.op == "output")
        outs = list(self.output.args[0])
        self.fw_outputs: list[torch.fx.Node] = outs[:joint.num_fw_outputs]
        self.bw_outputs: list[torch.fx.Node] = outs[joint.num_fw_outputs:]
        self.backward: set[torch.fx.Node] = set(self.tangents)
        for n in graph.nodes:
            if n.op != "output" and any(a in self.backward for a in n.all_input_nodes):
                self.backward.add(n)
        self.order = {n: i for i, n in enumerate(graph.nodes)}

    def forward_nodes(self) -> list[torch.fx.Node]:
        return [n for n in self.order if n.op != "output" and n not in self.backward]

    def read_by_backward(self, n: torch.fx.Node) -> bool:
        return any(u in self.backward for u in n.users) or n in self.bw_outputs


def reference_saved(roles: _Roles) -> list[torch.fx.Node]:
    return [n for n in roles.forward_nodes() if roles.read_by_backward(n)]


# Tie-break of the min-cut: saving a value no forward kernel writes to memory anyway (a fused
# intermediate) costs the forward an extra write, saving one already in memory (a matmul's
# output, a primal) costs none; among cuts of (almost) equal bytes prefer the latter. E.g. the
# GELU derivative of an MLP: its input is the matmul's output plus the bias, so saving that
# output and the bias (in memory anyway) beats saving a new tensor of the same size.
_FUSED_INTERMEDIATE_PENALTY = 1e-3


def min_cut_saved(roles: _Roles) -> list[torch.fx.Node]:
    """The min-cut's saved values, never more bytes than the reference (see the tie-break)."""
    cut = _min_cut(roles, _FUSED_INTERMEDIATE_PENALTY)
    if sum(node_bytes(n) for n in cut) > sum(node_bytes(n) for n in reference_saved(roles)):
        cut = _min_cut(roles, 0.0)
    return cut


def _min_cut(roles: _Roles, penalty: float) -> list[torch.fx.Node]:
    import networkx as nx

    flow = nx.DiGraph()
    flow.add_node("source")
    flow.add_node("sink")
    for n in roles.forward_nodes():
        name = n.name
        if n in roles.primals or not recomputable(n) or _read_from_memory_both_ways(n, roles):
            flow.add_edge("source", name + "_in")  # no capacity attribute: infinite
        weight = node_bytes(n)
        if penalty and n not in roles.primals and recomputable(n) and not _memory_readers(n, roles)[0]:
            weight *= 1.0 + penalty
        if math.isinf(weight):
            flow.add_edge(name + "_in", name + "_out")
        else:
            flow.add_edge(name + "_in", name + "_out", capacity=weight)
        if roles.read_by_backward(n):
            flow.add_edge(name + "_out", "sink")
        for user in n.users:
            if user.op != "output" and user not in roles.backward:
                flow.add_edge(name + "_out", user.name + "_in")
    value, (reachable, _) = nx.minimum_cut(flow, "source", "sink")
    if math.isinf(value):
        raise NotImplementedError("min-cut partition found no finite cut")
    return [n for n in roles.forward_nodes()
            if n.name + "_in" in reachable and n.name + "_out" not in reachable]


def _memory_readers(n: torch.fx.Node, roles: _Roles) -> tuple[bool, bool]:
    """(a forward op, a backward op) reads ``n`` from memory: a matmul, a convolution, any op no
    kernel fuses, or the graph's output; looking through views (``t`` of a forward value is a
    forward node even when only the backward's matmul reads it)."""
    forward = backward = False
    for u in n.users:
        if u.op == "call_function" and u.target in _VIEW_OPS:
            f, b = _memory_readers(u, roles)
            forward, backward = forward or f, backward or b
        elif u.op == "output" or (u.op == "call_function" and not recomputable(u)):
            if u in roles.backward:
                backward = True
            else:
                forward = True
    return forward, backward


def _read_from_memory_both_ways(n: torch.fx.Node, roles: _Roles) -> bool:
    """A value the forward writes to memory anyway (a matmul reads it) and the backward needs in
    memory too (a matmul of the backward reads it, e.g. GELU's output for the weight gradient):
    saving it costs no traffic, while recomputing it costs the backward a kernel writing it
    again (measured on the GPT-2 training step: GELU backward 67 us/layer recomputing vs 47
    saving). Such values are never recomputed; the min-cut still minimises the rest."""
    return all(_memory_readers(n, roles))


def _ancestors(outputs: Iterable[torch.fx.Node], stop: set[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = [n for n in outputs if isinstance(n, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack.extend(n.all_input_nodes)
    return seen


# gm.meta key of the graphs a partition makes: functional aten graphs, decomposed by the joint
# trace, whose nodes carry their traced values (compile_fx then need not trace them again).
ATEN_FUNCTIONAL = "pyjit_aten_functional"


def _extract(joint_gm: torch.fx.GraphModule, roles: _Roles, inputs: list[torch.fx.Node],
             outputs: list[Any], name: str, checks: Sequence[torch.fx.Node] = ()
             ) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """A graph with ``inputs`` as placeholders computing ``outputs`` and running the error
    ``checks`` (nodes nothing reads); also the copied nodes."""
    stop = set(inputs)
    needed = _ancestors([*outputs, *checks], stop)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    copied: list[torch.fx.Node] = []
    for n in roles.order:
        if n not in needed or n in env:
            continue
        if n.op == "placeholder":
            raise NotImplementedError(f"partition error: {name} graph needs {n.name}, which it does not receive")
        env[n] = graph.node_copy(n, lambda a: env[a])
        copied.append(n)
    graph.output([env[o] if isinstance(o, torch.fx.Node) else o for o in outputs])
    gm = torch.fx.GraphModule(joint_gm, graph, class_name=name)
    gm.meta[ATEN_FUNCTIONAL] = True
    return gm, copied


def partition_joint(joint: JointGraph, partition: str = "min_cut") -> Partitioned:
    """Forward and backward graphs of ``joint`` with the values ``partition`` chooses saved."""
    global last_report
    if partition not in ("min_cut", "reference"):
        raise ValueError(f"unknown partition {partition!r}: use 'min_cut' or 'reference'")
    roles = _Roles(joint)
    reference = reference_saved(roles)
    cut = min_cut_saved(roles) if roles.bw_outputs else []
    saved = cut if partition == "min_cut" else reference
    saved.sort(key=roles.order.__getitem__)
    # The forward's error checks (``linalg.cholesky``'s info check) run in the forward graphs,
    # which compute what they read; they raise there as eager raises in its forward. So do its
    # random ops that nothing reads (their draws move the generator as in eager).
    checks = [n for n in roles.forward_nodes()
              if n.op == "call_function" and (is_error_check(n.target) or is_random(n.target))]
    # Size scalars (symbolic graphs) are not forward outputs: the backward gets them as inputs.
    sizes = [n for n in saved if is_size_value(n)]
    saved = [n for n in saved if not is_size_value(n)]
    fw_gm, fw_nodes = _extract(joint.gm, roles, roles.primals, roles.fw_outputs + saved, "pyjit_forward", checks)
    bw_gm, bw_nodes = _extract(joint.gm, roles, saved + sizes + roles.tangents, roles.bw_outputs, "pyjit_backward")
    recomputed = [n for n in bw_nodes if n not in roles.backward]
    report = PartitionReport(partition, int(sum(node_bytes(n) for n in saved)),
                             int(sum(node_bytes(n) for n in reference)), int(sum(node_bytes(n) for n in cut)),
                             [n.name for n in saved], [n.target for n in recomputed])
    if partition == "min_cut":
        bad = [n.format_node() for n in recomputed if not recomputable(n)]
        if bad:  # the cut guarantees this; a violation is a pyjit bug
            raise AssertionError(f"min-cut partition recomputes expensive ops: {bad}")
    last_report = report
    log.info("partition %s: saved %d bytes (reference %d, min-cut %d), recomputed %d ops", partition,
             report.saved_bytes, report.reference_bytes, report.min_cut_bytes, len(recomputed))
    saved_primals = [roles.primals.index(n) if n in roles.primals else -1 for n in saved]
    inference_gm = None
    if not any(is_random(n.target) for n in fw_nodes):
        inference_gm, _ = _extract(joint.gm, roles, roles.primals, roles.fw_outputs, "pyjit_forward_inference",
                                   checks)
    return Partitioned(fw_gm, bw_gm, len(saved), saved_primals, report, inference_gm,
                       [n.meta["val"] for n in sizes])
