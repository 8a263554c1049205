"""Training steps whose sizes vary: the dynamic frame entry's graph needs autograd, and pyjit's
backend compiles one symbolic training graph for every size (``aot/symbolic.py``: symbolic joint
graph, partition, forward and backward compiled once). Where that is refused it compiles a
static training graph per input size (``aot.compile_training_per_size``, at most
``config.aot_static_sizes_max``; beyond that the graph runs as captured, logged). Every loss
and gradient equals eager's."""
from __future__ import annotations

import copy
import logging
import math
from typing import Any

import pytest
import torch
import torch.nn as nn

import pyjit
import pyjit.backend as backend


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    loss = out.pow(2).mean() + out[:, : x.shape[0] % 3 + 1].sum()
    loss.backward()
    return loss.detach()


def _train(model: nn.Module, step: Any, inputs: list[Any], cpu_backend: str = "cpp", tol: float = 1e-5
           ) -> list[int]:
    """Jitted ``step(model, x)`` (``step(model, *x)`` for a tuple) for each input against eager
    on a copy (loss and every grad); returns ``metrics.compiled_graphs`` after each step."""
    counts = []
    ref = copy.deepcopy(model)
    with pyjit.config.patch(cpu_backend=cpu_backend):
        jitted = pyjit.jit(step)
        for x in inputs:
            args = x if isinstance(x, tuple) else (x,)
            model.zero_grad()
            ref.zero_grad()
            torch.testing.assert_close(jitted(model, *args), step(ref, *args), atol=tol, rtol=tol)
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=tol, rtol=tol, msg=name)
            counts.append(backend.metrics.compiled_graphs)
    return counts


def _run(sizes: list[int], cpu_backend: str) -> list[int]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    return _train(model, _step, [torch.randn(n, 8) for n in sizes], cpu_backend)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
def test_varying_batch_training_compiles_one_symbolic_graph(fresh_pyjit: Any, cpu_backend: str) -> None:
    backend.metrics.reset()
    counts = _run([4, 5, 6, 7, 5, 4, 9, 3], cpu_backend)
    assert backend.metrics.eager_graphs == []  # nothing ran as captured
    assert backend.metrics.dynamic_graphs >= 2  # the forward and the backward are symbolic
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts  # nothing compiled after the 2nd size


def _refuse_symbolic(monkeypatch: Any) -> None:
    from pyjit.backend.aot import symbolic

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("refused by the test")

    monkeypatch.setattr(symbolic, "compile_training_symbolic", refuse)


def test_refused_symbolic_training_compiles_per_size(fresh_pyjit: Any, monkeypatch: Any, caplog: Any) -> None:
    _refuse_symbolic(monkeypatch)
    backend.metrics.reset()
    with caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        _run([4, 5, 6, 7, 5, 4, 6], "cpp")
    assert backend.metrics.eager_graphs == []
    assert backend.metrics.dynamic_graphs == 0  # the training graphs are static, one per size
    assert any("no symbolic training graph (refused by the test)" in r.getMessage() for r in caplog.records)


def test_sizes_beyond_the_cap_run_as_captured(fresh_pyjit: Any, monkeypatch: Any, caplog: Any) -> None:
    _refuse_symbolic(monkeypatch)
    backend.metrics.reset()
    with pyjit.config.patch(aot_static_sizes_max=2), caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        _run([4, 5, 6, 7, 8, 7], "cpp")
    assert any("further sizes run as captured" in r.getMessage() for r in caplog.records)


class _Block(nn.Module):
    """Attention with a causal mask, GELU MLP, layer norms: sizes vary with the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(16), nn.LayerNorm(16)
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // 2)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def test_block_with_varying_sequence_length_trains_with_one_symbolic_graph(fresh_pyjit: Any) -> None:
    def step(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = m(x).square().mean()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    backend.metrics.reset()
    counts = _train(_Block(), step, [torch.randn(2, t, 16) for t in [5, 7, 6, 9, 7, 3]])
    assert backend.metrics.eager_graphs == []
    assert backend.metrics.dynamic_graphs >= 2
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_symbolic_training_graphs_on_cuda(fresh_pyjit: Any) -> None:
    """The symbolic training path on the GPU backend (Triton kernels, cuBLAS externs, autotuned
    templates): the attention block over varying sequence lengths, then a step whose batch
    size, loss weight and slice bound vary; one symbolic training graph each, grads as eager's."""
    def step(m: nn.Module, x: torch.Tensor, beta: float, k: int) -> torch.Tensor:
        out = m(x)
        loss = out.square().mean() * beta + out[..., :k].sum()
        loss.backward()
        return loss.detach()

    cuda = torch.device("cuda")
    torch.manual_seed(0)
    backend.metrics.reset()
    counts = _train(_Block().to(cuda), step, [(torch.randn(2, t, 16, device=cuda), 0.5 + t / 10, t % 3 + 1)
                                              for t in [5, 7, 6, 9, 7, 3]], tol=1e-4)
    assert backend.metrics.eager_graphs == []
    assert backend.metrics.dynamic_graphs >= 2
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts
    mlp = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 4)).to(cuda)
    backend.metrics.reset()
    counts = _train(mlp, step, [(torch.randn(n, 8, device=cuda), n / 7, n % 4 + 1) for n in [4, 5, 6, 33, 5, 130]],
                    tol=1e-4)
    assert backend.metrics.eager_graphs == []
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts


def test_guards_of_the_joint_trace_are_checked_by_the_compiled_graphs(fresh_pyjit: Any) -> None:
    """The joint trace's decompositions add size guards of their own (here ``unflatten``'s
    ``2*(s//2) == s`` and relations of its backward); lowerings rely on every guard, so the
    compiled forward checks them per call (``compile_fx.GUARDS_SINCE``), not only those its own
    aten trace adds (none: its graph is already aten). Called directly, without the frontend's
    guards, the compiled graph gives eager's results."""
    from pyjit.backend.compile_fx import GUARDS_SINCE, compile_fx

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.pad(x, (1, 2)) @ w
        z = y.unflatten(0, (2, -1)).sum(1)
        return (z.softmax(-1) * y[:2]).sum()

    compiled: list[Any] = []

    def keep(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        compiled.append(compile_fx(gm, inputs))
        return compiled[-1]

    keep.pyjit_dynamic = True  # type: ignore[attr-defined]
    # pyjit's own compiler, called directly below with the tensors only: sizes read from them
    keep.pyjit_size_placeholders = False  # type: ignore[attr-defined]
    w = torch.randn(11, 5, requires_grad=True)
    jf = pyjit.jit(f, backend=keep, dynamic=True)
    for n in (4, 6, 8):
        x = torch.randn(n, 8, requires_grad=True)
        jf(x, w).backward()
    symbolic = [c for c in compiled if getattr(c, "pyjit_state", None) is not None
                and c.pyjit_state.part.fw_gm.meta.get(GUARDS_SINCE) is not None]
    assert symbolic, "no symbolic training graph was compiled"
    state = symbolic[0].pyjit_state
    forward = state.inference_fw or state.fw
    assert forward.pyjit_check([torch.randn(6, 8), w.detach()])
    assert not forward.pyjit_check([torch.randn(7, 8), w.detach()])  # an odd size: the joint trace's guard
    w.grad = None
    for n in (4, 10):
        x = torch.randn(n, 8, requires_grad=True)
        res = symbolic[0](x, w)  # the graph's inputs are (x, w); it returns its outputs flat
        out = res[0] if isinstance(res, (tuple, list)) else res
        out.backward()
        got = (out.detach(), x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        ref = f(x, w)
        ref.backward()
        torch.testing.assert_close(got[0], ref.detach())
        torch.testing.assert_close(got[1], x.grad)
        torch.testing.assert_close(got[2], w.grad)
        x.grad = w.grad = None


def test_varying_python_numbers_stay_inputs_of_one_symbolic_training_graph(fresh_pyjit: Any) -> None:
    """A loss weight (float) and a slice bound (int) that change every step become symbolic
    inputs of the training graph (automatic dynamic): one symbolic training graph serves every
    value instead of a compile per value; they reach the backward (the weight scales the
    gradient) and the deferred-saving replay as numbers."""
    def step(m: nn.Module, x: torch.Tensor, beta: float, k: int) -> torch.Tensor:
        out = m(x)
        loss = out.square().mean() * beta + out[:, :k].sum()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    backend.metrics.reset()
    counts = _train(model, step, [(torch.randn(n, 8), beta, k) for n, beta, k in
                                  [(4, 0.1, 1), (5, 0.2, 2), (6, 0.3, 3), (4, 0.45, 2), (7, 1.5, 4), (5, 0.2, 1)]])
    assert backend.metrics.eager_graphs == []
    assert backend.metrics.dynamic_graphs >= 2
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton_interpret"])
def test_batch_norm_training_over_batch_sizes_compiles_one_symbolic_graph(fresh_pyjit: Any, cpu_backend: str) -> None:
    """Batch norm in training mode divides sizes as floats (``numel / C`` and the unbiased
    variance's ``n / (n - 1)`` for the running variance): such float size expressions are
    computed from the size arguments (``symbolic.TrueDiv``) instead of refusing the symbolic
    graph, which compiled a training graph per batch size. Losses, grads and running
    statistics equal eager's."""
    def step(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = m(x).square().mean()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 2),
                          nn.BatchNorm1d(2))
    ref = copy.deepcopy(model)
    backend.metrics.reset()
    counts = []
    with pyjit.config.patch(cpu_backend=cpu_backend):
        jitted = pyjit.jit(step)
        for n in [2, 3, 4, 5, 7, 3]:
            x = torch.randn(n, 3, 8, 8)
            model.zero_grad()
            ref.zero_grad()
            torch.testing.assert_close(jitted(model, x), step(ref, x), atol=1e-4, rtol=1e-4)
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
            for (name, b), c in zip(model.named_buffers(), ref.buffers()):
                torch.testing.assert_close(b, c, atol=1e-5, rtol=1e-5, msg=name)
            counts.append(backend.metrics.compiled_graphs)
    assert backend.metrics.eager_graphs == []
    assert backend.metrics.dynamic_graphs >= 2
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts
