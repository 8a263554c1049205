"""compile_relation on the guards torch's ShapeEnv really emits: fake-tensor tracing of size
arithmetic (views, slicing, cat, split, `if x.size(0) % 8 == 0`, ...) with symbolic inputs,
then every guard expression compiled to a shape program and checked against sympy's own
evaluation on many random sizes, through run_program and through the C guard tree (real
tensors on the meta device, sizes bound by check_tensor)."""
from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")
sympy = pytest.importorskip("sympy")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext  # noqa: E402
from torch.utils._sympy import functions as tf  # noqa: E402

from pyjit import _C  # noqa: E402
from pyjit.guards.shape_program import NotCompilable, compile_relation, format_program, run_program  # noqa: E402


def _guards_of(fn, *shapes):
    """(guard expressions, [(input, dim, symbol)]) of tracing fn on symbolic inputs."""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    inputs = []
    for shape in shapes:
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * len(shape))
        inputs.append(mode.from_tensor(torch.empty(shape), symbolic_context=ctx))
    # The input symbols before tracing: a guard such as Eq(s1, s0) makes torch replace s1 by
    # s0 in later reads of the sizes, but the guard itself still names s1.
    dims = [(i, d, s.node.expr) for i, t in enumerate(inputs) for d, s in enumerate(t.shape)]
    with mode:
        fn(*inputs)
    return [g.expr for g in env.guards], dims


def _view(x):
    return x.view(-1, 8)


def _floordiv_slice(x):
    return x[: x.size(0) // 3]


def _half(x):
    return x[: x.size(0) // 2]


def _cat(x, y):
    return torch.cat([x, y])


def _mod_branch(x):
    if x.size(0) % 8 == 0:
        return x + 1
    return x - 1


def _broadcast(x, y):
    return x + y


def _reshape(x):
    return x.reshape(x.size(0) * 2, -1)


def _view3(x):
    return x.view(x.size(0) // 2, 2, x.size(1))


def _split(x):
    return x.split(3)


def _neg_slice(x):
    return x[-(x.size(0) // 3):]


def _mul_bound(x):
    if x.size(0) * 2 <= 4096:
        return x + 1
    return x


def _ceil_pool(x):
    return torch.nn.functional.avg_pool1d(x, 3, 2, ceil_mode=True)


def _pow(x):
    if x.size(0) ** 2 > 50:
        return x + 1
    return x


def _ceil(x):
    if math.ceil(x.size(0) / 4) == 3:
        return x + 1
    return x


def _max(x):
    if max(x.size(0), x.size(1)) > 7:
        return x + 1
    return x


def _chunk(x):
    return x.chunk(4)


def _and(x):
    if x.size(0) % 8 != 0 and x.size(0) > 3:
        return x + 1
    return x


def _diff(x):
    if x.size(0) - x.size(1) < -2:
        return x + 1
    return x


def _unfold(x):
    return x.unfold(0, 4, 2)


CASES = [
    (_view, [(16, 4)]), (_floordiv_slice, [(12,)]), (_half, [(10,)]), (_cat, [(3, 4), (5, 4)]),
    (_mod_branch, [(16,)]), (_broadcast, [(5, 6), (5, 6)]), (_reshape, [(4, 6)]), (_view3, [(6, 3)]),
    (_split, [(10,)]), (_neg_slice, [(9,)]), (_mul_bound, [(8,)]), (_ceil_pool, [(2, 3, 10)]),
    (_pow, [(8,)]), (_ceil, [(10,)]), (_max, [(5, 9)]), (_chunk, [(10,)]), (_and, [(10,)]),
    (_diff, [(3, 7)]), (_unfold, [(20,)]),
]


def _sympy_holds(expr, subs) -> bool:
    """sympy's verdict; a division by zero means the relation cannot hold (as in a program)."""
    try:
        r = expr.xreplace(subs)
    except ZeroDivisionError:
        return False
    if r is sympy.true:
        return True
    if r is sympy.false:
        return False
    if r.has(sympy.nan, sympy.zoo):
        return False
    raise AssertionError(f"sympy left {expr} undecided at {subs}: {r}")


def _random_sizes(rng: random.Random, shapes) -> list[tuple[int, ...]]:
    """Mostly small sizes, some big ones; every tensor's numel stays below 2**62 (torch)."""
    while True:
        sizes = [tuple(rng.choice([rng.randint(0, 40), rng.randint(0, 300),
                                   rng.choice([2, 8, 16, 64, 4096, 10**6, 2**31])]) for _ in shape)
                 for shape in shapes]
        if all(math.prod(s) < 2**62 for s in sizes):
            return sizes


@pytest.mark.parametrize("fn,shapes", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_shape_env_guards_compile_and_agree_with_sympy(fn, shapes):
    exprs, dims = _guards_of(fn, *shapes)
    slot_of = {}
    bind: dict[int, list] = {}
    for slot, (i, d, sym) in enumerate(dims):
        assert isinstance(sym, sympy.Symbol)
        slot_of.setdefault(sym, slot)
        bind.setdefault(i, []).append((0, d, slot))
    programs = [compile_relation(e, slot_of) for e in exprs]  # all of them: none NotCompilable
    names = [f"L['{'xyz'[i]}'].size()[{d}]" for i, d, _ in dims]
    for e, p in zip(exprs, programs):
        text = format_program(p, names)
        assert "s" not in text.replace(".size", "") or "L[" in text, text  # every slot has a name

    # One C tree per guard (so each verdict is observed), all over the same bindings.
    trees = []
    for k, p in enumerate(programs):
        tree = _C.GuardTree()
        for i, b in bind.items():
            tree.arg(i).check_tensor(torch.Tensor, torch.float32, torch.device("meta"), False,
                                     (None,) * len(shapes[i]), None, 100 + i, bind=tuple(b))
        tree.check_symbols(p, k)
        trees.append(tree)

    def f(*args):
        return args

    rng = random.Random(hash(fn.__name__) & 0xFFFF)
    outcomes = set()
    for trial in range(300):
        sizes = _random_sizes(rng, shapes)
        if trial == 0:
            sizes = [tuple(shape) for shape in shapes]  # the traced sizes satisfy every guard
        values = [sizes[i][d] for i, d, _ in dims]
        subs = {}
        for (i, d, sym), v in zip(dims, values):
            subs.setdefault(sym, sympy.Integer(v))
        # zero strides: no storage-size overflow for huge meta tensors (strides are unchecked)
        tensors = tuple(torch.empty_strided(s, (0,) * len(s), device="meta") for s in sizes)
        for k, (e, p) in enumerate(zip(exprs, programs)):
            expected = _sympy_holds(e, subs)
            assert run_program(p, values) == expected, (e, format_program(p), values)
            assert (trees[k].check(f, tensors) == -1) == expected, (e, values)
            if trial == 0:
                assert expected, e
            outcomes.add(expected)
    # always true for sizes >= 0: x.size(0) // k <= x.size(0), 2 * (n // 2) - 2 < n
    if fn not in (_floordiv_slice, _half, _ceil_pool):
        assert outcomes == {True, False}


def test_torch_sympy_functions():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    t = sympy.Symbol("t", integer=True)
    slot_of = {s0: 0, s1: 1, t: 2}
    cases = [
        (sympy.Eq(tf.FloorDiv(s0, s1), 2), lambda a, b: b != 0 and a // b == 2),
        (sympy.Eq(tf.CleanDiv(s0, 4), 2), lambda a, b: a // 4 == 2),
        (sympy.Eq(tf.CeilDiv(s0, s1), 3), lambda a, b: b != 0 and -(-a // b) == 3),
        (sympy.Eq(tf.PythonMod(s0, s1), 1), lambda a, b: b != 0 and a % b == 1),
        (sympy.Eq(tf.Mod(s0, 4), 1), lambda a, b: a % 4 == 1),
        (sympy.Eq(sympy.Mod(s0, 4), 1), lambda a, b: a % 4 == 1),
        (tf.Max(s0, s1) > 5, lambda a, b: max(a, b) > 5),
        (tf.Min(s0, s1, 9) <= 3, lambda a, b: min(a, b, 9) <= 3),
        (sympy.Eq(tf.PowByNatural(s0, 2), s1), lambda a, b: a ** 2 == b),
        (sympy.Eq(tf.CeilToInt(tf.IntTrueDiv(s0, 4)), 3), lambda a, b: -(-a // 4) == 3),
        (sympy.Eq(tf.FloorToInt(tf.IntTrueDiv(s0, 4)), 3), lambda a, b: a // 4 == 3),
        (sympy.Or(s0 > 3, sympy.Not(sympy.Eq(s1, 2))), lambda a, b: a > 3 or b != 2),
        (sympy.Abs(s0 - s1) < 2, lambda a, b: abs(a - b) < 2),
        (sympy.true, lambda a, b: True),
        (sympy.false, lambda a, b: False),
    ]
    for expr, ref in cases:
        p = compile_relation(expr, slot_of)
        for a in range(0, 12):
            for b in range(0, 6):
                assert run_program(p, [a, b]) == ref(a, b), (expr, a, b)
    for bad in [s0 / 2 > 1, tf.FloatTrueDiv(s0, 2) > 1, tf.ToFloat(s0) > 1.5, sympy.sqrt(s0) > 2,
                tf.OpaqueUnaryFn_sqrt(s0) > 1, sympy.floor(s0 / 3) > 1, t ** -1 < 5, s0 > 2 ** 64,
                sympy.Symbol("unslotted") > 1, tf.TruncToInt(tf.IntTrueDiv(s0, 2)) > 1]:
        with pytest.raises(NotCompilable):
            compile_relation(bad, slot_of)
    assert issubclass(NotCompilable, ValueError)
    assert compile_relation(s0 >= 2, lambda sym: {s0: 7}[sym]) == (1, 7, 0, 2, 16)


def test_python_checked_relations_can_use_what_the_printer_prints():
    """A relation the C language cannot express (ceil of a true division) is checked in Python
    from its printed text, which names ``math.ceil`` / ``torch.sym_float``: the check must run
    (it once raised NameError at guard time) and agree with the relation."""
    import sympy

    from pyjit.guards.shape_relation import ShapeRelation, SlotOrigin
    from pyjit.guards.source import LocalSource

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    expr = sympy.Eq(sympy.ceiling(s0 / sympy.Float(2.0)), 3)
    rel = ShapeRelation.build(expr, [s0], [SlotOrigin(LocalSource("x", 0), "size", 0)], ["L['x'].size()[0]"])
    assert "math" in rel.python_source or "ceil" in rel.python_source
    for n in range(1, 10):
        assert rel.holds([n]) == (-(-n // 2) == 3), n
