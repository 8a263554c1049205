"""check_tensor: exact type, dtype, device, requires_grad, dim count, sizes and strides
(None = dynamic), read through the cached C getters. Needs torch (skipped without it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyjit import _C  # noqa: E402

from .core_helpers import Compiler, running_code_name  # noqa: E402


def f(x, y=None):
    return x


def spec_of(t, dynamic=(), strides=True):
    sizes = tuple(None if i in dynamic else s for i, s in enumerate(t.shape))
    st = tuple(None if i in dynamic else s for i, s in enumerate(t.stride())) if strides else None
    return (type(t), t.dtype, t.device, t.requires_grad, sizes, st)


def tree_for(t, **kw):
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec_of(t, **kw), 11)
    return tree


def test_tensor_match_and_each_mismatch():
    x = torch.randn(4, 3)
    tree = tree_for(x)
    assert tree.check(f, (x, None)) == -1
    assert tree.check(f, (torch.zeros(4, 3), None)) == -1  # another tensor, same metadata
    cases = [
        torch.randn(4, 3, dtype=torch.float64),          # dtype
        torch.randn(4, 3).requires_grad_(),               # requires_grad
        torch.randn(4, 4),                                # size
        torch.randn(4, 3, 1),                             # dim count
        torch.randn(3, 4).t(),                            # strides
        torch.nn.Parameter(torch.randn(4, 3), requires_grad=False),  # exact type
        torch.randn(4, 3, device="meta"),                 # device
        4.0,                                              # not a tensor
        None,
    ]
    for bad in cases:
        assert tree.check(f, (bad, None)) == 11, bad


def test_dynamic_dimensions_and_unchecked_strides():
    x = torch.randn(4, 3)
    tree = tree_for(x, dynamic=(0,))
    assert tree.check(f, (torch.randn(9, 3), None)) == -1
    assert tree.check(f, (torch.randn(9, 2), None)) == 11
    no_strides = tree_for(x, strides=False)
    assert no_strides.check(f, (torch.randn(3, 4).t(), None)) == -1
    assert no_strides.check(f, (torch.randn(4, 4), None)) == 11


def test_zero_dim_and_noncontiguous_views():
    s = torch.tensor(3.0)
    tree = tree_for(s)
    assert tree.check(f, (torch.tensor(5.0), None)) == -1
    assert tree.check(f, (torch.tensor([5.0]), None)) == 11
    v = torch.randn(8, 8)[::2, 1:]
    tv = tree_for(v)
    assert tv.check(f, (torch.randn(8, 8)[::2, 1:], None)) == -1
    assert tv.check(f, (v.contiguous(), None)) == 11


def test_parameter_and_subclass_types():
    p = torch.nn.Parameter(torch.randn(2, 2))
    tree = tree_for(p)
    assert tree.check(f, (torch.nn.Parameter(torch.randn(2, 2)), None)) == -1
    assert tree.check(f, (torch.randn(2, 2, requires_grad=True), None)) == 11


def test_sizes_given_as_lists_and_device_objects():
    x = torch.randn(2, 5)
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(torch.Tensor, torch.float32, torch.device("cpu"), False, [2, 5], [5, 1], 0)
    assert tree.check(f, (x, None)) == -1
    with pytest.raises(TypeError):
        tree.arg(1).check_tensor(torch.Tensor, torch.float32, "cpu", False, (2, "x"), None, 1)
    with pytest.raises(ValueError):
        tree.arg(1).check_tensor(torch.Tensor, torch.float32, "cpu", False, (2,), (1, 1), 1)


def test_several_tensors_first_failure_reported():
    xs = [torch.randn(3), torch.randn(2, 2)]
    tree = _C.GuardTree()
    for i, t in enumerate(xs):
        tree.arg(i).check_tensor(*spec_of(t), i)
    assert tree.check(f, tuple(xs)) == -1
    assert tree.check(f, (xs[0], torch.randn(2, 3))) == 1
    assert tree.check(f, (torch.randn(4), torch.randn(2, 3))) == 0


def test_hook_recompiles_on_tensor_mismatch():
    def g(x):
        return running_code_name(), x.sum()

    def guard(func, args):
        t = _C.GuardTree()
        t.arg(0).check_tensor(*spec_of(args[0]), 0)
        return t

    comp = Compiler(g, guard_factory=guard)
    a, b = torch.ones(3), torch.ones(2, 2)
    _C.set_callback(comp)
    try:
        out = [g(a), g(torch.ones(3)), g(b), g(a)]
    finally:
        _C.set_callback(None)
    assert [o[0] for o in out] == ["g__repl"] * 4
    assert [float(o[1]) for o in out] == [3.0, 3.0, 4.0, 3.0]
    assert len(comp.calls) == 2


def test_tensor_describe():
    x = torch.randn(2, 3)
    tree = tree_for(x, dynamic=(1,))
    (kind, cid, payload), = tree.describe()["children"][0]["checks"]
    assert kind == "tensor" and cid == 11
    assert payload["sizes"] == (2, None) and payload["strides"] == (3, None)
    assert payload["dtype"] is torch.float32
