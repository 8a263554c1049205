"""Lowerings of view ops: reshape, permute, expand, squeeze/unsqueeze, slice, select, as_strided.

Views never copy. On a realized buffer (graph input, computed buffer, extern output) a view
whose result is expressible as a strided layout becomes a :class:`ReinterpretView` (same
storage, so outputs that alias inputs keep aliasing, and extern kernels read it directly);
otherwise it is a :class:`View`: an index transformation inlined into its readers.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from ...errors import GraphRefusal
from ..ir import IRNode, Layout, ReinterpretView, View, as_strided_layout
from ..symbolic import FloorDiv, as_size, contiguous_strides, is_static, known_true, prod
from .registry import (
    aten,
    canonical_dim,
    canonical_dims,
    expand_to,
    prims,
    register_lowering,
    view_reshape_index,
)

Reindex = Callable[[Sequence[sympy.Expr]], Sequence[sympy.Expr]]


def make_view(x: IRNode, size: Sequence[int], reindex: Reindex,
              strided: Callable[[Layout], Layout | None] | None) -> IRNode:
    base = as_strided_layout(x)
    if base is not None and strided is not None:
        buffer, layout = base
        new_layout = strided(layout)
        if new_layout is not None:
            return ReinterpretView(buffer, new_layout)
    return View(x, size, reindex)


def _with(layout: Layout, size: Sequence[int], stride: Sequence[int], offset: int) -> Layout:
    return Layout(layout.device, layout.dtype, tuple(as_size(s) for s in size), tuple(as_size(s) for s in stride),
                  as_size(offset))


# --------------------------------------------------------------------------- reshape
def infer_size(size: Sequence[int], numel: int) -> list[int]:
    size = [as_size(s) for s in size]
    if -1 in size:
        k = size.index(-1)
        rest = prod(s for i, s in enumerate(size) if i != k)
        if is_static(numel) and is_static(rest):
            size[k] = int(numel) // int(rest) if rest else 0
        else:
            size[k] = as_size(FloorDiv(sympy.sympify(numel), sympy.sympify(rest)))
    return size


def reshape_strides(old_size: Sequence[int], old_stride: Sequence[int], new_size: Sequence[int]) -> list[int] | None:
    """Strides of ``new_size`` viewing the same elements as ``(old_size, old_stride)``, or None.

    Walks the old dimensions from the innermost, grouping them into chunks that are contiguous
    among themselves; each chunk must be split exactly by consecutive new dimensions (the rule
    aten's ``view`` applies).
    """
    new_size = [as_size(s) for s in new_size]
    if prod(old_size) == 0 or prod(new_size) == 0:
        return contiguous_strides(new_size)
    old_size = [as_size(s) for s in old_size] or [1]
    old_stride = [as_size(s) for s in old_stride] or [1]
    # With symbolic sizes ``<`` is decided by known_true: an undecidable comparison stops the
    # chunk early, the sizes then fail to match and the view is an index map (always correct).
    less = (lambda a, b: a < b) if all(is_static(v) for v in [*old_size, *old_stride, *new_size]) \
        else (lambda a, b: known_true(sympy.sympify(a) < sympy.sympify(b)))
    new_stride = [0] * len(new_size)
    view_d = len(new_size) - 1
    chunk_base_stride = old_stride[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_size) - 1, -1, -1):
        tensor_numel *= old_size[tensor_d]
        chunk_ends = tensor_d == 0 or (
            old_size[tensor_d - 1] != 1 and old_stride[tensor_d - 1] != tensor_numel * chunk_base_stride)
        if chunk_ends:
            while view_d >= 0 and (less(view_numel, tensor_numel) or new_size[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_size[view_d]
                view_d -= 1
            if as_size(view_numel) != as_size(tensor_numel):
                return None
            if tensor_d > 0:
                chunk_base_stride = old_stride[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return new_stride


@register_lowering(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy, aten._reshape_alias)
def _view(ctx: Any, x: IRNode, size: Sequence[int], *extra: Any) -> IRNode:
    old = x.get_size()
    new = infer_size(size, x.numel())
    if old == new:
        return x

    def strided(layout: Layout) -> Layout | None:
        stride = reshape_strides(layout.size, layout.stride, new)
        return None if stride is None else _with(layout, new, stride, layout.offset)

    return make_view(x, new, view_reshape_index(old, new), strided)


@register_lowering(prims.reshape)
def _prims_reshape(ctx: Any, x: IRNode, size: Sequence[int]) -> IRNode:
    return _view(ctx, x, size)


# --------------------------------------------------------------------------- permute / transpose
def permute(x: IRNode, dims: Sequence[int]) -> IRNode:
    ndim = len(x.get_size())
    dims = [canonical_dim(d, ndim) for d in dims]
    if dims == list(range(ndim)):
        return x
    old = x.get_size()
    size = [old[d] for d in dims]
    inv = [0] * ndim
    for pos, d in enumerate(dims):
        inv[d] = pos

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        return [index[inv[d]] for d in range(ndim)]

    def strided(layout: Layout) -> Layout:
        return _with(layout, size, [layout.stride[d] for d in dims], layout.offset)

    return make_view(x, size, reindex, strided)


@register_lowering(aten.permute, aten.permute_copy)
def _permute(ctx: Any, x: IRNode, dims: Sequence[int]) -> IRNode:
    return permute(x, dims)


@register_lowering(aten.transpose.int, aten.transpose_copy.int)
def _transpose(ctx: Any, x: IRNode, a: int, b: int) -> IRNode:
    ndim = len(x.get_size())
    dims = list(range(ndim))
    if ndim:
        a, b = canonical_dim(a, ndim), canonical_dim(b, ndim)
        dims[a], dims[b] = dims[b], dims[a]
    return permute(x, dims)


@register_lowering(aten.t, aten.t_copy)
def _t(ctx: Any, x: IRNode) -> IRNode:
    return permute(x, [1, 0]) if len(x.get_size()) == 2 else x


@register_lowering(aten.numpy_T)
def _numpy_t(ctx: Any, x: IRNode) -> IRNode:
    return permute(x, list(reversed(range(len(x.get_size())))))


# --------------------------------------------------------------------------- expand
def expand(x: IRNode, size: Sequence[int]) -> IRNode:
    old = x.get_size()
    size = [as_size(s) for s in size]
    lead = len(size) - len(old)
    size = [old[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(size)]
    if size == old:
        return x

    def strided(layout: Layout) -> Layout:
        stride = [0] * lead + [0 if (o == 1 and size[lead + i] != 1) else layout.stride[i] for i, o in enumerate(old)]
        return _with(layout, size, stride, layout.offset)

    view = expand_to(x, size)
    assert isinstance(view, View)
    return make_view(x, size, view.reindex, strided)


@register_lowering(aten.expand, aten.expand_copy)
def _expand(ctx: Any, x: IRNode, size: Sequence[int], *, implicit: bool = False) -> IRNode:
    return expand(x, size)


@register_lowering(prims.broadcast_in_dim)
def _broadcast_in_dim(ctx: Any, x: IRNode, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> IRNode:
    unsq = list(x.get_size())
    size = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        size[d] = unsq[i]
    return expand(_view(ctx, x, size), shape)


@register_lowering(aten.expand_as)
def _expand_as(ctx: Any, x: IRNode, other: IRNode) -> IRNode:
    return expand(x, other.get_size())


# --------------------------------------------------------------------------- squeeze / unsqueeze
@register_lowering(aten.unsqueeze, aten.unsqueeze_copy)
def _unsqueeze(ctx: Any, x: IRNode, dim: int) -> IRNode:
    size = x.get_size()
    dim = dim + len(size) + 1 if dim < 0 else dim
    return _view(ctx, x, size[:dim] + [1] + size[dim:])


@register_lowering(aten.squeeze, aten.squeeze_copy, prims.squeeze)
def _squeeze(ctx: Any, x: IRNode, dim: Any = None) -> IRNode:
    size = x.get_size()
    if dim is None:
        dims = set(range(len(size)))
    elif isinstance(dim, (list, tuple)) and len(dim) == 0:
        dims = set()  # squeeze.dims with no dims squeezes nothing
    else:
        dims = set(canonical_dims(dim, len(size))) if size else set()
    new = [s for i, s in enumerate(size) if not (i in dims and s == 1)]
    return _view(ctx, x, new)


# --------------------------------------------------------------------------- slice / select
def slice_view(x: IRNode, dim: int, start: int | None, end: int | None, step: int = 1,
               length: Any = None) -> IRNode:
    """``x[..., start:end:step, ...]``; ``length`` (the traced result size) is required when
    the bounds or the size are symbolic."""
    size = x.get_size()
    dim = canonical_dim(dim, len(size))
    n = size[dim]
    start = 0 if start is None else as_size(start)
    end = n if end is None else as_size(end)
    if all(is_static(v) for v in (n, start, end)):
        start = max(0, min(n, start + n if start < 0 else start))
        end = max(start, min(n, end + n if end < 0 else end))
        length = (end - start + step - 1) // step
    else:
        # Symbolic: torch's trace normalised and clamped the bounds (guarding on each
        # comparison), so the result size is the traced one. A negative start counts from the
        # end, as torch's; the start is then taken as is only where it is provably inside
        # [0, n] (from the sizes' bounds or a guarded fact): there torch's clamp kept it too.
        if (is_static(start) and start < 0) or (not is_static(start) and known_true(sympy.sympify(start) < 0)):
            start = as_size(n + start)
        if length is None or not known_true(sympy.sympify(start) >= 0) \
                or not (start == n or known_true(sympy.sympify(start) <= n)):
            raise NotImplementedError(f"slice of a symbolic size with bounds {start}:{end} (the start is not "
                                      "provably inside the dimension)")
        length = as_size(length)
    if start == 0 and length == n and step == 1:
        return x
    new = list(size)
    new[dim] = length

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        out = list(index)
        out[dim] = index[dim] * step + start
        return out

    def strided(layout: Layout) -> Layout:
        stride = list(layout.stride)
        offset = layout.offset + start * stride[dim]
        stride[dim] *= step
        return _with(layout, new, stride, offset)

    return make_view(x, new, reindex, strided)


@register_lowering(aten.slice, aten.slice_copy)
def _slice(ctx: Any, x: IRNode, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> IRNode:
    return slice_view(x, dim, start, end, step, _meta_size(ctx, dim))


def _meta_size(ctx: Any, dim: int, which: int | None = None) -> Any:
    """Size ``dim`` of the traced result (of output ``which``), or None when static/unknown."""
    val = ctx.current_meta_val()
    if which is not None:
        val = val[which] if isinstance(val, (list, tuple)) and which < len(val) else None
    if not isinstance(val, torch.Tensor):
        return None
    return as_size(val.shape[canonical_dim(dim, val.dim())])


@register_lowering(aten.narrow)
def _narrow(ctx: Any, x: IRNode, dim: int, start: int, length: int) -> IRNode:
    return slice_view(x, dim, start, start + length, 1, as_size(length))


def select_view(x: IRNode, dim: int, index: int) -> IRNode:
    size = x.get_size()
    dim = canonical_dim(dim, len(size))
    index = as_size(index)
    if is_static(index):
        index = as_size(index + size[dim]) if index < 0 else index
    elif known_true(sympy.sympify(index) < 0):  # a symbolic index: its sign must be known
        index = as_size(index + size[dim])
    elif not known_true(sympy.sympify(index) >= 0):
        raise NotImplementedError(f"select at a symbolic index {index} of unknown sign")
    new = size[:dim] + size[dim + 1:]

    def reindex(idx: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        return list(idx[:dim]) + [sympy.sympify(index)] + list(idx[dim:])

    def strided(layout: Layout) -> Layout:
        stride = list(layout.stride)
        offset = layout.offset + index * stride[dim]
        return _with(layout, new, stride[:dim] + stride[dim + 1:], offset)

    return make_view(x, new, reindex, strided)


@register_lowering(aten.select.int, aten.select_copy.int)
def _select(ctx: Any, x: IRNode, dim: int, index: int) -> IRNode:
    return select_view(x, dim, index)


@register_lowering(aten.split.Tensor, aten.split_copy.Tensor)
def _split(ctx: Any, x: IRNode, split_size: int, dim: int = 0) -> list[IRNode]:
    n = x.get_size()[canonical_dim(dim, len(x.get_size()))]
    val = ctx.current_meta_val()
    if not (is_static(n) and is_static(split_size)) and isinstance(val, (list, tuple)):
        # Symbolic: the number of pieces was fixed (and guarded) by the trace; take their sizes.
        sizes = [_meta_size(ctx, dim, i) for i in range(len(val))]
        return _split_with_sizes(ctx, x, sizes, dim)
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    return _split_with_sizes(ctx, x, sizes, dim)


@register_lowering(aten.split_with_sizes, aten.split_with_sizes_copy)
def _split_with_sizes(ctx: Any, x: IRNode, split_sizes: Sequence[int], dim: int = 0) -> list[IRNode]:
    out = []
    start: Any = 0
    for s in split_sizes:
        s = as_size(s)
        out.append(slice_view(x, dim, start, start + s, 1, s))
        start = as_size(start + s)
    return out


@register_lowering(aten.unsafe_split.Tensor)
def _unsafe_split(ctx: Any, x: IRNode, split_size: int, dim: int = 0) -> list[IRNode]:
    return _split(ctx, x, split_size, dim)


@register_lowering(prims.rev)
def _rev(ctx: Any, x: IRNode, dims: Sequence[int]) -> IRNode:
    """flip: reversed indices (no strided layout has negative strides, so always an index map)."""
    size = x.get_size()
    flipped = set(canonical_dims(list(dims), len(size))) if dims else set()

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        return [size[d] - 1 - index[d] if d in flipped else index[d] for d in range(len(size))]

    return View(x, size, reindex)


@register_lowering(aten.unbind.int, aten.unbind_copy.int)
def _unbind(ctx: Any, x: IRNode, dim: int = 0) -> list[IRNode]:
    n = x.get_size()[canonical_dim(dim, len(x.get_size()))]
    return [select_view(x, dim, i) for i in range(n)]


def _storage_source(node: Any) -> Any:
    """The first fx value up ``node``'s chain of view ops: the one that owns the storage."""
    while isinstance(node, torch.fx.Node) and isinstance(node.target, torch._ops.OpOverload) \
            and node.target.is_view and node.args:
        node = node.args[0]
    return node


def _storage_is_contiguous(node: Any) -> bool:
    """Whether eager's storage under fx value ``node`` is laid out contiguously."""
    node = _storage_source(node)
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and all(is_static(s) for s in (*val.shape, *val.stride())) \
        and val.is_contiguous()


@register_lowering(aten.as_strided, aten.as_strided_copy)
def _as_strided(ctx: Any, x: IRNode, size: Sequence[int], stride: Sequence[int],
                storage_offset: int | None = None) -> IRNode:
    base = as_strided_layout(x)
    if base is None:
        # A view of a computed value addresses that value's storage (realized in its own
        # layout), as in eager; copying the view first would address the copy's storage.
        # pyjit realizes computed values contiguous: where eager laid the value out otherwise
        # (``clone`` of a transposed tensor keeps its strides) the graph runs as captured.
        if not _storage_is_contiguous(ctx.current_node.args[0] if ctx.current_node is not None else None):
            raise GraphRefusal("as_strided over a computed value that eager does not lay out contiguously")
        base = as_strided_layout(ctx.realize(x, allow_view=True))
        assert base is not None
    buffer, layout = base
    # as_strided addresses the storage of ``x``: a realized buffer's storage is the buffer's own.
    offset = layout.offset if storage_offset is None else int(storage_offset)
    return ReinterpretView(buffer, _with(layout, size, stride, offset))


@register_lowering(aten.as_strided_.default)
def _as_strided_in_place(ctx: Any, x: IRNode, size: Sequence[int], stride: Sequence[int],
                         storage_offset: int | None = None) -> IRNode:
    """``as_strided_`` restrides a value in place: ATen's ``adaptive_avg_pool2d`` to 1x1 of a
    channels-last input restrides its fresh ``mean`` this way. Over a value computed in the
    graph and read by nothing else, that is ``as_strided`` of it; over a graph input (whose
    metadata the caller would see change) or a value other nodes also read, the op keeps
    running as an aten call."""
    node = ctx.current_node.args[0] if ctx.current_node is not None else None
    source = _storage_source(node)
    if not isinstance(node, torch.fx.Node) or not isinstance(source, torch.fx.Node) \
            or source.op != "call_function" or len(node.users) != 1:
        raise NotImplementedError("as_strided_ of a graph input or of a value other nodes read")
    return _as_strided(ctx, x, size, stride, storage_offset)


@register_lowering(aten.diagonal, aten.diagonal_copy)
def _diagonal(ctx: Any, x: IRNode, offset: int = 0, dim1: int = 0, dim2: int = 1) -> IRNode:
    size = x.get_size()
    nd = len(size)
    d1, d2 = canonical_dim(dim1, nd), canonical_dim(dim2, nd)
    if offset >= 0:
        length = max(0, min(size[d1], size[d2] - offset))
    else:
        length = max(0, min(size[d1] + offset, size[d2]))
    keep = [d for d in range(nd) if d not in (d1, d2)]
    new = [size[d] for d in keep] + [length]

    def reindex(index: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        out: list[sympy.Expr] = [sympy.Integer(0)] * nd
        for pos, d in enumerate(keep):
            out[d] = index[pos]
        i = index[-1]
        out[d1] = i + (-offset if offset < 0 else 0)
        out[d2] = i + (offset if offset > 0 else 0)
        return out

    def strided(layout: Layout) -> Layout:
        st = layout.stride
        start = layout.offset + (offset * st[d2] if offset > 0 else -offset * st[d1])
        return _with(layout, new, [st[d] for d in keep] + [st[d1] + st[d2]], start)

    return make_view(x, new, reindex, strided)


@register_lowering(aten.view_as_real, aten.view_as_complex, aten.view.dtype, override=True)  # view.dtype: not _view
def _unsupported_dtype_views(ctx: Any, *args: Any, **kwargs: Any) -> IRNode:
    raise NotImplementedError("dtype-reinterpreting views are left to aten")

