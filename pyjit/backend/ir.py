"""The loop-level IR: layouts, buffers, ``Pointwise``/``Reduction`` loops and views.

Values produced by lowerings are :class:`IRNode` s. Every node can make a *loader*:
``loader(ops, index) -> value`` that reads the node's element at ``index`` (a list of
sympy expressions) through the ops handler ``ops``. Computation is described by
:class:`Pointwise` and :class:`Reduction`, whose ``inner_fn`` builds the element from loads of
other nodes; views (:class:`View`) only transform indices; :class:`ReinterpretView` is a
strided view of a realized buffer (no copy, aliasing preserved). :class:`StorageBox` holds a
value that may later be *realized* into a :class:`ComputedBuffer` (a named memory buffer).
Extern kernels (:class:`ExternKernel`) call an aten op from the wrapper; templates
(:class:`MatmulTemplate`) are generated kernels of a fixed shape whose epilogue takes fused
pointwise consumers (and whose operands may be computed in its loads: :class:`MatmulPrologue`);
:class:`ScatterAdd` is a fill kernel plus an atomic scatter-add kernel.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import sympy
import torch

from .ops_handler import OpsHandler, ReductionType
from .passes.graph_utils import is_error_check, is_random
from .symbolic import as_size, contiguous_strides, prod, strided_index

Index = Sequence[sympy.Expr]
Loader = Callable[[OpsHandler[Any], Index], Any]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a buffer's elements live: ``storage[offset + sum(index[d] * stride[d])]``.

    Sizes, strides and the offset are ints, or sympy expressions over size symbols when the
    graph has dynamic shapes (see ``symbolic.as_size``).
    """

    device: torch.device
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(device: torch.device, dtype: torch.dtype, size: Sequence[int]) -> "Layout":
        return Layout(device, dtype, tuple(as_size(s) for s in size), tuple(contiguous_strides(size)), 0)

    @staticmethod
    def of(t: torch.Tensor) -> "Layout":
        """The layout of ``t`` relative to its own data pointer (offset 0).

        Offsets in pyjit layouts count from the data pointer of the named buffer, which is what
        kernels receive; the wrapper adds the tensor's storage offset when it builds views.
        """
        return Layout(t.device, t.dtype, tuple(as_size(s) for s in t.shape), tuple(as_size(s) for s in t.stride()), 0)

    def index(self, index: Index) -> sympy.Expr:
        return strided_index(index, self.stride, self.offset)

    def numel(self) -> int:
        return prod(self.size)

    def storage_span(self) -> int:
        """Elements of storage this layout can touch (for allocation)."""
        if self.numel() == 0:
            return 0
        return self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))

    def is_contiguous(self) -> bool:
        return all(st == cst for s, st, cst in zip(self.size, self.stride, contiguous_strides(self.size)) if s != 1)


class IRNode:
    """Base of every lowered value."""

    origins: set[str]

    def get_size(self) -> list[int]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> Loader:
        raise NotImplementedError

    def numel(self) -> int:
        return prod(self.get_size())

    def get_origins(self) -> set[str]:
        return getattr(self, "origins", set())


# --------------------------------------------------------------------------- loops
@dataclasses.dataclass(eq=False)
class Loops(IRNode):
    device: torch.device
    dtype: torch.dtype
    ranges: list[int]
    origins: set[str] = dataclasses.field(default_factory=set)

    def get_size(self) -> list[int]:
        return list(self.ranges)

    def get_dtype(self) -> torch.dtype:
        return self.dtype

    def get_device(self) -> torch.device:
        return self.device


@dataclasses.dataclass(eq=False)
class Pointwise(Loops):
    """``out[index] = inner_fn(ops, index)``."""

    inner_fn: Loader = None  # type: ignore[assignment]

    def make_loader(self) -> Loader:
        return self.inner_fn


@dataclasses.dataclass(eq=False)
class Reduction(Loops):
    """``out[index] = reduce_{rindex in reduction_ranges} inner_fn(ops, index, rindex)``."""

    inner_fn: Callable[[OpsHandler[Any], Index, Index], Any] = None  # type: ignore[assignment]
    reduction_ranges: list[int] = dataclasses.field(default_factory=list)
    reduction_type: ReductionType = "sum"
    src_dtype: torch.dtype = torch.float32

    def make_loader(self) -> Loader:
        raise AssertionError("a Reduction is always realized before it is read")


# --------------------------------------------------------------------------- buffers
class Buffer(IRNode):
    """A named region of memory with a fixed layout."""

    def __init__(self, name: str, layout: Layout, origins: set[str] | None = None):
        self.name = name
        self.layout = layout
        self.origins = set(origins or ())

    def get_size(self) -> list[int]:
        return list(self.layout.size)

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def get_device(self) -> torch.device:
        return self.layout.device

    def make_loader(self) -> Loader:
        name, layout = self.name, self.layout

        def load(ops: OpsHandler[Any], index: Index) -> Any:
            return ops.load(name, layout.index(index))

        return load

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, size={list(self.layout.size)}, {self.layout.dtype})"


class InputBuffer(Buffer):
    """A graph input (``arg0_1``...)."""


class ComputedBuffer(Buffer):
    """A buffer computed by a generated kernel from a :class:`Pointwise`/:class:`Reduction`.

    ``order`` (a permutation of the dims, outer to inner; see :func:`physical_order`): the loop
    iterates the pointwise ``data`` in that order instead of the logical one, so ``self.data``
    is the permuted loop (its ranges and indices in iteration order) and the store maps the
    iteration index back to the logical index of ``layout``.
    """

    def __init__(self, name: str, layout: Layout, data: Loops, origins: set[str] | None = None,
                 order: Sequence[int] | None = None):
        super().__init__(name, layout, origins)
        self.order = tuple(order) if order is not None else None
        if self.order is not None:
            assert isinstance(data, Pointwise)
            data = _permuted(data, self.order)
        self.data = data

    def logical_index(self, index: Index) -> list[Any]:
        """The logical index of the element at iteration index ``index``."""
        if self.order is None:
            return list(index)
        out: list[Any] = [None] * len(index)
        for k, d in enumerate(self.order):
            out[d] = index[k]
        return out

    def store_body(self) -> Callable[..., None]:
        """``body(ops, index[, rindex])`` computing and storing this buffer's element."""
        name, layout, data = self.name, self.layout, self.data
        if isinstance(data, Reduction):
            def red_body(ops: OpsHandler[Any], index: Index, rindex: Index) -> None:
                value = data.inner_fn(ops, index, rindex)
                out = ops.reduction(data.dtype, data.src_dtype, data.reduction_type, value)
                ops.store(name, layout.index(index), out)
            return red_body

        logical = self.logical_index

        def pw_body(ops: OpsHandler[Any], index: Index) -> None:
            ops.store(name, layout.index(logical(index)), data.make_loader()(ops, index))
        return pw_body


def _permuted(data: Pointwise, order: Sequence[int]) -> Pointwise:
    """``data`` iterated with its dims in ``order`` (outer to inner)."""
    inner = data.inner_fn

    def fn(ops: OpsHandler[Any], index: Index) -> Any:
        logical: list[Any] = [None] * len(index)
        for k, d in enumerate(order):
            logical[d] = index[k]
        return inner(ops, logical)

    return Pointwise(data.device, data.dtype, [data.ranges[d] for d in order], set(data.origins), inner_fn=fn)


def physical_order(data: Loops, layout: Layout, any_permutation: bool = False) -> tuple[int, ...] | None:
    """The dims of a dense channels-last ``layout`` (or, with ``any_permutation``, of any dense
    permuted one: a cast keeping a transposed weight's strides) from outermost to innermost in
    memory, when a kernel should iterate ``data`` in that order; None to keep the logical order.

    A pointwise loop storing into a channels-last buffer (4-d NHWC, 5-d NDHWC) iterated in
    logical (NCHW) order walks its store and its channels-last loads with a stride of C
    elements between neighbouring lanes. Iterated in memory order every such access is
    contiguous, with a 1-D block, and a producer and consumer that both do so index their
    shared buffer alike (``xindex``), so they still fuse. Other permutations are left to the
    caller's choice: a graph output in a transposed layout that shares a tile with a contiguous
    copy of the same input is better fused than walked in its own order. Taken only when
    every load that moves along the innermost memory dim is contiguous in it (per-channel
    parameters included); a load of a row-major tensor makes it a transposing copy, left to the
    2-D tiles of ``codegen/tiling.py``.
    """
    from .ops_handler import RecordHandler
    from .symbolic import is_static, sym

    n = len(layout.size)
    if not isinstance(data, Pointwise) or n < 2 or not all(
            is_static(x) for x in (*layout.size, *layout.stride)):
        return None
    sizes = [int(x) for x in layout.size]
    strides = [int(x) for x in layout.stride]
    if layout.offset != 0:
        return None
    if any_permutation:
        # Outermost first: size-1 dims (no stride to honour), then larger strides first.
        order = tuple(sorted(range(n), key=lambda d: (sizes[d] != 1, -strides[d], d)))
    elif n in (4, 5):
        order = (0, *range(2, n), 1)  # N, spatial..., C
    else:
        return None
    inner = order[-1]
    if order == tuple(range(n)) or sizes[inner] == 1:
        return None
    expect = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expect:
            return None  # not dense
        expect *= sizes[d]
    idx = [sym(f"i{k}") for k in range(n)]
    rec = RecordHandler()
    try:
        data.inner_fn(rec, idx)
    except Exception:  # noqa: BLE001 - e.g. an unrealized reduction: keep the logical order
        return None
    if rec.has_indirect:
        return None
    zero = {v: sympy.Integer(0) for v in idx}
    for dep in rec.reads:
        index = sympy.sympify(dep.index)
        base = index.xreplace(zero)
        step = index.xreplace({**zero, idx[inner]: sympy.Integer(1)}) - base
        if not step.is_Integer or int(step) not in (0, 1):
            return None
    return order


class ExternKernel(Buffer):
    """An aten call made by the wrapper: ``name = kernel(*args, **kwargs)``.

    ``args`` mixes IR buffers/views (passed as tensors) and constants; ``layout`` is the
    expected output layout (None for multi-output kernels, read through :class:`MultiOutput`).
    """

    def __init__(self, name: str, layout: Layout | None, kernel: Any, args: Sequence[Any],
                 kwargs: dict[str, Any], origins: set[str] | None = None, reason: str = ""):
        super().__init__(name, layout, origins)  # type: ignore[arg-type]
        self.kernel = kernel
        self.args = list(args)
        self.kwargs = dict(kwargs)
        # Runs only to raise on bad input (``_linalg_check_errors``): kept although unread.
        self.error_check = is_error_check(kernel)
        # Draws from torch's generator: kept although unread, and run in program order among
        # the other random externs (scheduler), so every draw matches eager's.
        self.random = is_random(kernel)
        self.reason = reason

    def tensor_inputs(self) -> list[IRNode]:
        from torch.utils._pytree import tree_leaves
        return [a for a in tree_leaves((self.args, self.kwargs)) if isinstance(a, IRNode)]


class ScatterAdd(Buffer):
    """``name = init; name[index(i)] += value(i)`` for every ``i`` of ``src_ranges`` (index_put
    with ``accumulate=True``, embedding_dense_backward; lowering/scatter.py).

    Two kernels write the one buffer: a fill over the output's elements (``init``, a
    :class:`Pointwise`: zeros or a copy of ``self``), then a kernel over the *source* elements
    that adds each value into its target with an atomic add (several sources may hit one
    element). ``scatter_fn(ops, index) -> (target index, value, valid)``: ``valid`` (a boolean
    handler value or None) masks sources that must not write (an index outside the dimension,
    a padding index). The result is complete only after every program of the second kernel
    finished, so the scheduler never fuses this node with anything (scheduler.py).
    """

    def __init__(self, name: str, layout: Layout, init: Pointwise, src_ranges: Sequence[Any],
                 scatter_fn: Callable[[OpsHandler[Any], Index], tuple[list[Any], Any, Any]],
                 origins: set[str] | None = None):
        super().__init__(name, layout, origins)
        self.init = init
        self.src_ranges = [as_size(s) for s in src_ranges]
        self.scatter_fn = scatter_fn

    def fill_buffer(self) -> "ComputedBuffer":
        """The first kernel's node: the initial value, stored into this buffer."""
        return ComputedBuffer(self.name, self.layout, self.init, self.origins)

    def store_body(self) -> Callable[..., None]:
        """``body(ops, src_index)``: the atomic add of one source element.

        Code generators implement ``ops.atomic_add(name, index, value, valid)``; analysis
        handlers (``RecordHandler``) have none and see a plain store at the target index."""
        name, layout, scatter_fn = self.name, self.layout, self.scatter_fn

        def body(ops: OpsHandler[Any], index: Index) -> None:
            target, value, valid = scatter_fn(ops, index)
            atomic_add = getattr(ops, "atomic_add", None)
            if atomic_add is None:
                ops.store(name, layout.index(target), value)
            else:
                atomic_add(name, layout.index(target), value, valid)
        return body


class MatmulTemplate(Buffer):
    """``name = a @ b`` by a generated Triton matmul kernel (codegen/matmul_template.py).

    ``a`` is ``[M, K]`` or ``[B, M, K]``, ``b`` is ``[K, N]`` or ``[B, K, N]``, each a realized
    buffer or strided view with a static layout, or a :class:`MatmulPrologue` (an elementwise
    value computed in the template's loads); the output is contiguous. Pointwise
    consumers that read each output element at its own index are fused into the kernel's
    epilogue by the scheduler. ``config`` holds the launch configuration chosen at lowering
    time (BLOCK_M/N/K, GROUP_M, num_warps, num_stages; see runtime/autotune.py) and
    ``allow_tf32`` the fp32 precision torch's setting allowed when the graph was compiled.
    """

    def __init__(self, name: str, layout: Layout, a: IRNode, b: IRNode, config: dict[str, int],
                 allow_tf32: bool, origins: set[str] | None = None):
        super().__init__(name, layout, origins)
        self.a = a
        self.b = b
        self.config = dict(config)
        self.allow_tf32 = allow_tf32

    def tensor_inputs(self) -> list[IRNode]:
        """The operands read from memory (realized buffers or strided views of them)."""
        return [x for x in (self.a, self.b) if not isinstance(x, MatmulPrologue)]

    def prologues(self) -> list[MatmulPrologue]:
        return [x for x in (self.a, self.b) if isinstance(x, MatmulPrologue)]


class MatmulPrologue(IRNode):
    """An operand of a :class:`MatmulTemplate` computed where the template loads it.

    ``value`` is an unrealized elementwise value (a cast, a scale, ...; see
    ``lowering/matmul.py`` for which qualify): inside the template's K loop each tile of the
    operand is computed from ``value``'s own loads instead of being read from a buffer that
    a separate kernel wrote. Its loader is read when the kernel is generated, so a value
    realized meanwhile by another reader is loaded from that buffer instead (never stale).
    """

    def __init__(self, value: IRNode):
        self.value = value
        self.origins = value.get_origins()

    def get_size(self) -> list[int]:
        return self.value.get_size()

    def get_dtype(self) -> torch.dtype:
        return self.value.get_dtype()

    def get_device(self) -> torch.device:
        return self.value.get_device()

    def make_loader(self) -> Loader:
        return self.value.make_loader()


class MultiOutput(Buffer):
    """``name = parent[indices...]``: one tensor of a multi-output extern kernel."""

    def __init__(self, name: str, layout: Layout, parent: ExternKernel, indices: tuple[int, ...]):
        super().__init__(name, layout, parent.origins)
        self.parent = parent
        self.indices = indices


# --------------------------------------------------------------------------- views
class View(IRNode):
    """An index transformation of ``base``: element ``i`` of the view is ``base[reindex(i)]``."""

    def __init__(self, base: IRNode, size: Sequence[int], reindex: Callable[[Index], Index],
                 dtype: torch.dtype | None = None):
        self.base = base
        self.size = [as_size(s) for s in size]
        self.reindex = reindex
        self.origins = base.get_origins()

    def get_size(self) -> list[int]:
        return list(self.size)

    def get_dtype(self) -> torch.dtype:
        return self.base.get_dtype()

    def get_device(self) -> torch.device:
        return self.base.get_device()

    def make_loader(self) -> Loader:
        base, reindex = self.base, self.reindex

        def load(ops: OpsHandler[Any], index: Index) -> Any:
            return base.make_loader()(ops, reindex(index))

        return load


class ReinterpretView(IRNode):
    """A strided view of a realized buffer: same storage, another layout (no copy)."""

    def __init__(self, data: Buffer, layout: Layout):
        self.data = data
        self.layout = layout
        self.origins = data.get_origins()

    def get_size(self) -> list[int]:
        return list(self.layout.size)

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def get_device(self) -> torch.device:
        return self.layout.device

    def make_loader(self) -> Loader:
        name, layout = self.data.name, self.layout

        def load(ops: OpsHandler[Any], index: Index) -> Any:
            return ops.load(name, layout.index(index))

        return load


class StorageBox(IRNode):
    """A lowered value that is either still a loop (inlined into its users) or realized.

    ``realize()`` turns a loop into a named :class:`ComputedBuffer`; the owner (graph lowering)
    is passed explicitly so that buffers are registered without a global graph.
    """

    def __init__(self, data: IRNode):
        self.data = data

    @property
    def origins(self) -> set[str]:  # type: ignore[override]
        return self.data.get_origins()

    def get_size(self) -> list[int]:
        return self.data.get_size()

    def get_dtype(self) -> torch.dtype:
        return self.data.get_dtype()

    def get_device(self) -> torch.device:
        return self.data.get_device()

    def make_loader(self) -> Loader:
        # Read ``self.data`` at call time: a box realized after this loader was made still
        # loads from its buffer, never recomputes a stale loop.
        def load(ops: OpsHandler[Any], index: Index) -> Any:
            return self.data.make_loader()(ops, index)

        return load

    def is_realized(self) -> bool:
        return isinstance(self.data, Buffer)

    def __repr__(self) -> str:
        return f"StorageBox({self.data!r})"


def unwrap(node: IRNode) -> IRNode:
    """Strip storage boxes."""
    while isinstance(node, StorageBox):
        node = node.data
    return node


def as_strided_layout(node: IRNode) -> tuple[Buffer, Layout] | None:
    """``(buffer, layout)`` if ``node`` is a realized buffer or a strided view of one."""
    node = unwrap(node)
    if isinstance(node, Buffer) and node.layout is not None:
        return node, node.layout
    if isinstance(node, ReinterpretView):
        return node.data, node.layout
    return None
