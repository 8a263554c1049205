"""bench.correctness: a wrong result is never mistaken for a right one."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

from bench.correctness import compare


def test_equal_outputs_pass_and_report_zero_error():
    x = torch.randn(4, 5)
    v = compare((x, [x * 2]), (x.clone(), [x * 2]), 1e-6, 1e-6)
    assert v.ok and v.max_abs_err == 0.0


def test_value_shape_dtype_and_structure_differences_fail():
    x = torch.randn(8)
    assert not compare(x, x + 1e-2, 1e-4, 1e-4).ok
    assert not compare(x, x[:4], 1e-4, 1e-4).ok
    assert not compare(x, x.double(), 1e-4, 1e-4).ok
    assert not compare((x, x), (x,), 1e-4, 1e-4).ok
    assert not compare(x, 3.0, 1e-4, 1e-4).ok


def test_within_tolerance_passes():
    x = torch.randn(100)
    assert compare(x, x + 1e-7, 1e-5, 1e-5).ok


def test_nan_and_inf_handling():
    x = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare(x, x.clone(), 0.0, 0.0).ok
    y = x.clone()
    y[1] = 0.0
    assert not compare(x, y, 1e-3, 1e-3).ok
    z = x.clone()
    z[2] = -float("inf")
    assert not compare(x, z, 1e-3, 1e-3).ok


def test_integer_tensors_must_match_exactly():
    a = torch.arange(10)
    b = a.clone()
    b[3] += 1
    assert compare(a, a.clone(), 1.0, 1.0).ok
    assert not compare(a, b, 1.0, 1.0).ok
