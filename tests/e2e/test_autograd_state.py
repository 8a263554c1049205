"""Autograd state and aliasing of what a jitted function returns and mutates equal eager's.

For every program: its outputs' and (mutated) inputs' ``requires_grad``, ``grad_fn`` presence,
``is_leaf``, ``_is_view()``, their relation to the inputs (the input object itself, a view whose
``_base`` is the input, a tensor sharing its memory, a fresh tensor), the values, the gradients a
``backward`` through the outputs gives, and the error eager raises (type and message start).
Each program runs straight, with a graph break in the middle (``print``), and called from an
inlined helper; through ``backend="eager"`` and pyjit's default backend; three calls each on
fresh inputs.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

import pyjit

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py

torch.manual_seed(0)
LIN = nn.Linear(4, 4)
LIN8 = nn.Linear(4, 8)
PARAMS = [*LIN.parameters(), *LIN8.parameters()]


def _no_break() -> None:
    pass


def _break() -> None:
    print("", end="")  # a graph break


# -- programs: (x, b) where b() is a graph break or nothing -------------------------------------
def arg_inplace_with_grad_value(x: torch.Tensor, b: Callable[[], None]) -> Any:
    x += LIN(x)  # eager's backward then raises: LIN saved x, modified in place (forward compared)
    b()
    return x * 2


def local_inplace_with_grad_value(x: torch.Tensor, b: Callable[[], None]) -> Any:
    m = x * 2
    b()
    m += LIN(m)
    return m


def arg_inplace_with_grad_value_differentiated(x: torch.Tensor, b: Callable[[], None]) -> Any:
    x += LIN(torch.ones(2, 4))
    b()
    return x * 2


def local_inplace_differentiated(x: torch.Tensor, b: Callable[[], None]) -> Any:
    m = x * 2
    b()
    m += LIN(torch.ones(2, 4)) * x
    return m


def inplace_on_view_of_output(x: torch.Tensor, b: Callable[[], None]) -> Any:
    t = LIN8(x)[:, :4]
    b()
    t.relu_()
    return t


def view_of_output_returned(x: torch.Tensor, b: Callable[[], None]) -> Any:
    h = LIN8(x)
    b()
    return h, h[:, :4], h.t()


def cat_of_one(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = torch.cat([x])
    b()
    return y


def cat_of_one_sliced(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = torch.cat([x], dim=1)[:, -4:]
    b()
    return y


def detach(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = x.detach()
    b()
    return y


def view_of_arg_across_break(x: torch.Tensor, b: Callable[[], None]) -> Any:
    v = x[0]
    b()
    x.mul_(0.5)
    return v * 1, v


def transpose_of_arg_across_break(x: torch.Tensor, b: Callable[[], None]) -> Any:
    v = x.t()
    b()
    x.mul_(0.5)
    return v * 1


def index_add_overlapping(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = x * 1
    b()
    x.index_add_(0, torch.tensor([0, 2]), x[:2])
    return x, y


def inplace_on_expanded(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = x * 1
    b()
    y[:1].expand(3, 2).add_(1)
    return y


def inplace_on_leaf_requiring_grad(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = x * 2
    b()
    x.add_(1)
    return y


def index_add_on_created_leaf(x: torch.Tensor, b: Callable[[], None]) -> Any:
    w = torch.zeros(3, 4, requires_grad=True)
    b()
    w.index_add_(0, torch.tensor([0, 1]), x)
    return w


def created_leaf_returned(x: torch.Tensor, b: Callable[[], None]) -> Any:
    w = torch.ones(2, 4, requires_grad=True)
    b()
    return w * x, w


def returns_input_itself(x: torch.Tensor, b: Callable[[], None]) -> Any:
    y = x.contiguous()
    b()
    return y, x.float()


def returns_views_of_input(x: torch.Tensor, b: Callable[[], None]) -> Any:
    v = x.view(-1)
    b()
    return v, x[0], x.t().detach()


def views_made_under_no_grad(x: torch.Tensor, b: Callable[[], None]) -> Any:
    with torch.no_grad():
        v = x[0]
        w = x * 2
    b()
    return v, w, x.detach()[0]


def mutated_without_grad_value(x: torch.Tensor, b: Callable[[], None]) -> Any:
    x.mul_(2)
    b()
    return LIN(x)


def mutated_under_no_grad(x: torch.Tensor, b: Callable[[], None]) -> Any:
    with torch.no_grad():
        x.add_(LIN(x))
    b()
    return x + 1


def made_under_no_grad_then_written_with_grad(x: torch.Tensor, b: Callable[[], None]) -> Any:
    with torch.no_grad():
        y = torch.tanh(x * 2)
    y += LIN(x)  # in eager y now requires grad (LIN's parameters), through AddBackward
    b()
    return y


def made_under_no_grad_written_through_a_view(x: torch.Tensor, b: Callable[[], None]) -> Any:
    with torch.no_grad():
        y = x * 2
    y[0] += LIN(x)[0]
    b()
    return y


def inference_mode_region(x: torch.Tensor, b: Callable[[], None]) -> Any:
    with torch.inference_mode():
        y = LIN(x)
    b()
    return y


def _plain() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4),)


def _leaf() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, requires_grad=True),)


def _non_leaf() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, requires_grad=True) * 1,)


def _rows3() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 2),)


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "arg_inplace_with_grad_value": (arg_inplace_with_grad_value, _plain),
    "local_inplace_with_grad_value": (local_inplace_with_grad_value, _plain),
    "arg_inplace_with_grad_value_differentiated": (arg_inplace_with_grad_value_differentiated, _plain),
    "local_inplace_differentiated": (local_inplace_differentiated, _plain),
    "inplace_on_view_of_output": (inplace_on_view_of_output, _plain),
    "view_of_output_returned": (view_of_output_returned, _plain),
    "cat_of_one": (cat_of_one, _plain),
    "cat_of_one_grad": (cat_of_one, _leaf),
    "cat_of_one_sliced": (cat_of_one_sliced, _plain),
    "detach": (detach, _plain),
    "detach_leaf": (detach, _leaf),
    "detach_non_leaf": (detach, _non_leaf),
    "view_of_arg_across_break": (view_of_arg_across_break, _plain),
    "transpose_of_arg_across_break": (transpose_of_arg_across_break, _plain),
    "index_add_overlapping": (index_add_overlapping, _rows3),
    "inplace_on_expanded": (inplace_on_expanded, _rows3),
    "inplace_on_leaf_requiring_grad": (inplace_on_leaf_requiring_grad, _leaf),
    "index_add_on_created_leaf": (index_add_on_created_leaf, _plain),
    "created_leaf_returned": (created_leaf_returned, _plain),
    "returns_input_itself": (returns_input_itself, _plain),
    "returns_input_itself_grad": (returns_input_itself, _leaf),
    "returns_views_of_input": (returns_views_of_input, _non_leaf),
    "views_made_under_no_grad": (views_made_under_no_grad, _leaf),
    "mutated_without_grad_value": (mutated_without_grad_value, _plain),
    "mutated_under_no_grad": (mutated_under_no_grad, _plain),
    "inference_mode_region": (inference_mode_region, _plain),
    "made_under_no_grad_then_written_with_grad": (made_under_no_grad_then_written_with_grad, _plain),
    "made_under_no_grad_then_written_with_grad_leaf": (made_under_no_grad_then_written_with_grad, _leaf),
    "made_under_no_grad_written_through_a_view": (made_under_no_grad_written_through_a_view, _plain),
}


# -- what is compared --------------------------------------------------------------------------
def _relation(t: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> list[str]:
    rel = []
    for i, x in enumerate(inputs):
        if t is x:
            rel.append(f"is input {i}")
        elif t._base is not None and (t._base is x or (x._base is not None and t._base is x._base)):
            rel.append(f"view of input {i}")
        elif t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            rel.append(f"shares memory with input {i}")
    return rel


def _tensor_state(t: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return {"requires_grad": t.requires_grad, "grad_fn": t.grad_fn is not None, "is_leaf": t.is_leaf,
            "is_view": t._is_view(), "is_inference": t.is_inference(), "relation": _relation(t, inputs),
            "value": t.detach().clone()}


# Programs whose eager backward raises "modified by an inplace operation" (a value autograd saved
# was updated in place): pyjit's training graph saves its own values, so only the forward's
# state is compared for them.
FORWARD_ONLY = {"arg_inplace_with_grad_value", "local_inplace_with_grad_value"}


def _observe(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], backward: bool = True) -> dict[str, Any]:
    for p in PARAMS:
        p.grad = None
    try:
        result = fn(*inputs)
    except Exception as e:  # noqa: BLE001 - eager's error is part of what is compared
        return {"error": (type(e).__name__, str(e)[:40])}
    outs = result if isinstance(result, tuple) else (result,)
    seen = {"outputs": [_tensor_state(o, inputs) for o in outs],
            "inputs": [_tensor_state(x, ()) for x in inputs]}
    differentiable = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad and not o.is_inference()]
    if differentiable and backward:
        sum(o.sum() for o in differentiable).backward()
        seen["grads"] = [None if p.grad is None else p.grad.clone() for p in PARAMS]
        seen["input_grads"] = [x.grad.clone() if x.is_leaf and x.grad is not None else None for x in inputs]
    return seen


def _assert_equal(expected: Any, actual: Any, where: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: {actual!r} is no tensor"
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and expected.keys() == actual.keys(), f"{where}: {expected} != {actual}"
        for k in expected:
            _assert_equal(expected[k], actual[k], f"{where}.{k}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(expected) == len(actual), f"{where}: {expected} != {actual}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            _assert_equal(e, a, f"{where}[{i}]")
    else:
        assert expected == actual, f"{where}: eager {expected!r}, pyjit {actual!r}"


def _straight(program: Callable[..., Any], b: Callable[[], None]) -> Callable[..., Any]:
    def run(x: torch.Tensor) -> Any:
        return program(x, b)

    return run


def _in_helper(program: Callable[..., Any], b: Callable[[], None]) -> Callable[..., Any]:
    def helper(x: torch.Tensor) -> Any:
        return program(x, b)

    def run(x: torch.Tensor) -> Any:
        return helper(x)

    return run


@pytest.mark.parametrize("backend", ["eager", "pyjit"])
@pytest.mark.parametrize("shape", ["straight", "graph_break", "inlined_helper"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_autograd_state_and_aliasing_as_in_eager(name: str, shape: str, backend: str) -> None:
    program, make_inputs = PROGRAMS[name]
    b = _break if shape == "graph_break" else _no_break
    wrap = _in_helper if shape == "inlined_helper" else _straight
    fn = wrap(program, b)
    jitted = pyjit.jit(fn, backend=backend)
    for call in range(3):
        torch.manual_seed(call)
        eager_inputs = make_inputs()
        torch.manual_seed(call)
        jit_inputs = make_inputs()
        expected = _observe(fn, eager_inputs, name not in FORWARD_ONLY)
        actual = _observe(jitted, jit_inputs, name not in FORWARD_ONLY)
        _assert_equal(expected, actual, f"{name} ({shape}, backend={backend}), call {call}")


def test_view_of_compiled_output_can_be_modified_in_place_and_differentiated() -> None:
    """An in-place op on a view of a graph output (taken outside the autograd.Function) keeps
    the gradient eager's gives."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        t = LIN8(x)[:, :4]
        _break()
        t.mul_(2)
        return t

    x = torch.randn(2, 4)
    for p in PARAMS:
        p.grad = None
    fn(x).sum().backward()
    expected = LIN8.weight.grad.clone()
    LIN8.weight.grad = None
    pyjit.jit(fn)(x).sum().backward()
    torch.testing.assert_close(LIN8.weight.grad, expected)


@pytest.mark.parametrize("backend", ["eager", "pyjit"])
def test_inputs_that_become_views_of_each_other_after_compile(backend: str) -> None:
    """A graph compiled for inputs in separate memory is not reused when one input is a view of
    the other (the write to ``y`` must be seen through ``x``)."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y.mul_(0.5)
        return x * 1

    jitted = pyjit.jit(fn, backend=backend)
    for call in range(3):
        x, y = torch.ones(3), torch.ones(2, 3)
        torch.testing.assert_close(jitted(x, y), fn(torch.ones(3), torch.ones(2, 3)))
        y = torch.ones(2, 3)
        y_eager = torch.ones(2, 3)
        torch.testing.assert_close(jitted(y[0], y), fn(y_eager[0], y_eager), msg=f"call {call}")
        torch.testing.assert_close(y, y_eager)


# -- .data and in-place updates through detach() -------------------------------------------------

def _data_read(x):
    return x.detach() * 2 + x.data


def _data_update_params(m, x):
    for p in m.parameters():
        p.data.mul_(0.5)
    return m(x)


def _inplace_through_detach(x):
    y = x * 2
    y.detach().add_(1)  # autograd keeps y's history and sees the new values
    return y * x


def _inplace_through_data_view(x):
    y = x * 2
    y.data[:2].add_(1)
    return y * x


@pytest.mark.parametrize("backend", ["eager", "pyjit"])
@pytest.mark.parametrize("fn,make", [
    (_data_read, lambda: (torch.randn(4, requires_grad=True),)),
    (_data_update_params, lambda: (torch.nn.Linear(3, 3), torch.randn(2, 3))),
    (_inplace_through_detach, lambda: (torch.randn(4, requires_grad=True),)),
    (_inplace_through_data_view, lambda: (torch.randn(4, requires_grad=True),)),
])
def test_tensor_data_and_inplace_updates_through_detach_match_eager(fn, make, backend):
    torch.manual_seed(0)
    eager_args = make()
    expected = fn(*eager_args)
    torch.manual_seed(0)
    args = make()
    actual = pyjit.jit(fn, backend=backend)(*args)
    torch.testing.assert_close(actual, expected)
    assert actual.requires_grad == expected.requires_grad
    leaf = (lambda a: a[0].weight) if fn is _data_update_params else (lambda a: a[-1])
    torch.testing.assert_close(leaf(args), leaf(eager_args))  # in-place effects on the inputs
    if expected.requires_grad:
        expected.sum().backward()
        actual.sum().backward()
        torch.testing.assert_close(leaf(args).grad, leaf(eager_args).grad)
