"""Executing corpus, part C: more small functions mixing the constructs of parts A and B."""
from __future__ import annotations

from bytecode_corpus_base import LOG, CM, case


class _Node:
    def __init__(self, v, nxt=None):
        self.v = v
        self.nxt = nxt


@case(3)
def linked_list_walk(n):
    head = None
    for i in range(n):
        head = _Node(i, head)
    out = []
    node = head
    while node is not None:
        out.append(node.v)
        node = node.nxt
    probe = head
    while probe is None or probe.v > 0:
        probe = probe.nxt if probe is not None else head
    return out, probe.v


@case(4)
def while_none_loop(n):
    x = None
    count = 0
    while x is None:
        count += 1
        if count >= n:
            x = count
    y = 0
    while y is not None:
        y = y + 1 if y < n else None
    return x, y


@case(3)
def super_in_local_class(x):
    class A:
        def f(self, v):
            return ("A", v)

        @property
        def p(self):
            return "pa"

    class B(A):
        def f(self, v):
            first = super().f(v)
            attr = super().p
            sup = super()
            return first, attr, sup.f(v + 1)

    return B().f(x)


@case(2)
def super_with_cell_self(x):
    class A:
        def g(self):
            return "A.g"

    class B(A):
        def g(self):
            helper = lambda: self  # noqa: E731  (self becomes a cell)
            return super().g(), helper() is self

    return B().g()


@case(5)
def countdown_recursive(n):
    def down(k, acc):
        if k == 0:
            return acc
        return down(k - 1, acc + [k])
    return down(n, [])


@case([4, 1, 3])
def bubble_sort(xs):
    xs = list(xs)
    n = len(xs)
    for i in range(n):
        for j in range(n - i - 1):
            if xs[j] > xs[j + 1]:
                xs[j], xs[j + 1] = xs[j + 1], xs[j]
    return xs


@case(10)
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out


@case("a,b,,c")
def parse_csv(s):
    fields = []
    for part in s.split(","):
        if not part:
            continue
        fields.append(part.strip().upper())
    return fields


@case({"a": [1, 2], "b": [3]})
def dict_iteration(d):
    total = 0
    keys = []
    for k, vs in d.items():
        keys.append(k)
        for v in vs:
            total += v
    return total, keys, list(d.keys()), list(d.values())


@case(3)
def nested_functions_args(n):
    def f(*args, **kwargs):
        return len(args), sorted(kwargs)

    def g(a, /, b, *, c):
        return a + b + c

    return f(*range(n), x=1, **{"y": 2}), g(1, 2, c=3), g(1, b=2, c=3)


@case(2)
def positional_only_errors(x):
    def g(a, /, b):
        return a + b

    try:
        g(a=1, b=2)
    except TypeError as e:
        return "TypeError", x, "positional" in str(e)
    return None


@case(3)
def generator_pipeline(n):
    def numbers():
        i = 0
        while i < n:
            yield i
            i += 1

    def squares(it):
        for v in it:
            yield v * v

    return list(squares(numbers()))


@case(4)
def generator_send_protocol(n):
    def acc():
        total = 0
        while True:
            v = yield total
            if v is None:
                return total
            total += v

    g = acc()
    next(g)
    for i in range(n):
        g.send(i)
    try:
        g.send(None)
    except StopIteration as s:
        return s.value


@case(2)
def context_manager_decorated(x):
    import contextlib

    @contextlib.contextmanager
    def ctx(tag):
        LOG.append(("enter", tag))
        try:
            yield tag * 2
        finally:
            LOG.append(("exit", tag))

    with ctx(x) as v:
        w = v + 1
    return w


@case(3)
def exception_in_loop_with(n):
    out = []
    for i in range(n):
        try:
            with CM(f"c{i}"):
                if i == 1:
                    raise KeyError(i)
                out.append(i)
        except KeyError:
            out.append("k")
    return out


@case(1)
def try_except_return_values(x):
    def f(v):
        try:
            return 1 / v
        except ZeroDivisionError:
            return "inf"
        finally:
            LOG.append(v)
    return f(x), f(0)


@case(2)
def exception_attributes(x):
    try:
        raise ValueError("a", x)
    except ValueError as e:
        args = e.args
        tb = e.__traceback__ is not None
    return args, tb


@case(3)
def raise_in_finally(x):
    try:
        try:
            raise KeyError(x)
        finally:
            raise ValueError("from finally")
    except ValueError as e:
        return str(e), type(e.__context__).__name__


@case(5)
def loop_continue_finally(n):
    out = []
    i = 0
    while i < n:
        i += 1
        try:
            if i % 2:
                continue
            out.append(i)
        finally:
            out.append(-i)
    return out


@case(2)
def return_in_with_in_loop(x):
    for i in range(5):
        with CM("w"):
            if i == x:
                return i
    return None


@case(3)
def break_in_with(n):
    for i in range(n):
        with CM("b"):
            if i == 1:
                break
            LOG.append(i)
    return i


@case([1, 2, 3], 2)
def list_index_search(xs, target):
    try:
        return xs.index(target)
    except ValueError:
        return -1


@case(4)
def matrix_ops(n):
    m = [[i * n + j for j in range(n)] for i in range(n)]
    t = [list(row) for row in zip(*m)]
    diag = [m[i][i] for i in range(n)]
    return t, diag, sum(map(sum, m))


@case("mississippi")
def char_count(s):
    counts = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    return sorted(counts.items())


@case(12)
def gcd_lcm(n):
    def gcd(a, b):
        while b:
            a, b = b, a % b
        return a
    return gcd(n, 18), n * 18 // gcd(n, 18)


@case(20)
def primes(n):
    sieve = [True] * (n + 1)
    sieve[0:2] = [False, False]
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            for j in range(i * i, n + 1, i):
                sieve[j] = False
    return [i for i, p in enumerate(sieve) if p]


@case(7)
def fib_memo(n):
    memo = {}

    def fib(k):
        if k in memo:
            return memo[k]
        r = k if k < 2 else fib(k - 1) + fib(k - 2)
        memo[k] = r
        return r
    return fib(n), len(memo)


@case([3, -1, 2])
def conditional_expressions_in_calls(xs):
    return [abs(x) if x < 0 else x * 2 for x in xs], max(xs, key=lambda v: -v if v else 0)


@case(5)
def nonlocal_chain(n):
    a = 0

    def level1():
        nonlocal a
        b = 1

        def level2():
            nonlocal a, b
            a += n
            b += a
            return b
        return level2() + level2()
    return level1(), a


@case(3)
def class_with_slots_and_props(x):
    class P:
        __slots__ = ("_v",)

        def __init__(self, v):
            self._v = v

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, value):
            self._v = value * 2

    p = P(x)
    p.v = x + 1
    return p.v


@case(2)
def dunder_methods(x):
    class V:
        def __init__(self, v):
            self.v = v

        def __add__(self, o):
            return V(self.v + o.v)

        def __lt__(self, o):
            return self.v < o.v

        def __len__(self):
            return self.v

        def __getitem__(self, i):
            return i * self.v

        def __contains__(self, i):
            return i == self.v

        def __call__(self, k):
            return self.v * k

    a, b = V(x), V(x + 1)
    return (a + b).v, a < b, len(b), a[3], x in a, a(10)


@case(4)
def iterator_protocol(n):
    class It:
        def __init__(self):
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            if self.i >= n:
                raise StopIteration
            self.i += 1
            return self.i

    return list(It()), [v * 2 for v in It()]


@case(3)
def star_assignment_targets(n):
    data = list(range(n + 3))
    head, *body, tail = data
    [a, b], c = [1, 2], 3
    d = e = n
    x, (y, *z) = 1, (2, 3, 4)
    return head, body, tail, a + b + c, d + e, x, y, z


@case(2)
def chained_assignment_subscripts(x):
    d = {}
    lst = [0, 0, 0]
    d["a"] = lst[1] = x
    lst[0] = lst[2] = d["a"] * 2
    return d, lst


@case("abc", 2)
def string_formatting(s, n):
    return "%-5s|%3d|%r" % (s, n, s), "{:>{w}}".format(s, w=n + 4), s.center(7, "*"), f"{s=}"


@case(b"bytes")
def bytes_ops(b):
    return b[1:3], b.upper(), bytes(reversed(b)), b + b"!", b[0], f"{b!r}"


@case(3)
def global_counter_closure(n):
    def make():
        count = [0]

        def tick():
            count[0] += 1
            return count[0]
        return tick

    t = make()
    return [t() for _ in range(n)]


@case(6)
def early_returns(n):
    def classify(v):
        if v < 0:
            return "neg"
        if v == 0:
            return "zero"
        if v % 2:
            return "odd"
        return "even"
    return [classify(i - 2) for i in range(n)]


@case([1, 2, 3, 4])
def any_all_filters(xs):
    return any(x > 3 for x in xs), all(x > 0 for x in xs), list(filter(lambda v: v % 2, xs))


@case(3)
def exceptions_as_control(n):
    out = []
    it = iter(range(n))
    while True:
        try:
            v = next(it)
        except StopIteration:
            break
        out.append(v)
    return out


@case(5)
def deep_nesting(n):
    total = 0
    for i in range(n):
        if i % 2:
            for j in range(i):
                if j:
                    while j > 0:
                        j -= 2
                        if j == 1:
                            total += 100
                        else:
                            total += 1
    return total


@case(4)
def tuple_compare_sort(n):
    pairs = [(i % 2, -i) for i in range(n)]
    return sorted(pairs), min(pairs), pairs[0] < pairs[1]


@case(3)
def lambda_default_capture(n):
    adders = {i: (lambda x, i=i: x + i) for i in range(n)}
    return {k: f(10) for k, f in adders.items()}


@case(3)
def set_comprehension_closure(n):
    base = 10
    return sorted({base + i for i in range(n)}), {k: base for k in "ab"}


@case(2)
def delete_local_then_rebind(x):
    v = x
    del v
    try:
        v  # noqa: B018
    except UnboundLocalError:
        v = "rebound"
    return v


@case(3)
def walrus_in_comprehension_scope(n):
    total = 0
    vals = [total := total + i for i in range(n)]
    return vals, total


@case(2)
def isinstance_dispatch(x):
    def kind(v):
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "num"
        if isinstance(v, str):
            return "str"
        return "other"
    return [kind(v) for v in (x, True, "s", None, 1.5)]


@case(3)
def getattr_setattr(x):
    class O:
        pass
    o = O()
    setattr(o, "a", x)
    o.b = getattr(o, "a") + 1
    return getattr(o, "b"), getattr(o, "c", "default"), vars(o)


@case(4)
def enumerate_reverse_loop(n):
    out = []
    for i, v in reversed(list(enumerate(range(n, 0, -1)))):
        out.append(i * v)
    return out


@case(3)
def nested_comprehension_closure(n):
    k = 2
    return [[k * i + j for j in range(i)] for i in range(n)]


@case(2)
def comprehension_in_class(x):
    class C:
        vals = [i * 2 for i in range(3)]
        cfg = {name: len(name) for name in ("a", "bb")}
    return C.vals, C.cfg, x


@case(3)
def async_comprehension(n):
    async def agen():
        for i in range(n):
            yield i

    async def main():
        return [i async for i in agen()], {i: i async for i in agen()}

    coro = main()
    try:
        coro.send(None)
    except StopIteration as s:
        return s.value


@case(2)
def yield_in_try_finally(n):
    def g():
        try:
            yield 1
            yield 2
        finally:
            LOG.append("cleanup")
    out = []
    for v in g():
        out.append(v)
        if v == n - 1:
            break
    return out

