"""``weakref.ref(obj)`` built by traced code (pyjit/variables/weakrefs.py), as torch's
``RemovableHandle`` does when a hook is registered: no graph break, the caller gets a real weak
reference to the very object eager references (it dies with it), objects without a weak
reference slot raise TypeError as in eager, and dereferencing breaks rather than guessing."""
from __future__ import annotations

import collections
import gc
import weakref

import pytest
import torch

import pyjit

from .helpers import CompileCounter, same

X = torch.randn(4)


class Obj:
    pass


class Handle:
    """The shape of torch.utils.hooks.RemovableHandle (without its class-level counter)."""

    def __init__(self, hooks_dict, key):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = key


def register(x, hooks, fn):
    handle = Handle(hooks, len(hooks))
    hooks[handle.id] = fn
    return x + 1, handle


def test_handle_with_a_weakref_in_one_graph():
    hooks_e, hooks_j = collections.OrderedDict(), collections.OrderedDict()
    y_e, h_e = register(X, hooks_e, len)
    counter = CompileCounter()
    y_j, h_j = pyjit.jit(register, backend=counter, fullgraph=True)(X, hooks_j, len)
    same(y_e, y_j, "result")
    assert counter.graphs == 1
    assert type(h_j.hooks_dict_ref) is weakref.ref and h_j.hooks_dict_ref() is hooks_j
    assert h_j.id == h_e.id and list(hooks_j.items()) == list(hooks_e.items())
    assert pyjit.explain(register)(X, collections.OrderedDict(), len).break_count == 0


def test_the_weakref_dies_with_its_object():
    def f(x, o):
        return x * 2, weakref.ref(o)

    o = Obj()
    y, r = pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X, o)
    same(X * 2, y, "result")
    assert r() is o and r is weakref.ref(o)  # CPython shares a callback-free ref: so does pyjit
    del o
    gc.collect()
    assert r() is None


def test_weakref_to_an_object_built_in_the_trace():
    def f(x):
        o = Obj()
        o.a = 1
        return x + 1, weakref.ref(o)

    _, r_e = f(X)
    y, r_j = pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)
    same(X + 1, y, "result")
    gc.collect()
    assert r_e() is None and r_j() is None  # nothing else holds the object: dead, as in eager


def test_kept_object_stays_referenced():
    def f(x):
        o = Obj()
        return x + 1, o, weakref.ref(o)

    _, o, r = pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)
    assert r() is o


def test_not_weakly_referenceable_raises_type_error_as_eager():
    def f(x, d):
        return x + 1, weakref.ref(d)

    with pytest.raises(TypeError) as eager:
        f(X, {})
    with pytest.raises(TypeError) as jitted:
        pyjit.jit(f, backend=CompileCounter())(X, {})
    assert str(eager.value) == str(jitted.value)


def test_dereferencing_breaks_and_stays_correct():
    def f(x, o):
        r = weakref.ref(o)
        return x + (1 if r() is o else 0)

    o = Obj()
    same(f(X, o), pyjit.jit(f, backend=CompileCounter())(X, o), "result")
    assert pyjit.explain(f)(X, o).break_count == 1


def test_callback_breaks_and_runs_it_as_eager():
    called = []

    def f(x, o):
        return x + 1, weakref.ref(o, lambda r: called.append(r))

    o = Obj()
    y, r = pyjit.jit(f, backend=CompileCounter())(X, o)
    assert r() is o
    del o
    gc.collect()
    assert called == [r]
