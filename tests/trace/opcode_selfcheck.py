"""Self-check of the symbolic interpreter's opcode handlers on Python-only functions.

Runs every function of :data:`FUNCTIONS` eagerly and through pyjit's Translator (constants only,
no tensors), and compares the results. It needs no torch: under an interpreter without torch,
put ``tests/trace/torch_stub`` first on ``sys.path`` (``--stub``). This is how the 3.12/3.13
opcode layouts (CALL/NULL order, LOAD_ATTR method bit, FOR_ITER/END_FOR, inlined comprehensions,
CALL_KW, SET_FUNCTION_ATTRIBUTE, TO_BOOL, FORMAT_*...) are exercised on this machine, where only
3.11 has torch. ``tests/trace/test_opcodes_other_pythons.py`` runs it for 3.12 and 3.13.

Each function's replacement code (assembled with pyjit.bytecode, see :func:`replay`) is run too.

Usage: python3.12 tests/trace/opcode_selfcheck.py --stub   (exit status 0 = all agree)
"""
from __future__ import annotations

import collections
import functools
import os
import sys
import traceback

if "--stub" in sys.argv:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_stub"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

Pair = collections.namedtuple("Pair", "a b")
G_SCALE = 3
G_LIST = ["global"]


class Obj:
    k = 2

    def __init__(self) -> None:
        self.v = 5
        self.items = ["attr"]

    def method(self, x, y=1):
        return self.v * x + y + self.k

    @property
    def prop(self):
        return self.v + 1


class Child(Obj):
    def method(self, x, y=1):
        return super().method(x, y) * 10


def _helper(a, b=2, *args, c=3, **kw):
    return a + b + c + sum(args) + sum(kw.values())


def _adder(n):
    def add(x):
        return x + n

    return add


def f_arith(x, y):
    z = x * y - x // 2 + x % 3 + 2 ** x
    z += 1
    z <<= 1
    return -z, +z, ~z, z / 4, x & y | 1 ^ 3, x >> 1, x < y <= 10, x == y, x != y


def f_calls(x):
    return _helper(x), _helper(x, 1, 2, 3, c=4, d=5), _helper(*[x, 1], **{"c": 0}), _adder(4)(x)


OBJ = Obj()
CHILD = Child()


def f_methods(x):
    o = OBJ
    return o.method(x), o.method(x, y=3), o.prop, CHILD.method(x), Obj.k, type(o).k


def f_loops(x):
    acc = 0
    for i in range(x):
        if i % 2:
            continue
        acc += i
        if acc > 100:
            break
    for i, (a, b) in enumerate(zip([1, 2, 3], "abc")):
        acc += i * a
    j = 0
    while j < 3:
        j += 1
    return acc, j


def f_comprehensions(x):
    lst = [i * x for i in range(4) if i != 2]
    st = {i % 2 for i in range(5)}
    dct = {str(i): i for i in range(3)}
    gen = sum(i for i in range(x))
    nested = [[i + j for j in range(2)] for i in range(2)]
    return lst, st, dct, gen, nested


def f_unpack(x):
    a, b, *c = [x, 2, 3, 4]
    (d, e), f = (1, 2), 3
    *g, h = range(3)
    first, *_ = "xyz"
    return a, b, c, d, e, f, g, h, first


def f_containers(x):
    lst = [1, 2]
    lst.append(x)
    lst.extend((5, 6))
    lst[0] = 9
    del lst[1]
    d = {"a": 1, **{"b": 2}}
    d["c"] = x
    t = (*lst, *d)
    return lst, d, t, lst[1:3], lst[::-1], d.get("z", 0), "a" in d, len(t), Pair(1, b=2).b


def f_strings(x):
    name = "n"
    return f"{name}={x}", f"{x:>4}|{x!r}", "-".join(["a", "b"]), "%d" % x, name.upper()


def f_lambda_default_closure(x):
    scale = 3
    fn = lambda v, k=2: v * k + scale  # noqa: E731
    fk = lambda *a, **kw: len(a) + len(kw)  # noqa: E731
    return fn(x), fn(x, k=5), fk(1, 2, z=3)


def f_nested_def(x):
    total = 0

    def bump(n, *, by=1):
        return n + by

    for i in range(3):
        total = bump(total, by=i)
    return total + x


def f_partial_and_builtins(x):
    p = functools.partial(_helper, c=0)
    return (p(x), min(3, x), max([1, x, 2]), abs(-x), sorted([3, 1, 2]), list(reversed((1, 2))),
            isinstance(x, int), hasattr(Obj, "k"), getattr(OBJ, "v", None), getattr(OBJ, "nope", 7), divmod(x, 3), round(2.5))


def f_bool_logic(x):
    a = x and 0
    b = x or 5
    c = not x
    d = None if x > 1 else "no"
    e = 1 if d is None else 2
    return a, b, c, d, e, all([1, x]), any([0, 0])


def f_globals_and_slices(x):
    seq = list(range(10))
    return seq[2:x], seq[x:], seq[:-1][::3], G_SCALE * x


def f_try_finally(x):
    try:
        y = x + 1
    finally:
        y = y * 2
    with_result = 0
    return y, with_result


def f_match_kwonly_defaults(x, *, k=4):
    return x + k


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def f_more_calls(x):
    lst = [3, 1, 2]
    args = (x, 1)
    return (OBJ.method(*args), max(*lst), sorted(lst, reverse=True), "{a}-{b}".format(a=1, b=x), _fib(x),
            dict(a=1, **{"b": 2}), list(enumerate("ab", start=1)), _helper(**{"a": 1, "b": 2}))


def f_cells_nonlocal(x):
    count = 0

    def inc(by):
        nonlocal count
        count += by
        return count

    inc(x)
    inc(2)
    return count, (lambda: count * 2)()


def f_misc_ops(x):
    lst = list(range(6))
    lst[1:3] = [9]
    s = "abcdef"[1:x]
    if (n := len(lst)) > 3:
        n += 100
    assert n > 0, "positive"
    y = x
    del y
    w = 6
    return lst, s, n, x in (1, 2, 4), x not in {3: 1}, f"{x:{w}}|", 1 < x < 10 > 2, x is not None


def _classify(s):
    match s:
        case (a, b) if b % 2 == 0:
            return ("pair-even", a)
        case [first, *rest]:
            return ("seq", first, rest)
        case {"k": v, **others}:
            return ("map", v, others)
        case Pair(a=1, b=bb):
            return ("pair-class", bb)
        case int(n) if n > 3:
            return ("int", n)
        case _:
            return "other"


def f_match(x):
    return [_classify(v) for v in ((1, 2), (1, 3), [4, 5, 6], {"k": 1, "j": 2}, Pair(1, 9), x, "s")]


def f_with_blocks(x):
    import torch

    states = []
    with torch.no_grad():
        states.append(torch.is_grad_enabled())
        with torch.enable_grad():
            states.append(torch.is_grad_enabled())
        y = x + 1
    states.append(torch.is_grad_enabled())
    return states, y


def _make_replacement_shapes():
    cell = [1, 2]

    def f_replacement_shapes(x, box, *, k=3):
        # Rebuilt by the replacement code: values returned unchanged, read back through their
        # sources (an argument: LOAD_FAST, a closure cell: LOAD_DEREF, a global: LOAD_GLOBAL, an
        # attribute: LOAD_ATTR, an item: BINARY_SUBSCR), a namedtuple (a call), dict/list/tuple
        # displays and constants.
        return box, cell, G_LIST, OBJ.items, box[1], Pair(x, k), {"b": box, "n": [x, None]}, (G_SCALE, -0.0)

    return f_replacement_shapes


f_replacement_shapes = _make_replacement_shapes()

FUNCTIONS = [
    (f_replacement_shapes, (1, ["box", ["inner"]])),
    (f_with_blocks, (1,)),
    (f_match, (7,)),
    (f_more_calls, (4,)), (f_cells_nonlocal, (3,)), (f_misc_ops, (4,)),
    (f_arith, (7, 3)), (f_calls, (5,)), (f_methods, (2,)), (f_loops, (12,)), (f_comprehensions, (3,)),
    (f_unpack, (1,)), (f_containers, (7,)), (f_strings, (42,)), (f_lambda_default_closure, (3,)),
    (f_nested_def, (1,)), (f_partial_and_builtins, (4,)), (f_bool_logic, (2,)),
    (f_globals_and_slices, (4,)), (f_try_finally, (1,)), (f_match_kwonly_defaults, (1,)),
]


def trace(fn, args):  # noqa: ANN001, ANN201
    from pyjit.frame.convert import root_translator
    from pyjit.trace.output_graph import OutputGraph

    code = fn.__code__
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    full = tuple(args) + tuple(fn.__kwdefaults__[n] for n in kwonly)
    return root_translator(fn, full, OutputGraph(code.co_name)).run().as_python_constant()


def replay(fn, args):  # noqa: ANN001, ANN201
    """Trace ``fn``, then run the replacement code built for it (pyjit.bytecode) on ``args``.

    No tensors are involved, so the "compiled graph" is a stand-in returning an empty tuple; this
    exercises the replacement code's call protocol, constant loads, argument/closure reads and
    container rebuilding on this interpreter's bytecode, and the Python guard checker."""
    from pyjit.frame.convert import root_translator
    from pyjit.trace.output_graph import OutputCodegen, OutputGraph
    from pyjit.trace.pycodegen import PyCodegen, make_function

    code = fn.__code__
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    full = tuple(args) + tuple(fn.__kwdefaults__[n] for n in kwonly)
    output = OutputGraph(code.co_name)
    tx = root_translator(fn, full, output)
    result = tx.run()
    cg = OutputCodegen(output)
    cg.capture_return(result)
    py = PyCodegen(code)
    cg.emit(py, lambda: (), code.co_firstlineno, tx.location().lineno)
    from pyjit.guards.guards import compile_python

    # The trace's guards, assembled into a checker the same way, accept the traced arguments.
    assert compile_python(output.guards, code, fn)(*full) is True, output.guards.describe()
    return make_function(py.finish(f"__replay_{code.co_name}"), fn)(*full)


def main() -> int:
    failures = 0
    for fn, args in FUNCTIONS:
        expected = fn(*args)
        try:
            got = trace(fn, args)
        except Exception:
            failures += 1
            print(f"FAIL {fn.__name__}: {traceback.format_exc(limit=6)}")
            continue
        if got != expected or type(got) is not type(expected):
            failures += 1
            print(f"MISMATCH {fn.__name__}: eager {expected!r} traced {got!r}")
            continue
        try:
            replayed = replay(fn, args)
        except Exception:
            failures += 1
            print(f"REPLAY FAIL {fn.__name__}: {traceback.format_exc(limit=6)}")
            continue
        if replayed != expected or type(replayed) is not type(expected):
            failures += 1
            print(f"REPLAY MISMATCH {fn.__name__}: eager {expected!r} replacement code {replayed!r}")
    print(f"python {sys.version.split()[0]}: {len(FUNCTIONS) - failures}/{len(FUNCTIONS)} functions agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
