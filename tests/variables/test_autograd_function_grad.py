"""Custom ``torch.autograd.Function`` under grad mode: the call is one opaque graph node
calling the real ``apply`` (pyjit/variables/autograd_fn.py); pyjit's training backend traces the
user's forward and backward into the joint aten graph (pyjit/backend/aot/custom_function.py).

Every case compares outputs and the gradients of every input and parameter with eager, and
asserts where graphs were compiled (``metrics.eager_graphs`` stays empty, ``fullgraph=True``) or
where the call was refused (a graph break naming the Function; eager's gradients still).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

import pyjit
import pyjit.backend as backend
from pyjit.backend.aot import custom_function


@pytest.fixture(autouse=True)
def _metrics():
    backend.metrics.reset()
    yield
    assert not list(custom_function.iter_calls()), "registry entries left behind by a joint trace"


def _leaves(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def check_grads(fn: Callable[..., Any], *inputs: torch.Tensor, fullgraph: bool = True, compiled: bool = True,
                backend_: Any = "pyjit") -> Any:
    """``fn`` jitted against eager: outputs and every input's grad (``None`` where eager's is)."""
    ref = _leaves(*inputs)
    act = _leaves(*inputs)
    expected = fn(*ref)
    before = backend.metrics.compiled_graphs
    actual = pyjit.jit(fn, backend=backend_, fullgraph=fullgraph)(*act)
    torch.testing.assert_close(actual, expected)
    loss = lambda out: sum(o.sum() for o in (out if isinstance(out, tuple) else (out,)))  # noqa: E731
    loss(expected).backward()
    loss(actual).backward()
    for i, (e, a) in enumerate(zip(ref, act)):
        assert (e.grad is None) == (a.grad is None), f"input {i}: grad {a.grad} vs eager {e.grad}"
        if e.grad is not None:
            torch.testing.assert_close(a.grad, e.grad, msg=lambda m: f"input {i}: {m}")
    if compiled and backend_ == "pyjit":
        assert backend.metrics.eager_graphs == [], backend.metrics.eager_graphs
        assert backend.metrics.compiled_graphs > before
    return actual


# -- Functions ---------------------------------------------------------------------------------

def gelu_fwd(x: torch.Tensor) -> torch.Tensor:  # BLOOM's bloom_gelu_forward
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def gelu_back(g: torch.Tensor, x: Any) -> torch.Tensor:  # BLOOM's bloom_gelu_back (x a 1-tuple)
    x = x[0]
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


class GeLU(torch.autograd.Function):
    """transformers' BLOOM ``GeLUFunction``."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return gelu_fwd(input)

    @staticmethod
    def backward(ctx, grad_output):
        input = ctx.saved_tensors
        return gelu_back(grad_output, input)


class ScaledMul(torch.autograd.Function):
    """Two tensor inputs and a non-tensor ``scale`` kept on ctx."""

    @staticmethod
    def forward(ctx, x, y, scale):
        ctx.save_for_backward(x, y)
        ctx.scale = scale
        return x * y * scale

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y * ctx.scale, g * x * ctx.scale, None


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * x.cos() - gc * x.sin()


class NeedsInputGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = g @ w.t() if ctx.needs_input_grad[0] else None
        gw = x.t() @ g if ctx.needs_input_grad[1] else None
        return gx, gw


class SetupContextStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return torch.exp(x) * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out, None


class OnceDiff(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.relu() * 3

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0).to(g.dtype) * 3


class NonDiffOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        idx = x.argmax(dim=-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x)
        return x * 2, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        return g * 2


# -- supported cases --------------------------------------------------------------------------


def test_gelu_like_function_with_save_for_backward():
    def f(x, w):
        return GeLU.apply(x @ w) + 1

    check_grads(f, torch.randn(4, 8, requires_grad=True), torch.randn(8, 6, requires_grad=True))


def test_the_user_backward_is_in_the_compiled_backward_graph():
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    check_grads(lambda x: GeLU.apply(x), torch.randn(5, requires_grad=True),
                backend_=pyjit.backends.aot(record))
    fw, bw = graphs  # compiled as aten graphs: the call was traced through, not run as captured
    # gelu_back's own constant (sqrt(2/pi) * 3 * 0.044715): the user's backward was traced (the
    # partition computes its tangent-free part in the forward graph).
    constants = {a for g in graphs for n in g.graph.nodes for a in n.args if isinstance(a, float)}
    assert 0.1070322243 in constants
    assert any(isinstance(n.target, torch._ops.OpOverload) for n in bw.graph.nodes)
    assert not any("apply" in str(n.target) for g in graphs for n in g.graph.nodes)


def test_ctx_attribute_and_an_input_without_grad():
    def f(x, y):
        return ScaledMul.apply(x, y, 0.5).relu()

    check_grads(f, torch.randn(3, 4, requires_grad=True), torch.randn(3, 4))
    check_grads(f, torch.randn(3, 4), torch.randn(3, 4, requires_grad=True))


def test_two_outputs_one_used():
    def f(x):
        s, _c = TwoOutputs.apply(x * 2)
        return s * 3

    check_grads(f, torch.randn(6, requires_grad=True))

    def both(x):
        s, c = TwoOutputs.apply(x)
        return s + c

    check_grads(both, torch.randn(6, requires_grad=True))


def test_needs_input_grad_in_backward():
    def f(x, w):
        return NeedsInputGrad.apply(x, w).tanh()

    check_grads(f, torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True))
    check_grads(f, torch.randn(3, 4, requires_grad=True), torch.randn(4, 2))
    check_grads(f, torch.randn(3, 4), torch.randn(4, 2, requires_grad=True))


def test_setup_context_style_function():
    check_grads(lambda x: SetupContextStyle.apply(x, 2.0).sum(-1), torch.randn(3, 4, requires_grad=True))


def test_once_differentiable_backward():
    check_grads(lambda x: OnceDiff.apply(x) * x, torch.randn(7, requires_grad=True))


def test_non_differentiable_output():
    def f(x):
        y, idx = NonDiffOutput.apply(x)
        return y, idx

    x = torch.randn(3, 5, requires_grad=True)
    y, idx = pyjit.jit(f, fullgraph=True)(x)
    assert y.requires_grad and not idx.requires_grad
    check_grads(lambda x: NonDiffOutput.apply(x)[0] * 2, x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(GeLU.apply(self.fc1(x)))


def test_module_in_a_three_step_sgd_loop():
    torch.manual_seed(0)
    model = Block()
    ref = copy.deepcopy(model)
    jm = pyjit.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(5, 8)
    for _ in range(3):
        loss = jm(x).pow(2).mean()
        ref_loss = ref(x).pow(2).mean()
        torch.testing.assert_close(loss, ref_loss)
        loss.backward()
        ref_loss.backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    assert backend.metrics.eager_graphs == []
    explanation = pyjit.explain(model)(x)
    assert explanation.graph_count == 1 and not explanation.graph_breaks


def test_grad_then_no_grad_inference_and_deferred_saving():
    def f(x, w):
        return GeLU.apply(x @ w)

    x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
    jf = pyjit.jit(f, fullgraph=True)
    for defer in (True, False):
        with pyjit.config.patch(aot_defer_saving=defer):
            pyjit.reset()
            out = jf(x, w)  # grad-enabled inference: no backward ever
            torch.testing.assert_close(out, f(x, w))
            assert out.requires_grad
            with torch.no_grad():  # grad-mode guard fails: traced again, forward inlined
                out_ng = jf(x, w)
            assert not out_ng.requires_grad
            torch.testing.assert_close(out_ng, f(x, w).detach())
            out = jf(x, w)  # the grad entry again, now differentiated
            (g,) = torch.autograd.grad(out.sum(), [w])
            (ref,) = torch.autograd.grad(f(x, w).sum(), [w])
            torch.testing.assert_close(g, ref)
    assert backend.metrics.eager_graphs == []


# -- guards -------------------------------------------------------------------------------------

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Thrice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


ACT: Any = Twice
FACTOR = 2.0


class UsesGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * FACTOR

    @staticmethod
    def backward(ctx, g):
        return g * FACTOR


def _grad_of(jf: Callable[..., Any], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    out = jf(x)
    (g,) = torch.autograd.grad(out.sum(), [x])
    return out.detach(), g


def test_class_identity_is_guarded():
    global ACT
    jf = pyjit.jit(lambda x: ACT.apply(x) + 0, fullgraph=True)
    x = torch.randn(4)
    try:
        out, g = _grad_of(jf, x)
        torch.testing.assert_close(g, torch.full_like(x, 2.0))
        ACT = Thrice
        out, g = _grad_of(jf, x)
        torch.testing.assert_close(out, x * 3)
        torch.testing.assert_close(g, torch.full_like(x, 3.0))
    finally:
        ACT = Twice


def test_patched_backward_and_changed_global_recompile():
    global FACTOR
    jf = pyjit.jit(lambda x: UsesGlobal.apply(x) + 0, fullgraph=True)
    x = torch.randn(4)
    original = UsesGlobal.__dict__["backward"]
    try:
        _, g = _grad_of(jf, x)
        torch.testing.assert_close(g, torch.full_like(x, 2.0))
        FACTOR = 5.0  # read by forward and backward: guarded by value
        out, g = _grad_of(jf, x)
        torch.testing.assert_close(out, x * 5)
        torch.testing.assert_close(g, torch.full_like(x, 5.0))
        UsesGlobal.backward = staticmethod(lambda ctx, g: g * 7)  # guarded by identity
        _, g = _grad_of(jf, x)
        torch.testing.assert_close(g, torch.full_like(x, 7.0))
    finally:
        FACTOR = 2.0
        UsesGlobal.backward = original


# -- refused: a graph break naming the Function, eager's gradients ------------------------------

CALLS: list[int] = []
COUNT = 0


class MutatesGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        global COUNT
        COUNT += 1
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class AppendsToGlobalList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        CALLS.append(1)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class ReturnsView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, g):
        return g.view(2, 3)


class WithJvp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2

    @staticmethod
    def jvp(ctx, t):
        return t * 2


class WithVmap(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2


class NonTensorOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, 3

    @staticmethod
    def backward(ctx, g, _):
        return g * 2


class SetsOtherAttribute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        SetsOtherAttribute.last_shape = tuple(x.shape)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class ClassmethodForward(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


REFUSED = [
    (MutatesGlobal, "assigns the global 'COUNT'", (2, 3)),
    (AppendsToGlobalList, "reads the global 'CALLS'", (2, 3)),
    (InPlace, "ctx.mark_dirty", (2, 3)),
    (ReturnsView, "aliases an input", (2, 3)),
    (WithJvp, "defines jvp", (2, 3)),
    (WithVmap, "vmap rule", (2, 3)),
    (NonTensorOutput, "not a tensor or a tuple of tensors", (2, 3)),
    (SetsOtherAttribute, "attribute .last_shape of an object other than ctx", (2, 3)),
    (ClassmethodForward, "forward is not a Python staticmethod", (2, 3)),
]


@pytest.mark.parametrize("cls,reason,shape", REFUSED, ids=[c.__name__ for c, _, _ in REFUSED])
def test_refused_functions_break_with_their_name_and_keep_eager_gradients(cls, reason, shape):
    def f(x):
        y = x * 1.5  # a fresh tensor (the in-place Function must not modify a leaf)
        out = cls.apply(y)
        out = out[0] if isinstance(out, tuple) else out
        return out.exp()

    x = torch.randn(*shape, requires_grad=True)
    with pytest.raises(pyjit.GraphBreakError, match=rf"{cls.__name__}\.apply with gradients needed: .*{reason}"):
        pyjit.jit(f, fullgraph=True)(x)
    pyjit.reset()
    check_grads(f, x, fullgraph=False, compiled=False)
    explanation = pyjit.explain(f)(x)
    assert any(f"{cls.__name__}.apply" in str(b) for b in explanation.graph_breaks)


class BackwardNeedsData(torch.autograd.Function):
    """A backward that cannot run on fake tensors (``.item()``): the joint trace fails."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x * (1.0 if x.abs().max().item() >= 0 else 0.0)


def test_joint_trace_failure_runs_the_graph_as_captured():
    def f(x):
        return BackwardNeedsData.apply(x.sin())

    check_grads(f, torch.randn(5, requires_grad=True), compiled=False)
    assert len(backend.metrics.eager_graphs) == 1
    assert "BackwardNeedsData.apply" in backend.metrics.eager_graphs[0]


def test_no_grad_path_still_inlines_the_forward():
    seen: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append(gm)
        return gm.forward

    x = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        pyjit.jit(lambda v: GeLU.apply(v) + 1, backend=record, fullgraph=True)(x)
    (gm,) = seen
    assert not any(custom_function.function_of(n.target) for n in gm.graph.nodes)
    assert any(n.target is torch.tanh for n in gm.graph.nodes)


class InPlaceBackward(torch.autograd.Function):
    """In-place ops on a fresh tensor in both forward and backward (the joint graph is
    functionalized again)."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.mul_(3)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        out = g.clone()
        out.mul_(3)
        out[x < 0] = 0.0
        return out


def test_two_calls_and_two_classes_in_one_graph():
    def f(x, w):
        h = GeLU.apply(x @ w)
        h = ScaledMul.apply(h, GeLU.apply(h), 2.0)
        return InPlaceBackward.apply(h)

    check_grads(f, torch.randn(3, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True))


def test_dynamic_sizes():
    def f(x):
        return GeLU.apply(x).sum(0)

    jf = pyjit.jit(f, dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 4, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        out = jf(x)
        ref = f(xr)
        torch.testing.assert_close(out, ref)
        out.sum().backward()
        ref.sum().backward()
        torch.testing.assert_close(x.grad, xr.grad)
    assert backend.metrics.eager_graphs == []


def _closure_function() -> type:
    k = 2.0

    class Closure(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * k

    return Closure


def test_closure_is_refused():
    cls = _closure_function()
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(pyjit.GraphBreakError, match=r"Closure\.apply with gradients needed: .*free variables"):
        pyjit.jit(lambda v: cls.apply(v * 1.0), fullgraph=True)(x)
    pyjit.reset()
    check_grads(lambda v: cls.apply(v * 1.0).exp(), x, fullgraph=False, compiled=False)
