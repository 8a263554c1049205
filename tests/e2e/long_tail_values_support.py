"""Helpers of the long-tail value tests (test_long_tail_values*.py): run a function eagerly and
under ``pyjit.jit`` on fresh identical arguments, compare results and arguments, and compare the
graph count with torch.compile's (the peer, with a counting backend) on the same function."""
from __future__ import annotations

import types

import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same


def rand(i: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


def one_tensor(i: int) -> tuple:
    return (rand(i, 4),)


def torch_compile_graphs(fn, make_args, calls: int) -> int | None:
    """Graphs torch.compile makes for ``fn`` over the same calls (None where it cannot run)."""
    try:
        import torch._dynamo as dynamo
    except Exception:  # pragma: no cover - torch builds without the compiler
        return None
    backend = CountingBackend()
    dynamo.reset()
    try:
        compiled = torch.compile(fn, backend=backend)
        for i in range(calls):
            compiled(*make_args(i))
    except Exception:  # noqa: BLE001 - the peer failing is no verdict on pyjit
        return None
    finally:
        dynamo.reset()
    return backend.frame_count


def check(fn, make_args=one_tensor, *, calls: int = 3, breaks: int = 0, compare=None, peer: bool = True) -> CountingBackend:
    """Eager vs pyjit over ``calls`` calls; graph count equal to torch.compile's; ``breaks``
    graph breaks at most (pyjit.explain on the first arguments)."""
    backend = CountingBackend()
    jf = pyjit.jit(fn, backend=backend)
    for i in range(calls):
        eager_args, jit_args = make_args(i), make_args(i)
        expected = fn(*eager_args)
        actual = jf(*jit_args)
        if compare is not None:
            compare(expected, actual, eager_args, jit_args)
        else:
            assert_same(expected, actual, f"result of call {i}", exact=False)
            assert_same(plain_state(eager_args), plain_state(jit_args), f"arguments after call {i}", exact=False)
    explained = pyjit.explain(fn)(*make_args(0))
    assert explained.break_count <= breaks, str(explained)
    if peer:
        tc = torch_compile_graphs(fn, make_args, calls)
        # tc == 0: this torch's compiler gave up on the frame (older releases do on some builtin
        # subclasses); pyjit compiling it is no difference to report
        if tc:
            assert backend.frame_count == tc, f"pyjit made {backend.frame_count} graphs, torch.compile {tc}\n" + backend.graph_listing()
    return backend


def plain_state(value):
    """Arguments with builtin subclasses turned into their base (assert_same compares exact types
    and would not look inside a user subclass)."""
    if isinstance(value, dict):
        return {k: plain_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return [plain_state(v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, (torch.Tensor, nn.Module, type, types.FunctionType)):
        return (type(value).__name__, plain_state(vars(value)))  # a user object: compared by its state
    return value
