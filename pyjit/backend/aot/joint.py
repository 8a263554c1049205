"""The joint forward/backward aten graph of a captured FX graph (AOTAutograd's first half).

Two traces on fake tensors, both with ``make_fx`` and the decomposition table:

1. **Forward**: the captured graph, functionalized (``torch.func.functionalize``) under
   ``no_grad``. The ``copy_`` nodes functionalization appends for mutated graph inputs
   (``running_mean`` of a training batch norm, ``x.add_(1)`` on an input) are taken out of the
   graph and become extra outputs; the runtime copies them into the real inputs.
2. **Joint**: that functional graph replayed with autograd on fake inputs that require grad as
   the real ones do, followed by ``torch.autograd.grad`` of the outputs that require grad, with
   one *tangent* input per such output. The result is one aten graph
   ``(primals..., tangents...) -> (outputs..., mutation values..., grads...)``; a grad is
   ``None`` where eager's would be (the input does not require grad or is unused).

Outputs that alias a graph input (``x.view(-1)``, ``x[0]``, ``x.detach()``) are not outputs of
the joint graph: the runtime rebuilds them from the real input as eager relates them, which the
captured graph's fake values tell (``backend/aliasing.py``; the functional trace cannot: it
makes ``detach`` the input itself). Outputs that are views of computed values
(``lin(x)[:, :4]``) are rebuilt outside the Function from their computed base, which becomes the graph's
output: a view made inside a custom Function cannot be modified in place. Outputs that do not
require grad (eager's requires_grad, also after in-place updates under ``no_grad``) get no
tangent. New values of mutated inputs that require grad (``x += lin(x)`` on an input that does
not) get a tangent: the runtime writes them into the input outside the Function, so it gets a
grad_fn. What this module does not handle raises ``NotImplementedError`` (the caller runs the
graph as captured and logs why): calls of autograd or inference mode inside the graph
(``no_grad`` regions are rewritten first, grad_mode.py), mutated inputs that require grad,
tensors made with ``requires_grad=True`` inside the graph, non-tensor inputs or outputs. Calls
of custom ``autograd.Function``s are opaque in the forward trace and run as the real ``apply``
in the joint trace, which records the user's ``forward`` and ``backward`` as aten ops
(``custom_function.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ..aliasing import OutputAlias, created_grad_leaf, inplace_through_detach, output_aliases
from ..autocast import call_without_autocast
from ..passes.graph_utils import eliminate_dead_code
from .grad_mode import without_grad_mode_changes
from .custom_function import FunctionInterpreter, OpaqueCalls, autograd_functions, describe

aten = torch.ops.aten


@dataclasses.dataclass
class IntermediateView:
    """A user output that is a view of a value computed in the graph: the graph returns that
    value (computed output ``output_index``) and the runtime takes the view outside the
    ``autograd.Function``, as eager's is a view of a tensor autograd tracks (an in-place op on a
    view made inside a custom Function is an autograd error)."""
    output_index: int
    view: OutputAlias  # geometry relative to the computed value, requires_grad, is_view


@dataclasses.dataclass
class JointGraph:
    """The traced joint graph and what the runtime needs to know about its signature.

    ``gm`` inputs: ``num_primals`` primals then ``len(tangent_outputs)`` tangents. Its flat
    outputs: ``fw_outputs`` computed user outputs, ``len(mutated_inputs)`` new values of mutated
    inputs, then the grads of the primals with ``has_grad`` (the others' grads are ``None``).
    """
    gm: torch.fx.GraphModule
    num_primals: int
    out_spec: Any
    # Per user output (flattened): an index into the computed outputs, an alias of an input
    # (rebuilt from it, backend/aliasing.py) or a view of a computed output.
    user_outputs: list[int | OutputAlias | IntermediateView]
    fw_outputs: int
    fw_requires_grad: list[bool]  # per computed output
    mutated_inputs: list[int]
    tangent_outputs: list[int]  # indices of computed outputs that get a tangent
    primal_requires_grad: list[bool]
    # Per primal: whether the joint graph outputs a grad for it (eager's would be None otherwise).
    has_grad: list[bool]
    # Per mutated input: whether its new value requires grad (``x += lin(x)`` on an input that
    # does not). Those values are outputs of the autograd.Function with a tangent, written into
    # the input outside it so that the input's new value has a grad_fn, as in eager.
    mutation_requires_grad: list[bool] = dataclasses.field(default_factory=list)

    @property
    def num_fw_outputs(self) -> int:
        return self.fw_outputs + len(self.mutated_inputs)


def module_state(gm: torch.nn.Module) -> list[str]:
    """Names of ``gm``'s parameters and buffers: they become trailing primals of the joint graph.

    pyjit's frontend passes parameters as graph inputs (none here); ``fx.symbolic_trace`` graphs
    and user graphs keep them on (sub)modules, and the joint graph must see them as inputs to
    differentiate them and to write buffer updates (batch-norm running stats) back.
    """
    return [name for name, _ in gm.named_parameters()] + [name for name, _ in gm.named_buffers()]


def fetch_attributes(gm: torch.nn.Module, names: Sequence[str]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for name in names:
        obj: Any = gm
        for part in name.split("."):
            obj = getattr(obj, part)
        out.append(obj)
    return out


def as_function(gm: torch.fx.GraphModule, names: Sequence[str]) -> Callable[..., Any]:
    """``gm`` as a function of its inputs followed by the tensors ``names`` on it."""
    if not names:
        return torch.fx.Interpreter(gm).run
    n_state = len(names)

    def run(*args: Any) -> Any:
        state = dict(zip(names, args[len(args) - n_state:]))
        return torch.func.functional_call(gm, state, tuple(args[:len(args) - n_state]), strict=True)

    return run


_GRAD_MODE_FNS = {torch._C._set_grad_enabled, torch.set_grad_enabled, torch.autograd.grad,
                  torch.autograd.backward, torch.Tensor.backward, torch.Tensor.requires_grad_}


# Entering/leaving ``torch.inference_mode`` (calls the tracer records): its values are inference
# tensors that never require grad, which a joint graph would make differentiable outputs.
_INFERENCE_MODE_FNS = {torch.autograd.grad_mode._enter_inference_mode, torch.autograd.grad_mode._exit_inference_mode}


def check_supported(gm: torch.fx.GraphModule) -> None:
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method") and (
                n.target in _GRAD_MODE_FNS or n.target in ("requires_grad_", "backward")):
            raise NotImplementedError(f"the graph changes grad mode or calls autograd ({n.format_node()})")
        if n.op == "call_function" and n.target in _INFERENCE_MODE_FNS:
            raise NotImplementedError(f"the graph enters or leaves inference mode ({n.format_node()})")
    through_detach = inplace_through_detach(gm)
    if through_detach is not None:
        raise NotImplementedError(f"the graph updates a tensor that requires grad in place through detach()/.data "
                                  f"({through_detach.format_node()})")
    leaf = created_grad_leaf(gm)
    if leaf is not None:
        raise NotImplementedError(f"the graph creates a tensor that requires grad ({leaf.format_node()})")


def make_fake_inputs(example_inputs: Sequence[Any]) -> tuple[Any, list[torch.Tensor]]:
    """A fake tensor mode and fake copies of ``example_inputs`` (keeping requires_grad)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    if any(not isinstance(t, torch.Tensor) for t in example_inputs):
        raise NotImplementedError("non-tensor graph inputs are not supported by the training path")
    modes = {id(t.fake_mode): t.fake_mode for t in example_inputs if isinstance(t, FakeTensor)}
    if len(modes) > 1:
        raise NotImplementedError("example inputs come from several fake tensor modes")
    mode = next(iter(modes.values())) if modes else FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [t if isinstance(t, FakeTensor) else mode.from_tensor(t, static_shapes=True) for t in example_inputs]
    return mode, fakes


def trace_forward(forward: Callable[..., Any], fake_mode: Any, fakes: Sequence[torch.Tensor],
                  decompositions: dict[Any, Callable[..., Any]], requires_grad: Sequence[bool] | None = None
                  ) -> tuple[torch.fx.GraphModule, Any, list[int]]:
    """The functional forward aten graph: outputs are the flat user outputs then the new
    values of mutated inputs (whose indices are returned), and the output tree spec.

    ``requires_grad`` (per input): traced with autograd on and those inputs requiring grad, as
    eager runs them, because composite ops choose their kernel by it: scaled-dot-product
    attention with a mask that requires grad (T5's position bias, Swin's relative bias) takes
    the math path in eager; traced under ``no_grad`` it became the CPU flash kernel, which has no
    gradient for the mask."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..compile_fx import refuse_restrided_inputs, tensor_metadata

    spec_box: list[Any] = []

    def flat_forward(*args: Any) -> list[Any]:
        with torch.fx.traceback.preserve_node_meta():
            out = forward(*args)
        leaves, spec = pytree.tree_flatten(out)
        spec_box.append(spec)
        if any(not isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise NotImplementedError("non-tensor graph outputs are not supported by the training path")
        return leaves

    grads = list(requires_grad) if requires_grad is not None else [False] * len(fakes)
    with fake_mode:
        inputs = [_as_primal(t, r) for t, r in zip(fakes, grads)]
    metadata_before = tensor_metadata(inputs)
    traced: Callable[..., Any] = flat_forward
    if fake_mode.shape_env is not None:
        # Symbolic sizes: C++ functionalization runs composite ops through their C++ kernels,
        # which read sizes() and so specialise every size symbol: decompose in Python first
        # (the caller enabled the Python dispatcher), then functionalize that aten graph.
        with fake_mode, torch.set_grad_enabled(any(grads)):
            decomposed = make_fx(flat_forward, decomposition_table=decompositions, tracing_mode="real")(*inputs)

        def traced(*args: Any) -> Any:
            with torch.fx.traceback.preserve_node_meta():
                return torch.fx.Interpreter(decomposed).run(*args)

    fn = torch.func.functionalize(traced, remove="mutations")
    try:
        with fake_mode, torch.set_grad_enabled(any(grads)):
            # (Every node keeps the captured node's stack trace through ``preserve_node_meta``:
            # none is extracted from the Python stack, which would only find pyjit's frames.)
            fw = make_fx(fn, decomposition_table=decompositions, tracing_mode="real")(*inputs)
    except RuntimeError as e:
        # The primals are leaves: an input that requires grad (a leaf or not for the caller)
        # written in place cannot be traced so; the refusal below, met earlier.
        if "leaf Variable that requires grad" in str(e):
            raise NotImplementedError("a graph input that requires grad is mutated in place") from e
        raise
    refuse_restrided_inputs(metadata_before, inputs, NotImplementedError)
    placeholders = [n for n in fw.graph.nodes if n.op == "placeholder"]
    output = next(n for n in fw.graph.nodes if n.op == "output")
    mutated: list[int] = []
    values: list[torch.fx.Node] = []
    for n in list(fw.graph.nodes):
        if n.op == "call_function" and n.target is aten.copy_.default and n.args[0] in placeholders:
            index = placeholders.index(n.args[0])
            if index in mutated:  # mutated twice: the last write wins
                values[mutated.index(index)] = n.args[1]
            else:
                mutated.append(index)
                values.append(n.args[1])
            fw.graph.erase_node(n)
    output.args = (list(output.args[0]) + values,)
    _functional_restrides(fw, fake_mode)
    eliminate_dead_code(fw.graph)
    fw.recompile()
    return fw, spec_box[-1], mutated


def _functional_restrides(fw: torch.fx.GraphModule, fake_mode: Any) -> None:
    """Each ``as_strided_`` that only lays a fresh value out again in a standard memory format
    becomes a ``clone`` into that format (same values and strides).

    ATen's global average pooling of a channels-last input is the mean over H and W restrided
    so in place. Autograd differentiates ``as_strided_`` by copying into a fresh storage, an
    in-place op, which made every training graph of a network with global pooling (ResNet,
    MobileNet, ConvNeXt...) take a second, functionalizing trace of its whole joint graph;
    a clone's gradient is the identity. Only values nothing else reads qualify: no other node
    can observe the change of strides."""
    for node in list(fw.graph.nodes):
        if node.op != "call_function" or node.target is not aten.as_strided_.default:
            continue
        base = node.args[0]
        if not isinstance(base, torch.fx.Node) or base.op != "call_function" or len(base.users) != 1 \
                or not isinstance(base.target, torch._ops.OpOverload) or base.target.is_view:
            continue
        size, stride = list(node.args[1]), list(node.args[2])
        offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
        restrided = node.meta.get("val")
        if offset not in (None, 0) or not isinstance(restrided, torch.Tensor) or restrided.storage_offset() != 0:
            continue
        # The base's traced value is the same fake tensor, restrided by the trace: recompute it.
        with fake_mode:
            args, kwargs = pytree.tree_map(lambda a: a.meta["val"] if isinstance(a, torch.fx.Node) else a,
                                           (base.args, base.kwargs))
            fresh = base.target(*args, **kwargs)
        if not isinstance(fresh, torch.Tensor) or list(fresh.shape) != size:
            continue
        formats = [torch.contiguous_format] + ([torch.channels_last] if len(size) == 4 else [])
        fmt = next((f for f in formats
                    if list(torch.empty(size, device="meta", memory_format=f).stride()) == stride), None)
        if fmt is None:
            continue
        with fw.graph.inserting_before(node):
            clone = fw.graph.call_function(aten.clone.default, (base,), {"memory_format": fmt})
        clone.meta = dict(node.meta)
        base.meta["val"] = fresh
        node.replace_all_uses_with(clone)
        fw.graph.erase_node(node)


def _as_primal(value: Any, requires_grad: bool) -> Any:
    """A fresh leaf of a tensor input requiring grad as given; a symbolic scalar as it is."""
    return value.detach().requires_grad_(requires_grad) if isinstance(value, torch.Tensor) else value


def _is_alias(out: torch.Tensor, inp: Any) -> bool:
    if not isinstance(inp, torch.Tensor):
        return False
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(out.untyped_storage()) == StorageWeakRef(inp.untyped_storage())


def trace_joint(gm: torch.fx.GraphModule, state_names: Sequence[str], example_inputs: Sequence[Any],
                decompositions: dict[Any, Callable[..., Any]],
                symbolic_fakes: Sequence[torch.Tensor] | None = None) -> JointGraph:
    """Trace the joint forward/backward graph of ``gm`` for inputs like ``example_inputs``
    (the graph's inputs followed by its parameters and buffers ``state_names``).

    ``symbolic_fakes``: fake tensors of one ``ShapeEnv`` with symbolic sizes to trace with
    instead of static fakes of ``example_inputs`` (which still give requires_grad); the caller
    enables the Python dispatcher (aot/symbolic.py)."""
    aliases = output_aliases(gm)  # eager's relation of each output to the inputs
    eager_requires_grad = {i: bool(v.requires_grad) for i, v in enumerate(
        p.meta.get("example_value") for p in gm.graph.nodes if p.op == "placeholder") if isinstance(v, torch.Tensor)}
    gm = without_grad_mode_changes(gm)  # no_grad regions: detach at their edges
    check_supported(gm)
    if symbolic_fakes is None:
        fake_mode, fakes = make_fake_inputs(example_inputs)
    else:
        # (size symbols can come first: a SymInt placeholder, as torch.compile passes them)
        from torch._subclasses.fake_tensor import FakeTensor

        fake_mode = next(t.fake_mode for t in symbolic_fakes if isinstance(t, FakeTensor))
        fakes = list(symbolic_fakes)
    classes = autograd_functions(gm)
    if not classes:
        return _trace_joint(gm, state_names, example_inputs, decompositions, fake_mode, fakes, aliases,
                            eager_requires_grad)
    # Custom autograd.Function calls (custom_function.py): opaque in the forward trace, the real
    # apply in the joint trace. Whatever fails there runs the graph as captured (real apply).
    opaque = OpaqueCalls(gm)
    try:
        return _trace_joint(opaque.gm, state_names, example_inputs, decompositions, fake_mode, fakes, aliases,
                            eager_requires_grad)
    except NotImplementedError:
        raise
    except Exception as e:
        raise NotImplementedError(f"the joint trace through the custom autograd.Function {describe(classes)} failed "
                                  f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
    finally:
        opaque.close()


def _trace_joint(gm: torch.fx.GraphModule, state_names: Sequence[str], example_inputs: Sequence[Any],
                 decompositions: dict[Any, Callable[..., Any]], fake_mode: Any, fakes: list[torch.Tensor],
                 aliases: list[OutputAlias] | None = None, eager_requires_grad: dict[int, bool] | None = None
                 ) -> JointGraph:
    from torch.fx.experimental.proxy_tensor import make_fx

    grad = torch.is_grad_enabled()
    requires_grad = [grad and bool(getattr(t, "requires_grad", False)) for t in example_inputs]
    from .decompositions import forward_table
    fw, out_spec, mutated = trace_forward(as_function(gm, state_names), fake_mode, fakes,
                                          forward_table(decompositions), requires_grad)
    for i in mutated:
        if requires_grad[i]:
            raise NotImplementedError(f"graph input {i} requires grad and is mutated in place")
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    n_user = len(out_node.args[0]) - len(mutated)

    # Which user outputs require grad: one autograd-enabled replay on fake tensors.
    with fake_mode:
        probe_inputs = [_as_primal(t, r) for t, r in zip(fakes, requires_grad)]
        with torch.enable_grad():
            probe = call_without_autocast(FunctionInterpreter(fw).run, *probe_inputs)
    user_requires_grad = [bool(t.requires_grad) for t in probe[:n_user]]
    # Eager's requires_grad of each mutated input afterwards is that of the captured graph's fake
    # input after the trace ran the in-place ops on it: False for ``x.add_(lin(x))`` under
    # ``no_grad``, whose value the joint replay (grad on) would make require grad.
    known = eager_requires_grad or {}
    mutation_requires_grad = [bool(t.requires_grad) and known.get(i, True)
                              for t, i in zip(probe[n_user:], mutated)]
    if aliases is not None and len(aliases) != n_user:
        aliases = None

    # Outputs aliasing an input leave the graph: the runtime rebuilds them from the input as
    # eager relates them (the captured graph's fake values say how; the functional trace cannot:
    # it turns ``detach`` into the input and may make ``cat([x])`` an alias). Outputs that are
    # views of computed values are taken outside the Function, from their computed base.
    fw_placeholders = [n for n in fw.graph.nodes if n.op == "placeholder"]
    user_outputs: list[int | OutputAlias | IntermediateView] = []
    kept: list[torch.fx.Node] = []
    fw_requires_grad: list[bool] = []

    def keep(node: torch.fx.Node, needs_grad: bool) -> int:
        if node not in kept:
            kept.append(node)
            fw_requires_grad.append(False)
        index = kept.index(node)
        fw_requires_grad[index] = fw_requires_grad[index] or needs_grad  # a view requiring grad: so does its base
        return index

    for k, (node, needs_grad) in enumerate(zip(out_node.args[0][:n_user], user_requires_grad)):
        val = node.meta["val"]
        eager = aliases[k] if aliases is not None else None
        if eager is not None:
            # The joint replay has grad on throughout: a value read after an in-place update
            # under ``no_grad`` would require grad there, not in eager.
            needs_grad = needs_grad and eager.requires_grad
        if eager is not None and eager.input_index is not None:
            user_outputs.append(eager)
            continue
        input_alias = next((i for i, p in enumerate(fw_placeholders) if _is_alias(val, p.meta["val"])), None)
        if eager is None and input_alias is not None and input_alias not in mutated:
            base = fw_placeholders[input_alias].meta["val"]
            user_outputs.append(OutputAlias(input_alias, False, tuple(val.shape), tuple(val.stride()),
                                            val.storage_offset() - base.storage_offset(), needs_grad, True))
            continue
        if eager is not None and input_alias is not None:
            # Fresh in eager (``torch.cat([x])``), an alias of an input in the functional trace.
            with fw.graph.inserting_before(out_node):
                copy = fw.graph.call_function(aten.clone.default, (node,))
            copy.meta["val"] = val
            user_outputs.append(keep(copy, needs_grad))
            continue
        base_node = _computed_base(node, fw_placeholders)
        if base_node is not None:
            base_val = base_node.meta["val"]
            index = keep(base_node, needs_grad)
            delta = val.storage_offset() - base_val.storage_offset()
            user_outputs.append(IntermediateView(index, OutputAlias(
                None, False, tuple(val.shape), tuple(val.stride()), delta, needs_grad,
                eager.is_view if eager is not None else True)))
            continue
        user_outputs.append(keep(node, needs_grad))
    out_node.args = (kept + list(out_node.args[0][n_user:]),)
    eliminate_dead_code(fw.graph)
    fw.recompile()
    n_fw = len(kept)
    tangent_outputs = [i for i, r in enumerate(fw_requires_grad) if r]
    tangent_outputs += [n_fw + j for j, r in enumerate(mutation_requires_grad) if r]

    grad_box: list[list[bool]] = []

    def joint(primals: list[torch.Tensor], tangents: list[torch.Tensor]) -> list[Any]:
        primals = [_as_primal(p, r) for p, r in zip(primals, requires_grad)]
        with torch.enable_grad(), torch.fx.traceback.preserve_node_meta():
            # ``fw`` was traced below autocast (its casts are nodes): replayed with autocast off,
            # or an op eager ran in fp32 inside ``autocast(enabled=False)`` would be cast again.
            # The backward below is traced in the caller's autocast state (the forward's), as if
            # it ran inside the same autocast region; its casts become nodes too.
            # (The replay keeps each forward node's meta: its user stack trace.)
            outs = call_without_autocast(FunctionInterpreter(fw).run, *primals)
        wrt = [p for p in primals if isinstance(p, torch.Tensor) and p.requires_grad]
        diff = [outs[i] for i in tangent_outputs]
        grads: Sequence[Any] = ()
        if wrt and diff:
            grads = torch.autograd.grad(diff, wrt, tangents, allow_unused=True)
        it = iter(grads)
        all_grads = [next(it) if r else None for r in requires_grad] if grads else [None] * len(primals)
        grad_box.append([g is not None for g in all_grads])
        return [o.detach() for o in outs] + [g for g in all_grads if g is not None]

    with fake_mode:
        primal_fakes = [_as_primal(t, False) for t in fakes]
        fw_values = [n.meta["val"] for n in out_node.args[0]]
        tangent_fakes = [torch.empty_like(fw_values[i], memory_format=torch.contiguous_format)
                         for i in tangent_outputs]
        # No stack traces recorded here: the forward's nodes carry the user's (above), and
        # extracting one per backward node only found pyjit's and torch's own frames
        # (about 15% of a CNN's joint trace).
        joint_gm = make_fx(joint, decomposition_table=decompositions, tracing_mode="real",
                           record_stack_traces=False)(primal_fakes, tangent_fakes)
    _strip_detach(joint_gm)
    if _has_mutation(joint_gm):
        joint_gm = _functionalize(joint_gm, fake_mode, primal_fakes + tangent_fakes, decompositions)
    return JointGraph(joint_gm, len(fakes), out_spec, user_outputs, n_fw, fw_requires_grad, mutated,
                      tangent_outputs, requires_grad, grad_box[-1], mutation_requires_grad)


def _computed_base(node: torch.fx.Node, placeholders: list[torch.fx.Node]) -> torch.fx.Node | None:
    """The value computed in the graph that ``node`` is a view of (through a chain of view ops),
    or None when ``node`` is no view or a view of a graph input."""
    base = node
    while base.op == "call_function" and isinstance(base.target, torch._ops.OpOverload) and base.target.is_view \
            and base.args and isinstance(base.args[0], torch.fx.Node):
        base = base.args[0]
    if base is node or base in placeholders or base.op != "call_function":
        return None
    return base


def _strip_detach(gm: torch.fx.GraphModule) -> None:
    """``detach``/``alias`` are identities once autograd is gone; removing them exposes reuse."""
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target in (aten.detach.default, aten.alias.default):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
    eliminate_dead_code(gm.graph)
    gm.recompile()


def _has_mutation(gm: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               and n.target._schema.is_mutable for n in gm.graph.nodes)


def _functionalize(gm: torch.fx.GraphModule, fake_mode: Any, inputs: list[torch.Tensor],
                   decompositions: dict[Any, Callable[..., Any]]) -> torch.fx.GraphModule:
    """Re-trace a joint graph whose backward formulas used in-place ops, functionalized."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def replay(*args: torch.Tensor) -> Any:
        return list(torch.fx.Interpreter(gm).run(*args))

    fn = torch.func.functionalize(replay, remove="mutations")
    with fake_mode, torch.no_grad():
        new = make_fx(fn, decomposition_table=decompositions, tracing_mode="real")(*inputs)
    if any(n.op == "call_function" and n.target is aten.copy_.default for n in new.graph.nodes):
        raise NotImplementedError("the backward mutates a graph input")
    _strip_detach(new)
    return new
