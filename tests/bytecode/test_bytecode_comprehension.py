"""Inlined comprehensions (3.12+): regions found, and outlined functions equal the original."""
from __future__ import annotations

import sys
import types

import pytest

from pyjit.bytecode.comprehension import (
    comprehension_at,
    comprehension_regions,
    enclosing_comprehension,
    make_outlined_comprehension,
    outline_problem,
    region_reads,
)

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12), reason="comprehensions are inlined from 3.12 (PEP 709)")

Q = 3


def listcomp(x, n):
    y = [v + 1 for v in x]
    vals = [y[i] * 2 for i in range(n)]
    return vals


def dictcomp(d):
    return {k: v * Q for k, v in d.items() if k}


def nested(rows):
    return [[c * 2 for c in row] for row in rows if row]


def two_loops(x):
    return {a * b for a in x for b in x}


def shadowing(n):
    i = "outer"
    out = [i * 2 for i in range(n)]
    return out, i


def raising(n):
    return [1 // (i - 1) for i in range(n)]


def in_try(n):
    try:
        return [i for i in range(n)]
    except ValueError:
        return None


def walrus(n):
    return [last := i for i in range(n)], last  # noqa: F841


def closure(n):
    return [(lambda: i) for i in range(n)]


def _outlined(fn, reads=None, which=0):
    code = fn.__code__
    region = comprehension_regions(code)[which]
    assert outline_problem(code, region) is None
    names = region_reads(code, region) if reads is None else reads
    return types.FunctionType(make_outlined_comprehension(code, region, names), fn.__globals__), names


@pytest.mark.parametrize("fn,arg,expected,reads", [
    (dictcomp, {0: 1, 2: 3, 5: 1}, {2: 9, 5: 3}, ()),
    (nested, [[1, 2], [], [3]], [[2, 4], [6]], ()),
    (two_loops, [1, 2], {1, 2, 4}, ("x",)),
    (raising, 1, [-1], ()),
])
def test_outlined_comprehension_equals_the_original(fn, arg, expected, reads):
    outlined, names = _outlined(fn)
    assert names == reads
    source = arg.items() if isinstance(arg, dict) else (range(arg) if isinstance(arg, int) else arg)
    assert outlined(iter(source), *(arg for _ in reads)) == expected == fn(arg)


def test_outlined_comprehension_reads_outer_locals_and_restores_nothing_outside():
    outlined, reads = _outlined(listcomp, which=1)
    assert reads == ("y",)
    assert outlined(iter(range(3)), [10, 20, 30]) == [20, 40, 60]
    assert outlined.__code__.co_name.startswith("listcomp__comprehension_at_")


def test_outlined_comprehension_reads_an_unpassed_local_as_unbound():
    outlined, _ = _outlined(listcomp, reads=(), which=1)
    with pytest.raises(UnboundLocalError):
        outlined(iter(range(1)))


def test_exceptions_propagate_from_the_outlined_function():
    outlined, _ = _outlined(raising)
    with pytest.raises(ZeroDivisionError):
        outlined(iter(range(3)))


def test_region_bounds_and_lookup():
    code = shadowing.__code__
    (region,) = comprehension_regions(code)
    assert region.cleared == ("i",)
    assert comprehension_at(code, region.start) is region
    assert enclosing_comprehension(code, region.start) is None
    assert enclosing_comprehension(code, region.start + 1) is region
    # nested: the body of the inner comprehension lies in the outer one, which is found first
    outer, inner = comprehension_regions(nested.__code__)
    assert outer.contains(inner.start)
    assert enclosing_comprehension(nested.__code__, inner.start + 1) is outer


@pytest.mark.parametrize("fn,reason", [
    (in_try, "try or with"),
    (walrus, ":="),
    (closure, "closure cells"),
])
def test_regions_that_cannot_be_outlined_say_why(fn, reason):
    code = fn.__code__
    (region,) = comprehension_regions(code)
    assert reason in (outline_problem(code, region) or "")
    with pytest.raises(ValueError, match="cannot outline"):
        make_outlined_comprehension(code, region, ())


def test_resume_after_a_comprehension_with_its_variable_unbound_or_bound():
    # The frontend continues after an outlined comprehension at its exit: the saved value of each
    # comprehension variable (NULL when it was unbound) and the result on the stack.
    from pyjit.bytecode import decode, make_resume_code, resume_parameter_names

    code = shadowing.__code__
    (region,) = comprehension_regions(code)
    exit_offset = decode(code)[region.exit].offset
    resume = make_resume_code(code, exit_offset, 2, [], null_slots=[0])
    assert resume_parameter_names(code, 2, [], [0]) == ["___stack1"]
    fn = types.FunctionType(resume, {})
    # `return out, i` after the comprehension: `i` was unbound before it, and is again
    with pytest.raises(UnboundLocalError):
        fn([0, 2])


def test_resume_after_a_comprehension_restores_a_bound_variable():
    from pyjit.bytecode import decode, make_resume_code

    code = shadowing.__code__
    (region,) = comprehension_regions(code)
    exit_offset = decode(code)[region.exit].offset
    fn = types.FunctionType(make_resume_code(code, exit_offset, 2, []), {})
    assert fn("outer", [0, 2]) == ([0, 2], "outer")


def test_resume_function_prologue_is_not_a_comprehension():
    from pyjit.bytecode import decode, make_resume_code

    code = listcomp.__code__
    first, second = comprehension_regions(code)
    # a resume function starting between the two comprehensions takes its stack through
    # LOAD_FAST_AND_CLEAR of its parameters: only the real second comprehension is found
    resume = make_resume_code(code, decode(code)[first.exit].offset, 2, ["x", "n"], null_slots=[0])
    (found,) = comprehension_regions(resume)
    assert found.cleared == second.cleared
