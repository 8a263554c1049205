"""Optimizers with ``foreach=True`` (torch's default for CUDA parameters) in a jitted training step.

``torch._foreach_*`` calls are traced as the per-tensor ops eager runs
(pyjit/variables/foreach.py), so ``opt.step()`` is captured as in
tests/e2e/test_optimizer_capture.py: the only breaks are ``backward()`` and ``zero_grad()``.
Adam's compile path hands ``_foreach_addcdiv_`` its step sizes as one stacked tensor; that
overload is written out per tensor with eager's arithmetic.

Same loop and tolerances as test_optimizer_capture.py: 20 steps with an LR scheduler, parameters,
loss and optimizer state compared with eager after every step. SGD is bit-identical with
backend="eager" (rtol=1e-5, atol=1e-6 through pyjit's kernels); the others follow torch's compile
path (tensor step counters, float32 bias corrections): rtol=1e-5, atol=1e-6.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Callable

import pytest
import torch

import pyjit
from pyjit import config as cfg

from .test_optimizer_capture import (MAX_GRAPHS, _data, _graph_text, _Net, _step, check_loop_on_pyjits_backend,
                                     compare_loop, count_graphs_of_loop)

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    "adam_wd": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-2, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05, foreach=True),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, foreach=True),
    "sgd_momentum_wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2, foreach=True),
    "sgd_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2,
                                                 foreach=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, foreach=True),
    "rmsprop_centered_momentum": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True,
                                                               weight_decay=1e-3, foreach=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=5e-2, lr_decay=1e-3, weight_decay=1e-3, foreach=True),
}
EXACT = {"sgd_momentum_wd", "sgd_nesterov_wd"}  # bit-identical with backend="eager"
# Through pyjit's kernels: centered RMSprop divides by sqrt(E[g^2] - E[g]^2), which magnifies the
# last-bit differences of the reordered forward/backward in its momentum buffer (parameters stay
# within 1e-5/1e-6). foreach=False gives the same buffers to the last bit: not a foreach matter.
PYJIT_TOLERANCE = {"rmsprop_centered_momentum": (1e-4, 2e-5)}


def _pair(name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = _Net()
    ref = copy.deepcopy(model)
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](ref.parameters())
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    ref_sched = torch.optim.lr_scheduler.ExponentialLR(ref_opt, gamma=0.9)
    return model, opt, sched, ref, ref_opt, ref_sched


def _run_loop(name: str, backend_arg: Any, exact_sgd: bool = True) -> None:
    if exact_sgd:
        rtol, atol = (0.0, 0.0) if name in EXACT else (1e-5, 1e-6)
    else:
        rtol, atol = PYJIT_TOLERANCE.get(name, (1e-5, 1e-6))
    compare_loop(_pair(name), backend_arg, rtol, atol)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_eager_backend_matches_eager(name: str, fresh_pyjit: None) -> None:
    graphs = count_graphs_of_loop(lambda b: _run_loop(name, b))
    assert 3 <= len(graphs) <= MAX_GRAPHS, [g.code for g in graphs]


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_pyjit_backend_matches_eager(name: str, cpu_backend: str, tmp_path: Any) -> None:
    # Also bounds the graph count and asserts nothing ran as captured (one 20-step loop: a second
    # loop only repeated those checks, at ~10 s per optimizer under Triton's interpreter).
    check_loop_on_pyjits_backend(lambda b: _run_loop(name, b, exact_sgd=False), cpu_backend, tmp_path)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_update_is_inside_a_graph(name: str, fresh_pyjit: None) -> None:
    """explain: the only breaks are backward() and zero_grad(), as without foreach; no foreach
    node is left in the graph, and every parameter is written in place by it."""
    model, opt, _, _, _, _ = _pair(name)
    x, y = _data()
    for call in range(2):
        e = pyjit.explain(_step)(model, opt, x, y)
        kinds = [(gb.kind, gb.explanation) for gb in e.graph_breaks]
        assert [k for k, _ in kinds] == ["autograd_call", "disabled"], kinds
        assert "backward" in kinds[0][1] and "zero_grad" in kinds[1][1], kinds
        assert not e.eager_frames
        update = [g for g in e.graphs if "_set_grad_enabled" in _graph_text(g)]
        assert len(update) == 1, [g.code for g in e.graphs]
        gm = update[0]
        assert "_foreach_" not in _graph_text(gm), gm.code
        params = [n for n in gm.graph.nodes if n.op == "placeholder"
                  and re.fullmatch(r"L\['opt'\]\.param_groups\[0\]\['params'\]\[\d+\]", str(n.meta.get("source")))]
        assert len(params) == len(list(model.parameters())), [n.meta.get("source") for n in params]
        for p in params:
            assert any(u.op == "call_method" and str(u.target).endswith("_") and u.args[0] is p for u in p.users), \
                (p.meta["source"], gm.code)


# -- foreach calls in user code ----------------------------------------------------------------------

def _lists(n: int = 3, dtype: torch.dtype = torch.float32) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    shapes = [(5, 3), (7,), (2, 4, 3)][:n]
    return [[torch.randn(s, generator=g).to(dtype) for s in shapes] for _ in range(3)]


def _addcdiv_tensor_scalars(xs: list[torch.Tensor], t1: list[torch.Tensor], t2: list[torch.Tensor],
                            s: torch.Tensor) -> list[torch.Tensor]:
    torch._foreach_addcdiv_(xs, t1, [t.abs() + 0.5 for t in t2], s * -1)
    return xs


def _addcmul_tensor_scalars(xs: list[torch.Tensor], t1: list[torch.Tensor], t2: list[torch.Tensor],
                            s: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch._foreach_addcmul(xs, t1, t2, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("fn", [_addcdiv_tensor_scalars, _addcmul_tensor_scalars])
def test_addc_with_a_tensor_of_scalars(fn: Callable[..., Any], dtype: torch.dtype, fresh_pyjit: None) -> None:
    """``_foreach_addcdiv_(xs, t1, t2, scalars)`` with ``scalars`` a 1-d tensor: one graph, no
    break, equal to eager (bit-identical with backend="eager": the kernel's own arithmetic)."""
    xs, t1, t2 = _lists(dtype=dtype)
    s = torch.tensor([0.3, -1.7, 2.5], dtype=torch.float64 if dtype == torch.float32 else torch.float32)
    ref = fn([x.clone() for x in xs], t1, t2, s)
    e = pyjit.explain(fn)([x.clone() for x in xs], t1, t2, s)
    assert e.graph_count == 1 and e.break_count == 0, str(e)
    got = pyjit.jit(fn, backend="eager")([x.clone() for x in xs], t1, t2, s)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_addc_with_a_tensor_of_scalars_pyjit_backend(tmp_path: Any) -> None:
    from pyjit.runtime import cpp_build

    if cpp_build.compiler() is None:
        pytest.skip("no working C++ compiler")
    xs, t1, t2 = _lists()
    s = torch.tensor([0.3, -1.7, 2.5])
    ref = _addcdiv_tensor_scalars([x.clone() for x in xs], t1, t2, s)
    pyjit.reset()
    with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True, cache_dir=str(tmp_path)):
        got = pyjit.jit(_addcdiv_tensor_scalars)([x.clone() for x in xs], t1, t2, s)
    pyjit.reset()
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _mixed(xs: list[torch.Tensor], ys: list[torch.Tensor], zs: list[torch.Tensor],
           s: torch.Tensor) -> list[Any]:
    """The overloads torch.optim's multi-tensor paths use, and a few more."""
    xs = list(torch._foreach_mul(xs, 0.9))
    torch._foreach_add_(xs, ys, alpha=-0.1)
    torch._foreach_add_(xs, 1)
    torch._foreach_add_(xs, s)                     # one 0-d tensor for every element
    torch._foreach_sub_(xs, [0.5, 1.5, -2.0])      # a list of scalars
    torch._foreach_div_(xs, [y.abs().sum() + 1 for y in ys])  # a list of 0-d tensors
    torch._foreach_lerp_(xs, ys, 0.25)
    torch._foreach_maximum_(xs, zs)
    torch._foreach_addcmul_(xs, ys, zs, value=0.5)
    torch._foreach_addcdiv_(xs, ys, [z.abs() + 1 for z in zs], [0.1, 0.2, 0.3])
    sq = torch._foreach_sqrt(torch._foreach_abs(xs))
    torch._foreach_reciprocal_(sq)
    out = list(torch._foreach_pow(2.0, sq)) + list(torch._foreach_minimum(xs, -0.25))
    out += list(torch._foreach_norm(xs)) + list(torch._foreach_neg(torch._foreach_exp(ys)))
    torch._foreach_zero_(zs)
    return [*xs, *out, *zs]


def test_foreach_ops_match_eager(fresh_pyjit: None) -> None:
    xs, ys, zs = _lists()
    s = torch.tensor(0.75)
    ref = _mixed([x.clone() for x in xs], ys, [z.clone() for z in zs], s)
    e = pyjit.explain(_mixed)([x.clone() for x in xs], ys, [z.clone() for z in zs], s)
    assert e.graph_count == 1 and e.break_count == 0, str(e)
    assert "_foreach_" not in "".join(_graph_text(g) for g in e.graphs)
    got = pyjit.jit(_mixed, backend="eager")([x.clone() for x in xs], ys, [z.clone() for z in zs], s)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_rejected_call_breaks_like_eager(fresh_pyjit: None) -> None:
    """A call eager rejects (lists of different lengths) is not decomposed: the break runs it
    natively and the user gets torch's error."""
    def f(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return torch._foreach_add(xs, ys)

    xs, ys, _ = _lists()
    with pytest.raises(RuntimeError, match="same number of tensors"):
        pyjit.jit(f, backend="eager")(xs, ys[:2])
