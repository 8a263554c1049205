"""Optimizer steps captured in a jitted training step.

``loss.backward(); opt.step(); opt.zero_grad()`` jitted whole: the forward is one graph,
``backward()`` and ``zero_grad()`` (``torch._disable_dynamo``) break, and ``opt.step()`` is traced
into the graph between them (pyjit/variables/optimizer.py). 20 steps with an LR scheduler
stepping every iteration, against eager on identical models and data, parameters compared after
every step; with backend="eager" and with pyjit's backend (C++ and the Triton interpreter).

Tolerances: SGD is bit-identical with backend="eager" (pyjit's own kernels reorder the model's
forward/backward arithmetic: rtol=1e-5, atol=1e-6 there). Adam/AdamW take torch's compile path of ``_single_tensor_adam``
(the step counter stays a tensor, so the bias corrections are float32 tensor math instead of
Python doubles, exactly as under torch.compile): equal within rtol=1e-5, atol=1e-6.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit
import pyjit.backend as backend
from pyjit import config as cfg


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(6, 12), nn.LayerNorm(12), nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.ln(self.fc1(x))))


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd_momentum_wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
}
TOLERANCE = {"sgd_momentum_wd": (0.0, 0.0)}  # (rtol, atol); the others: (1e-5, 1e-6)

# Graphs over 20 steps: the forward; the optimizer step before its state exists, with it, and
# with the scheduler's lr as a symbolic input; what follows zero_grad (loss.detach()).
MAX_GRAPHS = 5


def _pair(name: str) -> tuple[nn.Module, torch.optim.Optimizer, Any, nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = _Net()
    ref = copy.deepcopy(model)
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](ref.parameters())
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    ref_sched = torch.optim.lr_scheduler.ExponentialLR(ref_opt, gamma=0.9)
    return model, opt, sched, ref, ref_opt, ref_sched


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(10, 6, generator=g), torch.randn(10, 3, generator=g)


def _run_loop(name: str, backend_arg: Any, exact_sgd: bool = True) -> None:
    rtol, atol = TOLERANCE.get(name, (1e-5, 1e-6)) if exact_sgd else (1e-5, 1e-6)
    compare_loop(_pair(name), backend_arg, rtol, atol)


def compare_loop(pair: tuple[nn.Module, torch.optim.Optimizer, Any, nn.Module, torch.optim.Optimizer, Any],
                 backend_arg: Any, rtol: float, atol: float) -> None:
    """20 jitted training steps against eager: loss and parameters after every step, then the
    optimizer state (shared with test_foreach_optimizers.py)."""
    model, opt, sched, ref, ref_opt, ref_sched = pair
    x, y = _data()
    step = pyjit.jit(_step, backend=backend_arg)
    for i in range(20):
        loss = step(model, opt, x, y)
        ref_loss = _step(ref, ref_opt, x, y)
        sched.step()
        ref_sched.step()
        torch.testing.assert_close(loss, ref_loss, rtol=rtol, atol=atol, msg=f"loss, step {i}")
        for (pname, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=f"{pname}, step {i}")
        assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    # The optimizer state itself matches (momentum buffers, moments, step counters).
    for p, q in zip(model.parameters(), ref.parameters()):
        s, r = opt.state[p], ref_opt.state[q]
        assert s.keys() == r.keys()
        for k in s:
            torch.testing.assert_close(s[k], r[k], rtol=rtol, atol=atol, msg=k)


def count_graphs_of_loop(run_loop: Callable[[Any], None]) -> list[Any]:
    """The graphs ``run_loop(backend)`` gives a counting backend that runs them as captured."""
    graphs: list[Any] = []

    def counting(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    counting.pyjit_dynamic = True  # type: ignore[attr-defined]
    run_loop(counting)
    return graphs


def check_loop_on_pyjits_backend(run_loop: Callable[[Any], None], cpu_backend: str, tmp_path: Any) -> None:
    """``run_loop("pyjit")`` through pyjit's own backend on CPU; bounded graph count, nothing as captured."""
    if cpu_backend == "cpp":
        from pyjit.runtime import cpp_build
        if cpp_build.compiler() is None:
            pytest.skip("no working C++ compiler")
    pyjit.reset()
    backend.metrics.reset()
    with cfg.patch(cpu_backend=cpu_backend, raise_on_internal_error=True, cache_dir=str(tmp_path)):
        run_loop("pyjit")
    # +1: the model's forward is compiled twice, first without saved values (deferred saving,
    # config.aot_defer_saving), then saving once the first backward came.
    assert backend.metrics.compiled_graphs + len(backend.metrics.eager_graphs) <= MAX_GRAPHS + 1
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs
    pyjit.reset()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_eager_backend_matches_eager(name: str, fresh_pyjit: None) -> None:
    graphs = count_graphs_of_loop(lambda b: _run_loop(name, b))
    assert 3 <= len(graphs) <= MAX_GRAPHS, [g.code for g in graphs]


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_pyjit_backend_matches_eager(name: str, cpu_backend: str, tmp_path: Any) -> None:
    # pyjit's kernels reorder the forward/backward arithmetic: SGD is no longer bit-identical.
    check_loop_on_pyjits_backend(lambda b: _run_loop(name, b, exact_sgd=False), cpu_backend, tmp_path)


def _graph_text(gm: Any) -> str:
    return "\n".join(str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method"))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_update_is_inside_a_graph(name: str, fresh_pyjit: None) -> None:
    """explain: the only breaks are backward() and zero_grad(); the update writes the
    parameters in place inside a graph (at the first step and once the state exists)."""
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
        text = _graph_text(gm)
        params = [n for n in gm.graph.nodes if n.op == "placeholder"
                  and re.fullmatch(r"L\['opt'\]\.param_groups\[0\]\['params'\]\[\d+\]", str(n.meta.get("source")))]
        assert len(params) == len(list(model.parameters())), [n.meta.get("source") for n in params]
        for p in params:  # every parameter is written in place by the graph
            assert any(u.op == "call_method" and str(u.target).endswith("_") and u.args[0] is p for u in p.users), \
                (p.meta["source"], gm.code)
        # The state is an input at the second call (not created again).
        creates = text.count("zeros_like") + text.count("clone")
        assert (creates > 0) == (call == 0), (call, text)


def test_state_guard_and_lr_change(fresh_pyjit: None) -> None:
    """A new optimizer object (same class, same parameters) and an lr set by hand between calls
    are both seen: the result follows eager."""
    torch.manual_seed(0)
    model = _Net()
    ref = copy.deepcopy(model)
    x, y = _data()
    step = pyjit.jit(_step, backend="eager")
    for round_ in range(2):  # a fresh optimizer pair each round: its own (empty) state
        # SGD with momentum: bit-identical to eager, so any stale state or lr would show.
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
        for i, lr in enumerate([1e-2, 1e-2, 3e-3, 5e-2]):
            opt.param_groups[0]["lr"] = ref_opt.param_groups[0]["lr"] = lr
            step(model, opt, x, y)
            _step(ref, ref_opt, x, y)
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p, q, rtol=0, atol=0, msg=f"round {round_}, step {i}")


def test_profiler_range_is_a_no_op_context(fresh_pyjit: None) -> None:
    """record_function in user code: traced as a context that records nothing (one graph)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.autograd.profiler.record_function("my_range"):
            y = x.sin() * 2
        return y + 1

    x = torch.randn(4)
    e = pyjit.explain(f)(x)
    assert e.graph_count == 1 and e.break_count == 0, str(e)
    torch.testing.assert_close(pyjit.jit(f, backend="eager")(x), f(x))


def test_user_disabled_function_still_breaks(fresh_pyjit: None) -> None:
    """torch.compiler.disable on a user function is still honoured (only torch.optim's
    internal wrapper is traced through)."""
    @torch.compiler.disable
    def helper(t: torch.Tensor) -> torch.Tensor:
        return t * 3

    def f(x: torch.Tensor) -> torch.Tensor:
        return helper(x.cos()) + 1

    x = torch.randn(4)
    e = pyjit.explain(f)(x)
    assert [gb.kind for gb in e.graph_breaks] == ["disabled"], str(e)
    torch.testing.assert_close(pyjit.jit(f, backend="eager")(x), f(x))


def test_update_graph_is_compiled_by_pyjit_backend(tmp_path: Any) -> None:
    pyjit.reset()
    backend.metrics.reset()
    model, opt, _, _, _, _ = _pair("sgd_momentum_wd")
    x, y = _data()
    with cfg.patch(cpu_backend="cpp", cache_dir=str(tmp_path)):
        step = pyjit.jit(_step)
        for _ in range(3):
            step(model, opt, x, y)
    pyjit.reset()
    assert not backend.metrics.eager_graphs, backend.metrics.eager_graphs
