"""User subclasses of ``dict``/``OrderedDict`` whose inherited C methods are called on them
(``super().__getitem__``, ``super().__setitem__``, ``dict.get(obj, k)``) while the class defines
its own Python item methods (pyjit/variables/dict_subclass.py): transformers' ``ClassInstantier``
(``ACT2FN[name]`` instantiates the class it stores) and ``ModelOutput``. Checked: eager-equal
results and no graph break, the guards read the storage (not the Python ``__getitem__``) and
catch a changed table, a missing key raises KeyError as in eager, and mutations made through
several calls are all replayed on the caller's object."""
from __future__ import annotations

import collections

import pytest
import torch

import pyjit

from .helpers import CompileCounter, check_world_change, same

X = torch.randn(8)


class Instantier(collections.OrderedDict):
    """transformers.activations.ClassInstantier, verbatim."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACTS = Instantier({"relu": torch.nn.ReLU, "hardtanh": (torch.nn.Hardtanh, {"min_val": -0.5, "max_val": 0.5})})
GETITEM_CALLS: list = []


class Counting(dict):
    """A Python __getitem__ with an effect: the guards must never run it."""

    def __getitem__(self, key):
        GETITEM_CALLS.append(key)
        return super().__getitem__(key) * 10


def act(x, name):
    return ACTS[name](x)


@pytest.mark.parametrize("name", ["relu", "hardtanh"])
def test_class_instantier_in_one_graph(name):
    counter = CompileCounter()
    expected = act(X, name)
    same(expected, pyjit.jit(act, backend=counter, fullgraph=True)(X, name), name)
    assert counter.graphs == 1
    assert pyjit.explain(act)(X, name).break_count == 0


def test_transformers_act2fn_has_no_break():
    from transformers.activations import ACT2FN

    def f(x):
        return ACT2FN["gelu"](x) + ACT2FN["relu"](x)

    same(f(X), pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X), "ACT2FN")


def test_changed_storage_is_guarded():
    def to_b():
        dict.__setitem__(ACTS, "relu", torch.nn.Sigmoid)  # same key, other class: same keys guard

    def to_a():
        dict.__setitem__(ACTS, "relu", torch.nn.ReLU)

    check_world_change(act, (X, "relu"), to_b, to_a)


def test_guards_do_not_run_python_getitem():
    d = Counting(a=2)

    def f(x, d):
        return x * dict.__getitem__(d, "a") + d["a"]

    expected = f(X, d)
    GETITEM_CALLS.clear()
    jf = pyjit.jit(f, backend=CompileCounter(), fullgraph=True)
    for _ in range(3):
        same(expected, jf(X, d), "result")
    assert GETITEM_CALLS == ["a"] * 3  # the program's own d["a"], once per call: none from guards
    dict.__setitem__(d, "a", 3)
    same(f(X, d), jf(X, d), "after the storage changed")


def test_missing_key_raises_key_error_as_eager():
    def f(x):
        return ACTS["nope"](x)

    with pytest.raises(KeyError) as eager:
        f(X)
    with pytest.raises(KeyError) as jitted:
        pyjit.jit(f, backend=CompileCounter())(X)
    assert eager.value.args == jitted.value.args


class Output(collections.OrderedDict):
    """The item half of transformers' ModelOutput: item and attribute stores kept in sync."""

    def __getitem__(self, k):
        return dict(self.items())[k]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)


def test_super_setitem_on_an_outside_object_is_replayed():
    def f(x, out):
        out["a"] = x + 1
        out["b"] = x * 2
        return out["a"] + out.b

    out_e, out_j = Output(), Output()
    expected = f(X, out_e)
    counter = CompileCounter()
    same(expected, pyjit.jit(f, backend=counter, fullgraph=True)(X, out_j), "result")
    assert list(out_j.keys()) == ["a", "b"] and counter.graphs == 1
    same(out_e["a"], out_j["a"], "item a")
    same(out_e["b"], out_j.b, "attribute b")


@pytest.mark.parametrize("base", [dict, collections.OrderedDict])
def test_mutations_through_several_calls_are_all_kept(base):
    cls = type("Sub", (base,), {})

    def f(x, d):
        d.update(b=2)
        d.setdefault("c", 3)
        d["e"] = 5
        return x + d["b"] + d.get("c") + d["e"]

    d_e, d_j = cls(a=1), cls(a=1)
    expected = f(X, d_e)
    same(expected, pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X, d_j), "result")
    assert list(d_j.items()) == list(d_e.items())


class Shifting(collections.OrderedDict):
    def __getitem__(self, k):
        return super().__getitem__(k) * 10

    def __setitem__(self, k, v):
        super().__setitem__(k, v + 1)


def test_ordered_dict_methods_that_call_python_item_methods_are_not_modelled():
    # OrderedDict.update/setdefault on a subclass instance call its __setitem__/__getitem__:
    # modelling them on the storage would skip the class's code, so they break.
    def f(x, d):
        d.update(b=2)
        d.setdefault("c", 3)
        return x + d["b"] + d["c"]

    d_e, d_j = Shifting(a=1), Shifting(a=1)
    expected = f(X, d_e)
    same(expected, pyjit.jit(f, backend=CompileCounter())(X, d_j), "result")
    assert list(d_j.items()) == list(d_e.items())
    assert pyjit.explain(f)(X, Shifting(a=1)).break_count >= 1


def test_reordered_ordered_dict_keeps_eager_order():
    # move_to_end reorders OrderedDict's own key list, not the storage: iterating must follow eager
    def f(x, d):
        return [k for k in super(Instantier, d).keys()], x + 1

    d = Instantier({"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh})
    d.move_to_end("relu")
    expected = f(X, d)
    got = pyjit.jit(f, backend=CompileCounter())(X, d)
    assert got[0] == expected[0] == ["tanh", "relu"]
    same(expected[1], got[1], "result")
