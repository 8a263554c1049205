"""The long tail of Python values torch.compile traces, part 1: subclasses of builtins (``dict``,
``list``, ``int``, ``str``, ``tuple``) and user classes with operator dunders (part 2:
test_long_tail_values_keys.py).

Every case (tests/e2e/long_tail_values_support.py) runs eagerly and under ``pyjit.jit`` on fresh, identical arguments for three calls
(so the later calls take the cache-hit path) and compares results and the arguments after the
call. Its graph count is compared with torch.compile's on the same function (torch.compile is
only the peer here, with a counting backend; skipped where it cannot run), and pyjit must not
break the graph (``pyjit.explain``) where the case says torch.compile does not either.
"""
from __future__ import annotations

import pytest

import pyjit

from .long_tail_values_support import check, plain_state, rand
from .support import CountingBackend, assert_same

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


# -- 1. subclasses of builtins -----------------------------------------------------------------

class MyDict(dict):
    def total(self):
        return sum(self.values())


class ScaledDict(dict):
    def __getitem__(self, k):
        return dict.__getitem__(self, k) * 2


class MyList(list):
    def double(self):
        return [v * 2 for v in self]


class InitList(list):
    def __init__(self, items, scale):
        super().__init__(items)
        self.scale = scale

    def total(self):
        return sum(self) * self.scale


class MyInt(int):
    pass


class MyStr(str):
    pass


def test_dict_subclass_built_passed_and_returned():
    def built(x):
        d = MyDict()
        d["a"] = x
        d["b"] = x * 2
        return d.total(), d

    def passed(x, d):
        return x + d["a"] + d.total()

    check(built)
    check(passed, lambda i: (rand(i, 4), MyDict(a=rand(i + 10, 4), b=rand(i + 20, 4))))


def test_dict_subclass_methods_called_on_the_class():
    def fn(x):
        d = MyDict(a=x)
        MyDict.__setitem__(d, "b", x + 1)
        dict.__setitem__(d, "c", x + 2)
        return MyDict.__getitem__(d, "a") + dict.__getitem__(d, "b") + d["c"], dict.get(d, "zz", 3)

    check(fn)


def test_overridden_getitem_of_a_dict_subclass_is_inlined():
    def built(x):
        d = ScaledDict(a=x)
        return d["a"] + 1

    def passed(x, d):
        return d["a"] + x

    check(built)
    check(passed, lambda i: (rand(i, 4), ScaledDict(a=rand(i + 3, 4))))


def test_list_subclass_built_in_the_trace():
    def fn(x):
        l = InitList([x, x * 2], 3)
        l.append(x)
        list.append(l, x + 1)
        return l.total(), l, len(l), l[-1]

    def compare(expected, actual, *_):
        assert type(actual[1]) is InitList and actual[1].scale == 3
        assert_same(plain_state(expected), plain_state(actual), exact=False)

    check(fn, compare=compare)


def test_list_subclass_passed_in_read_and_mutated():
    def fn(x, l):
        l.append(x)
        return x + l[0] + sum(l.double()), len(l)

    def through_the_class(x, l):
        MyList.append(l, x * 2)  # torch.compile breaks here ("type.append"); pyjit has one graph
        return sum(l.double())

    make = lambda i: (rand(i, 4), MyList([rand(i + 5, 4)]))  # noqa: E731
    check(fn, make)
    assert check(through_the_class, make, peer=False).frame_count == 1


class MyTuple(tuple):
    def first(self):
        return self[0]

    @property
    def size(self):
        return len(self)


class Tagged(int):
    def doubled(self):
        return self * 2


def test_int_str_and_tuple_subclasses_built_in_the_trace():
    def fn(x):
        n = Tagged(3)
        s = MyStr("abc")
        t = MyTuple((x, x + 1))
        return x * n + n.doubled() + len(s.upper()) + t.first() + t[1] * t.size, n, t, s

    def compare(expected, actual, *_):
        for e, a in zip(expected, actual):
            assert type(a) is type(e)
        assert_same(expected[0], actual[0], exact=False)
        assert_same(list(expected[2]), list(actual[2]), exact=False)
        assert (actual[1], actual[3]) == (expected[1], expected[3])

    jf = pyjit.jit(fn, backend=CountingBackend())
    first, second = jf(rand(0, 4))[1], jf(rand(0, 4))[1]
    assert first == second and first is not second, "a new instance per call, as eager builds"
    check(fn, compare=compare)


def test_int_and_str_subclasses_passed_in():
    def fn(x, n, s):
        if s.startswith("a"):
            return x * n + len(s)
        return x

    check(fn, lambda i: (rand(i, 4), MyInt(3), MyStr("ab")))


# -- 2. user classes with operator dunders -----------------------------------------------------

class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, o):
        return Vec(self.t + (o.t if isinstance(o, Vec) else o))

    def __radd__(self, o):
        return Vec(o + self.t)

    def __mul__(self, o):
        return Vec(self.t * o)

    def __neg__(self):
        return Vec(-self.t)

    def __getitem__(self, i):
        return self.t[i]

    def __len__(self):
        return self.t.shape[0]

    def __contains__(self, v):
        return v == 1

    def __bool__(self):
        return self.t.shape[0] > 2

    def __iter__(self):
        return iter([self.t, self.t * 2])

    def __eq__(self, o):
        return isinstance(o, Vec) and o.t is self.t

    def __lt__(self, o):
        return len(self) < len(o)

    def __call__(self, y):
        return self.t + y

    __hash__ = None


class Countdown:
    """An iterator whose ``__iter__`` returns itself."""

    def __init__(self, n):
        self.n = n
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


class OnlyRadd:
    def __init__(self, k):
        self.k = k

    def __radd__(self, o):
        return o * self.k


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_arithmetic_dunders_and_reflected_forms_built_in_the_trace():
    def fn(x):
        v = Vec(x)
        w = v + 1
        z = 2 + v
        u = v * 3
        n = -v
        w += z
        return (w + u + n).t, (x + OnlyRadd(3)) if False else 5 + OnlyRadd(2)

    check(fn)


def test_arithmetic_dunders_on_an_object_passed_in():
    def fn(x, v):
        return (v + x).t, (v * 2).t, (v + v).t

    check(fn, lambda i: (rand(i, 4), Vec(rand(i + 1, 4))))


def test_tensor_plus_user_object_calls_its_radd():
    # Tensor.__add__ gives NotImplemented for a plain object, so Python calls OnlyRadd.__radd__.
    # torch.compile breaks the graph here; pyjit traces it (one graph, fewer than the peer).
    def fn(x, o):
        return x + o

    be = check(fn, lambda i: (rand(i, 4), OnlyRadd(3)), peer=False)
    assert be.frame_count == 1


def test_getitem_len_contains_eq_lt_call():
    def fn(x):
        v, w = Vec(x), Vec(x)
        return v[0] + len(v), 1 in v, 2 in v, v == v, v == w, v != w, v < Vec(x[:2]), v(x)

    def passed(x, v):
        return v(x) + v[1], 1 in v, v == v, len(v)

    check(fn)
    check(passed, lambda i: (rand(i, 4), Vec(rand(i + 2, 4))))


def test_bool_and_len_decide_branches():
    def built(x):
        if Vec(x):
            x = x + 1
        if not Sized(0):
            x = x * 2
        return x

    def passed(x, v, s):
        if v and s:
            return x + 1
        return x - 1

    check(built)
    check(passed, lambda i: (rand(i, 4), Vec(rand(i, 3 + i % 2)), Sized(i)), peer=False)


def test_iter_and_next_protocols():
    def fn(x):
        acc = x
        for t in Vec(x):
            acc = acc + t
        for k in Countdown(3):
            acc = acc * k
        it = Countdown(2)
        first = next(it)
        return acc, list(Vec(x)), list(Countdown(2)), first, next(it), next(it, -1)

    check(fn)


class Backwards:
    """``reversed()`` must use ``__reversed__``, not the forward iteration reversed."""

    def __init__(self, t):
        self.t = t

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i >= 3:
            raise IndexError(i)
        return self.t + i

    def __reversed__(self):
        return iter([self.t, self.t * 10])


class Indexed:
    def __init__(self, t):
        self.t = t

    def __len__(self):
        return 2

    def __getitem__(self, i):
        if i >= 2:
            raise IndexError(i)
        return self.t * (i + 1)


class Generating:
    def __init__(self, t):
        self.t = t

    def __iter__(self):
        for i in range(3):
            yield self.t * i


def test_reversed_and_generator_iter():
    def fn(x):
        return list(reversed(Backwards(x))), list(reversed(Indexed(x))), list(Backwards(x)), sum(Generating(x))

    check(fn)


def test_iterating_an_iterator_passed_in_advances_it():
    def fn(x, it):
        for k in it:
            x = x + k
        return x

    def make(i):
        return rand(i, 4), Countdown(2 + i)

    def compare(expected, actual, eager_args, jit_args):
        assert_same(expected, actual, exact=False)
        assert (jit_args[1].i, jit_args[1].n) == (eager_args[1].i, eager_args[1].n)

    check(fn, make, compare=compare, peer=False)
