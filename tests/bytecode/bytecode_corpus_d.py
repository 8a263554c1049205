"""Executing corpus, part D: more small functions (numbers, containers, loops, cleanup)."""
from __future__ import annotations

from bytecode_corpus_base import LOG, CM, case


@case(3)
def generator_return_value(n):
    def g():
        for i in range(n):
            yield i
        return "end"

    def wrapper():
        r = yield from g()
        LOG.append(r)
    return list(wrapper())


@case(1.5)
def float_ops(x):
    return x * 2, x / 3, x // 1, -x, abs(-x), round(x), int(x), x ** 0.5, x == 1.5


@case(10 ** 20)
def bigint_ops(x):
    return x + 1, x * x, x // 7, x % 13, -x, x >> 10, str(x)[:5]


@case([1, 2, 3])
def mutation_through_alias(xs):
    ys = xs
    ys.append(len(xs))
    zs = xs[:]
    zs.append(0)
    return xs, zs


@case(2)
def print_to_log(x):
    import io
    buf = io.StringIO()
    print("value", x, sep="=", end="!", file=buf)
    return buf.getvalue()


@case(3)
def accumulate_dict_of_lists(n):
    groups = {}
    for i in range(n * 3):
        groups.setdefault(i % n, []).append(i)
    return groups


@case("level")
def palindrome(s):
    i, j = 0, len(s) - 1
    while i < j:
        if s[i] != s[j]:
            return False
        i += 1
        j -= 1
    return True


@case([5, 3, 8, 1])
def binary_search_after_sort(xs):
    xs = sorted(xs)
    target = 5
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo, xs


@case(4)
def two_dimensional_loop_break(n):
    found = None
    for i in range(n):
        for j in range(n):
            if i * j == 6:
                found = (i, j)
                break
        if found:
            break
    return found


@case(3)
def closure_over_loop_var_in_with(n):
    fs = []
    with CM("cl"):
        for i in range(n):
            fs.append(lambda i=i: i * i)
    return [f() for f in fs]


@case(2)
def kwargs_merge(x):
    def f(**kw):
        return sorted(kw.items())
    base = {"a": 1}
    return f(**base, b=x), f(**base, **{"c": x}), f()


@case(3)
def str_join_generator(n):
    return ",".join(str(i) for i in range(n)), "".join(reversed("abc"))


@case(5)
def early_exit_try(n):
    for i in range(n):
        try:
            if i == 3:
                return i
        except Exception:
            pass
    return -1


@case(2)
def multiple_except_handlers(x):
    out = []
    for exc in (KeyError, IndexError, ValueError, TypeError):
        try:
            raise exc(x)
        except KeyError:
            out.append("k")
        except (IndexError, ValueError) as e:
            out.append(type(e).__name__)
        except Exception:
            out.append("other")
    return out


@case(3)
def object_identity_checks(n):
    a = [n]
    b = a
    c = list(a)
    return a is b, a is c, a == c, None is None


@case(4)
def numeric_tower(n):
    from fractions import Fraction
    f = Fraction(n, 3)
    return f + 1, f * 3, float(f), complex(n, 1) * 1j


@case(3)
def deque_rotation(n):
    from collections import deque
    d = deque(range(n))
    d.rotate(1)
    d.appendleft(-1)
    return list(d)


@case(2)
def sorted_with_keys(x):
    people = [("bob", 30), ("al", 25), ("cy", 30)]
    return sorted(people, key=lambda p: (-p[1], p[0])), sorted(people)[x]


@case(3)
def local_function_recursion_closure(n):
    seen = []

    def walk(k):
        seen.append(k)
        if k > 0:
            walk(k - 1)
    walk(n)
    return seen


@case(4)
def conditional_del(n):
    a = n
    b = n * 2
    if n > 2:
        del a
    try:
        return a, b
    except UnboundLocalError:
        return "a deleted", b


@case(3)
def list_of_dicts_transform(n):
    rows = [{"id": i, "v": i * i} for i in range(n)]
    for r in rows:
        r["even"] = r["v"] % 2 == 0
    return rows


@case(2)
def unpack_in_with_target(x):
    class PairCM:
        def __enter__(self):
            return (x, x + 1)

        def __exit__(self, *a):
            return False

    with PairCM() as (a, b):
        s = a + b
    return s


class _SuperBase:
    def total(self, xs):
        return sum(xs)


class _SuperChild(_SuperBase):
    """Methods using zero-argument super() are corpus functions too (resumed inside a loop)."""

    def __eq__(self, other):
        return type(other) is _SuperChild

    def __repr__(self):
        return "_SuperChild()"

    def total(self, xs):
        out = 0
        for x in xs:
            out += x
            LOG.append(super().total([x, x]))
        s = super()
        return out, s.total(xs)

    def total_with_cell(self, xs):
        get_self = lambda: self  # noqa: E731  (self is a cell)
        for x in xs:
            LOG.append(super().total([x]))
        return get_self() is self, super().total(xs)


case(_SuperChild(), [1, 2])(_SuperChild.total)
case(_SuperChild(), [3])(_SuperChild.total_with_cell)


def _make_closure_case():
    scale = 3
    offsets = (1, 2)

    def closure_fn(n):
        """A corpus function with free variables: resumed with the original closure."""
        total = 0
        for i in range(n):
            total += scale * i + offsets[i % 2]
            with CM("closure"):
                LOG.append((i, total, scale))
        return total

    return closure_fn


case(4)(_make_closure_case())
