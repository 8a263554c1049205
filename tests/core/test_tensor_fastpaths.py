"""check_tensor's cheaper comparisons must say exactly what the plain ones say.

- strides via is_contiguous() (only for static sizes >= 2, expected strides contiguous, and a
  type that does not override __torch_function__/__torch_dispatch__);
- device via `is_<type>` + get_device() for cuda/meta/xpu/mps, via `is_cpu` for cpu.

Oracle: the eager predicate written with ordinary attribute access. Needs torch.
"""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from pyjit import _C  # noqa: E402


def f(x):
    return x


class Plain(torch.Tensor):
    """A subclass without overrides: gets the is_contiguous() shortcut."""


class Liar(torch.Tensor):
    """Reports every tensor as contiguous: the shortcut must not be used for it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.is_contiguous:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def eager_match(t, spec) -> bool:
    ttype, dtype, device, rg, sizes, strides = spec
    if type(t) is not ttype:
        return False
    if t.dtype is not dtype or t.requires_grad != rg or t.dim() != len(sizes):
        return False
    if any(s is not None and s != a for s, a in zip(sizes, t.shape)):
        return False
    if strides is not None and any(s is not None and s != a for s, a in zip(strides, t.stride())):
        return False
    return t.device == device


def spec_of(t, device=None, dynamic=()):
    sizes = tuple(None if i in dynamic else s for i, s in enumerate(t.shape))
    strides = tuple(None if i in dynamic else s for i, s in enumerate(t.stride()))
    return (type(t), t.dtype, t.device if device is None else device, t.requires_grad, sizes, strides)


def check(spec, t) -> bool:
    tree = _C.GuardTree()
    tree.arg(0).check_tensor(*spec, 0)
    return tree.check(f, (t,)) == -1


def layouts(device: str = "cpu"):
    """Same sizes, different strides (and the size-1 / size-0 corner cases of contiguity)."""
    base = torch.randn(4, 6, device=device)
    return [
        torch.randn(4, 3, device=device),                  # contiguous
        torch.randn(3, 4, device=device).t(),              # transposed
        base[:, ::2],                                      # strided (6, 2)
        torch.randn(4, 1, device=device).expand(4, 3),     # stride 0
        torch.randn(1, 4, device=device),                  # size-1 dim, contiguous
        base[:1, :4],                                      # size-1 dim, stride 6: is_contiguous() True
        torch.randn(4, 1, device=device),
        torch.randn(6, 4, device=device)[:, :1],           # (4..6, 1) stride (4, 1)
        torch.empty(0, 3, device=device),                  # empty: is_contiguous() always True
        torch.empty(3, 0, device=device).t(),
        torch.randn(2, 3, 4, device=device),
        torch.randn(2, 4, 3, device=device).transpose(1, 2),
        torch.randn(5, device=device),
        torch.randn(10, device=device)[::2],
        torch.tensor(1.0, device=device),
    ]


@pytest.mark.parametrize("ttype", [torch.Tensor, Plain, Liar, torch.nn.Parameter])
def test_strides_agree_with_eager_for_every_layout_pair(ttype):
    ts = [t.as_subclass(ttype) if ttype is not torch.Tensor else t for t in layouts()]
    for a, b in itertools.product(ts, ts):
        spec = spec_of(a)
        assert check(spec, b) == eager_match(b, spec), (a.shape, a.stride(), b.shape, b.stride())


def test_lying_subclass_is_checked_through_stride():
    spec = spec_of(torch.randn(4, 3).as_subclass(Liar))
    transposed = torch.randn(3, 4).t().as_subclass(Liar)
    assert transposed.is_contiguous()  # the lie
    assert not check(spec, transposed)
    assert check(spec, torch.randn(4, 3).as_subclass(Liar))


def test_subclass_fails_exact_type_both_ways():
    x = torch.randn(4, 3)
    assert not check(spec_of(x), x.as_subclass(Plain))
    assert not check(spec_of(x.as_subclass(Plain)), x)
    assert check(spec_of(x.as_subclass(Plain)), torch.randn(4, 3).as_subclass(Plain))
    p = torch.nn.Parameter(torch.randn(4, 3))
    assert not check(spec_of(x), p) and not check(spec_of(p), x.requires_grad_())


def test_dynamic_dims_keep_exact_strides():
    # Dynamic size: is_contiguous() would ignore a stride whenever the runtime size is 1.
    spec = spec_of(torch.randn(4, 3), dynamic=(0,))
    spec = spec[:5] + ((3, 1),)
    assert check(spec, torch.randn(7, 3))
    odd = torch.randn(2, 8)[:1, :3]  # shape (1, 3), strides (8, 1), "contiguous"
    assert odd.is_contiguous()
    assert check(spec, odd) == eager_match(odd, spec) is False


DEVICES = [
    torch.device("cpu"), torch.device("cpu", 0), torch.device("meta"), torch.device("meta", 0),
    torch.device("cuda", 0), torch.device("cuda"), torch.device("cuda", 1), torch.device("xpu", 0),
]


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_device_agrees_with_eager(device):
    tensors = [torch.randn(4, 3), torch.randn(4, 3, device="meta"), torch.randn(4, 3).as_subclass(Plain)]
    for t in tensors:
        spec = spec_of(tensors[0], device=device)
        assert check(spec, t) == eager_match(t, spec), (device, t.device, type(t))


def test_meta_tensors_checked_like_cpu_ones():
    m = torch.randn(4, 3, device="meta")
    spec = spec_of(m)
    assert check(spec, torch.empty(4, 3, device="meta"))
    assert not check(spec, torch.empty(4, 3))                        # device
    assert not check(spec, torch.empty(3, 4, device="meta").t())     # strides
    assert not check(spec, torch.empty(4, 3, device="meta", dtype=torch.float64))
    assert not check(spec_of(torch.empty(4, 3)), m)


def test_device_given_as_a_string_is_compared_like_eager():
    # Not a torch.device: `tensor.device == "cpu"` is False in eager, so the guard fails.
    spec = (torch.Tensor, torch.float32, "cpu", False, (2,), (1,))
    assert check(spec, torch.randn(2)) == eager_match(torch.randn(2), spec)
