"""``dict``'s own methods called unbound (``dict.keys(d)``, ``dict.items(d)``...) walk the dict's
storage. For an OrderedDict reordered by ``move_to_end`` that is not its iteration order, which
is all the tracer models: such calls break the graph (eager-equal results); on plain dicts and
dict subclasses they keep compiling."""
from __future__ import annotations

import collections

import pytest
import torch

import pyjit

from .helpers import CompileCounter, same


def _fn(x: torch.Tensor, d: dict) -> tuple:
    return [x * v for v in dict.values(d)], list(dict.keys(d)), [k for k, _ in dict.items(d)], list(d.keys())


@pytest.mark.parametrize("method", ["keys", "values", "items", "copy", "__iter__"])
def test_unbound_dict_methods_on_a_reordered_ordered_dict_match_eager(method: str) -> None:
    od = collections.OrderedDict(a=1.0, b=2.0, c=3.0)
    od.move_to_end("a")
    assert list(dict.keys(od)) != list(od)  # storage order differs from iteration order

    def fn(x: torch.Tensor, d: dict) -> object:
        out = getattr(dict, method)(d)
        return x + 1, list(out) if method != "copy" else list(out.items())

    x = torch.ones(3)
    same(fn(x, od), pyjit.jit(fn, backend=CompileCounter())(x, od), f"dict.{method}")


def test_values_keys_items_together() -> None:
    od = collections.OrderedDict(a=1.0, b=2.0, c=3.0)
    od.move_to_end("a", last=False)
    od.move_to_end("b")
    x = torch.ones(2)
    same(_fn(x, od), pyjit.jit(_fn, backend=CompileCounter())(x, od), "ordered dict")


def test_plain_dicts_and_dict_subclasses_still_compile_in_one_graph() -> None:
    class Sub(dict):
        pass

    x = torch.ones(2)
    for d in ({"a": 1.0, "b": 2.0}, Sub(a=1.0, b=2.0)):
        counter = CompileCounter()
        same(_fn(x, d), pyjit.jit(_fn, backend=counter, fullgraph=True)(x, d), type(d).__name__)
        assert counter.graphs == 1
