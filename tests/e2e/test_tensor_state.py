"""Tensor and global state the trace reads or changes: grad-mode and default-dtype setters called
as functions inside, ``x.grad``/``x.is_leaf``/``x.grad_fn`` branches, Python attributes set on
tensors, sizes/dtypes/devices/strides returned, closures and iterators returned, and view
relations between outputs and inputs. Each must behave exactly as eager.
"""
from __future__ import annotations

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)


def test_set_grad_enabled_called_as_function():
    def f(x):
        torch.set_grad_enabled(False)
        return x * 2

    x = torch.randn(3, requires_grad=True)
    e = f(x)
    ge = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    a = pyjit.jit(f, backend=CountingBackend())(x)
    gj = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    assert_same(e, a)
    assert ge == gj, f"grad mode after the call: eager {ge}, jit {gj}"


def test_grad_none_branch():
    def f(x):
        return x * 2 if x.grad is None else x * 2 + x.grad

    x = torch.randn(3, requires_grad=True)
    jf = pyjit.jit(f, backend=CountingBackend())
    assert_same(f(x), jf(x))
    (x * 3).sum().backward()
    assert_same(f(x), jf(x))


def test_is_leaf_branch():
    def f(x):
        return x + 1 if x.is_leaf else x - 1

    jf = pyjit.jit(f, backend=CountingBackend())
    a = torch.randn(3, requires_grad=True)
    assert_same(f(a), jf(a))
    b = a * 2
    assert_same(f(b), jf(b))


def test_grad_fn_branch():
    def f(x):
        return x + 1 if x.grad_fn is None else x - 1

    jf = pyjit.jit(f, backend=CountingBackend())
    a = torch.randn(3, requires_grad=True)
    assert_same(f(a), jf(a))
    b = a * 2
    assert_same(f(b), jf(b))


def test_tensor_python_attr():
    def f(x):
        x.tag = "seen"
        return x + 1

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    y = x.clone()
    assert_same(f(x), jf(y))
    assert getattr(y, "tag", None) == "seen"


def test_requires_grad_inside():
    def f(x):
        y = x * 2
        w = torch.ones(3).requires_grad_()
        return y * w

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(f(x), jf(x))


def test_return_size_dtype_device():
    def f(x):
        return x.shape, x.dtype, x.device, x + 1, x.size(1), x.stride()

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3, 4)
    assert_same(f(x), jf(x))


def test_return_lambda():
    def f(x):
        y = x + 1
        return lambda: y * 2

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(f(x)(), jf(x)())


def test_view_inplace_then_base():
    def f(x):
        y = x.clone()
        v = y[0]
        v.mul_(2)
        return y, v

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3, 2)
    e, a = f(x), jf(x)
    assert_same(e, a)
    a[0].add_(100)
    assert a[1][0].item() == a[0][0, 0].item(), "view relation lost"


def test_set_default_dtype_inside():
    def f(x):
        torch.set_default_dtype(torch.float64)
        return torch.ones(2) + x.sum()

    x = torch.randn(3)
    try:
        e = f(x)
        de = torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)
    try:
        a = pyjit.jit(f, backend=CountingBackend())(x)
        dj = torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)
    assert_same(e, a)
    assert de == dj


def test_return_iterator():
    def f(x):
        return iter([x + 1, x + 2])

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(list(f(x)), list(jf(x)))


def test_input_mutated_returned_view():
    def f(x):
        x.add_(1)
        return x[0]

    jf = pyjit.jit(f, backend=CountingBackend())
    xe = torch.randn(3, 2)
    xj = xe.clone()
    e, a = f(xe), jf(xj)
    assert_same(e, a)
    assert_same(xe, xj)
    a.mul_(0)
    assert (xj[0] == 0).all(), "returned view does not alias the input"


def test_requires_grad_false_param():
    m = torch.nn.Linear(3, 3)
    m.weight.requires_grad_(False)
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(2, 3)
    out = jm(x)
    out.sum().backward()
    e = m(x)
    assert_same(e, out)


@pytest.mark.parametrize("method", ["t_", "transpose_", "unsqueeze_", "as_strided_", "resize_"])
def test_restriding_an_input_in_place_is_seen_by_the_caller(method: str) -> None:
    """``x.t_()`` and friends change the caller's tensor's sizes/strides: they run eagerly
    (a graph break), and the caller sees the new metadata as in eager."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if method == "t_":
            x.t_()
        elif method == "transpose_":
            x.transpose_(0, 1)
        elif method == "unsqueeze_":
            x.unsqueeze_(0)
        elif method == "as_strided_":
            x.as_strided_((3, 2), (1, 3))
        else:
            x.resize_(3, 2)
        return y + x.sum()

    expected_input = torch.randn(2, 3)
    got_input = expected_input.clone()
    expected = fn(expected_input)
    got = pyjit.jit(fn)(got_input)
    torch.testing.assert_close(got, expected)
    assert got_input.shape == expected_input.shape and got_input.stride() == expected_input.stride()
