"""Place each collective's wait as late as the graph allows.

A functional collective (``torch.ops._c10d_functional.all_reduce`` ...) starts the
communication and returns a tensor that is only valid after ``wait_tensor``; the tracer records
the wait right after the collective, as the program's order has it. Moving the wait down to
just before the first node that reads its result lets the graph issue the compute that does not
depend on the collective between its start and its wait (the scheduler emits nodes in graph
order where dependencies allow, ``scheduler._dependency_order``), so communication overlaps
that compute. Collectives themselves keep their program order: every rank runs the same graph,
so they are issued in the same order everywhere.
"""
from __future__ import annotations

import torch
import torch.fx

_WAIT = torch.ops._c10d_functional.wait_tensor.default if torch.distributed.is_available() else None


def sink_waits(gm: torch.fx.GraphModule) -> int:
    """Move every ``wait_tensor`` node, and every pure node computed from one, to just before
    its first user (users first, so a chain moves as a whole); returns how many nodes moved.

    The pure dependents move too because functionalization turns the program's
    ``y.copy_(wait)`` into a pure ``copy`` right after the wait: leaving it there would pin the
    wait's result, and the work after it, at the collective's program position."""
    from .graph_utils import has_effect

    if _WAIT is None:
        return 0
    graph = gm.graph
    nodes = list(graph.nodes)
    dependent: set[torch.fx.Node] = set()
    for node in nodes:
        if node.op == "call_function" and (node.target is _WAIT or any(a in dependent for a in node.all_input_nodes)):
            dependent.add(node)
    order = {n: i for i, n in enumerate(nodes)}
    moved = 0
    for node in reversed(nodes):
        # torch marks wait_tensor impure (so dead-code elimination keeps it); moving it later,
        # still before every reader, is what it is for.
        if node not in dependent or not node.users or (node.target is not _WAIT and has_effect(node)):
            continue
        first = min(node.users, key=lambda u: order[u])
        if node.next is first:
            continue
        first.prepend(node)  # fx moves a node that is already in the graph
        order = {n: i for i, n in enumerate(graph.nodes)}
        moved += 1
    if moved:
        graph.lint()
        gm.recompile()
    return moved
