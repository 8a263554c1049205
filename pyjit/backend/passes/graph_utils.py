"""Helpers shared by the aten-graph passes: node values, constant folding of small subgraphs,
matmul operand unwrapping, and inlining a traced replacement into a graph.

All of it works on the functional aten graph ``trace_to_aten`` produces, whose nodes carry
fake-tensor values in ``node.meta["val"]``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch
import torch.fx
from torch.fx import Node

aten = torch.ops.aten

# Ops that only reshape their input without touching values (for walking through views).
RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
# make_fx's name for a tensor literal created inside the traced code (``torch.tensor(...)``):
# a fresh value on every eager call, so a true constant (unlike ``_param_constant*``).
_LITERAL_PREFIX = "_tensor_constant"
# The largest constant subgraph value evaluated at compile time (elements).
_MAX_CONSTANT_NUMEL = 1 << 22


def val(node: Any) -> Any:
    """The fake value of ``node`` (None for non-nodes or nodes without one)."""
    return node.meta.get("val") if isinstance(node, Node) else None


def shape(node: Any) -> tuple[Any, ...] | None:
    """``node``'s sizes: ints, or ``SymInt`` s in a graph with symbolic sizes (never made
    concrete here: ``int()`` would specialise the symbol to its example value)."""
    v = val(node)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def is_target(node: Any, *targets: Any) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def broadcasts_into(small: Sequence[int], big: Sequence[int]) -> bool:
    """True when ``small`` broadcasts to exactly ``big`` (the broadcast result is ``big`` itself)."""
    if len(small) > len(big):
        return False
    for s, b in zip(reversed(small), reversed(big)):
        if s != b and s != 1:
            return False
    return True


def constant_value(gm: torch.fx.GraphModule, node: Any) -> torch.Tensor | float | None:
    """``node``'s real value when it depends on no graph input, module state or random op, else None.

    Python numbers are returned as they are. Small subgraphs only (``_MAX_CONSTANT_NUMEL``):
    the values are computed here, at compile time, on the graph's device.
    """
    if isinstance(node, (int, float, bool)):
        return node
    if not isinstance(node, Node):
        return None
    order: list[Node] = []
    seen: set[Node] = set()

    def visit(n: Node) -> bool:
        if n in seen:
            return True
        seen.add(n)
        if n.op == "placeholder" or n.op not in ("call_function", "get_attr"):
            return False
        if n.op == "get_attr" and not str(n.target).startswith(_LITERAL_PREFIX):
            # A module's parameter or buffer (``_param_constant*`` ...): the compiled code reads
            # it by reference, so an in-place update must be seen -- never baked in.
            return False
        if n.op == "call_function":
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags:
                return False
            v = val(n)
            if isinstance(v, torch.Tensor):
                numel = v.numel()
                if not isinstance(numel, int) or numel > _MAX_CONSTANT_NUMEL:
                    return False  # symbolic sizes depend on the inputs: never a constant
            for inp in n.all_input_nodes:
                if not visit(inp):
                    return False
        order.append(n)
        return True

    if not visit(node):
        return None
    env: dict[Node, Any] = {}
    try:
        for n in order:
            if n.op == "get_attr":
                env[n] = getattr(gm, str(n.target))
                continue
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
            env[n] = n.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - an op that cannot run eagerly here is simply not constant
        return None
    return env[node]


def scalar_constant(gm: torch.fx.GraphModule, node: Any) -> float | None:
    """A one-element constant (Python number or a constant 0-d/1-element tensor) as a float."""
    value = constant_value(gm, node)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype.is_floating_point:
        return float(value.item())
    return None


def matmul_operands(node: Node) -> tuple[Node, Node, Node, list[Node]] | None:
    """For ``node`` = the value of ``a @ b`` on batched operands: ``(a, b, bmm, internal nodes)``.

    ``torch.matmul`` on tensors of 3+ dims traces to ``expand -> view -> bmm -> _unsafe_view``;
    the returned ``a``/``b`` are the tensors before that plumbing, with the same batch dims as
    the result (broadcasting matmuls are not unwrapped). ``internal`` lists ``node`` and the
    plumbing between ``bmm`` and ``node`` (not the operands' own views).
    """
    out_shape = shape(node)
    if out_shape is None or len(out_shape) < 3:
        return None
    internal = [node]
    bmm = node
    if is_target(node, *RESHAPES):
        bmm = node.args[0]
        internal.append(bmm)
    if not is_target(bmm, aten.bmm.default):
        return None
    batch = out_shape[:-2]
    a = operand_before_bmm(bmm.args[0], batch)
    b = operand_before_bmm(bmm.args[1], batch)
    if a is None or b is None:
        return None
    return a, b, bmm, internal


def operand_before_bmm(arg: Any, batch: tuple[int, ...]) -> Node | None:
    """The batched operand behind ``arg`` (an argument of a ``bmm``) with ``batch`` dims, or None.

    ``torch.matmul`` feeds ``bmm`` through ``view(expand(x))`` or, for operands whose layout
    ``bmm`` cannot take as a view, ``_unsafe_view(clone(expand(x)))``; when the expand is a no-op
    (no broadcast) that plumbing only copies ``x``, so ``x`` itself is returned. Otherwise ``arg``
    is the operand when it already has ``batch`` dims (a direct ``torch.bmm``).
    """
    inner = arg
    if is_target(inner, *RESHAPES):
        inner = inner.args[0]
    if is_target(inner, aten.clone.default):
        inner = inner.args[0]
    if is_target(inner, aten.expand.default) and shape(inner.args[0]) == shape(inner):
        x = inner.args[0]
        if _has_batch(x, batch):
            return x
    return arg if _has_batch(arg, batch) else None


def _has_batch(node: Any, batch: tuple[int, ...]) -> bool:
    s = shape(node)
    return s is not None and len(s) == len(batch) + 2 and s[:-2] == batch


def only_used_by(nodes: Iterable[Node], allowed: set[Node]) -> bool:
    """True when every user of every node in ``nodes`` is in ``allowed``."""
    return all(u in allowed for n in nodes for u in n.users)


def inline_traced(gm: torch.fx.GraphModule, sub: torch.fx.GraphModule, inputs: Sequence[Node],
                  before: Node) -> Node:
    """Copy ``sub``'s nodes into ``gm`` before ``before``, its placeholders bound to ``inputs``.

    Returns the node of ``sub``'s single output. Constants of ``sub`` (``get_attr``) are copied
    onto ``gm`` under fresh names.
    """
    graph = gm.graph
    env: dict[Node, Node] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ValueError(f"replacement takes {len(placeholders)} inputs, {len(inputs)} given")
    env.update(zip(placeholders, inputs))
    result: Node | None = None
    with graph.inserting_before(before):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                out = n.args[0]
                if isinstance(out, (list, tuple)):
                    (out,) = out
                result = env[out]
                continue
            if n.op == "get_attr":
                name = _fresh_attr(gm, str(n.target))
                setattr(gm, name, getattr(sub, str(n.target)))
                new = graph.get_attr(name)
                new.meta.update(n.meta)
                env[n] = new
                continue
            env[n] = graph.node_copy(n, lambda a: env[a])
    assert result is not None
    return result


def _fresh_attr(gm: torch.fx.GraphModule, base: str) -> str:
    i = 0
    while hasattr(gm, f"{base}_pass{i}"):
        i += 1
    return f"{base}_pass{i}"


def trace_replacement(fn: Callable[..., Any], inputs: Sequence[Node]) -> torch.fx.GraphModule:
    """The aten graph of ``fn`` applied to the fake values of ``inputs`` (pyjit's decompositions)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..decompositions import decomposition_table

    vals = [val(n) for n in inputs]
    modes = {id(v.fake_mode): v.fake_mode for v in vals if hasattr(v, "fake_mode")}
    if len(modes) != 1:
        raise ValueError("replacement inputs carry no single fake mode")
    fake_mode = next(iter(modes.values()))
    with fake_mode, torch.no_grad():
        return make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="real")(*vals)


def known_true(cond: Any) -> bool:
    """``cond`` holds for every size the graph accepts (a plain bool, or a ``SymBool`` that the
    shape environment proves without adding a guard); False when unknown."""
    if isinstance(cond, bool):
        return cond
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(cond))


# Ops run only to raise on bad input (``linalg.cholesky`` of a matrix that is not positive
# definite checks ``info`` this way): no node reads their result, but dropping them as dead
# code would turn eager's error into a silent wrong result. FX already keeps ``_assert_async``
# and its relatives (``Node.is_impure``).
_ERROR_CHECKS = frozenset({aten._linalg_check_errors.default, aten._assert_async.default, aten._assert_async.msg,
                           aten._assert_scalar.default})


def is_error_check(target: Any) -> bool:
    """``target`` only raises on bad input (its extern call must run although nothing reads it)."""
    return target in _ERROR_CHECKS


def is_random(target: Any) -> bool:
    """``target`` draws from torch's generator (dropout, rand...): it must run, in program
    order, even when nothing reads it, or every later draw would differ from eager's."""
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def has_effect(node: Node) -> bool:
    """``node`` must stay in the graph although nothing reads it."""
    return node.is_impure() or (node.op == "call_function" and (is_error_check(node.target)
                                                                 or is_random(node.target)))


def eliminate_dead_code(graph: torch.fx.Graph) -> None:
    """``graph.eliminate_dead_code`` keeping error checks (:func:`has_effect`)."""
    graph.eliminate_dead_code(is_impure_node=has_effect)


def finish_rewrite(gm: torch.fx.GraphModule) -> None:
    """After a pass replaced nodes: drop what became dead, check the graph, regenerate its code."""
    eliminate_dead_code(gm.graph)
    gm.graph.lint()
    gm.recompile()
