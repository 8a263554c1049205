"""Guard soundness: after the world a compiled function read changes, the next call must give
eager's answer (by recompiling, by having read the value at run time, or by running eagerly).

Each scenario compiles under state A, changes to state B, checks, then goes back to A and
checks again. Only correctness is asserted (how many graphs it takes is the frontend's choice;
``test_recompile.py`` pins the counts the issue specifies). A silent wrong answer here means a
missing guard.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _check_transitions(fn: Callable[..., Any], args: tuple[Any, ...], to_b: Callable[[], None],
                       to_a: Callable[[], None]) -> None:
    jf = pyjit.jit(fn, backend=CountingBackend())
    try:
        assert_same(fn(*args), jf(*args), "state A")
        assert_same(fn(*args), jf(*args), "state A, again")
        to_b()
        assert_same(fn(*args), jf(*args), "state B")
        assert_same(fn(*args), jf(*args), "state B, again")
        to_a()
        assert_same(fn(*args), jf(*args), "back to state A")
    finally:
        to_a()


X = torch.randn(4, 8)

# ---- module-level state read by the scenarios -------------------------------------------------
ACT = torch.relu
CFG = {"scale": 2.0, "shift": 1}
FACTORS = [1.0, 2.0]
MASK = None
GLOBAL_LINEAR = nn.Linear(8, 8)
TABLE = torch.randn(8)


class Knobs:
    factor = 2.0


class Holder:
    def __init__(self):
        self.gain = 1.5


HOLDER = Holder()


@dataclasses.dataclass
class Settings:
    eps: float = 1e-5
    mode: str = "sum"


SETTINGS = Settings()


def _helper_with_default(x, k=2.0):
    return x * k


def _set(obj: Any, name: str, value: Any) -> Callable[[], None]:
    if isinstance(obj, dict):
        return lambda: obj.__setitem__(name, value)
    return lambda: setattr(obj, name, value)


_MOD = globals()


def _g(name: str, value: Any) -> Callable[[], None]:
    return lambda: _MOD.__setitem__(name, value)


def uses_act(x):
    return ACT(x) + 1


def uses_cfg_dict(x):
    return x * CFG["scale"] + CFG["shift"]


def uses_factors(x):
    for f in FACTORS:
        x = x * f
    return x


def uses_mask(x):
    return x if MASK is None else x * MASK


def uses_global_linear(x):
    return GLOBAL_LINEAR(x)


def uses_table(x):
    return x + TABLE


def uses_class_attr(x):
    return x * Knobs.factor


def uses_instance_attr(x):
    return x * HOLDER.gain


def uses_hasattr(x):
    if hasattr(HOLDER, "extra"):
        return x + HOLDER.extra
    return x - 1


def uses_dataclass(x):
    y = x.sum() if SETTINGS.mode == "sum" else x.mean()
    return y + SETTINGS.eps


def uses_helper_default(x):
    return _helper_with_default(x)


_OLD_TABLE = TABLE


def _del_extra() -> None:
    if hasattr(HOLDER, "extra"):
        del HOLDER.extra


SCENARIOS = {
    "global_function_rebound": (uses_act, _g("ACT", torch.sigmoid), _g("ACT", torch.relu)),
    "global_dict_value_mutated": (uses_cfg_dict, _set(CFG, "scale", 3.0), _set(CFG, "scale", 2.0)),
    "global_dict_int_value_mutated": (uses_cfg_dict, _set(CFG, "shift", 7), _set(CFG, "shift", 1)),
    "global_list_element_mutated": (uses_factors, lambda: FACTORS.__setitem__(1, 5.0), lambda: FACTORS.__setitem__(1, 2.0)),
    "global_list_grown": (uses_factors, lambda: FACTORS.append(3.0), lambda: FACTORS.__delitem__(slice(2, None))),
    "global_none_to_tensor": (uses_mask, _g("MASK", torch.full((8,), 3.0)), _g("MASK", None)),
    "global_module_rebound": (uses_global_linear, _g("GLOBAL_LINEAR", nn.Linear(8, 8)), _g("GLOBAL_LINEAR", GLOBAL_LINEAR)),
    "global_module_replaced_by_other_type": (uses_global_linear, _g("GLOBAL_LINEAR", nn.Identity()), _g("GLOBAL_LINEAR", GLOBAL_LINEAR)),
    "global_tensor_new_dtype": (uses_table, _g("TABLE", torch.randn(8, dtype=torch.float64)), _g("TABLE", _OLD_TABLE)),
    "global_tensor_new_shape": (uses_table, _g("TABLE", torch.randn(1)), _g("TABLE", _OLD_TABLE)),
    "class_attribute_changed": (uses_class_attr, _set(Knobs, "factor", 4.0), _set(Knobs, "factor", 2.0)),
    "instance_attribute_changed": (uses_instance_attr, _set(HOLDER, "gain", -1.0), _set(HOLDER, "gain", 1.5)),
    "attribute_added_then_deleted": (uses_hasattr, _set(HOLDER, "extra", 10.0), _del_extra),
    "dataclass_field_changed": (uses_dataclass, _set(SETTINGS, "mode", "mean"), _set(SETTINGS, "mode", "sum")),
    "dataclass_float_field_changed": (uses_dataclass, _set(SETTINGS, "eps", 0.5), _set(SETTINGS, "eps", 1e-5)),
    "helper_defaults_changed": (
        uses_helper_default,
        _set(_helper_with_default, "__defaults__", (5.0,)),
        _set(_helper_with_default, "__defaults__", (2.0,)),
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_world_change_is_seen(name):
    fn, to_b, to_a = SCENARIOS[name]
    _check_transitions(fn, (X.clone(),), to_b, to_a)


def test_global_tensor_mutated_in_place_is_seen():
    def f(x):
        return x + TABLE

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(8)
    saved = TABLE.clone()
    try:
        assert_same(f(x), jf(x))
        TABLE.mul_(3)
        assert_same(f(x), jf(x))
    finally:
        TABLE.copy_(saved)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x)) * self.scale


def _module_scenarios():
    def param_rebound(m):
        m.lin.weight = nn.Parameter(torch.randn(8, 8))

    def buffer_rebound(m):
        m.scale = torch.full((8,), 2.0)

    def buffer_new_dtype(m):
        m.scale = torch.full((8,), 2.0, dtype=torch.float64)

    def submodule_swapped(m):
        m.act = nn.Tanh()

    def submodule_deleted_to_identity(m):
        m.lin = nn.Identity()

    def param_data_replaced(m):
        m.lin.weight.data = torch.randn(8, 8)

    def bias_removed(m):
        m.lin.bias = None

    def requires_grad_off(m):
        for p in m.parameters():
            p.requires_grad_(False)

    return [param_rebound, buffer_rebound, buffer_new_dtype, submodule_swapped,
            submodule_deleted_to_identity, param_data_replaced, bias_removed, requires_grad_off]


@pytest.mark.parametrize("change", _module_scenarios(), ids=lambda f: f.__name__)
def test_module_change_is_seen(change):
    torch.manual_seed(0)
    m = _Net()
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(4, 8)
    assert_same(m(x), jm(x), "before")
    change(m)
    assert_same(m(x), jm(x), "after the change")
    assert_same(m(x), jm(x), "after the change, again")


@pytest.mark.parametrize(
    "a,b",
    [("sum", "mean"), ((2, 3), (3, 2)), (None, 2.0), (True, False), (3, 3.0)],
    ids=["str", "tuple", "none_to_float", "bool", "int_to_float"],
)
def test_python_argument_change_is_seen(a, b):
    def f(x, opt):
        if opt == "sum":
            return x.sum()
        if opt == "mean":
            return x.float().mean()
        if isinstance(opt, tuple):
            return x.reshape(opt) if x.numel() == 6 else x
        if opt is None:
            return x * 0
        if isinstance(opt, bool):
            return x + 1 if opt else x - 1
        return x * opt  # int vs float changes the result dtype for integer tensors

    jf = pyjit.jit(f, backend=CountingBackend())
    for x in (torch.randn(2, 3), torch.arange(6).view(2, 3)):
        for opt in (a, b, a):
            assert_same(f(x, opt), jf(x, opt), f"opt={opt!r}, x.dtype={x.dtype}")


def _calls(fn, arg_sets):
    """Call fn eagerly and jitted on each argument tuple in order (fresh copies for each side)."""
    jf = pyjit.jit(fn, backend=CountingBackend())
    for i, make in enumerate(arg_sets):
        eager_args, jit_args = make(), make()
        assert_same(fn(*eager_args), jf(*jit_args), f"call {i}")
        assert_same(eager_args, jit_args, f"arguments after call {i}")


_A = torch.randn(4)
_B = torch.randn(4)


def test_signed_zero_and_nan_constants():
    def f(x, s):
        return x / s

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.ones(3)
    for s in (0.0, -0.0, 0.0, float("nan"), float("inf"), float("-inf"), -0.0):
        expected, actual = f(x, s), jf(x, s)
        assert_same(expected, actual, f"s={s!r}")
        assert torch.equal(torch.signbit(expected), torch.signbit(actual)), f"sign differs for s={s!r}"


def test_bool_and_int_arguments_are_different():
    def f(x, flag):
        if isinstance(flag, bool):
            return x + 100
        return x * flag

    _calls(f, [lambda: (torch.arange(3), True), lambda: (torch.arange(3), 1), lambda: (torch.arange(3), True)])


def test_dict_key_order_change():
    def f(d):
        return torch.cat([v * (i + 1) for i, v in enumerate(d.values())])

    _calls(f, [lambda: ({0: _A.clone(), 1: _B.clone()},), lambda: ({1: _B.clone(), 0: _A.clone()},)])


def test_kwargs_order_change():
    def f(x, **kw):
        return torch.stack([x * v for v in kw.values()]), list(kw)

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    for kw in ({"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}, {"a": 1.0, "b": 2.0}):
        assert_same(f(x, **kw), jf(x, **kw), f"kwargs {list(kw)}")


def test_list_vs_tuple_argument():
    def f(xs):
        out = torch.stack(list(xs))
        return out if isinstance(xs, tuple) else out * 2

    _calls(f, [lambda: ([_A.clone(), _B.clone()],), lambda: ((_A.clone(), _B.clone()),)])


def test_nested_container_structure_change():
    def f(d):
        return sum(v.sum() for v in d["a"]) + len(d["a"])

    _calls(f, [lambda: ({"a": [_A.clone(), _B.clone()]},), lambda: ({"a": [_A.clone()]},),
               lambda: ({"a": (_A.clone(), _B.clone())},)])


def test_none_vs_tensor_inside_list():
    def f(xs):
        return [x * 2 if x is not None else None for x in xs]

    _calls(f, [lambda: ([_A.clone(), None],), lambda: ([None, _B.clone()],)])


def test_same_tensor_through_two_sources():
    def f(a, holder):
        a.add_(1)
        return holder[0] * 2

    jf = pyjit.jit(f, backend=CountingBackend())
    for same in (False, True, False, True):
        xe, ye = torch.randn(3), torch.randn(3)
        xj, yj = xe.clone(), ye.clone()
        expected = f(xe, [xe if same else ye])
        actual = jf(xj, [xj if same else yj])
        assert_same(expected, actual, f"same={same}")


def test_global_tensor_passed_as_argument_too():
    def f(x):
        x.mul_(2)
        return x + TABLE

    jf = pyjit.jit(f, backend=CountingBackend())
    saved = TABLE.clone()
    try:
        for as_global in (False, True, False):
            TABLE.copy_(saved)
            arg = TABLE if as_global else torch.ones(8)
            expected = f(arg.clone() if not as_global else arg)
            TABLE.copy_(saved)
            arg = TABLE if as_global else torch.ones(8)
            actual = jf(arg)
            assert_same(expected, actual, f"as_global={as_global}")
    finally:
        TABLE.copy_(saved)


def test_tied_then_untied_parameters():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    m[1].weight = m[0].weight  # tied
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(2, 4)
    assert_same(m(x), jm(x), "tied")
    with torch.no_grad():
        m[0].weight.mul_(2)  # both layers see it
    assert_same(m(x), jm(x), "tied, after in-place update")
    m[1].weight = nn.Parameter(torch.randn(4, 4))  # untie
    assert_same(m(x), jm(x), "untied")


class _Doubler:
    def apply(self, x):
        return x * 2


class _Tripler:
    def apply(self, x):
        return x * 3


def test_instance_class_changed():
    obj = _Doubler()

    def f(x):
        return obj.apply(x) + 1

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(f(x), jf(x))
    obj.__class__ = _Tripler
    assert_same(f(x), jf(x), "after changing __class__")
    obj.__class__ = _Doubler
    assert_same(f(x), jf(x), "back")


def test_method_monkeypatched_on_class():
    obj = _Doubler()

    def f(x):
        return obj.apply(x)

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    original = _Doubler.apply
    try:
        assert_same(f(x), jf(x))
        _Doubler.apply = lambda self, v: v - 5
        assert_same(f(x), jf(x), "after patching the class method")
        obj.apply = lambda v: v * 10  # instance attribute shadows the method
        assert_same(f(x), jf(x), "after shadowing on the instance")
    finally:
        _Doubler.apply = original
