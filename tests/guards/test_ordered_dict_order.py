"""DICT_KEYS guards on OrderedDicts follow iteration order, not only the storage order.

An OrderedDict iterates its own linked list: ``move_to_end`` (either end) reorders that list
without touching the underlying dict's storage, which is what a plain dict's keys check walks.
A trace unrolls the iteration, so the guard must pin the iteration order (and the storage order,
which ``dict.keys(od)`` reads): every reordering below must recompile (or fall back) and give
eager's result. Plain dicts, other dict subclasses and ``nn.Module._modules`` re-registration
are pinned too. Recompiles are counted through the backend and read from the ``recompiles`` log.
"""
from __future__ import annotations

import collections
import json
import logging

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent
import torch.nn as nn

import pyjit
from pyjit import _C
from pyjit.guards import serialize
from pyjit.guards.guards import GuardKind, GuardSet, compile_c_tree, compile_python, dict_keys_expected
from pyjit.guards.source import FrameValues, LocalSource
from pyjit.guards.tree import evaluate
from tests.variables.helpers import same

X = torch.arange(1.0, 4.0)


class CountingBackend:
    def __init__(self) -> None:
        self.graphs = 0
        self.runs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1

        def run(*args):
            self.runs += 1
            return gm.forward(*args)

        return run


@pytest.fixture(autouse=True)
def _fresh_pyjit(caplog):
    pyjit.reset()
    caplog.set_level(logging.INFO, logger="pyjit.recompiles")
    with pyjit.config.patch(raise_on_internal_error=True, warm_start=False):
        yield
    pyjit.reset()


def _recompile_log(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "pyjit.recompiles")


# -- reorderings: each changes the iteration order; some leave the storage order alone --------

def _move_last(d):
    d.move_to_end(next(iter(d)))


def _move_first(d):
    d.move_to_end(list(d)[-1], last=False)


def _popitem_first_reinsert(d):
    k, v = d.popitem(last=False)
    d[k] = v


def _pop_reinsert_then_move_back(d):
    # storage changes (k goes to the end), iteration ends where it started
    k = next(iter(d))
    v = d.pop(k)
    d[k] = v
    d.move_to_end(k, last=False)


REORDERINGS = [_move_last, _move_first, _popitem_first_reinsert]


def _concat_tensors(x, d):
    return torch.cat([x * v for v in d.values()])


def _apply_in_order(x, d):
    for fn in d.values():
        x = fn(x)
    return x


def _fold_constants(x, d):
    out = x
    for k, v in d.items():
        out = out * 10 + v
    return out, [k for k in d]


VALUES = {
    "tensors": (_concat_tensors, lambda: collections.OrderedDict(
        a=torch.tensor([1.0]), b=torch.tensor([2.0]), c=torch.tensor([3.0]))),
    "callables": (_apply_in_order, lambda: collections.OrderedDict(
        add=lambda t: t + 1, mul=lambda t: t * 3, sub=lambda t: t - 0.5)),
    "constants": (_fold_constants, lambda: collections.OrderedDict(a=1, b=2, c=3)),
}


@pytest.mark.parametrize("reorder", REORDERINGS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("values", list(VALUES))
def test_argument_ordered_dict_reordered_recompiles(values, reorder, caplog):
    fn, make = VALUES[values]
    d = make()
    backend = CountingBackend()
    jf = pyjit.jit(fn, backend=backend)
    same(fn(X, d), jf(X, d), "traced order")
    assert backend.graphs == 1
    reorder(d)
    expected = fn(X, d)
    same(expected, jf(X, d), f"after {reorder.__name__} (a stale entry?)")
    assert backend.graphs == 2, "the reordered dict did not recompile"
    assert "L['d']" in _recompile_log(caplog)
    same(expected, jf(X, d), "reordered, second call")
    assert backend.graphs == 2, "recompiled although nothing changed"


G_OD = collections.OrderedDict()


def _global_concat(x):
    return torch.cat([x * v for v in G_OD.values()])


def test_global_ordered_dict_move_to_end_both_ways(caplog):
    G_OD.clear()
    G_OD.update(a=torch.tensor([1.0]), b=torch.tensor([2.0]), c=torch.tensor([3.0]))
    backend = CountingBackend()
    jf = pyjit.jit(_global_concat, backend=backend)
    same(_global_concat(X), jf(X), "state A")
    G_OD.move_to_end("a")
    same(_global_concat(X), jf(X), "a moved to the end")
    assert backend.graphs == 2
    assert "G_OD" in _recompile_log(caplog)
    G_OD.move_to_end("a", last=False)  # back to the traced order: the first entry serves again
    same(_global_concat(X), jf(X), "back in state A")
    assert backend.graphs == 2


def test_storage_reorder_with_same_iteration_order_is_detected():
    # The keys guard of an OrderedDict checks the storage order too (code that reads the storage,
    # such as dict.keys(od), now breaks the graph, but the guard stays conservative): a change
    # there alone recompiles, and results stay eager's.
    def iterate(x, d):
        return [x * v for v in d.values()], list(d)

    d = collections.OrderedDict(a=1, b=2, c=3)
    backend = CountingBackend()
    jf = pyjit.jit(iterate, backend=backend)
    same(iterate(X, d), jf(X, d), "traced")
    _pop_reinsert_then_move_back(d)
    assert list(d) == ["a", "b", "c"] and list(dict.keys(d)) == ["b", "c", "a"]
    same(iterate(X, d), jf(X, d), "storage reordered")
    assert backend.graphs == 2, "a storage-only reordering reused the entry"


def test_ordered_dict_reordered_when_traced_hits_its_entry():
    # traced while iteration and storage order differ: the entry is used (not a miss per call)...
    d = collections.OrderedDict(a=1, b=2, c=3)
    d.move_to_end("a")
    backend = CountingBackend()
    jf = pyjit.jit(_fold_constants, backend=backend)
    for _ in range(3):
        same(_fold_constants(X, d), jf(X, d), "reordered when traced")
    assert (backend.graphs, backend.runs) == (1, 3)
    # ...and its guard still sees any further reordering
    d.move_to_end("b")
    same(_fold_constants(X, d), jf(X, d), "reordered again")
    assert backend.graphs == 2


class SubOD(collections.OrderedDict):
    pass


class PlainSub(dict):
    pass


def _iter_keys(x, d):
    return [k for k in d], x + 1


def _super_keys(x, d):
    return [k for k in super(SubOD, d).keys()], x + 1


@pytest.mark.parametrize("fn", [_iter_keys, _super_keys], ids=lambda f: f.__name__)
@pytest.mark.parametrize("reorder", REORDERINGS, ids=lambda f: f.__name__)
def test_ordered_dict_subclass_reordered_matches_eager(fn, reorder):
    d = SubOD(a=1, b=2, c=3)
    jf = pyjit.jit(fn, backend=CountingBackend())
    same(fn(X, d), jf(X, d), "traced order")
    reorder(d)
    same(fn(X, d), jf(X, d), f"after {reorder.__name__}")


def test_plain_dict_subclass_reinsert_recompiles():
    d = PlainSub(a=1, b=2, c=3)
    backend = CountingBackend()
    jf = pyjit.jit(_iter_keys, backend=backend)
    same(_iter_keys(X, d), jf(X, d), "traced order")
    d["a"] = d.pop("a")
    same(_iter_keys(X, d), jf(X, d), "a re-inserted")
    assert backend.graphs == 2


def _chain():
    lin = nn.Linear(1, 1)
    with torch.no_grad():
        lin.weight.fill_(-1.0)
        lin.bias.fill_(0.5)
    return collections.OrderedDict(lin=lin, relu=nn.ReLU(), tanh=nn.Tanh())


def test_sequential_modules_re_registration_recompiles(caplog):
    seq = nn.Sequential(_chain())
    x = torch.ones(2, 1)
    backend = CountingBackend()
    jf = pyjit.jit(seq, backend=backend)
    same(seq(x), jf(x), "traced order")
    m = seq._modules["lin"]
    del seq._modules["lin"]
    seq._modules["lin"] = m  # storage order of the plain dict changes
    same(seq(x), jf(x), "re-registered")
    assert backend.graphs == 2
    assert "_modules" in _recompile_log(caplog)


@pytest.mark.parametrize("container", ["ModuleDict", "ModuleList"])
@pytest.mark.parametrize("reorder", REORDERINGS, ids=lambda f: f.__name__)
def test_ordered_dict_modules_reordered_recompiles(container, reorder):
    if container == "ModuleDict":
        mods = nn.ModuleDict(_chain())
        mods._modules = collections.OrderedDict(mods._modules)  # e.g. an old pickle
        values = mods.values
    else:
        mods = nn.ModuleList(_chain().values())
        mods.append(nn.Identity())
        del mods[3]  # ModuleList.__delitem__ rebuilds _modules as an OrderedDict
        values = mods.__iter__
    assert type(mods._modules) is collections.OrderedDict

    def f(x):
        for m in values():
            x = m(x)
        return x

    x = torch.ones(2, 1)
    backend = CountingBackend()
    jf = pyjit.jit(f, backend=backend)
    same(f(x), jf(x), "traced order")
    reorder(mods._modules)
    expected = f(x)
    same(expected, jf(x), f"after {reorder.__name__}")
    assert backend.graphs == 2


# -- the guard itself: C tree, generated Python checker and reference evaluator agree ----------

def _holder(d):
    return None


def _checkers(keys, extra=None):
    gs = GuardSet()
    gs.add(GuardKind.DICT_KEYS, LocalSource("d", 0), tuple(keys), extra)
    tree = compile_c_tree(gs, _C)
    py = compile_python(gs, _holder.__code__, _holder)
    return gs, tree, py


def _verdicts(gs, tree, py, d):
    c = tree.check(_holder, (d,)) == -1
    ref = evaluate(tree, _holder, (d,)) == -1
    p = bool(py(d))
    reason = next(iter(gs)).failure_reason(FrameValues({"d": d}, {}, {})) is None
    assert c == ref == p == reason, (c, ref, p, reason)
    return c


@pytest.mark.parametrize("make", [dict, collections.OrderedDict, SubOD, PlainSub], ids=lambda t: t.__name__)
def test_guard_pins_iteration_and_storage_order(make):
    d = make(a=1, b=2, c=3)
    gs, tree, py = _checkers(*dict_keys_expected(d))
    assert _verdicts(gs, tree, py, d)
    assert not _verdicts(gs, tree, py, make(b=2, a=1, c=3))
    assert not _verdicts(gs, tree, py, make(a=1, b=2))
    assert not _verdicts(gs, tree, py, ["a", "b", "c"])  # not a dict (the type itself is TYPE_MATCH's)
    if isinstance(d, collections.OrderedDict):
        for reorder in (*REORDERINGS, _pop_reinsert_then_move_back):
            e = make(a=1, b=2, c=3)
            reorder(e)
            assert not _verdicts(gs, tree, py, e), reorder.__name__
        e = make(a=1, b=2, c=3)
        e.move_to_end("a")
        e.move_to_end("a", last=False)  # iteration and storage back in the traced order
        assert _verdicts(gs, tree, py, e)


def test_guard_of_ordered_dict_reordered_when_traced():
    d = collections.OrderedDict(a=1, b=2, c=3)
    d.move_to_end("a")
    keys, storage = dict_keys_expected(d)
    assert keys == ("b", "c", "a") and storage == ("a", "b", "c")
    gs, tree, py = _checkers(keys, storage)
    assert _verdicts(gs, tree, py, d)
    assert not _verdicts(gs, tree, py, collections.OrderedDict(b=2, c=3, a=1))  # same iteration, other storage
    assert not _verdicts(gs, tree, py, {"b": 2, "c": 3, "a": 1})  # not an OrderedDict
    e = collections.OrderedDict(a=1, b=2, c=3)
    e.move_to_end("b")
    assert not _verdicts(gs, tree, py, e)
    assert "dict.keys(L['d'])" in next(iter(gs)).describe()
    data = json.loads(json.dumps(serialize.dump_guards(gs)))
    loaded = next(iter(serialize.load_guards(data, None)))
    assert loaded.expected == keys and loaded.extra == storage


def test_plain_dict_needs_no_extra():
    assert dict_keys_expected({"a": 1, "b": 2}) == (("a", "b"), None)
    assert dict_keys_expected(collections.OrderedDict(a=1, b=2)) == (("a", "b"), None)


def test_failure_reason_names_the_order():
    d = collections.OrderedDict(a=1, b=2, c=3)
    gs, _, _ = _checkers(*dict_keys_expected(d))
    g = next(iter(gs))
    d.move_to_end("a")
    assert g.failure_reason(FrameValues({"d": d}, {}, {})) == "L['d'].keys(): expected ['a', 'b', 'c'], got ['b', 'c', 'a']"
    d.move_to_end("a", last=False)
    d["b"] = d.pop("b")
    d.move_to_end("c")
    assert list(d) == ["a", "b", "c"]
    assert "storage order" in g.failure_reason(FrameValues({"d": d}, {}, {}))
