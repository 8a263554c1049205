"""How each output of a captured graph relates to the graph's inputs in eager, and how a compiled
graph's outputs are made to relate the same way.

Eager gives every tensor a returned relation to the arguments: the argument object itself
(``x.contiguous()`` of a contiguous ``x``, ``x.add_(1)``), a new tensor sharing its memory (a view
such as ``x[0]``, ``x.t()``, whose ``_base`` is ``x``; or ``x.detach()``, which shares memory but is
no view), or a fresh tensor (``torch.cat([x])`` always copies). The caller can observe all three:
``out is x``, a later ``x.mul_(2)`` seen through ``out``, ``out._base``. Compiled graphs do not keep
them by themselves: a lowering may return an input buffer for a ``cat`` of one tensor, and a
functional trace turns ``detach`` into the input.

:func:`output_aliases` reads the relation off the captured graph's fake values
(``meta['example_value']``, what the tracer computed by running each op on fake tensors, so as
eager does). :class:`OutputFixer` compares a compiled graph's outputs with it on the first call
and rebuilds the ones that differ on every call: an input object returned where eager returns a
fresh tensor is copied, an alias is rebuilt as ``as_strided`` of its input (``detach``-ed where
eager's does not require grad, and not a view where eager's is none), and outputs that are views
of one new tensor in eager (``y`` and ``y[:1].expand(3, 2)``) are rebuilt as views of one output.
Graphs whose outputs all relate as in eager pay nothing per call. A graph rebuilt by warm start
(``frame/warm_start.py``) has no fake values: its frame record carries the relations
(:func:`aliases_to_data`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree


@dataclasses.dataclass(frozen=True)
class OutputAlias:
    """What eager returns for one flat graph output. ``input_index`` is None for a fresh tensor."""
    input_index: int | None
    same: bool                 # the input object itself
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset_delta: int          # storage offset relative to the input's
    requires_grad: bool
    is_view: bool              # ``_is_view()`` of eager's tensor (``detach`` shares memory, is no view)
    # A fresh output sharing memory with output ``of_output`` (``y`` and ``y[:1].expand(3, 2)``),
    # which is no view of another; ``offset_delta`` is then relative to that output's offset.
    of_output: int | None = None
    # False for a view made under ``no_grad`` of a tensor that requires grad: it requires grad
    # but has no grad_fn (rebuilt under ``no_grad`` too).
    has_grad_fn: bool = True
    # A fresh output of a graph with symbolic sizes (:func:`fresh_output_views`): ``size`` and
    # ``stride`` are empty, copies keep the compiled value's own dense layout.
    symbolic: bool = False


def _storage_key(t: torch.Tensor) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


def _static(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int) for v in values)


def output_aliases(gm: torch.fx.GraphModule) -> list[OutputAlias] | None:
    """Per flat output of ``gm``, its eager relation to the graph inputs; None when the graph
    carries no fake values for every input and output, or has symbolic sizes (nothing to fix)."""
    graph = getattr(gm, "graph", None)  # a warm-started graph's stand-in has none
    if not isinstance(graph, torch.fx.Graph):
        return None
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next((n for n in graph.nodes if n.op == "output"), None)
    if output is None:
        return None
    inputs = [p.meta.get("example_value") for p in placeholders]
    input_keys = [_storage_key(v) if isinstance(v, torch.Tensor) and v.layout == torch.strided else None
                  for v in inputs]
    leaves = pytree.tree_leaves(output.args[0])
    result: list[OutputAlias] = []
    for leaf in leaves:
        if not isinstance(leaf, torch.fx.Node):
            return None
        val = leaf.meta.get("example_value")
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            return None
        size, stride, offset = tuple(val.shape), tuple(val.stride()), val.storage_offset()
        if not _static(size) or not _static(stride) or not isinstance(offset, int):
            return None
        index: int | None = None
        same = False
        key = _storage_key(val)
        for i, (p, inp) in enumerate(zip(placeholders, inputs)):
            if not isinstance(inp, torch.Tensor):
                continue
            if leaf is p or val is inp:
                index, same = i, True
                break
            if index is None and key == input_keys[i]:
                index = i
        base_offset = inputs[index].storage_offset() if index is not None else 0
        if not isinstance(base_offset, int):
            return None
        result.append(OutputAlias(index, same, size, stride, offset - base_offset, bool(val.requires_grad),
                                  bool(val._is_view()), has_grad_fn=val.grad_fn is not None))
    return _outputs_sharing_memory(result, [leaf.meta["example_value"] for leaf in leaves])


def fresh_output_views(gm: torch.fx.GraphModule) -> list[OutputAlias] | None:
    """:func:`output_aliases` for a graph with symbolic sizes whose outputs share memory with no
    input and no other output (what :func:`symbolic_output_alias` admits): each output is fresh,
    and the only relation left to keep is whether eager's is a view (of a value nobody else holds,
    ``(y * 2)[:, :1]``), which needs no size."""
    graph = getattr(gm, "graph", None)
    if not isinstance(graph, torch.fx.Graph) or symbolic_output_alias(gm) is not None:
        return None
    output = next((n for n in graph.nodes if n.op == "output"), None)
    if output is None:
        return None
    result: list[OutputAlias] = []
    for leaf in pytree.tree_leaves(output.args[0]):
        val = leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            return None
        result.append(OutputAlias(None, False, (), (), 0, bool(val.requires_grad), bool(val._is_view()),
                                  has_grad_fn=val.grad_fn is not None, symbolic=True))
    return result


def symbolic_output_alias(gm: torch.fx.GraphModule) -> str | None:
    """Why a graph's outputs cannot be compiled with symbolic sizes, or None: an output that
    shares memory with an input or with another output in eager (a view). :class:`OutputFixer`
    restores those relations from static sizes and strides only, and a compiled graph returns
    fresh tensors, so a later in-place op on one would not show in the other."""
    graph = getattr(gm, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return None
    output = next((n for n in graph.nodes if n.op == "output"), None)
    if output is None:
        return None
    inputs = {}
    for p in graph.nodes:
        v = p.meta.get("example_value") if p.op == "placeholder" else None
        if isinstance(v, torch.Tensor) and v.layout == torch.strided:
            inputs[_storage_key(v)] = p.target
    seen: dict[Any, torch.fx.Node] = {}
    for leaf in pytree.tree_leaves(output.args[0]):
        val = leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            continue
        key = _storage_key(val)
        if key in inputs:
            return f"output {leaf.name} shares memory with input {inputs[key]} (a view of it)"
        if key in seen and seen[key] is not leaf:  # the same value twice is the same tensor twice
            return f"output {leaf.name} shares memory with output {seen[key].name}"
        seen[key] = leaf
    return None


def _outputs_sharing_memory(result: list[OutputAlias], values: list[torch.Tensor]) -> list[OutputAlias]:
    """Relate fresh outputs that share memory with each other to one of them (the first that is
    no view, else the first): eager returns views of one new tensor."""
    groups: dict[Any, list[int]] = {}
    for k, (alias, val) in enumerate(zip(result, values)):
        if alias.input_index is None:
            groups.setdefault(_storage_key(val), []).append(k)
    for members in groups.values():
        if len(members) < 2:
            continue
        base = next((k for k in members if not values[k]._is_view()), members[0])
        for k in members:
            if k != base:
                delta = values[k].storage_offset() - values[base].storage_offset()
                result[k] = dataclasses.replace(result[k], offset_delta=delta, of_output=base)
    return result


def rebuild_alias(base: torch.Tensor, alias: OutputAlias) -> torch.Tensor:
    """Eager's alias of ``base`` (the input ``alias.input_index``, or a computed value): the
    input itself, a view of it, or (``detach``) a tensor sharing its memory that is no view."""
    if alias.same:
        return base
    if not alias.requires_grad and alias.is_view and base.requires_grad:
        base = base.detach()  # ``x.detach().t()``: a view of a tensor that does not require grad
    if alias.requires_grad and not alias.has_grad_fn and torch.is_grad_enabled():
        with torch.no_grad():
            out = base.as_strided(alias.size, alias.stride, base.storage_offset() + alias.offset_delta)
    else:
        out = base.as_strided(alias.size, alias.stride, base.storage_offset() + alias.offset_delta)
    if not alias.is_view:
        out = out.detach()
    return out


def fresh_copy(value: torch.Tensor, alias: OutputAlias, view: bool = False) -> torch.Tensor:
    """A new tensor with ``value``'s values in eager's layout (eager's output was fresh);
    ``view``: returned as a view of that new tensor, as eager's (a view of an intermediate)."""
    if alias.symbolic:
        out = value.clone(memory_format=torch.preserve_format)
    else:
        out = torch.empty_strided(alias.size, alias.stride, dtype=value.dtype, device=value.device).copy_(value)
    return out.as_strided(out.size(), out.stride(), out.storage_offset()) if view else out


class OutputFixer:
    """Rebuilds the flat outputs of a compiled graph whose relation to the inputs is not eager's.

    ``plan(outs, args)`` on the first call decides, per output, whether it needs rebuilding;
    ``fix(outs, args)`` applies that on every call (the compiled code returns the same kind of
    tensor every call: an input buffer, a view of one or a new buffer)."""

    __slots__ = ("aliases", "steps", "later")

    def __init__(self, aliases: list[OutputAlias]) -> None:
        self.aliases = aliases
        self.steps: list[tuple[int, Callable[[Any, Sequence[Any]], Any]]] = []
        self.later: list[tuple[int, OutputAlias]] = []

    def plan(self, outs: Sequence[Any], args: Sequence[Any]) -> bool:
        """Decide the rebuilds from a first call's outputs; False when none is needed."""
        if len(outs) != len(self.aliases):
            return False
        arg_keys = [_storage_key(a) if isinstance(a, torch.Tensor) and a.layout == torch.strided else None
                    for a in args]
        for k, (out, alias) in enumerate(zip(outs, self.aliases)):
            if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
                continue
            key = _storage_key(out)
            if alias.of_output is not None:
                partner = outs[alias.of_output]
                if isinstance(partner, torch.Tensor) and key != _storage_key(partner):
                    self.later.append((k, alias))
                continue
            if alias.input_index is None:
                if any(key == ak for ak in arg_keys if ak is not None):
                    self.steps.append((k, lambda o, a, _al=alias: fresh_copy(o, _al, _al.is_view)))
                elif alias.is_view and not out._is_view():
                    # eager's is a view of a value nobody else holds (``torch.cat(...)[:, -4:]``)
                    self.steps.append((k, lambda o, a: o.as_strided(o.size(), o.stride(), o.storage_offset())))
                continue
            i = alias.input_index
            if i >= len(args) or not isinstance(args[i], torch.Tensor):
                continue
            base = args[i]
            if alias.same:
                if out is not base:
                    self.steps.append((k, lambda o, a, _i=i: a[_i]))
                continue
            root = base if base._base is None else base._base
            if out is base or key != arg_keys[i] or out._is_view() != alias.is_view \
                    or out.requires_grad != alias.requires_grad or (out.grad_fn is not None) != alias.has_grad_fn \
                    or (alias.is_view and out._base is not root and (alias.requires_grad or not base.requires_grad)):
                self.steps.append((k, lambda o, a, _i=i, _al=alias: rebuild_alias(a[_i], _al)))
        return bool(self.steps or self.later)

    def fix(self, outs: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        fixed = list(outs)
        for k, step in self.steps:
            fixed[k] = step(fixed[k], args)
        for k, alias in self.later:  # views of other outputs, once those are final
            base = fixed[alias.of_output]  # type: ignore[index]
            fixed[k] = base.as_strided(alias.size, alias.stride, base.storage_offset() + alias.offset_delta)
        return fixed


def created_grad_leaf(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """A node making a new leaf that requires grad (``torch.ones(..., requires_grad=True)``), by
    the tracer's fake values: eager gives the caller a tensor autograd accumulates into, which
    compiled kernels (and a joint graph, differentiating the inputs only) do not make."""
    inputs = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    input_ids = {id(v) for v in inputs if isinstance(v, torch.Tensor)}
    for n in gm.graph.nodes:
        value = n.meta.get("example_value")
        if n.op not in ("call_function", "call_method") or not isinstance(value, torch.Tensor) \
                or id(value) in input_ids:  # an in-place op returns its input: an existing leaf updated
            continue
        try:
            new_leaf = value.requires_grad and value.is_leaf and value._base is None
        except RuntimeError:  # autograd refuses to describe a view of a base written under no_grad
            continue
        if new_leaf:
            return n
    return None


# Methods and functions whose result can share memory with their first argument.
_VIEW_LIKE = frozenset({"detach", "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "T", "mT",
                        "unsqueeze", "squeeze", "narrow", "select", "expand", "expand_as", "flatten", "unflatten",
                        "as_strided", "diagonal", "unbind", "split", "chunk", "contiguous", "movedim", "swapaxes",
                        "unfold", "real", "imag", "view_as_real", "view_as_complex", "alias", "getitem"})


def _name(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def inplace_through_detach(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """An in-place update made through ``detach()`` (or ``.data``) of a tensor that requires
    grad, possibly through views: eager autograd keeps the tensor's history and sees the new
    values, which a functional trace cannot express (it would cut the history)."""
    for node in gm.graph.nodes:
        if node.op not in ("call_method", "call_function") or not node.args:
            continue
        name = _name(node)
        if not (name.endswith("_") and not name.endswith("__")):
            continue
        seen = 0
        base = node.args[0]
        while isinstance(base, torch.fx.Node) and base.op in ("call_method", "call_function") and seen < 64:
            base_name = _name(base)
            if base_name not in _VIEW_LIKE or not base.args:
                break
            source = base.args[0]
            if base_name == "detach" and isinstance(source, torch.fx.Node):
                value = source.meta.get("example_value")
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    return node
            base = source
            seen += 1
    return None


def aliases_to_data(aliases: list[OutputAlias]) -> list[dict[str, Any]]:
    """The relations as JSON data (a warm-start frame record)."""
    return [dataclasses.asdict(a) for a in aliases]


def aliases_from_data(data: list[dict[str, Any]]) -> list[OutputAlias]:
    return [OutputAlias(**{k: tuple(v) if isinstance(v, list) else v for k, v in item.items()}) for item in data]
