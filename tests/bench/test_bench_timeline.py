"""bench/timeline.py: a torch.profiler Chrome trace drawn as lanes (pyjit's host ranges, one
lane per GPU stream named by what ran there)."""
from __future__ import annotations

import json

from bench import timeline


def _trace() -> dict:
    return {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "pyjit: forward graph 0 piece 1", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "user_annotation", "name": "pyjit: forward graph 0 piece 1 backward", "ts": 300.0, "dur": 40.0},
        {"ph": "X", "cat": "user_annotation", "name": "pyjit: compile lowering x", "ts": 0.0, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 120.0, "dur": 5.0},
        {"ph": "X", "cat": "kernel", "name": "pyjit_fused_add_0", "ts": 130.0, "dur": 20.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "ts": 340.0, "dur": 90.0,
         "args": {"stream": 23}},
        {"ph": "i", "name": "marker", "ts": 1.0},
    ]}


def test_lanes_and_picture(tmp_path) -> None:
    lanes = timeline.lanes_of(_trace())
    assert lanes.names == [timeline.PIECE_LANE, "stream 23: NCCL", "stream 7: compute"]
    host = lanes.spans[timeline.PIECE_LANE]
    assert [kind for _, _, kind in host] == ["forward", "backward"]  # compile ranges are not drawn
    assert host[0][0] == 0.0 and abs(host[1][0] - 0.2) < 1e-9  # ms from the first drawn event
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace()))
    out = tmp_path / "step.png"
    assert timeline.main([str(path), str(out), "--title", "one step"]) == 0
    assert out.stat().st_size > 1000


def test_empty_trace(tmp_path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": []}))
    assert timeline.main([str(path), str(tmp_path / "x.png")]) == 1
