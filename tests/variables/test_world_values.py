"""Python values the trace reads outside the frame's own arguments: module attributes, partials,
defaults and closures of inlined helpers, nn.Module flags and submodules, mutable globals,
enums. Changing one after compiling must give eager's answer; leaving it alone must not recompile."""
from __future__ import annotations

import collections.abc
import enum
import functools
import sys
import types
import typing

import pytest
import torch
import torch.nn as nn

import pyjit

from .helpers import check_world_change

X = torch.randn(4, 6)

# -- a user module reached through a global: `import mymod; mymod.CONST` -----------------------------

mymod = types.ModuleType("pyjit_tests_variables_mymod")
exec(
    "SCALE = 2.0\n"
    "def helper(x):\n"
    "    return x * SCALE\n",
    mymod.__dict__,
)
sys.modules[mymod.__name__] = mymod


def uses_module_constant(x):
    return x * mymod.SCALE


def uses_module_function(x):
    return mymod.helper(x)  # reads SCALE through the helper's own globals


def _set(obj, name, value):
    return lambda: setattr(obj, name, value)


def test_module_attribute_changed():
    check_world_change(uses_module_constant, (X,), _set(mymod, "SCALE", 3.5), _set(mymod, "SCALE", 2.0))


def test_module_global_read_by_its_function_changed():
    check_world_change(uses_module_function, (X,), _set(mymod, "SCALE", -1.0), _set(mymod, "SCALE", 2.0))


def test_module_function_rebound():
    old = mymod.helper
    check_world_change(uses_module_function, (X,), _set(mymod, "helper", lambda x: x - 1), _set(mymod, "helper", old))


# -- functools.partial ------------------------------------------------------------------------------


def _affine(x, a, b=0.0):
    return x * a + b


PARTIAL = functools.partial(_affine, a=2.0)


def uses_partial(x):
    return PARTIAL(x)


def test_partial_keyword_value_mutated():
    check_world_change(uses_partial, (X,), lambda: PARTIAL.keywords.__setitem__("a", 4.0),
                       lambda: PARTIAL.keywords.__setitem__("a", 2.0))


def test_partial_keyword_added():
    check_world_change(uses_partial, (X,), lambda: PARTIAL.keywords.__setitem__("b", 1.0),
                       lambda: PARTIAL.keywords.pop("b", None))


def test_partial_state_replaced():
    state = PARTIAL.__reduce__()[2]
    check_world_change(uses_partial, (X,), lambda: PARTIAL.__setstate__((_affine, (3.0,), {}, None)),
                       lambda: PARTIAL.__setstate__(state))


# -- defaults, keyword-only defaults, closures and code of inlined helpers -------------------------


def _with_default(x, k=2.0):
    return x * k


def _with_kwdefault(x, *, k=2.0):
    return x + k


def _two_defaults(x, a=1.0, b=2.0):
    return x * a + b


def uses_default(x):
    return _with_default(x)


def uses_kwdefault(x):
    return _with_kwdefault(x)


def uses_two_defaults(x):
    return _two_defaults(x, 3.0)


def test_defaults_changed():
    check_world_change(uses_default, (X,), _set(_with_default, "__defaults__", (5.0,)),
                       _set(_with_default, "__defaults__", (2.0,)))


def test_kwdefaults_changed():
    check_world_change(uses_kwdefault, (X,), _set(_with_kwdefault, "__kwdefaults__", {"k": -3.0}),
                       _set(_with_kwdefault, "__kwdefaults__", {"k": 2.0}))


def test_defaults_shortened():
    # (1.0, 2.0) -> (2.0,): b's default is still 2.0 at index... 0 now; a length change must be seen
    check_world_change(uses_two_defaults, (X,), _set(_two_defaults, "__defaults__", (7.0,)),
                       _set(_two_defaults, "__defaults__", (1.0, 2.0)))


def _make_closure():
    factor = 2.0

    def helper(x):
        return x * factor

    def set_factor(v):
        nonlocal factor
        factor = v

    return helper, set_factor


CLOSED, SET_FACTOR = _make_closure()


def uses_closure(x):
    return CLOSED(x)


def test_closure_cell_changed():
    check_world_change(uses_closure, (X,), lambda: SET_FACTOR(-4.0), lambda: SET_FACTOR(2.0))


def test_frame_closure_changed():
    bias = 1.0

    def f(x):
        return x + bias

    def set_bias(v):
        nonlocal bias
        bias = v

    check_world_change(f, (X,), lambda: set_bias(5.0), lambda: set_bias(1.0))


def test_helper_code_replaced():
    def other(x, k=2.0):
        return x - k

    old = _with_default.__code__
    check_world_change(uses_default, (X,), _set(_with_default, "__code__", other.__code__),
                       _set(_with_default, "__code__", old))


# -- nn.Module: plain Python attributes, submodules, methods ------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.act = nn.ReLU()
        self.scale = 2.0
        self.repeats = 1
        self.use_bias = True
        self.mode = "sum"

    def extra(self, y):
        return y * self.scale

    def forward(self, x):
        y = self.act(self.lin(x))
        for _ in range(self.repeats):
            y = self.extra(y)
        if self.use_bias:
            y = y + 1
        return y.sum(-1) if self.mode == "sum" else y.mean(-1)


NET = Net()


def _module_case(change, restore):
    def f(x):
        return NET(x)

    check_world_change(f, (X,), change, restore)


@pytest.mark.parametrize("name,value,original", [
    ("scale", 3.0, 2.0), ("repeats", 2, 1), ("use_bias", False, True), ("mode", "mean", "sum"),
], ids=["float", "int", "bool", "str"])
def test_module_python_attribute_changed(name, value, original):
    _module_case(_set(NET, name, value), _set(NET, name, original))


def test_submodule_replaced():
    old = NET.act
    _module_case(_set(NET, "act", nn.Tanh()), _set(NET, "act", old))


def test_submodule_forward_patched_on_instance():
    def restore():
        NET.act.__dict__.pop("forward", None)

    _module_case(_set(NET.act, "forward", lambda x: x * 0 - 1), restore)


def test_module_method_shadowed_on_instance():
    def restore():
        NET.__dict__.pop("extra", None)

    _module_case(_set(NET, "extra", lambda y: y - 10), restore)


def test_module_method_patched_on_class():
    old = Net.extra
    _module_case(_set(Net, "extra", lambda self, y: y * -1), _set(Net, "extra", old))


def test_module_forward_patched_on_class():
    old = Net.forward
    _module_case(_set(Net, "forward", lambda self, x: x.max(-1).values), _set(Net, "forward", old))


class OtherNet(Net):
    def forward(self, x):
        return self.lin(x).mean(-1) - 3


def test_module_class_assignment():
    _module_case(_set(NET, "__class__", OtherNet), _set(NET, "__class__", Net))


# -- mutable globals and enums ------------------------------------------------------------------------

CFG = {"scale": 2.0, "shift": 1}
FACTORS = [1.0, 2.0]


class Mode(enum.Enum):
    FAST = 1
    SLOW = 2


MODE = Mode.FAST


def uses_dict(x):
    return x * CFG["scale"] + CFG.get("shift", 0) + len(CFG)


def uses_list(x):
    for f in FACTORS:
        x = x * f
    return x


def uses_enum(x):
    return x * 2 if MODE is Mode.FAST else x / 2


def uses_enum_value(x):
    return x + MODE.value


def test_global_dict_value_mutated():
    check_world_change(uses_dict, (X,), lambda: CFG.__setitem__("scale", 3.0), lambda: CFG.__setitem__("scale", 2.0))


def test_global_dict_key_added():
    check_world_change(uses_dict, (X,), lambda: CFG.__setitem__("new", 0), lambda: CFG.pop("new", None))


def test_global_dict_key_removed():
    check_world_change(uses_dict, (X,), lambda: CFG.pop("shift"), lambda: CFG.__setitem__("shift", 1))


def test_global_list_mutated():
    check_world_change(uses_list, (X,), lambda: FACTORS.__setitem__(0, -1.0), lambda: FACTORS.__setitem__(0, 1.0))


def test_global_list_grown():
    check_world_change(uses_list, (X,), lambda: FACTORS.append(3.0), lambda: FACTORS.__delitem__(slice(2, None)))


def test_enum_global_rebound():
    g = globals()
    check_world_change(uses_enum, (X,), lambda: g.__setitem__("MODE", Mode.SLOW), lambda: g.__setitem__("MODE", Mode.FAST))


def test_enum_value_read():
    g = globals()
    check_world_change(uses_enum_value, (X,), lambda: g.__setitem__("MODE", Mode.SLOW),
                       lambda: g.__setitem__("MODE", Mode.FAST))


# -- dicts keyed by classes and typing forms (huggingface_hub's strict-dataclass validators) ----------


def _add_one(x, args):
    return x + 1


def _times_two(x, args):
    return x * 2


def _minus_three(x, args):
    return x - 3


VALIDATORS = {typing.Union: _add_one, typing.Literal: _times_two, list: _minus_three,
              collections.abc.Sequence: _minus_three, types.UnionType: _add_one, types: _times_two,
              _add_one: _minus_three, len: _add_one}
ANNOTATION = typing.Optional[int]


def uses_type_keyed_dict(x, t=None):
    t = ANNOTATION if t is None else t
    origin = typing.get_origin(t)
    validator = VALIDATORS.get(origin)
    if validator is not None:
        x = validator(x, typing.get_args(t))
    if origin in VALIDATORS:
        x = x + 10
    for k, v in VALIDATORS.items():
        if k is types or k is len:  # keys iterate as their own objects (module, builtin function)
            x = v(x, ())
    return VALIDATORS[_add_one](x, ()) if isinstance(t, type) else x


@pytest.mark.parametrize("t", [typing.Optional[int], typing.Literal["a"], list[int], int, int | str, dict[str, int]],
                         ids=str)
def test_type_keyed_dict_no_break(t):
    explanation = pyjit.explain(uses_type_keyed_dict)(X, t)
    assert explanation.break_count == 0, explanation
    torch.testing.assert_close(pyjit.jit(uses_type_keyed_dict)(X, t), uses_type_keyed_dict(X, t))


def test_type_keyed_dict_value_rebound():
    check_world_change(uses_type_keyed_dict, (X,), lambda: VALIDATORS.__setitem__(typing.Union, _times_two),
                       lambda: VALIDATORS.__setitem__(typing.Union, _add_one))


def test_type_keyed_dict_key_removed():
    check_world_change(uses_type_keyed_dict, (X,), lambda: VALIDATORS.pop(typing.Union),
                       lambda: VALIDATORS.__setitem__(typing.Union, _add_one))


def test_type_keyed_dict_lookup_key_changed():
    g = globals()
    check_world_change(uses_type_keyed_dict, (X,), lambda: g.__setitem__("ANNOTATION", typing.Literal[1]),
                       lambda: g.__setitem__("ANNOTATION", typing.Optional[int]))


class _EqualsEverything:
    def __eq__(self, other):  # user code decides equality: not an identity key
        return True

    __hash__ = object.__hash__


USER_KEYED = {_EqualsEverything(): 1.0}


def uses_user_keyed_dict(x):
    return x * next(iter(USER_KEYED.values()))


def test_dict_with_custom_eq_key_still_breaks():
    explanation = pyjit.explain(uses_user_keyed_dict)(X)
    assert explanation.break_count == 1 and "non-constant key" in str(explanation), explanation
    torch.testing.assert_close(pyjit.jit(uses_user_keyed_dict)(X), uses_user_keyed_dict(X))


class ClassAttrShadowsChild(nn.Module):
    act = None  # Python finds this class attribute before Module.__getattr__ looks in _modules

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()  # registered in _modules; `self.act` still reads the class's None

    def forward(self, x):
        return x + 1 if self.act is None else self.act(x)


def test_class_attribute_shadows_child_module():
    m = ClassAttrShadowsChild()

    def f(x):
        return m(x)

    check_world_change(f, (X,), _set(ClassAttrShadowsChild, "act", nn.Tanh()), _set(ClassAttrShadowsChild, "act", None))


class CustomParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.use_first = True

    def parameters(self, recurse=True):  # a user override of a Module method pyjit answers itself
        return [self.lin.bias] if self.use_first else [self.lin.weight]

    def forward(self, x):
        return x + sum(p.sum() for p in self.parameters())


def test_user_override_of_module_method():
    m = CustomParams()

    def f(x):
        return m(x)

    check_world_change(f, (X,), _set(m, "use_first", False), _set(m, "use_first", True))


# -- which entries a module container has ----------------------------------------------------------


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6)])
        self.heads = nn.ModuleDict({"a": nn.Linear(6, 2)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        outs = [h(x) for h in self.heads.values()]
        return torch.cat(outs, -1) * len(self.layers), self.layers[-1](x)


def _stack_case(change, restore):
    torch.manual_seed(0)
    m = Stack()

    def f(x):
        return m(x)

    check_world_change(f, (X,), lambda: change(m), lambda: restore(m))


def test_module_list_grown():
    _stack_case(lambda m: m.layers.append(nn.Linear(6, 6)), lambda m: m.layers.__delitem__(slice(1, None)))


def test_module_dict_entry_added():
    _stack_case(lambda m: m.heads.__setitem__("b", nn.Linear(6, 3)), lambda m: m.heads.__delitem__("b") if "b" in m.heads else None)


def _param_sum(m):
    return lambda x: x + sum(p.sum() for p in m.parameters())


def test_parameter_list_grown_and_bias_set():
    torch.manual_seed(0)
    lin = nn.Linear(6, 6, bias=False)
    bias = nn.Parameter(torch.ones(6))

    def restore():
        lin.bias = None

    check_world_change(_param_sum(lin), (X,), lambda: setattr(lin, "bias", bias), restore)


def test_parameters_method_shadowed_on_instance():
    torch.manual_seed(0)
    lin = nn.Linear(6, 6)

    def restore():
        lin.__dict__.pop("parameters", None)

    check_world_change(_param_sum(lin), (X,), lambda: setattr(lin, "parameters", lambda: [lin.bias]), restore)


class ScaledCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def __call__(self, x, scale=2.0):  # a user __call__ around Module.__call__
        return super().__call__(x) * scale

    def forward(self, x):
        return self.lin(x)


def test_module_user_call_and_its_patch():
    torch.manual_seed(0)
    m = ScaledCall()

    def f(x):
        return m(x) + 1

    old = ScaledCall.__call__
    check_world_change(f, (X,), _set(ScaledCall, "__call__", lambda self, x: x * 0), _set(ScaledCall, "__call__", old))
