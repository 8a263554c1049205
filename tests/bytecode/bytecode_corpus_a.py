"""Executing corpus, part A: expressions, control flow, calls, closures, data structures.

Every function is registered with one or more argument sets by ``@case(...)``. The tests run
each function before and after a bytecode edit (and resume it at every break point) and compare
results, raised exceptions, mutated arguments and the side-effect log ``LOG``.
Functions must be deterministic (no ids, no hashing of objects, no time).
"""
from __future__ import annotations

import functools
import operator

from bytecode_corpus_base import LOG, Box, CM, case, helper_global


@case(3, 4)
@case(-7, 2)
def arith(a, b):
    return (a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, a << 2, a >> 1, a & b, a | b, a ^ b, -a, +a, ~a)


@case(5, 3)
def inplace(a, b):
    x = a
    x += b
    x -= 1
    x *= b
    x //= 2
    x %= 7
    x **= 2
    x <<= 1
    x >>= 1
    x &= 0xFF
    x |= 0x10
    x ^= 3
    y = float(x)
    y /= 4
    return x, y


@case(Box(3), Box(4))
def matmul(a, b):
    c = a @ b
    a @= b
    return c.v, a.v


@case(1, 2)
@case(2, 2)
@case(3, 2)
def compare_all(a, b):
    return (a < b, a <= b, a == b, a != b, a > b, a >= b, a is b, a is not b, a in [b], a not in (b,))


@case(1, 2, 3)
@case(3, 2, 1)
def chained(a, b, c):
    return a < b < c, a < b > c, a == b == c


@case(0)
@case(5)
@case(-3)
def branches(x):
    if x > 0:
        r = "pos"
    elif x < 0:
        r = "neg"
    else:
        r = "zero"
    return r


@case(None)
@case(4)
def none_checks(x):
    out = []
    if x is None:
        out.append("none")
    if x is not None:
        out.append(x)
    return out


@case(10)
def while_loop(n):
    total = 0
    i = 0
    while i < n:
        i += 1
        if i % 3 == 0:
            continue
        if i > 8:
            break
        total += i
    else:
        total = -1
    return total, i


@case([1, 2, 3, 4, 5, 6])
@case([])
def for_else(xs):
    found = None
    for x in xs:
        if x > 4:
            found = x
            break
    else:
        found = "none"
    return found


@case(4, 3)
def nested_loops(n, m):
    out = []
    for i in range(n):
        for j in range(m):
            if (i + j) % 2:
                continue
            out.append((i, j))
    return out


@case(0, "x")
@case(3, "")
@case(None, [1])
def shortcircuit(a, b):
    return (a and b, a or b, not a, (a or 0) and b, a if a else b)


@case(5)
def ternary_chain(x):
    return "big" if x > 10 else "mid" if x > 3 else "small"


def _kwfn(a, b=2, *args, c=3, **kw):
    return (a, b, args, c, sorted(kw.items()))


@case()
def calls_kw():
    r1 = _kwfn(1)
    r2 = _kwfn(1, 5, 6, 7, c=9, d=10)
    r3 = _kwfn(a=3, b=4)
    return r1, r2, r3


@case([1, 2, 3], {"c": 4, "z": 5})
def calls_star(args, kwargs):
    r1 = _kwfn(*args)
    r2 = _kwfn(*args, **kwargs)
    r3 = _kwfn(0, *args, 9, **kwargs, y=1)
    r4 = _kwfn(**{"a": 1}, **kwargs)
    return r1, r2, r3, r4


@case("abc")
def method_calls(s):
    parts = [s.upper(), s.replace("b", "x"), "-".join([s, s]), s.count("a")]
    return parts


@case(5)
def closure_counter(n):
    count = 0

    def inc(k=1):
        nonlocal count
        count += k
        return count

    for _ in range(n):
        inc()
    inc(k=10)
    return count, inc()


@case(3)
def closure_late_binding(n):
    fs = [lambda i=i: i * 2 for i in range(n)]
    gs = [lambda: i for i in range(n)]
    return [f() for f in fs], [g() for g in gs]


@case(2)
def nested_closures(x):
    def outer(y):
        def inner(z):
            return x + y + z
        return inner
    return outer(10)(100)


@case(7)
def global_rw(x):
    global GLOBAL_COUNTER
    GLOBAL_COUNTER = x
    GLOBAL_COUNTER += 1
    return GLOBAL_COUNTER, helper_global(x)


@case()
def global_delete():
    global TEMP_GLOBAL
    TEMP_GLOBAL = 1
    v = TEMP_GLOBAL
    del TEMP_GLOBAL
    try:
        return v, TEMP_GLOBAL  # noqa: F821
    except NameError as e:
        return v, str(e)


@case(3)
def deref_delete(x):
    y = x

    def get():
        return y

    a = get()
    del y
    try:
        return a, get()
    except NameError as e:
        return a, type(e).__name__


@case([1, 2, 3, 4, 5])
def unpacking(xs):
    a, b, *rest = xs
    *init, last = xs
    first, *mid, end = xs
    (p, q), r = (1, 2), 3
    return a, b, rest, init, last, mid, p + q + r


@case((1, 2))
@case((1, 2, 3))
def unpack_error(t):
    try:
        a, b = t
        return a + b
    except ValueError as e:
        return str(e)


@case([1, 2], {3, 4}, {"a": 1})
def star_literals(lst, st, dct):
    t = (*lst, *lst)
    l2 = [*lst, 0, *st]
    s2 = {*lst, *st}
    d2 = {**dct, "b": 2, **{"c": 3}}
    return t, l2, sorted(s2), sorted(d2.items())


@case(3, "k")
def dict_literals(x, key):
    d1 = {"a": 1, "b": x}
    d2 = {key: x, "z": 0}
    d3 = {}
    d3[key] = x
    return sorted(d1.items()), sorted(d2.items()), d3


@case(list(range(10)))
def slicing(xs):
    a = xs[2:5]
    b = xs[::2]
    c = xs[-3:]
    d = xs[1:8:3]
    xs[0:2] = [100, 101]
    del xs[5]
    del xs[6:8]
    i, j = 1, 3
    e = xs[i:j]
    xs[i:j] = ["x"]
    return a, b, c, d, e, xs


@case({"a": 1, "b": 2})
def subscript_ops(d):
    d["c"] = d["a"] + d["b"]
    del d["a"]
    d.setdefault("z", []).append(1)
    return sorted(d.items())


@case(Box(1))
def attribute_ops(obj):
    obj.v += 10
    obj.w = obj.v * 2
    del obj.w
    return obj.v, hasattr(obj, "w")


@case(3.5, "txt", 7)
def fstrings(x, s, n):
    return f"{x}", f"{s!r}", f"{s!s:>6}", f"{n:04d}", f"{x:.2f}|{s!a}|{n:{n}}", f"{'nested ' + s}"


@case(6)
def walrus(n):
    out = []
    i = 0
    while (i := i + 1) < n:
        if (sq := i * i) > 10:
            out.append(sq)
    return out, [y for x in range(n) if (y := x * 2) > 4]


@case(4)
def comprehensions(n):
    lst = [i * i for i in range(n)]
    st = {i % 3 for i in range(n)}
    dct = {i: str(i) for i in range(n) if i % 2 == 0}
    gen = sum(i for i in range(n))
    nested = [(i, j) for i in range(n) for j in range(i) if j % 2 == 0]
    return lst, sorted(st), dct, gen, nested


@case(3)
def comprehension_shadow(x):
    i = "outer"
    vals = [i for i in range(x)]
    return i, vals, x


@case(3)
def comprehension_closure(n):
    fs = [lambda: k for k in range(n)]
    return [f() for f in fs]


@case([3, 1, 2])
def sorting_lambda(xs):
    return sorted(xs, key=lambda v: -v), list(map(lambda v: v + 1, xs)), functools.reduce(operator.add, xs)


@case(5)
def default_args(n):
    def f(a, b=n, *, c=n * 2):
        return a + b + c
    return f(1), f(1, 2), f(1, c=0)


@case()
def annotations_fn():
    def f(a: int, b: "str" = "x") -> list:
        return [a, b]
    return f(1), sorted(f.__annotations__)


def _deco(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        LOG.append(("call", fn.__name__))
        return fn(*a, **k)
    return wrapper


@case(2)
def decorators(x):
    @_deco
    def g(y):
        return y * 3
    return g(x), g.__name__


@case(2)
def lambdas(x):
    add = lambda a, b=1: a + b  # noqa: E731
    curry = lambda a: lambda b: a * b  # noqa: E731
    return add(x), add(x, 5), curry(x)(4)


@case(5)
def bool_ops(x):
    return bool(x), not x, x and not x, (x > 3) == True  # noqa: E712


@case("hello world")
def string_ops(s):
    return s.split(), s[::-1], s.title(), "%s-%d" % (s[:2], len(s)), "{}{}".format(s[0], s[-1])


@case(3)
def tuple_build(x):
    t = (x, x + 1, x + 2)
    empty = ()
    single = (x,)
    return t, empty, single, t + single, t * 2


@case(6)
def set_ops(n):
    a = {i for i in range(n)}
    b = {2, 3, 10}
    return sorted(a & b), sorted(a | b), sorted(a - b), sorted(a ^ b), 3 in a


@case([1, 2, 3])
def list_mutation(xs):
    xs.append(4)
    xs.extend([5, 6])
    xs.insert(0, 0)
    xs.pop()
    xs.remove(2)
    xs.reverse()
    return xs


@case(10)
def many_locals(n):
    a0 = n
    a1 = a0 + 1
    a2 = a1 + 1
    a3 = a2 + 1
    a4 = a3 + 1
    a5 = a4 + 1
    a6 = a5 + 1
    a7 = a6 + 1
    a8 = a7 + 1
    a9 = a8 + 1
    a10 = a9 + 1
    a11 = a10 + 1
    a12 = a11 + 1
    a13 = a12 + 1
    a14 = a13 + 1
    a15 = a14 + 1
    a16 = a15 + 1
    a17 = a16 + a0
    a18 = a17 + a1
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15 + a16 + a17 + a18


@case(2)
def swap_values(x):
    a, b, c = x, x + 1, x + 2
    a, b = b, a
    a, b, c = c, a, b
    return a, b, c


@case(4)
def recursion(n):
    def fact(k):
        return 1 if k <= 1 else k * fact(k - 1)
    return fact(n)


@case(3)
def loop_with_closure_cell(n):
    total = []
    for i in range(n):
        def add(v=i):
            total.append(v)
        add()
    return total


@case(5)
def range_step(n):
    return list(range(0, n * 3, 2)), list(range(n, 0, -1)), list(reversed(range(n)))


@case([("a", 1), ("b", 2)])
def for_unpack(pairs):
    out = {}
    for k, v in pairs:
        out[k] = v
    for i, (k, v) in enumerate(pairs):
        out[k + str(i)] = v * i
    return sorted(out.items())


@case(3)
def zip_enumerate(n):
    a = list(range(n))
    b = [x * x for x in a]
    return [(i, x, y) for i, (x, y) in enumerate(zip(a, b))]


@case(10)
def augmented_subscript(n):
    d = {"a": 1}
    lst = [1, 2, 3]
    d["a"] += n
    lst[1] *= n
    lst[-1] -= 1
    o = Box(2)
    o.v **= 3
    return d, lst, o.v


@case(7)
def builtin_calls(x):
    return abs(-x), divmod(x, 3), pow(x, 2, 5), round(x / 3, 2), min(x, 3), max([x, 9]), isinstance(x, int)


@case(3)
def conditional_import(x):
    import math
    from os import path as ospath
    from collections import OrderedDict, deque
    return math.floor(x / 2), ospath.join("a", "b"), list(OrderedDict(a=x)), len(deque([1, 2]))


@case(2)
def with_statement(x):
    with CM("a") as a:
        LOG.append(("body", a.name, x))
        y = x * 2
    return y


@case(2)
def with_nested(x):
    with CM("outer") as o, CM("inner") as i:
        LOG.append((o.name, i.name))
        with CM("deep"):
            x += 1
        x *= 2
    return x


@case(0)
@case(1)
def with_exception(x):
    try:
        with CM("e", suppress=bool(x)):
            LOG.append("before")
            raise ValueError("boom")
        return "suppressed"
    except ValueError as e:
        return "raised " + str(e)


@case(3)
def with_return_inside(x):
    with CM("r"):
        if x > 2:
            return "early"
        LOG.append("late")
    return "end"


@case(4)
def with_loop_inside(n):
    total = 0
    with CM("loop"):
        for i in range(n):
            total += i
            LOG.append(i)
    return total


@case(3)
def loop_with_inside(n):
    out = []
    for i in range(n):
        with CM(str(i)) as c:
            out.append(c.name)
    return out
