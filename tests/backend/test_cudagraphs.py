"""CUDA graphs (``pyjit.jit(fn, mode="reduce-overhead")``, pyjit/runtime/cudagraphs.py).

CPU tests cover what runs without a GPU: mode validation, the logged reason on CPU graphs, the
static graph checks, and the runner's bookkeeping (static buffers, inputs read in place,
invalidation of outputs held across calls) through a stand-in capture that replays by running
the function into the same output memory, as a CUDA graph does. GPU tests compare 100 replays
with changing input values against runs without replay.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import pytest
import torch

import pyjit
from pyjit import backends
from pyjit import config as cfg
from pyjit.runtime import cudagraphs
from pyjit.runtime.cudagraphs import CudaGraphRunner

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def _fresh(tmp_path_factory: Any) -> Any:
    pyjit.reset()
    cudagraphs.reset_metrics()
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache"
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True, cache_dir=str(cache)):
        yield
    pyjit.reset()


# ----------------------------------------------------------------------------- mode option

def test_mode_validation() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    for bad in ("max-autotune", "reduce_overhead", ""):
        with pytest.raises(ValueError, match="accepted: None, 'default', 'reduce-overhead'"):
            pyjit.jit(f, mode=bad)
    with pytest.raises(ValueError, match="unknown mode"):
        pyjit.enable(mode="fast")
    pyjit.jit(f, mode=None)
    pyjit.jit(f, mode="default")
    a = pyjit.jit(f, mode="reduce-overhead")
    assert a._options.backend is backends.lookup("pyjit_cudagraphs")
    # Same mode, same backend object: one cache; dynamic=True gets the variant that accepts symbols.
    assert pyjit.jit(f, mode="reduce-overhead")._options.backend is a._options.backend
    dyn = pyjit.jit(f, mode="reduce-overhead", dynamic=True)._options.backend
    assert dyn is not a._options.backend and dyn.pyjit_dynamic
    assert not a._options.backend.pyjit_dynamic


def test_cpu_graph_runs_compiled_with_logged_reason(caplog: Any) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2 + y, -1)

    g = pyjit.jit(f, mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="pyjit.perf_hints"):
        for _ in range(4):
            x, y = torch.randn(4, 8), torch.randn(4, 8)
            torch.testing.assert_close(g(x, y), f(x, y))
    expected = "CUDA is not available" if not torch.cuda.is_available() else "a graph input is a cpu tensor"
    assert any("CUDA graphs not used for" in r.message and "test_cudagraphs.py:" in r.message  # names the code
               and expected in r.message for r in caplog.records)
    assert cudagraphs.metrics["captures"] == 0


# ----------------------------------------------------------------------------- graph checks

def _traced(fn: Callable[..., Any], *args: Any, dynamic: bool | None = None) -> Any:
    """The FX graph pyjit's tracer records for ``fn(*args)``."""
    return pyjit.explain(fn, dynamic=dynamic)(*args).graphs[0]


def test_graph_reason_mutation_of_input_only() -> None:
    def mutates_input(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    def mutates_view_of_input(x: torch.Tensor) -> torch.Tensor:
        x[0].mul_(3)
        return x.sum()

    def mutates_intermediate(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)
        return y

    x = torch.randn(4, 4)
    assert "in place" in cudagraphs.graph_reason(_traced(mutates_input, x.clone()), device="cpu")
    assert "in place" in cudagraphs.graph_reason(_traced(mutates_view_of_input, x.clone()), device="cpu")
    assert cudagraphs.graph_reason(_traced(mutates_intermediate, x), device="cpu") is None


def test_graph_reason_device_sync_and_dynamic() -> None:
    def pointwise(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1

    x = torch.randn(4, 4)
    gm = _traced(pointwise, x)
    assert cudagraphs.graph_reason(gm, device="cpu") is None
    assert "cpu tensor" in cudagraphs.graph_reason(gm, device="cuda")
    dyn = _traced(pointwise, x, dynamic=True)
    assert "dynamic shapes" in cudagraphs.graph_reason(dyn, device="cpu")


def test_in_place_inputs_are_parameters_and_attributes() -> None:
    lin = torch.nn.Linear(4, 4)

    def f(x: torch.Tensor) -> torch.Tensor:
        return lin(x)

    x = torch.randn(2, 4)
    gm = _traced(f, x)
    sources = [n.meta["source"] for n in gm.graph.nodes if n.op == "placeholder"]
    values = {"weight": lin.weight, "bias": lin.bias}
    inputs = [x if s == "L['x']" else values[s.rsplit(".", 1)[-1]] for s in sources]
    flags = cudagraphs.in_place_inputs(gm, inputs)
    assert [f for f, s in zip(flags, sources) if s == "L['x']"] == [False]
    assert flags.count(True) == 2


# ----------------------------------------------------------------------------- runner bookkeeping

class _FakeGraph:
    """Replays like a CUDA graph: the function runs on the static inputs and its results are
    written into the output memory of the capture."""

    def __init__(self, fn: Callable[..., Any], static: list[torch.Tensor]) -> None:
        self.fn, self.static = fn, static
        self.outs = fn(*static)

    def replay(self) -> None:
        new = self.fn(*self.static)
        for o, n in zip(_leaves(self.outs), _leaves(new)):
            o.copy_(n)


def _leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _fake_capture(fn: Callable[..., Any], static: list[torch.Tensor]) -> tuple[Any, Any]:
    g = _FakeGraph(fn, static)
    return g, g.outs


class _Recorder:
    """An invalidator that records which storages it was asked to invalidate."""

    def __init__(self) -> None:
        self.cdatas: list[int] = []
        self.messages: list[str] = []

    def __call__(self, cdata: int, msg: str) -> None:
        self.cdatas.append(cdata)
        self.messages.append(msg)


def _mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w + b)
    return h, torch.softmax(h, -1)


def test_runner_replays_match_over_100_calls() -> None:
    w, b = torch.randn(8, 8), torch.randn(8)
    x0 = torch.randn(4, 8)
    r = CudaGraphRunner(_mlp, [x0, w, b], name="mlp", in_place=[False, True, True], capture=_fake_capture,
                        invalidate=_Recorder())
    for i in range(100):
        x = torch.randn(4, 8)
        got = r(x, w, b)
        torch.testing.assert_close(got, _mlp(x, w, b))
    assert r.captures == 1 and r.disabled is None
    assert cudagraphs.metrics["replays"] == 100 - r.warmup
    assert r.static_args[1] is w and r.static_args[0] is not x  # weights in place, x copied


def test_runner_invalidates_outputs_held_across_calls() -> None:
    rec = _Recorder()
    w, b = torch.randn(8, 8), torch.randn(8)
    r = CudaGraphRunner(_mlp, [torch.randn(4, 8), w, b], name="mlp (m.py:3)", in_place=[False, True, True],
                        capture=_fake_capture, invalidate=rec, warmup=1)
    r(torch.randn(4, 8), w, b)  # warm-up: a normal call, nothing to invalidate later
    h1, s1 = r(torch.randn(4, 8), w, b)
    held = {h1.untyped_storage()._cdata, s1.untyped_storage()._cdata}
    assert h1.untyped_storage().data_ptr() == r.out_leaves[0].untyped_storage().data_ptr()
    view = h1[0]
    del h1, s1  # the view keeps h1's storage alive: it must be invalidated
    h2, s2 = r(torch.randn(4, 8), w, b)
    assert rec.cdatas == [next(iter(held & {view.untyped_storage()._cdata}))]
    assert "mlp (m.py:3)" in rec.messages[0] and "clone" in rec.messages[0]
    del view, h2, s2  # nothing held: the next replay invalidates nothing
    rec.cdatas.clear()
    r(torch.randn(4, 8), w, b)
    assert rec.cdatas == []


def test_runner_freed_invalidates_held_outputs() -> None:
    import gc

    rec = _Recorder()
    r = CudaGraphRunner(torch.cos, [torch.zeros(3)], name="cosine", capture=_fake_capture, invalidate=rec, warmup=0)
    y = r(torch.randn(3))
    del r
    gc.collect()
    assert rec.cdatas == [y.untyped_storage()._cdata] and "released" in rec.messages[0]


def test_runner_clones_outputs_without_invalidation_api() -> None:
    w, b = torch.randn(8, 8), torch.randn(8)
    r = CudaGraphRunner(_mlp, [torch.randn(4, 8), w, b], in_place=[False, True, True], capture=_fake_capture,
                        invalidate=None, warmup=0)
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    h1, _ = r(x1, w, b)
    h2, _ = r(x2, w, b)
    torch.testing.assert_close(h1, _mlp(x1, w, b)[0])  # the held output kept its values
    torch.testing.assert_close(h2, _mlp(x2, w, b)[0])


def test_runner_moved_in_place_input_is_copied_and_recaptured(caplog: Any) -> None:
    w, b = torch.randn(8, 8), torch.randn(8)
    r = CudaGraphRunner(_mlp, [torch.randn(4, 8), w, b], in_place=[False, True, True], capture=_fake_capture,
                        invalidate=_Recorder(), warmup=0)
    x = torch.randn(4, 8)
    torch.testing.assert_close(r(x, w, b), _mlp(x, w, b))
    w2 = torch.randn(8, 8)  # the "parameter" was re-assigned
    with caplog.at_level(logging.INFO, logger="pyjit.perf_hints"):
        torch.testing.assert_close(r(x, w2, b), _mlp(x, w2, b))
    assert r.in_place == [False, False, True] and r.captures == 2
    assert any("moved in memory" in rec.message for rec in caplog.records)
    w3 = torch.randn(8, 8)  # copied now: a new weight is just copied in, no new capture
    torch.testing.assert_close(r(x, w3, b), _mlp(x, w3, b))
    assert r.captures == 2
    b.data = torch.randn(8)  # same object, new memory: detected by address, not identity
    torch.testing.assert_close(r(x, w3, b), _mlp(x, w3, b))
    assert r.in_place == [False, False, False] and r.captures == 3


def test_runner_inference_mode_inputs() -> None:
    with torch.inference_mode():
        w, b = torch.randn(8, 8), torch.randn(8)
        r = CudaGraphRunner(_mlp, [torch.randn(4, 8), w, b], in_place=[False, True, True], capture=_fake_capture,
                            invalidate=_Recorder())
        for _ in range(5):
            x = torch.randn(4, 8)
            torch.testing.assert_close(r(x, w, b), _mlp(x, w, b))
        assert r.captures == 1 and r.disabled is None


def test_runner_disabled_on_mutation_seen_in_warmup(caplog: Any) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    r = CudaGraphRunner(bump, [torch.zeros(3)], capture=_fake_capture, invalidate=_Recorder())
    x = torch.zeros(3)
    with caplog.at_level(logging.INFO, logger="pyjit.perf_hints"):
        for i in range(1, 6):
            torch.testing.assert_close(r(x), torch.full((3,), 2.0 * i))
    assert r.disabled and "in place" in r.disabled and r.captures == 0
    torch.testing.assert_close(x, torch.full((3,), 5.0))
    assert any("CUDA graphs not used" in rec.message for rec in caplog.records)


def test_runner_disabled_when_output_aliases_input() -> None:
    def passthrough(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x + 1

    r = CudaGraphRunner(passthrough, [torch.zeros(3)], capture=_fake_capture, invalidate=_Recorder(), warmup=0)
    x = torch.randn(3)
    out = r(x)
    assert out[0] is x and r.disabled == "an output aliases a graph input"


def test_runner_failed_capture_runs_normally() -> None:
    def boom(fn: Callable[..., Any], static: list[torch.Tensor]) -> tuple[Any, Any]:
        raise RuntimeError("operation not permitted when stream is capturing")

    r = CudaGraphRunner(torch.sin, [torch.zeros(3)], capture=boom, invalidate=_Recorder(), warmup=0)
    x = torch.randn(3)
    torch.testing.assert_close(r(x), torch.sin(x))
    assert r.disabled and r.disabled.startswith("capture failed")


def test_runner_skips_training_calls() -> None:
    w = torch.randn(4, 4, requires_grad=True)
    r = CudaGraphRunner(torch.mm, [torch.randn(2, 4), w], capture=_fake_capture, invalidate=_Recorder(), warmup=0)
    x = torch.randn(2, 4)
    y = r(x, w)
    y.sum().backward()  # ran normally: autograd recorded
    assert w.grad is not None and r.captures == 0


# ----------------------------------------------------------------------------- GPU

def _mlp_module(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).to("cuda", dtype).eval()


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) * y + x.exp().mul(0.5)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 0.125, dim=-1)


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("workload", ["mlp", "pointwise", "softmax"])
def test_gpu_replay_matches_no_replay_over_100_calls(workload: str, dtype: torch.dtype) -> None:
    if workload == "mlp":
        m = _mlp_module(dtype)
        fn: Callable[..., Any] = m
        make = lambda: (torch.randn(8, 32, device="cuda", dtype=dtype),)  # noqa: E731
    elif workload == "pointwise":
        fn = _pointwise
        make = lambda: (torch.randn(8, 128, device="cuda", dtype=dtype),  # noqa: E731
                        torch.randn(8, 128, device="cuda", dtype=dtype))
    else:
        fn = _softmax
        make = lambda: (torch.randn(16, 256, device="cuda", dtype=dtype),)  # noqa: E731
    replayed = pyjit.jit(fn, mode="reduce-overhead")
    plain = pyjit.jit(fn)
    # Pure Triton graphs are bit-identical with and without replay; cuBLAS may pick another
    # algorithm inside a capture, so the MLP gets a last-bit tolerance.
    exact = {"atol": 0, "rtol": 0} if workload != "mlp" else _tol(dtype, tight=True)
    with torch.no_grad():
        for i in range(100):
            args = make()
            got = replayed(*args)
            runners = [r for r in cudagraphs.metrics["runners"] if r.graph is not None]
            if i >= cudagraphs.WARMUP_CALLS:
                assert len(runners) == 1, cudagraphs.metrics
                # The same entry's compiled graph run without replay, on this call's inputs (it
                # returns the graph's flat outputs; the frame unpacks them into `got`).
                no_replay = runners[0].fn(*runners[0].static_args)
                torch.testing.assert_close(_leaves(got), _leaves(no_replay), **exact)
            torch.testing.assert_close(got, plain(*args), **_tol(dtype, tight=True))
            torch.testing.assert_close(got, fn(*args), **_tol(dtype))
    assert cudagraphs.metrics["captures"] == 1, cudagraphs.metrics
    assert cudagraphs.metrics["replays"] == 100 - cudagraphs.WARMUP_CALLS


def _tol(dtype: torch.dtype, tight: bool = False) -> dict[str, float]:
    if dtype == torch.bfloat16:
        return {"atol": 1e-2, "rtol": 1e-2} if tight else {"atol": 3e-2, "rtol": 3e-2}
    return {"atol": 1e-5, "rtol": 1e-5} if tight else {"atol": 1e-4, "rtol": 1e-4}


@cuda
def test_gpu_held_output_is_detected() -> None:
    g = pyjit.jit(_softmax, mode="reduce-overhead")
    xs = [torch.randn(16, 256, device="cuda") for _ in range(cudagraphs.WARMUP_CALLS + 3)]
    for x in xs[:cudagraphs.WARMUP_CALLS]:
        g(x)
    y1 = g(xs[-3])
    first = y1.clone()
    y2 = g(xs[-2])
    if cudagraphs._default_invalidator() is None:  # this torch cannot invalidate: outputs are clones
        torch.testing.assert_close(y1, first)
    else:
        with pytest.raises(RuntimeError, match="overwritten by a later call"):
            y1 + 1
    torch.testing.assert_close(y2, _softmax(xs[-2]))
    y = None
    for x in xs:  # the usual loop: the previous output is never read again
        y = g(x)
    torch.testing.assert_close(y, _softmax(xs[-1]))


@cuda
def test_gpu_not_captured_with_reason(caplog: Any) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    def to_cpu(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).cpu() + 1

    def pw(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 3

    with caplog.at_level(logging.INFO, logger="pyjit.perf_hints"), torch.no_grad():
        x = torch.zeros(8, device="cuda")
        g = pyjit.jit(bump, mode="reduce-overhead")
        for i in range(1, 5):
            torch.testing.assert_close(g(x), torch.full((8,), 2.0 * i, device="cuda"))
        torch.testing.assert_close(x, torch.full((8,), 4.0, device="cuda"))
        h = pyjit.jit(to_cpu, mode="reduce-overhead")
        # pyjit's backend may fail on a graph with .cpu() (a Triton kernel given a CPU tensor):
        # that is its own fallback path, not this test's subject.
        with cfg.patch(raise_on_internal_error=False):
            for _ in range(4):
                a = torch.randn(8, device="cuda")
                torch.testing.assert_close(h(a), to_cpu(a))
        d = pyjit.jit(pw, mode="reduce-overhead", dynamic=True)
        for n in (8, 9, 10, 11):
            a = torch.randn(n, device="cuda")
            torch.testing.assert_close(d(a), pw(a))
    text = "\n".join(r.message for r in caplog.records if "CUDA graphs not used" in r.message)
    assert "in place" in text
    assert "cpu tensor" in text or "calls cpu" in text
    assert "dynamic shapes" in text
