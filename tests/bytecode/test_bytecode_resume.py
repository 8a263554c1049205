"""Resume differential test: for every corpus function and every statement-level break point
(an instruction whose stack holds only ``for`` iterators and ``with`` exits: every statement
boundary, including inside loops and ``with`` blocks), run the function natively up to the point,
capture the stack and live locals, build the resume function, continue in it, and compare the
result, exception, argument mutations and side-effect log with an uninterrupted run.

A ``with`` block open at the break is exited after the capture and re-entered by the resume code
(as a graph break around ``torch.no_grad()`` does); the test's context manager tracks the active
state, so the body must observe the same state before and after the break. Points inside
exception handlers are unsupported by design and counted separately.
"""
from __future__ import annotations

import collections
import copy
import sys
import types

import bytecode_corpus_a  # noqa: F401  (registers cases)
import bytecode_corpus_b  # noqa: F401
import bytecode_corpus_c  # noqa: F401
import bytecode_corpus_d  # noqa: F401
import pytest
from bytecode_corpus_base import CASES, CM, LOG, Case, reset_state
from bytecode_helpers import Captured, Outcome, capture_code, run, with_code

from pyjit.bytecode import (
    ResumeError,
    decode,
    make_resume_code,
    resume_cache_size,
    resume_parameter_names,
    stack_contents,
)
from pyjit.bytecode.resume import resume_point, unsupported_reason

COUNTS: collections.Counter = collections.Counter()


def break_points(code: types.CodeType):
    """(instruction, stack, starts a line) for every reachable statement-level instruction, and
    the counts of statement-level points that cannot be resumed, by reason."""
    instructions = decode(code)
    contents = stack_contents(instructions)
    points, unsupported = [], collections.Counter()
    previous_line = None
    for inst in instructions:
        starts_line = inst.lineno is not None and inst.lineno != previous_line
        if inst.lineno is not None:
            previous_line = inst.lineno
        stack = contents.get(id(inst))
        if stack is None or inst.opname in ("RESUME", "COPY_FREE_VARS", "MAKE_CELL"):
            continue
        if not all(slot.is_iterator or slot.is_with_exit or slot.is_exception_state for slot in stack):
            continue  # mid-expression
        reason = unsupported_reason(code, instructions, inst, stack)
        if reason is not None:
            unsupported[reason + (" [statement boundary]" if starts_line else "")] += 1
            continue
        points.append((inst, stack, starts_line))
    return points, unsupported


def resume_run(c: Case, offset: int, depth: int) -> Outcome | None:
    """Run the prefix up to ``offset``, then the resume function; None if never reached."""
    fn = c.fn
    prefix = with_code(fn, capture_code(fn.__code__, offset, depth))
    reset_state()
    args = copy.deepcopy(c.args)
    kwargs = copy.deepcopy(c.kwargs)
    try:
        captured = prefix(*args, **kwargs)
    except Exception:
        return None  # the prefix raised before reaching the point
    if not isinstance(captured, Captured):
        return None  # returned without reaching the point
    point = resume_point(fn.__code__, offset)
    stack_values = list(captured.stack)
    # Reconstructible context managers (the corpus's CM, like torch.no_grad()) are exited here
    # and re-entered by the resume code; others (single-use ones such as @contextmanager) stay
    # entered and their __exit__ is passed on as a plain stack value.
    context_slots = tuple(i for i in point.context_slots if isinstance(stack_values[i].__self__, CM))
    for i in context_slots:
        exit_fn = stack_values[i]
        log_len = len(LOG)
        exit_fn(None, None, None)
        del LOG[log_len:]
        stack_values[i] = exit_fn.__self__
    code = fn.__code__
    plain = [n for n in sorted(point.live_locals) if n in captured.local_values and n not in code.co_cellvars]
    live = plain + list(code.co_cellvars)
    values = {n: captured.local_values[n] for n in plain}
    values.update(zip(code.co_cellvars, captured.cells))
    resume = make_resume_code(code, offset, depth, live, context_slots=context_slots)
    assert make_resume_code(code, offset, depth, live, context_slots=context_slots) is resume  # cached
    order = resume_parameter_names(code, depth, live)
    by_name = {f"___stack{i}": v for i, v in enumerate(stack_values)}
    by_name.update(values)
    resume_fn = types.FunctionType(resume, fn.__globals__, resume.co_name, None, fn.__closure__)
    call_args = [by_name.pop(n) for n in order]
    # Drop the harness's own references so values (e.g. a generator being iterated) are
    # finalised when the resumed code drops them, as in the original.
    del captured, stack_values, values, by_name
    result, error = None, None
    try:
        result = resume_fn(*call_args)
    except Exception as e:
        error = (type(e).__name__, str(e))
    del call_args
    return Outcome(result, error, (args, kwargs), list(LOG))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resume_at_every_statement_boundary(case):
    expected = run(case.fn, case)
    COUNTS["cases"] += 1
    points, unsupported = break_points(case.fn.__code__)
    for reason, n in unsupported.items():
        COUNTS["unsupported: " + reason] += n
    failures = []
    for inst, stack, starts_line in points:
        COUNTS["points"] += 1
        COUNTS["statement boundaries"] += starts_line
        COUNTS["inside with"] += any(s.is_with_exit for s in stack)
        COUNTS["inside for"] += any(s.is_iterator for s in stack)
        try:
            got = resume_run(case, inst.offset, len(stack))
        except ResumeError as e:
            COUNTS["refused"] += 1
            failures.append(f"{inst!r}: refused: {e}")
            continue
        if got is None:
            COUNTS["not reached by the case's arguments"] += 1
            continue
        COUNTS["resumed"] += 1
        COUNTS["resumed statement boundaries"] += starts_line
        if got != expected:
            failures.append(f"{inst!r}: {got} != {expected}")
    assert not failures, "\n".join(failures[:10])


def test_resume_summary():
    """Prints the per-version counts recorded in docs/bytecode.md (runs after the cases)."""
    if not COUNTS:
        pytest.skip("run together with test_resume_at_every_statement_boundary")
    print(f"\n[resume {sys.version_info[0]}.{sys.version_info[1]}] " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())))
    print(f"resume code objects cached: {resume_cache_size()}")
    if COUNTS["cases"] < len(CASES):  # pytest-xdist spread the cases over several workers
        pytest.skip(f"only {COUNTS['cases']} of {len(CASES)} cases ran in this process")
    assert COUNTS["resumed"] > 500
    assert COUNTS["refused"] == 0
