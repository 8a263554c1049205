"""``GraphLowering``: runs an aten-level FX graph through the lowerings, producing loop IR.

It owns the lowering context every lowering receives explicitly (``ctx``): registered
buffers, graph inputs/outputs, input mutations, the fx node being lowered (for origins and
source lines), and the realization policy (when a value becomes a named buffer).

Dynamic shapes: sizes of the aten graph's fake values are ``SymInt`` s; size arithmetic nodes
(``sym_size``, ``operator.mul`` on sizes...) lower to sympy expressions over the size symbols,
read from the node's traced value, and a scalar placeholder (a symbolic ``int``/``float``
graph input) lowers to its symbol (see ``symbolic.as_size``; kernels receive symbols as
arguments). A value over symbolic scalars that kernel arithmetic would get wrong (a float
expression, ``n // 2`` of a possibly negative ``n``, a size outside the index language) is a
*host value* (``GraphLowering.host_symbol``): the wrapper computes it in Python, kernels get it
as one more symbol.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from ..config import config
from ..errors import LoweringError
from .ir import (
    Buffer,
    ComputedBuffer,
    InputBuffer,
    IRNode,
    Layout,
    Loops,
    Pointwise,
    Reduction,
    ReinterpretView,
    StorageBox,
    View,
    as_strided_layout,
    physical_order,
)
from .lowering import LOWERINGS
from .lowering.fallbacks import make_extern
from .ops_handler import CountingHandler
from .symbolic import (
    as_size,
    from_torch_expr,
    is_static,
    join_terms,
    linear_coefficient,
    simplify_with_ranges,
    sym,
)

# A multi-reader pointwise value this cheap is recomputed in each reader instead of stored:
# e.g. log_softmax's ``x - amax`` is read by the exp-sum loop and by nll_loss's gather; storing
# it would write (and later re-read) the whole [N, C] activation for one gathered element per row.
_INLINE_MAX_READS = 2
_INLINE_MAX_OPS = 6
_INLINE_MAX_USERS = 3


def _cheap_to_recompute(data: Pointwise, users: int) -> bool:
    """True when re-running ``data`` in each of its readers costs less traffic than a buffer."""
    if users > _INLINE_MAX_USERS:
        return False
    rec = CountingHandler()
    try:
        data.inner_fn(rec, [sym(f"i{k}") for k in range(len(data.ranges))])
    except Exception:  # e.g. reads an unrealized reduction: keep the safe choice (a buffer)
        return False
    reads = {(d.name, d.index) for d in rec.reads}
    return not rec.has_indirect and not rec.reductions and len(reads) <= _INLINE_MAX_READS \
        and rec.ops <= _INLINE_MAX_OPS


def _dense_layout_hint(val: Any) -> tuple[int, ...] | None:
    """Eager's strides for an output when they are dense and non-overlapping (so kernels can write them)."""
    if not isinstance(val, torch.Tensor):
        return None
    if not all(is_static(s) for s in (*val.shape, *val.stride())):
        return None  # symbolic: asking torch would add shape guards; contiguous is always valid
    if val.is_contiguous() or not torch._prims_common.is_non_overlapping_and_dense_or_false(val):
        return None
    return tuple(int(s) for s in val.stride())


def _eager_strides(val: Any) -> tuple[int, ...] | None:
    """Eager's strides for an output whose layout a buffer can have (static sizes, dense and
    non-overlapping, contiguous included); None otherwise (no layout is promised then)."""
    if not isinstance(val, torch.Tensor) or not all(is_static(s) for s in (*val.shape, *val.stride())):
        return None
    if not torch._prims_common.is_non_overlapping_and_dense_or_false(val):
        return None
    return tuple(int(s) for s in val.stride())


def _channels_last_hint(val: Any) -> tuple[int, ...] | None:
    """Eager's strides for a value that eager lays out channels-last (4-d NHWC / 5-d NDHWC, not
    also row-major; static sizes), else None. Such values are realized in eager's layout
    (``config.layout_opt``, passes/layout.py): a convolution's channels-last output stays NHWC
    through batch norm and ReLU into the next convolution, with no transposing copies."""
    if not isinstance(val, torch.Tensor) or val.dim() not in (4, 5) or config.layout_opt == "off":
        return None
    if not all(is_static(s) for s in (*val.shape, *val.stride())) or val.is_contiguous():
        return None
    fmt = torch.channels_last if val.dim() == 4 else torch.channels_last_3d
    return tuple(int(s) for s in val.stride()) if val.is_contiguous(memory_format=fmt) else None


_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _size_hints() -> dict[Any, Any]:
    from .symbolic import current_hints

    return current_hints()


def _lower_bound(shape_env: Any, expr: sympy.Expr) -> int | None:
    """The least value of ``expr`` the ShapeEnv's value ranges prove (None: unbounded below)."""
    try:
        lo = shape_env.bound_sympy(expr).lower
    except Exception:  # noqa: BLE001 - no range known: unbounded
        return None
    return int(lo) if getattr(lo, "is_Integer", False) else None


def _polynomial(expr: sympy.Expr) -> bool:
    """Integer sums of products of symbols: printed the same in Python, C++ and Triton."""
    return all(isinstance(a, (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul))
               or (isinstance(a, sympy.Pow) and a.exp.is_Integer and int(a.exp) > 0)
               for a in sympy.preorder_traversal(expr))


def _same_strides(layout: Layout, stride: tuple[int, ...]) -> bool:
    """Whether ``layout`` has ``stride`` in every dimension of size > 1 (the others never move)."""
    return all(size == 1 or got == want for size, got, want in zip(layout.size, layout.stride, stride))


class GraphLowering(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, device: torch.device, prefetch: bool = False):
        super().__init__(gm, garbage_collect_values=False)
        self.device = device
        # A throw-away lowering run only to gather the autotuning compiles of the graph
        # (``compile_fx._prefetch_tuning``): it reports nothing (fallback metrics and logs).
        self.prefetch = prefetch
        self.graph_inputs: list[InputBuffer] = []
        # Every placeholder in order: an input buffer, or the sympy expression of a symbolic
        # int/float input (its name in the wrapper is ``input_names``).
        self.placeholders: list[Any] = []
        self.input_names: list[str] = []
        self.constants: list[tuple[InputBuffer, torch.Tensor]] = []
        self.buffers: list[Buffer] = []
        self.outputs: list[Any] = []
        # (input buffer or a strided view of it, realized new value): written back after the kernels.
        self.mutations: list[tuple[IRNode, Any]] = []
        # Gathers whose index is a graph input of a CPU graph: (input name, indexed size, negative
        # indices allowed, "op <- file:line"); the wrapper checks them (lowering/indexing.py).
        self.gather_checks: list[tuple[str, int, bool, str]] = []
        # Scalars computed on the host (see ``_host_scalar``): (symbol, Python expression, the
        # input symbols it reads), bound by the wrapper after the input symbols, in this order.
        self.host_scalars: list[tuple[sympy.Symbol, str, frozenset[str]]] = []
        self._host_by_expr: dict[Any, sympy.Symbol] = {}
        self.current_node: torch.fx.Node | None = None
        self.node_info: dict[str, tuple[str, str]] = {}  # fx node name -> (op name, user source line)
        self._counter = 0

    # ------------------------------------------------------------------ context used by lowerings
    def new_buffer_name(self) -> str:
        name = f"buf{self._counter}"
        self._counter += 1
        return name

    def register_buffer(self, buf: Buffer) -> None:
        self.buffers.append(buf)

    def current_origins(self) -> set[str]:
        return {self.current_node.name} if self.current_node is not None else set()

    def current_target_name(self) -> str:
        target = self.current_node.target if self.current_node is not None else None
        return getattr(target, "__name__", str(target)).split(".")[0]

    def current_namespace(self) -> str:
        target = self.current_node.target if self.current_node is not None else None
        return getattr(target, "namespace", "")

    def current_meta_val(self) -> Any:
        return self.current_node.meta.get("val") if self.current_node is not None else None

    def current_user_location(self) -> str:
        if self.current_node is None:
            return ""
        return self.node_info.get(self.current_node.name, ("", ""))[1]

    def realize(self, node: IRNode, stride: tuple[int, ...] | None = None, *, allow_view: bool = False,
                read_only: bool = False) -> IRNode:
        """Make ``node`` a buffer (or a strided view of one) so it can be read from memory.

        ``allow_view`` (for readers that take any strides: extern calls, the matmul template,
        ``as_strided``): a view of a computed value whose indexing is a strided layout (a
        transpose, a permute, a slice) realizes the value in its own layout and returns a
        :class:`ReinterpretView` of it, instead of copying the value through the view (a
        transposed copy kernel: its loads or stores are strided, and it costs a full write and
        read of the value). ``read_only`` (the reader only reads values, never relies on which
        storage it sees): the walk may also look through ``clone`` s not yet realized.
        """
        if isinstance(node, (Buffer, ReinterpretView)):
            return node
        if allow_view and stride is None:
            view = _as_view(node)
            if view is not None:
                strided = self._strided_view(view, through_clones=read_only)
                if strided is None and read_only:
                    # The clone's source is not strided-expressible (a transposed split merged
                    # into one batch dim), but the clone itself is: realize the clone and read it
                    # through the view, rather than a second copy in the view's shape (the clone
                    # is often realized anyway, e.g. saved for the backward).
                    strided = self._strided_view(view, whole_base_only=True)
                if strided is not None:
                    return strided
        if isinstance(node, StorageBox):
            data = node.data
            if isinstance(data, (Buffer, ReinterpretView)):
                return data
            if isinstance(data, StorageBox):
                node.data = self.realize(data, stride)
                return node.data
            if isinstance(data, Loops):
                size = data.get_size()
                if stride is None:
                    # The fx value's layout where eager makes it channels-last (run_node).
                    stride = getattr(node, "layout_hint", None)
                order = None
                if stride is not None and not isinstance(data, Reduction):
                    layout = Layout(data.get_device(), data.get_dtype(), tuple(size), stride, 0)
                    order = physical_order(data, layout, getattr(node, "layout_any_order", False))
                else:
                    layout = Layout.contiguous(data.get_device(), data.get_dtype(), size)
                buf = ComputedBuffer(self.new_buffer_name(), layout, data, data.get_origins(), order)
                self.register_buffer(buf)
                node.data = buf
                return buf
            copy = self._copy_of(data)
            node.data = self.realize(copy, stride)
            return node.data
        return self.realize(self._copy_of(node), stride)

    def _strided_view(self, view: View, *, through_clones: bool = False,
                      want: tuple[int, ...] | None = None, whole_base_only: bool = False) -> ReinterpretView | None:
        """``view`` as a strided view of its base realized, if its index map is affine with
        non-negative integer strides (static sizes) and, given ``want``, has those strides;
        None otherwise (nothing is realized then).

        ``through_clones``: the walk also looks through ``clone`` copies not yet realized (the
        aten decomposition of ``matmul`` clones a transposed operand before ``bmm``): reading
        the cloned value directly reads the same values, for readers that only read.
        ``whole_base_only``: an unrealized base is realized only if the view covers all of it
        (a reshape or permutation, never a slice of a larger value).
        """
        size = view.get_size()
        if not all(is_static(s) for s in size):
            return None
        idx = [sym(f"view{k}") for k in range(len(size))]
        index: list[Any] = list(idx)
        base: IRNode = view
        while True:
            if isinstance(base, View):
                index = list(base.reindex(index))
                base = base.base
            elif isinstance(base, StorageBox) and isinstance(base.data, (View, StorageBox)):
                base = base.data
            elif through_clones and isinstance(base, StorageBox) and getattr(base.data, "copy_of", None) is not None:
                base = base.data.copy_of  # type: ignore[union-attr]
            else:
                break
        found = as_strided_layout(base)
        if found is None and whole_base_only and base.numel() != view.numel():
            return None
        layout = found[1] if found is not None else Layout.contiguous(base.get_device(), base.get_dtype(),
                                                                        base.get_size())
        ranges = {v: int(n) for v, n in zip(idx, size)}

        def strides_in(lay: Layout) -> tuple[list[int], int] | None:
            flat = join_terms(simplify_with_ranges(sympy.expand(sympy.sympify(lay.index(index))), ranges))
            if not _affine(flat, idx):
                return None
            strides = [linear_coefficient(flat, v) for v in idx]
            offset = sympy.expand(flat.subs({v: 0 for v in idx}))
            if any(s is None or s < 0 for s in strides) or offset < 0:
                return None
            if want is not None and any(n != 1 and st != w for n, st, w in zip(size, strides, want)):
                return None
            return [int(s) for s in strides], int(offset)  # type: ignore[arg-type]

        if strides_in(layout) is None:
            return None
        found = as_strided_layout(self.realize(base))
        got = strides_in(found[1]) if found is not None else None
        if found is None or got is None:
            return None
        strides, offset = got
        return ReinterpretView(found[0], Layout(view.get_device(), view.get_dtype(), tuple(int(s) for s in size),
                                                tuple(strides), offset))  # type: ignore[arg-type]

    def _copy_of(self, node: IRNode) -> StorageBox:
        return StorageBox(Pointwise(node.get_device(), node.get_dtype(), node.get_size(), node.get_origins(),
                                    inner_fn=node.make_loader()))

    # ------------------------------------------------------------------ fx.Interpreter hooks
    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        self.node_info[n.name] = (self._op_name(n), self._source_line(n))
        val = n.meta.get("val")
        if n.op == "call_function" and isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            # Size arithmetic: the traced value already is the expression (with the shape
            # environment's replacements applied).
            host = self._host_scalar(val)
            return host if host is not None else self._sym_value(val)
        result = super().run_node(n)
        if isinstance(result, StorageBox) and isinstance(result.data, Loops) \
                and getattr(result, "layout_hint", None) is None:
            hint = _channels_last_hint(val)
            if hint is None and n.target in _CASTS:
                # A cast keeps its input's strides in eager (``preserve_format``): realized (e.g.
                # for a matmul, which takes any strides), a cast of a transposed weight is then a
                # contiguous walk instead of a transposing copy.
                hint = _dense_layout_hint(val)
                result.layout_any_order = True  # type: ignore[attr-defined] # read by realize()
            if hint is not None:
                result.layout_hint = hint  # type: ignore[attr-defined] # read by realize()
        if n.op == "call_function" and len(n.users) > 1 and isinstance(result, StorageBox) \
                and isinstance(result.data, Pointwise) and not _cheap_to_recompute(result.data, len(n.users)):
            # Several readers: compute once into a buffer; the scheduler fuses the readers into
            # the producing kernel where it can (the store disappears when nobody else reads it).
            self.realize(result)
        return result

    def placeholder(self, target: Any, args: Any, kwargs: Any) -> Any:
        val = self.current_meta_val()
        name = f"arg{len(self.placeholders)}_1"
        if isinstance(val, (torch.SymInt, torch.SymFloat)):
            expr = self._sym_value(val)
            self.placeholders.append(expr)
            bare = isinstance(expr, sympy.Symbol) and expr.name not in self.input_names
            self.input_names.append(expr.name if bare else name)
            return expr
        if not isinstance(val, torch.Tensor):
            raise LoweringError("placeholder", reason=f"graph input of type {type(val).__name__}")
        buf = InputBuffer(name, Layout.of(val))
        self.graph_inputs.append(buf)
        self.placeholders.append(buf)
        self.input_names.append(name)
        return buf

    def _host_scalar(self, val: Any) -> sympy.Symbol | None:
        """A symbol standing for the value of a symbolic scalar that the wrapper computes in
        Python, or None for a value the index language expresses exactly.

        Kernels print sizes with C++/Triton integer arithmetic, which is Python's only for
        non-negative operands (``//`` and ``%`` truncate toward zero), and know nothing of
        float functions (``min`` of floats, ``abs``, ``**``, ``math.floor``). A symbolic
        *scalar input* may be negative or a float, so any expression over one that is more than
        a sum of products (and every float or bool expression) is evaluated once per call on
        the host, with Python's semantics, and passed to the kernels as one more argument."""
        expr = val.node.expr
        if expr.is_number or isinstance(expr, sympy.Symbol):
            return None
        scalar_inputs = {p for p in self.placeholders if isinstance(p, sympy.Symbol)}
        if isinstance(val, torch.SymInt) and (not expr.free_symbols & scalar_inputs or _polynomial(expr)):
            return None
        is_int = not isinstance(val, torch.SymFloat)
        # The value range the ShapeEnv proves (``n % 3`` is in [0, 2]) tells lowerings the sign
        # of an index (select, slice); unknown, they refuse rather than assume.
        lower = _lower_bound(val.node.shape_env, expr) if is_int else None
        hint = val.node.hint
        return self.host_symbol(expr, is_int, None if hint is None else (int(hint) if is_int else float(hint)), lower)

    def host_symbol(self, expr: sympy.Expr, is_int: bool, hint: int | float | None = None,
                    lower: int | None = None) -> sympy.Symbol:
        """The symbol of a value the wrapper computes in Python from the input symbols (``expr``
        in torch's sympy functions), once per call, passed to kernels like a size. Also what
        ``symbolic.from_torch_expr`` turns a size expression outside the index language into
        (``arange(0, 3, f)`` has ``ceil(3 / f)`` elements)."""
        known = self._host_by_expr.get(expr)
        if known is not None:
            return known
        from torch.utils._sympy.printers import PythonPrinter

        from .symbolic import register_symbol

        if hint is None:
            hints = {s: v for s, v in _size_hints().items() if s in expr.free_symbols}
            value = expr.xreplace({s: sympy.Integer(v) if isinstance(v, int) else sympy.Float(v)
                                   for s, v in hints.items()})
            if value.is_number:
                hint = int(value) if is_int else float(value)
        if lower is None and is_int and expr.is_nonnegative:
            lower = 0
        name = f"hs{len(self.host_scalars)}"
        symbol = sympy.Symbol(name, integer=True, nonnegative=True) if lower is not None and lower >= 0 \
            else sympy.Symbol(name, integer=True) if is_int else sympy.Symbol(name, real=True)
        text = PythonPrinter().doprint(expr)
        text = f"int({text})" if is_int else f"float({text})"
        self.host_scalars.append((symbol, text, frozenset(str(f) for f in expr.free_symbols)))
        self._host_by_expr[expr] = symbol
        register_symbol(symbol, hint, lower)
        return symbol

    def run(self, *args: Any, **kwargs: Any) -> Any:
        from .symbolic import host_values

        with host_values(self.host_symbol):
            return super().run(*args, **kwargs)

    @staticmethod
    def _sym_value(val: Any) -> Any:
        expr = val.node.expr
        if isinstance(val, torch.SymFloat):
            return float(expr) if expr.is_number else from_torch_expr(expr)
        if isinstance(val, torch.SymBool):
            if expr in (sympy.true, sympy.false):
                return bool(expr)
            raise NotImplementedError(f"symbolic bool {expr}")
        return as_size(val)

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        # A constant tensor of the traced graph: passed to ``call`` after the inputs.
        value = super().get_attr(target, args, kwargs)
        if not isinstance(value, torch.Tensor):
            raise LoweringError("get_attr", reason=f"constant {target} is not a tensor")
        buf = InputBuffer(f"constant{len(self.constants)}", Layout.of(value))
        self.constants.append((buf, value))
        return buf

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is operator.getitem:
            return args[0][args[1]]
        if target is torch.ops.aten.copy_.default and isinstance(args[0], InputBuffer):
            region = self._scattered_region(args[0])
            if region is not None:
                # x[..] = v: write v into that region of x instead of rebuilding all of x.
                view, src = region
                if src.get_dtype() != view.get_dtype():
                    from .lowering.registry import to_dtype_node
                    src = to_dtype_node(self, src, view.get_dtype())
                self.mutations.append((view, self.realize(src)))
                return args[0]
            value = args[1]
            if value.get_size() != args[0].get_size() or value.get_dtype() != args[0].get_dtype():
                from .lowering.pointwise import _copy
                value = _copy(self, args[0], value)
            self.mutations.append((args[0], self.realize(value)))
            return args[0]
        if self.device.type != "cpu" and self._computes_on_host():
            # A CPU value in a device graph (passes/host_values.py moved its device reads to
            # one transfer): generated kernels run on the device, so the wrapper calls aten.
            return make_extern(self, target, args, kwargs, "a CPU value in a device graph")
        lowering = LOWERINGS.get(target)
        reason = ""
        unsupported = self._unsupported_dtype(args, kwargs)
        if unsupported is not None:
            lowering, reason = None, f"dtype {unsupported} has no Triton type"
        if lowering is not None:
            try:
                return lowering(self, *args, **kwargs)
            except NotImplementedError as e:
                reason = str(e)
        return make_extern(self, target, args, kwargs, reason)

    def _computes_on_host(self) -> bool:
        leaves = [t for t in tree_flatten(self.current_meta_val())[0] if isinstance(t, torch.Tensor)]
        return bool(leaves) and all(t.device.type == "cpu" for t in leaves)

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        raise LoweringError(target, args, "call_method nodes do not occur in aten graphs")

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        raise LoweringError(target, args, "call_module nodes do not occur in aten graphs")

    def output(self, target: Any, args: Any, kwargs: Any) -> Any:
        out_node = self.current_node
        assert out_node is not None
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in out_node.args[0]]
        results = []
        for value, val in zip(args[0], vals):
            if isinstance(value, IRNode):
                want = _eager_strides(val)
                view = _as_view(value) if want is not None else None
                # A view (a transpose of a value also returned or saved for the backward) is
                # returned as a strided view of that value when that gives eager's strides: no
                # copy, and it aliases the value as in eager. Never through a clone (a fresh
                # tensor in eager).
                strided = self._strided_view(view, want=want) if view is not None else None
                value = strided if strided is not None else self.realize(value, _dense_layout_hint(val))
                if want is not None and not isinstance(value, InputBuffer) \
                        and not _same_strides(value.layout, want):  # type: ignore[attr-defined]
                    # Eager's strides are part of an output's contract: the backward graph of a
                    # training forward was traced with them (a `view` of a saved value is valid
                    # only for them), and a user may `.view()` a returned tensor. A value
                    # realized earlier in another layout (contiguous for several readers, an
                    # extern's output following its inputs' strides, a cat that is a view of
                    # its one non-empty part) is copied into eager's layout; the scheduler can
                    # fuse the copy into the producing kernel.
                    value = self.realize(self._copy_of(value), want)
                if want is not None and not isinstance(value, InputBuffer):
                    value = self._with_eager_unit_strides(value, want)
            results.append(value)
        self.outputs = results
        return results

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _with_eager_unit_strides(value: IRNode, want: tuple[int, ...]) -> IRNode:
        """``value`` viewed with eager's strides in its dimensions of size 1 too. Those never
        move an element, but they are visible: ``.stride()``, and ATen's memory-format guess
        (a channels-last ``[N, C, 1, 1]`` pooled value reads as NCHW with row-major strides)."""
        layout = getattr(value, "layout", None)
        if layout is None or tuple(layout.stride) == tuple(want) or not _same_strides(layout, want):
            return value
        base = as_strided_layout(value)
        if base is None:
            return value
        buffer, lay = base
        return ReinterpretView(buffer, dataclasses.replace(lay, stride=tuple(want)))

    def _scattered_region(self, dst: InputBuffer) -> tuple[IRNode, IRNode] | None:
        """For ``copy_(x, slice_scatter(x, src, ...))`` (or select_scatter): the view of ``x`` and ``src``.

        Only when the scatter's sole user is this write-back: then the full new ``x`` is never
        needed, and writing ``src`` into the view after all kernels ran is what eager does.
        """
        from .lowering.views import select_view, slice_view

        node = self.current_node
        assert node is not None
        scatter = node.args[1]
        if not isinstance(scatter, torch.fx.Node) or len(scatter.users) != 1 or scatter.args[0] is not node.args[0]:
            return None
        src = self.env.get(scatter.args[1]) if isinstance(scatter.args[1], torch.fx.Node) else None
        if not isinstance(src, IRNode):
            return None
        aten = torch.ops.aten
        if scatter.target is aten.slice_scatter.default:
            dim, start, end, step = (list(scatter.args[2:]) + [None] * 4)[:4]
            kw = scatter.kwargs
            # Symbolic bounds are fx nodes whose values (sympy expressions) are in the env.
            dim, start, end, step = [self.env.get(v, v) if isinstance(v, torch.fx.Node) else v for v in
                                     (kw.get("dim", dim if dim is not None else 0), kw.get("start", start),
                                      kw.get("end", end), kw.get("step", step if step is not None else 1))]
            d = dim if dim >= 0 else dim + len(src.get_size())
            try:
                view = slice_view(dst, dim, start, end, step, src.get_size()[d])
            except NotImplementedError:
                return None  # a symbolic region we cannot place: the general path scatters
        elif scatter.target is aten.select_scatter.default:
            dim, index = [self.env.get(v, v) if isinstance(v, torch.fx.Node) else v for v in scatter.args[2:4]]
            try:
                view = select_view(dst, dim, index)
            except (NotImplementedError, TypeError):
                return None  # a symbolic index: the general path scatters
        else:
            return None
        if not isinstance(view, (ReinterpretView, InputBuffer)) or view.get_size() != src.get_size():
            return None
        return view, src

    def _unsupported_dtype(self, args: Any, kwargs: Any) -> torch.dtype | None:
        from torch.utils._pytree import tree_leaves

        from .codegen.common import TRITON_DTYPES
        dtypes = [a.get_dtype() for a in tree_leaves((args, kwargs)) if isinstance(a, IRNode)]
        dtypes += [v.dtype for v in tree_leaves(self.current_meta_val()) if isinstance(v, torch.Tensor)]
        for dt in dtypes:
            if dt not in TRITON_DTYPES:
                return dt
        return None

    @staticmethod
    def _op_name(n: torch.fx.Node) -> str:
        if n.op != "call_function":
            return n.op
        name = getattr(n.target, "__name__", str(n.target))
        return name.split(".")[0]

    @staticmethod
    def _source_line(n: torch.fx.Node) -> str:
        trace = n.meta.get("stack_trace") or ""
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
        for i in range(len(lines) - 1, -1, -1):
            if lines[i].startswith("File "):
                code = lines[i + 1] if i + 1 < len(lines) else ""
                return f"{lines[i]}: {code}" if code else lines[i]
        return ""


def _affine(expr: Any, idx: list[sympy.Symbol]) -> bool:
    """``expr`` is ``c + sum(k_i * idx_i)`` with integer ``c`` and ``k_i`` (no floor/mod terms)."""
    expr = sympy.expand(sympy.sympify(expr))
    rest = expr
    for v in idx:
        k = linear_coefficient(expr, v)
        if k is None:
            return False
        rest = rest - k * v
    rest = sympy.expand(rest)
    return not (rest.free_symbols & set(idx)) and rest.is_Integer


def _as_view(node: IRNode) -> View | None:
    """``node`` if it is a :class:`View` (possibly boxed), else None."""
    if isinstance(node, StorageBox) and isinstance(node.data, View):
        return node.data
    return node if isinstance(node, View) else None
