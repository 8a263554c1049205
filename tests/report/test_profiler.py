"""pyjit's ranges in torch.profiler traces (pyjit/report/profiler.py): the guard lookup, each
compiled graph's run (``pyjit: <frame> graph <n>``), the backward of a training graph and the
compile phases appear in an exported chrome trace; with no profiler active no range is made."""
from __future__ import annotations

import json

import pytest
import torch
import torch.autograd.profiler as autograd_profiler
from torch.profiler import ProfilerActivity, profile

import pyjit


@pytest.fixture(autouse=True)
def _clean():
    pyjit.reset()
    with pyjit.config.patch(warm_start=False, raise_on_internal_error=True):
        yield
    pyjit.reset()


def _names(prof, path) -> set[str]:
    prof.export_chrome_trace(str(path))
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    return {e.get("name", "") for e in trace["traceEvents"]}


def scale_shift(x):
    return x * 2 + 1


def test_graph_and_guard_ranges_in_chrome_trace(tmp_path):
    jf = pyjit.jit(scale_shift)
    x = torch.randn(8)
    with pyjit.config.patch(backend_disk_cache=False), profile(activities=[ProfilerActivity.CPU]) as prof:
        out = jf(x)  # compiled under the profiler: compile ranges too
        out2 = jf(x)  # a cache hit: the guard lookup, then the graph
    torch.testing.assert_close(out, scale_shift(x))
    torch.testing.assert_close(out2, scale_shift(x))
    names = _names(prof, tmp_path / "trace.json")
    assert "pyjit: scale_shift graph 0" in names
    assert "pyjit: guards scale_shift" in names
    assert "pyjit: compile frame scale_shift" in names
    assert any(n.startswith("pyjit: compile lowering") for n in names)


def test_graph_range_with_a_user_backend(tmp_path):
    jf = pyjit.jit(scale_shift, backend="eager")
    x = torch.randn(8)
    jf(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        jf(x)
    assert "pyjit: scale_shift graph 0" in _names(prof, tmp_path / "trace.json")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu().sum()


def test_backward_range(tmp_path):
    net = _Net()
    step = pyjit.jit(lambda m, x: m(x))
    x = torch.randn(5, 4)
    step(net, x).backward()  # compiled outside the profiler
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = step(net, x)
        loss.backward()
    names = _names(prof, tmp_path / "trace.json")
    assert "pyjit: <lambda> graph 0" in names
    assert "pyjit: <lambda> graph 0 backward" in names


def test_no_range_without_a_profiler(monkeypatch):
    jf = pyjit.jit(scale_shift)
    x = torch.randn(8)
    jf(x)

    def fail(*args, **kwargs):
        raise AssertionError("record_function called with no profiler active")

    assert not autograd_profiler._is_profiler_enabled
    monkeypatch.setattr(autograd_profiler, "record_function", fail)
    torch.testing.assert_close(jf(x), scale_shift(x))  # hit: guards and graph, no range


def test_range_names_keep_the_chrome_trace_valid(tmp_path):
    # torch writes range names into the Chrome trace unescaped: a double quote (a graph label
    # quoting its source file) would make the file invalid JSON.
    from pyjit.report import profiler

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        handle = profiler.enter('pyjit: graph from File "model.py", line 3')
        torch.ones(2).sum()
        profiler.exit(handle)
        with profiler.record('pyjit: piece "0"'):
            torch.ones(2).sum()
    names = _names(prof, tmp_path / "trace.json")  # json.load succeeds
    assert "pyjit: graph from File 'model.py', line 3" in names and "pyjit: piece '0'" in names
