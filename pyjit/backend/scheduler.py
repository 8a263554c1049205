"""The scheduler: dependencies between buffers, dead-node elimination, and fusion.

Each :class:`SchedulerNode` is one buffer to produce (a loop nest or an extern call). A
loop node has an iteration *group* ``(xnumel, rnumel)`` and, for any candidate kernel group,
the index expressions of its loads and stores in kernel coordinates (``xindex``/``rindex``).
Looped reduction kernels may hold several loops (e.g. softmax: max, then sum, then the
normalised store); a value needed in a later loop is recomputed there (see codegen).
Two nodes may share a kernel when their groups are compatible and every value one reads from
the other is produced by the same program at the same index (:func:`can_fuse`). Fusion is
greedy by a score (bytes of memory traffic saved), never creating a cycle between kernels. A
buffer two groups merely both read saves traffic only where one load serves both (a common
index in the fused kernel); reads of disjoint slices of one buffer are no reason to fuse.
Small kernels of one group that share nothing are merged afterwards (``_fuse_siblings``): a
launch costs the host more than such a kernel's run, so a split reduction's second stages over
different partials, or every batch-norm counter increment of a model, become one kernel each.

Templates (:class:`MatmulTemplate`) are nodes over their output's elements whose inputs are
read at arbitrary indices: only pointwise nodes of the same element count that read the
template's group (its epilogue) may join them, each reading every in-kernel value at its own
index; a node producing a template input never joins (its reads never match a store). An
operand computed in the template's loads (a prologue) is part of the template node: its reads
are the template's reads.

A scatter-add (:class:`ScatterAdd`) joins nothing: its result is complete only once every
program of its atomic kernel finished, so a reader of it must be another kernel. After fusion
it becomes two groups writing one buffer: the fill, then the atomic kernel over the source
elements (``FusedGroup.in_place``: it allocates nothing; the wrapper launches it after the fill).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Iterable, Sequence

import sympy

from ..config import config
from .ir import (Buffer, ComputedBuffer, ExternKernel, InputBuffer, IRNode, MatmulTemplate, MultiOutput, Reduction,
                 ReinterpretView, ScatterAdd)
from .ops_handler import MemoryDep, RecordHandler
from .symbolic import hint, prod, simplify_with_ranges, sym, unflatten_index

XINDEX = sym("xindex")
RINDEX = sym("rindex")
# The index a template reads its inputs at, as far as fusion is concerned: it never equals a
# store index, so no producer of a template input is fused into the template's kernel.
TEMPLATE_READ = sym("template_read")


@dataclasses.dataclass(frozen=True)
class Access:
    """Loads/stores of one node, in kernel coordinates for one kernel group."""

    reads: tuple[MemoryDep, ...]
    writes: tuple[MemoryDep, ...]
    x_only: bool  # the node iterates over xindex only (an x-sized node in a reduction kernel)


class SchedulerNode:
    def __init__(self, buf: Buffer, index: int):
        self.buf = buf
        self.name = buf.name
        self.index = index
        self.is_template = isinstance(buf, MatmulTemplate)
        self.is_scatter = isinstance(buf, ScatterAdd)
        self.is_extern = not isinstance(buf, (ComputedBuffer, MatmulTemplate, ScatterAdd))
        self.is_reduction = isinstance(buf, ComputedBuffer) and isinstance(buf.data, Reduction)
        self.rsizes: list[sympy.Expr] = []
        if isinstance(buf, MatmulTemplate):
            self.sizes, self.rsizes = list(buf.layout.size), []
            self.group = (prod(self.sizes), 1)
            self.read_names = {_storage_name(n) for n in buf.tensor_inputs()} | _prologue_reads(buf)
            self.has_indirect = False
        elif isinstance(buf, ScatterAdd):
            # Iterates over the source elements; reads what the fill and the adds read.
            self.sizes, self.rsizes = list(buf.src_ranges), []
            self.group = (prod(self.sizes), 1)
            fill = RecordHandler()
            buf.fill_buffer().store_body()(fill, [sym(f"i{k}") for k in range(len(buf.layout.size))])
            rec = self._record([sym(f"i{k}") for k in range(len(self.sizes))], [])
            self.read_names = {d.name for d in [*fill.reads, *rec.reads]}
            self.has_indirect = True
        elif isinstance(buf, ComputedBuffer):
            data = buf.data
            self.sizes = list(data.get_size())
            self.rsizes = list(data.reduction_ranges) if isinstance(data, Reduction) else []
            self.group = (prod(self.sizes), prod(self.rsizes) if self.rsizes else 1)
            rec = self._record([sym(f"i{k}") for k in range(len(self.sizes))], [sym("r0")] if self.rsizes else [])
            self.read_names = {d.name for d in rec.reads}
            self.has_indirect = rec.has_indirect
        else:
            self.sizes, self.rsizes, self.group = [], [], (0, 0)
            self.read_names = _extern_reads(buf)
            self.has_indirect = False
        self.users: set[str] = set()
        self.origins = sorted(buf.get_origins())

    def _record(self, index: Sequence[sympy.Expr], rindex: Sequence[sympy.Expr]) -> RecordHandler:
        rec = RecordHandler()
        assert isinstance(self.buf, (ComputedBuffer, ScatterAdd))
        body = self.buf.store_body()
        if self.rsizes:
            body(rec, index, rindex)
        else:
            body(rec, index)
        return rec

    @functools.lru_cache(maxsize=None)
    def kernel_index(self, group: tuple[int, int]) -> tuple[list[sympy.Expr], list[sympy.Expr], bool] | None:
        """(index, rindex, x_only) of this node inside a kernel over ``group``; None if it cannot join."""
        X, R = group
        if self.is_extern:
            return None
        if self.is_template or self.is_scatter:
            if group != self.group:
                return None
            return unflatten_index(XINDEX, self.sizes), [], False
        if self.is_reduction:
            if self.group != group:
                return None
            index, rindex, x_only = unflatten_index(XINDEX, self.sizes), [RINDEX], False
        else:
            n = self.group[0]
            if R == 1 or (n == X and n != X * R):
                if n != X:
                    return None
                index, rindex, x_only = unflatten_index(XINDEX, self.sizes), [], R != 1
            elif n == X * R:
                split = _split_point(self.sizes, X)
                if split is None:
                    return None
                index = unflatten_index(XINDEX, self.sizes[:split]) + unflatten_index(RINDEX, self.sizes[split:])
                rindex, x_only = [], False
            else:
                return None
        ranges = {XINDEX: X, RINDEX: R}
        return [simplify_with_ranges(i, ranges) for i in index], rindex, x_only

    @functools.lru_cache(maxsize=None)
    def access(self, group: tuple[int, int]) -> Access | None:
        """Accesses in the coordinates of a kernel over ``group``, or None if it cannot join it."""
        placed = self.kernel_index(group)
        if placed is None:
            return None
        index, rindex, x_only = placed
        ranges = {XINDEX: group[0], RINDEX: group[1]}
        if self.is_template:
            store = MemoryDep(self.name, simplify_with_ranges(self.buf.layout.index(index), ranges))
            return Access(tuple(MemoryDep(n, TEMPLATE_READ) for n in sorted(self.read_names)), (store,), False)
        rec = self._record(index, rindex)
        simp = lambda deps: tuple(MemoryDep(d.name, simplify_with_ranges(d.index, ranges)) for d in deps)  # noqa: E731
        return Access(simp(rec.reads), simp(rec.writes), x_only)


def _in_dependency_order(nodes: list[SchedulerNode]) -> list[SchedulerNode]:
    """``nodes`` by buffer index, except that a node comes after every node of the list it reads.

    Buffer indices follow realization, not dependency: a loop registered early may read a
    value realized later (its loader reads the storage box at codegen time), and kernel
    codegen places each node after the values it reads (e.g. an x-only node after the
    reduction loop its input comes from)."""
    pending = sorted(nodes, key=lambda n: n.index)
    names = {n.name for n in pending}
    done: set[str] = set()
    out: list[SchedulerNode] = []
    while pending:
        for i, n in enumerate(pending):
            if not ((n.read_names & names) - done - {n.name}):
                break
        else:
            i = 0  # a cycle cannot happen in a DAG of buffers; keep the index order
        n = pending.pop(i)
        out.append(n)
        done.add(n.name)
    return out


def _split_point(sizes: Sequence[int], x: int) -> int | None:
    acc = 1
    for k, s in enumerate(sizes):
        if acc == x:
            return k
        acc *= s
    return len(sizes) if acc == x else None


def _extern_reads(buf: Buffer) -> set[str]:
    if isinstance(buf, MultiOutput):
        return {buf.parent.name}
    assert isinstance(buf, ExternKernel)
    names = set()
    for node in buf.tensor_inputs():
        names.add(_storage_name(node))
    return names


def _prologue_reads(tmpl: MatmulTemplate) -> set[str]:
    """Buffers the template's prologues (operands computed in its loads) read."""
    names: set[str] = set()
    for operand in tmpl.prologues():
        rec = RecordHandler()
        operand.make_loader()(rec, [sym(f"i{k}") for k in range(len(operand.get_size()))])
        names |= {d.name for d in rec.reads}
    return names


def _storage_name(node: IRNode) -> str:
    if isinstance(node, ReinterpretView):
        return node.data.name
    assert isinstance(node, Buffer), node
    return node.name


@dataclasses.dataclass(eq=False)
class FusedGroup:
    """Nodes that become one kernel (or a single extern call). Immutable once built."""

    nodes: list[SchedulerNode]
    group: tuple[int, int]
    # The atomic kernel of a scatter-add: writes into the buffer its fill group (the group just
    # before it) allocated and initialised; allocates nothing itself.
    in_place: bool = False

    def __post_init__(self) -> None:
        self.is_extern = self.nodes[0].is_extern
        self.is_template = any(n.is_template for n in self.nodes)
        self.is_scatter = any(n.is_scatter for n in self.nodes)
        self.names = frozenset(n.name for n in self.nodes)
        self._reads = frozenset(set().union(*[n.read_names for n in self.nodes]) - self.names)

    def read_names(self) -> frozenset[str]:
        return self._reads

    def has_reduction(self) -> bool:
        return any(n.is_reduction for n in self.nodes)


class Scheduler:
    def __init__(self, buffers: Sequence[Buffer], graph_inputs: Sequence[InputBuffer], output_names: set[str],
                 persistent_rmax: int):
        self.output_names = output_names
        self.persistent_rmax = persistent_rmax
        self.nodes = [SchedulerNode(b, i) for i, b in enumerate(buffers)]
        by_name = {n.name: n for n in self.nodes}
        for n in self.nodes:
            for r in n.read_names:
                if r in by_name:
                    by_name[r].users.add(n.name)
        self._eliminate_dead(by_name)
        self.by_name = {n.name: n for n in self.nodes}
        self.groups = [FusedGroup([n], n.group) for n in self.nodes]
        if config.backend_fusion:
            self._fuse()
        self.groups = self._split_scatters(self.groups)

    @staticmethod
    def _split_scatters(groups: list[FusedGroup]) -> list[FusedGroup]:
        """Each scatter-add group becomes its fill group followed by its atomic kernel's group."""
        out: list[FusedGroup] = []
        for g in groups:
            if not g.is_scatter:
                out.append(g)
                continue
            (node,) = g.nodes
            assert isinstance(node.buf, ScatterAdd)
            fill = SchedulerNode(node.buf.fill_buffer(), node.index)
            fill.users = set(node.users)
            out.append(FusedGroup([fill], fill.group))
            out.append(FusedGroup([node], node.group, in_place=True))
        return out

    # ------------------------------------------------------------------ dead code
    def _eliminate_dead(self, by_name: dict[str, SchedulerNode]) -> None:
        live: set[str] = set()
        stack = [n for n in self.output_names if n in by_name]
        # Externs run for their effect (an error check that raises as eager does; a random op,
        # whose draw moves torch's generator for every later one) stay.
        # So do collectives and their waits: every rank must issue them, whether or not its
        # graph reads the result (rank-dependent code), or the other ranks wait forever.
        from .lowering.collectives import COLLECTIVES
        stack += [n.name for n in self.nodes
                  if isinstance(n.buf, ExternKernel) and (n.buf.error_check or n.buf.random or n.buf.kernel in COLLECTIVES)]
        while stack:
            name = stack.pop()
            if name in live:
                continue
            live.add(name)
            stack.extend(r for r in by_name[name].read_names if r in by_name)
        self.nodes = [n for n in self.nodes if n.name in live]
        for n in self.nodes:
            n.users &= live

    # ------------------------------------------------------------------ fusion
    def _candidate_pairs(self) -> list[tuple[FusedGroup, FusedGroup]]:
        """Pairs of loop groups that share a buffer (one produces what the other reads, or both read it)."""
        touching: dict[str, list[FusedGroup]] = {}
        for g in self.groups:
            if g.is_extern:
                continue
            for name in g.names | g.read_names():
                touching.setdefault(name, []).append(g)
        order = {id(g): i for i, g in enumerate(self.groups)}
        pairs: dict[tuple[int, int], tuple[FusedGroup, FusedGroup]] = {}
        for groups in touching.values():
            for i, a in enumerate(groups):
                for b in groups[i + 1:]:
                    if a is not b:
                        a2, b2 = (a, b) if order[id(a)] < order[id(b)] else (b, a)
                        pairs[(id(a2), id(b2))] = (a2, b2)
        return list(pairs.values())

    def _fuse(self) -> None:
        for _ in range(10):
            candidates = []
            for a, b in self._candidate_pairs():
                score = self._score(a, b)
                if score > 0:
                    candidates.append((score, a, b))
            candidates.sort(key=lambda c: -c[0])
            fused_any = False
            done: set[int] = set()
            for score, a, b in candidates:
                if id(a) in done or id(b) in done:
                    continue
                merged = self._try_fuse(a, b)
                if merged is not None:
                    done.update((id(a), id(b)))
                    self.groups = [g for g in self.groups if g is not a and g is not b] + [merged]
                    fused_any = True
            if not fused_any:
                break
        self._fuse_siblings()
        self.groups = self._topological(self.groups)

    def _fuse_siblings(self) -> None:
        """Merge small kernels of one iteration group that share no data.

        Fusion by traffic leaves independent tiny kernels apart: the second stages of a split
        reduction over different partials, a batch-norm's counter increment next to every other
        one. Each costs a launch whose host time (microseconds) exceeds its device time, so
        kernels of at most ``_SIBLING_MAX_ELEMENTS`` iterations and the same group become one
        (up to ``_SIBLING_MAX_NODES`` nodes), wherever no dependency path runs between them.
        """
        buckets: dict[tuple[int, int], list[FusedGroup]] = {}
        for g in self.groups:
            if g.is_extern or g.is_template or g.is_scatter or not _small_group(g.group) \
                    or _access_kind(g) == "tiled":
                continue
            buckets.setdefault(g.group, []).append(g)
        for members in buckets.values():
            members.sort(key=lambda g: min(n.index for n in g.nodes))
            current: FusedGroup | None = None
            for g in members:
                merged = None
                if current is not None and len(current.nodes) + len(g.nodes) <= _SIBLING_MAX_NODES:
                    merged = self._try_fuse(current, g)
                    if merged is not None and _access_kind(merged) != _access_kind(current):
                        merged = None
                if merged is None or current is None:
                    current = g
                    continue
                self.groups = [x for x in self.groups if x is not current and x is not g] + [merged]
                current = merged

    def _score(self, a: FusedGroup, b: FusedGroup) -> int:
        """Bytes of memory traffic fusing ``a`` and ``b`` saves (0: no reason to try them).

        A buffer one produces and the other reads is never written and read back. A buffer both
        merely read counts only where one load serves both in the fused kernel: some read of
        each is at the same index in the kernel's iteration space (:meth:`_shared_loads`).
        Reads of different elements of one buffer (the q, k and v slices of a qkv projection)
        share nothing: fusing them would only force unrelated access patterns into one loop
        (strided loads and transposed stores in a 1-D kernel) and save no traffic.
        """
        produced = (a.names & b.read_names()) | (b.names & a.read_names())
        both = (a.read_names() & b.read_names()) - produced
        shared = produced | (self._shared_loads(a, b, both) if both else set())
        return sum(self._bytes(name) for name in shared)

    def _bytes(self, name: str) -> int:
        """Size of buffer ``name`` in bytes, as far as the score is concerned."""
        node = self.by_name.get(name)
        # A symbolic size counts at its example value: the score only orders candidates.
        # Graph inputs (no node) count 1: enough to make the pair a candidate.
        if node is None or node.buf.layout is None:
            return 1
        return hint(node.buf.layout.numel()) * node.buf.layout.dtype.itemsize

    def _shared_loads(self, a: FusedGroup, b: FusedGroup, names: set[str] | frozenset[str]) -> set[str]:
        """Buffers of ``names`` that ``a`` and ``b`` read at a common index in their fused kernel."""
        group = self._kernel_group(a, b)
        if group is None:
            return set()
        reads = []
        for g in (a, b):
            found: set[tuple[str, sympy.Expr]] = set()
            for n in g.nodes:
                acc = n.access(group)
                if acc is None:
                    return set()
                found.update((d.name, d.index) for d in acc.reads if d.name in names)
            reads.append(found)
        return {name for name, _ in reads[0] & reads[1]}

    def _kernel_group(self, a: FusedGroup, b: FusedGroup) -> tuple[int, int] | None:
        if a.is_scatter or b.is_scatter:
            # Readers must wait for every program's atomic adds; producers of the values stay
            # separate too (their loops run over other elements than the sources).
            return None
        if a.is_template or b.is_template:
            # Only a pointwise epilogue joins a template: same elements, reading its group.
            tmpl, other = (a, b) if a.is_template else (b, a)
            if other.is_template or other.has_reduction() or other.group != tmpl.group \
                    or not (other.read_names() & tmpl.names):
                return None
            return tmpl.group
        ga, gb = a.group, b.group
        if ga == gb:
            return ga
        if ga[1] != 1 and gb[1] == 1:
            ga, gb = gb, ga
        # ga pointwise (R=1), gb reduction-shaped: the pointwise part must fit gb's iteration.
        if ga[1] == 1 and gb[1] != 1 and ga[0] in (gb[0], gb[0] * gb[1]):
            return gb
        return None

    def _try_fuse(self, a: FusedGroup, b: FusedGroup) -> FusedGroup | None:
        group = self._kernel_group(a, b)
        if group is None:
            return None
        nodes = _in_dependency_order(a.nodes + b.nodes)
        accesses = {}
        for n in nodes:
            acc = n.access(group)
            if acc is None:
                return None
            accesses[n.name] = acc
        names = {n.name for n in nodes}
        # Every in-kernel read must hit the value the same program stored at that index.
        stores = {n.name: accesses[n.name].writes[0].index for n in nodes}
        for n in nodes:
            for dep in accesses[n.name].reads:
                if dep.name in names and dep.index != stores[dep.name]:
                    return None
        if self._creates_cycle(a, b):
            return None
        return FusedGroup(nodes, group)

    def _creates_cycle(self, a: FusedGroup, b: FusedGroup) -> bool:
        """True if a path a -> (other group) -> b or b -> ... -> a exists."""
        owner = {}
        for g in self.groups:
            for n in g.nodes:
                owner[n.name] = g
        by_name = self.by_name

        def reaches_via_other(src: FusedGroup, dst: FusedGroup) -> bool:
            stack = [owner[u] for n in src.nodes for u in n.users if u in owner and owner[u] not in (src, dst)]
            seen: set[int] = set()
            while stack:
                g = stack.pop()
                if id(g) in seen:
                    continue
                seen.add(id(g))
                if g is dst:
                    return True
                for n in g.nodes:
                    for u in by_name[n.name].users:
                        if u in owner and owner[u] is not g:
                            if owner[u] is dst:
                                return True
                            stack.append(owner[u])
            return False

        return reaches_via_other(a, b) or reaches_via_other(b, a)

    @staticmethod
    def _topological(groups: list[FusedGroup]) -> list[FusedGroup]:
        """Groups in dependency order, random externs and collectives in their program order where fusion allows.

        Random externs keep their program order (each runs after the previous one), so the
        generator hands out the same numbers as in eager: without this, a dropout independent of
        earlier ones (a decoder's embedding) was pulled ahead of them with its first reader. A
        fused group that feeds an earlier random op and reads a later one makes that order
        impossible (a cycle): then only the data dependencies order the groups.
        """
        from .lowering.collectives import COLLECTIVE_STARTS

        # Collectives are chained the same way: every rank must issue them in one order.
        randoms = sorted((n for g in groups for n in g.nodes if isinstance(n.buf, ExternKernel)
                          and (n.buf.random or n.buf.kernel in COLLECTIVE_STARTS)),
                         key=lambda n: n.index)
        after = {b.name: a.name for a, b in zip(randoms, randoms[1:])}
        try:
            return Scheduler._dependency_order(groups, after)
        except _Cycle:
            return Scheduler._dependency_order(groups, {})

    @staticmethod
    def _dependency_order(groups: list[FusedGroup], after: dict[str, str]) -> list[FusedGroup]:
        """Depth-first order by the buffers groups read, and ``after`` (node -> node it follows)."""
        owner = {n.name: g for g in groups for n in g.nodes}
        order: list[FusedGroup] = []
        state: dict[int, int] = {}

        def visit(g: FusedGroup) -> None:
            if state.get(id(g)) == 2:
                return
            if state.get(id(g)) == 1:
                if after:
                    raise _Cycle()
                raise AssertionError("fusion created a cycle")
            state[id(g)] = 1
            for r in sorted(set().union(*[n.read_names for n in g.nodes])):
                dep = owner.get(r)
                if dep is not None and dep is not g:
                    visit(dep)
            for n in g.nodes:
                previous = owner.get(after.get(n.name, ""))
                if previous is not None and previous is not g:
                    visit(previous)
            state[id(g)] = 2
            order.append(g)

        for g in sorted(groups, key=lambda g: min(n.index for n in g.nodes)):
            visit(g)
        return order


# Kernels merged only to save a launch: a few thousand elements run in about the time one
# launch takes on the host, and this many nodes keep the merged kernel's argument list short.
_SIBLING_MAX_ELEMENTS = 1 << 16
_SIBLING_MAX_NODES = 12


def _small_group(group: tuple[int, int]) -> bool:
    x, r = group
    return isinstance(x, (int, sympy.Integer)) and isinstance(r, (int, sympy.Integer)) \
        and int(x) * int(r) <= _SIBLING_MAX_ELEMENTS


def _access_kind(group: FusedGroup) -> str:
    """How the kernel generator will walk ``group``: a 2-D tiled copy, a column reduction, or
    plain rows / 1-D blocks. Siblings merge only when the merge keeps the walk of each, so
    unrelated access patterns are never forced into one loop (kernel-generator heuristics,
    imported here lazily: they read scheduler groups)."""
    if not group.has_reduction():
        from .codegen.tiling import choose_tiling
        return "tiled" if choose_tiling(group) is not None else "rows"
    from .codegen.reduction_heuristics import column_element_bytes
    loads = []
    for node in group.nodes:
        access = node.access(group.group)
        if access is not None and not access.x_only:
            loads += [(dep.index, 4) for dep in access.reads if dep.name not in group.names]
    return "columns" if column_element_bytes(loads) is not None else "rows"


class _Cycle(Exception):
    """The random-op order cannot be kept together with the data dependencies."""


def iter_nodes(groups: Iterable[FusedGroup]) -> Iterable[SchedulerNode]:
    for g in groups:
        yield from g.nodes

