"""The registry of graph-break kinds: every reason the tracer can stop, with explanation and hint.

``unsupported(kind, detail)`` raises :class:`pyjit.errors.Unsupported` carrying a structured
:class:`pyjit.errors.GraphBreak`; the translator fills in the user's file:line and inline chain.
A break is compiled around (prefix graph, the instruction natively, a resume function: see
:mod:`pyjit.trace.breaks`), or raises :class:`pyjit.errors.GraphBreakError` under
``fullgraph=True``. docs/graph_breaks.md mirrors this table.
"""
from __future__ import annotations

import contextlib
import enum
from typing import Iterator, NoReturn

from ..errors import GraphBreak, Unsupported


class BreakKind(enum.StrEnum):
    """Every kind of graph break. A ``str`` enum: members compare and hash equal to their names,
    so ``gb.kind == "exception"``, logs and JSON keep working with plain strings."""

    DATA_DEPENDENT = "data_dependent"
    UNSUPPORTED_OPCODE = "unsupported_opcode"
    UNSUPPORTED_CALL = "unsupported_call"
    AUTOGRAD_CALL = "autograd_call"
    C_FUNCTION = "c_function"
    BUILTIN_ARGUMENTS = "builtin_arguments"
    UNTRACKED_METHOD = "untracked_method"
    OBJECT_CONSTRUCTION = "object_construction"
    COPY_UNSUPPORTED = "copy_unsupported"
    CONTEXT_MANAGER = "context_manager"
    WEAK_REFERENCE = "weak_reference"
    INTROSPECTION = "introspection"
    SIDE_EFFECT = "side_effect"
    PRINT = "print"
    EXCEPTION = "exception"
    GENERATOR = "generator"
    UNSUPPORTED_ATTR = "unsupported_attr"
    UNSUPPORTED_OBJECT = "unsupported_object"
    UNSUPPORTED_RETURN = "unsupported_return"
    HOOKS = "hooks"
    DISTRIBUTED = "distributed"
    INLINE_DEPTH = "inline_depth"
    INLINE_BUDGET = "inline_budget"
    LOOP_LIMIT = "loop_limit"
    USER_BREAK = "user_break"
    DISABLED = "disabled"
    TENSOR_OP_FAILED = "tensor_op_failed"


# kind -> (explanation, hint)
BREAK_KINDS: dict[BreakKind, tuple[str, str]] = {
    BreakKind.DATA_DEPENDENT: (
        "the Python value of a tensor is needed while tracing (item(), tolist(), bool(tensor), `if tensor:`)",
        "keep the decision in tensor code (torch.where, masking) or move it outside the jitted function",
    ),
    BreakKind.UNSUPPORTED_OPCODE: (
        "a bytecode instruction pyjit does not interpret yet",
        "move this construct outside the jitted function",
    ),
    BreakKind.UNSUPPORTED_CALL: (
        "a call of a value pyjit has no call model for",
        "call it outside the jitted function, or pass its result in as an argument",
    ),
    BreakKind.AUTOGRAD_CALL: (
        "a call into autograd (backward(), tensor hooks, retain_grad) that runs natively between graphs",
        "nothing to do for backward(): the compiled graphs' backward runs through it; move hooks outside the jitted function",
    ),
    BreakKind.C_FUNCTION: (
        "a function implemented in C (no Python bytecode to inline, not a torch op for the graph)",
        "call it outside the jitted function and pass its result in, or write the step in Python or torch ops",
    ),
    BreakKind.BUILTIN_ARGUMENTS: (
        "a builtin or library function called with arguments pyjit cannot model (tensors or traced "
        "values where it needs Python constants)",
        "pass Python constants to it, or compute the value with torch ops (torch.maximum, torch.where, ...)",
    ),
    BreakKind.UNTRACKED_METHOD: (
        "a method of a type pyjit models only in part (containers, tensors, modules, storages)",
        "use the common methods of the type, or call this one outside the jitted function",
    ),
    BreakKind.OBJECT_CONSTRUCTION: (
        "constructing an object pyjit cannot build symbolically (its own __new__, a C __init__, a "
        "metaclass __call__, a module with parameters)",
        "build the object outside the jitted function and pass it in",
    ),
    BreakKind.COPY_UNSUPPORTED: (
        "copy.copy/deepcopy of a value pyjit cannot copy symbolically",
        "copy it outside the jitted function, or .clone() tensors",
    ),
    BreakKind.CONTEXT_MANAGER: (
        "a `with` block, lock or ContextVar use pyjit cannot follow",
        "keep only torch.no_grad/enable_grad/set_grad_enabled/autocast blocks inside the jitted function",
    ),
    BreakKind.WEAK_REFERENCE: (
        "a weak reference whose callback or referent lifetime pyjit cannot model",
        "make the weak reference outside the jitted function",
    ),
    BreakKind.INTROSPECTION: (
        "introspection of a value whose answer is not fixed by a guard (id(), inspect.signature(), "
        "vars(), super() outside a method, a Python __len__/__bool__ of a module)",
        "read the value outside the jitted function and pass it in",
    ),
    BreakKind.SIDE_EFFECT: (
        "a mutation of a Python object that lives outside the traced frame (list/dict/attribute/global)",
        "return the new value instead of mutating, or mutate outside the jitted function",
    ),
    BreakKind.PRINT: (
        "print() and logging have effects pyjit cannot replay",
        "remove the print or move it outside the jitted function",
    ),
    BreakKind.EXCEPTION: (
        "an exception was raised (or would be raised) by the traced code",
        "make sure the code does not raise on these inputs",
    ),
    BreakKind.GENERATOR: ("generators, coroutines and async code are not traced", "return a list instead of yielding"),
    BreakKind.UNSUPPORTED_ATTR: (
        "an attribute pyjit cannot read symbolically",
        "read it outside the jitted function and pass the value in",
    ),
    BreakKind.UNSUPPORTED_OBJECT: (
        "an object pyjit has no tracker for",
        "pass tensors, Python constants, containers, functions or nn.Modules",
    ),
    BreakKind.UNSUPPORTED_RETURN: (
        "the function returns a value pyjit cannot rebuild",
        "return tensors, Python constants, or lists/tuples/dicts of them",
    ),
    BreakKind.HOOKS: (
        "an nn.Module with forward hooks or pre-hooks is called",
        "remove the hooks while the module runs under pyjit.jit",
    ),
    BreakKind.DISTRIBUTED: (
        "a torch.distributed call pyjit does not trace (point-to-point or object collectives, process-group "
        "management, the Work handle of an async_op=True collective leaving the traced code) or a module managed "
        "by FSDP, whose unshard/reshard hooks run natively; the call runs natively between compiled graphs",
        "nothing to do for FSDP modules (their forward still compiles as its own frame); for collectives use "
        "dist.all_reduce/all_gather_into_tensor/reduce_scatter_tensor/broadcast (wait on an async_op=True "
        "handle inside the jitted function) or torch.distributed._functional_collectives, which are traced",
    ),
    BreakKind.INLINE_DEPTH: ("calls nest deeper than config.inline_depth_limit", "raise pyjit.config.inline_depth_limit"),
    BreakKind.INLINE_BUDGET: (
        "a called function runs long without tensor work (config.inline_instruction_budget) or recurses "
        "(config.inline_recursion_limit); the call runs natively, as its own frame",
        "nothing to do: the call runs natively and the rest keeps compiling; move tensor work out of "
        "long Python loops to keep it in one graph",
    ),
    BreakKind.LOOP_LIMIT: ("the trace ran too many instructions (an unbounded loop?)", "bound the loop by a constant"),
    BreakKind.USER_BREAK: (
        "pyjit.graph_break() was called",
        "remove the call to compile this code into one graph",
    ),
    BreakKind.DISABLED: (
        "a call to a function wrapped by pyjit.disable (never traced)",
        "remove pyjit.disable from the function to trace it",
    ),
    BreakKind.TENSOR_OP_FAILED: (
        "running the operation on fake tensors failed (wrong shapes/dtypes, or an op without a meta kernel)",
        "check that the code runs eagerly on these inputs",
    ),
}


def unsupported(kind: BreakKind | str, detail: str = "") -> NoReturn:
    """Stop tracing with a structured graph break of a registered kind (a :class:`BreakKind` or
    its name); an unknown kind is a pyjit bug and raises ``ValueError``."""
    try:
        kind = BreakKind(kind)
    except ValueError:
        raise ValueError(f"unknown graph-break kind {kind!r}: add it to BreakKind, BREAK_KINDS and "
                         "docs/graph_breaks.md") from None
    explanation, hint = BREAK_KINDS[kind]
    text = f"{explanation}: {detail}" if detail else explanation
    raise Unsupported(GraphBreak(kind=kind, explanation=text, hint=hint))


@contextlib.contextmanager
def python_errors_are_the_programs() -> Iterator[None]:
    """Around a Python operation the traced code performs on its own data (``lst.pop()`` on
    the trackers of an empty list, ``del d[k]``): the error Python raises there is the
    program's exception, not a pyjit failure. It becomes an ``exception`` break (a ``try`` in
    the frame catches it; otherwise the instruction runs natively and raises it for real)."""
    try:
        yield
    except (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
        try:
            unsupported("exception", f"{type(e).__name__}: {e}")
        except Unsupported as u:
            u.exc_type = type(e)  # type: ignore[attr-defined]  # what an `except` clause matches
            raise u from None
