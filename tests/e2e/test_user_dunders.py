"""pyjit never runs user code to classify a value: objects whose ``__hash__``, ``__eq__``,
``__getattr__``, ``__bool__`` or ``__len__`` count their calls or raise, reached as arguments,
globals, closure values, attributes of other objects, dict values, and as the half-built ``self``
of an ``__init__`` compiled as its own frame, give eager's results, with each dunder run exactly
as often as eagerly (none, where eager makes no such call).
"""
from __future__ import annotations

import collections
import dataclasses
import logging

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same

CALLS: collections.Counter[str] = collections.Counter()


class Counting:
    """Every dunder pyjit could be tempted to call counts itself."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __hash__(self) -> int:
        CALLS["hash"] += 1
        return 7

    def __eq__(self, other: object) -> bool:
        CALLS["eq"] += 1
        return self is other

    def __getattr__(self, name: str) -> object:
        CALLS["getattr"] += 1
        raise AttributeError(name)

    def __bool__(self) -> bool:
        CALLS["bool"] += 1
        return True

    def __len__(self) -> int:
        CALLS["len"] += 1
        return 3


class Raising:
    """Every such dunder raises: calling one at all changes what the program sees."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __hash__(self) -> int:
        raise RuntimeError("__hash__ called")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ called")

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"__getattr__({name!r}) called")

    def __bool__(self) -> bool:
        raise RuntimeError("__bool__ called")

    def __len__(self) -> int:
        raise RuntimeError("__len__ called")

    @property
    def __class__(self) -> type:  # type: ignore[override]  # a proxy's lie: isinstance would believe it
        raise RuntimeError("__class__ read")


class SlotsCounting:
    """No instance ``__dict__``: asking the object for one must not reach its ``__getattr__``."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __getattr__(self, name: str) -> object:
        CALLS["getattr"] += 1
        raise AttributeError(name)

    def __hash__(self) -> int:
        CALLS["hash"] += 1
        return 7

    def __eq__(self, other: object) -> bool:
        CALLS["eq"] += 1
        return self is other


class CountingInt(int):
    """An int with its own equality: guarding it by value would run that on every call."""

    def __eq__(self, other: object) -> bool:
        CALLS["eq"] += 1
        return int(self) == other

    def __hash__(self) -> int:
        CALLS["hash"] += 1
        return int(self)


class Holder:
    def __init__(self, obj: object) -> None:
        self.obj = obj


G_COUNTING = Counting(torch.ones(3))
G_RAISING = Raising(torch.ones(3))


def via_arg(x, obj):
    return x * 2 + obj.t


def via_global_counting(x):
    return x.sin() + G_COUNTING.t


def via_global_raising(x):
    return x.sin() + G_RAISING.t


def make_closure(obj):
    def via_closure(x):
        return x.cos() * obj.t
    return via_closure


def via_attribute(x, holder):
    return x - holder.obj.t


def via_dict_value(x, d):
    return x + d["k"].t


def via_list(x, items):
    return x * items[0].t


def missing_attribute(x, obj):
    # Eager runs __getattr__ once per call here (the attribute is missing): so must pyjit.
    return x + getattr(obj, "missing", 1)


def probes_attribute(x, obj):
    # hasattr runs __getattr__ for a missing attribute: once per call, eagerly and under pyjit.
    return x + 1 if hasattr(obj, "missing") else x - 1


def scale_by(x, n):
    return x.sin() * 2, n


def eager_semantics_dunders(x, obj):
    # Eager calls __len__ once, __bool__ once and __eq__ once: so must pyjit, no more.
    n = len(obj)
    if obj:
        x = x + n
    return x * 2 if obj == obj else x


def _run_both(fn, make_args, calls=2):
    """(eager results, eager CALLS, jit results, jit CALLS, backend) over ``calls`` calls."""
    CALLS.clear()
    eager = [fn(*make_args()) for _ in range(calls)]
    eager_calls = dict(CALLS)
    CALLS.clear()
    backend = CountingBackend()
    jf = pyjit.jit(fn, backend=backend)
    jitted = [jf(*make_args()) for _ in range(calls)]
    return eager, eager_calls, jitted, dict(CALLS), backend


@pytest.fixture(autouse=True)
def _strict_pyjit():
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
    CALLS.clear()


X = torch.arange(3.0)

CASES = {
    "arg_counting": (via_arg, lambda: (X, Counting(torch.ones(3)))),
    "arg_raising": (via_arg, lambda: (X, Raising(torch.ones(3)))),
    "global_counting": (via_global_counting, lambda: (X,)),
    "global_raising": (via_global_raising, lambda: (X,)),
    "closure_counting": (make_closure(Counting(torch.ones(3))), lambda: (X,)),
    "closure_raising": (make_closure(Raising(torch.ones(3))), lambda: (X,)),
    "attribute_counting": (via_attribute, lambda: (X, Holder(Counting(torch.ones(3))))),
    "attribute_raising": (via_attribute, lambda: (X, Holder(Raising(torch.ones(3))))),
    "dict_value_counting": (via_dict_value, lambda: (X, {"k": Counting(torch.ones(3))})),
    "dict_value_raising": (via_dict_value, lambda: (X, {"k": Raising(torch.ones(3))})),
    "list_item_raising": (via_list, lambda: (X, [Raising(torch.ones(3))])),
    "eager_dunders_counted": (eager_semantics_dunders, lambda: (X, Counting(torch.ones(3)))),
    "hasattr_counting": (probes_attribute, lambda: (X, Counting(torch.ones(3)))),
    "slots_hasattr_counting": (probes_attribute, lambda: (X, SlotsCounting(torch.ones(3)))),
    "int_subclass_counting": (scale_by, lambda: (X, CountingInt(5))),
    "slots_arg_counting": (via_arg, lambda: (X, SlotsCounting(torch.ones(3)))),
    "slots_attribute_counting": (via_attribute, lambda: (X, Holder(SlotsCounting(torch.ones(3))))),
    "missing_attribute_counting": (missing_attribute, lambda: (X, Counting(torch.ones(3)))),
    "slots_missing_attribute_counting": (missing_attribute, lambda: (X, SlotsCounting(torch.ones(3)))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_are_classified_without_their_dunders(case):
    fn, make_args = CASES[case]
    eager, eager_calls, jitted, jit_calls, backend = _run_both(fn, make_args)
    for e, j in zip(eager, jitted):
        assert_same(e, j)
    assert jit_calls == eager_calls, f"dunder calls under pyjit {jit_calls} != eager {eager_calls}"
    assert backend.frame_count >= 1, "the frame was not compiled"


# -- an __init__ compiled as its own frame sees a half-built self ------------------------------

HASHES: list[int] = []


class CountedInit:
    instances = 0

    def __init__(self, t):
        self.t = t
        CountedInit.instances += 1  # a class-attribute store: the caller breaks, __init__ compiles alone

    def __hash__(self):
        HASHES.append(1)
        return 7


class HashReadsLateField:
    instances = 0

    def __init__(self, t, n=0):
        self.t = t
        self.n = n
        HashReadsLateField.instances += 1

    def __hash__(self):
        return hash(self.n)  # raises AttributeError on a self that __init__ has not finished


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FrozenSlots:
    # frozen+eq: a generated __hash__ over the fields (AttributeError on unset slots)
    t: torch.Tensor
    scale: float = 2.0

    def __post_init__(self):
        object.__setattr__(self, "t", self.t * self.scale)  # tensor work inside the half-built object's init


def build_counted(x):
    return CountedInit(x).t * 2


def build_late_field(x):
    return HashReadsLateField(x, 1).t * 2


def build_frozen(x):
    return FrozenSlots(t=x + 1).t.sum()


@pytest.mark.parametrize("fn", [build_counted, build_late_field, build_frozen])
def test_half_built_self_is_never_hashed(fn, caplog):
    x = torch.ones(2)
    HASHES.clear()
    expected = fn(x)
    assert HASHES == []
    with caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
        got = pyjit.jit(fn, backend=CountingBackend())(x)
        again = pyjit.jit(fn, backend=CountingBackend())(x)
    assert_same(expected, got)
    assert_same(expected, again)
    assert HASHES == [], f"__hash__ ran {len(HASHES)} times under pyjit (eager: never)"
    assert not [r for r in caplog.records if r.name == "pyjit.fallbacks"], caplog.text


# -- a user iterator class: __iter__ returns self, __next__ counts down ------------------------

class Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


def iterate_countdown(x):
    return x + len(list(Countdown(3))) + sum(Countdown(4))


def test_user_iterator_object_is_driven_by_next():
    x = torch.ones(2)
    backend = CountingBackend()
    assert_same(iterate_countdown(x), pyjit.jit(iterate_countdown, backend=backend)(x))
    assert backend.frame_count == 1, backend.graph_listing()


# -- a user dunder raising where eager calls it too -------------------------------------------

BOOL_CALLS: list[int] = []


class BoolRaises:
    def __bool__(self):
        BOOL_CALLS.append(1)
        raise ValueError("no truth value")


def truth_of_user_object(x, obj):
    y = x * 3
    if obj:
        return y
    return y + 1


def test_user_dunder_raising_raises_as_eagerly_with_one_call(caplog):
    x = torch.ones(2)
    BOOL_CALLS.clear()
    with pytest.raises(ValueError, match="no truth value"):
        truth_of_user_object(x, BoolRaises())
    assert BOOL_CALLS == [1]
    BOOL_CALLS.clear()
    with pyjit.config.patch(raise_on_internal_error=False), \
            caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        with pytest.raises(ValueError, match="no truth value"):
            pyjit.jit(truth_of_user_object, backend=CountingBackend())(x, BoolRaises())
    assert BOOL_CALLS == [1], f"__bool__ ran {len(BOOL_CALLS)} times under pyjit (eager: once)"
    assert not [r for r in caplog.records if r.name == "pyjit.fallbacks"], caplog.text


def test_raising_getattr_under_hasattr_raises_as_eagerly(caplog):
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match="__getattr__") as eager:
        probes_attribute(x, Raising(x))
    with pyjit.config.patch(raise_on_internal_error=False), \
            caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        with pytest.raises(RuntimeError, match="__getattr__") as jitted:
            pyjit.jit(probes_attribute, backend=CountingBackend())(x, Raising(x))
    assert str(jitted.value) == str(eager.value)
    assert not [r for r in caplog.records if r.name == "pyjit.fallbacks"], caplog.text


# -- identity tables still know the builtins that are new objects on each access ---------------

def chain_lists(x):
    import itertools

    return x * sum(itertools.chain.from_iterable([[1, 2], [3]])) + len(dict.fromkeys("ab"))


def test_classmethods_of_builtin_types_keep_their_handlers():
    # itertools.chain.from_iterable is a new bound object on every attribute read: the handler
    # tables, keyed by identity, key it by (class, name).
    import itertools

    from pyjit.variables.builtins import BuiltinVariable

    assert BuiltinVariable.has_handler(itertools.chain.from_iterable)
    x = torch.ones(2)
    backend = CountingBackend()
    assert_same(chain_lists(x), pyjit.jit(chain_lists, backend=backend)(x))
    assert backend.frame_count == 1, backend.graph_listing()
