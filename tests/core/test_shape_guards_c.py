"""Shape guards in the C core: check_tensor(bind=...) fills per-evaluation symbol slots and
GuardTree.check_symbols(program, id) checks relations over them after the walk.

Torch-free (runs under 3.11/3.12/3.13 without torch or sympy): tensors are stand-in objects
with ``shape``/``stride()``/``dtype``/``requires_grad``/``device``, which the C tensor check
reads through generic attribute access. Every C result is compared with the pure-Python
twins (``shape_program.run_program``, ``tree.evaluate``).
"""
from __future__ import annotations

import gc
import random
import sys

import pytest

from pyjit import _C
from pyjit.guards import shape_program as sp
from pyjit.guards.shape_program import (
    ADD, AND, CONST, EQ, FLOORDIV, GE, GT, LE, LT, MAX, MIN, MOD, MUL, NE, NEG, NOT, OR, POW, SLOT, SUB,
    format_program, run_program, validate_program,
)
from pyjit.guards.tree import evaluate, failing_check, format_tree, iter_checks

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
F32 = "float32"  # any object: dtype is compared by identity


class FakeTensor:
    """Just the metadata the C tensor check reads."""

    def __init__(self, shape: tuple, stride: tuple | None = None, dtype: object = F32,
                 requires_grad: bool = False, device: str = "cpu") -> None:
        self.shape = tuple(shape)
        self._stride = tuple(stride) if stride is not None else self._contiguous(self.shape)
        self.dtype = dtype
        self.requires_grad = requires_grad
        self.device = device

    @staticmethod
    def _contiguous(shape: tuple) -> tuple:
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1) if isinstance(s, int) else 1
        return tuple(reversed(out))

    def stride(self) -> tuple:
        return self._stride


def f(x=None, y=None, z=None):
    return x


def spec(ndim: int, sizes=None, strides=None):
    return (FakeTensor, F32, "cpu", False, tuple(sizes) if sizes is not None else (None,) * ndim, strides)


def slot_tree(n: int, programs=(), first_id: int = 100):
    """A tree binding size(i) of arg 0 to slot i for i < n, with `programs` as ids 100, 101..."""
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(n), 0, bind=tuple((0, i, i) for i in range(n)))
    for i, p in enumerate(programs):
        tree.check_symbols(p, first_id + i)
    return tree


def c_holds(program, values) -> bool:
    """The C verdict on `program` with slot i = values[i] (the values are the fake sizes)."""
    tree = slot_tree(len(values), [program])
    r = tree.check(f, (FakeTensor(tuple(values)),))
    assert r in (-1, 100)
    return r == -1


# --- bindings -------------------------------------------------------------------------------


def test_bind_sizes_and_strides_feed_the_relations():
    tree = _C.GuardTree()
    # x: (s0, 4) with stride()[0] -> slot 2; y: (s1,)
    tree.arg(0).check_tensor(*spec(2, (None, 4)), 0, bind=((0, 0, 0), (1, 0, 2)))
    tree.arg(1).check_tensor(*spec(1), 1, ((0, 0, 1),))  # bind may also be positional
    tree.check_symbols((SLOT, 0, SLOT, 1, EQ), 2)        # s0 == s1
    tree.check_symbols((SLOT, 0, CONST, 2, GE), 3)       # s0 >= 2
    tree.check_symbols((SLOT, 2, CONST, 4, EQ), 4)       # x.stride(0) == 4
    ok = (FakeTensor((5, 4)), FakeTensor((5,)))
    assert tree.check(f, ok) == -1
    assert tree.check(f, (FakeTensor((9, 4)), FakeTensor((9,)))) == -1
    assert tree.check(f, (FakeTensor((5, 4)), FakeTensor((6,)))) == 2
    assert tree.check(f, (FakeTensor((1, 4)), FakeTensor((1,)))) == 3
    assert tree.check(f, (FakeTensor((5, 4), (8, 1)), FakeTensor((5,)))) == 4
    assert tree.check(f, (FakeTensor((5, 3)), FakeTensor((5,)))) == 0  # static size still checked
    for args in [ok, (FakeTensor((5, 4)), FakeTensor((6,))), (FakeTensor((1, 4)), FakeTensor((1,)))]:
        assert evaluate(tree, f, args) == tree.check(f, args)
    checks = tree.describe()["children"][0]["checks"]
    assert checks[0][2]["bind"] == ((0, 0, 0), (1, 0, 2))
    assert [s[1] for s in tree.describe()["symbols"]] == [2, 3, 4]


def test_bound_stride_is_read_even_when_strides_are_unchecked_or_static():
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(2, (None, 3), (None, 1)), 0, bind=((1, 0, 0), (0, 0, 1)))
    tree.check_symbols((SLOT, 0, CONST, 3, EQ), 1)
    assert tree.check(f, (FakeTensor((7, 3)),)) == -1
    assert tree.check(f, (FakeTensor((7, 3), (6, 1)),)) == 1   # bound stride differs
    assert tree.check(f, (FakeTensor((7, 3), (3, 2)),)) == 0   # static stride differs
    bad = FakeTensor((7, 3))
    bad._stride = [3, 1]  # not a tuple: the match fails, as for checked strides
    assert tree.check(f, (bad,)) == 0
    bad._stride = (3.0, 1)  # a bound stride that is not an int
    assert tree.check(f, (bad,)) == 0


def test_binding_values_only_of_the_current_evaluation():
    # A slot bound by a tensor check that was never reached (an earlier check failed) cannot
    # leak into a later evaluation: each evaluation starts with every slot unset.
    tree = slot_tree(1, [(SLOT, 0, CONST, 3, EQ)])
    assert tree.check(f, (FakeTensor((3,)),)) == -1
    assert tree.check(f, (FakeTensor((4,)),)) == 100
    assert tree.check(f, (FakeTensor((3, 3)),)) == 0


def test_program_reading_an_unbound_slot_fails():
    tree = slot_tree(1, [(SLOT, 0, CONST, 0, GE), (SLOT, 5, CONST, 0, GE)])
    assert tree.check(f, (FakeTensor((3,)),)) == 101
    assert evaluate(tree, f, (FakeTensor((3,)),)) == 101
    assert not run_program((SLOT, 5, CONST, 0, GE), [3])
    assert not run_program((SLOT, 0, CONST, 0, GE), [None])
    assert not run_program((SLOT, 0, CONST, 0, GE), {})


def test_many_slots_use_heap_storage():
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(3), 0, bind=((0, 0, 700), (0, 1, 3), (0, 2, 1023)))
    tree.check_symbols((SLOT, 700, SLOT, 3, ADD, SLOT, 1023, EQ), 1)
    assert tree.check(f, (FakeTensor((2, 5, 7)),)) == -1
    assert tree.check(f, (FakeTensor((2, 5, 8)),)) == 1


def test_bind_validation():
    tree = _C.GuardTree()
    x = tree.arg(0)
    bad = [
        (((2, 0, 0),), ValueError, "what must be 0"),
        (((0, 2, 0),), ValueError, "dim 2 out of range"),
        (((0, -1, 0),), ValueError, "dim -1 out of range"),
        (((0, 0, -1),), ValueError, "slot -1 out of range"),
        (((0, 0, 1024),), ValueError, "out of range [0, 1024)"),
        (((0, 0, 3), (1, 1, 3)), ValueError, "bound twice"),
        (((0, 0),), ValueError, "triple"),
        ((5,), TypeError, "triple"),
        (((True, 0, 0),), TypeError, "what must be an int"),
        (((0, 0, 1 << 70),), ValueError, "out of range"),
        (7, TypeError, "bind must be"),
    ]
    for bind, exc, text in bad:
        with pytest.raises(exc, match=text.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            x.check_tensor(*spec(2), 0, bind=bind)
    assert x.describe()["checks"] == []  # nothing half-added
    x.check_tensor(*spec(2), 0, bind=((0, 0, 3),))
    with pytest.raises(ValueError, match="slot 3 is already bound"):
        tree.arg(1).check_tensor(*spec(1), 1, bind=((0, 0, 3),))
    with pytest.raises(ValueError, match="slot 3 is already bound"):
        x.check_tensor(*spec(2), 1, bind=((1, 1, 3),))  # same node, other check
    assert len(tree.describe()["children"]) == 2 and tree.describe()["children"][1]["checks"] == []
    tree.arg(1).check_tensor(*spec(1), 1, bind=[[0, 0, 4]])  # any sequences
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.check_tensor(*spec(2), 0, binds=())
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.check_tensor(*spec(2), 0, (), bind=())
    with pytest.raises(TypeError):
        tree.check_tensor(*spec(2), 0, bind=((0, 0, 9),))  # root has no value
    x.check_tensor(*spec(2), 5, bind=((0, 0, 9),))          # ...and slot 9 was not taken by it
    x.check_tensor(*spec(2), 6, bind=None)
    x.check_tensor(*spec(2), 7, bind=())


def test_node_of_a_dead_tree_cannot_bind():
    tree = _C.GuardTree()
    node = tree.arg(0).attr("t")
    del tree
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer exists"):
        node.check_tensor(*spec(1), 0, bind=((0, 0, 0),))
    node.check_tensor(*spec(1), 0)  # without bindings it is fine
    child = node.attr("u")  # created after the tree died: no root either
    with pytest.raises(RuntimeError, match="no longer exists"):
        child.check_tensor(*spec(1), 0, bind=((0, 0, 0),))


def test_check_symbols_validation_matches_python():
    tree = _C.GuardTree()
    bad = [
        ((), ValueError, "empty program"),
        ((CONST,), ValueError, "needs an operand"),
        ((SLOT,), ValueError, "needs an operand"),
        ((ADD,), ValueError, "needs 2 operand"),
        ((CONST, 1, NEG, NEG, ADD), ValueError, "needs 2 operand"),
        ((NOT,), ValueError, "needs 1 operand"),
        ((CONST, 1, CONST, 2), ValueError, "leaves 2 values"),
        ((SLOT, 1024), ValueError, "out of range"),
        ((SLOT, -1), ValueError, "out of range"),
        ((99,), ValueError, "unknown opcode 99"),
        ((-1,), ValueError, "unknown opcode -1"),
        ((CONST, 1 << 63), ValueError, "does not fit in int64"),
        ((CONST, True), TypeError, "expected an int"),
        ((CONST, 1.0), TypeError, "expected an int"),
        ("abc", TypeError, "tuple of ints"),
        ((CONST, 1) * 65 + (ADD,) * 64, ValueError, "more than 64 stack entries"),
    ]
    for program, exc, text in bad:
        with pytest.raises(exc, match=text) as c_err:
            tree.check_symbols(program, 1)
        with pytest.raises(exc) as py_err:
            validate_program(program if isinstance(program, tuple) else program)
        assert str(c_err.value) == str(py_err.value)
    assert tree.describe()["symbols"] == []
    with pytest.raises(ValueError, match="ids must be >= 0"):
        tree.check_symbols((CONST, 1), -1)
    with pytest.raises(TypeError, match="root"):
        tree.arg(0).check_symbols((CONST, 1), 1)
    # deepest allowed program, and a list is accepted like a tuple
    deep = (CONST, 1) * 64 + (ADD,) * 63
    tree.check_symbols(deep, 1)
    tree.check_symbols([CONST, 1], 2)
    assert validate_program(deep) == 0
    assert tree.check(f, ()) == -1


# --- evaluation semantics -------------------------------------------------------------------


def _both(program, values):
    c = c_holds(program, values)
    py = run_program(program, values)
    assert c == py, (program, values)
    return c


@pytest.mark.parametrize(
    "op,fn",
    [
        (ADD, lambda a, b: a + b), (SUB, lambda a, b: a - b), (MUL, lambda a, b: a * b),
        (MIN, min), (MAX, max), (EQ, lambda a, b: a == b), (NE, lambda a, b: a != b),
        (LT, lambda a, b: a < b), (LE, lambda a, b: a <= b), (GT, lambda a, b: a > b),
        (GE, lambda a, b: a >= b), (AND, lambda a, b: bool(a) and bool(b)),
        (OR, lambda a, b: bool(a) or bool(b)), (FLOORDIV, lambda a, b: a // b),
        (MOD, lambda a, b: a % b), (POW, lambda a, b: a ** b),
    ],
)
def test_each_binary_opcode(op, fn):
    for a in (-7, -2, -1, 0, 1, 3, 8):
        for b in (-3, -1, 0, 1, 2, 5):
            if op in (FLOORDIV, MOD) and b == 0 or op == POW and b < 0:
                assert not _both((SLOT, 0, SLOT, 1, op), (a, b))  # fails, never raises
                continue
            expected = fn(a, b)
            # The result r is tested as "r == expected" inside the program.
            assert _both((SLOT, 0, SLOT, 1, op, CONST, int(expected), EQ), (a, b)), (op, a, b)
            # Truth of the raw result as the relation's verdict.
            assert _both((SLOT, 0, SLOT, 1, op), (a, b)) == bool(expected)


def test_unary_opcodes_and_constants():
    for a in (-5, 0, 1, 9, I64_MAX):
        assert _both((SLOT, 0, NEG, CONST, -a, EQ), (a,))
        assert _both((SLOT, 0, NOT), (a,)) == (a == 0)
    assert not _both((SLOT, 0, NEG), (I64_MIN,))  # -(-2**63) overflows
    assert _both((CONST, I64_MIN, CONST, I64_MAX, LT), ())
    assert not _both((CONST, 0), ())
    assert _both((CONST, -3), ())  # any non-zero is true


def test_floor_division_and_modulo_follow_python():
    values = [-9, -8, -7, -3, -2, -1, 1, 2, 3, 7, 8, 9, I64_MIN, I64_MIN + 1, I64_MAX]
    for a in values + [0]:
        for b in values:
            q, m = a // b, a % b
            if I64_MIN <= q <= I64_MAX:
                assert _both((SLOT, 0, SLOT, 1, FLOORDIV, CONST, q, EQ), (a, b)), (a, b)
            else:
                assert not _both((SLOT, 0, SLOT, 1, FLOORDIV, CONST, 0, GE), (a, b))
            assert _both((SLOT, 0, SLOT, 1, MOD, CONST, m, EQ), (a, b)), (a, b)
    assert _both((SLOT, 0, CONST, -1, MOD, CONST, 0, EQ), (I64_MIN,))     # UB in C, 0 here
    assert not _both((SLOT, 0, CONST, -1, FLOORDIV, CONST, 0, NE), (I64_MIN,))  # 2**63
    for a in (-5, 0, 5):
        assert not _both((SLOT, 0, CONST, 0, FLOORDIV, CONST, 0, EQ), (a,))
        assert not _both((SLOT, 0, CONST, 0, MOD, CONST, 0, EQ), (a,))
        # a failing sub-expression fails the whole relation, even under OR / NOT
        assert not _both((CONST, 1, SLOT, 0, CONST, 0, MOD, OR), (a,))
        assert not _both((SLOT, 0, CONST, 0, FLOORDIV, NOT), (a,))


def test_overflow_fails_never_wraps():
    fails = [
        (CONST, I64_MAX, CONST, 1, ADD),
        (CONST, I64_MIN, CONST, -1, ADD),
        (CONST, I64_MIN, CONST, 1, SUB),
        (CONST, I64_MAX, CONST, -1, SUB),
        (CONST, 1 << 32, CONST, 1 << 31, MUL),
        (CONST, -(1 << 32), CONST, (1 << 31) + 1, MUL),
        (CONST, I64_MIN, CONST, -1, MUL),
        (CONST, 2, CONST, 63, POW),
        (CONST, 3, CONST, 40, POW),
        (CONST, -2, CONST, 64, POW),
        (CONST, 2, CONST, I64_MAX, POW),
        (CONST, 1 << 32, CONST, 2, POW),
    ]
    for p in fails:
        assert not c_holds(p + (CONST, 0, NE), ()), p
        assert not run_program(p + (CONST, 0, NE), ()), p
    holds = [
        ((CONST, I64_MAX - 1, CONST, 1, ADD), I64_MAX),
        ((CONST, 2, CONST, 62, POW), 1 << 62),
        ((CONST, -2, CONST, 63, POW), I64_MIN),
        ((CONST, 1, CONST, I64_MAX, POW), 1),
        ((CONST, -1, CONST, I64_MAX, POW), -1),
        ((CONST, -1, CONST, I64_MAX - 1, POW), 1),
        ((CONST, 0, CONST, 0, POW), 1),
        ((CONST, 0, CONST, I64_MAX, POW), 0),
        ((CONST, 3, CONST, 39, POW), 3 ** 39),
        ((CONST, -(1 << 31), CONST, 1 << 32, MUL), I64_MIN),
    ]
    for p, value in holds:
        prog = p + (CONST, value, EQ)
        assert c_holds(prog, ()) and run_program(prog, ()), p


def test_failing_id_order_and_reporting():
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(1), 10, bind=((0, 0, 0),))
    tree.arg(1).check_tensor(*spec(1), 11, bind=((0, 0, 1),))
    tree.check_symbols((SLOT, 0, CONST, 2, GE), 5)      # ids need not be increasing
    tree.check_symbols((SLOT, 0, SLOT, 1, EQ), 3)
    tree.check_symbols((SLOT, 0, CONST, 8, MOD, CONST, 0, EQ), 7)
    cases = {
        (16, 16): -1, (1, 1): 5, (16, 8): 3, (12, 12): 7, (0, 5): 5,
    }
    for (a, b), expected in cases.items():
        args = (FakeTensor((a,)), FakeTensor((b,)))
        assert tree.check(f, args) == expected
        assert evaluate(tree, f, args) == expected
    # a failing ordinary check wins over every symbol check, even one inserted earlier
    args = (FakeTensor((1,), dtype="float64"), FakeTensor((2,)))
    assert tree.check(f, args) == 10
    assert tree.check(f, (FakeTensor((16,)), None)) == 11
    info = failing_check(tree, f, (FakeTensor((16,)), FakeTensor((8,))), ["x", "y"])
    assert (info.id, info.kind, info.expr) == (3, "symbols", "L['x'].size()[0] == L['y'].size()[0]")
    assert [c.id for c in iter_checks(tree)] == [10, 11, 5, 3, 7]
    text = format_tree(tree, ["x", "y"])
    assert "bind size()[0]->s0" in text
    assert "[7] L['x'].size()[0] % 8 == 0" in text
    assert text.index("[11]") < text.index("shape relations") < text.index("[5] L['x'].size()[0] >= 2")


def test_hook_path_uses_symbol_checks():
    def g(x):
        return "original"

    def g_repl(x):
        return "compiled"

    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(1), 0, bind=((0, 0, 0),))
    tree.check_symbols((SLOT, 0, CONST, 8, MOD, CONST, 0, EQ), 1)
    calls = []

    def cb(func, args):
        if func.__code__ is not g.__code__:
            return None
        calls.append(args[0].shape)
        return tree, g_repl.__code__.replace(co_name="g", co_qualname="g")

    x16, x24, x12 = FakeTensor((16,)), FakeTensor((24,)), FakeTensor((12,))
    _C.set_callback(cb)
    try:
        assert g(x16) == "compiled"
        assert g(x24) == "compiled"   # hit: 24 % 8 == 0
        assert g(x12) == "compiled"   # miss: callback again
    finally:
        _C.set_callback(None)
    assert calls == [(16,), (12,)]


# --- re-entrancy ----------------------------------------------------------------------------


def test_reentrant_evaluation_keeps_its_own_slots():
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(1), 0, bind=((0, 0, 0),))
    inner_results = []

    def recurse(value):
        # evaluate the same tree for other sizes while the outer evaluation has bound slot 0
        if value == "outer":
            inner_results.append(tree.check(f, (FakeTensor((7,)), "inner")))
            inner_results.append(tree.check(f, (FakeTensor((4,)), "inner")))
        return True

    tree.arg(1).check_fn(recurse, 1)
    tree.check_symbols((SLOT, 0, CONST, 4, EQ), 2)
    assert tree.check(f, (FakeTensor((4,)), "outer")) == -1
    assert inner_results == [2, -1]
    inner_results.clear()
    assert tree.check(f, (FakeTensor((7,)), "outer")) == 2
    assert inner_results == [2, -1]


def test_tree_growing_during_its_own_evaluation():
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec(1), 0, bind=((0, 0, 0),))
    grown = []

    def grow(value):
        if not grown:
            grown.append(True)
            # a binding beyond this evaluation's slot storage, and a program reading it
            tree.arg(2).check_tensor(*spec(1), 98, bind=((0, 0, 40),))
            tree.check_symbols((SLOT, 40, CONST, 1, GE), 99)
        return True

    tree.arg(1).check_fn(grow, 1)
    args = (FakeTensor((3,)), 0, FakeTensor((5,)))
    assert tree.check(f, args) == 99  # slot 40 was not stored in that evaluation: fails
    assert tree.check(f, args) == -1
    assert evaluate(tree, f, args) == -1
    assert tree.check(f, (FakeTensor((3,)), 0, FakeTensor((0,)))) == 99


def test_base_exception_from_a_check_propagates():
    tree = slot_tree(1, [(SLOT, 0, CONST, 1, GE)])

    def stop(value):
        raise KeyboardInterrupt

    tree.arg(1).check_fn(stop, 1)
    with pytest.raises(KeyboardInterrupt):
        tree.check(f, (FakeTensor((3,)), 0))


# --- printing -------------------------------------------------------------------------------


def test_format_program():
    names = ["L['x'].size()[0]", "L['y'].size()[0]"]
    cases = {
        (SLOT, 0, CONST, 2, GE): "L['x'].size()[0] >= 2",
        (SLOT, 0, SLOT, 1, ADD, CONST, 3, MUL): "(L['x'].size()[0] + L['y'].size()[0]) * 3",
        (SLOT, 0, SLOT, 1, SUB, SLOT, 1, SUB): "L['x'].size()[0] - L['y'].size()[0] - L['y'].size()[0]",
        (SLOT, 0, SLOT, 1, SLOT, 1, SUB, SUB): "L['x'].size()[0] - (L['y'].size()[0] - L['y'].size()[0])",
        (CONST, 2, CONST, 3, CONST, 2, POW, POW): "2 ** 3 ** 2",
        (CONST, 2, CONST, 3, POW, CONST, 2, POW): "(2 ** 3) ** 2",
        (CONST, -2, CONST, 2, POW): "(-2) ** 2",
        (SLOT, 0, NEG, CONST, 2, POW): "(-s0) ** 2",
        (SLOT, 0, CONST, 2, POW, NEG): "-s0 ** 2",
        (SLOT, 0, SLOT, 1, LT, CONST, 1, EQ): "(s0 < s1) == 1",
        (SLOT, 0, CONST, 1, GT, SLOT, 1, CONST, 2, LT, NOT, AND): "s0 > 1 and not s1 < 2",
        (SLOT, 0, CONST, 1, OR, CONST, 0, AND): "(s0 or 1) and 0",
        (SLOT, 0, SLOT, 1, MIN, CONST, 4, MAX): "max(min(s0, s1), 4)",
        (SLOT, 0, CONST, 8, MOD, CONST, 0, EQ): "s0 % 8 == 0",
        (SLOT, 0, CONST, 2, CONST, 3, MUL, FLOORDIV): "s0 // (2 * 3)",
        # `and`/`or` yield an operand in Python, 1/0 in a program: bool() where it matters
        (SLOT, 0, CONST, 1, AND, CONST, 2, ADD): "bool(s0 and 1) + 2",
        (SLOT, 0, CONST, 1, AND, NOT): "not (s0 and 1)",
    }
    for program, text in cases.items():
        got = format_program(program, names if "L[" in text else None)
        assert got == text, (program, got)


def _random_expr(rng: random.Random, depth: int, n_slots: int, small: bool) -> tuple[int, ...]:
    """A random well-formed program (as a flat tuple)."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.5 and n_slots:
            return (SLOT, rng.randrange(n_slots))
        if small:
            return (CONST, rng.randint(-9, 9))
        return (CONST, rng.choice([0, 1, -1, 2, -2, 7, 63, 64, 1 << 31, -(1 << 32), I64_MAX, I64_MIN,
                                   rng.randint(-100, 100), rng.randint(I64_MIN, I64_MAX)]))
    op = rng.choice([ADD, SUB, MUL, FLOORDIV, MOD, POW, NEG, MIN, MAX, EQ, NE, LT, LE, GT, GE, AND, OR, NOT])
    if op in (NEG, NOT):
        return _random_expr(rng, depth - 1, n_slots, small) + (op,)
    if op == POW and small:  # keep Python's ** exact and integral for the eval() comparison
        return _random_expr(rng, depth - 1, n_slots, small) + (CONST, rng.randint(0, 4), POW)
    return _random_expr(rng, depth - 1, n_slots, small) + _random_expr(rng, depth - 1, n_slots, small) + (op,)


def test_c_and_python_agree_on_random_programs():
    rng = random.Random(1234)
    n_slots = 3
    trees = {}
    checked = 0
    for i in range(600):
        program = _random_expr(rng, rng.randint(1, 5), n_slots, small=i % 2 == 0)
        values = [rng.choice([0, 1, 2, 3, -4, 5, 8, 16, 1 << 40, I64_MAX, I64_MIN, rng.randint(-50, 50)])
                  for _ in range(n_slots)]
        tree = trees.get(program)
        if tree is None:
            tree = trees[program] = slot_tree(n_slots, [program])
        args = (FakeTensor(tuple(values)),)
        c = tree.check(f, args)
        assert c == evaluate(tree, f, args), (program, values)
        assert (c == -1) == run_program(program, values), (program, values)
        checked += 1
    assert checked == 600


def test_format_program_evaluates_like_run_program():
    rng = random.Random(99)
    compared = 0
    for _ in range(400):
        program = _random_expr(rng, rng.randint(1, 4), 2, small=True)
        values = [rng.randint(-6, 6), rng.randint(-6, 6)]
        src = format_program(program)
        try:
            expected = eval(src, {"min": min, "max": max, "s0": values[0], "s1": values[1]})  # noqa: S307
        except ZeroDivisionError:
            assert not run_program(program, values)
            continue
        if not isinstance(expected, (int, bool)):
            continue
        # Python ints never overflow; only compare where every value stays small
        if abs(int(expected)) < (1 << 62):
            assert run_program(program, values) == bool(expected), (program, src, values)
            compared += 1
    assert compared > 200


def test_run_program_rejects_malformed_programs():
    with pytest.raises(ValueError):
        run_program((ADD,), [])
    with pytest.raises(TypeError):
        run_program((CONST, "1"), [])
    assert sp.OP_COUNT == 20 and sp.MAX_SLOTS == 1024 and sp.MAX_DEPTH == 64


# --- memory ---------------------------------------------------------------------------------


def test_building_and_evaluating_does_not_leak():
    from .test_leaks import _traced_growth

    program = (SLOT, 0, CONST, 2, GE, SLOT, 900, CONST, 0, GT, AND)
    x = FakeTensor((3, 4))
    bind = ((0, 0, 0), (1, 0, 900))  # slot 900: heap slot storage on every evaluation

    def cycle():
        tree = _C.GuardTree()
        node = tree.arg(0)
        node.check_tensor(*spec(2), 0, bind=bind)
        tree.check_symbols(program, 1)
        for bad in ((ADD,), (SLOT, 5000)):
            with pytest.raises(ValueError):
                tree.check_symbols(bad, 2)
        with pytest.raises(ValueError):
            tree.arg(1).check_tensor(*spec(1), 3, bind=((0, 0, 0),))
        assert tree.check(f, (x,)) == -1
        assert tree.check(f, (FakeTensor((1, 4)),)) == 1
        tree.describe()
        del tree
        with pytest.raises(RuntimeError):
            node.check_tensor(*spec(2), 4, bind=((0, 0, 7),))

    cycle()  # the first check_tensor of a type caches its readers for the process (holds the type)
    gc.collect()  # the exceptions' tracebacks of that cycle
    before = [sys.getrefcount(o) for o in (program, x, bind, FakeTensor)]
    for _ in range(200):
        cycle()
    gc.collect()
    assert [sys.getrefcount(o) for o in (program, x, bind, FakeTensor)] == before
    growth = _traced_growth(cycle, 50, 2000)
    assert growth < 16 * 1024, f"tracemalloc grew by {growth} bytes over 2000 build/check cycles"
