"""Python scalars that change between calls: from the second value on an int/float argument is a
symbolic graph input (``pyjit/trace/dynamic.py``). Whatever consumes it either stays symbolic in
the graph (``x * n``, ``min(2.0, f)``, ``n // 2``) or bakes its value into the trace
(``range(n)``, ``if n > 2``, ``lst[n]``, ``round(f, 2)``), and then the entry must be guarded
on that value or on the relation it relied on. Each program runs with 5-6 values against eager,
under the ``eager`` backend (the tracer and its guards) and pyjit's own (its kernels compute the
scalar expressions)."""
from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch

import pyjit

pytestmark = pytest.mark.usefixtures("fresh_pyjit")

INTS = (2, 1, 0, 3, 2, 4)
SIGNED_INTS = (2, 5, -3, -7, 0, 4)
FLOATS = (0.1, 0.5, 0.7, 3.0, -2.5, 1.234567)


def loop(x, n):
    for _ in range(n):
        x = x * 0.5 + 0.1
    return x


def _halve(a, n):
    if n <= 0:
        return a
    return _halve(a * 0.5 + 0.1, n - 1)


def recursion(x, n):
    return _halve(x, n)


def branch(x, n):
    if n > 2:
        return x + 1
    return x - 1


def list_index(x, n):
    return [x, x * 2, x * 3, x * 4, x * 5][n]


def slice_columns(x, n):
    return x[:, :n]


def times(x, n):
    return x * n


def floordiv(x, n):
    return x + n // 2


def modulo(x, n):
    return x + n % 3


def select_half(x, n):
    return x[n // 2] * 2 + x[:, : n // 2].sum()


def to_float(x, n):
    return x + float(n)


def range_length(x, n):
    return x * len(range(n))


def truth(x, n):
    return x + bool(n)


def int_abs_max(x, n):
    return x * abs(n) + max(n, -2) + min(n, 1)


def rounded(x, f):
    return x + round(f, 2)


def float_min(x, f):
    return x + min(2.0, f)


def float_max(x, f):
    return x + max(-2.0, f)


def float_abs(x, f):
    return x + abs(f)


def floor(x, f):
    return x + math.floor(f)


def truncate(x, f):
    return x + int(f)


def float_branch(x, f):
    if f > 0.5:
        return x + 1
    return x


def float_power(x, f):
    return x * f ** 2 + f // 0.3


def float_step_arange(x, f):
    return torch.arange(0, 3, f).sum() + x  # ceil(3 / f) elements: a size computed on the host


def returns_float_of_int(x, n):
    f = 0.5 * n  # a Python float the caller gets back: rebuilt from n after the graph
    return x * f, f


CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (loop, INTS), (recursion, INTS), (branch, INTS), (list_index, INTS), (slice_columns, (2, 1, 3, 4, 2)),
    (times, INTS), (floordiv, SIGNED_INTS), (select_half, SIGNED_INTS), (modulo, SIGNED_INTS), (to_float, INTS), (range_length, INTS),
    (truth, INTS), (int_abs_max, SIGNED_INTS), (rounded, FLOATS), (float_min, FLOATS), (float_max, FLOATS),
    (float_abs, FLOATS), (floor, FLOATS), (truncate, FLOATS), (float_branch, FLOATS), (float_power, FLOATS),
    (float_step_arange, (0.5, 0.25, 1.0, 0.7, 0.3)), (returns_float_of_int, INTS),
]


@pytest.mark.parametrize("backend", ["eager", "pyjit"])
@pytest.mark.parametrize("fn,values", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_changing_scalar_matches_eager_on_every_call(fn: Callable[..., Any], values: tuple[Any, ...],
                                                     backend: str) -> None:
    jf = pyjit.jit(fn, backend=backend)
    x = torch.arange(20.0).reshape(4, 5) / 7
    for v in values:
        torch.testing.assert_close(jf(x, v), fn(x, v), msg=lambda m: f"{fn.__name__}(x, {v!r}): {m}")


def test_index_modulo_of_item_writes_the_right_row():
    """``m[int(m.argmax()) % 3] = ...`` after graph breaks: the resume graph's view offset is an
    expression over a symbolic int; the generated wrapper prints it as valid Python."""
    def fn(x):
        m = x.clone()
        m[int(m.argmax()) % 3] = x.mean().item() * 0.5
        return m

    jf = pyjit.jit(fn)
    for _ in range(4):
        x = torch.randn(3, 4)
        torch.testing.assert_close(jf(x), fn(x))
