"""A jitted module's cache-hit call sees every change of module state that eager sees: a
parameter replaced, its ``requires_grad`` toggled, resized in place, the ``training`` flag
flipped, a hook added. Run with grad enabled (the autograd runtime, whose per-call input check
relies on the frontend's guards) and under ``no_grad``; outputs and gradients equal eager's."""
from __future__ import annotations

import copy
from typing import Callable, Iterator

import pytest
import torch
import torch.nn as nn

import pyjit


class _Stack(nn.Module):
    def __init__(self, width: int = 8, layers: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        if self.training:
            x = x * 2
        return x


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    pyjit.reset()
    yield
    pyjit.reset()


def _pair() -> tuple[nn.Module, nn.Module, nn.Module]:
    torch.manual_seed(0)
    eager = _Stack()
    mirror = copy.deepcopy(eager)
    return eager, mirror, pyjit.jit(mirror)


def _check(eager: nn.Module, jitted: nn.Module, mirror: nn.Module, x: torch.Tensor, grad: bool) -> None:
    """One call of each: same output; with grad, same parameter gradients after backward."""
    with torch.set_grad_enabled(grad):
        want = eager(x)
        got = jitted(x)
    torch.testing.assert_close(got, want)
    assert got.requires_grad == want.requires_grad
    if grad and want.requires_grad:
        eager.zero_grad(set_to_none=True)
        mirror.zero_grad(set_to_none=True)
        want.sum().backward()
        got.sum().backward()
        for (name, p), q in zip(eager.named_parameters(), mirror.parameters()):
            if p.grad is None:
                assert q.grad is None, name
            else:
                torch.testing.assert_close(q.grad, p.grad, msg=name)


def _both(mutate: Callable[[nn.Module], None], grad: bool) -> None:
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(3):  # compiled, then cache hits
        _check(eager, jitted, mirror, x, grad)
    mutate(eager)
    mutate(mirror)
    for _ in range(2):
        _check(eager, jitted, mirror, x, grad)


GRAD = [pytest.param(True, id="grad"), pytest.param(False, id="no_grad")]


@pytest.mark.parametrize("grad", GRAD)
def test_parameter_replaced(grad: bool) -> None:
    def mutate(m: nn.Module) -> None:
        torch.manual_seed(1)
        m.layers[1].weight = nn.Parameter(torch.randn(8, 8))
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_requires_grad_toggled(grad: bool) -> None:
    def mutate(m: nn.Module) -> None:
        m.layers[0].weight.requires_grad_(False)
        m.layers[2].bias.requires_grad_(False)
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_all_requires_grad_off(grad: bool) -> None:
    def mutate(m: nn.Module) -> None:
        for p in m.parameters():
            p.requires_grad_(False)
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_parameter_resized_in_place(grad: bool) -> None:
    # Same Parameter object, new size: the layer now maps 8 -> 4 features then a 4 -> 8 layer.
    def mutate(m: nn.Module) -> None:
        torch.manual_seed(2)
        with torch.no_grad():
            m.layers[1].weight.set_(torch.randn(4, 8))
            m.layers[1].bias.set_(torch.randn(4))
            m.layers[2].weight.set_(torch.randn(8, 4))
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_parameter_updated_in_place(grad: bool) -> None:
    def mutate(m: nn.Module) -> None:
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(0.5).add_(0.1)
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_training_flag_flipped(grad: bool) -> None:
    _both(lambda m: m.eval(), grad)


@pytest.mark.parametrize("grad", GRAD)
def test_hooks_added(grad: bool) -> None:
    seen: list[str] = []

    def add_hooks(m: nn.Module, tag: str) -> None:
        m.layers[1].register_forward_hook(lambda mod, args, out: (seen.append(tag), out * 3)[1])
        m.layers[0].register_forward_pre_hook(lambda mod, args: (args[0] + 1,))

    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(3):
        _check(eager, jitted, mirror, x, grad)
    add_hooks(eager, "eager")
    add_hooks(mirror, "jitted")
    for _ in range(2):
        _check(eager, jitted, mirror, x, grad)
    assert seen == ["eager", "jitted"] * 2


@pytest.mark.parametrize("grad", GRAD)
def test_submodule_swapped(grad: bool) -> None:
    def mutate(m: nn.Module) -> None:
        torch.manual_seed(3)
        m.layers[1] = nn.Linear(8, 8)
    _both(mutate, grad)


def test_grad_mode_switch_between_calls() -> None:
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for grad in (True, False, True, False, True):
        _check(eager, jitted, mirror, x, grad)


def test_input_requires_grad_toggled() -> None:
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(2):
        _check(eager, jitted, mirror, x, True)
    xg = x.clone().requires_grad_(True)
    xm = x.clone().requires_grad_(True)
    want = eager(xg)
    got = jitted(xm)
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xm.grad, xg.grad)


@pytest.mark.parametrize("grad", GRAD)
def test_parameter_data_transposed(grad: bool) -> None:
    # Same Parameter object, same sizes, other strides: the compiled kernels index the traced
    # layout, so the frontend's guards must catch it (the backend skips its own input check).
    def mutate(m: nn.Module) -> None:
        torch.manual_seed(4)
        m.layers[1].weight.data = torch.randn(8, 8).t()
    _both(mutate, grad)


@pytest.mark.parametrize("grad", GRAD)
def test_input_layout_changed(grad: bool) -> None:
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(3):
        _check(eager, jitted, mirror, x, grad)
    for other in (torch.randn(8, 2).t(), torch.randn(2, 16)[:, ::2], torch.randn(3, 8)):
        for _ in range(2):
            _check(eager, jitted, mirror, other, grad)


def test_static_trace_marks_inputs_guarded() -> None:
    # A static trace under the automatic dynamic policy pins every input with a full tensor guard:
    # the graph is marked so the backend skips its per-call input check; a trace with a symbolic
    # size is not marked (its guards leave that size to the shape checks and the module's check).
    from pyjit.backend.compile_fx import INPUTS_GUARDED, compile_fx

    marks: list[bool] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
        marks.append(bool(gm.meta.get(INPUTS_GUARDED)))
        return compile_fx(gm, example_inputs)

    torch.manual_seed(0)
    eager = _Stack()
    jitted = pyjit.jit(copy.deepcopy(eager), backend=backend)
    with torch.no_grad():
        for batch in (2, 2, 5, 7):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(jitted(x), eager(x))
    assert marks == [True, False]


def test_input_left_by_a_functorch_transform() -> None:
    # A tensor that escaped a finished torch.func transform (a dead wrapper): the autograd
    # runtime unwraps it as torch.autograd.Function.apply does; output and gradients as eager.
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(2):
        _check(eager, jitted, mirror, x, True)
    leaked: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        leaked.append(t)
        return (t * 2).sum()

    torch.func.grad(keep)(torch.randn(2, 8))
    _check(eager, jitted, mirror, leaked[0], True)


def test_layout_changed_between_forward_and_backward() -> None:
    # Deferred saving replays the forward at the first backward on the saved inputs. A parameter
    # given other strides in between (``.data``: no version bump) must not get a saving forward
    # compiled for those strides, which later calls (back in the guarded layout, guards pass)
    # would then run without a per-call input check.
    eager, mirror, jitted = _pair()
    x = torch.randn(2, 8)
    for _ in range(2):
        out = jitted(x)
    weight = mirror.layers[0].weight
    original = weight.data
    weight.data = original.t().contiguous().t()  # same values, transposed strides
    out.sum().backward()
    weight.data = original
    mirror.zero_grad(set_to_none=True)
    for _ in range(3):
        _check(eager, jitted, mirror, x, True)
