"""Members found on an object's class (methods, properties, static/class methods, class
attributes, ``__call__``, ``super()``, ``__class__``): patching the class or shadowing on the
instance after compiling must give eager's answer, and an unchanged world must not recompile."""
from __future__ import annotations

import torch

import pyjit

from .helpers import CompileCounter, check_world_change, same

X = torch.randn(5)


def _patch(target, name, value):
    """(apply, restore) for setattr(target, name, value); restore deletes what was not there."""
    had = name in vars(target)
    old = vars(target).get(name)

    def apply():
        setattr(target, name, value)

    def restore():
        if had:
            setattr(target, name, old)
        elif name in vars(target):
            delattr(target, name)

    return apply, restore


# -- plain methods ------------------------------------------------------------------------------


class Doubler:
    def apply(self, v):
        return v * 2


DOUBLER = Doubler()


def calls_method(x):
    return DOUBLER.apply(x)


def test_method_patched_on_class():
    check_world_change(calls_method, (X,), *_patch(Doubler, "apply", lambda self, v: v - 5))


def test_method_shadowed_on_instance():
    check_world_change(calls_method, (X,), *_patch(DOUBLER, "apply", lambda v: v * 10))


def test_method_code_replaced():
    def other(self, v):
        return v + 100

    fn, old = Doubler.apply, Doubler.apply.__code__
    check_world_change(calls_method, (X,), lambda: setattr(fn, "__code__", other.__code__),
                       lambda: setattr(fn, "__code__", old))


def test_method_of_argument_object():
    # same object type each call, a fresh instance: no recompile; patched class: recompile
    counter = CompileCounter()

    def f(obj, x):
        return obj.apply(x)

    jf = pyjit.jit(f, backend=counter)
    same(f(Doubler(), X), jf(Doubler(), X), "first")
    same(f(Doubler(), X), jf(Doubler(), X), "second")
    assert counter.graphs == 1
    apply, restore = _patch(Doubler, "apply", lambda self, v: v - 5)
    try:
        apply()
        same(f(Doubler(), X), jf(Doubler(), X), "patched class")
    finally:
        restore()


# -- properties, static and class methods -------------------------------------------------------


class Scaled:
    factor = 2.0  # a class attribute read through instances

    @property
    def scale(self):
        return 3.0

    @staticmethod
    def shift(v):
        return v + 1

    @classmethod
    def make(cls, v):
        return v * cls.factor


SCALED = Scaled()


def uses_property(x):
    return x * SCALED.scale


def uses_staticmethod(x):
    return SCALED.shift(x)


def uses_staticmethod_on_class(x):
    return Scaled.shift(x)


def uses_classmethod(x):
    return SCALED.make(x)


def uses_classmethod_on_class(x):
    return Scaled.make(x)


def uses_class_attribute(x):
    return x * SCALED.factor


def test_property_getter_replaced():
    check_world_change(uses_property, (X,), *_patch(Scaled, "scale", property(lambda self: -1.5)))


def test_property_replaced_by_plain_value():
    check_world_change(uses_property, (X,), *_patch(Scaled, "scale", 7.0))


def test_staticmethod_replaced():
    check_world_change(uses_staticmethod, (X,), *_patch(Scaled, "shift", staticmethod(lambda v: v - 1)))


def test_staticmethod_shadowed_on_instance():
    check_world_change(uses_staticmethod, (X,), *_patch(SCALED, "shift", lambda v: v * 4))


def test_staticmethod_through_class_replaced():
    check_world_change(uses_staticmethod_on_class, (X,), *_patch(Scaled, "shift", staticmethod(lambda v: v - 1)))


def test_classmethod_replaced():
    check_world_change(uses_classmethod, (X,), *_patch(Scaled, "make", classmethod(lambda cls, v: v / 4)))


def test_classmethod_reads_changed_class_attribute():
    check_world_change(uses_classmethod, (X,), *_patch(Scaled, "factor", 5.0))


def test_classmethod_through_class_replaced():
    check_world_change(uses_classmethod_on_class, (X,), *_patch(Scaled, "make", classmethod(lambda cls, v: v / 4)))


def test_classmethod_shadowed_on_instance():
    check_world_change(uses_classmethod, (X,), *_patch(SCALED, "make", lambda v: v - 3))


def test_class_attribute_changed_on_class():
    check_world_change(uses_class_attribute, (X,), *_patch(Scaled, "factor", -2.0))


def test_class_attribute_shadowed_on_instance():
    check_world_change(uses_class_attribute, (X,), *_patch(SCALED, "factor", 9.0))


# -- dunders looked up on the type, super(), __class__ -------------------------------------------


class Callable_:
    def __call__(self, v):
        return v + 2


CALLABLE = Callable_()


def calls_object(x):
    return CALLABLE(x)


def test_dunder_call_replaced_on_class():
    check_world_change(calls_object, (X,), *_patch(Callable_, "__call__", lambda self, v: v * -3))


class Base:
    def step(self, v):
        return v * 2


class Child(Base):
    def step(self, v):
        return super().step(v) + 1


CHILD = Child()


def calls_super(x):
    return CHILD.step(x)


def test_super_method_patched_on_base():
    check_world_change(calls_super, (X,), *_patch(Base, "step", lambda self, v: v - 7))


class Tripler:
    def apply(self, v):
        return v * 3


def test_class_assignment():
    obj = Doubler()

    def f(x):
        return obj.apply(x)

    check_world_change(f, (X,), lambda: setattr(obj, "__class__", Tripler), lambda: setattr(obj, "__class__", Doubler))


class Plain:
    pass


PLAIN = Plain()


def uses_truth(x):
    return x + 1 if PLAIN else x - 1


def test_truth_method_added_to_class():
    check_world_change(uses_truth, (X,), *_patch(Plain, "__bool__", lambda self: False))


def test_truth_len_added_to_class():
    check_world_change(uses_truth, (X,), *_patch(Plain, "__len__", lambda self: 0))


# -- identity between objects guarded only by type ----------------------------------------------


class Cfg:
    pass


CFG_A, CFG_B = Cfg(), Cfg()
CURRENT = CFG_A


def uses_identity(x):
    return x * 2 if CURRENT is CFG_A else x * 3


def test_is_between_user_objects():
    g = globals()
    check_world_change(uses_identity, (X,), lambda: g.__setitem__("CURRENT", CFG_B),
                       lambda: g.__setitem__("CURRENT", CFG_A))


OTHER = CFG_B


def uses_identity_distinct(x):
    return x * 2 if OTHER is CFG_A else x * 3


def test_is_between_user_objects_starting_distinct():
    g = globals()
    check_world_change(uses_identity_distinct, (X,), lambda: g.__setitem__("OTHER", CFG_A),
                       lambda: g.__setitem__("OTHER", CFG_B))


# -- data descriptors win over the instance __dict__ ------------------------------------------------


class Fixed:
    """A data descriptor (has __set__): Python reads it before the instance __dict__."""

    def __init__(self, value):
        self.value = value

    def __get__(self, obj, owner=None):
        return self.value

    def __set__(self, obj, value):
        raise AttributeError("read-only")


class WithDescriptor:
    gain = Fixed(2.0)


WITH_DESCRIPTOR = WithDescriptor()
WITH_DESCRIPTOR.__dict__["gain"] = 100.0  # shadowed in the dict, but the descriptor wins


def uses_descriptor(x):
    return x * WITH_DESCRIPTOR.gain


def test_data_descriptor_beats_instance_dict():
    desc = WithDescriptor.__dict__["gain"]
    check_world_change(uses_descriptor, (X,), lambda: setattr(desc, "value", -1.0), lambda: setattr(desc, "value", 2.0))


# -- attribute hooks ---------------------------------------------------------------------------------

DYN_VALUES = {"k": 2.0}


class Dynamic:
    def __getattr__(self, name):  # called only when normal lookup fails; only `k` is probed
        if name != "k":  # pyjit must not probe other names (e.g. __objclass__) through the hook
            raise RuntimeError(f"unexpected attribute probe: {name}")
        return DYN_VALUES[name]


DYNAMIC = Dynamic()


def uses_getattr_hook(x):
    return x * DYNAMIC.k


def test_getattr_hook_value_changes():
    check_world_change(uses_getattr_hook, (X,), lambda: DYN_VALUES.__setitem__("k", -3.0),
                       lambda: DYN_VALUES.__setitem__("k", 2.0))


class Intercepting:
    def __getattribute__(self, name):
        return DYN_VALUES["k"] if name == "k" else object.__getattribute__(self, name)

    k = 1.0


INTERCEPTING = Intercepting()


def test_custom_getattribute_is_not_modelled():
    def f(x):
        return x * INTERCEPTING.k

    jf = pyjit.jit(f, backend=CompileCounter())
    for value in (2.0, 5.0):
        DYN_VALUES["k"] = value
        try:
            same(f(X), jf(X), f"k={value}")
        finally:
            DYN_VALUES["k"] = 2.0
