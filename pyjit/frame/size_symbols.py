"""Size symbols as graph inputs for custom backends (torch.compile's ``SymInt`` placeholders).

A symbolic graph reads its sizes from its tensor inputs (``x.size()[0]`` nodes): pyjit's own
backends take it that way, with no extra argument per call. A custom backend written for
torch.compile expects what torch.compile hands it: one ``SymInt`` placeholder per size symbol,
placed before the first tensor input that carries it, with an ``int`` example input, and every
read of that size in the graph replaced by the placeholder. :func:`lift_size_symbols` rewrites
the graph that way and returns an adapter that wraps the backend's compiled callable, so the
replacement code keeps calling it with the tensors only (the adapter adds ``x.shape[d]``).

Backends that read sizes from their tensors (pyjit's own) declare
``pyjit_size_placeholders = False`` and get the graph unchanged.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx


def wants_size_placeholders(backend: Any) -> bool:
    return bool(getattr(backend, "pyjit_size_placeholders", True))


def _symbol(value: Any) -> Any:
    """The sympy symbol of a ``SymInt`` that is a plain symbol (not an expression), else None."""
    if not isinstance(value, torch.SymInt):
        return None
    expr = value.node.expr
    return expr if getattr(expr, "is_Symbol", False) else None


def lift_size_symbols(gm: torch.fx.GraphModule, example_inputs: list[Any]
                      ) -> tuple[torch.fx.GraphModule, list[Any], Callable[[Callable[..., Any]], Callable[..., Any]]] | None:
    """The graph with one placeholder per size symbol of its tensor inputs, its example inputs,
    and the adapter for the compiled callable; None when no input has a symbolic size."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    # Each symbol: where its value is read at run time (input index, dim) and its new placeholder.
    where: dict[Any, tuple[int, int]] = {}
    new_nodes: dict[Any, torch.fx.Node] = {}
    order: list[tuple[str, int, int]] = []  # the compiled callable's arguments: ("size", i, d) / ("arg", i, 0)
    for i, node in enumerate(placeholders):
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor) and isinstance(example_inputs[i], torch.Tensor):
            for d, size in enumerate(value.shape):
                sym = _symbol(size)
                if sym is None or sym in where:
                    continue
                where[sym] = (i, d)
                with graph.inserting_before(node):
                    ph = graph.placeholder(str(sym))
                ph.meta["example_value"] = size
                new_nodes[sym] = ph
                order.append(("size", i, d))
        order.append(("arg", i, 0))
    if not where:
        return None
    for node in list(graph.nodes):
        if node.op not in ("call_method", "call_function") or node in new_nodes.values():
            continue
        sym = _symbol(node.meta.get("example_value"))
        if sym is None or sym not in new_nodes:
            continue
        if _is_size_read(node):
            node.replace_all_uses_with(new_nodes[sym])
            base = node.args[0]
            graph.erase_node(node)
            # (never eliminate_dead_code: it drops unused in-place method calls such as x.mul_(2))
            if isinstance(base, torch.fx.Node) and base.op != "placeholder" and not base.users:
                graph.erase_node(base)  # the x.size() the read indexed
    graph.lint()
    lifted = torch.fx.GraphModule(gm, graph, gm.__class__.__name__)
    lifted.meta.update(gm.meta)
    examples = [int(example_inputs[i].shape[d]) if kind == "size" else example_inputs[i] for kind, i, d in order]
    plan = tuple(order)

    def adapt(compiled: Callable[..., Any]) -> Callable[..., Any]:
        def with_size_symbols(*args: Any) -> Any:
            return compiled(*[args[i].shape[d] if kind == "size" else args[i] for kind, i, d in plan])

        with_size_symbols.__name__ = getattr(compiled, "__name__", "compiled")
        return with_size_symbols

    return lifted, examples, adapt


def _is_size_read(node: torch.fx.Node) -> bool:
    """``x.size(d)``, ``x.size()[d]``, ``x.shape[d]`` or ``aten.sym_size(x, d)``."""
    import operator

    if node.op == "call_method" and node.target == "size" and len(node.args) == 2:
        return True
    if node.op == "call_function" and node.target is operator.getitem:
        base = node.args[0]
        return isinstance(base, torch.fx.Node) and (
            (base.op == "call_method" and base.target == "size" and len(base.args) == 1)
            or (base.op == "call_function" and base.target is getattr) and base.args[1:] == ("shape",))
    return node.op == "call_function" and node.target is torch.ops.aten.sym_size.int
