"""The long tail of calls, modules and library code: each construct gives eager's results over
several calls and, where torch.compile is importable, as many graphs as torch.compile gives for
the same function (its default configuration, run here only as the peer to compare against).
"""
from __future__ import annotations

import collections
import copy
import functools
import inspect
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _rand(i: int, *shape: int) -> torch.Tensor:
    return torch.randn(*(shape or (4,)), generator=torch.Generator().manual_seed(i))


def _peer_graphs(build: Callable[[], Callable[..., Any]], make_args: Callable[[int], tuple], calls: int) -> int | None:
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
        peer = _peer_graphs(build, make_args, calls)
        if peer is not None:
            assert backend.frame_count == peer, f"torch.compile gives {peer} graphs\n{backend.graph_listing()}"
    return backend


def _one(i: int) -> tuple:
    return (_rand(i),)


# -- isinstance on legacy tensor types ------------------------------------------------------------

def test_isinstance_legacy_tensor_types():
    def build():
        def f(x):
            if isinstance(x, torch.FloatTensor):
                x = x + 1
            if isinstance(x, (torch.cuda.FloatTensor, torch.DoubleTensor)):
                x = x * 3
            return x - 1
        return f

    check(build, _one, graphs=1)
    check(build, lambda i: (_rand(i).double(),), graphs=1)


# -- module generators: next(self.parameters()) behind dtype/device properties -------------------

class _WithDtype(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(iter(self.buffers()), next(iter(self.parameters()))).device

    def forward(self, x):
        names = [n for n, _ in self.named_parameters()]
        return self.lin(x.to(self.dtype).to(self.device)) * len(names)


def test_next_on_module_parameters():
    torch.manual_seed(0)
    module = _WithDtype()
    check(lambda: (lambda x: module(x) + 1), _one, graphs=1)


# -- bound tensor methods read from outside the trace ----------------------------------------------

def test_bound_tensor_method_global_closure_argument():
    t = _rand(7)
    add = t.add

    def build_global():
        def f(x):
            return add(x) + 1
        return f

    check(build_global, _one, graphs=1)

    def build_arg():
        def f(fn, y):
            return fn(y) * 2
        return f

    check(build_arg, lambda i: (_rand(i + 10).mul, _rand(i)), graphs=1)


def test_bound_tensor_method_guards_its_name():
    be = CountingBackend()
    jf = pyjit.jit(lambda fn, y: fn(y) * 2, backend=be)
    a, b = _rand(1), _rand(2)
    assert_same(jf(a.add, b), (a + b) * 2)
    assert_same(jf(a.sub, b), (a - b) * 2)  # another method of the same tensor: traced again
    assert_same(jf(b.sub, a), (b - a) * 2)
    assert be.frame_count == 2, be.graph_listing()


# -- dict views from native calls ------------------------------------------------------------------

def _target(a, b=1, *, scale=2):
    return a


def test_iterate_signature_parameters_views():
    def build():
        def f(x):
            params = inspect.signature(_target).parameters
            for name in params.keys():
                x = x + len(name)
            for p in params.values():
                if p.default is not inspect.Parameter.empty:
                    x = x * p.default
            for name, p in params.items():
                x = x - len(name)
            return x
        return f

    check(build, _one, graphs=1)
