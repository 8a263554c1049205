"""Grad-mode regions of a captured graph, made explicit for the joint trace.

A captured graph that needs autograd may contain ``torch._C._set_grad_enabled(False)`` ...
``(True)``: a ``with torch.no_grad():`` block, or a function decorated ``@torch.no_grad()``
(the rotary embeddings of transformers' Llama family are). The joint trace (joint.py) replays
the forward's functional aten graph with autograd on, where such a region would be
differentiated. :func:`without_grad_mode_changes` rewrites a copy of the graph so that it means
the same without the mode changes: every value the region computes and a node outside it
reads is ``detach``-ed at the region's edge (eager's values made under ``no_grad`` do not
require grad), and the mode-change calls are dropped.

Refused (``NotImplementedError``: the caller runs the graph as captured, logged): a mode
argument that is not a constant, a graph that ends in another mode than it started in, and an
in-place op inside a no-grad region on a tensor that may require grad (eager mutates it
without recording; replayed with autograd on, the mutation would enter the gradient).
"""
from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ...inplace import is_in_place

_SET_GRAD = (torch._C._set_grad_enabled, torch.set_grad_enabled)
# Nodes that name a value rather than compute one: a parameter read inside a region is still
# the parameter (it requires grad in eager too).
_NOT_COMPUTED = ("placeholder", "get_attr", "output")


def detach_values(tree: Any) -> Any:
    """Every tensor in ``tree`` detached (what a value computed under ``no_grad`` is)."""
    return pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, tree)


def detach_copy_values(tree: Any) -> Any:
    """Every tensor in ``tree`` detached into a fresh tensor: the edge of a value that is then
    written in place outside the region. A ``detach`` is a view, so functionalization would
    re-derive the written value as ``detach(new value)`` and lose its gradient, where eager's
    ``x += lin(x)`` on a value made under ``no_grad`` makes ``x`` require grad."""
    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)


def _written_outside(node: torch.fx.Node, no_grad: set[torch.fx.Node]) -> str | None:
    """How a node outside the no-grad regions writes ``node`` in place: ``"directly"``
    (``x += ...``), ``"through a view"`` (``x[0] += ...``), or None."""
    todo: list[tuple[torch.fx.Node, bool]] = [(node, False)]
    seen: set[torch.fx.Node] = set()
    while todo:
        current, viewed = todo.pop()
        for user in current.users:
            if user in no_grad or user in seen or _is_set_grad(user):
                continue
            seen.add(user)
            if _mutates(user) and user.args and user.args[0] is current:
                # ``x[i] = v`` (and ``x[i] += v``, traced as getitem, iadd, setitem) writes a part.
                return "through a view" if viewed or user.target is operator.setitem else "directly"
            value = user.meta.get("example_value", user.meta.get("val"))
            if isinstance(value, torch.Tensor) and value._is_view() and user.args and user.args[0] is current:
                todo.append((user, True))
    return None


def _is_set_grad(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _SET_GRAD


def _mode_argument(node: torch.fx.Node) -> bool:
    mode = node.args[0] if node.args else node.kwargs.get("mode", node.kwargs.get("enabled"))
    if not isinstance(mode, bool):
        raise NotImplementedError(f"grad mode set to a value known only at run time ({node.format_node()})")
    return mode


def _mutates(node: torch.fx.Node) -> bool:
    return node.op in ("call_method", "call_function") and is_in_place(node.op, node.target, node.kwargs)


_UNKNOWN = object()  # a written tensor pyjit cannot place: treated as requiring grad


def _may_require_grad(gm: torch.fx.GraphModule, node: Any) -> bool:
    if node is None:
        return False  # made inside the region: never requires grad
    if not isinstance(node, torch.fx.Node):
        return True
    if node.op == "get_attr":
        obj: Any = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part, None)
        return isinstance(obj, torch.Tensor) and obj.requires_grad
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    return True  # unknown: assume it may



def _written_tensor(node: Any, no_grad: set[torch.fx.Node]) -> Any:
    """The tensor an in-place op on ``node`` writes: through views made inside the region
    (``h[0].zero_()``) to the tensor they view. A value the region computed afresh does not
    require grad (returned as None); a tensor from outside the region is returned."""
    while isinstance(node, torch.fx.Node) and node in no_grad:
        value = node.meta.get("example_value", node.meta.get("val"))
        if not isinstance(value, torch.Tensor) or not value._is_view():
            return None
        if not node.args:
            return _UNKNOWN
        node = node.args[0]
    return node


def without_grad_mode_changes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm``, or a copy sharing its modules and parameters in which no-grad regions are
    replaced by ``detach`` at their edges (module docstring)."""
    if not any(_is_set_grad(n) for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    initial = mode = torch.is_grad_enabled()
    changes: list[torch.fx.Node] = []
    no_grad: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if _is_set_grad(node):
            mode = _mode_argument(node)
            changes.append(node)
        elif not mode and node.op not in _NOT_COMPUTED:
            no_grad.add(node)
            if _mutates(node) and node.args and _may_require_grad(gm, _written_tensor(node.args[0], no_grad)):
                raise NotImplementedError("an in-place op under no_grad on a tensor that may require grad "
                                          f"({node.format_node()})")
    if mode != initial:
        raise NotImplementedError("the graph ends in another grad mode than it started in")
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in [n for n in graph.nodes if n in no_grad]:  # graph order: stable node names
        outside = [u for u in node.users if u not in no_grad and not _is_set_grad(u)]
        if not outside:
            continue
        edge = detach_values
        written = _written_outside(node, no_grad)
        if written == "through a view":
            # The functional form of that write differentiates through aten.copy (no formula).
            raise NotImplementedError("a value made under no_grad is written in place through a view with "
                                      f"grad enabled ({node.format_node()})")
        if written:
            # Its users outside read a fresh copy (written there in place as in eager); a
            # no-grad region after the write would read the unwritten value: refused.
            first_outside = min(order[u] for u in outside)
            if any(u in no_grad and order[u] > first_outside for u in node.users):
                raise NotImplementedError("a value made under no_grad is written in place with grad enabled "
                                          f"and read again under no_grad ({node.format_node()})")
            edge = detach_copy_values
        with graph.inserting_after(node):
            detached = graph.call_function(edge, (node,))
        detached.meta = {k: v for k, v in node.meta.items() if k in ("stack_trace", "example_value", "val")}
        for user in outside:
            user.replace_input_with(node, detached)
    for node in changes:
        if node.users:
            raise NotImplementedError(f"the result of a grad-mode change is used ({node.format_node()})")
        graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph)
