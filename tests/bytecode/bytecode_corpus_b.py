"""Executing corpus, part B: exceptions, match statements, classes, generators, async code,
and module-level / version-specific snippets (see ``bytecode_corpus_base``)."""
from __future__ import annotations

from bytecode_corpus_base import LOG, CM, case, snippet


class Err(Exception):
    pass


@case(0)
@case(1)
@case(2)
def try_except_else_finally(x):
    out = []
    try:
        out.append("try")
        if x == 1:
            raise KeyError("k")
        if x == 2:
            raise Err("e")
    except KeyError as e:
        out.append(("key", str(e)))
    except (TypeError, Err) as e:
        out.append(("err", type(e).__name__))
    else:
        out.append("else")
    finally:
        out.append("finally")
    return out


@case(3)
def try_finally_return(x):
    try:
        return x * 2
    finally:
        LOG.append("finally ran")


@case(3)
def finally_overrides(x):
    for i in range(x):
        try:
            if i == 1:
                continue
            if i == 2:
                break
        finally:
            LOG.append(("fin", i))
    return i


@case(0)
@case(1)
def reraise(x):
    try:
        try:
            if x:
                raise ValueError("inner")
            return "ok"
        except ValueError:
            LOG.append("caught, re-raising")
            raise
    except ValueError as e:
        return "outer " + str(e)


@case()
def raise_from():
    try:
        try:
            1 / 0
        except ZeroDivisionError as e:
            raise Err("wrapped") from e
    except Err as e:
        return str(e), type(e.__cause__).__name__, e.__suppress_context__


@case(5)
def raises_out(x):
    if x > 3:
        raise Err(f"too big: {x}")
    return x


@case(-1)
@case(4)
def assert_stmt(x):
    assert x > 0, f"x must be positive, got {x}"
    assert x
    return x


@case(2)
def nested_try(x):
    log = []
    try:
        try:
            log.append(1)
            raise ValueError(x)
        finally:
            log.append(2)
    except ValueError as e:
        log.append(("v", e.args))
        try:
            raise KeyError(x) from None
        except KeyError:
            log.append(3)
    return log


@case(1)
def exception_variable_cleared(x):
    e = "before"
    try:
        raise ValueError(x)
    except ValueError as e:  # noqa: F841
        pass
    try:
        return e  # noqa: F821
    except UnboundLocalError:
        return "cleared"


@case(0)
@case(1)
def except_star(x):
    out = []
    try:
        try:
            if x:
                raise ExceptionGroup("g", [ValueError(1), TypeError(2), KeyError(3)])
            out.append("none")
        except* ValueError as eg:
            out.append(("val", len(eg.exceptions)))
        except* TypeError:
            out.append("type")
    except ExceptionGroup as rest:
        out.append(("rest", [type(e).__name__ for e in rest.exceptions]))
    return out


@case(3)
def try_in_loop(n):
    out = []
    for i in range(n):
        try:
            if i == 1:
                raise ValueError(i)
            out.append(i)
        except ValueError:
            out.append("v")
            continue
        finally:
            out.append("f")
    return out


@case([1, 2])
@case((1, 2, 3))
@case({"x": 1, "y": 2})
@case({"x": 1})
@case(5)
@case("str")
@case([1, [2, 3]])
def match_basic(v):
    match v:
        case [a, b]:
            return ("pair", a, b)
        case (1, *rest):
            return ("starts1", rest)
        case {"x": x, "y": y}:
            return ("xy", x, y)
        case {"x": x, **others}:
            return ("x", x, others)
        case int(n) if n > 3:
            return ("bigint", n)
        case str() | bytes():
            return "text"
        case _:
            return "other"


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


@case(Point(0, 0))
@case(Point(1, 2))
@case(Point(3, 3))
@case(None)
@case(True)
def match_class(p):
    match p:
        case Point(0, 0):
            return "origin"
        case Point(x=1, y=yy):
            return ("x1", yy)
        case Point(a, b) if a == b:
            return ("diag", a)
        case None:
            return "none"
        case True:
            return "true"
        case _:
            return "other"


@case([1, [2, [3, 4]]])
@case([0])
def match_nested(v):
    match v:
        case [a, [b, [c, d]]] as whole:
            return a + b + c + d, len(whole)
        case [0 | 1 as z]:
            return ("z", z)
    return None


class Base:
    def __init__(self, v):
        self.v = v

    def describe(self):
        return f"Base({self.v})"

    @property
    def double(self):
        return self.v * 2


class Child(Base):
    kind = "child"

    def __init__(self, v, w):
        super().__init__(v)
        self.w = w

    def describe(self):
        return "Child:" + super().describe() + f"/{self.w}/{super().double}"

    @classmethod
    def make(cls, v):
        return cls(v, v + 1)

    @staticmethod
    def static(v):
        return v * 10


@case(3)
def classes_and_super(x):
    c = Child.make(x)
    return c.describe(), c.double, Child.static(x), c.kind, isinstance(c, Base)


@case(4)
def class_in_function(x):
    y = x * 2

    class Local:
        attr = y
        other: int = 5

        def get(self):
            return self.attr + x

    return Local().get(), Local.attr, Local.__annotations__, Local.__qualname__.split(".")[-1]


@case(2)
def class_body_ops(x):
    class K:
        a = x
        b = a + 1
        del a
        lst = [b * i for i in range(3)]

        def __repr__(self):
            return "K"

    return K.b, K.lst, hasattr(K, "a"), repr(K())


@case(4)
def generator_basic(n):
    def gen(k):
        for i in range(k):
            received = yield i
            if received:
                LOG.append(("got", received))
        return "done"

    g = gen(n)
    out = [next(g), g.send("hi"), next(g)]
    out += list(g)
    return out


@case(3)
def generator_yield_from(n):
    def inner(k):
        yield from range(k)
        return k * 10

    def outer(k):
        r = yield from inner(k)
        yield r

    return list(outer(n))


@case(3)
def generator_close_throw(n):
    def gen():
        try:
            for i in range(n):
                yield i
        except KeyError:
            yield "caught"
        finally:
            LOG.append("gen finally")

    g = gen()
    a = next(g)
    b = g.throw(KeyError("x"))
    g.close()

    def delegating():
        yield from gen()

    d = delegating()
    next(d)
    c = d.throw(KeyError("y"))
    d.close()
    return a, b, c


@case(5)
def generator_expression(n):
    g = (i * i for i in range(n) if i % 2)
    return list(g), sum(x for x in range(n)), any(x > 3 for x in range(n))


def _run_coro(coro):
    try:
        while True:
            coro.send(None)
    except StopIteration as stop:
        return stop.value


class _Awaitable:
    def __init__(self, v):
        self.v = v

    def __await__(self):
        yield None
        return self.v


class _ACM:
    async def __aenter__(self):
        LOG.append("aenter")
        return self

    async def __aexit__(self, *exc):
        LOG.append("aexit")
        return False


class _AIter:
    def __init__(self, n):
        self.i = 0
        self.n = n

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.i >= self.n:
            raise StopAsyncIteration
        self.i += 1
        return await _Awaitable(self.i)


@case(3)
def async_code(n):
    async def work(k):
        total = await _Awaitable(k)
        async with _ACM() as m:
            total += 1 if m else 0
        async for v in _AIter(k):
            total += v
        return total

    return _run_coro(work(n))


@case(3)
def async_generator(n):
    async def agen(k):
        for i in range(k):
            yield i * 2
            await _Awaitable(None)

    async def consume():
        out = [v async for v in agen(n)]
        async for v in agen(2):
            out.append(-v)
        return out

    return _run_coro(consume())


@case(2)
def await_in_try(n):
    async def w():
        try:
            await _Awaitable(1)
            raise ValueError(n)
        except ValueError as e:
            return e.args
        finally:
            LOG.append("afinally")

    return _run_coro(w())


@case(2)
def with_cm_in_generator(n):
    def gen():
        with CM("g"):
            yield n
            yield n + 1

    return list(gen())


# ---- module-level snippets: name-based opcodes, star imports, interactive printing
snippet("module_names", "x = 1\ny = x + 2\ndel x\ntry:\n    x\nexcept NameError:\n    z = 'gone'\nresult = (y, z)\n")
snippet("module_annotations", "a: int = 3\nb: str\nresult = sorted(__annotations__)\n")
snippet("module_star_import", "from math import *\nresult = floor(2.5)\n")
snippet("module_global_in_func", "g = 1\ndef f():\n    global g\n    g += 1\n    return g\nresult = (f(), f())\n")
snippet("interactive_print", "1 + 2", mode="single")
snippet("class_deref", "def f():\n    v = 5\n    class C:\n        w = v\n        v2 = [v for _ in range(2)]\n    return C.w, C.v2\nresult = f()\n")
snippet("class_global_lookup", "q = 3\nclass C:\n    q = q + 1\n    r = q\nresult = C.r\n")
# PEP 695 syntax (3.12+): type parameters and aliases use CALL_INTRINSIC_2, LOAD_LOCALS,
# LOAD_FROM_DICT_OR_DEREF and LOAD_FROM_DICT_OR_GLOBALS.
snippet(
    "pep695",
    "type Alias[T] = list[T]\n"
    "def first[T](xs: list[T]) -> T:\n    return xs[0]\n"
    "class Stack[T]:\n    items: list[T]\n    def __init__(self):\n        self.items = []\n"
    "    def push(self, x: T) -> None:\n        self.items.append(x)\n"
    "s = Stack()\ns.push(4)\n"
    "result = (first([7, 8]), s.items, Alias.__value__, Stack.__type_params__[0].__name__)\n",
    min_version=(3, 12),
)
snippet(
    "pep695_class_scope",
    "class Outer:\n    X = int\n    type A = X\n    def m[T](self, v: T) -> T:\n        return v\n"
    "result = (Outer.A.__value__, Outer().m(3))\n",
    min_version=(3, 12),
)
