"""pyjit must not keep the user's objects alive: call arguments, modules (and their parameters)
and closed-over tensors are freed once the user drops them, even while the compiled entries stay
cached (guards hold weak references, graphs take parameters as inputs). Checked with weakrefs
after ``gc.collect()``; uses ``backend="eager"`` (the counting backend of the other files keeps
example inputs on purpose).
"""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn as nn

import pyjit


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    yield
    pyjit.reset()


def _collect() -> None:
    for _ in range(3):
        gc.collect()


def test_call_arguments_are_not_kept_alive():
    def f(x, y):
        return x * y + 1

    jf = pyjit.jit(f, backend="eager")
    x, y = torch.randn(256), torch.randn(256)
    refs = [weakref.ref(x), weakref.ref(y)]
    out = jf(x, y)
    del x, y
    _collect()
    assert all(r() is None for r in refs), "an argument tensor is still referenced after the call"
    assert out.shape == (256,)
    jf(torch.randn(256), torch.randn(256))  # the cache entry still works


def test_module_and_parameters_are_freed_with_the_module():
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    jm = pyjit.jit(m, backend="eager")
    jm(torch.randn(2, 16))
    refs = [weakref.ref(m)] + [weakref.ref(p) for p in m.parameters()]
    del m, jm
    _collect()
    alive = [r for r in refs if r() is not None]
    assert not alive, f"{len(alive)} of the module and its parameters are still alive after dropping them"


def test_global_tensor_replaced_is_freed():
    namespace: dict = {"torch": torch}
    exec("def f(x):\n    return x + BIG\n", namespace)
    namespace["BIG"] = torch.randn(1024)
    ref = weakref.ref(namespace["BIG"])
    jf = pyjit.jit(namespace["f"], backend="eager")
    jf(torch.randn(1024))
    namespace["BIG"] = torch.randn(1024)
    _collect()
    assert ref() is None, "the replaced global tensor is kept alive by a cache entry"
    x = torch.randn(1024)
    torch.testing.assert_close(jf(x), x + namespace["BIG"], rtol=0, atol=0)


def test_closure_tensor_freed_with_the_closure():
    def make():
        big = torch.randn(1024)

        def add(x):
            return x + big

        return add, weakref.ref(big)

    fn, ref = make()
    jf = pyjit.jit(fn, backend="eager")
    jf(torch.randn(1024))
    del fn, jf
    _collect()
    assert ref() is None, "a closed-over tensor outlives its function"


def test_reset_releases_compiled_graph_references():
    m = nn.Linear(8, 8)
    jm = pyjit.jit(m, backend="eager")
    jm(torch.randn(2, 8))
    ref = weakref.ref(m.weight)
    del jm, m
    pyjit.reset()
    _collect()
    assert ref() is None
