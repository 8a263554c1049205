"""Submodules with forward hooks and forward pre-hooks are traced, not a graph break: the hooks
run in ``Module._call_impl``'s order (pre-hooks may replace args, or args and kwargs when
registered ``with_kwargs``; hooks may replace the output), their side effects are replayed, and
the hook dicts are guarded (a hook added or removed after compiling is seen). Backward hooks and
global hooks still break the graph (the call then runs natively, as eager)."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def _pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    return _Net(), _Net()


def _jit_calls(m: nn.Module, x: torch.Tensor) -> tuple[Any, CountingBackend]:
    backend = CountingBackend()
    step = pyjit.jit(lambda t: m(t) * 1, backend=backend)
    return step, backend


def test_pre_hook_hook_and_side_effect_in_one_graph(fresh_pyjit: None) -> None:
    log: list[torch.Tensor] = []
    m = _Net()
    m.fc1.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    m.act.register_forward_hook(lambda mod, args, out: out + 1)
    m.fc2.register_forward_hook(lambda mod, args, out: log.append(out.sum()))  # returns None
    m.fc2.register_forward_pre_hook(lambda mod, args: None)
    x = torch.randn(3, 4)
    step, backend = _jit_calls(m, x)
    expected = m(x) * 1
    n = len(log)
    assert_same(expected, step(x))
    assert len(log) == n + 1 and torch.equal(log[-1], log[-2])  # the hook ran once, same value
    assert backend.frame_count == 1, backend.graph_listing()


def test_hooks_with_kwargs(fresh_pyjit: None) -> None:
    m = _Net()
    m.fc1.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] - 1,), kwargs), with_kwargs=True)
    m.fc2.register_forward_hook(lambda mod, args, kwargs, out: out * len(args), with_kwargs=True)
    x = torch.randn(3, 4)
    step, backend = _jit_calls(m, x)
    assert_same(m(x) * 1, step(x))
    assert backend.frame_count == 1, backend.graph_listing()


def test_hook_removed_or_added_after_compiling(fresh_pyjit: None) -> None:
    m = _Net()
    handle = m.act.register_forward_hook(lambda mod, args, out: out * 3)
    x = torch.randn(3, 4)
    step, _ = _jit_calls(m, x)
    assert_same(m(x) * 1, step(x))
    handle.remove()
    assert_same(m(x) * 1, step(x), "after removing the hook")
    m.fc2.register_forward_pre_hook(lambda mod, args: (args[0].flip(-1),))
    assert_same(m(x) * 1, step(x), "after adding a pre-hook")


def test_backward_hook_still_breaks_and_stays_correct(fresh_pyjit: None) -> None:
    m = _Net()
    grads: list[torch.Tensor] = []
    m.fc2.register_full_backward_hook(lambda mod, gin, gout: grads.append(gout[0]))
    x = torch.randn(3, 4, requires_grad=True)
    step, _ = _jit_calls(m, x)
    step(x).sum().backward()
    assert len(grads) == 1
    ref = _Net()
    ref.load_state_dict(m.state_dict())
    x2 = x.detach().clone().requires_grad_()
    (ref(x2) * 1).sum().backward()
    assert_same(x2.grad, x.grad)


def test_hooked_module_under_pyjits_own_backend(fresh_pyjit: None) -> None:
    m = _Net()
    m.fc1.register_forward_hook(lambda mod, args, out: torch.tanh(out))
    x = torch.randn(5, 4)
    torch.testing.assert_close(pyjit.jit(lambda t: m(t))(x), m(x))
