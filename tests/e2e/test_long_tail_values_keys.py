"""The long tail of Python values, part 2: ``collections`` (``defaultdict``, ``OrderedDict``,
``Counter``), dicts and sets keyed by tensors, parameters, modules and objects, ``id()``, sets of
torch functions, function annotations, numpy scalars. How each case is checked:
tests/e2e/long_tail_values_support.py (eager-equal results and arguments over three calls, torch.compile's
graph count, no graph break where torch.compile has none).
"""
from __future__ import annotations

import collections
import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit

from .long_tail_values_support import check, rand
from .support import CountingBackend, assert_same

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


# -- 3. collections ----------------------------------------------------------------------------

def test_defaultdict_built_in_the_trace():
    def of_list(x):
        d = collections.defaultdict(list)
        d["a"].append(x)
        d["a"].append(x + 1)
        d["b"].append(x * 2)
        return sum(d["a"]) + d["b"][0], len(d), d

    def of_int(x):
        d = collections.defaultdict(int)
        for k in ["a", "b", "a"]:
            d[k] += 1
        return x * d["a"] + d["b"], dict(d), d.get("zz"), "zz" in d

    def of_lambda(x):
        d = collections.defaultdict(lambda: x * 0)
        d["a"] = d["a"] + x
        d["b"] += 1
        return d["a"] + d["b"], sorted(d.keys())

    def compare(expected, actual, *_):
        assert type(actual[2]) is collections.defaultdict and actual[2].default_factory is list
        assert_same(expected[:2], actual[:2], exact=False)
        assert_same(dict(expected[2]), dict(actual[2]), exact=False)

    check(of_list, compare=compare)
    check(of_int)
    check(of_lambda)


def test_defaultdict_passed_in_gets_the_missing_keys():
    def fn(x, d):
        d["b"].append(x)
        return x + d["a"][0] + len(d)

    def fn_int(x, d):
        d["b"] += 2
        return x * d["a"] + d["b"] + d.get("zz", 0), "zz" in d

    def compare(expected, actual, eager_args, jit_args):
        assert_same(expected, actual, exact=False)
        assert type(jit_args[1]) is collections.defaultdict
        assert_same(dict(eager_args[1]), dict(jit_args[1]), exact=False)

    check(fn, lambda i: (rand(i, 4), collections.defaultdict(list, {"a": [rand(i + 1, 4)]})), compare=compare)
    check(fn_int, lambda i: (rand(i, 4), collections.defaultdict(int, {"a": 2})), compare=compare)


def test_ordered_dict_and_counter_basics():
    def ordered(x):
        d = collections.OrderedDict()
        d["b"] = x
        d["a"] = x + 1
        d["c"] = x * 2
        d.move_to_end("b")
        d.move_to_end("c", last=False)
        return list(d.values())[0], list(d.keys()), d

    def ordered_in(x, d):
        d.move_to_end("a")
        return x + d["a"], list(d)

    def counter(x):
        c = collections.Counter(["a", "b", "a"])
        c["b"] += 2
        return x * c["a"] + c["z"] + c["b"], c

    check(ordered)
    check(ordered_in, lambda i: (rand(i, 4), collections.OrderedDict(a=1, b=2)))
    check(counter)


# -- 4. dicts keyed by tensors, parameters, modules --------------------------------------------

class Indexed(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 4)
        self.l2 = nn.Linear(4, 4)

    def forward(self, x):
        index = {p: i for i, p in enumerate(self.parameters())}
        scales = {self.l1: 2.0, self.l2: 3.0}
        return x * index[self.l2.weight] + self.l1(x) * scales[self.l1], len(index)


def test_dicts_keyed_by_parameters_and_modules():
    torch.manual_seed(0)
    m = Indexed()
    check(lambda x: m(x))


def test_dict_keyed_by_tensors_escapes_with_its_keys():
    def fn(x):
        y = x * 2
        d = {x: "a", y: "b"}
        d[x + 1] = "c"
        return d, y, x in d, y in {x}

    def compare(expected, actual, eager_args, jit_args):
        d, y, has_x, y_in_set = actual
        keys = list(d)
        assert keys[0] is jit_args[0] and keys[1] is y, "keys must be the very tensors"
        assert list(d.values()) == list(expected[0].values())
        assert_same(list(expected[0]), keys, exact=False)
        assert (has_x, y_in_set) == (expected[2], expected[3])

    check(fn, compare=compare)


def test_mutating_a_dict_passed_in_with_a_tensor_key():
    def fn(x, d):
        d[x] = x + 1
        return len(d)

    def compare(expected, actual, eager_args, jit_args):
        assert expected == actual
        assert list(jit_args[1])[1] is jit_args[0]
        assert_same(list(eager_args[1].values()), list(jit_args[1].values()), exact=False)

    check(fn, lambda i: (rand(i, 4), {"a": 1}), compare=compare)


class Plain:
    def __init__(self, s=2):
        self.s = s


def test_objects_as_keys_and_their_id():
    plain = Plain()

    def passed(x, o):
        d = {id(o): 3}
        return x * d[id(o)] * o.s, {o: 1}[o]

    def built(x):
        a, b = Plain(), Plain(3)
        d = {a: x, b: x + 1}
        return d[b] * b.s + d[a]

    check(passed, lambda i: (rand(i, 4), plain))
    check(built)


def test_id_of_a_guarded_object_is_a_constant_and_follows_a_new_object():
    def fn(x, o):
        return x * o.s, id(o)

    jf = pyjit.jit(fn, backend=CountingBackend())
    a, b = Plain(), Plain()
    for o in (a, b, a):
        assert jf(rand(0, 4), o)[1] == id(o)


class IdKeyed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        scales = {id(self): 2, id(self.lin): 3}
        return self.lin(x) * scales[id(self)] + scales[id(self.lin)]


def test_id_of_modules_as_dict_keys():
    torch.manual_seed(0)
    m = IdKeyed()
    check(lambda x: m(x))


# -- 5. sets of functions and modules, annotations, numpy scalars ------------------------------

def test_membership_of_torch_functions_and_modules():
    lin = nn.Linear(4, 4)

    def fn(x):
        out = x
        for f in (torch.relu, F.gelu, torch.tanh):
            if f in {torch.relu, F.gelu}:
                out = out + f(x)
        if torch.sigmoid in frozenset([torch.relu, torch.sigmoid]):
            out = out * 2
        mods = {lin}
        return out + (lin(x) if lin in mods else x), len(mods)

    check(fn)


def annotated(a: int, b: torch.Tensor) -> torch.Tensor:
    return b * a


def test_function_annotations_and_signature():
    def fn(x):
        ann = annotated.__annotations__
        if ann["b"] is torch.Tensor:
            x = x + 1
        params = inspect.signature(annotated).parameters
        return x * len(params), list(params)

    check(fn)


def test_numpy_scalars_as_constants():
    np = pytest.importorskip("numpy")

    def fn(x):
        return x * np.float32(2.0) + np.int64(3), np.float32(1.5) * x, x > np.float64(0.0)

    def passed(x, s):
        return x * s

    check(fn)
    check(passed, lambda i: (rand(i, 4), np.float32(1.5 + i)), peer=False)
    check(passed, lambda i: (rand(i, 4).to(torch.float16), np.float64(2.0)), peer=False)


# -- dicts keyed by tensors, passed in or held by a module ----------------------------------------

_KEY_A, _KEY_B = torch.randn(4), torch.randn(4)


def test_dict_passed_in_keyed_by_tensors_is_read_by_position():
    def fn(x, d):
        out = x
        for k, v in d.items():
            if isinstance(k, torch.Tensor):
                out = out + k * v
        return out + (d[_KEY_A] if _KEY_A in d else 0) + d["bias"]

    def args(i):
        d = {_KEY_A: 1.0 + i, _KEY_B: 2.0, "bias": 0.5}
        return rand(i, 4), d if i != 1 else {_KEY_B: 3.0, "bias": 0.5}

    backend = check(fn, args, peer=False)
    assert backend.frame_count <= 3  # a different key set recompiles; changing values go symbolic


class _PerParameterScales(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = {p: 0.5 + i for i, p in enumerate(self.lin.parameters())}
        self.seen = {p: 0 for p in self.lin.parameters()}

    def forward(self, x):
        for p in self.lin.parameters():
            self.seen[p] += 1  # a counter per parameter, updated in place
        penalty = sum(p.square().sum() * s for p, s in self.scale.items())
        return self.lin(x) * self.scale[self.lin.weight] + penalty


def test_module_dicts_keyed_by_its_parameters():
    torch.manual_seed(0)
    eager = _PerParameterScales()
    jitted = _PerParameterScales()
    jitted.load_state_dict(eager.state_dict())
    jitted.scale = {p: eager.scale[q] for p, q in zip(jitted.lin.parameters(), eager.lin.parameters())}
    backend = CountingBackend()
    jm = pyjit.jit(jitted, backend=backend)
    for i in range(3):
        x = rand(i, 4)
        assert_same(eager(x), jm(x), f"call {i}", exact=False)
    assert list(jitted.seen.values()) == list(eager.seen.values()) == [3, 3]
    assert all(k is p for k, p in zip(jitted.seen, jitted.lin.parameters()))
    assert backend.frame_count <= 2  # the counters change: one recompile, then symbolic
