"""GuardTree: every accessor and check kind passes and fails as specified, reports the failing
id, shares accessor prefixes, holds identity targets weakly, and is enforced by the hook."""
from __future__ import annotations

import gc
import math
import weakref

import pytest

from pyjit import _C
from pyjit.guards.tree import format_tree, iter_checks, node_at, path_expr

from .core_helpers import Compiler, running_code_name


def f(a, b=None, *rest, k=0, **kw):
    return a


def args_of(a, b=None, *rest, k=0, **kw):
    """The frame's argument slots of f for this call, in frame order."""
    return (a, b, k, rest, kw)


class Obj:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


GLOBAL_VALUE = 5


def test_empty_tree_passes():
    assert _C.GuardTree().check(f, args_of(1)) == _C.PASS == -1


def test_check_type():
    t = _C.GuardTree()
    t.arg(0).check_type(int, 3)
    assert t.check(f, args_of(1)) == -1
    assert t.check(f, args_of(True)) == 3  # bool is not int: exact type
    assert t.check(f, args_of("x")) == 3


def test_check_id_and_weak_reference():
    o = Obj()
    t = _C.GuardTree()
    t.arg(0).check_id(o, 7)
    assert t.check(f, args_of(o)) == -1
    assert t.check(f, args_of(Obj())) == 7
    ref = weakref.ref(o)
    del o
    gc.collect()
    assert ref() is None, "the guard must not keep its object alive"
    assert t.check(f, args_of(None)) == 7
    assert t.check(f, args_of(Obj())) == 7


def test_check_id_non_weakrefable_is_held_strongly():
    lst = [1, 2]
    t = _C.GuardTree()
    t.arg(0).check_id(lst, 1)
    assert t.check(f, args_of(lst)) == -1
    assert t.check(f, args_of([1, 2])) == 1
    t.arg(1).check_id(None, 2)
    assert t.check(f, args_of(lst, None)) == -1
    assert t.check(f, args_of(lst, 0)) == 2


def test_check_type_weak_for_local_classes():
    class Local:
        pass

    t = _C.GuardTree()
    t.arg(0).check_type(Local, 4)
    assert t.check(f, args_of(Local())) == -1
    ref = weakref.ref(Local)
    del Local
    gc.collect()
    assert ref() is None
    assert t.check(f, args_of(1)) == 4


@pytest.mark.parametrize(
    "const,good,bad",
    [
        (None, None, 0),
        (True, True, 1),
        (3, 3, 3.0),
        (3, 3, True),
        (2**80, 2**80, 2**80 + 1),
        (1.5, 1.5, 1.25),
        (0.0, 0.0, -0.0),
        (float("nan"), float("nan"), 1.0),
        ("s", "s", b"s"),
        (b"b", b"b", "b"),
        ((1, "a", (2.0, None)), (1, "a", (2.0, None)), (1, "a", (2, None))),
    ],
)
def test_check_eq(const, good, bad):
    t = _C.GuardTree()
    t.arg(0).check_eq(const, 9)
    assert t.check(f, args_of(good)) == -1
    assert t.check(f, args_of(bad)) == 9


def test_check_eq_non_literal_uses_exact_type_and_eq():
    class E:
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return isinstance(other, E) and other.v == self.v

        __hash__ = None  # type: ignore[assignment]

    t = _C.GuardTree()
    t.arg(0).check_eq(E(1), 2)
    assert t.check(f, args_of(E(1))) == -1
    assert t.check(f, args_of(E(2))) == 2


def test_nan_constant_matches_itself():
    t = _C.GuardTree()
    t.arg(0).check_eq(math.nan, 0)
    assert t.check(f, args_of(float("nan"))) == -1


def test_check_dict_keys_in_order():
    t = _C.GuardTree()
    t.arg(0).check_dict_keys(("a", "b"), 5)
    assert t.check(f, args_of({"a": 1, "b": 2})) == -1
    assert t.check(f, args_of({"b": 2, "a": 1})) == 5
    assert t.check(f, args_of({"a": 1})) == 5
    assert t.check(f, args_of({"a": 1, "b": 2, "c": 3})) == 5
    assert t.check(f, args_of([("a", 1)])) == 5
    t2 = _C.GuardTree()
    t2.arg(0).check_dict_keys((1, "x"), 1)
    assert t2.check(f, args_of({1: 0, "x": 0})) == -1
    assert t2.check(f, args_of({True: 0, "x": 0})) == 1  # exact key types


def test_check_len_and_not_none():
    class Sized:
        def __len__(self):
            return 4

    t = _C.GuardTree()
    t.arg(0).check_len(2, 1)
    t.arg(1).check_not_none(2)
    assert t.check(f, args_of([1, 2], 0)) == -1
    assert t.check(f, args_of((1, 2), 0)) == -1
    assert t.check(f, args_of({1: 1, 2: 2}, 0)) == -1
    assert t.check(f, args_of([1], 0)) == 1
    assert t.check(f, args_of([1, 2], None)) == 2
    t2 = _C.GuardTree()
    t2.arg(0).check_len(4, 0)
    assert t2.check(f, args_of(Sized())) == -1
    assert t2.check(f, args_of(5)) == 0  # len() raises: fails, no exception leaks


def test_check_contains():
    class Bag:
        def __contains__(self, key):
            return key == "w"

    t = _C.GuardTree()
    t.arg(0).check_contains("weight", False, 3)  # a module's __dict__ not shadowing a parameter
    t.arg(1).check_contains("w", True, 4)
    assert t.check(f, args_of({"x": 1}, {"w": 0})) == -1
    assert t.check(f, args_of({"weight": 1}, {"w": 0})) == 3
    assert t.check(f, args_of({}, {})) == 4
    assert t.check(f, args_of({}, Bag())) == -1  # not a dict: its own __contains__
    assert t.check(f, args_of({}, 5)) == 4  # `in` raises: fails, no exception leaks
    assert t.arg(0).describe()["checks"] == [("contains", 3, ("weight", False))]
    with pytest.raises(TypeError):
        _C.GuardTree().arg(0).check_contains([], True, 0)  # unhashable key


def test_check_fn():
    t = _C.GuardTree()
    t.arg(0).check_fn(lambda v: v > 2, 6)
    assert t.check(f, args_of(3)) == -1
    assert t.check(f, args_of(1)) == 6
    assert t.check(f, args_of("x")) == 6  # raising counts as failing


def test_accessors_attr_item_len_type():
    t = _C.GuardTree()
    node_at(t, [("arg", 0), ("attr", "w"), ("item", 1)]).check_eq(20, 1)
    node_at(t, [("arg", 0), ("attr", "d"), ("item", "key")]).check_eq("v", 2)
    node_at(t, [("arg", 0), ("attr", "w"), ("len",)]).check_eq(3, 3)
    node_at(t, [("arg", 0), ("attr", "w"), ("type",)]).check_id(list, 4)
    node_at(t, [("arg", 0), ("attr", "w"), ("item", -1)]).check_eq(30, 5)
    good = Obj(w=[10, 20, 30], d={"key": "v"})
    assert t.check(f, args_of(good)) == -1
    assert t.check(f, args_of(Obj(w=[10, 21, 30], d={"key": "v"}))) == 1
    assert t.check(f, args_of(Obj(w=[10, 20, 30], d={"key": "u"}))) == 2
    assert t.check(f, args_of(Obj(w=[10, 20, 30, 30], d={"key": "v"}))) == 3
    assert t.check(f, args_of(Obj(w=(10, 20, 30), d={"key": "v"}))) == 4
    assert t.check(f, args_of(Obj(w=[10, 20, 31], d={"key": "v"}))) == 5
    # accessor failures report the first id below the accessor
    assert t.check(f, args_of(Obj(d={"key": "v"}))) == 1          # no attribute w
    assert t.check(f, args_of(Obj(w=[10], d={"key": "v"}))) == 1   # index out of range
    assert t.check(f, args_of(Obj(w=[10, 20, 30], d={}))) == 2     # missing key


def test_item_on_custom_getitem_and_tuple_keys():
    class M:
        def __getitem__(self, k):
            return k * 2

    t = _C.GuardTree()
    t.arg(0).item(4).check_eq(8, 0)
    t.arg(1).item((1, 2)).check_eq("t", 1)
    assert t.check(f, args_of(M(), {(1, 2): "t"})) == -1
    assert t.check(f, args_of(M(), {(1, 2): "u"})) == 1


def test_dict_keys_and_values_by_position():
    # keys that are not constants (tensors) are read by position in storage order
    d = {"a": 1}
    t = _C.GuardTree()
    t.arg(0).dict_keys().item(0).check_eq("a", 0)
    t.arg(0).dict_values().item(0).check_eq(1, 1)
    assert t.check(f, args_of(d)) == -1
    assert t.check(f, args_of({"a": 2})) == 1
    assert t.check(f, args_of({"b": 1})) == 0
    assert t.check(f, args_of([("a", 1)])) == 0  # not a dict: the accessor fails its first check
    assert path_expr([("arg", 0), ("dict_keys",), ("item", 1)], ["d"]) == "list(L['d'].keys())[1]"
    obj = object()
    t2 = _C.GuardTree()
    node_at(t2, [("arg", 0), ("dict_keys",), ("item", 1)]).check_id(obj, 0)
    assert t2.check(f, args_of({0: 0, obj: 1})) == -1
    assert t2.check(f, args_of({obj: 0, 0: 1})) == 0
    assert t2.check(f, args_of({0: 0})) == 0  # no item 1


def test_root_sources_closure_global_builtin_frame_args_call():
    captured = [1, 2]

    def g(x, *, y=1):
        return captured, x, y

    state = {"flag": True}
    t = _C.GuardTree()
    t.closure(0).check_id(captured, 0)
    t.global_("GLOBAL_VALUE").check_eq(5, 1)
    t.builtin("len").check_id(len, 2)
    t.frame_args().check_fn(lambda a: a[0] == a[1], 3)
    t.call(lambda: state["flag"]).check_eq(True, 4)
    assert t.check(g, (7, 7)) == -1
    assert t.check(g, (7, 8)) == 3
    state["flag"] = False
    assert t.check(g, (7, 7)) == 4
    state["flag"] = True
    global GLOBAL_VALUE
    GLOBAL_VALUE = 6
    try:
        assert t.check(g, (7, 7)) == 1
    finally:
        GLOBAL_VALUE = 5
    t2 = _C.GuardTree()
    t2.global_("NO_SUCH_GLOBAL").check_eq(1, 8)
    assert t2.check(g, (1, 1)) == 8
    t3 = _C.GuardTree()
    t3.arg(5).check_eq(1, 9)  # slot out of range
    assert t3.check(g, (1, 1)) == 9


def test_first_failing_id_in_insertion_order_and_shared_prefixes():
    t = _C.GuardTree()
    a = t.arg(0)
    assert t.arg(0) is a
    assert a.attr("x") is a.attr("x")
    assert a.item(1) is not a.item(True)  # keys compare with exact types
    a.check_type(Obj, 0)
    a.attr("x").check_eq(1, 1)
    a.attr("y").check_eq(2, 2)
    assert t.check(f, args_of(Obj(x=0, y=0))) == 1
    assert t.check(f, args_of(Obj(x=1, y=0))) == 2
    assert t.check(f, args_of(5)) == 0
    # one shared attr node is evaluated once per check
    reads = []

    class Counting:
        @property
        def p(self):
            reads.append(1)
            return 3

    t2 = _C.GuardTree()
    t2.arg(0).attr("p").check_type(int, 0)
    t2.arg(0).attr("p").check_eq(3, 1)
    assert t2.check(f, args_of(Counting())) == -1
    assert len(reads) == 1


def test_construction_errors():
    t = _C.GuardTree()
    with pytest.raises(TypeError):
        t.check_eq(1, 0)  # root has no value
    with pytest.raises(TypeError):
        t.attr("x")
    with pytest.raises(TypeError):
        t.arg(0).arg(1)  # arg() is a root accessor
    with pytest.raises(ValueError):
        t.arg(0).check_eq(1, -1)
    with pytest.raises(TypeError):
        t.arg(0).check_type(3, 0)
    with pytest.raises(TypeError):
        t.arg(0).item([1])  # unhashable key
    with pytest.raises(TypeError):
        _C.GuardNode()
    with pytest.raises(ValueError):
        node_at(t, [("attr", "x")])


def test_describe_and_format():
    t = _C.GuardTree()
    node_at(t, [("arg", 0), ("attr", "weight")]).check_type(int, 0)
    t.global_("G").check_eq((1, 2), 1)
    t.arg(1).check_len(3, 2)
    infos = list(iter_checks(t, ["self", "xs"]))
    assert [(i.id, i.kind, i.expr) for i in infos] == [
        (0, "type", "L['self'].weight"),
        (1, "eq", "G['G']"),
        (2, "len", "L['xs']"),
    ]
    text = format_tree(t, ["self", "xs"])
    assert "L['self'].weight" in text and "[1] == (1, 2)" in text and "[2] len == 3" in text
    assert path_expr([("arg", 0), ("item", 0), ("len",)], ["x"]) == "len(L['x'][0])"
    assert format_tree(_C.GuardTree()).startswith("<empty")


def test_guards_select_entries_in_the_hook():
    def g(x, mode):
        return (running_code_name(), x * 2 if mode == "double" else x)

    def guard_factory(func, args):
        t = _C.GuardTree()
        t.arg(1).check_eq(args[1], 0)
        t.arg(0).check_type(type(args[0]), 1)
        return t

    comp = Compiler(g, guard_factory=guard_factory)
    _C.set_callback(comp)
    try:
        out = [g(1, "double"), g(2, "double"), g(3, "id"), g(4.0, "id"), g(5, "double"), g(6, "id")]
    finally:
        _C.set_callback(None)
    assert out == [("g__repl", 2), ("g__repl", 4), ("g__repl", 3), ("g__repl", 4.0),
                   ("g__repl", 10), ("g__repl", 6)]
    assert [c[1] for c in comp.calls] == [(1, "double"), (3, "id"), (4.0, "id")]
    entries = _C.cache_entries(g.__code__)
    assert len(entries) == 3
    # most recently hit first: last call was (6, "id") -> the int/"id" entry
    assert entries[0][0].check(g, (6, "id")) == -1
    assert entries[1][0].check(g, (5, "double")) == -1


def test_guard_python_check_may_reset_cache_safely():
    def g(x):
        return running_code_name(), x

    def resetting(v):
        _C.reset()
        return False

    calls = []

    def cb(func, args):
        if func is not g:
            return None
        calls.append(args)
        t = _C.GuardTree()
        t.arg(0).check_fn(resetting, 0)  # always fails, and drops the entry being checked
        from .core_helpers import flat_code
        return (t, flat_code(g))

    _C.set_callback(cb)
    try:
        assert g(1) == ("g__repl", 1)
        assert g(2) == ("g__repl", 2)
    finally:
        _C.set_callback(None)
    assert calls == [(1,), (2,)]


class _Interrupt(BaseException):
    """Stands in for KeyboardInterrupt: a BaseException that is not an Exception."""


def test_base_exceptions_in_checks_propagate_ordinary_ones_fail():
    def interrupt(v):
        raise _Interrupt()

    t = _C.GuardTree()
    t.arg(0).check_fn(interrupt, 0)
    with pytest.raises(_Interrupt):
        t.check(f, args_of(1))

    class Prop:
        @property
        def p(self):
            raise _Interrupt()

    t2 = _C.GuardTree()
    t2.arg(0).attr("p").check_eq(1, 0)
    with pytest.raises(_Interrupt):
        t2.check(f, args_of(Prop()))

    def g(x):
        return running_code_name()

    calls = []

    def cb(func, args):
        if func is not g:
            return None
        calls.append(args)
        t3 = _C.GuardTree()
        t3.arg(0).check_fn(lambda v: v == 1 or interrupt(v), 0)
        from .core_helpers import flat_code
        return (t3, flat_code(g))

    _C.set_callback(cb)
    try:
        assert g(1) == "g__repl"
        assert g(1) == "g__repl"
        with pytest.raises(_Interrupt):
            g(2)
    finally:
        _C.set_callback(None)
    assert calls == [(1,)]


class FakeDevice:
    def __init__(self, type_: str, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, FakeDevice) and (self.type, self.index) == (other.type, other.index)

    __hash__ = None  # type: ignore[assignment]


class FakeTensor:
    """Tensor-like object with Python properties: exercises the generic (non-getset) path."""

    def __init__(self, shape, stride, dtype="f32", device=FakeDevice("cpu"), requires_grad=False):
        self._shape, self._stride = tuple(shape), None if stride is None else tuple(stride)
        self.dtype, self.device, self.requires_grad = dtype, device, requires_grad

    @property
    def shape(self):
        return self._shape

    def stride(self):
        if self._stride is None:
            raise RuntimeError("no strides")
        return self._stride


def test_tensor_check_generic_path_without_torch():
    F32, F64 = "f32", "f64"
    x = FakeTensor((4, 3), (3, 1), dtype=F32)
    t = _C.GuardTree()
    t.arg(0).check_tensor(FakeTensor, F32, FakeDevice("cpu"), False, (4, None), (3, 1), 1)
    assert t.check(f, args_of(x)) == -1
    assert t.check(f, args_of(FakeTensor((4, 7), (3, 1)))) == -1          # dynamic dim 1
    assert t.check(f, args_of(FakeTensor((5, 3), (3, 1)))) == 1
    assert t.check(f, args_of(FakeTensor((4, 3), (1, 4)))) == 1
    assert t.check(f, args_of(FakeTensor((4, 3), (3, 1), dtype=F64))) == 1  # dtype by identity
    assert t.check(f, args_of(FakeTensor((4, 3), (3, 1), device=FakeDevice("meta")))) == 1
    assert t.check(f, args_of(FakeTensor((4, 3), (3, 1), requires_grad=True))) == 1
    assert t.check(f, args_of(FakeTensor((4, 3, 1), (3, 1, 1)))) == 1
    assert t.check(f, args_of(3)) == 1
    broken = FakeTensor((4, 3), None)  # stride() raises: a failure, not an error
    assert t.check(f, args_of(broken)) == 1


def test_failing_check_helper_names_the_accessor():
    from pyjit.guards.tree import failing_check

    t = _C.GuardTree()
    node_at(t, [("arg", 0), ("attr", "w")]).check_eq(3, 0)
    node_at(t, [("arg", 1), ("len",)]).check_eq(2, 1)
    assert failing_check(t, f, args_of(Obj(w=3), [1, 2])) is None
    info = failing_check(t, f, args_of(Obj(w=3), [1]), ["self", "xs"])
    assert (info.id, info.kind, info.expr, info.payload) == (1, "eq", "len(L['xs'])", 2)
