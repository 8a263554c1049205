"""Index arithmetic for the loop IR: sympy functions, simplification and printing.

Owns the integer index language the loop bodies speak: :class:`FloorDiv` and
:class:`ModularIndexing` (non-negative integer division and ``(x // d) % m``), helpers to
build contiguous index expressions from sizes/strides, range-aware simplification, and
:func:`texpr`, which prints an index expression as Triton/Python source.
All sizes are static integers (dynamic shapes come in a later issue).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import sympy

Expr = sympy.Expr


class FloorDiv(sympy.Function):
    """``base // divisor`` for non-negative integer ``base`` and positive integer ``divisor``."""

    is_integer = True
    nargs = (2,)

    @classmethod
    def eval(cls, base: Expr, divisor: Expr) -> Expr | None:
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv) and divisor.is_Integer and base.args[1].is_Integer:
            return FloorDiv(base.args[0], base.args[1] * divisor)
        if divisor.is_Integer:
            # Pull out terms whose coefficients are multiples of the divisor:
            # (a*d + b) // d == a + b // d when b >= 0 (indices are non-negative).
            d = int(divisor)
            if base.is_Add:
                keep, out = [], []
                for term in base.args:
                    coeff, rest = term.as_coeff_Mul()
                    if coeff.is_Integer and int(coeff) % d == 0:
                        out.append(sympy.Integer(int(coeff) // d) * rest)
                    else:
                        keep.append(term)
                if out:
                    return sympy.Add(*out) + FloorDiv(sympy.Add(*keep), divisor)
            elif base.is_Mul:
                coeff, rest = base.as_coeff_Mul()
                if coeff.is_Integer and int(coeff) % d == 0:
                    return sympy.Integer(int(coeff) // d) * rest
        return None


class ModularIndexing(sympy.Function):
    """``(base // divisor) % modulus`` for non-negative integer ``base``."""

    is_integer = True
    nargs = (3,)

    @classmethod
    def eval(cls, base: Expr, divisor: Expr, modulus: Expr) -> Expr | None:
        if modulus == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if isinstance(base, FloorDiv) and base.args[1].is_Integer and divisor.is_Integer:
            # ((e // a) // b) % m == (e // (a*b)) % m
            return ModularIndexing(base.args[0], base.args[1] * divisor, modulus)
        if divisor.is_Integer and modulus.is_Integer and base.is_Add:
            # Drop terms that are multiples of divisor*modulus: they do not change the result.
            dm = int(divisor) * int(modulus)
            keep = []
            changed = False
            for term in base.args:
                coeff, _ = term.as_coeff_Mul()
                if coeff.is_Integer and int(coeff) % dm == 0:
                    changed = True
                else:
                    keep.append(term)
            if changed:
                return ModularIndexing(sympy.Add(*keep), divisor, modulus)
        return None


def sym(name: str) -> sympy.Symbol:
    """An index variable (non-negative integer)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def contiguous_strides(sizes: Sequence[int]) -> list[int]:
    strides = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(strides))


def prod(values: Iterable[int]) -> int:
    return int(math.prod(int(v) for v in values))


def strided_index(index: Sequence[Expr], strides: Sequence[int], offset: int = 0) -> Expr:
    """The linear storage offset of ``index`` under ``strides`` (+ ``offset``)."""
    expr: Expr = sympy.Integer(offset)
    for i, s in zip(index, strides):
        if s != 0:
            expr = expr + i * int(s)
    return expr


def unflatten_index(flat: Expr, sizes: Sequence[int]) -> list[Expr]:
    """Split a flat (row-major) index over ``sizes`` into one index per dimension."""
    out: list[Expr] = []
    stride = 1
    for k in range(len(sizes) - 1, -1, -1):
        size = int(sizes[k])
        if size == 1:
            out.append(sympy.Integer(0))
        elif k == 0:
            out.append(FloorDiv(flat, stride))
        else:
            out.append(ModularIndexing(flat, stride, size))
        stride *= max(size, 1)
    return list(reversed(out))


def simplify_with_ranges(expr: Expr, ranges: dict[sympy.Symbol, int]) -> Expr:
    """Simplify ``expr`` knowing each symbol ``v`` lies in ``[0, ranges[v])``.

    Folds ``ModularIndexing(v, d, m)`` into ``FloorDiv(v, d)`` when ``v < d*m`` and
    ``FloorDiv(e, d)`` into 0 when ``e < d``: the shapes that come from merging and splitting
    iteration dimensions.
    """

    def upper(e: Expr) -> int | None:
        # Exclusive upper bound of a non-negative expression, when linear in known symbols.
        if e.is_Integer:
            return int(e) + 1
        if isinstance(e, sympy.Symbol):
            return ranges.get(e)
        if e.is_Add:
            total = 0
            for a in e.args:
                u = upper(a)
                if u is None:
                    return None
                total += u - 1
            return total + 1
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if coeff.is_Integer and int(coeff) >= 0:
                u = upper(rest)
                return None if u is None else (u - 1) * int(coeff) + 1
            return None
        if isinstance(e, FloorDiv) and e.args[1].is_Integer:
            u = upper(e.args[0])
            return None if u is None else (u - 1) // int(e.args[1]) + 1
        if isinstance(e, ModularIndexing) and e.args[2].is_Integer:
            return int(e.args[2])
        return None

    def drop_small_terms(base: Expr, d: int) -> tuple[Expr, int] | None:
        """``(big / g, g)`` when ``base = big + small`` with ``g | d``, ``g | big`` and ``0 <= small < g``.

        Then ``base // d == (big / g) // (d / g)``: e.g. ``(32*x + r) // 256 == x // 8`` for ``r < 32``.
        """
        terms = list(base.args) if base.is_Add else [base]
        coeffs = [t.as_coeff_Mul()[0] for t in terms]
        candidates = sorted({math.gcd(d, int(c)) for c in coeffs if c.is_Integer and int(c) > 0}, reverse=True)
        for g in candidates:
            if g <= 1:
                continue
            big = [t for t, c in zip(terms, coeffs) if c.is_Integer and int(c) % g == 0]
            small = [t for t, c in zip(terms, coeffs) if not (c.is_Integer and int(c) % g == 0)]
            if not small or not big:
                continue
            bound = upper(sympy.Add(*small))
            if bound is not None and bound <= g and all(c.is_Integer and int(c) >= 0 for c in coeffs):
                return sympy.expand(sympy.Add(*big) / g), g
        return None

    def visit(e: Expr) -> Expr:
        if not e.args:
            return e
        args = [visit(a) for a in e.args]
        e = e.func(*args) if any(a is not b for a, b in zip(args, e.args)) else e
        if isinstance(e, (FloorDiv, ModularIndexing)) and e.args[1].is_Integer:
            split = drop_small_terms(e.args[0], int(e.args[1]))
            if split is not None:
                big, g = split
                if isinstance(e, FloorDiv):
                    e = FloorDiv(big, int(e.args[1]) // g)
                else:
                    e = ModularIndexing(big, int(e.args[1]) // g, e.args[2])
                if not isinstance(e, (FloorDiv, ModularIndexing)):
                    return e
        if isinstance(e, ModularIndexing):
            base, d, m = e.args
            u = upper(base)
            if u is not None and d.is_Integer and m.is_Integer and u <= int(d) * int(m):
                return FloorDiv(base, d)
        if isinstance(e, FloorDiv):
            base, d = e.args
            u = upper(base)
            if u is not None and d.is_Integer and u <= int(d):
                return sympy.Integer(0)
        return e

    prev = None
    out = sympy.expand(expr)
    while prev != out:
        prev = out
        out = join_terms(visit(out))
    return out


def join_terms(expr: Expr) -> Expr:
    """Fold split dimensions back together inside a sum:

    ``c*a*FloorDiv(e, a) + c*ModularIndexing(e, 1, a) -> c*e`` and
    ``c*a*ModularIndexing(e, a, m) + c*ModularIndexing(e, 1, a) -> c*ModularIndexing(e, 1, a*m)``
    (how a contiguous access over merged iteration dimensions becomes ``xindex`` again).
    """
    if not expr.is_Add:
        return expr
    terms = [t.as_coeff_Mul() for t in expr.args]
    for i, (ci, ti) in enumerate(terms):
        if not (isinstance(ti, ModularIndexing) and ti.args[1] == 1 and ci.is_Integer):
            continue
        base, _, a = ti.args
        for j, (cj, tj) in enumerate(terms):
            if j == i or not cj.is_Integer:
                continue
            if isinstance(tj, FloorDiv) and tj.args[0] == base and tj.args[1] == a and cj == ci * a:
                joined = ci * base
            elif isinstance(tj, ModularIndexing) and tj.args[0] == base and tj.args[1] == a and cj == ci * a:
                joined = ci * ModularIndexing(base, 1, a * tj.args[2])
            else:
                continue
            rest = [c * t for k, (c, t) in enumerate(terms) if k not in (i, j)]
            return join_terms(sympy.Add(joined, *rest))
    return expr


def linear_coefficient(expr: Expr, var: sympy.Symbol) -> int | None:
    """The integer coefficient of ``var`` in ``expr`` if ``expr`` is linear in it, else None."""
    if var not in expr.free_symbols:
        return 0
    poly_part = sympy.expand(expr)
    coeff = poly_part.coeff(var, 1)
    rest = sympy.expand(poly_part - coeff * var)
    if var in rest.free_symbols or not coeff.is_Integer:
        return None
    return int(coeff)


def texpr(expr: Expr) -> str:
    """Print an index expression as Triton/Python source (integer arithmetic)."""
    return _Printer().doprint(expr)


class _Printer(sympy.printing.str.StrPrinter):
    def _print_FloorDiv(self, e: FloorDiv) -> str:
        return f"({self._paren(e.args[0])} // {self._paren(e.args[1])})"

    def _print_ModularIndexing(self, e: ModularIndexing) -> str:
        base, d, m = e.args
        inner = self._paren(base) if d == 1 else f"({self._paren(base)} // {self._paren(d)})"
        return f"({inner} % {self._paren(m)})"

    def _print_Mul(self, e: sympy.Mul) -> str:
        return " * ".join(self._paren(a) for a in e.args)

    def _print_Add(self, e: sympy.Add) -> str:
        terms = sorted(e.args, key=lambda t: (t.is_Integer, sympy.default_sort_key(t)))
        text = self._print(terms[0])
        for t in terms[1:]:
            if t.is_Integer and int(t) < 0:
                text += f" - {-int(t)}"
            else:
                text += f" + {self._paren(t)}"
        return text

    def _print_Min(self, e: sympy.Min) -> str:
        # Tensor-valued arguments first: tl.minimum(<block>, 5) rather than tl.minimum(5, <block>).
        args = [self._print(a) for a in sorted(e.args, key=lambda a: a.is_Integer)]
        text = args[0]
        for a in args[1:]:
            text = f"tl.minimum({text}, {a})"
        return text

    def _print_Max(self, e: sympy.Max) -> str:
        args = [self._print(a) for a in sorted(e.args, key=lambda a: a.is_Integer)]
        text = args[0]
        for a in args[1:]:
            text = f"tl.maximum({text}, {a})"
        return text

    def _print_Integer(self, e: sympy.Integer) -> str:
        return str(int(e))

    def _print_Symbol(self, e: sympy.Symbol) -> str:
        return e.name

    def _paren(self, e: Expr) -> str:
        text = self._print(e)
        if e.is_Add or (e.is_Integer and int(e) < 0):
            return f"({text})"
        return text
