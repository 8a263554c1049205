"""``torch._foreach_*`` calls traced as the per-tensor ops eager runs for them.

A foreach op applies one pointwise op to every tensor of a list (``torch.optim``'s multi-tensor
paths, the default for CUDA parameters, are written with them). What this module owns:

- **Recording.** A recognised call (unary pointwise ops, ``add/sub/mul/div/pow``,
  ``clamp_min/clamp_max/maximum/minimum``, ``addcdiv/addcmul``, ``lerp``, ``norm``) becomes one
  graph op per list element, the op eager's per-tensor path (``foreach_tensor_*_slow``) calls:
  ``torch._foreach_add_(ps, gs, alpha=a)`` is ``p.add_(g, alpha=a)`` for each pair,
  ``_foreach_maximum_`` is ``clamp_min_`` (eager dispatches it to that kernel). In-place forms
  return their ``self`` list, out-of-place forms a tuple, as torch does.
  Why per-tensor ops rather than the foreach node: pyjit's backend lowers pointwise aten ops and
  fuses chains of them, and has no foreach lowering; the chain an optimizer applies to one
  parameter (``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_``) becomes
  one kernel per parameter that streams its tensors contiguously (coalesced on a GPU). The cost
  on a GPU is one launch per parameter where eager's multi-tensor kernel makes a few; grouping
  them is a scheduler matter. Pointwise formulas are the same in eager's CUDA foreach kernels
  (``addcdiv``/``addcmul``'s order aside, see :func:`addc_with_tensor_value`); ``norm``'s
  reduction order is not. Per-tensor in-place ops also mark the graph as mutating
  (``OutputGraph.mutates``), which the foreach node did not.
- **Tensor of scalars.** ``_foreach_addcdiv(_)``/``_foreach_addcmul(_)`` take their per-tensor
  values as one 1-d tensor (``Adam``/``AdamW`` stack their step sizes into one while compiling,
  ``_stack_if_compiling``). Eagerly the kernel reads it on the host, element by element, into
  Scalars; fake tensors cannot (``Expected scalars to be on CPU, got meta``). Here element ``i``
  is ``scalars[i]``, a 0-d tensor in the graph, and the update is written out with eager's
  arithmetic (:func:`addc_with_tensor_value`, also used for ``Tensor.addcdiv_(..., value=t)``).
- **Validation.** A call is matched against the op's schemas (``Tensor[]``, ``Scalar[]``,
  ``Tensor``, ``Scalar`` arguments; list lengths; eager's checks on a ``Tensor`` operand).
  Anything else (other foreach ops, ``out=``, a call eager would reject) is left to the generic
  path: one graph call run on fake tensors, which breaks the graph if that fails.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..trace.translator import Translator

_PREFIX = "_foreach_"

# Unary pointwise ops: ``_foreach_<op>(xs)`` is ``torch.<op>(x)``, ``_foreach_<op>_`` is ``x.<op>_()``.
_UNARY = frozenset({
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
    "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
    "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "zero",
})
# Binary ops and the per-tensor op eager's CPU path calls (maximum/minimum run clamp_min/max).
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "clamp_min": "clamp_min",
           "clamp_max": "clamp_max", "maximum": "clamp_min", "minimum": "clamp_max"}
_ADDC = frozenset({"addcdiv", "addcmul"})


def call_foreach(tx: "Translator", fn: Any, args: list[VariableTracker],
                 kwargs: dict[str, VariableTracker]) -> VariableTracker | None:
    """``fn(*args, **kwargs)`` for a ``torch._foreach_*`` function, recorded per tensor; None
    when this module does not handle the call (the caller records it as one graph call)."""
    name = getattr(fn, "__name__", "")[len(_PREFIX):]
    inplace = name.endswith("_")
    op = name[:-1] if inplace else name
    if op not in _UNARY and op not in _BINARY and op not in _ADDC and op not in ("lerp", "norm"):
        return None
    if op == "zero" and not inplace or op == "norm" and inplace:
        return None
    match = _bind(_PREFIX + name, args, kwargs)
    if match is None:
        return None
    overload, bound, explicit = match
    n = _length(bound)
    if n is None:
        return None
    if op in _ADDC and overload == "Tensor":
        scalars = bound["scalars"]
        ex = scalars.example  # type: ignore[attr-defined]
        # eager's checks (convert_tensor_to_scalar_list): a contiguous 1-d host tensor of n values
        if ex.dim() != 1 or ex.shape[0] != n or ex.device.type != "cpu" or not ex.is_contiguous():
            return None
    if overload == "Tensor" and op in _BINARY and bound["other"].example.dim() != 0:  # type: ignore[attr-defined]
        return None  # eager: "scalar tensor expected to be 0 dim"

    results = [_one(tx, op, inplace, overload, {k: _item(v, i) for k, v in bound.items()}, explicit, i)
               for i in range(n)]
    if inplace:
        return args[0] if args else kwargs["self"]
    from .lists import TupleVariable

    return TupleVariable(results)


def _one(tx: "Translator", op: str, inplace: bool, overload: str, a: dict[str, VariableTracker],
         explicit: set[str], i: int) -> VariableTracker:
    """The per-tensor op for element ``i`` (``a``: the bound arguments, lists indexed)."""
    out = tx.output
    if op in _UNARY:
        if inplace:
            return a["self"].call_method(tx, op + "_", [], {})
        return out.call(tx, "call_function", getattr(torch, op), [a["self"]], {})
    if op == "norm":
        kw = {"dtype": a["dtype"]} if "dtype" in explicit else {}
        return out.call(tx, "call_function", torch.linalg.vector_norm, [a["self"], a["ord"]], kw)
    if op == "lerp":
        weight = a["weights"] if "weights" in a else a["weight"]
        if inplace:
            return a["self"].call_method(tx, "lerp_", [a["tensors1"], weight], {})
        return out.call(tx, "call_function", torch.lerp, [a["self"], a["tensors1"], weight], {})
    if op in _ADDC:
        x, t1, t2 = a["self"], a["tensor1"], a["tensor2"]
        if overload == "Tensor":
            value = out.call(tx, "call_method", "select", [a["scalars"], ConstantVariable(0), ConstantVariable(i)], {})
            return addc_with_tensor_value(tx, x, t1, t2, value, div=op == "addcdiv", inplace=inplace)
        kw = {"value": a["scalars"]} if overload == "ScalarList" else {"value": a["value"]} if "value" in explicit else {}
        if inplace:
            return x.call_method(tx, op + "_", [t1, t2], kw)
        return out.call(tx, "call_function", getattr(torch, op), [x, t1, t2], kw)
    per = _BINARY[op]
    names = list(a)
    first, second = a[names[0]], a[names[1]]  # schema order: self, other/scalar(s)/exponent
    kw = {"alpha": a["alpha"]} if "alpha" in explicit else {}
    if inplace:
        return first.call_method(tx, per + "_", [second], kw)
    return out.call(tx, "call_function", getattr(torch, per), [first, second], kw)


def addc_with_tensor_value(tx: "Translator", x: VariableTracker, t1: VariableTracker, t2: VariableTracker,
                           value: VariableTracker, *, div: bool, inplace: bool) -> VariableTracker:
    """``x.addcdiv(t1, t2, value=v)`` (``addcmul`` when not ``div``; ``_`` when ``inplace``) with
    ``v`` a 0-d tensor, as eager's kernel on ``x``'s device computes it once ``v`` is a Scalar:

    - the operands are promoted to their common dtype; half/bfloat16 compute in float32
      (the CPU kernel's ``float(self_val)``, CUDA's ``acc_type``) and round once at the end;
    - ``v`` is cast to that compute dtype (``value.to<scalar_t>()``);
    - the CPU kernel evaluates ``self + v * t1 / t2`` left to right: ``x + ((v * t1) / t2)``.
      Recorded as ``addcdiv(x, v * t1, t2)`` (``addcmul``), value 1: the same kernel then does
      the rest, including the FMA the compiler forms for ``x + p * t2`` in its vectorised loop
      (a separate ``mul`` + ``add`` differs from eager in the last bit);
    - CUDA's kernel (and the foreach CUDA functor) computes ``x + v * (t1 / t2)``, which nvcc
      contracts to ``fma(v, t1 / t2, x)``: recorded as ``addcmul(x, t1 / t2, v)``, value 1
      (the product is exact either way round; ``v`` goes second because ``addcmul`` on CUDA
      accepts a 0-d CPU tensor, an optimizer's step size, only as ``tensor2``).
    """
    from .tensor import TensorVariable

    out = tx.output
    assert isinstance(x, TensorVariable) and isinstance(t1, TensorVariable) and isinstance(t2, TensorVariable)
    common = _common_dtype(x.example, t1.example, t2.example)
    compute = torch.float32 if common in (torch.float16, torch.bfloat16) else common

    def cast(v: VariableTracker, dtype: torch.dtype) -> VariableTracker:
        if isinstance(v, TensorVariable) and v.example.dtype == dtype:
            return v
        return out.call(tx, "call_method", "to", [v, ConstantVariable(dtype)], {})

    a, b, v = cast(t1, compute), cast(t2, compute), cast(value, compute)
    if x.example.device.type == "cpu":
        name = "addcdiv" if div else "addcmul"
        a, b = out.call(tx, "call_function", torch.mul, [v, a], {}), b
    else:
        name = "addcmul"
        a, b = out.call(tx, "call_function", torch.div if div else torch.mul, [a, b], {}), v
    if inplace and compute == common:
        return x.call_method(tx, name + "_", [a, b], {})  # computed in the common dtype, stored in x's
    result = out.call(tx, "call_function", getattr(torch, name), [cast(x, compute), a, b], {})
    if inplace:
        return x.call_method(tx, "copy_", [result], {})
    return cast(result, common)


def _common_dtype(*examples: torch.Tensor) -> torch.dtype:
    """The dtype ``addcmul`` promotes its operands to (0-d tensors weigh less, as in eager)."""
    def meta(t: torch.Tensor) -> torch.Tensor:
        return torch.empty((1,) * min(t.dim(), 1), dtype=t.dtype, device="meta")

    return torch.addcmul(*(meta(t) for t in examples)).dtype


# -- schema matching ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _schemas(qualified: str) -> tuple[Any, ...]:
    """The overloads of ``aten::<name>`` without ``out=`` (the ``*_out`` forms)."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator("aten::" + qualified)
    except Exception:  # noqa: BLE001 - another torch build: nothing recognised
        return ()
    return tuple(s for s in schemas if not any(arg.name == "out" for arg in s.arguments))


def _bind(qualified: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
          ) -> tuple[str, dict[str, VariableTracker], set[str]] | None:
    """The overload the call matches: its name, the arguments by name (defaults filled in),
    and the names the caller gave. None when no overload matches exactly one way."""
    found = None
    for schema in _schemas(qualified):
        params = schema.arguments
        positional = [p for p in params if not p.kwarg_only]
        if len(args) > len(positional):
            continue
        bound: dict[str, VariableTracker] = {p.name: a for p, a in zip(positional, args)}
        if any(k in bound or k not in {p.name for p in params} for k in kwargs):
            continue
        bound.update(kwargs)
        explicit = set(bound)
        ok = True
        for p in params:
            if p.name not in bound:
                if not p.has_default_value():
                    ok = False
                    break
                bound[p.name] = ConstantVariable(p.default_value)
            if not _fits(str(p.type), bound[p.name]):
                ok = False
                break
        if ok:
            if found is not None:
                return None  # ambiguous (e.g. empty lists): leave it to torch's own parser
            found = (schema.overload_name, {p.name: bound[p.name] for p in params}, explicit)
    return found


def _is_scalar(v: VariableTracker) -> bool:
    from .symbolic import SymNodeVariable

    if isinstance(v, SymNodeVariable):
        return True
    return isinstance(v, ConstantVariable) and type(v.value) in (bool, int, float, complex)


def _fits(type_text: str, v: VariableTracker) -> bool:
    from .lists import BaseListVariable
    from .tensor import TensorVariable

    # The schema's types as the JIT prints them: Tensor[] is List[Tensor], Scalar is number,
    # ScalarType? is Optional[int].
    if type_text == "List[Tensor]":
        return isinstance(v, BaseListVariable) and all(isinstance(i, TensorVariable) for i in v.items)
    if type_text == "List[number]":
        return isinstance(v, BaseListVariable) and all(_is_scalar(i) for i in v.items)
    if type_text == "Tensor":
        return isinstance(v, TensorVariable)
    if type_text == "number":
        return _is_scalar(v)
    if type_text == "Optional[int]":
        return isinstance(v, ConstantVariable) and (v.value is None or isinstance(v.value, torch.dtype))
    return False


def _length(bound: dict[str, VariableTracker]) -> int | None:
    """The common length of the list arguments (None: none, empty, or lengths differ)."""
    from .lists import BaseListVariable

    lengths = {len(v.items) for v in bound.values() if isinstance(v, BaseListVariable)}
    if len(lengths) != 1:
        return None
    n = lengths.pop()
    return n or None


def _item(v: VariableTracker, i: int) -> VariableTracker:
    from .lists import BaseListVariable

    return v.items[i] if isinstance(v, BaseListVariable) else v
