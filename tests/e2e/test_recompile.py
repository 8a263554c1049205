"""Guarded cache behaviour through the public API: what recompiles, what does not, and that every
path (hit, miss, recompile, entry limit, reset) returns what eager returns.

A recompile is observed as one more graph handed to the counting backend.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _affine(x):
    return x * 2 + 1


def _jit(fn, backend):
    return pyjit.jit(fn, backend=backend)


def _check(jitted, fn, *args):
    assert_same(fn(*args), jitted(*args))


def test_unchanged_inputs_never_recompile():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        _check(f, _affine, torch.randn(4, 8, generator=g))
    assert backend.frame_count == 1, backend.graph_listing()


def test_new_dtype_recompiles_once():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    _check(f, _affine, torch.randn(4, 8))
    _check(f, _affine, torch.randn(4, 8, dtype=torch.float64))
    assert backend.frame_count == 2
    # Both entries are kept: going back and forth compiles nothing new.
    _check(f, _affine, torch.randn(4, 8))
    _check(f, _affine, torch.randn(4, 8, dtype=torch.float64))
    assert backend.frame_count == 2


def test_integer_dtype_recompiles_with_right_semantics():
    def half(x):
        return x / 2 + x // 3

    backend = CountingBackend()
    f = _jit(half, backend)
    _check(f, half, torch.randn(4, 8))
    _check(f, half, torch.arange(32).view(4, 8))  # true division promotes int64 to float
    assert backend.frame_count == 2


def test_new_shape_recompiles_once():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    _check(f, _affine, torch.randn(4, 8))
    _check(f, _affine, torch.randn(5, 8))
    assert backend.frame_count == 2
    _check(f, _affine, torch.randn(4, 8))
    assert backend.frame_count == 2


def test_shape_used_as_constant_is_guarded():
    def f(x):
        # x.shape[0] is baked into the graph as a constant: a new size must not reuse it.
        return x.reshape(x.shape[0], -1) * x.shape[0]

    backend = CountingBackend()
    jf = _jit(f, backend)
    _check(jf, f, torch.randn(2, 3, 4))
    _check(jf, f, torch.randn(3, 3, 4))
    _check(jf, f, torch.randn(2, 12))


def test_non_contiguous_input_is_correct():
    def f(x):
        return x.view(-1) if x.is_contiguous() else x.reshape(-1) * 2

    backend = CountingBackend()
    jf = _jit(f, backend)
    _check(jf, f, torch.randn(4, 8))
    _check(jf, f, torch.randn(8, 4).t())
    assert backend.frame_count == 2


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA); this machine has only the CPU"),
        )
    ],
)
def test_new_device_recompiles_once(device):
    backend = CountingBackend()
    f = _jit(_affine, backend)
    _check(f, _affine, torch.randn(4, 8))
    _check(f, _affine, torch.randn(4, 8, device=device))
    assert backend.frame_count == 2


def test_requires_grad_recompiles_once():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    _check(f, _affine, torch.randn(4, 8))
    x = torch.randn(4, 8, requires_grad=True)
    out = f(x)
    assert out.requires_grad
    assert_same(_affine(x), out)
    assert backend.frame_count == 2
    # Gradients flow through the compiled graph like through eager code.
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0), rtol=0, atol=0)


SCALE = 2.0
OFFSET_T = torch.ones(8)


def _uses_global(x):
    return x * SCALE


def _uses_global_tensor(x):
    return x + OFFSET_T


def test_changed_global_recompiles_once():
    global SCALE
    backend = CountingBackend()
    f = _jit(_uses_global, backend)
    old = SCALE
    try:
        _check(f, _uses_global, torch.randn(4, 8))
        SCALE = 3.0
        _check(f, _uses_global, torch.randn(4, 8))
        assert backend.frame_count == 2
        _check(f, _uses_global, torch.randn(4, 8))
        assert backend.frame_count == 2
    finally:
        SCALE = old


def test_changed_global_tensor_value_is_seen():
    global OFFSET_T
    backend = CountingBackend()
    f = _jit(_uses_global_tensor, backend)
    old = OFFSET_T
    try:
        x = torch.randn(4, 8)
        _check(f, _uses_global_tensor, x)
        OFFSET_T = torch.full((8,), 5.0)  # a new object with the same metadata
        _check(f, _uses_global_tensor, x)
        OFFSET_T.add_(1)  # in-place update of the global tensor
        _check(f, _uses_global_tensor, x)
        assert backend.frame_count <= 2
    finally:
        OFFSET_T = old


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = 2.0
        self.use_residual = False

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.use_residual:
            y = y + x
        return y


@pytest.mark.parametrize("attr,value", [("scale", 3.0), ("use_residual", True)])
def test_changed_module_attribute_recompiles_once(attr, value):
    torch.manual_seed(0)
    m = _Scaled()
    backend = CountingBackend()
    jm = pyjit.jit(m, backend=backend)
    x = torch.randn(4, 8)
    assert_same(m(x), jm(x))
    setattr(m, attr, value)
    assert_same(m(x), jm(x))
    assert backend.frame_count == 2
    assert_same(m(x), jm(x))
    assert backend.frame_count == 2


def test_swapped_submodule_is_seen():
    torch.manual_seed(0)
    m = _Scaled()
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(4, 8)
    assert_same(m(x), jm(x))
    m.lin = nn.Linear(8, 8)
    assert_same(m(x), jm(x))


def test_python_int_argument_change_is_correct():
    def f(x, n):
        for _ in range(n):
            x = x * 2
        return x + n

    backend = CountingBackend()
    jf = _jit(f, backend)
    x = torch.randn(4, 8)
    _check(jf, f, x, 2)
    _check(jf, f, x, 3)
    _check(jf, f, x, 2)
    assert backend.frame_count == 2


def test_list_length_change_is_correct():
    def f(xs):
        acc = xs[0]
        for v in xs[1:]:
            acc = acc + v
        return acc

    backend = CountingBackend()
    jf = _jit(f, backend)
    _check(jf, f, [torch.randn(4), torch.randn(4)])
    _check(jf, f, [torch.randn(4), torch.randn(4), torch.randn(4)])
    assert backend.frame_count == 2


def test_dict_keys_change_is_correct():
    def f(d):
        return [v * 2 for v in d.values()]

    backend = CountingBackend()
    jf = _jit(f, backend)
    _check(jf, f, {"a": torch.randn(4), "b": torch.randn(4)})
    _check(jf, f, {"a": torch.randn(4), "c": torch.randn(4), "b": torch.randn(4)})
    assert backend.frame_count == 2


def test_duplicate_input_aliasing_is_guarded():
    def f(a, b):
        a.add_(1)
        return a * b

    backend = CountingBackend()
    jf = _jit(f, backend)
    for same in (False, True, False):
        xe, ye = torch.randn(4), torch.randn(4)
        xj, yj = xe.clone(), ye.clone()
        expected = f(xe, xe if same else ye)
        actual = jf(xj, xj if same else yj)
        assert_same(expected, actual)
        assert_same(xe, xj, "mutated input")


def test_grad_mode_is_guarded():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    x = torch.randn(4, 8, requires_grad=True)
    assert_same(_affine(x), f(x))
    with torch.no_grad():
        out = f(x)
        assert not out.requires_grad
        assert_same(_affine(x), out)
    assert f(x).requires_grad


def test_autocast_state_is_guarded():
    def f(x, w):
        return x @ w

    backend = CountingBackend()
    jf = _jit(f, backend)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    assert_same(f(x, w), jf(x, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = f(x, w)
        assert expected.dtype == torch.bfloat16
        assert_same(expected, jf(x, w))
    assert_same(f(x, w), jf(x, w))


def test_default_dtype_is_guarded():
    def f(x):
        return torch.ones(3) + x.sum()

    jf = _jit(f, CountingBackend())
    x = torch.randn(4)
    old = torch.get_default_dtype()
    try:
        assert_same(f(x), jf(x))
        torch.set_default_dtype(torch.float64)
        expected = f(x)
        assert expected.dtype == torch.float64
        assert_same(expected, jf(x))
    finally:
        torch.set_default_dtype(old)
    assert_same(f(x), jf(x))


def test_tf32_matmul_flag_is_guarded():
    """Compiled matmul templates bake TF32 in or out; eager reads the flag on every call."""
    def f(x, w):
        return x @ w

    backend = CountingBackend()
    jf = _jit(f, backend)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            assert_same(f(x, w), jf(x, w))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    assert len(backend.graphs) == 2  # one graph per setting; the third call reuses the first


def test_closure_cell_change_is_seen():
    factor = 2.0

    def f(x):
        return x * factor

    jf = _jit(f, CountingBackend())
    x = torch.randn(4)
    assert_same(f(x), jf(x))
    factor = 5.0  # noqa: F841  (rebinds the cell that f reads)
    assert_same(f(x), jf(x))


def test_reset_forgets_everything():
    backend = CountingBackend()
    f = _jit(_affine, backend)
    x = torch.randn(4, 8)
    _check(f, _affine, x)
    _check(f, _affine, x)
    assert backend.frame_count == 1
    pyjit.reset()
    _check(f, _affine, x)
    assert backend.frame_count == 2
    _check(f, _affine, x)
    assert backend.frame_count == 2


def test_entry_limit_default_runs_eagerly_and_correctly():
    limit = pyjit.config.config.entry_limit
    assert limit == 8
    backend = CountingBackend()
    backend.pyjit_dynamic = False  # one static entry per size, so the sizes reach the limit
    f = _jit(_affine, backend)
    for n in range(1, limit + 4):
        _check(f, _affine, torch.randn(n, 3))
    assert backend.frame_count == limit
    # Past the limit nothing new compiles, and the early shapes stay correct.
    for n in range(1, limit + 4):
        _check(f, _affine, torch.randn(n, 3))
    assert backend.frame_count == limit


def test_entry_limit_from_config():
    with pyjit.config.patch(entry_limit=3):
        backend = CountingBackend()
        backend.pyjit_dynamic = False  # one static entry per size, so the sizes reach the limit
        f = _jit(_affine, backend)
        for n in range(1, 7):
            _check(f, _affine, torch.randn(n, 2))
        assert backend.frame_count == 3


def test_in_place_on_an_intermediate_needs_no_alias_guard(caplog):
    """``ReLU(inplace=True)`` on a value the graph computed writes no input back: the graph is
    valid whatever memory its inputs share, so it gets no (per-call, input-count long) aliasing
    guard. An in-place op on a view of an input does write one back and keeps the guard; both
    give eager's answer with inputs that share memory."""
    def intermediate(x, w):
        y = x @ w
        y.relu_()
        return y + 1

    def through_input(x, w):
        x[0].add_(1)
        return x * w

    pyjit.set_logs("guards")
    try:
        for fn, guarded in ((intermediate, False), (through_input, True)):
            caplog.clear()
            f = _jit(fn, CountingBackend())
            x, w = torch.randn(4, 4), torch.randn(4, 4)
            with caplog.at_level("DEBUG"):
                assert_same(fn(x.clone(), w), f(x.clone(), w))
            assert ("distinct_memory(L['x'], L['w'])" in caplog.text) is guarded, caplog.text
            base = torch.randn(8, 4)
            eager_base = base.clone()
            assert_same(fn(eager_base[:4], eager_base[4:]), f(base[:4], base[4:]))
            assert_same(eager_base, base)
    finally:
        pyjit.set_logs("")
