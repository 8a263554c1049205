"""The DDP split pass on its own (no processes): bucket plan, subgraph contents, and the split
graph computing what the captured graph computes, with only tensors between subgraphs."""
from __future__ import annotations

import types
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not built", allow_module_level=True)

from pyjit.distributed import ddp as pyjit_ddp  # noqa: E402


class SplitWeights(nn.Module):
    """A parameter split into a tuple (a tuple-valued node that uses a parameter), a tied weight
    used first and last, and plain layers."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Parameter(torch.randn(16, 16))
        self.fc1 = nn.Linear(16, 16)
        self.packed = nn.Parameter(torch.randn(32, 16))
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Functional calls: the parameters appear in the traced graph, as in pyjit's graphs.
        h = x @ self.emb
        h = torch.relu(F.linear(h, self.fc1.weight, self.fc1.bias))
        a, b = self.packed.split(16)
        h = torch.tanh(h @ a.t()) + h @ b.t()
        h = F.linear(h, self.fc2.weight, self.fc2.bias)
        return h @ self.emb.t()


def fake_ddp(module: nn.Module, cap_bytes: int, ignored: tuple[str, ...] = ()) -> Any:
    return types.SimpleNamespace(module=module, parameters_to_ignore=set(ignored), bucket_bytes_cap=cap_bytes,
                                 bucket_bytes_cap_list=[], _bucket_config=None)


def test_split_plan_and_results() -> None:
    torch.manual_seed(0)
    model = SplitWeights()
    gm = torch.fx.symbolic_trace(model)  # parameters are get_attr nodes here
    x = torch.randn(4, 16)
    ddp = fake_ddp(model, cap_bytes=16 * 16 * 4 + 1)
    plan, assign, ready = pyjit_ddp.plan_split(gm, [x], ddp)
    # Ready order: fc2 first; emb (used first and last) last.
    names = plan.ready_order
    assert names[:2] == ["fc2.bias", "fc2.weight"] and names[-1] == "emb" and len(names) == len(set(names))
    assert plan.num_subgraphs >= 3
    pieces: list[torch.fx.GraphModule] = []

    def run_captured(piece: torch.fx.GraphModule, example: list[Any]) -> Any:
        assert all(isinstance(v, torch.Tensor) for v in example), "a non-tensor crossed between subgraphs"
        pieces.append(piece)
        return piece.forward

    split = pyjit_ddp.split_graph(gm, assign, plan.num_subgraphs, ready, run_captured)
    torch.testing.assert_close(split(x), gm(x))
    assert len(pieces) == plan.num_subgraphs
    # Every piece's parameters come in the planned ready order, after its other inputs.
    for piece in pieces:
        order = [p.name for p in piece.graph.nodes if p.op == "placeholder"]
        params = [o for o in order if o in {n.name for n in ready}]
        assert order[len(order) - len(params):] == params


def test_pieces_are_named_in_profiler_traces(tmp_path: Any) -> None:
    import json

    from torch.profiler import ProfilerActivity, profile

    model = SplitWeights()
    gm = torch.fx.symbolic_trace(model)
    gm.meta["pyjit_range_name"] = "pyjit: forward graph 0"  # as the frontend names a frame's graph
    x = torch.randn(4, 16)
    plan, assign, ready = pyjit_ddp.plan_split(gm, [x], fake_ddp(model, cap_bytes=16 * 16 * 4 + 1))
    split = pyjit_ddp.split_graph(gm, assign, plan.num_subgraphs, ready, lambda piece, example: piece.forward)
    split(x)  # compiled outside the profiler
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        split(x)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    with open(tmp_path / "trace.json", encoding="utf-8") as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert {f"pyjit: forward graph 0 piece {i}" for i in range(plan.num_subgraphs)} <= names


def test_pieces_of_a_guarded_graph_skip_the_input_check() -> None:
    """A graph whose inputs the frame's guards pin (parameters as placeholders, as pyjit's
    frontend passes them) gives pieces that are marked guarded too: their inputs are the
    graph's or earlier pieces' outputs. A graph reading module state off itself does not."""
    from pyjit.backend.compile_fx import INPUTS_GUARDED

    model = SplitWeights()
    params = dict(model.named_parameters())

    def functional(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(params, ps)), (x,))

    x = torch.randn(4, 16)
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(functional)(x, *params.values())
    gm.meta[INPUTS_GUARDED] = True
    plan, assign, ready = pyjit_ddp.plan_split(gm, [x, *params.values()], fake_ddp(model, cap_bytes=16 * 16 * 4 + 1))
    pieces: list[Any] = []
    split = pyjit_ddp.split_graph(gm, assign, plan.num_subgraphs, ready,
                                  lambda piece, example: pieces.append(piece) or piece.forward)
    torch.testing.assert_close(split(x, *params.values()), functional(x, *params.values()))
    assert len(pieces) == plan.num_subgraphs >= 2 and all(p.meta.get(INPUTS_GUARDED) for p in pieces)

    traced = torch.fx.symbolic_trace(model)  # parameters read with get_attr
    traced.meta[INPUTS_GUARDED] = True
    plan, assign, ready = pyjit_ddp.plan_split(traced, [x], fake_ddp(model, cap_bytes=16 * 16 * 4 + 1))
    pieces.clear()
    pyjit_ddp.split_graph(traced, assign, plan.num_subgraphs, ready,
                          lambda piece, example: pieces.append(piece) or piece.forward)(x)
    assert pieces and not any(p.meta.get(INPUTS_GUARDED) for p in pieces)


def test_ignored_parameters_are_not_bucketed() -> None:
    model = SplitWeights()
    gm = torch.fx.symbolic_trace(model)
    plan, _, _ = pyjit_ddp.plan_split(gm, [torch.randn(4, 16)], fake_ddp(model, 1 << 20, ("packed", "fc1.weight")))
    names = {n for b in plan.buckets for n in b.params}
    assert "packed" not in names and "fc1.weight" not in names and "fc1.bias" in names
    assert plan.num_subgraphs == 1  # one bucket (1 MiB cap): nothing to split


def test_bucket_limits_follow_ddp() -> None:
    ddp = types.SimpleNamespace(bucket_bytes_cap=25 << 20, bucket_bytes_cap_list=[],
                                _bucket_config=types.SimpleNamespace(first_bucket_bytes_cap=1 << 20))
    assert pyjit_ddp.bucket_limits(ddp) == [1 << 20, 25 << 20]
    ddp.bucket_bytes_cap_list = [2 << 20, 4 << 20]
    assert pyjit_ddp.bucket_limits(ddp) == [2 << 20, 4 << 20]


class AutocastInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = self.layers[2](torch.relu(self.layers[1](x)))
        return self.layers[3](x.float())


def test_state_regions_are_not_cut() -> None:
    """An autocast region inside the module (its enter returns a context object its exit takes,
    and its nodes were traced under its state) stays in one subgraph."""
    import pyjit

    captured: list[Any] = []

    def record(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
        captured.append((gm, list(example)))
        return gm.forward

    model = AutocastInside()
    x = torch.randn(4, 16)
    pyjit.jit(model, backend=record)(x)
    gm, example = captured[0]
    plan, assign, ready = pyjit_ddp.plan_split(gm, example, fake_ddp(model, cap_bytes=16 * 16 * 4 + 1))
    region = [n for n in gm.graph.nodes if pyjit_ddp._state_delta(n) != 0]
    assert len(region) == 2, gm.code
    assert len({assign[n] for n in region}) == 1
    assert plan.num_subgraphs == 3  # layers 1 and 2 share one: they are in the region

    def run_captured(piece: torch.fx.GraphModule, example: list[Any]) -> Any:
        assert all(isinstance(v, torch.Tensor) for v in example), "a non-tensor crossed between subgraphs"
        return piece.forward

    split = pyjit_ddp.split_graph(gm, assign, plan.num_subgraphs, ready, run_captured)
    torch.testing.assert_close(split(*example), gm(*example))
    pyjit.reset()
