"""Index simplification: pure sympy, checked by evaluating both sides over the whole range."""
from __future__ import annotations

import itertools

import sympy

from pyjit.backend.symbolic import (
    FloorDiv,
    ModularIndexing,
    contiguous_strides,
    simplify_with_ranges,
    strided_index,
    sym,
    texpr,
    unflatten_index,
)

X, R = sym("xindex"), sym("rindex")


def _same_everywhere(a: sympy.Expr, b: sympy.Expr, xs: int, rs: int) -> bool:
    fa, fb = sympy.lambdify((X, R), a, modules=[{"FloorDiv": lambda p, q: p // q,
                                                  "ModularIndexing": lambda p, q, m: (p // q) % m}]), \
        sympy.lambdify((X, R), b, modules=[{"FloorDiv": lambda p, q: p // q,
                                            "ModularIndexing": lambda p, q, m: (p // q) % m}])
    return all(fa(x, r) == fb(x, r) for x, r in itertools.product(range(xs), range(rs)))


def test_contiguous_split_joins_back() -> None:
    sizes = [4, 6, 5]
    e = strided_index(unflatten_index(X, sizes), contiguous_strides(sizes))
    assert simplify_with_ranges(e, {X: 120}) == X


def test_split_over_x_and_r_joins_back() -> None:
    e = R + 256 * FloorDiv(R + 32 * X, 256) + 32 * ModularIndexing(R + 32 * X, 32, 8)
    s = simplify_with_ranges(e, {X: 16, R: 32})
    assert s == R + 32 * X
    assert _same_everywhere(e, s, 16, 32)


def test_no_unsound_drop_when_range_too_large() -> None:
    e = FloorDiv(R + 32 * X, 256)
    s = simplify_with_ranges(e, {X: 16, R: 33})
    assert _same_everywhere(e, s, 16, 33)


def test_transposed_access_stays_correct() -> None:
    e = strided_index(unflatten_index(X, [4, 6]), [1, 4])
    s = simplify_with_ranges(e, {X: 24})
    assert _same_everywhere(e, s, 24, 1)
    assert texpr(s) == "(xindex // 6) + 4 * (xindex % 6)"


def test_nested_division_canonicalized_and_joined() -> None:
    # [8, 8, 8] viewed as [2, 4, 8, 8]: the row index goes through a nested division.
    e = 256 * FloorDiv(X, 32) + 8 * ModularIndexing(X, 1, 8) + 64 * ModularIndexing(FloorDiv(X, 8), 1, 4) + R
    s = simplify_with_ranges(e, {X: 64, R: 8})
    assert s == R + 8 * X
    assert _same_everywhere(e, s, 64, 8)


def _eval(expr: sympy.Expr, **values: int) -> int:
    """``expr`` at integer values of its symbols (index functions evaluated as Python ints)."""
    fns = {"FloorDiv": lambda p, q: p // q, "ModularIndexing": lambda p, q, m: (p // q) % m}
    names = sorted(values)
    return sympy.lambdify([sympy.Symbol(n, integer=True, positive=True) if n.startswith("s") else sym(n)
                           for n in names], expr, modules=[fns])(*[values[n] for n in names])


def test_symbolic_sizes_simplify_like_static_ones() -> None:
    """Index expressions over a dynamic size ``s`` (how a transposed/merged access is written
    with symbolic strides) fold back to the flat index, and every simplified form agrees with
    the original for several sizes and every index in range."""
    s = sympy.Symbol("s", integer=True, positive=True)
    n = 128 * s
    cases = [
        # (512*(x // 512) + x % 512) // (512*s) ... == x over 2 rows
        (512 * s * FloorDiv(512 * FloorDiv(X, 512) + ModularIndexing(X, 1, 512), 512 * s)
         + ModularIndexing(X, 1, 512 * s), X),
        # layer norm's row statistics read through a [2, s] buffer: the row index
        (s * FloorDiv(X, n) + ModularIndexing(X, 128, s), FloorDiv(X, 128)),
        # the transposed attention output copied back: heads of 32 inside rows of 128
        (n * FloorDiv(X, n) + 32 * ModularIndexing(X, 32, 4) + 128 * ModularIndexing(X, 128, s)
         + ModularIndexing(ModularIndexing(X, 1, 128), 1, 32), X),
        (FloorDiv(ModularIndexing(X, 1, n), n), sympy.Integer(0)),
        (ModularIndexing(ModularIndexing(X, 1, n), 128, s), ModularIndexing(X, 128, s)),
    ]
    for expr, expected in cases:
        simplified = simplify_with_ranges(expr, {X: 2 * n})
        assert simplified == expected, (expr, simplified)
        for sv in (2, 3, 7):
            for x in range(2 * 128 * sv):
                assert _eval(expr, xindex=x, s=sv) == _eval(simplified, xindex=x, s=sv), (expr, sv, x)


def test_modulus_of_a_modulus_needs_divisibility() -> None:
    """``(e % M) // d % m`` folds to ``(e // d) % m`` only when ``d*m`` divides ``M``."""
    s = sympy.Symbol("s", integer=True, positive=True)
    assert ModularIndexing(ModularIndexing(X, 1, 6 * s), 2, 3 * s) == ModularIndexing(X, 2, 3 * s)
    kept = ModularIndexing(ModularIndexing(X, 1, 5 * s), 2, 3)
    assert isinstance(kept.args[0], ModularIndexing)
    for sv in (2, 3):
        for x in range(100):
            assert _eval(kept, xindex=x, s=sv) == ((x % (5 * sv)) // 2) % 3


def test_multiples_are_taken_out_only_when_the_rest_stays_non_negative() -> None:
    """Generated C++ and Triton divide and take remainders truncating toward zero, which agrees
    with floor semantics only for a non-negative base: ``(8 - s % 8) % 8`` must not become
    ``(-(s % 8)) % 8`` (a symbolic pad's size came out 1 instead of 9 in generated C++)."""
    s = sympy.Symbol("s", integer=True, positive=True)
    pad = ModularIndexing(8 - ModularIndexing(s, 1, 8), 1, 8)
    assert pad.args[0] == 8 - ModularIndexing(s, 1, 8)  # the 8 stays: the base is >= 1
    for sv in range(1, 40):
        base = int(pad.args[0].subs(s, sv).replace(ModularIndexing, lambda b, d, m: (b // d) % m))
        assert base >= 0 and base % 8 == (8 - sv % 8) % 8
    # A negative multiple next to a non-negative rest is still taken out.
    assert FloorDiv(X + 16 * s - 8, 8) == 2 * s - 1 + FloorDiv(X, 8)
    assert ModularIndexing(X - 8, 1, 8) == ModularIndexing(X, 1, 8)


def test_ceil_and_floor_of_a_size_quotient_become_floor_divisions() -> None:
    """torch writes ``math.ceil(s / 32)`` (the memory-efficient attention's log-sum-exp rows) as
    ``CeilToInt(IntTrueDiv(s, 32))``; as ``FloorDiv(s + 31, 32)`` a symbolic graph compiles."""
    from torch.utils._sympy.functions import CeilToInt, FloorToInt, IntTrueDiv

    from pyjit.backend.symbolic import from_torch_expr

    s = sympy.Symbol("s", integer=True, positive=True)
    ceil32 = from_torch_expr(32 * CeilToInt(IntTrueDiv(s, 32)))
    floor4 = from_torch_expr(FloorToInt(IntTrueDiv(s + 3, 4)))
    assert ceil32 == 32 * FloorDiv(s + 31, 32) and floor4 == FloorDiv(s + 3, 4)
    for sv in range(1, 100):
        assert int(ceil32.subs(s, sv).replace(FloorDiv, lambda a, b: a // b)) == -(-sv // 32) * 32
