"""``fullgraph=True`` on constructs the frontend cannot put into a graph (data-dependent values,
data-dependent output shapes, leaving torch) raises
``pyjit.GraphBreakError`` naming the construct and the user's file:line; without it the frame
still runs and gives eager's result, with side effects (prints) happening exactly once.

Each unsupported line carries a ``# BREAK:<tag>`` marker; the tests find the line number from
the marker, so editing this file cannot make them stale.
"""
from __future__ import annotations

import os

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same

_THIS_FILE = os.path.basename(__file__)


def _line_of(tag: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# BREAK:{tag}"):
                return i
    raise LookupError(tag)


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    yield
    pyjit.reset()


def uses_item(x):
    y = x.sum() * 2
    s = y.item()  # BREAK:item
    return x + s


def uses_if_tensor(x):
    y = (x > 0).any()
    if y:  # BREAK:if
        return x + 1
    return x - 1


def uses_print(x):
    y = x * 2
    print("value:", y)  # BREAK:print
    return y + 1


def uses_tolist(x):
    y = x.abs() + 1
    vals = y.tolist()  # BREAK:tolist
    return y * len(vals), vals


def _helper_with_item(v):
    return v.max().item()  # BREAK:helper


def calls_helper_with_item(x):
    return x * _helper_with_item(x)


def uses_bool_call(x):
    if bool(x.sum() > 0):  # BREAK:bool
        return x * 3
    return x


def uses_boolean_mask(x):
    return x[x > 0] * 2  # BREAK:mask


def uses_nonzero(x):
    return torch.nonzero(x > 0).float().sum() + x  # BREAK:nonzero


def uses_numpy(x):
    return torch.from_numpy(x.numpy() * 2)  # BREAK:numpy


_DYNAMIC_SHAPE_WORDS = ("dynamic", "data-dependent", "data dependent", "shape", "nonzero", "mask", "index")

# (function, marker tag, words of which at least one must appear in the message)
CONSTRUCTS = [
    (uses_item, "item", ("item",)),
    (uses_if_tensor, "if", ("bool", "branch", "jump", "if", "data-dependent", "data dependent")),
    (uses_print, "print", ("print",)),
    (uses_tolist, "tolist", ("tolist",)),
    (calls_helper_with_item, "helper", ("item",)),
    (uses_bool_call, "bool", ("bool", "branch", "jump", "data-dependent", "data dependent")),
    (uses_boolean_mask, "mask", _DYNAMIC_SHAPE_WORDS),
    (uses_nonzero, "nonzero", _DYNAMIC_SHAPE_WORDS),
    (uses_numpy, "numpy", ("numpy",)),
]
_IDS = [c[1] for c in CONSTRUCTS]


@pytest.mark.parametrize("fn,tag,words", CONSTRUCTS, ids=_IDS)
def test_fullgraph_raises_with_location(fn, tag, words):
    jitted = pyjit.jit(fn, backend=CountingBackend(), fullgraph=True)
    with pytest.raises(pyjit.GraphBreakError) as info:
        jitted(torch.randn(4, 8))
    message = str(info.value)
    where = f"{_THIS_FILE}:{_line_of(tag)}"
    assert where in message, f"message does not name {where}:\n{message}"
    assert any(w in message.lower() for w in words), f"message does not name the construct ({words}):\n{message}"


def test_graph_break_error_is_a_pyjit_error():
    assert issubclass(pyjit.GraphBreakError, pyjit.PyjitError)


@pytest.mark.parametrize("fn,tag,words", CONSTRUCTS, ids=_IDS)
def test_without_fullgraph_runs_correctly(fn, tag, words, capsys):
    jitted = pyjit.jit(fn, backend=CountingBackend())
    for seed in (0, 1, 2):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 8, generator=g)
        if seed == 2:
            x = -x.abs()  # the other side of data-dependent branches
        expected = fn(x.clone())
        eager_out = capsys.readouterr().out
        actual = jitted(x.clone())
        jit_out = capsys.readouterr().out
        assert_same(expected, actual)
        assert jit_out == eager_out, "side effects (print) must happen exactly once per call"


def test_fullgraph_on_supported_function_does_not_raise():
    def f(x):
        return (x * 2).sum(0)

    backend = CountingBackend()
    jitted = pyjit.jit(f, backend=backend, fullgraph=True)
    x = torch.randn(4, 8)
    assert_same(f(x), jitted(x))
    assert backend.frame_count == 1


def test_fullgraph_error_does_not_poison_other_functions():
    jitted_bad = pyjit.jit(uses_item, backend=CountingBackend(), fullgraph=True)
    with pytest.raises(pyjit.GraphBreakError):
        jitted_bad(torch.randn(3))
    backend = CountingBackend()

    def good(x):
        return x - 1

    jitted_good = pyjit.jit(good, backend=backend, fullgraph=True)
    x = torch.randn(3)
    assert_same(good(x), jitted_good(x))
    assert backend.frame_count == 1
    # uses_item still raises on the next call (the failure is not cached as "run eagerly").
    with pytest.raises(pyjit.GraphBreakError):
        jitted_bad(torch.randn(3))
