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
