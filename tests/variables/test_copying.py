"""``copy.deepcopy`` / ``copy.copy`` of plain Python objects inside traced code
(pyjit/variables/copying.py): transformers' ``PretrainedConfig.get_text_config`` deep-copies the
config in the forward. Each case compares with eager (the result, and the state of the original
afterwards), counts graphs and breaks, and covers the edges: mutating the copy leaves the
original alone, the copy escaping the frame, aliasing kept, custom ``__deepcopy__``/``__copy__``
and ``__setstate__`` traced, guards on what the copy was made from, and clean breaks for what is
out of scope."""
from __future__ import annotations

import copy

import pytest
import torch

import pyjit

from .helpers import CompileCounter, check_world_change, same

X = torch.randn(4)


class Inner:
    def __init__(self, n: int) -> None:
        self.n = n


class Config:
    def __init__(self) -> None:
        self.scale = 2.0
        self.names = ["a", "b"]
        self.table = {"k": [1, 2]}
        self.inner = Inner(3)
        self.kind = None


CFG = Config()


def _state(cfg: Config) -> tuple:
    return cfg.scale, list(cfg.names), {k: list(v) for k, v in cfg.table.items()}, cfg.inner.n, cfg.kind


def _fresh() -> None:
    CFG.scale, CFG.names, CFG.table, CFG.inner, CFG.kind = 2.0, ["a", "b"], {"k": [1, 2]}, Inner(3), None


@pytest.fixture(autouse=True)
def _reset_config():
    _fresh()
    yield
    _fresh()


def _one_graph_no_break(fn, *args):
    """eager == jitted (results and CFG's state after the call), one graph, no break."""
    expected = fn(*args)
    eager_state = _state(CFG)
    _fresh()
    counter = CompileCounter()
    got = pyjit.jit(fn, backend=counter, fullgraph=True)(*args)
    assert _state(CFG) == eager_state, "the call changed the original differently from eager"
    assert counter.graphs == 1
    _fresh()
    explained = pyjit.explain(fn)(*args)
    assert explained.break_count == 0, explained.graph_breaks
    _fresh()
    return expected, got


def test_deepcopy_of_an_object_mutating_the_copy_leaves_the_original():
    def f(x):
        c = copy.deepcopy(CFG)
        c.scale = 5.0
        c.names.append("c")
        c.table["k"].append(3)
        c.inner.n = 7
        return x * c.scale + len(c.names) + len(c.table["k"]) + c.inner.n + CFG.scale + len(CFG.names) + CFG.inner.n

    expected, got = _one_graph_no_break(f, X)
    same(expected, got, "result")


def test_deepcopy_escaping_the_frame_is_rebuilt():
    def f(x):
        c = copy.deepcopy(CFG)
        c.names.append("z")
        c.extra = x.shape[0]
        return x + 1, c

    expected, got = _one_graph_no_break(f, X)
    same(expected[0], got[0], "tensor")
    c = got[1]
    assert type(c) is Config and type(c.inner) is Inner
    assert vars(expected[1]).keys() == vars(c).keys()
    assert (c.scale, c.names, c.table, c.inner.n, c.kind, c.extra) == (2.0, ["a", "b", "z"], {"k": [1, 2]}, 3, None, 4)
    assert c.names is not CFG.names and c.table is not CFG.table and c.inner is not CFG.inner
    assert c.table["k"] is not CFG.table["k"]
    assert CFG.names == ["a", "b"]


def test_shallow_copy_shares_the_attribute_values():
    def f(x):
        c = copy.copy(CFG)
        c.scale = 3.0          # the copy's own attribute
        c.names.append("s")    # the original's list: eager changes the original too
        return x * c.scale * CFG.scale, c

    expected, got = _one_graph_no_break(f, X)
    same(expected[0], got[0], "tensor")
    c = got[1]
    assert type(c) is Config and c.scale == 3.0 and CFG.scale == 2.0
    _fresh()
    c = pyjit.jit(f, backend=CompileCounter())(X)[1]
    assert c.names is CFG.names and c.inner is CFG.inner and CFG.names == ["a", "b", "s"]


def test_deepcopy_keeps_aliasing_and_copies_objects_built_in_the_trace():
    def f(x):
        shared = [1]
        pair = copy.deepcopy([shared, shared])
        pair[0].append(2)  # one list in the copy: both entries see it
        obj = Inner(len(pair[1]))
        clone = copy.deepcopy(obj)
        clone.n += 10
        return x * (len(pair[1]) + len(shared) + obj.n + clone.n), clone

    expected, got = _one_graph_no_break(f, X)
    same(expected[0], got[0], "tensor")
    assert type(got[1]) is Inner and got[1].n == expected[1].n == 12


def test_deepcopy_reads_are_guarded():
    def f(x):
        c = copy.deepcopy(CFG)
        return x * c.scale + len(c.names)

    check_world_change(f, (X,), lambda: setattr(CFG, "scale", 4.0), lambda: setattr(CFG, "scale", 2.0))
    check_world_change(f, (X,), lambda: CFG.names.append("more"), lambda: CFG.names.__setitem__(slice(None), ["a", "b"]))
    check_world_change(f, (X,), lambda: setattr(CFG, "names", ["x", "y", "z"]), lambda: setattr(CFG, "names", ["a", "b"]))


def test_deepcopy_after_a_store_in_the_trace_copies_the_new_value():
    def f(x):
        CFG.scale = 6.0
        c = copy.deepcopy(CFG)
        CFG.scale = 1.0
        return x * c.scale, c.scale

    expected, got = _one_graph_no_break(f, X)
    same(expected, got, "result")


# -- custom protocols --------------------------------------------------------------------------


class WithDeepcopy:
    def __init__(self, scale: float, tags: list) -> None:
        self.scale = scale
        self.tags = tags

    def __deepcopy__(self, memo):
        # not what the default protocol would do: the copy must come from this function
        return WithDeepcopy(self.scale * 2, copy.deepcopy(self.tags, memo))


class WithCopy:
    def __init__(self) -> None:
        self.count = 1

    def __copy__(self):
        new = WithCopy()
        new.count = self.count + 100
        return new


class WithSetstate:
    def __init__(self) -> None:
        self.a = 1

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.restored = True


WD, WC, WS = WithDeepcopy(1.5, ["t"]), WithCopy(), WithSetstate()


def test_custom_deepcopy_and_copy_are_traced():
    def f(x):
        d = copy.deepcopy(WD)
        d.tags.append("u")
        c = copy.copy(WC)
        s = copy.deepcopy(WS)
        return x * d.scale + len(d.tags) + len(WD.tags) + c.count + s.a + s.restored, d

    expected = f(X)
    counter = CompileCounter()
    got = pyjit.jit(f, backend=counter, fullgraph=True)(X)
    same(expected[0], got[0], "tensor")
    assert counter.graphs == 1
    assert type(got[1]) is WithDeepcopy and got[1].scale == 3.0 and got[1].tags == ["t", "u"] and WD.tags == ["t"]
    assert pyjit.explain(f)(X).break_count == 0


class MemoUser:
    def __deepcopy__(self, memo):
        return MemoUser() if len(memo) >= 0 else None


class Slotted:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = 1


@pytest.mark.parametrize("value, reason", [
    (MemoUser(), "memo of copy.deepcopy"),
    (Slotted(), "__slots__"),
    (torch.nn.Linear(2, 2), "copy.deepcopy\\(\\) of a module"),
])
def test_out_of_scope_copies_break_with_a_reason(value, reason):
    def f(x):
        return x + 1, copy.deepcopy(value)

    with pytest.raises(pyjit.GraphBreakError, match=reason):
        pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)
    expected = f(X)
    got = pyjit.jit(f, backend=CompileCounter())(X)  # the break runs the copy natively
    same(expected[0], got[0], "tensor")
    assert type(got[1]) is type(value)


def test_deepcopy_of_a_tensor_breaks_with_a_reason():
    with pytest.raises(pyjit.GraphBreakError, match="of a tensor"):
        pyjit.jit(lambda x: copy.deepcopy(x) + 1, backend=CompileCounter(), fullgraph=True)(X)


def test_copy_live_across_a_graph_break():
    def f(x):
        c = copy.deepcopy(CFG)
        c.names.append("live")
        pyjit.graph_break()
        c.scale += 1
        return x * c.scale + len(c.names), c.names

    expected = f(X)
    _fresh()
    explained = pyjit.explain(f)(X)
    assert explained.break_count == 1 and explained.graph_breaks[0].kind == "user_break"
    _fresh()
    got = pyjit.jit(f, backend=CompileCounter())(X)
    same(expected, got, "result")
    assert CFG.names == ["a", "b"]
