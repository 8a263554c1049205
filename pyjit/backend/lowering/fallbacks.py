"""Extern kernels: ops that run as aten calls from the generated wrapper.

Two kinds: *by design* (matrix products, convolutions, attention, allocation: vendor libraries
do them best) and *fallbacks* (ops with no lowering yet, or a lowering that declined these
arguments by raising ``NotImplementedError``). Fallbacks are logged once per op on the
``fallbacks`` channel and counted in ``pyjit.backend.metrics``. Random-number ops are always
fallbacks: they use aten's generator, so seeded programs give the same numbers as eager.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ...logs import get_logger
from ..ir import ExternKernel, IRNode, Layout, MultiOutput
from ..metrics import metrics
from ..symbolic import hint, is_static
from .registry import aten

if TYPE_CHECKING:
    from ..graph import GraphLowering

log = get_logger("fallbacks")
_logged: set[str] = set()

EXTERN_BY_DESIGN = {
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.convolution.default,
    aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.mv.default,
    aten.dot.default,
}

# Externs that are no fallback although their outputs may alias their inputs (so the wrapper
# never recycles them, as for fallbacks): the functional collectives (``collectives.py``).
EXTERN_NOT_FALLBACK: set[Any] = set()


# Fused attention kernels read q, k, v (and, for the backward ones, grad_out and out) as rows
# of a last dimension of stride 1: eager's scaled_dot_product_attention picks them only for
# such inputs (sdp_utils: check_last_dim_stride_equals_1), the CUDA ones raise otherwise and
# the CPU flash kernel silently computes wrong values. Value: how many leading arguments.
_LAST_DIM_STRIDE_1 = {
    aten._scaled_dot_product_flash_attention.default: 3,
    aten._scaled_dot_product_efficient_attention.default: 3,
    aten._scaled_dot_product_cudnn_attention.default: 3,
    aten._scaled_dot_product_flash_attention_for_cpu.default: 3,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: 5,
    aten._scaled_dot_product_flash_attention_backward.default: 5,
    aten._scaled_dot_product_efficient_attention_backward.default: 5,
}


def _last_dim_stride_1(ctx: "GraphLowering", target: Any, args: tuple) -> tuple:
    """``args`` with each of the first ``_LAST_DIM_STRIDE_1[target]`` buffers whose last
    dimension is not of stride 1 copied: into the traced layout when that one has stride 1
    there (eager's choice, usually free to fuse into the producer), else row-major."""
    node = ctx.current_node
    out = list(args)
    for i in range(min(_LAST_DIM_STRIDE_1[target], len(out))):
        arg = out[i]
        layout = getattr(arg, "layout", None)
        if not isinstance(arg, IRNode) or layout is None or not layout.size:
            continue
        if _equal(layout.stride[-1], 1) or _equal(layout.size[-1], 1):
            continue
        val = node.args[i].meta.get("val") if node is not None and isinstance(node.args[i], torch.fx.Node) else None
        stride = None
        if isinstance(val, torch.Tensor) and val.dim() and val.stride(-1) == 1 \
                and all(is_static(x) for x in (*val.shape, *val.stride())) \
                and _dense(tuple(val.shape), tuple(val.stride())):
            stride = tuple(int(x) for x in val.stride())
        out[i] = ctx.realize(ctx._copy_of(arg), stride)
    return tuple(out)


# Memory-efficient attention reads its additive bias (argument index here) with a last
# dimension of stride 1 and every other stride a multiple of 16 bytes; it raises otherwise
# ("attn_bias is not correctly aligned", "last dimension must be contiguous"). Eager's
# scaled_dot_product_attention pads the mask (pad + slice: aligned strides); pyjit realizes
# the slice contiguously, so a bias of 5 columns got row stride 5.
_ALIGNED_BIAS = {
    aten._scaled_dot_product_efficient_attention.default: 3,
    aten._scaled_dot_product_efficient_attention_backward.default: 4,
}
_BIAS_ALIGN_BYTES = 16


def _aligned_bias(ctx: "GraphLowering", target: Any, args: tuple) -> tuple:
    """``args`` with the attention bias copied into rows padded to 16 bytes (read through a
    slice, as eager's ``pad_bias`` does) when its strides are not already so."""
    index = _ALIGNED_BIAS[target]
    bias = args[index] if index < len(args) else None
    layout = getattr(bias, "layout", None)
    if not isinstance(bias, IRNode) or layout is None or not layout.size \
            or not all(is_static(x) for x in (*layout.size, *layout.stride)):
        return args
    size, stride = [int(x) for x in layout.size], [int(x) for x in layout.stride]
    align = max(1, _BIAS_ALIGN_BYTES // layout.dtype.itemsize)
    if (size[-1] == 1 or stride[-1] == 1) and all(st % align == 0 for sz, st in zip(size[:-1], stride[:-1]) if sz != 1):
        return args
    from .registry import LOWERINGS

    columns = size[-1]
    padded_columns = -(-columns // align) * align
    padded = ctx.realize(LOWERINGS[aten.constant_pad_nd.default](ctx, bias, [0, padded_columns - columns], 0.0))
    view = LOWERINGS[aten.slice.Tensor](ctx, padded, len(size) - 1, 0, columns)
    out = list(args)
    out[index] = ctx.realize(view, allow_view=True, read_only=True)
    return tuple(out)


def _output_meta(target: Any, args: tuple, kwargs: dict, graph_val: Any) -> Any:
    """The extern's outputs as it will produce them from the buffers actually passed.

    The aten graph's meta value was computed from the original inputs; realizing an input can
    change its strides (a transposed view becomes a contiguous buffer), and some kernels lay
    out their output after an input's strides (CPU flash attention follows ``query``). Wrapper
    code that views the output with the graph's strides would then read the wrong elements.
    So the op runs again on fake tensors with the passed layouts; sizes that are not plain
    ints (dynamic shapes) keep the graph's value."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    layouts: list[Any] = []

    def collect(a: Any) -> Any:
        if isinstance(a, IRNode):
            layout = getattr(a, "layout", None)
            if layout is None or not all(isinstance(x, int) for x in (*layout.size, *layout.stride)):
                raise _KeepGraphValue
            layouts.append(layout)
        return a

    try:
        tree_map(collect, (args, kwargs))
        mode = FakeTensorMode(allow_non_fake_inputs=True)

        def fake(a: Any) -> Any:
            if isinstance(a, IRNode):
                lay = a.layout
                with mode:
                    return torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype, device=lay.device)
            return a

        fargs, fkwargs = tree_map(fake, (args, kwargs))
        with mode:
            return target(*fargs, **fkwargs)
    except Exception:  # noqa: BLE001 - an op fake tensors cannot run: the graph's value
        return graph_val


class _KeepGraphValue(Exception):
    pass


def _has_symbolic_layout(tree: Any) -> bool:
    for a in tree_flatten(tree)[0]:
        layout = getattr(a, "layout", None) if isinstance(a, IRNode) else None
        if layout is not None and not all(is_static(x) for x in (*layout.size, *layout.stride)):
            return True
    return False


def _with_traced_layouts(ctx: "GraphLowering", args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args``/``kwargs`` with each buffer in the layout the aten trace gave that argument
    (a buffer realized with other strides is copied into one with the traced strides).

    An extern's output layout can follow its inputs' strides (CPU flash attention follows
    ``query``; TensorIterator ops follow their input), and with symbolic sizes we cannot
    re-run the op on fake tensors of our layouts: matching the traced inputs makes the traced
    output layout exact. Where an argument cannot be matched this raises
    ``NotImplementedError``, and the graph runs as captured.
    """
    node = ctx.current_node
    fx_leaves = tree_flatten((node.args, node.kwargs))[0] if node is not None else []
    leaves, spec = tree_flatten((args, kwargs))
    if len(fx_leaves) != len(leaves):
        raise NotImplementedError("extern arguments do not line up with the traced node's (symbolic sizes)")
    out = []
    for fx_arg, arg in zip(fx_leaves, leaves):
        if isinstance(arg, IRNode):
            val = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor):
                raise NotImplementedError("extern argument without a traced tensor value (symbolic sizes)")
            want = Layout.of(val)
            have = arg.layout  # type: ignore[attr-defined]  # realized: Buffer or ReinterpretView
            if len(have.size) != len(want.size) or any(not _equal(a, b) for a, b in zip(have.size, want.size)):
                raise NotImplementedError(f"extern argument of size {have.size}, traced {want.size}")
            if any(not _equal(a, b) for a, b in zip(have.stride, want.stride)):
                if not (_dense(want.size, want.stride) or _gapped(want.size, want.stride)):
                    raise NotImplementedError(f"extern argument traced with strides {want.stride} that a "
                                              "buffer cannot have (symbolic sizes)")
                arg = ctx.realize(ctx._copy_of(arg), tuple(want.stride))
        out.append(arg)
    return tree_unflatten(out, spec)


def _gapped(size: tuple, stride: tuple) -> bool:
    """Whether ``stride`` lays ``size`` out without overlap but with gaps, at the example sizes:
    a slice of a dense buffer, like eager's attention bias whose rows are padded to a multiple
    of 16 bytes (row stride ``s + 8 - s % 8`` for ``s`` columns). Such a buffer is allocated
    with its gaps (``empty_strided``). The strides are the aten trace's, symbolic, so they hold
    for every size the graph's guards admit; the hints only order the dimensions."""
    dims = sorted((d for d in range(len(size)) if not _equal(size[d], 1)), key=lambda d: hint(stride[d]))
    span = 1
    for d in dims:
        if hint(stride[d]) < span:
            return False
        span = hint(stride[d]) * hint(size[d])
    return True


def _equal(a: Any, b: Any) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _dense(size: tuple, stride: tuple) -> bool:
    """Whether ``stride`` is a permutation of the contiguous strides of ``size`` (size-1
    dimensions aside): a buffer laid out so is dense and non-overlapping for every size."""
    dims = sorted((d for d in range(len(size)) if not _equal(size[d], 1)), key=lambda d: hint(stride[d]))
    acc: Any = 1
    for d in dims:
        if not _equal(stride[d], acc):
            return False
        acc = sympy.sympify(acc) * size[d]
    return True


_CONVOLUTIONS = {aten.convolution.default, aten.convolution_backward.default}


def _warm_convolution(target: Any, args: tuple) -> None:
    """Have cuDNN build this convolution's plan on the warm-up thread while the graph compiles
    (``runtime/conv_warmup.py``), with the layouts the wrapper will pass."""
    from ...runtime import conv_warmup
    from ...runtime.conv_warmup import TensorSpec

    spec_args: list[Any] = []
    for a in args:
        if isinstance(a, IRNode):
            lay = a.layout  # type: ignore[attr-defined]
            if not conv_warmup.enabled_for(lay.device):
                return
            spec_args.append(TensorSpec(tuple(int(x) for x in lay.size), tuple(int(x) for x in lay.stride),
                                        lay.dtype, lay.device))
        else:
            spec_args.append(a)
    conv_warmup.request(target._overloadpacket.__name__, tuple(spec_args))


def make_extern(ctx: "GraphLowering", target: Any, args: tuple, kwargs: dict, reason: str = "") -> Any:
    """An :class:`ExternKernel` calling ``target``; returns IR nodes shaped like its outputs."""
    if target not in EXTERN_BY_DESIGN and target not in EXTERN_NOT_FALLBACK and not getattr(ctx, "prefetch", False):
        name = str(target)
        metrics.fallback_ops[name] += 1
        if name not in _logged:
            _logged.add(name)
            where = ctx.current_user_location()
            log.info("no lowering for %s%s; calling aten from the wrapper%s", name,
                     f" ({reason})" if reason else "", f" [{where}]" if where else "")
    # Externs read any strides: a transposed/permuted view is passed as a strided view of its
    # realized base, never copied (``realize(allow_view=True)``).
    real_args, real_kwargs = tree_map(lambda a: ctx.realize(a, allow_view=True, read_only=True) if isinstance(a, IRNode) else a,
                                      (args, kwargs))
    if target in _LAST_DIM_STRIDE_1 and not _has_symbolic_layout((real_args, real_kwargs)):
        real_args = _last_dim_stride_1(ctx, target, tuple(real_args))
    if target in _ALIGNED_BIAS and not _has_symbolic_layout((real_args, real_kwargs)):
        real_args = _aligned_bias(ctx, target, tuple(real_args))
    if _has_symbolic_layout((real_args, real_kwargs)):
        # Symbolic sizes: fake tensors of our layouts would need the ShapeEnv (and add guards).
        # Pass the extern exactly the layouts the aten trace gave it instead, so the traced
        # output layout is the one it produces, for every size.
        real_args, real_kwargs = _with_traced_layouts(ctx, real_args, real_kwargs)
        val = ctx.current_meta_val()
    else:
        val = _output_meta(target, real_args, real_kwargs, ctx.current_meta_val())
        if target in _CONVOLUTIONS and not real_kwargs:
            _warm_convolution(target, tuple(real_args))
    name = ctx.new_buffer_name()
    if isinstance(val, torch.Tensor):
        node = ExternKernel(name, Layout.of(val), target, real_args, real_kwargs, ctx.current_origins(), reason)
        ctx.register_buffer(node)
        return node
    node = ExternKernel(name, None, target, real_args, real_kwargs, ctx.current_origins(), reason)
    ctx.register_buffer(node)
    leaves, spec = tree_flatten(val)
    outs: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            out = MultiOutput(ctx.new_buffer_name(), Layout.of(leaf), node, (i,))
            ctx.register_buffer(out)
            outs.append(out)
        else:
            outs.append(leaf)
    node.output_spec = spec  # type: ignore[attr-defined]
    return tree_unflatten(outs, spec)
