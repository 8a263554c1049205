"""Shape-relation programs: the little language in which shape guards reach the C core.

Owns the opcode numbers (a contract with ``csrc/shape_program.h``), the compiler from a sympy
relation over symbolic sizes (``s0 >= 2``, ``Eq(Mod(s0, 8), 0)``, ``Eq(s1, 64*s0)``) to a
program (``compile_relation``), the pure-Python evaluator with the C evaluator's exact
semantics (``run_program``), the validator (``validate_program``, same rules and messages as
``GuardTree.check_symbols``) and the printer (``format_program``: the relation as Python
source for logs, ``L['x'].size()[0] >= 2``).

A program is a flat tuple of ints in reverse-Polish order: ``CONST c`` and ``SLOT k`` push
(the int64 constant, the value of symbol slot ``k``), every other opcode pops its operands
and pushes one result. Values are int64; truth values are 0/1 and any non-zero value is
true. ``//`` and ``%`` follow Python (floor toward -inf). The relation *fails* (the guard
misses, nothing is raised) on a zero divisor, a negative exponent, an int64 overflow anywhere,
or a slot that no tensor check bound. Failing is always safe: the caller recompiles.

Torch-free; sympy is imported only inside ``compile_relation``. torch's sympy functions are
recognised by class name (``FloorDiv``, ``PythonMod``, ...), so this module never imports torch.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

# --- opcodes (csrc/shape_program.h: ShapeOp) ------------------------------------------------
CONST = 0      # operand: int64 constant
SLOT = 1       # operand: slot number
ADD = 2
SUB = 3
MUL = 4
FLOORDIV = 5   # Python //; divisor 0 fails
MOD = 6        # Python %; divisor 0 fails
POW = 7        # exponent >= 0, else fails
NEG = 8
MIN = 9
MAX = 10
EQ = 11
NE = 12
LT = 13
LE = 14
GT = 15
GE = 16
AND = 17
OR = 18
NOT = 19
OP_COUNT = 20

MAX_SLOTS = 1024        # slot numbers are in [0, MAX_SLOTS) (PYJIT_MAX_SLOTS)
MAX_DEPTH = 64          # operand stack limit (PYJIT_PROGRAM_MAX_DEPTH)
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

OP_NAMES = {
    CONST: "CONST", SLOT: "SLOT", ADD: "ADD", SUB: "SUB", MUL: "MUL", FLOORDIV: "FLOORDIV",
    MOD: "MOD", POW: "POW", NEG: "NEG", MIN: "MIN", MAX: "MAX", EQ: "EQ", NE: "NE", LT: "LT",
    LE: "LE", GT: "GT", GE: "GE", AND: "AND", OR: "OR", NOT: "NOT",
}
UNARY = frozenset({NEG, NOT})
BINARY = frozenset(range(ADD, OP_COUNT)) - UNARY


class NotCompilable(ValueError):
    """The relation uses something the program language lacks (a rational, a float, an
    unknown function, a symbol without a slot): check it in Python instead."""


# --- validation ----------------------------------------------------------------------------
def validate_program(program: tuple[int, ...]) -> int:
    """Check a program as ``GuardTree.check_symbols`` does; returns 1 + the largest slot read
    (0 if none). Raises TypeError (not a tuple of ints) or ValueError (what is wrong)."""
    if type(program) is tuple and all(type(v) is int for v in program):
        return _validate_cached(program)
    # Not cached: ``(0, True) == (0, 1)`` would hit the cache entry of a valid program.
    return _validate(program)


@functools.lru_cache(maxsize=4096)
def _validate_cached(program: tuple[int, ...]) -> int:
    return _validate(program)


def _validate(program: tuple[int, ...]) -> int:
    if not isinstance(program, (tuple, list)):
        raise TypeError(f"check_symbols(): program must be a tuple of ints, got {type(program).__name__}")
    if not program:
        raise ValueError("check_symbols(): empty program")
    for i, v in enumerate(program):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"check_symbols(): program[{i}] is {type(v).__name__}, expected an int")
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError(f"check_symbols(): program[{i}] does not fit in int64")
    depth = n_slots = 0
    pc = 0
    n = len(program)
    while pc < n:
        op = program[pc]
        if not 0 <= op < OP_COUNT:
            raise ValueError(f"check_symbols(): unknown opcode {op} at program[{pc}]")
        if op in (CONST, SLOT):
            if pc + 1 >= n:
                raise ValueError(f"check_symbols(): opcode {op} at program[{pc}] needs an operand")
            pc += 1
            if op == SLOT:
                slot = program[pc]
                if not 0 <= slot < MAX_SLOTS:
                    raise ValueError(f"check_symbols(): slot {slot} at program[{pc}] out of range [0, {MAX_SLOTS})")
                n_slots = max(n_slots, slot + 1)
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"check_symbols(): program needs more than {MAX_DEPTH} stack entries")
        else:
            arity = 1 if op in UNARY else 2
            if depth < arity:
                raise ValueError(f"check_symbols(): opcode {op} at program[{pc}] needs {arity} operand(s), stack has {depth}")
            depth -= arity - 1
        pc += 1
    if depth != 1:
        raise ValueError(f"check_symbols(): program leaves {depth} values on the stack, expected 1")
    return n_slots


# --- evaluation ----------------------------------------------------------------------------
class _Fail(Exception):
    pass


def _fit(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise _Fail
    return v


def _pow(a: int, b: int) -> int:
    if b < 0:
        raise _Fail
    if a in (0, 1, -1) or b <= 64:
        return _fit(a ** b)
    raise _Fail  # |a| >= 2 and b > 64: certainly beyond int64 (and too big to compute cheaply)


def _binary(op: int, a: int, b: int) -> int:
    if op == ADD:
        return _fit(a + b)
    if op == SUB:
        return _fit(a - b)
    if op == MUL:
        return _fit(a * b)
    if op == FLOORDIV:
        if b == 0:
            raise _Fail
        return _fit(a // b)
    if op == MOD:
        if b == 0:
            raise _Fail
        return a % b
    if op == POW:
        return _pow(a, b)
    if op == MIN:
        return min(a, b)
    if op == MAX:
        return max(a, b)
    if op == EQ:
        return int(a == b)
    if op == NE:
        return int(a != b)
    if op == LT:
        return int(a < b)
    if op == LE:
        return int(a <= b)
    if op == GT:
        return int(a > b)
    if op == GE:
        return int(a >= b)
    if op == AND:
        return int(a != 0 and b != 0)
    if op == OR:
        return int(a != 0 or b != 0)
    raise AssertionError(op)


def run_program(program: tuple[int, ...], slots: Sequence[int | None] | Mapping[int, int]) -> bool:
    """Whether the relation holds for these slot values, exactly as the C core decides.

    ``slots[k]`` is slot ``k``'s value; a missing slot (index out of range, absent key, or
    ``None``) is unbound and fails the relation, like an int64 overflow, a zero divisor or a
    negative exponent. Raises only for a malformed program (``validate_program``)."""
    validate_program(tuple(program))
    stack: list[int] = []
    pc = 0
    n = len(program)
    try:
        while pc < n:
            op = program[pc]
            if op == CONST:
                pc += 1
                stack.append(program[pc])
            elif op == SLOT:
                pc += 1
                try:
                    v = slots[program[pc]]
                except (IndexError, KeyError):
                    return False
                if v is None:
                    return False
                if not isinstance(v, int) or not INT64_MIN <= v <= INT64_MAX:
                    return False
                stack.append(int(v))
            elif op == NEG:
                stack[-1] = _fit(-stack[-1])
            elif op == NOT:
                stack[-1] = int(stack[-1] == 0)
            else:
                b = stack.pop()
                stack[-1] = _binary(op, stack[-1], b)
            pc += 1
    except _Fail:
        return False
    return stack[0] != 0


# --- printing ------------------------------------------------------------------------------
# Python precedence levels (higher binds tighter).
_P_OR, _P_AND, _P_NOT, _P_CMP, _P_ADD, _P_MUL, _P_NEG, _P_POW, _P_ATOM = 1, 2, 3, 4, 6, 7, 8, 9, 10
_INFIX = {
    ADD: ("+", _P_ADD), SUB: ("-", _P_ADD), MUL: ("*", _P_MUL), FLOORDIV: ("//", _P_MUL),
    MOD: ("%", _P_MUL), POW: ("**", _P_POW), EQ: ("==", _P_CMP), NE: ("!=", _P_CMP),
    LT: ("<", _P_CMP), LE: ("<=", _P_CMP), GT: (">", _P_CMP), GE: (">=", _P_CMP),
    AND: ("and", _P_AND), OR: ("or", _P_OR),
}


def _paren(text: str, needed: bool) -> str:
    return f"({text})" if needed else text


def format_program(program: tuple[int, ...], slot_names: Sequence[str] | Mapping[int, str] | None = None) -> str:
    """The relation as Python source: ``L['x'].size()[0] >= 2`` (slot ``k`` printed as
    ``slot_names[k]``, or ``s{k}`` when it has no name). For logs and explanations."""
    validate_program(tuple(program))

    def name(k: int) -> str:
        if slot_names is None:
            return f"s{k}"
        try:
            return slot_names[k]
        except (IndexError, KeyError):
            return f"s{k}"

    # Entries: (text, precedence, is_logic). Python's `and`/`or` yield an operand, not 0/1:
    # where such a value feeds arithmetic or a comparison it is printed as bool(...).
    stack: list[tuple[str, int, bool]] = []

    def operand() -> tuple[str, int]:
        t, p, logic = stack.pop()
        return (f"bool({t})", _P_ATOM) if logic else (t, p)

    pc = 0
    while pc < len(program):
        op = program[pc]
        if op == CONST:
            pc += 1
            c = program[pc]
            stack.append((str(c), _P_NEG if c < 0 else _P_ATOM, False))
        elif op == SLOT:
            pc += 1
            stack.append((name(program[pc]), _P_ATOM, False))
        elif op == NEG:
            t, p = operand()
            stack.append((f"-{_paren(t, p < _P_NEG)}", _P_NEG, False))
        elif op == NOT:
            t, p, _logic = stack.pop()
            stack.append((f"not {_paren(t, p < _P_NOT)}", _P_NOT, False))
        elif op in (MIN, MAX):
            (tb, _), (ta, _) = operand(), operand()
            stack.append((f"{'min' if op == MIN else 'max'}({ta}, {tb})", _P_ATOM, False))
        elif op in (AND, OR):
            sym, prec = _INFIX[op]
            (tb, pb, _lb), (ta, pa, _la) = stack.pop(), stack.pop()
            stack.append((f"{_paren(ta, pa < prec)} {sym} {_paren(tb, pb <= prec)}", prec, True))
        else:
            sym, prec = _INFIX[op]
            (tb, pb), (ta, pa) = operand(), operand()
            if op == POW:  # right-associative; -a ** b is -(a ** b)
                left, right = pa <= prec, pb < prec
            elif prec == _P_CMP:  # comparisons chain in Python: never leave one bare inside another
                left, right = pa <= prec, pb <= prec
            else:
                left, right = pa < prec, pb <= prec
            stack.append((f"{_paren(ta, left)} {sym} {_paren(tb, right)}", prec, False))
        pc += 1
    return stack[0][0]


# --- compilation from sympy ----------------------------------------------------------------
_RELATIONS = {
    "Equality": EQ, "Unequality": NE, "StrictLessThan": LT, "LessThan": LE,
    "StrictGreaterThan": GT, "GreaterThan": GE,
}
# torch.utils._sympy.functions (recognised by name; sympy's own Mod/Min/Max share the names)
_FLOORDIV_FUNCS = {"FloorDiv", "CleanDiv"}           # CleanDiv: a // b known to be exact
_MOD_FUNCS = {"Mod", "PythonMod"}
_MINMAX_FUNCS = {"Min": MIN, "Max": MAX}
_POW_FUNCS = {"Pow", "PowByNatural"}


def compile_relation(expr: Any, slot_of: Mapping[Any, int] | Callable[[Any], int]) -> tuple[int, ...]:
    """The program of a sympy boolean/relational expression over symbols that ``slot_of``
    maps to slots (a mapping or a function; a symbol it lacks is NotCompilable).

    Supported: integers (int64), symbols, Add, Mul, Pow and PowByNatural (exponent a
    non-negative integer or an expression, which then must be >= 0 at run time), Abs, sympy's
    and torch's Mod/PythonMod, FloorDiv, CleanDiv, CeilDiv, Min/Max, CeilToInt/FloorToInt of
    IntTrueDiv (ceil/floor of an integer quotient), Identity, Eq/Ne/Lt/Le/Gt/Ge, And/Or/Not,
    true/false. Anything else raises NotCompilable (a ValueError)."""
    import sympy

    out: list[int] = []

    def slot(sym: Any) -> int:
        try:
            k = slot_of(sym) if callable(slot_of) and not isinstance(slot_of, Mapping) else slot_of[sym]
        except (KeyError, LookupError):
            raise NotCompilable(f"symbol {sym} has no slot") from None
        if not isinstance(k, int) or not 0 <= k < MAX_SLOTS:
            raise NotCompilable(f"symbol {sym}: slot {k!r} out of range")
        return k

    def const(v: Any) -> None:
        iv = int(v)
        if not INT64_MIN <= iv <= INT64_MAX:
            raise NotCompilable(f"constant {iv} does not fit in int64")
        out.extend((CONST, iv))

    def fold(args: Sequence[Any], op: int) -> None:
        emit(args[0])
        for a in args[1:]:
            emit(a)
            out.append(op)

    def emit_add(e: Any) -> None:
        # Terms with a negative coefficient become subtractions (s0 - s1, not s0 + -1*s1);
        # a positive term goes first when there is one.
        terms = sorted(e.args, key=lambda t: bool(t.as_coeff_Mul()[0].is_negative))
        emit(terms[0])
        for t in terms[1:]:
            coeff, rest = t.as_coeff_Mul()
            if coeff.is_negative:
                emit(-t)
                out.append(SUB)
            else:
                emit(t)
                out.append(ADD)

    def emit_mul(e: Any) -> None:
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            emit(rest)
            out.append(NEG)
            return
        fold(e.args, MUL)

    def emit_pow(base: Any, exp: Any) -> None:
        if exp.is_Integer:
            if exp < 0:
                raise NotCompilable(f"negative exponent in {base}**{exp}")
        elif exp.is_number:
            raise NotCompilable(f"non-integer exponent in {base}**{exp}")
        emit(base)
        emit(exp)
        out.append(POW)

    def emit_div_to_int(fn: str, arg: Any) -> None:
        # CeilToInt(IntTrueDiv(a, b)) / FloorToInt(IntTrueDiv(a, b)): ceil/floor of a / b.
        if type(arg).__name__ != "IntTrueDiv" or len(arg.args) != 2:
            raise NotCompilable(f"{fn} of {type(arg).__name__}")
        a, b = arg.args
        if fn == "FloorToInt":
            emit(a)
            emit(b)
            out.append(FLOORDIV)
        else:  # ceil(a / b) == -((-a) // b)
            emit(a)
            out.append(NEG)
            emit(b)
            out.extend((FLOORDIV, NEG))

    def emit(e: Any) -> None:
        name = type(e).__name__
        if e is sympy.true or e is sympy.false:
            out.extend((CONST, 1 if e is sympy.true else 0))
        elif e.is_Integer:
            const(e)
        elif e.is_Symbol:
            out.extend((SLOT, slot(e)))
        elif name in _RELATIONS:
            emit(e.lhs)
            emit(e.rhs)
            out.append(_RELATIONS[name])
        elif name == "And":
            fold(e.args, AND)
        elif name == "Or":
            fold(e.args, OR)
        elif name == "Not":
            emit(e.args[0])
            out.append(NOT)
        elif e.is_Add:
            emit_add(e)
        elif e.is_Mul:
            if any(a.is_Rational and not a.is_Integer for a in e.args):
                raise NotCompilable(f"rational coefficient in {e}")
            emit_mul(e)
        elif name in _POW_FUNCS and len(e.args) == 2:
            emit_pow(*e.args)
        elif name in _FLOORDIV_FUNCS and len(e.args) == 2:
            fold(e.args, FLOORDIV)
        elif name == "CeilDiv" and len(e.args) == 2:  # ceil(a / b) == -((-a) // b)
            emit(e.args[0])
            out.append(NEG)
            emit(e.args[1])
            out.extend((FLOORDIV, NEG))
        elif name in _MOD_FUNCS and len(e.args) == 2:
            fold(e.args, MOD)
        elif name in _MINMAX_FUNCS and e.args:
            fold(e.args, _MINMAX_FUNCS[name])
        elif name == "Abs" and len(e.args) == 1:  # max(a, -a); -INT64_MIN overflows: fails
            emit(e.args[0])
            emit(e.args[0])
            out.extend((NEG, MAX))
        elif name in ("CeilToInt", "FloorToInt") and len(e.args) == 1:
            emit_div_to_int(name, e.args[0])
        elif name == "Identity" and len(e.args) == 1:
            emit(e.args[0])
        else:
            raise NotCompilable(f"cannot compile {name} ({e}) to a shape program")

    emit(sympy.sympify(expr))
    program = tuple(out)
    try:
        validate_program(program)
    except ValueError as err:  # e.g. too deep
        raise NotCompilable(str(err)) from None
    return program
