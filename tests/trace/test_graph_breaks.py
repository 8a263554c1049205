"""Unsupported constructs: GraphBreakError with kind and user file:line under fullgraph=True,
an eager (correct) run otherwise; the break-kind registry is documented."""
from __future__ import annotations

import ast
import copy
import logging
import os
import re

import pytest
import torch

import pyjit
from pyjit.errors import GraphBreakError, Unsupported
from pyjit.trace.graph_breaks import BREAK_KINDS, BreakKind, unsupported

from .conftest import same

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def uses_item(x):
    return x * x.sum().item()  # BREAK-item


def branches_on_tensor(x):
    if x.sum() > 0:  # BREAK-if
        return x + 1
    return x - 1


def prints(x):
    y = x * 2
    print("y is", y.shape)  # BREAK-print
    return y


_STORE = []


def mutates_outer_list(x):
    _STORE.append(x)  # replayed after the graph
    return x * 2


def calls_helper_that_breaks(x):
    return uses_item(x) + 1  # BREAK-caller


def calls_c_function(x):
    return x * (os.getpid() > 0)  # BREAK-c-function


def deep_copies_a_tensor(x):
    return copy.deepcopy(x) + 1  # BREAK-copy


def reads_id_of_a_tensor(x):
    return x + id(x) % 2  # BREAK-id


CASES = [
    (uses_item, "data_dependent", "BREAK-item"),
    (calls_c_function, "c_function", "BREAK-c-function"),
    (deep_copies_a_tensor, "copy_unsupported", "BREAK-copy"),
    (reads_id_of_a_tensor, "introspection", "BREAK-id"),
    (branches_on_tensor, "data_dependent", "BREAK-if"),
    (prints, "print", "BREAK-print"),
    (calls_helper_that_breaks, "data_dependent", "BREAK-item"),
]


def test_outer_list_append_is_replayed_not_a_break(rec):
    # Side effects on objects from outside the frame are recorded and replayed after the graph.
    _STORE.clear()
    x = torch.randn(3)
    same(mutates_outer_list(x), pyjit.jit(mutates_outer_list, backend=rec, fullgraph=True)(x))
    assert len(_STORE) == 2 and all(t is x for t in _STORE) and len(rec.graphs) == 1


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line and "CASES" not in line and '"BREAK' not in line:
                return i
    raise AssertionError(marker)


@pytest.mark.parametrize("fn,kind,marker", CASES, ids=[c[0].__name__ for c in CASES])
def test_fullgraph_raises_with_location(fn, kind, marker, rec):
    with pytest.raises(GraphBreakError) as info:
        pyjit.jit(fn, backend=rec, fullgraph=True)(torch.randn(3))
    gb = info.value.graph_break
    assert gb.kind == kind
    assert gb.location is not None and gb.location.filename == __file__
    assert gb.location.lineno == _line_of(marker)
    assert f"{__file__}:{gb.location.lineno}" in str(info.value)
    assert gb.hint
    if fn is calls_helper_that_breaks:
        assert gb.inline_chain and gb.inline_chain[0].lineno == _line_of("BREAK-caller")


@pytest.mark.parametrize("fn,kind,marker", CASES, ids=[c[0].__name__ for c in CASES])
def test_without_fullgraph_compiles_around_the_break(fn, kind, marker, rec, caplog):
    x = torch.randn(3)
    _STORE.clear()
    expected = fn(x)
    _STORE.clear()
    with caplog.at_level(logging.INFO, logger="pyjit.graph_breaks"):
        jf = pyjit.jit(fn, backend=rec)
        same(expected, jf(x))
        compiled = len(rec.graphs)
        same(expected, jf(x))  # second call: cache hits all the way (no new graph)
    assert len(rec.graphs) == compiled
    # The tensor work around the break is compiled; the break is logged with its kind.
    assert compiled >= 1
    assert any(f"[{kind}]" in r.getMessage() for r in caplog.records)


def test_every_break_kind_is_documented():
    with open(os.path.join(_ROOT, "docs", "graph_breaks.md")) as f:
        doc = f.read()
    documented = set(re.findall(r"^### `(\w+)`", doc, re.M))
    assert documented == set(BREAK_KINDS)


def test_break_kinds_are_an_enum_of_strings():
    assert set(BREAK_KINDS) == set(BreakKind)
    assert BreakKind.EXCEPTION == "exception" and f"[{BreakKind.PRINT}]" == "[print]"
    with pytest.raises(Unsupported) as e:
        unsupported("print", "detail")
    assert e.value.graph_break.kind is BreakKind.PRINT
    with pytest.raises(ValueError, match="unknown graph-break kind"):
        unsupported("no_such_kind")


def test_every_literal_break_kind_in_pyjit_is_registered():
    # Call sites pass kinds as string literals; a typo would only fail when that break happens.
    unknown = []
    for root, _, files in os.walk(os.path.join(_ROOT, "pyjit")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                        == "unsupported" and node.args and isinstance(node.args[0], ast.Constant)
                        and node.args[0].value not in set(BreakKind)):
                    unknown.append(f"{os.path.relpath(path, _ROOT)}:{node.lineno}: {node.args[0].value!r}")
    assert not unknown
