"""Shared helpers of the long-tail tests (test_long_tail_calls.py, test_long_tail_library.py): run a
function eagerly and under pyjit on fresh objects, and count torch.compile's graphs for the same
function (its default configuration, run here only as the peer to compare against)."""
from __future__ import annotations

from typing import Any, Callable

import torch

import pyjit

from .support import CountingBackend, assert_same


def rand(i: int, *shape: int) -> torch.Tensor:
    return torch.randn(*(shape or (4,)), generator=torch.Generator().manual_seed(i))


def peer_graphs(build: Callable[[], Callable[..., Any]], make_args: Callable[[int], tuple], calls: int) -> int | None:
    """Graphs torch.compile gives for a fresh ``build()`` over the same calls (None without it)."""
    try:
        import torch._dynamo
    except ImportError:
        return None
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(build(), backend=backend)
    for i in range(calls):
        compiled(*make_args(i))
    torch._dynamo.reset()
    return backend.frame_count


def check(build: Callable[[], Callable[..., Any]], make_args: Callable[[int], tuple], *, calls: int = 3,
          graphs: int | None = None, same_as_peer: bool = True) -> CountingBackend:
    """Eager and pyjit run on fresh objects from ``build()`` (state such as lazy modules is not
    shared) and equal arguments; results must match on every call. ``graphs``: the count pyjit
    must give; ``same_as_peer``: it must equal torch.compile's."""
    eager = build()
    backend = CountingBackend()
    jitted = pyjit.jit(build(), backend=backend)
    for i in range(calls):
        assert_same(eager(*make_args(i)), jitted(*make_args(i)), f"result of call {i}", exact=False)
    if graphs is not None:
        assert backend.frame_count == graphs, backend.graph_listing()
    if same_as_peer:
        peer = peer_graphs(build, make_args, calls)
        if peer is not None:
            assert backend.frame_count == peer, f"torch.compile gives {peer} graphs\n{backend.graph_listing()}"
    return backend


def one(i: int) -> tuple:
    return (rand(i),)
