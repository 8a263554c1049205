"""The FX graph under construction for one traced frame, and the code that rebuilds its outputs.

:class:`OutputGraph` owns the ``torch.fx.Graph``, the fake-tensor mode, the graph inputs (one
placeholder per distinct real tensor reached through a source), and the guard set. Every tensor
operation goes through :meth:`OutputGraph.call`: it creates the node (named after the op, renamed
later after the user's variable), runs the op on fake tensors to get ``meta['example_value']``
and records ``meta['stack_trace']`` (the user's file:line chain).

:class:`OutputCodegen` emits the replacement code's body through
:class:`~pyjit.trace.pycodegen.PyCodegen`: read the graph inputs through their sources, call the
compiled graph, rebuild the return value (tensors computed by the graph become graph outputs,
inputs returned unchanged are re-read through their source, containers/constants are rebuilt).
"""
from __future__ import annotations

import ast
import contextlib
import functools
import operator
import re
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from ..inplace import is_in_place
from ..variables.symbolic import SYM_TYPES, SymNodeVariable, SymSliceVariable
from .dynamic import DynamicPolicy, new_shape_env, record_origins, symbolic_context, torch_source

from ..guards.guards import GuardKind, GuardSet, TensorSpec
from ..guards.source import LocalSource, Source, shared_prefixes, sources_as_tokens
from .graph_breaks import unsupported
from .memory_checks import overlap_error
from .pycodegen import PyCodegen
from .side_effects import SideEffects

if TYPE_CHECKING:
    from ..variables.base import VariableTracker
    from ..variables.tensor import TensorVariable
    from .translator import Translator


def _identifier(text: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", text).strip("_").lower()
    if not name or name[0].isdigit():
        name = "t_" + name
    return name


def source_to_node_name(source: Source) -> str:
    """``L['self'].fc.weight`` -> ``self_fc_weight``; ``G['w']`` -> ``w``."""
    text = source.name()
    text = re.sub(r"^[LGC]\[['\"]?", "", text)
    return _identifier(text.replace("']", "").replace("['", "_"))


class GraphInput:
    __slots__ = ("source", "value", "node", "variable")

    def __init__(self, source: Source, value: Any, node: fx.Node, variable: "TensorVariable") -> None:
        self.source = source
        self.value = value
        self.node = node
        self.variable = variable


class OutputGraph:
    def __init__(self, code_name: str, dynamic: "DynamicPolicy | None" = None) -> None:
        self.code_name = code_name
        self.graph = fx.Graph()
        self.guards = GuardSet()
        # Sizes are plain ints (guarded by TENSOR_MATCH) except the dimensions the dynamic
        # policy makes symbolic (trace/dynamic.py): those are symbols of this ShapeEnv.
        self.dynamic = dynamic
        self.shape_env = new_shape_env() if dynamic is not None else None
        self.current_tx: Any = None  # set by the translator at each step (log locations)
        if self.shape_env is not None:
            # weak: compiled graphs keep fake tensors -> mode -> ShapeEnv alive, and through a
            # strong reference they would keep this trace (and the call's arguments) alive
            self.shape_env.pyjit_output = weakref.ref(self)  # type: ignore[attr-defined]
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        self.symbolic_inputs: list[GraphInput] = []  # inputs with a symbol (tensors or scalars)
        self.symbol_origins: dict[Any, Any] = {}     # bare symbol -> SlotOrigin (where it is read)
        self.shape_slots: list[Any] = []            # set by finalize_shape_guards
        self.inputs: list[GraphInput] = []
        self._input_by_id: dict[int, GraphInput] = {}
        self.call_count = 0
        # Steps an inlined call may run without recording a graph node before it runs natively
        # instead (config.inline_instruction_budget); None under fullgraph (no breaks wanted).
        self.inline_budget: int | None = None
        self.mutates = False  # the graph contains an in-place operation
        # A module called in the trace (or the frame's own ``self``) had ``training`` set: a
        # compile hint only (backend/aot: such a graph saves for backward in its first forward).
        self.module_in_training = False
        # Real autocast/inference-mode contexts entered while tracing (exited if tracing stops).
        self.entered_contexts: list[Any] = []
        self._last_placeholder: fx.Node | None = None
        self.side_effects = SideEffects()  # mutations of outside objects, replayed after the graph
        # id(real closure cell) -> (the cell, its CellVariable): one tracker per cell in a trace

    # -- inputs --------------------------------------------------------------------------
    def add_input(self, value: torch.Tensor, source: Source) -> "TensorVariable":
        from ..variables.tensor import TensorVariable

        known = self._input_by_id.get(id(value))
        if known is not None:
            if known.source != source:
                # f(x, x): one placeholder serves both; the trace is only valid while they alias.
                self.guards.add(GuardKind.SAME_OBJECT, source, extra=known.source)
            return known.variable
        self.guards.add(GuardKind.TENSOR_MATCH, source, TensorSpec.of(value))
        node = self._new_placeholder(source)
        dims = self.dynamic.tensor_dims(source.name(), value) if self.dynamic is not None else []
        if any(dims):
            fake = self.fake_mode.from_tensor(value, source=torch_source(source), symbolic_context=symbolic_context(dims))
        else:
            fake = self.fake_mode.from_tensor(value, static_shapes=True)
        node.meta["example_value"] = fake
        node.meta["source"] = source.name()
        var = TensorVariable(node, fake, source=source, python_type=type(value))
        gi = GraphInput(source, value, node, var)
        self.inputs.append(gi)
        self._input_by_id[id(value)] = gi
        if any(dims):
            self.symbolic_inputs.append(gi)
            record_origins(self, source, fake)
        return var

    def add_scalar_input(self, value: int | float, source: Source) -> "VariableTracker":
        """A Python int/float made a symbolic graph input (it changed between calls)."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        from ..variables.symbolic import SymNodeVariable

        for gi in self.symbolic_inputs:
            if gi.source == source:
                return gi.variable
        assert self.shape_env is not None
        env = self.shape_env
        sym = env.create_unspecified_symbol(value, source=torch_source(source), dynamic_dim=DimDynamic.DYNAMIC)
        if type(value) is float:
            example = env.create_symfloatnode(sym, hint=value, source=torch_source(source))
        else:
            example = env.create_symintnode(sym, hint=value, source=torch_source(source))
        node = self._new_placeholder(source)
        node.meta["example_value"] = example
        node.meta["source"] = source.name()
        var = SymNodeVariable(node, example, source=source)
        gi = GraphInput(source, value, node, var)
        self.inputs.append(gi)
        self.symbolic_inputs.append(gi)
        record_origins(self, source, example)
        return var

    def _new_placeholder(self, source: Source) -> fx.Node:
        name = source_to_node_name(source)
        if self._last_placeholder is None:
            first = next(iter(self.graph.nodes), None)
            ctx = self.graph.inserting_before(first) if first is not None else self.graph.inserting_after(None)
        else:
            ctx = self.graph.inserting_after(self._last_placeholder)
        with ctx:
            node = self.graph.placeholder(name)
        self._last_placeholder = node
        return node

    # -- operations ----------------------------------------------------------------------
    def call(
        self,
        tx: "Translator",
        kind: str,
        target: Any,
        args: list["VariableTracker"],
        kwargs: dict[str, "VariableTracker"],
    ) -> "VariableTracker":
        """Record ``target(*args, **kwargs)`` as a graph node and return its tracked result."""
        _refuse_input_restride(kind, target, args)
        fx_args = tuple(self.to_fx(a) for a in args)
        fx_kwargs = {k: self.to_fx(v) for k, v in kwargs.items()}
        fake_args = [self.to_fake(a) for a in args]
        fake_kwargs = {k: self.to_fake(v) for k, v in kwargs.items()}
        result = self._run_fake(kind, target, fake_args, fake_kwargs)
        if is_in_place(kind, target, kwargs):
            overlap = overlap_error(kind, target, fake_args, fake_kwargs)
            if overlap is not None:  # eager raises: break before the op, it raises when run natively
                unsupported("tensor_op_failed", f"{_target_name(target)}: RuntimeError: {overlap}")
        node = self.graph.create_node(kind, target, fx_args, fx_kwargs)
        node.meta["stack_trace"] = tx.stack_trace()
        node.meta["example_value"] = result
        self.call_count += 1
        if is_in_place(kind, target, kwargs) and self._mutates_input_memory(target, fake_args, fake_kwargs):
            # An in-place op on (a view of) a graph input: the compiled graph writes the new value
            # back after it runs, which is eager's only while no input is a view of another (a
            # DISTINCT guard, see convert_frame). In-place ops on the graph's own intermediates
            # (``ReLU(inplace=True)``) write back nothing and need no guard.
            self.mutates = True
        return self.wrap_result(tx, node, result, [*args, *kwargs.values()])

    def _mutates_input_memory(self, target: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
        """Whether an in-place op writes memory of a graph input: its mutated operand (the first
        argument, or ``out=``) shares storage with an input's fake value. Anything unexpected
        (no tensor found, ``set_`` re-pointing a tensor) counts as writing an input."""
        if getattr(target, "__name__", target) in ("set_", "resize_", "resize_as_"):
            return True
        mutated = kwargs["out"] if "out" in kwargs else (args[0] if args else None)
        tensors = [t for t in (mutated if isinstance(mutated, (list, tuple)) else [mutated])
                   if isinstance(t, torch.Tensor)]
        if not tensors:
            return True
        inputs = set()
        for gi in self.inputs:
            fake = gi.node.meta.get("example_value")
            if not isinstance(fake, torch.Tensor):
                return True
            inputs.add(_storage_key(fake))
        return any(_storage_key(t) in inputs for t in tensors)

    def _run_fake(self, kind: str, target: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        from torch._dispatch.python import enable_python_dispatcher
        from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

        # With symbolic sizes, composite ops (matmul, linear...) must decompose in Python: their
        # C++ kernels read sizes(), which a fake tensor answers by specialising every symbol.
        dispatcher = enable_python_dispatcher() if self.shape_env is not None else contextlib.nullcontext()
        pending = getattr(self.shape_env, "pending_fresh_unbacked_symbols", None)
        pending_before = len(pending) if pending is not None else 0
        try:
            with self.fake_mode, dispatcher:
                if kind == "call_method":
                    result = getattr(args[0], target)(*args[1:], **kwargs)
                else:
                    result = target(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            unsupported("data_dependent", f"{_target_name(target)}: {type(e).__name__}")
        except Exception as e:  # shape errors etc.: the user's code would fail eagerly too
            unsupported("tensor_op_failed", f"{_target_name(target)}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if pending is not None and len(pending) > pending_before:
            # An output size that depends on tensor values (nonzero, boolean-mask indexing,
            # unique...): with symbolic sizes fake tensors give it a fresh "unbacked" symbol, which
            # neither a branch on it nor the backend can handle (the frame or graph ran uncompiled).
            # Break before the op instead, as static tracing does (DynamicOutputShapeException):
            # the op runs eagerly and the code after it traces with its real size.
            del pending[pending_before:]
            unsupported("data_dependent", f"{_target_name(target)}: the output's size depends on tensor values")
        return result

    def wrap_result(self, tx: "Translator", node: fx.Node, result: Any, args: list["VariableTracker"]) -> "VariableTracker":
        from ..variables.constant import ConstantVariable, is_constant_value
        from ..variables.lists import NamedTupleVariable, TupleVariable, ListVariable
        from ..variables.tensor import TensorVariable

        if isinstance(result, SYM_TYPES):
            return SymNodeVariable.create(tx, node, result)
        if isinstance(result, torch.Size) and any(isinstance(r, SYM_TYPES) for r in result):
            return self.size_tuple(tx, node, result)
        if isinstance(result, torch.Tensor):
            # In-place ops return their first argument: keep the same tracker (identity, source).
            for a in args:
                if isinstance(a, TensorVariable) and a.example is result:
                    return a
            return TensorVariable(node, result)
        if isinstance(result, (tuple, list)):
            items: list[VariableTracker] = []
            for i, r in enumerate(result):
                if isinstance(r, torch.Tensor):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    sub.meta["example_value"] = r
                    sub.meta["stack_trace"] = node.meta.get("stack_trace")
                    items.append(TensorVariable(sub, r))
                elif isinstance(r, SYM_TYPES):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    sub.meta["stack_trace"] = node.meta.get("stack_trace")
                    items.append(SymNodeVariable.create(tx, sub, r))
                elif is_constant_value(r):
                    items.append(ConstantVariable(r))
                else:
                    unsupported("unsupported_object", f"{_target_name(node.target)} returned a {type(r).__name__}")
            if isinstance(result, list):
                return ListVariable(items)
            if type(result) is not tuple:
                return NamedTupleVariable(items, type(result))
            return TupleVariable(items)
        if result is None or is_constant_value(result):
            # A tensor-free function of constants (e.g. torch.broadcast_shapes): fold it and drop
            # the node. With tensor arguments the node stays (setitem and other effects return None),
            # also tensors inside lists or keyword arguments (``torch._foreach_add_(xs, ys)``,
            # an optimizer function updating a list of parameters in place).
            if not node.users and not any(_holds_tensor(a) for a in args):
                self.graph.erase_node(node)
                self.call_count -= 1
            return ConstantVariable(result)
        unsupported("unsupported_object", f"{_target_name(node.target)} returned a {type(result).__name__}")

    def size_tuple(self, tx: "Translator", node: fx.Node, result: Any) -> "VariableTracker":
        """A ``torch.Size`` with symbolic entries: one tracker per dimension."""
        from ..variables.constant import ConstantVariable
        from ..variables.lists import SizeVariable

        items: list[VariableTracker] = []
        for i, r in enumerate(result):
            if isinstance(r, SYM_TYPES):
                sub = self.graph.call_function(operator.getitem, (node, i))
                sub.meta["stack_trace"] = node.meta.get("stack_trace")
                items.append(SymNodeVariable.create(tx, sub, r))
            else:
                items.append(ConstantVariable(r))
        return SizeVariable(items)

    # -- conversions ---------------------------------------------------------------------
    def to_fx(self, v: "VariableTracker") -> Any:
        from ..variables.dicts import DictVariable
        from ..variables.lists import BaseListVariable
        from ..variables.tensor import TensorVariable

        if isinstance(v, TensorVariable):
            return v.node
        if isinstance(v, SymNodeVariable):
            return v.node
        if isinstance(v, SymSliceVariable):
            return v.to_fx(self)
        if isinstance(v, BaseListVariable):
            items = [self.to_fx(i) for i in v.items]
            return list(items) if v.python_type() is list else tuple(items)
        if isinstance(v, DictVariable):
            return {k: self.to_fx(i) for k, i in v.items.items()}
        if v.is_python_constant():
            value = _literal_base(v.as_python_constant())
            if _fx_literal(value):
                return value
            # (a function or object as an argument: FX would print it as its repr)
            unsupported("unsupported_object", f"{v} cannot be an argument of a graph operation")
        unsupported("unsupported_object", f"{v} cannot be passed to a tensor operation")

    def to_fake(self, v: "VariableTracker") -> Any:
        from ..variables.dicts import DictVariable
        from ..variables.lists import BaseListVariable
        from ..variables.tensor import TensorVariable

        if isinstance(v, (TensorVariable, SymNodeVariable)):
            return v.example
        if isinstance(v, SymSliceVariable):
            return v.to_fake(self)
        if isinstance(v, BaseListVariable):
            items = [self.to_fake(i) for i in v.items]
            return list(items) if v.python_type() is list else tuple(items)
        if isinstance(v, DictVariable):
            return {k: self.to_fake(i) for k, i in v.items.items()}
        return v.as_python_constant()

    def rename(self, node: fx.Node, var_name: str) -> None:
        """Give a freshly computed node the user's variable name (readable graphs)."""
        if node.op in ("call_function", "call_method") and not node.meta.get("named"):
            node.meta["named"] = True
            try:
                node._rename(_identifier(var_name))
            except Exception:  # private API; names are cosmetic
                pass


# In-place ops that change a tensor's metadata (sizes, strides, storage), not only its values.
_RESTRIDING_METHODS = frozenset({
    "t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "as_strided_", "resize_",
    "resize_as_", "set_", "detach_",
})


def _refuse_input_restride(kind: str, target: Any, args: list["VariableTracker"]) -> None:
    """A graph input restrided in place (``x.t_()``, ``x.resize_(...)``): the compiled graph
    returns values, not new metadata for the caller's tensor, so the op runs eagerly (a graph
    break) and the caller sees its tensor changed as in eager. On a tensor the graph made, the
    op is traced as usual."""
    from ..variables.tensor import TensorVariable

    name = target if kind == "call_method" else getattr(target, "__name__", "")
    if name not in _RESTRIDING_METHODS or not args or not isinstance(args[0], TensorVariable):
        return
    if args[0].node.op == "placeholder":
        unsupported("untracked_method", f"Tensor.{name}() on a graph input changes the caller's tensor metadata; "
                    "it runs eagerly")


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return f"Tensor.{target}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{mod}.{name}" if mod else str(name)


class OutputCodegen:
    """Rebuilds the traced return value in the replacement code, after the compiled graph's call.

    Variable trackers describe themselves through their ``reconstruct(cg)`` protocol, which
    composes Python expression text from names handed out here: :meth:`ref`/:meth:`constant`
    (an object pushed as a constant), :meth:`graph_output` (element ``i`` of the graph's result
    tuple) and ``source.expr()`` (a value re-read from the frame, through
    :meth:`Source.reconstruct <pyjit.guards.source.Source.reconstruct>`). Each name is a
    placeholder mapped to the instructions pushing its value; the only syntax around them is
    tuple/list/dict displays and calls. :meth:`emit` compiles that text with the same
    :class:`~pyjit.trace.pycodegen.PyCodegen` that loads the graph inputs, so all replacement
    code comes from one emitter (there is no Python-source path).
    """

    def __init__(self, output: OutputGraph) -> None:
        self.output = output
        self.out_nodes: list[fx.Node] = []
        self._out_index: dict[fx.Node, int] = {}
        self._leaves: dict[str, Callable[[PyCodegen], None]] = {}
        self._token_by_key: dict[Any, str] = {}
        self._return: ast.expr | None = None
        self._return_text = ""
        self._out_local = "___graph_out"
        # Caller state read by the rebuild (see _source_token): local name -> source, in order.
        self._pre_reads: dict[str, Source] = {}
        self._pre_reads_emitted = False
        self._keep_alive: list[Any] = []
        self.cells_passed_on: set[int] = set()  # id(CellVariable): made anew for a resume function
        # the shared_value locals each PyCodegen has already made
        self._shared_made: "weakref.WeakKeyDictionary[PyCodegen, set[str]]" = weakref.WeakKeyDictionary()

    # -- the reconstruct protocol of variable trackers --------------------------------------
    def _token(self, key: Any, emit: Callable[[PyCodegen], None], hint: str) -> str:
        token = self._token_by_key.get(key)
        if token is None:
            token = f"___{_identifier(hint)[:32]}_{len(self._leaves)}"
            self._leaves[token] = emit
            self._token_by_key[key] = token
        return token

    def built_once(self, tracker: "VariableTracker", text: str, hint: str) -> str:
        """The name of a mutable value the trace built (a list or dict) and that the rebuild may
        use in several places (returned twice, a graph break's local and a bound method of it
        on the stack): built where it is first used and stored in a local, which every later
        use loads, so all places hold one object as in eager. Rebuilds are emitted in
        execution order with no branch before them, so the first use runs first."""
        key = ("once", id(tracker))
        token = self._token_by_key.get(key)
        if token is not None:
            return token
        local = f"___built_{len(self._leaves)}"
        self._keep_alive.append(tracker)  # its id keys the token
        return self._token(key, self._stored_once(local, ast.parse(text, mode="eval").body), hint)

    def ref(self, obj: Any, hint: str = "c") -> str:
        # The emit closure keeps ``obj`` alive, so its id is not reused while this codegen lives.
        return self._token(("const", id(obj)), lambda cg: cg.load_const(obj), hint)

    def constant(self, value: Any) -> str:
        return self.ref(value, "const")

    def frame_cell(self, var: str) -> str:
        """The cell of the compiled frame's free variable ``var`` (the replacement keeps the
        original's free variables), not its contents."""
        from ..bytecode import create_load_closure

        return self._token(("frame_cell", var), lambda cg: cg.append(create_load_closure(var)), var)

    def shared_value(self, key: Any, func: str, arg: str | None, hint: str) -> str:
        """A name for ``func(arg)`` (expression texts of this protocol) evaluated once per
        replacement: the first emission makes it and keeps it in a local, later ones read that
        local (an object two rebuilt values share, such as a closure cell). Rebuilt values are
        emitted in order along one path, so the first emission runs before the others."""
        token = self._token_by_key.get(key)
        if token is not None:
            return token
        local = f"___shared_{_identifier(hint)[:24]}_{len(self._leaves)}"
        call = ast.Call(func=ast.Name(func), args=[] if arg is None else [ast.parse(arg, mode="eval").body], keywords=[])
        return self._token(key, self._stored_once(local, call), hint)

    def _stored_once(self, local: str, expr: ast.expr) -> Callable[[PyCodegen], None]:
        """An emitter of ``expr`` that evaluates it at its first emission into each code object
        (keeping the value in ``local``) and loads ``local`` at every later one."""
        from ..bytecode import create_instruction

        def emit(cg: PyCodegen) -> None:
            made = self._shared_made.setdefault(cg, set())
            if local in made:
                cg.load_local(local)
                return
            made.add(local)
            self._emit_expression(cg, expr)
            cg.append(create_instruction("COPY", arg=1))
            cg.store_local(local)

        return emit

    def graph_output(self, node: fx.Node) -> str:
        idx = self._out_index.get(node)
        if idx is None:
            idx = len(self.out_nodes)
            self.out_nodes.append(node)
            self._out_index[node] = idx

        def emit(cg: PyCodegen) -> None:
            cg.load_local(self._out_local)
            cg.load_item(idx)

        return self._token(("out", idx), emit, f"out{idx}")

    def _source_token(self, source: Source) -> str:
        """The name of a value read from the frame. An argument slot is read where it is used:
        it is the replacement's own parameter, which nothing rebinds. Any other source (an
        attribute, an item, a global, a cell's contents) reads the caller's state, which the
        side-effect replay may change: a tracker with such a source stands for the value the
        trace read *before* its own mutations (later reads in the trace see the tracked new
        value instead), so it is read once, after the graph call and before the first replayed
        mutation (:meth:`emit_side_effects`), and every use loads that local. So ``p = lst.pop()``
        returns the popped item, and ``n = G; G += 1; return n`` the old value."""
        key = ("source", source)
        token = self._token_by_key.get(key)
        if token is not None:
            return token
        if isinstance(source, LocalSource):
            return self._token(key, source.reconstruct, source_to_node_name(source))
        assert not self._pre_reads_emitted, f"{source.name()} captured after the replacement read the caller's state"
        local = f"___pre_{len(self._pre_reads)}"
        self._pre_reads[local] = source
        return self._token(key, lambda cg: cg.load_local(local), source_to_node_name(source))

    def capture(self, value: "VariableTracker") -> ast.expr:
        """How to rebuild ``value`` after the graph ran, as an expression for :meth:`emit_value`
        (registers the graph outputs it needs; a graph break rebuilds its stack and locals so)."""
        with sources_as_tokens(self._source_token):
            text = value.reconstruct(self)
        return ast.parse(text, mode="eval").body

    def capture_return(self, result: "VariableTracker") -> None:
        """Record how to rebuild ``result`` (registers the graph outputs it needs)."""
        self._return = self.capture(result)
        self._return_text = ast.unparse(self._return)

    # -- emission ----------------------------------------------------------------------------
    def emit(self, cg: PyCodegen, compiled: Callable[..., Any], call_line: int, return_line: int) -> None:
        """Append: ``___graph_out = compiled(<inputs read through their sources>)``, then
        ``return <rebuilt value>``."""
        assert self._return is not None, "capture_return() first"
        self.emit_graph_call(cg, compiled, call_line)
        self.emit_side_effects(cg)
        cg.set_line(return_line)
        self._emit_expression(cg, self._return)
        cg.return_value()

    def emit_graph_call(self, cg: PyCodegen, compiled: Callable[..., Any] | None, call_line: int) -> None:
        """Append ``___graph_out = compiled(<inputs read through their sources>)`` (nothing when
        ``compiled`` is None: a graph break with no tensor work before it)."""
        while self._out_local in cg.arg_names:  # never shadow an argument the rebuild may read
            self._out_local = "_" + self._out_local
        cg.set_line(call_line)
        if compiled is None:
            assert not self.out_nodes, "graph outputs captured but no graph to call"
            return
        # Bases that several inputs read through (``L['self'].layers`` for each layer's weight and
        # bias) are read once, into locals; only up to the call: code after it (side effects,
        # the rebuilt return value) reads its sources again, as they may have changed.
        sources = [gi.source for gi in self.output.inputs]
        for i, prefix in enumerate(shared_prefixes(sources)):
            cg.load_source(prefix)
            local = f"___src{i}"
            while local in cg.arg_names:
                local = "_" + local
            cg.store_local(local)
            cg.source_locals[prefix] = local
        cg.call_const(compiled, [functools.partial(cg.load_source, s) for s in sources])
        cg.source_locals.clear()
        cg.store_local(self._out_local)

    def capture_side_effects(self) -> None:
        """Record the replay of the trace's side effects so far (pyjit/trace/side_effects.py):
        one call expression per mutated place, built through the reconstruct protocol."""
        self.output.side_effects.replay = self.output.side_effects.capture(self)

    def emit_side_effects(self, cg: PyCodegen) -> None:
        """Append the reads of the caller's state every rebuild uses (see :meth:`_source_token`),
        then the replay captured by :meth:`capture_side_effects`: new objects and every
        argument into locals first, then each call, in program order, its result popped."""
        from ..bytecode import create_instruction

        for local, source in self._pre_reads.items():
            source.reconstruct(cg)
            cg.store_local(local)
        self._pre_reads_emitted = True
        replay = self.output.side_effects.replay
        if replay is None:
            return
        replay.check_complete(self.output.side_effects)
        for local, expr in replay.blanks:
            self._emit_expression(cg, expr)
            cg.store_local(local)
        for expr in replay.calls:
            self._emit_expression(cg, expr)
            cg.append(create_instruction("POP_TOP"))

    def emit_value(self, cg: PyCodegen, expr: ast.expr) -> None:
        """Push the value an expression from :meth:`capture` describes."""
        self._emit_expression(cg, expr)

    def _emit_expression(self, cg: PyCodegen, node: ast.expr) -> None:
        if isinstance(node, ast.Name) and node.id in self._leaves:
            self._leaves[node.id](cg)
        elif isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            for element in node.elts:
                self._emit_expression(cg, element)
            cg.build(tuple if isinstance(node, ast.Tuple) else list, len(node.elts))
        elif isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            for key, value in zip(node.keys, node.values):
                self._emit_expression(cg, key)  # type: ignore[arg-type]
                self._emit_expression(cg, value)
            cg.build(dict, len(node.keys))
        elif isinstance(node, ast.Call) and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            cg.call(functools.partial(self._emit_expression, cg, node.func),
                    [functools.partial(self._emit_expression, cg, a) for a in node.args])
        else:
            # Trackers only compose displays and calls of the names handed out above.
            raise AssertionError(f"cannot rebuild {ast.dump(node)} in {self._return_text!r}")


def finalize_graph(output: OutputGraph, cg: OutputCodegen) -> fx.GraphModule:
    """Add the output node and wrap the graph in a GraphModule named after the traced code."""
    output.graph.output(tuple(cg.out_nodes))
    output.graph.lint()
    class_name = "GraphModule_" + _identifier(output.code_name)
    return fx.GraphModule(torch.nn.Module(), output.graph, class_name=class_name)


CompiledFn = Callable[..., Any]


def _holds_tensor(value: "VariableTracker") -> bool:
    """A tensor, or a list/tuple/dict (nested) holding one: a call taking it may have effects."""
    from ..variables.tensor import TensorVariable

    if isinstance(value, TensorVariable):
        return True
    items = getattr(value, "items", None)
    if isinstance(items, dict):
        items = list(items.values())
    return isinstance(items, list) and any(_holds_tensor(i) for i in items)


_FX_LITERAL_TYPES = (int, float, bool, str, complex, type(None), type(Ellipsis), range)


def _literal_base(value: Any) -> Any:
    """An instance of a subclass of int/float/str as the plain value a torch op sees (copied by
    the base's own C slot: the subclass's Python code does not run)."""
    t = type(value)
    if t in _FX_LITERAL_TYPES or t is bool:
        return value
    for base, exact in ((int, int.__index__), (float, float.__float__), (str, str.__str__)):
        if issubclass(t, base):  # (by type: isinstance would read a __class__ property)
            return exact(value)
    return value


def _fx_literal(value: Any) -> bool:
    """A constant an FX graph can hold as an argument (printed as valid Python)."""
    t = type(value)
    if t in _FX_LITERAL_TYPES or isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return True
    if t in (tuple, list, torch.Size):
        return all(_fx_literal(v) for v in value)
    if t is slice:
        return _fx_literal(value.start) and _fx_literal(value.stop) and _fx_literal(value.step)
    return False


def _storage_key(t: torch.Tensor) -> int:
    """Identity of a (fake) tensor's storage: equal for a tensor and its views."""
    return t.untyped_storage()._cdata
