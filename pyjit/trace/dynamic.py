"""Dynamic shapes in the tracer: which tensor dimensions and Python scalars of a frame are
symbolic, the ``ShapeEnv`` their symbols live in, and the shape guards a finished trace relied on.

Deciding (per code object, :class:`ShapeMemory` remembers what earlier traces saw):

- ``dynamic=None`` (default, *automatic dynamic*): the first trace is static; a later trace of
  the same code that sees a different size for a dimension of the same input (same source)
  makes that dimension a symbol from then on (logged on ``recompiles``); a Python ``int`` /
  ``float`` read from a source that changed value becomes a symbolic graph input likewise.
- ``dynamic=True``: every dimension is a symbol from the first trace.
- ``dynamic=False``: never.
- ``pyjit.mark_dynamic(t, dim)`` / ``pyjit.mark_static(t, dim)`` override per tensor
  (``mark_dynamic`` is honoured unless ``dynamic=False``).
- Sizes 0 and 1 are never symbols (their semantics differ: broadcasting, empty loops);
  parameters (``nn.Parameter``) stay static.
- A symbol the trace had to *specialise* (Python needed its value: ``if n > 4``, ``range(n)``)
  keeps the trace correct through a guard; its source is then remembered as static so later
  traces do not make it symbolic again only to specialise it again.

Guards (:func:`finalize_shape_guards`, once per trace): each symbolic input's tensor guard
leaves its symbolic sizes/strides unchecked and *binds* them to slots; every relation the
trace relied on (``ShapeEnv`` guards, the 0/1-specialisation ranges ``s0 >= 2``, and
equalities found while tracing such as ``s1 == s0``) becomes a ``SHAPE`` guard over those
slots, compiled into the C guard tree (``pyjit/guards/shape_program.py``) and printed in
source form: ``L['x'].size()[0] >= 2``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..guards.shape_relation import ShapeRelation, SlotOrigin
from ..logs import get_logger

if TYPE_CHECKING:
    import sympy

    from ..guards.source import Source
    from .output_graph import GraphInput, OutputCodegen, OutputGraph

_recompile_log = get_logger("recompiles")
_dyn_log = get_logger("dynamic")

_STATIC = "static"  # ShapeMemory marker: never make this dimension / scalar symbolic again
_DYNAMIC = None     # ShapeMemory marker: this dimension is symbolic


class ShapeMemory:
    """What the traces of one code object saw: sizes per tensor source, values per scalar source."""

    def __init__(self) -> None:
        self.sizes: dict[str, list[Any]] = {}    # source name -> per dim: size seen, _DYNAMIC or _STATIC
        self.scalars: dict[str, Any] = {}        # source name -> (value,), _DYNAMIC or _STATIC

    def clear(self) -> None:
        self.sizes.clear()
        self.scalars.clear()


@dataclasses.dataclass
class DynamicPolicy:
    """How one trace chooses its symbols: the ``jit(dynamic=...)`` mode and the code's memory."""

    mode: bool | None
    memory: ShapeMemory
    code_name: str = ""

    def tensor_dims(self, name: str, value: torch.Tensor) -> list[bool]:
        """Which dimensions of the tensor read from source ``name`` are symbolic in this trace."""
        sizes = tuple(value.shape)
        marked_dyn = set(getattr(value, "_pyjit_dynamic_dims", ()))
        marked_static = set(getattr(value, "_pyjit_static_dims", ()))
        if self.mode is False or isinstance(value, torch.nn.Parameter):
            return [False] * len(sizes)
        if self.mode is True:
            dyn = [d not in marked_static for d in range(len(sizes))]
        else:
            dyn = [d in marked_dyn and d not in marked_static for d in range(len(sizes))]
            seen = self.memory.sizes.get(name)
            if seen is None or len(seen) != len(sizes):
                self.memory.sizes[name] = list(sizes)
            else:
                for d, size in enumerate(sizes):
                    before = seen[d]
                    if before is _STATIC or d in marked_static:
                        continue
                    if before is _DYNAMIC:
                        dyn[d] = True
                    elif before != size:
                        seen[d] = _DYNAMIC
                        dyn[d] = True
                        _recompile_log.info("%s: %s.size()[%d] is dynamic from now on (it was %d, now %d)",
                                            self.code_name, name, d, before, size)
        return [flag and size >= 2 for flag, size in zip(dyn, sizes)]

    def scalar_is_dynamic(self, name: str, value: Any) -> bool:
        """Whether the int/float read from source ``name`` becomes a symbolic graph input."""
        if self.mode is False:
            return False
        seen = self.memory.scalars.get(name, ())
        if seen is _STATIC:
            return False
        if seen is _DYNAMIC:
            return True
        if seen == ():
            self.memory.scalars[name] = (value,)
            return False
        if type(seen[0]) is type(value) and seen[0] == value:
            return False
        self.memory.scalars[name] = _DYNAMIC
        _recompile_log.info("%s: %s is a symbolic input from now on (it was %r, now %r)",
                            self.code_name, name, seen[0], value)
        return True

    def specialised(self, kind: str, name: str, dim: int | None) -> None:
        """A symbol of this source was needed as a constant: keep it static from now on."""
        if kind == "scalar":
            self.memory.scalars[name] = _STATIC
        else:
            seen = self.memory.sizes.get(name)
            if seen is not None and dim is not None and dim < len(seen):
                seen[dim] = _STATIC
        _recompile_log.info("%s: %s%s was specialised (Python needed its value); it stays static", self.code_name,
                            name, "" if kind == "scalar" else f".size()[{dim}]")


# -- symbols of one trace ------------------------------------------------------------------------

class CallableName(str):
    """A source name that works both as an attribute and as a method (torch versions differ in
    whether ``Source.name`` is a property or a method)."""

    def __call__(self) -> str:
        return str(self)


def torch_source(source: "Source") -> Any:
    """A ``torch._guards.Source`` naming pyjit's ``source`` (the ShapeEnv wants one per symbol)."""
    return _torch_source_class()(source.name())


_SOURCE_CLASS: list[Any] = []


def _torch_source_class() -> Any:
    if not _SOURCE_CLASS:
        from torch._guards import Source as TorchSource

        @dataclasses.dataclass(frozen=True)
        class PyjitSymbolSource(TorchSource):  # type: ignore[misc]
            text: str = ""

            @property  # type: ignore[misc]
            def name(self) -> CallableName:  # type: ignore[override]
                return CallableName(self.text)

            def reconstruct(self, codegen: Any) -> None:  # pragma: no cover - never used by pyjit
                raise NotImplementedError

        _SOURCE_CLASS.append(PyjitSymbolSource)
    return _SOURCE_CLASS[0]


def new_shape_env() -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # duck_shape=False: equal sizes seen at trace time are not assumed equal later; only the
    # equalities the trace relies on (broadcasting, cat...) are recorded, as guards.
    return ShapeEnv(duck_shape=False, specialize_zero_one=True)


def symbolic_context(dims: list[bool]) -> Any:
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    return StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dims])


def symbol_of(value: Any) -> "sympy.Symbol | None":
    """The bare sympy symbol a Sym* value was created as (None for a compound expression).

    Read from the node's own expression, not ``node.expr``: that one applies the ShapeEnv's
    replacements, so once the trace specialised the symbol (``range(n)`` recorded ``Eq(s0, 3)``)
    it reads ``3``, and the input would look like a constant that needs no guard."""
    import sympy

    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        node = value.node
        expr = getattr(node, "_expr", None)
        if expr is None:
            expr = node.expr
    else:
        expr = value
    return expr if isinstance(expr, sympy.Symbol) else None


def record_origins(output: "OutputGraph", source: "Source", fake: Any) -> None:
    """Remember, for each bare symbol among a new input's sizes/strides, where it is read."""
    if isinstance(fake, (torch.SymInt, torch.SymFloat)):
        sym = symbol_of(fake)
        if sym is not None:
            output.symbol_origins.setdefault(sym, SlotOrigin(source, "scalar", None))
        return
    for what, values in (("size", fake.size()), ("stride", fake.stride())):
        for d, v in enumerate(values):
            if isinstance(v, torch.SymInt):
                sym = symbol_of(v)
                if sym is not None:
                    output.symbol_origins.setdefault(sym, SlotOrigin(source, what, d))


# -- rebuilding a symbolic value in Python after the graph ---------------------------------------

def python_function_of(expr: "sympy.Expr", origins: dict[Any, SlotOrigin], *, float_result: bool
                       ) -> tuple[Callable[..., Any], list["Source"]]:
    """A Python function computing ``expr`` from the input values its symbols are read from,
    and the sources to call it with (one argument per distinct source)."""
    import sympy
    from torch.utils._sympy.printers import PythonPrinter

    sources: list[Any] = []
    renamed: dict[Any, Any] = {}
    for sym in sorted(expr.free_symbols, key=str):
        origin = origins.get(sym)
        if origin is None:
            raise KeyError(f"symbol {sym} has no input it is read from")
        if origin.source not in sources:
            sources.append(origin.source)
        arg = f"a{sources.index(origin.source)}"
        text = arg if origin.what == "scalar" else f"{arg}.{origin.what}({origin.dim})"
        renamed[sym] = sympy.Symbol(text)
    body = PythonPrinter().doprint(expr.xreplace(renamed))
    conv = "float" if float_result else "int"
    params = ", ".join(f"a{i}" for i in range(len(sources)))
    import math

    import torch

    # torch's printer writes casts and integer functions as torch.sym_float(...), math.floor(...)
    namespace: dict[str, Any] = {"torch": torch, "math": math}
    exec(f"def ___pyjit_symbolic_value({params}):\n    return {conv}({body})\n", namespace)  # noqa: S102 - our own text
    fn = namespace["___pyjit_symbolic_value"]
    try:  # pyjit's own helper: never a frame to compile
        from .. import _C

        _C.mark_skip(fn.__code__)
    except ImportError:
        pass
    return fn, sources


def reconstruct_symbolic(cg: "OutputCodegen", example: Any) -> str:
    """``SymNodeVariable.reconstruct``: the value computed from the inputs' sizes at run time."""
    output = cg.output
    expr = output.shape_env.simplify(example.node.expr)
    if expr.is_number:
        return cg.constant(float(expr) if isinstance(example, torch.SymFloat) else
                           bool(expr) if isinstance(example, torch.SymBool) else int(expr))
    if isinstance(example, torch.SymBool):
        return cg.constant(bool(example))  # guarded by the ShapeEnv
    try:
        fn, sources = python_function_of(expr, output.symbol_origins, float_result=isinstance(example, torch.SymFloat))
    except KeyError:
        value = int(example) if isinstance(example, torch.SymInt) else float(example)  # specialise (guarded)
        return cg.constant(value)
    return f"{cg.ref(fn, 'symbolic_value')}({', '.join(s.expr() for s in sources)})"


# -- guards -------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Binding:
    origin: SlotOrigin
    slot: int


def finalize_shape_guards(output: "OutputGraph", policy: DynamicPolicy | None) -> None:
    """Turn what the ShapeEnv learnt during the trace into guards (see the module docstring)."""
    import sympy

    from ..guards.guards import GuardKind, TensorSpec

    env = output.shape_env
    if not output.symbolic_inputs:
        return
    slot_symbols: list[Any] = []       # slot -> the sympy symbol standing for it in relations
    slot_origins: list[SlotOrigin] = []
    bound: dict[Any, int] = {}          # ShapeEnv symbol -> slot holding its value
    relations: list[Any] = []

    def new_slot(origin: SlotOrigin) -> int:
        slot = len(slot_origins)
        slot_origins.append(origin)
        slot_symbols.append(sympy.Symbol(f"___slot{slot}", integer=True))
        return slot

    scalar_inputs: list["GraphInput"] = []
    for gi in list(output.symbolic_inputs):
        fake = gi.node.meta["example_value"]
        if not isinstance(fake, torch.Tensor):
            scalar_inputs.append(gi)
            if not gi.node.users:
                # Read (e.g. passed on to a resume function) but not used by the graph: not an
                # input of it; it is still guarded (by type, or by value if specialised).
                output.graph.erase_node(gi.node)
                output.inputs.remove(gi)
            continue
        sizes: list[int | None] = []
        strides: list[int | None] = []
        binds: list[tuple[int, int, int]] = []
        for what, values, out in (("size", fake.size(), sizes), ("stride", fake.stride(), strides)):
            for d, v in enumerate(values):
                expr = env.simplify(v.node.expr) if isinstance(v, torch.SymInt) else sympy.Integer(v)
                if expr.is_number:
                    out.append(int(expr))
                    if isinstance(v, torch.SymInt) and what == "size" and policy is not None:
                        sym = symbol_of(v)
                        if sym is not None and output.symbol_origins.get(sym, None) is not None \
                                and output.symbol_origins[sym].source == gi.source:
                            policy.specialised("size", gi.source.name(), d)
                    continue
                out.append(None)
                slot = new_slot(SlotOrigin(gi.source, what, d))
                binds.append((0 if what == "size" else 1, d, slot))
                if isinstance(expr, sympy.Symbol) and expr not in bound:
                    bound[expr] = slot
                else:
                    relations.append(("eq", slot, expr))
        spec = TensorSpec(type(gi.value), gi.value.dtype, gi.value.device, bool(gi.value.requires_grad),
                          tuple(sizes), tuple(strides), tuple(binds))
        output.guards.replace_expected(GuardKind.TENSOR_MATCH, gi.source, spec)

    # Scalars: an int keeps its symbol (a slot read from its source) unless the trace
    # specialised it; a float used in any relation is pinned to its value (EQUALS guard).
    scalar_syms: dict[Any, "GraphInput"] = {}
    for gi in scalar_inputs:
        sym = symbol_of(gi.node.meta["example_value"])
        if sym is not None:
            scalar_syms[sym] = gi

    exprs: list[Any] = [env.simplify(g.expr) for g in env.guards]
    pinned: set[Any] = {sym for sym in scalar_syms if env.simplify(sym).is_number}
    # A guard such as Eq(10*s0 + s1, 7) (an f-string needed the value) becomes a ShapeEnv
    # replacement s1 -> 7 - 10*s0 and then simplifies to True: the replacement itself is the
    # relation to guard, or the entry would accept any s1.
    replaced: dict[Any, Any] = {}
    for sym in scalar_syms:
        if sym not in pinned:
            target = env.simplify(sym)
            if target != sym:
                replaced[sym] = target
    for e in exprs + [r[2] for r in relations] + [sympy.Eq(s, t) for s, t in replaced.items()]:
        pinned |= {sym for sym in e.free_symbols & set(scalar_syms) if type(scalar_syms[sym].value) is float}
    for sym, gi in scalar_syms.items():
        if sym in pinned:
            output.guards.add(GuardKind.EQUALS_MATCH, gi.source, gi.value)
            if policy is not None:
                policy.specialised("scalar", gi.source.name(), None)
            continue
        output.guards.add(GuardKind.TYPE_MATCH, gi.source, type(gi.value))
        if type(gi.value) is int:
            bound[sym] = new_slot(SlotOrigin(gi.source, "scalar", None))
            if sym in replaced:
                relations.append(("eq", bound[sym], replaced[sym]))
    values = {sym: scalar_syms[sym].value for sym in pinned}
    for sym in list(bound):
        rng = env.var_to_range.get(sym)
        if rng is not None:
            # Infinite bounds are torch's own sympy classes (int_oo), never Integer.
            if isinstance(rng.lower, sympy.Integer):
                exprs.append(sympy.Ge(sym, rng.lower))
            if isinstance(rng.upper, sympy.Integer):
                exprs.append(sympy.Le(sym, rng.upper))

    to_slot = {sym: slot_symbols[slot] for sym, slot in bound.items()}

    def over_slots(e: Any) -> Any:
        e = e.xreplace(values) if values else e
        missing = e.free_symbols - set(to_slot)
        if missing:
            raise _Unbindable(f"shape relation {e} uses symbols {sorted(map(str, missing))} no input binds")
        return e.xreplace(to_slot)

    final: list[Any] = []
    for kind, slot, expr in relations:
        final.append(sympy.Eq(slot_symbols[slot], over_slots(expr)))
    for e in exprs:
        e = over_slots(e)
        if e is sympy.true or e == sympy.true:
            continue
        final.append(e)
    names = [o.text() for o in slot_origins]
    for rel in final:
        relation = ShapeRelation.build(rel, slot_symbols, slot_origins, names)
        output.guards.add(GuardKind.SHAPE, None, relation, extra=relation.text)
    output.shape_slots = slot_origins


class _Unbindable(RuntimeError):
    """A relation over a symbol no input binds (an internal error: the frame re-traces static)."""
