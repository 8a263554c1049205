"""The convolution warm-up thread (runtime/conv_warmup.py): which calls it runs, that it never
changes results, and that it stays out of autotuning's measurements.

It serves CUDA only; these tests let it serve the CPU too (``device_types``), which runs the
same queue, thread and aten calls on oneDNN."""
from __future__ import annotations

import copy
import time
from typing import Iterator

import pytest
import torch

import pyjit
from pyjit import config as cfg
from pyjit.runtime import conv_warmup
from pyjit.runtime.conv_warmup import TensorSpec


@pytest.fixture
def warm_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[None]:
    conv_warmup.reset()
    pyjit.reset()  # no frame entries (nor sizes seen) from other tests: each compiles statically
    monkeypatch.setattr(conv_warmup, "device_types", frozenset({"cpu"}))
    with cfg.patch(cache_dir=str(tmp_path / "cache"), conv_warmup=True):
        yield
    conv_warmup.reset()


def _spec(*size: int, channels_last: bool = False) -> TensorSpec:
    t = torch.empty(size, device="meta")
    if channels_last:
        t = t.to(memory_format=torch.channels_last)
    return TensorSpec(tuple(t.shape), t.stride(), t.dtype, torch.device("cpu"))


def _conv_args(batch: int = 2, cin: int = 3, cout: int = 5, hw: int = 9) -> tuple:
    return (_spec(batch, cin, hw, hw), _spec(cout, cin, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


def test_training_a_conv_net_warms_its_convolutions_and_matches_eager(warm_cpu: None) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12)
    out = pyjit.jit(model)(x)
    out.square().sum().backward()
    expected = reference(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert conv_warmup.drain(timeout=60)
    # Three forward convolutions and their three backward calls, each once: the lowering's
    # requests for the backward repeat the partition's (same layouts) and are not run again.
    assert conv_warmup.counters["requested"] == 6, dict(conv_warmup.counters)
    assert conv_warmup.counters["ran"] == 6
    assert conv_warmup.counters["failed"] == 0


def test_inference_graph_queues_its_convolutions_before_lowering(warm_cpu: None) -> None:
    """An inference graph's convolutions are queued from its aten graph, before it is lowered;
    the lowering's own requests (same layouts) add nothing. Results equal eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 6, 3, padding=1, groups=3), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 6, 3, padding=1, groups=3)).eval()
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        out = pyjit.jit(model)(x)
        torch.testing.assert_close(out, model(x))
    assert conv_warmup.drain(timeout=60)
    # Three distinct calls: the first two convolutions' biases moved into their epilogues, the
    # last one's (the graph's output) stays; the lowering's three requests were all seen.
    assert conv_warmup.counters["requested"] == 3, dict(conv_warmup.counters)
    assert conv_warmup.counters["skipped"] == 3
    assert conv_warmup.counters["ran"] == 3


def test_a_call_runs_once_per_process(warm_cpu: None, caplog: pytest.LogCaptureFixture) -> None:
    args = _conv_args(cout=6)
    assert conv_warmup.request("convolution", args)
    assert not conv_warmup.request("convolution", args)
    assert conv_warmup.request("convolution", _conv_args(cout=7))  # another shape is another plan
    with caplog.at_level("INFO", logger="pyjit.compile_times"):
        assert conv_warmup.drain(timeout=30)
    assert conv_warmup.counters["ran"] == 2
    assert "convolution warm-up: queue done, 2 call(s) run" in caplog.text


def test_layout_is_part_of_the_call(warm_cpu: None) -> None:
    nchw = (_spec(2, 4, 8, 8), _spec(4, 4, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    nhwc = (_spec(2, 4, 8, 8, channels_last=True), _spec(4, 4, 3, 3, channels_last=True), None,
            [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert conv_warmup.request("convolution", nchw)
    assert conv_warmup.request("convolution", nhwc)


def test_refused_when_switched_off_or_not_a_convolution(warm_cpu: None) -> None:
    with cfg.patch(conv_warmup=False):
        assert not conv_warmup.request("convolution", _conv_args(cout=9))
    assert not conv_warmup.request("mm", (_spec(2, 2), _spec(2, 2)))
    assert conv_warmup.counters["requested"] == 0


def test_cuda_only_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    conv_warmup.reset()
    assert conv_warmup.device_types == frozenset({"cuda"})
    assert not conv_warmup.request("convolution", _conv_args(cout=11))  # CPU specs


def test_a_failing_call_is_logged_and_skipped(warm_cpu: None, caplog: pytest.LogCaptureFixture) -> None:
    bad = (_spec(2, 3, 8, 8), _spec(5, 4, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)  # 3 vs 4 channels
    with caplog.at_level("INFO", logger="pyjit.compile_times"):
        assert conv_warmup.request("convolution", bad)
        assert conv_warmup.drain(timeout=30)
    assert conv_warmup.counters["failed"] == 1
    assert "convolution warm-up skipped one convolution call" in caplog.text


def test_no_call_starts_while_a_timing_runs(warm_cpu: None) -> None:
    with conv_warmup.active(), conv_warmup.timing():
        assert conv_warmup.request("convolution", _conv_args(cout=13))
        time.sleep(0.3)
        assert conv_warmup.counters["ran"] == 0
    assert conv_warmup.drain(timeout=30)
    assert conv_warmup.counters["ran"] == 1


def test_nothing_runs_outside_pyjits_regions(warm_cpu: None) -> None:
    """User code never runs beside a warm-up call: the queue waits for the next compile."""
    assert conv_warmup.request("convolution", _conv_args(cout=15))
    time.sleep(0.3)
    assert conv_warmup.counters["ran"] == 0
    with conv_warmup.active():
        assert conv_warmup.request("convolution", _conv_args(cout=17))
        deadline = time.monotonic() + 30
        while conv_warmup.counters["ran"] + conv_warmup.counters["failed"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert conv_warmup.counters["ran"] == 2
    assert conv_warmup._running == 0  # leaving the region waited for the call in flight


def test_symbolic_sizes_are_not_warmed() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC, DimDynamic.STATIC,
                                                  DimDynamic.STATIC])
    fake = mode.from_tensor(torch.empty(2, 3, 8, 8), symbolic_context=ctx)
    assert TensorSpec.of(fake) is None


def test_a_graph_compiling_now_goes_ahead_of_earlier_requests(warm_cpu: None) -> None:
    """A training graph's backward is queued at partition; the forward's convolutions, queued
    when it compiles, run first (its first call comes first), in graph order."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 19, 3), torch.nn.Conv2d(19, 21, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    assert conv_warmup.request("convolution_backward", (_spec(2, 5, 7, 7), _spec(2, 3, 9, 9), _spec(5, 3, 3, 3),
                                                        None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                                        [True, True, False]))
    gm = torch.fx.symbolic_trace(Net())
    from pyjit.backend.compile_fx import trace_to_aten
    aten_gm, _ = trace_to_aten(gm, [torch.randn(1, 3, 9, 9)])
    assert conv_warmup.request_graph(aten_gm, urgent=True) == 2
    queued = [(op, args[1].size[0]) for op, args in conv_warmup._queue]
    assert queued == [("convolution", 19), ("convolution", 21), ("convolution_backward", 2)]
    assert conv_warmup.drain(timeout=60)
    assert conv_warmup.counters["ran"] == 3


def test_several_threads_share_the_queue(warm_cpu: None) -> None:
    with cfg.patch(conv_warmup_threads=3):
        for cout in (23, 25, 27, 29, 31):
            assert conv_warmup.request("convolution", _conv_args(cout=cout))
        assert conv_warmup.drain(timeout=60)
    assert conv_warmup.counters["ran"] == 5
    assert 1 <= len(conv_warmup._threads) <= 3


def test_backward_calls_are_replayed_inside_an_autograd_backward(warm_cpu: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A backward convolution runs on a warm-up thread (cuDNN's run-time compiled kernels), then
    again inside an autograd backward (on CUDA: autograd's worker thread for the device, whose
    per-thread plan cache the compiled backward uses); a forward one runs once."""
    seen: list[tuple[str, bool]] = []
    real_run = conv_warmup._run

    def run(op: str, args: tuple, replay: bool = False) -> bool:
        seen.append((op, torch._C._current_autograd_node() is not None))
        return real_run(op, args, replay)

    monkeypatch.setattr(conv_warmup, "_run", run)
    with conv_warmup.active():
        assert conv_warmup.request("convolution", _conv_args(cout=33))
        assert conv_warmup.request("convolution_backward", (_spec(2, 7, 7, 7), _spec(2, 3, 9, 9), _spec(7, 3, 3, 3),
                                                            None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                                            [True, True, False]))
        assert conv_warmup.drain(timeout=60)
    assert seen == [("convolution", False), ("convolution_backward", False), ("convolution_backward", True)]
    assert conv_warmup.counters["ran"] == 2 and conv_warmup.counters["replayed"] == 1


def test_a_replay_whose_region_ended_is_dropped(warm_cpu: None) -> None:
    """Autograd's worker thread reached the replay after pyjit's region ended: nothing runs."""
    args = (_spec(2, 7, 7, 7), _spec(2, 3, 9, 9), _spec(7, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
            [True, True, False])
    conv_warmup._run_on_backward_thread([("convolution_backward", args)] * 2)  # outside every region
    assert conv_warmup.counters["dropped"] == 2 and conv_warmup.counters["replayed"] == 0
