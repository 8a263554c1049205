"""What every kernel target shares: code-writing helpers and the base kernel class.

:class:`Kernel` is the part of an ops handler (``ops_handler.OpsHandler``) that does not
depend on the language printed: it places the fused group's nodes into sections (``pre``,
then per reduction loop ``acc{i}`` / ``loop{i}`` / ``post{i}``), scopes and reuses common
subexpressions (:class:`CSEVar` temporaries), recomputes values produced in an earlier loop,
prints index expressions with the target's printer, and turns ``unary``/``binary`` into the
target's op tables (``UNARY``/``BINARY``: op name -> function printing the expression).
``TritonKernel`` (``triton.py``) and ``CppKernel`` (``cpp.py``) are its two subclasses; which
one a graph gets is decided once per device by its :class:`~.target.KernelTarget`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Callable, ClassVar, Iterator, Mapping, Union

import sympy
import torch

from ..ops_handler import COMPARISONS, LOGICAL, BinaryOp, UnaryOp
from ..scheduler import XINDEX, FusedGroup, SchedulerNode
from ..symbolic import is_static, simplify_with_ranges

TRITON_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def triton_dtype(dtype: torch.dtype) -> str:
    try:
        return TRITON_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"no Triton type for {dtype}") from None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp16/bf16 values are loaded and computed in fp32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class IndentedBuffer:
    def __init__(self, indent: int = 0):
        self.lines: list[str] = []
        self._indent = indent

    def writeline(self, line: str) -> None:
        self.lines.append(("    " * self._indent + line) if line else "")

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.writeline(line)

    @contextlib.contextmanager
    def indent(self, n: int = 1) -> Iterator[None]:
        self._indent += n
        try:
            yield
        finally:
            self._indent -= n

    def getvalue(self) -> str:
        return "\n".join(self.lines) + "\n"


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def drop_dead_loop_temporaries(sections: Mapping[str, IndentedBuffer], assign: "re.Pattern[str]") -> None:
    """Remove assignments to ``tmpN`` in the ``loop*`` sections that nothing reads (left behind
    when a reduction moved to an earlier loop), until none is left, so a loop with no work left
    is not emitted and reads no memory. ``assign`` matches a line assigning ``tmpN`` (group 1)
    in the generator's syntax (Triton: ``tmp3 = ...``; C++: ``float tmp3 = ...``)."""
    changed = True
    while changed:
        changed = False
        text = "\n".join(line for sec in sections.values() for line in sec.lines)
        counts: dict[str, int] = {}
        for m in re.finditer(r"\btmp\d+\b", text):
            counts[m.group(0)] = counts.get(m.group(0), 0) + 1
        for name, sec in sections.items():
            if not name.startswith("loop"):
                continue
            kept = [line for line in sec.lines if (m := assign.match(line)) is None or counts.get(m.group(1), 0) > 1]
            changed |= len(kept) != len(sec.lines)
            sec.lines = kept


@dataclasses.dataclass(frozen=True)
class CSEVar:
    """A kernel temporary (``tmp3``) and the dtype its value is computed in."""

    name: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.name


def column_load_bytes(group: FusedGroup, dtypes: dict[str, torch.dtype]) -> int | None:
    """Element bytes of a reduction kernel's x-contiguous loads if it is a column reduction
    (``reduction_heuristics.column_element_bytes``): the memory reads of its r-iterated nodes,
    in kernel coordinates. Values produced inside the kernel are not memory reads."""
    from .reduction_heuristics import column_element_bytes
    loads: list[tuple[sympy.Expr, int]] = []
    for node in group.nodes:
        access = node.access(group.group)
        if access is None or access.x_only:
            continue
        loads += [(dep.index, dtypes[dep.name].itemsize) for dep in access.reads
                  if dep.name not in group.names and dep.name in dtypes]
    return column_element_bytes(loads)


# A table entry prints one op: ``(kernel, x)`` (unary) or ``(kernel, a, b, dtype)`` (binary,
# ``dtype`` the promoted one) -> the expression, or an existing value (the op is the identity).
UnaryFormat = Callable[[Any, CSEVar], Union[str, CSEVar]]
BinaryFormat = Callable[[Any, CSEVar, CSEVar, torch.dtype], Union[str, CSEVar]]

# Unary ops whose result is a bool whatever the input (the protocol's dtype rule).
PREDICATES = frozenset({"isnan", "isinf", "signbit", "logical_not"})


class Kernel:
    """Generates one kernel of a fused group; subclasses print one target's language.

    A subclass provides the op tables ``UNARY``/``BINARY``, ``_assign`` (a temporary's
    definition line), ``printer`` (index expressions), ``RINDEX`` (its reduction index symbol),
    the memory ops (``_load_expr``, ``_store_line``), ``constant``, ``index_expr``,
    ``to_dtype``, ``where``, ``indirect_indexing`` and ``reduction``.
    """

    UNARY: ClassVar[Mapping[str, UnaryFormat]] = {}
    BINARY: ClassVar[Mapping[str, BinaryFormat]] = {}
    TARGET: ClassVar[str] = ""  # the language, for error messages
    COMMENT: ClassVar[str] = "#"
    RINDEX: ClassVar[sympy.Symbol]
    DEAD_ASSIGN: ClassVar["re.Pattern[str]"]  # a loop temporary's assignment line (group 1: its name)

    def __init__(self, group: FusedGroup, kernel_index: int, removed: set[str], dtypes: dict[str, torch.dtype],
                 node_info: dict[str, tuple[str, str]], size_symbols: frozenset[str] = frozenset()):
        from .tiling import choose_tiling  # tiling imports this module
        self.group = group
        self.xnumel, self.rnumel = group.group
        self.size_symbols = size_symbols
        self.dynamic = not (is_static(self.xnumel) and is_static(self.rnumel))
        self.is_reduction = self.rnumel != 1
        self.persistent = not self.is_reduction  # a target may hold whole rows (Triton)
        self.removed = removed
        self.dtypes = dtypes
        self.node_info = node_info
        self.kernel_index = kernel_index
        self.inputs: dict[str, str] = {}
        self.outputs: dict[str, str] = {}
        # Sections: "pre" (before any loop), then per reduction loop i: "acc{i}" (accumulator
        # initialisation), "loop{i}" (the body), "post{i}" (finalised reductions, epilogues).
        self.sections: dict[str, IndentedBuffer] = {"pre": IndentedBuffer()}
        self.section = "pre"
        self.loop = 0  # the loop the current node runs in (looped kernels)
        self.num_loops = 0
        self.producers = {n.name: n for n in group.nodes}
        self.store_after_loop = False
        self.cache: dict[tuple[str, str], CSEVar] = {}  # (scope, expression) -> value
        self.counter = 0
        self.defs: dict[str, tuple[str, str]] = {}  # temporary -> (section, expression)
        # Finished looped float max -> (its loop, the value it reduced): lets a later
        # sum(exp(value - max)) run online in the max's loop (the targets' _online_exp_sum).
        self.max_of: dict[str, tuple[int, str]] = {}
        self.mask = "xmask"
        # A template kernel (codegen/matmul_template.py) lays out its own 2-D tile.
        # A scatter-add's atomic kernel indexes its targets indirectly: 1-D blocks.
        self.tiling = None if (self.is_reduction or self.dynamic or group.is_template
                               or group.is_scatter) else choose_tiling(group)

    # ------------------------------------------------------------------ scoping and CSE
    def _scopes(self) -> tuple[str, ...]:
        """Sections whose values are visible from the current one."""
        if self.section == "pre":
            return ("pre",)
        match = re.fullmatch(r"(acc|loop|post)(\d+)", self.section)
        assert match is not None, self.section
        kind, i = match.group(1), int(match.group(2))
        posts = tuple(f"post{j}" for j in range(i if kind == "loop" else i + 1))
        return ("pre", *posts, self.section) if kind == "loop" else ("pre", *posts)

    def _section(self, name: str) -> IndentedBuffer:
        return self.sections.setdefault(name, IndentedBuffer())

    def _lookup(self, key: str) -> CSEVar | None:
        for scope in self._scopes():
            hit = self.cache.get((scope, key))
            if hit is not None:
                return hit
        return None

    def _assign(self, name: str, expr: str, dtype: torch.dtype) -> str:
        """The line defining temporary ``name`` as ``expr``."""
        raise NotImplementedError

    def _emit(self, expr: str, dtype: torch.dtype, cse: bool = True) -> CSEVar:
        if cse:
            hit = self._lookup(expr)
            if hit is not None:
                return hit
        var = CSEVar(f"tmp{self.counter}", dtype)
        self.counter += 1
        self._section(self.section).writeline(self._assign(var.name, expr, dtype))
        self.defs[var.name] = (self.section, expr)
        if cse:
            self.cache[(self.section, expr)] = var
        return var

    def _post(self, expr: str, dtype: torch.dtype) -> CSEVar:
        """A value after the current loop (a finished reduction), in ``post{loop}``."""
        var = CSEVar(f"tmp{self.counter}", dtype)
        self.counter += 1
        self._section(f"post{self.loop}").writeline(self._assign(var.name, expr, dtype))
        self.defs[var.name] = (f"post{self.loop}", var.name)  # its section (a row constant)
        return var

    def _canonical(self, name: str, memo: dict[str, str] | None = None) -> str:
        """A loop temporary's expression with the loop temporaries it uses expanded, so the
        same computation in two loops (different names, same loads) compares equal."""
        memo = {} if memo is None else memo
        if name in memo:
            return memo[name]
        section, expr = self.defs.get(name, ("pre", name))
        if not section.startswith("loop"):
            memo[name] = name
            return name
        out = re.sub(r"\btmp\d+\b", lambda m: f"({self._canonical(m.group(0), memo)})", expr)
        memo[name] = out
        return out

    def _drop_dead_loop_temporaries(self) -> None:
        drop_dead_loop_temporaries(self.sections, self.DEAD_ASSIGN)

    # ------------------------------------------------------------------ index printing
    def printer(self, expr: sympy.Expr) -> str:
        """``expr`` in the target's syntax."""
        raise NotImplementedError

    def _index_ranges(self) -> dict[sympy.Symbol, Any]:
        from .tiling import YINDEX
        if self.tiling is not None:
            return {XINDEX: self.tiling.xnumel, YINDEX: self.tiling.ynumel}
        return {XINDEX: self.xnumel, self.RINDEX: self.rnumel}

    def _index_str(self, index: sympy.Expr) -> str:
        return self.printer(simplify_with_ranges(index, self._index_ranges()))

    # ------------------------------------------------------------------ memory
    def _load_expr(self, name: str, index: sympy.Expr) -> tuple[str, torch.dtype]:
        """(the expression reading ``name`` at ``index``, the dtype it computes in)."""
        raise NotImplementedError

    def _store_line(self, name: str, index: sympy.Expr, value: CSEVar) -> None:
        """Write the store of ``value`` to ``name`` at ``index`` into the current section."""
        raise NotImplementedError

    def load(self, name: str, index: sympy.Expr) -> CSEVar:
        key = f"store:{name}:{self._index_str(index)}"
        hit = self._lookup(key)
        if hit is not None:
            return hit
        producer = self.producers.get(name)
        if producer is not None:
            # Produced by this kernel at this very index (the scheduler checked), but in an
            # earlier reduction loop whose registers are gone: recompute it here rather than
            # read memory this program may not see written yet.
            return self._recompute(producer, name, index)
        expr, dtype = self._load_expr(name, index)
        return self._emit(expr, dtype)

    def store(self, name: str, index: sympy.Expr, value: CSEVar) -> None:
        if self.store_after_loop:
            # A looped reduction's value exists only after its loop: store it there.
            section, mask = self.section, self.mask
            self.section, self.mask, self.store_after_loop = f"post{self.loop}", "xmask", False
            try:
                self.store(name, index, value)
            finally:
                self.section, self.mask, self.store_after_loop = section, mask, True
            return
        self.cache[(self.section, f"store:{name}:{self._index_str(index)}")] = value
        if name in self.removed:
            return
        self._store_line(name, index, value)

    def _recompute(self, producer: SchedulerNode, name: str, index: sympy.Expr) -> CSEVar:
        from .tiling import tiled_index
        data = getattr(producer.buf, "data", None)
        placed = producer.kernel_index(self.group.group)
        if data is None or placed is None or producer.is_reduction:
            raise AssertionError(f"kernel reads {name} at {index} outside the scope that computed it")
        # The producer's value at this program's own point: in a tiled kernel that point is
        # over yindex/xindex, not the 1-D placement (which would drop the y terms).
        point = tiled_index(self.tiling, producer) if self.tiling is not None else placed[0]
        value = data.make_loader()(self, point)
        self.cache[(self.section, f"store:{name}:{self._index_str(index)}")] = value
        return value

    # ------------------------------------------------------------------ pointwise ops (tables)
    def unary(self, op: UnaryOp, x: CSEVar) -> CSEVar:
        fmt = self.UNARY.get(op)
        if fmt is None:
            raise NotImplementedError(f"no {self.TARGET} code for unary {op}")
        out = fmt(self, x)
        if isinstance(out, CSEVar):
            return out
        return self._emit(out, torch.bool if op in PREDICATES else x.dtype)

    def binary(self, op: BinaryOp, a: CSEVar, b: CSEVar) -> CSEVar:
        fmt = self.BINARY.get(op)
        if fmt is None:
            raise NotImplementedError(f"no {self.TARGET} code for binary {op}")
        dt = torch.promote_types(a.dtype, b.dtype)
        out = fmt(self, a, b, dt)
        if isinstance(out, CSEVar):
            return out
        return self._emit(out, torch.bool if op in COMPARISONS or op in LOGICAL else dt)

    # ------------------------------------------------------------------ placement of nodes
    def codegen_nodes(self) -> None:
        """Run every node's body through this handler, each in the section it belongs to.

        Looped kernels: ``avail[name]`` is the first loop whose r-iterated nodes may use the
        value (a reduction finished in loop i is available from loop i + 1 on)."""
        from .tiling import tiled_index
        avail: dict[str, int] = {}
        for node in self.group.nodes:
            placed = node.kernel_index(self.group.group)
            assert placed is not None, node.name
            index, rindex, x_only = placed
            deps = [avail[r] for r in node.read_names if r in avail]
            first = max(deps, default=0)
            if self.tiling is not None:
                index = tiled_index(self.tiling, node)  # nodes of different sizes: via the common dims
                self.section, self.mask = "pre", "ymask & xmask"
            elif not self.is_reduction:
                self.section, self.mask = "pre", "xmask"
            elif self.persistent:
                self.section, self.mask = "pre", ("xmask" if x_only else "rmask & xmask")
            elif x_only:
                self.section, self.mask = ("pre" if first == 0 else f"post{first - 1}"), "xmask"
            else:
                self.loop = first
                self.num_loops = max(self.num_loops, first + 1)
                self.section, self.mask = f"loop{first}", "rmask & xmask"
            avail[node.name] = first + 1 if (node.is_reduction and not self.persistent) else first
            body = node.buf.store_body()  # type: ignore[attr-defined]
            if node.is_reduction:
                self.store_after_loop = not self.persistent
                try:
                    body(self, index, rindex)
                finally:
                    self.store_after_loop = False
            else:
                body(self, index)

    # ------------------------------------------------------------------ naming
    def _ordered_origins(self) -> list[str]:
        """Origin fx nodes of the kernel's nodes, in graph order."""
        position = {name: i for i, name in enumerate(self.node_info)}
        names = {o for node in self.group.nodes for o in node.origins}
        return sorted(names, key=lambda o: position.get(o, len(position)))

    def kernel_name(self) -> str:
        ops: list[str] = []
        for origin in self._ordered_origins():
            op = self.node_info.get(origin, (origin, ""))[0]
            if op not in ops and op not in ("placeholder", "output"):
                ops.append(op)
        label = "_".join(o.replace(".", "_") for o in ops[:6]) or "kernel"
        return f"pyjit_fused_{label}_{self.kernel_index}"

    def _origin_comments(self) -> list[str]:
        """Comment lines naming the graph nodes the kernel computes (at most 12)."""
        lines = []
        seen = set()
        for origin in self._ordered_origins():
            op, where = self.node_info.get(origin, (origin, ""))
            text = f"{self.COMMENT} {origin} = {op}" + (f"  <- {where}" if where else "")
            if text not in seen:
                seen.add(text)
                lines.append(text)
        return lines[:12]
