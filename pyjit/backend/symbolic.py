"""Index arithmetic for the loop IR: sympy functions, simplification and printing.

Owns the integer index language the loop bodies speak: :class:`FloorDiv` and
:class:`ModularIndexing` (non-negative integer division and ``(x // d) % m``), helpers to
build contiguous index expressions from sizes/strides, range-aware simplification, and
:func:`texpr`, which prints an index expression as Triton/Python source.
Sizes are Python ints for static dimensions and sympy expressions over the ``ShapeEnv``'s
size symbols (``s0``, ``s1``...; each >= 2) for dynamic ones (:func:`as_size` converts torch's
``SymInt`` s); the helpers here accept both and return plain ints when everything is static, so
static graphs build exactly the expressions they always did. :func:`size_hints` holds the
example values of the symbols while one graph compiles: heuristics (block sizes) read them
through :func:`hint`, correctness never does. :func:`pexpr` prints an expression as host Python
(the wrapper), :func:`texpr` as Triton; a base that may be negative (it reads a symbolic int
input) divides with floor semantics in every printer, and what the language cannot express
becomes a host value (:func:`host_values`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from typing import Any, Iterable, Iterator, Sequence

import sympy

Expr = sympy.Expr


class FloorDiv(sympy.Function):
    """``base // divisor`` for non-negative integer ``base`` and positive integer ``divisor``."""

    is_integer = True
    nargs = (2,)

    def _eval_is_nonnegative(self) -> bool | None:
        return self.args[0].is_nonnegative

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
        if isinstance(base, ModularIndexing) and base.args[1] == 1 and _same(base.args[2], divisor):
            return sympy.Integer(0)  # (e % n) // n
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
                if out and _nonnegative(keep):
                    return sympy.Add(*out) + FloorDiv(sympy.Add(*keep), divisor)
            elif base.is_Mul:
                coeff, rest = base.as_coeff_Mul()
                if coeff.is_Integer and int(coeff) % d == 0:
                    return sympy.Integer(int(coeff) // d) * rest
        elif divisor.free_symbols:
            # A symbolic divisor (a dynamic size): pull out the terms it divides exactly.
            out, keep = _split_multiples(base, divisor)
            if out and _nonnegative(keep):
                return sympy.Add(*out) + FloorDiv(sympy.Add(*keep), divisor)
        return None


def _nonnegative(terms: list[Expr]) -> bool:
    """Whether the sum of ``terms`` is provably >= 0. Taking multiples of the divisor out of a
    floor division or a modulus is exact in Python's floor semantics for any remainder, but the
    generated C++ and Triton divide and take remainders truncating toward zero, which agrees
    only for a non-negative base: ``(8 - s % 8) % 8`` simplified to ``(-(s % 8)) % 8`` printed
    as ``-5 % 8 == -5`` in C++ (a symbolic pad's size came out 1 instead of 9)."""
    return bool(sympy.Add(*terms).is_nonnegative)


def _split_multiples(base: Expr, divisor: Expr) -> tuple[list[Expr], list[Expr]]:
    """(quotients of the terms of ``base`` that ``divisor`` divides exactly, the other terms)."""
    out, keep = [], []
    dcoeff, drest = divisor.as_coeff_Mul()
    dpowers = drest.as_powers_dict()
    for term in (base.args if base.is_Add else (base,)):
        q = _exact_quotient(term, dcoeff, dpowers)
        if q is None:
            keep.append(term)
        else:
            out.append(q)
    return out, keep


def _exact_quotient(term: Expr, dcoeff: Expr, dpowers: dict[Expr, Expr]) -> Expr | None:
    """``term / divisor`` when it is a monomial with integer coefficient, else None (no
    ``sympy.cancel``: it would rebuild, and so re-evaluate, the index functions inside)."""
    coeff, rest = term.as_coeff_Mul()
    if not (coeff.is_Integer and dcoeff.is_Integer) or int(coeff) % int(dcoeff) != 0:
        return None
    powers = dict(rest.as_powers_dict())
    for base, exp in dpowers.items():
        have = powers.get(base, 0)
        if not (exp.is_Integer and (have.is_Integer if isinstance(have, sympy.Basic) else True)) \
                or int(have) < int(exp):
            return None
        powers[base] = int(have) - int(exp)
    return sympy.Integer(int(coeff) // int(dcoeff)) * sympy.Mul(*[b ** e for b, e in powers.items() if e != 0])


class ModularIndexing(sympy.Function):
    """``(base // divisor) % modulus`` for non-negative integer ``base``."""

    is_integer = True
    nargs = (3,)

    def _eval_is_nonnegative(self) -> bool:
        return True  # the base is kept non-negative (FloorDiv.eval, ModularIndexing.eval)

    @classmethod
    def eval(cls, base: Expr, divisor: Expr, modulus: Expr) -> Expr | None:
        if modulus == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if isinstance(base, FloorDiv) and base.args[1].is_Integer and divisor.is_Integer:
            # ((e // a) // b) % m == (e // (a*b)) % m
            return ModularIndexing(base.args[0], base.args[1] * divisor, modulus)
        if isinstance(base, ModularIndexing) and base.args[1] == 1 and _divides(divisor * modulus, base.args[2]):
            # ((e % M) // d) % m == (e // d) % m when d*m divides M
            return ModularIndexing(base.args[0], divisor, modulus)
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
            if changed and _nonnegative(keep):
                return ModularIndexing(sympy.Add(*keep), divisor, modulus)
        if (divisor.free_symbols or modulus.free_symbols) and not base.is_Integer:
            # Symbolic sizes: drop the terms that are multiples of divisor*modulus.
            dropped, keep = _split_multiples(base, divisor * modulus)
            if dropped and _nonnegative(keep):
                return ModularIndexing(sympy.Add(*keep), divisor, modulus)
        return None


class TrueDiv(sympy.Function):
    """``a / b`` as Python divides two sizes: a float, never an index. Batch norm's ``numel / C``
    and its unbiased-variance factor ``n / (n - 1)`` are such values; they reach kernels only as
    scalar operands of pointwise ops (``ops.constant``), computed from the size arguments, and
    the host (the wrapper, a backward's saved sizes) evaluates them in Python."""

    is_real = True
    nargs = (2,)

    @classmethod
    def eval(cls, a: Expr, b: Expr) -> Expr | None:
        if a.is_Number and b.is_Number and b != 0:
            return sympy.Float(float(a) / float(b))
        return None


def sym(name: str) -> sympy.Symbol:
    """An index variable (non-negative integer)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


Size = Any  # int, or a sympy expression over size symbols


def is_static(value: Any) -> bool:
    """True for a concrete integer size (Python int or sympy Integer)."""
    return isinstance(value, int) or (isinstance(value, sympy.Basic) and value.is_Integer)


def as_size(value: Any) -> Size:
    """A size as the IR keeps it: ``int`` when concrete, else a sympy expression.

    Accepts ints, sympy expressions and torch ``SymInt`` s (whose expression is converted from
    torch's sympy functions to ours, see :func:`from_torch_expr`).
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, sympy.Basic):
        return int(value) if value.is_Integer else value
    node = getattr(value, "node", None)
    if node is not None and hasattr(node, "expr"):
        expr = from_torch_expr(node.expr)
        return int(expr) if expr.is_Integer else expr
    return int(value)


def from_torch_expr(expr: Expr) -> Expr:
    """A ShapeEnv expression rewritten with this module's index functions.

    Sizes are non-negative, so torch's ``FloorDiv``/``CleanDiv``/``Mod``/``PythonMod`` map to
    :class:`FloorDiv` / :class:`ModularIndexing`, ``CeilToInt``/``FloorToInt`` of an
    ``IntTrueDiv`` of sizes to a :class:`FloorDiv`, and other true divisions (float values) to
    :class:`TrueDiv`; a function we do not know becomes a value the wrapper computes in Python
    while a graph lowers (:func:`host_values`), else raises ``NotImplementedError`` (the graph
    then runs as captured).
    """
    if not expr.args or expr.is_Symbol or expr.is_Number:
        return expr
    name = type(expr).__name__
    if name in ("CeilToInt", "FloorToInt", "TruncToInt") and type(expr.args[0]).__name__ == "IntTrueDiv":
        # math.ceil(n / 32), as in the memory-efficient attention's log-sum-exp rows
        # (ceil(s / 32) * 32): exact integer division when both sides are sizes.
        num, den = (from_torch_expr(a) for a in expr.args[0].args)
        if num.is_nonnegative and den.is_positive:
            return FloorDiv(num + den - 1, den) if name == "CeilToInt" else FloorDiv(num, den)
    args = [from_torch_expr(a) for a in expr.args]
    if name in ("IntTrueDiv", "FloatTrueDiv"):
        return TrueDiv(*args)
    if name == "ToFloat":
        return TrueDiv(args[0], sympy.Integer(1))  # a size used as a float
    if name in ("FloorDiv", "CleanDiv"):
        return FloorDiv(*args)
    if name in ("Mod", "PythonMod"):
        return ModularIndexing(args[0], sympy.Integer(1), args[1])
    if name == "ModularIndexing":
        return ModularIndexing(*args)
    if name in ("Max",):
        return sympy.Max(*args)
    if name in ("Min",):
        return sympy.Min(*args)
    if name == "PowByNatural":
        return sympy.Pow(*args)
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Pow)):
        return expr.func(*args)
    if isinstance(expr, (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge, sympy.And, sympy.Or,
                         sympy.Not)):
        # Guards (relations between sizes): checked on the host, printed by :func:`pexpr`.
        return expr.func(*args)
    register = _HOST.get()
    if register is not None:
        # Outside the index language (a float function, ``ceil`` of a float quotient): the
        # wrapper computes it in Python, kernels read it as one more symbol.
        return register(expr, bool(expr.is_integer))
    raise NotImplementedError(f"size expression {expr} uses {name}, which pyjit does not compile")


@dataclasses.dataclass(frozen=True)
class _SizeContext:
    hints: dict[sympy.Symbol, int]
    lower: dict[sympy.Symbol, Any]  # a symbol's lower bound (an int, or None: unbounded)
    facts: frozenset[Expr]  # relations the graph's guards make true on every call


_NO_CONTEXT = _SizeContext({}, {}, frozenset())
_CTX: contextvars.ContextVar[_SizeContext] = contextvars.ContextVar("pyjit_size_context", default=_NO_CONTEXT)


@contextlib.contextmanager
def size_hints(hints: dict[sympy.Symbol, int], lower: dict[sympy.Symbol, Any] | None = None,
               facts: Iterable[Expr] = ()) -> Iterator[None]:
    """What is known about the size symbols while one graph compiles.

    ``hints``: their example values (heuristics only, see :func:`hint`). ``lower``: each
    symbol's lower bound from the ``ShapeEnv`` (None for a scalar input that may be negative;
    a symbol missing here is a size, >= 2). ``facts``: relations the graph's guards check on
    every call (the tracer's guards and the module's ``check``), used by :func:`known_true`.
    """
    ctx = _SizeContext(dict(hints), dict(lower or {}), frozenset(_canonical(f) for f in facts))
    token = _CTX.set(ctx)
    try:
        yield
    finally:
        _CTX.reset(token)


_HOST: contextvars.ContextVar[Any] = contextvars.ContextVar("pyjit_host_values", default=None)


@contextlib.contextmanager
def host_values(register: Any) -> Iterator[None]:
    """While a graph lowers: ``register(expr, is_int)`` returns the symbol of a value the wrapper
    computes on the host; :func:`from_torch_expr` uses it for what the index language lacks."""
    token = _HOST.set(register)
    try:
        yield
    finally:
        _HOST.reset(token)


def current_hints() -> dict[sympy.Symbol, Any]:
    """The example values of the symbols of the graph being compiled (see :func:`size_hints`)."""
    return _CTX.get().hints


def register_symbol(symbol: sympy.Symbol, value: int | float | None, lower: int | None = None) -> None:
    """A symbol the compile introduces (a scalar computed on the host): its example value for
    heuristics, and its lower bound (None: it is not a size and may be negative)."""
    ctx = _CTX.get()
    if ctx is _NO_CONTEXT:  # no graph is compiling: nothing to tell
        return
    if value is not None:
        ctx.hints[symbol] = value  # type: ignore[assignment]
    ctx.lower[symbol] = lower


def hint(value: Size) -> int:
    """The example value of a size: the value itself when static. For heuristics only."""
    if is_static(value):
        return int(value)
    expr = sympy.sympify(value)
    hints = _CTX.get().hints
    out = expr.xreplace({s: sympy.Integer(hints[s]) for s in expr.free_symbols if s in hints})
    if not out.is_number:
        raise NotImplementedError(f"no size hint for {value}")
    return int(out) if out.is_integer else float(out)  # type: ignore[return-value]


def _canonical(rel: Expr) -> Expr:
    """A relation in sympy's canonical orientation (``a >= b`` and ``b <= a`` compare equal)."""
    try:
        return rel.canonical if isinstance(rel, sympy.core.relational.Relational) else rel
    except (TypeError, AttributeError):
        return rel


def _nonneg_form(rel: Expr) -> Expr | None:
    """``e`` with ``rel`` equivalent to ``e >= 0``, for an inequality between integer sizes
    (``a < b`` is ``b - a - 1 >= 0``); None for anything else."""
    if not isinstance(rel, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)) \
            or not all(s.is_integer for s in rel.free_symbols):
        return None
    e = rel.lhs - rel.rhs if isinstance(rel, (sympy.Ge, sympy.Gt)) else rel.rhs - rel.lhs
    return sympy.expand(e - 1 if isinstance(rel, (sympy.Gt, sympy.Lt)) else e)


def _from_bounds(cond: Expr, lower: dict[sympy.Symbol, Any]) -> bool:
    """Whether sympy proves ``cond`` from the symbols' lower bounds alone."""
    try:
        shift = {}
        for s in cond.free_symbols:
            lo = lower.get(s, 2)
            if lo is not None:
                shift[s] = sympy.Symbol(f"_{s.name}_lo", integer=True, nonnegative=True) + int(lo)
        return bool(cond.xreplace(shift)) is True
    except TypeError:
        return False


def known_true(cond: Any) -> bool:
    """Whether a size relation holds on every call of the graph being compiled.

    True when sympy proves it from the symbols' lower bounds (a size symbol is >= 2, a scalar
    input symbol has the bound its ``ShapeEnv`` range gives, see :func:`size_hints`), or when it
    follows from one guarded fact: ``e >= 0`` follows from a fact ``f >= 0`` when ``e - f >= 0``
    follows from the bounds (so ``s1 - s0 >= 0`` follows from a guard ``s0 <= s1``), and an
    equation follows from itself. A relation that cannot be decided is False: callers take the
    conservative branch or refuse.
    """
    if isinstance(cond, bool):
        return cond
    ctx = _CTX.get()
    if _from_bounds(cond, ctx.lower):
        return True
    if not ctx.facts:
        return False
    if _canonical(cond) in ctx.facts:
        return True
    e = _nonneg_form(cond)
    if e is None:
        return False
    for fact in ctx.facts:
        f = _nonneg_form(fact)
        if f is not None and _from_bounds(sympy.Ge(sympy.expand(e - f), 0), ctx.lower):
            return True
    return False


def contiguous_strides(sizes: Sequence[Size]) -> list[Size]:
    strides = []
    acc: Size = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * max(int(s), 1) if is_static(s) else acc * s
    return [as_size(st) for st in reversed(strides)]


def prod(values: Iterable[Size]) -> Size:
    values = list(values)
    if all(is_static(v) for v in values):
        return int(math.prod(int(v) for v in values))
    return as_size(sympy.Mul(*[sympy.sympify(v) for v in values]))


def strided_index(index: Sequence[Expr], strides: Sequence[Size], offset: Size = 0) -> Expr:
    """The linear storage offset of ``index`` under ``strides`` (+ ``offset``)."""
    expr: Expr = sympy.sympify(offset)
    for i, s in zip(index, strides):
        if s != 0:
            expr = expr + i * (int(s) if is_static(s) else s)
    return expr


def unflatten_index(flat: Expr, sizes: Sequence[int]) -> list[Expr]:
    """Split a flat (row-major) index over ``sizes`` into one index per dimension."""
    out: list[Expr] = []
    stride = 1
    for k in range(len(sizes) - 1, -1, -1):
        size = as_size(sizes[k])
        if size == 1:
            out.append(sympy.Integer(0))
        elif k == 0:
            out.append(FloorDiv(flat, stride))
        else:
            out.append(ModularIndexing(flat, stride, size))
        stride = stride * (max(size, 1) if is_static(size) else size)
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
            r = ranges.get(e)
            return r if isinstance(r, int) else None  # a symbolic range has no integer bound
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
            if rest == e:  # a product of non-numbers (e.g. xindex * s0): no bound
                return None
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
        if e.is_Add:
            e = join_terms(e)  # also inside index functions: (512*(x // 512) + x % 512) // n
            if not e.args:
                return e
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
    (how a contiguous access over merged iteration dimensions becomes ``xindex`` again). ``c``
    and ``a`` may be expressions over size symbols (``a*(e // a) + e % a == e`` for every
    ``a > 0``), so symbolic sizes simplify like static ones.
    """
    if not expr.is_Add:
        return expr
    terms = [_index_factor(t) for t in expr.args]
    for i, split_i in enumerate(terms):
        if split_i is None:
            continue
        ci, ti = split_i
        if not isinstance(ti, ModularIndexing):
            continue
        base, d, a = ti.args
        for j, split_j in enumerate(terms):
            if j == i or split_j is None:
                continue
            cj, tj = split_j
            if tj.args[0] != base or not _same(tj.args[1], d * a) or not _same(cj, ci * a):
                continue
            # (e // d) % a + a * (e // (d*a)) == e // d, and the same under a modulus
            if isinstance(tj, FloorDiv):
                joined = ci * FloorDiv(base, d)
            elif isinstance(tj, ModularIndexing):
                joined = ci * ModularIndexing(base, d, a * tj.args[2])
            else:
                continue
            rest = [t for k, t in enumerate(expr.args) if k not in (i, j)]
            return join_terms(sympy.Add(joined, *rest))
    return expr


def _index_factor(term: Expr) -> tuple[Expr, Expr] | None:
    """``(c, f)`` with ``term == c * f``, ``f`` its one FloorDiv/ModularIndexing factor, else None."""
    if isinstance(term, (FloorDiv, ModularIndexing)):
        return sympy.Integer(1), term
    if term.is_Mul:
        found = [a for a in term.args if isinstance(a, (FloorDiv, ModularIndexing))]
        if len(found) == 1:
            rest = [a for a in term.args if a is not found[0]]
            if not any(r.has(FloorDiv, ModularIndexing) for r in rest):
                return sympy.Mul(*rest), found[0]
    return None


def _same(a: Expr, b: Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0


def _divides(d: Expr, n: Expr) -> bool:
    """``d`` divides ``n`` for every value of the size symbols (products of integers and symbols)."""
    if d.is_Integer and n.is_Integer:
        return int(n) % int(d) == 0
    if d.has(FloorDiv, ModularIndexing) or n.has(FloorDiv, ModularIndexing):
        return False
    return bool(sympy.cancel(n / d).is_integer) and sympy.fraction(sympy.cancel(n / d))[1] == 1


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


def pexpr(expr: Any) -> str:
    """Print a size expression as host Python (the wrapper): ``min``/``max`` builtins."""
    if is_static(expr):
        return str(int(expr))
    return _PythonPrinter().doprint(expr)


def signed(e: Expr) -> bool:
    """Whether ``e`` reads a symbol that may be negative (a symbolic int input, not a size or an
    index variable): integer division and remainder of it need Python's floor semantics."""
    return any(not s.is_nonnegative for s in e.free_symbols)


class _Printer(sympy.printing.str.StrPrinter):
    """Index expressions for Triton (also the base of the host Python and C++ printers).

    ``//`` and ``%`` of Triton and C++ truncate toward zero; they agree with Python's (and
    torch's ``FloorDiv``/``Mod``) for a non-negative base. A base over a symbolic int input may
    be negative: it is printed through ``r = ((a % d) + d) % d`` (the floor remainder in either
    semantics for ``d > 0``) and ``(a - r) // d`` (an exact division)."""

    _div = "//"

    def _print_FloorDiv(self, e: FloorDiv) -> str:
        base, d = e.args
        if signed(base):
            return f"(({self._paren(base)} - {self._floor_mod(base, d)}) {self._div} {self._divisor(d)})"
        return f"({self._paren(base)} {self._div} {self._atom(d)})"

    def _print_ModularIndexing(self, e: ModularIndexing) -> str:
        base, d, m = e.args
        if signed(base):
            if d != 1:
                return self._floor_mod(FloorDiv(base, d), m)
            return self._floor_mod(base, m)
        inner = self._paren(base) if d == 1 else f"({self._paren(base)} {self._div} {self._atom(d)})"
        return f"({inner} % {self._atom(m)})"

    def _floor_mod(self, base: Expr, d: Expr) -> str:
        div = self._divisor(d)
        return f"((({self._print(base)}) % {div} + {div}) % {div})"

    def _divisor(self, d: Expr) -> str:
        if not d.is_positive:
            raise NotImplementedError(f"integer division by {d}, which may be negative or zero")
        return self._atom(d)

    def _print_TrueDiv(self, e: TrueDiv) -> str:
        # Python and Triton: ``/`` of integers is a true (float) division.
        return f"({self._paren(e.args[0])} / {self._atom(e.args[1])})"

    def _atom(self, e: Expr) -> str:
        """``e`` as the right operand of ``//`` or ``%`` (a symbolic size like ``8*s0`` needs parentheses)."""
        text = self._print(e)
        return text if (e.is_Symbol or (e.is_Integer and int(e) >= 0)) else f"({text})"

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

    def _print_Pow(self, e: sympy.Pow) -> str:
        base, exp = e.args
        if exp.is_Integer and int(exp) > 0:
            return "(" + " * ".join([self._paren(base)] * int(exp)) + ")"
        raise NotImplementedError(f"cannot print {e} as an index")

    def _print_Symbol(self, e: sympy.Symbol) -> str:
        return e.name

    def _paren(self, e: Expr) -> str:
        text = self._print(e)
        if e.is_Add or (e.is_Integer and int(e) < 0):
            return f"({text})"
        return text


class _PythonPrinter(_Printer):
    """Host Python: builtins ``min``/``max``, relations and ``and``/``or``/``not`` (guards).
    Python's ``//`` and ``%`` already floor."""

    def _print_FloorDiv(self, e: FloorDiv) -> str:
        return f"({self._paren(e.args[0])} // {self._atom(e.args[1])})"

    def _print_ModularIndexing(self, e: ModularIndexing) -> str:
        base, d, m = e.args
        inner = self._paren(base) if d == 1 else f"({self._paren(base)} // {self._atom(d)})"
        return f"({inner} % {self._atom(m)})"

    def _print_Min(self, e: sympy.Min) -> str:
        return "min(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Max(self, e: sympy.Max) -> str:
        return "max(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Relational(self, e: Any) -> str:
        return f"({self._print(e.lhs)} {e.rel_op} {self._print(e.rhs)})"

    def _print_And(self, e: Any) -> str:
        return "(" + " and ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e: Any) -> str:
        return "(" + " or ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e: Any) -> str:
        return f"(not {self._print(e.args[0])})"

    def _print_BooleanTrue(self, e: Any) -> str:
        return "True"

    def _print_BooleanFalse(self, e: Any) -> str:
        return "False"

    def _print_Float(self, e: sympy.Float) -> str:
        return repr(float(e))

    def _print_Rational(self, e: sympy.Rational) -> str:
        return f"({int(e.p)} / {int(e.q)})"

    def _print_Function(self, e: Any) -> str:
        raise NotImplementedError(f"cannot print {e} ({type(e).__name__}) as host Python")
