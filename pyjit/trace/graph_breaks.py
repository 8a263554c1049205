"""The registry of graph-break kinds: every reason the tracer can stop, with explanation and hint.

``unsupported(kind, detail)`` raises :class:`pyjit.errors.Unsupported` carrying a structured
:class:`pyjit.errors.GraphBreak`; the translator fills in the user's file:line and inline chain.
A break is compiled around (prefix graph, the instruction natively, a resume function: see
:mod:`pyjit.trace.breaks`), or raises :class:`pyjit.errors.GraphBreakError` under
``fullgraph=True``. docs/graph_breaks.md mirrors this table.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, NoReturn

from ..errors import GraphBreak, Unsupported

# kind -> (explanation, hint)
BREAK_KINDS: dict[str, tuple[str, str]] = {
    "data_dependent": (
        "the Python value of a tensor is needed while tracing (item(), tolist(), bool(tensor), `if tensor:`)",
        "keep the decision in tensor code (torch.where, masking) or move it outside the jitted function",
    ),
    "unsupported_opcode": (
        "a bytecode instruction pyjit does not interpret yet",
        "move this construct outside the jitted function",
    ),
    "unsupported_call": (
        "a call of a value pyjit has no call model for",
        "call it outside the jitted function, or pass its result in as an argument",
    ),
    "autograd_call": (
        "a call into autograd (backward(), tensor hooks, retain_grad) that runs natively between graphs",
        "nothing to do for backward(): the compiled graphs' backward runs through it; move hooks outside the jitted function",
    ),
    "c_function": (
        "a function implemented in C (no Python bytecode to inline, not a torch op for the graph)",
        "call it outside the jitted function and pass its result in, or write the step in Python or torch ops",
    ),
    "builtin_arguments": (
        "a builtin or library function called with arguments pyjit cannot model (tensors or traced "
        "values where it needs Python constants)",
        "pass Python constants to it, or compute the value with torch ops (torch.maximum, torch.where, ...)",
    ),
    "untracked_method": (
        "a method of a type pyjit models only in part (containers, tensors, modules, storages)",
        "use the common methods of the type, or call this one outside the jitted function",
    ),
    "object_construction": (
        "constructing an object pyjit cannot build symbolically (its own __new__, a C __init__, a "
        "metaclass __call__, a module with parameters)",
        "build the object outside the jitted function and pass it in",
    ),
    "copy_unsupported": (
        "copy.copy/deepcopy of a value pyjit cannot copy symbolically",
        "copy it outside the jitted function, or .clone() tensors",
    ),
    "context_manager": (
        "a `with` block, lock or ContextVar use pyjit cannot follow",
        "keep only torch.no_grad/enable_grad/set_grad_enabled/autocast blocks inside the jitted function",
    ),
    "weak_reference": (
        "a weak reference whose callback or referent lifetime pyjit cannot model",
        "make the weak reference outside the jitted function",
    ),
    "introspection": (
        "introspection of a value whose answer is not fixed by a guard (id(), inspect.signature(), "
        "vars(), super() outside a method, a Python __len__/__bool__ of a module)",
        "read the value outside the jitted function and pass it in",
    ),
    "side_effect": (
        "a mutation of a Python object that lives outside the traced frame (list/dict/attribute/global)",
        "return the new value instead of mutating, or mutate outside the jitted function",
    ),
    "print": (
        "print() and logging have effects pyjit cannot replay",
        "remove the print or move it outside the jitted function",
    ),
    "exception": (
        "an exception was raised (or would be raised) by the traced code",
        "make sure the code does not raise on these inputs",
    ),
    "generator": ("generators, coroutines and async code are not traced", "return a list instead of yielding"),
    "unsupported_attr": (
        "an attribute pyjit cannot read symbolically",
        "read it outside the jitted function and pass the value in",
    ),
    "unsupported_object": (
        "an object pyjit has no tracker for",
        "pass tensors, Python constants, containers, functions or nn.Modules",
    ),
    "unsupported_return": (
        "the function returns a value pyjit cannot rebuild",
        "return tensors, Python constants, or lists/tuples/dicts of them",
    ),
    "hooks": (
        "an nn.Module with forward hooks or pre-hooks is called",
        "remove the hooks while the module runs under pyjit.jit",
    ),
    "distributed": (
        "a torch.distributed call pyjit does not trace (point-to-point or object collectives, process-group "
        "management, the Work handle of an async_op=True collective leaving the traced code) or a module managed "
        "by FSDP, whose unshard/reshard hooks run natively; the call runs natively between compiled graphs",
        "nothing to do for FSDP modules (their forward still compiles as its own frame); for collectives use "
        "dist.all_reduce/all_gather_into_tensor/reduce_scatter_tensor/broadcast (wait on an async_op=True "
        "handle inside the jitted function) or torch.distributed._functional_collectives, which are traced",
    ),
    "inline_depth": ("calls nest deeper than config.inline_depth_limit", "raise pyjit.config.inline_depth_limit"),
    "inline_budget": (
        "a called function runs long without tensor work (config.inline_instruction_budget) or recurses "
        "(config.inline_recursion_limit); the call runs natively, as its own frame",
        "nothing to do: the call runs natively and the rest keeps compiling; move tensor work out of "
        "long Python loops to keep it in one graph",
    ),
    "loop_limit": ("the trace ran too many instructions (an unbounded loop?)", "bound the loop by a constant"),
    "user_break": (
        "pyjit.graph_break() was called",
        "remove the call to compile this code into one graph",
    ),
    "disabled": (
        "a call to a function wrapped by pyjit.disable (never traced)",
        "remove pyjit.disable from the function to trace it",
    ),
    "tensor_op_failed": (
        "running the operation on fake tensors failed (wrong shapes/dtypes, or an op without a meta kernel)",
        "check that the code runs eagerly on these inputs",
    ),
}


def unsupported(kind: str, detail: str = "") -> NoReturn:
    """Stop tracing with a structured graph break of a registered kind."""
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
