"""The compile trace (pyjit/report/events.py): a traced run of a transformers model writes one JSONL
file whose every line validates against pyjit/report/schema.json, and which records the graph
break and the recompile at the program's file:line, the graphs with their guards, the cache
misses with the differing key field, the kernels and every compile phase."""
from __future__ import annotations

import glob
import json
import os

import pytest

import pyjit
from pyjit.report import events

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = os.path.join(os.path.dirname(pyjit.__file__), "report", "schema.json")


def _events(trace_dir: str) -> list[dict]:
    files = glob.glob(os.path.join(trace_dir, "*.jsonl"))
    assert len(files) == 1, files  # one file per process
    with open(files[0], encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_trace_validates_against_schema(traced_run):
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    evs = _events(traced_run.trace_dir)
    problems = [f"line {i}: {e.message}" for i, ev in enumerate(evs, 1) for e in validator.iter_errors(ev)]
    assert not problems, problems[:10]
    assert evs[0]["event"] == "process"


def test_schema_rejects_a_malformed_event():
    with open(SCHEMA, encoding="utf-8") as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    bad = {"v": 1, "t": 0.0, "pid": 1, "rank": 0, "event": "graph_break", "kind": "print"}  # no file/line...
    assert list(validator.iter_errors(bad))
    bad_span = {"v": 1, "t": 0.0, "pid": 1, "rank": 0, "event": "span", "phase": "nap", "name": "", "start": 0, "dur": 1}
    assert list(validator.iter_errors(bad_span))


def test_trace_records_break_recompile_graphs_and_phases(traced_run):
    evs = _events(traced_run.trace_dir)
    kinds = {e["event"] for e in evs}
    assert {"process", "frame", "graph", "graph_break", "recompile", "cache", "kernels", "span"} <= kinds
    breaks = [e for e in evs if e["event"] == "graph_break"]
    assert breaks and all(b["kind"] == "print" and b["file"] == traced_run.program
                          and b["line"] == traced_run.break_line for b in breaks)
    recompiles = [e for e in evs if e["event"] == "recompile" and e["function"] == "run"]
    assert len(recompiles) == 1
    rec = recompiles[0]
    assert rec["file"] == traced_run.program and rec["line"] == traced_run.run_line
    assert "L['ids']" in rec["failures"][0]["guard"]  # the input whose shape changed
    frames = {e["id"]: e for e in evs if e["event"] == "frame"}
    # every event made while compiling a frame links to a frame of the file
    assert all(e["frame"] in frames for e in evs if e.get("frame") and e["event"] != "frame")
    run_frames = [f for f in frames.values() if f["name"] == "run"]
    assert len(run_frames) == 2 and all(f["status"] == "compiled" for f in run_frames)
    assert run_frames[0]["stack"][-1] == {"file": traced_run.program, "line": traced_run.run_line, "function": "run"}
    graphs = [e for e in evs if e["event"] == "graph"]
    assert any(g["function"] == "run" and "def forward" in g["code"] and g["nodes"] > 10 and g["guards"]
               for g in graphs)
    phases = {e["phase"] for e in evs if e["event"] == "span"}
    assert {"trace", "backend", "aten", "lowering", "codegen", "kernel_compile", "load"} <= phases
    misses = [e for e in evs if e["event"] == "cache" and e["result"] == "miss"]
    assert any("input metadata" in m["fields"] for m in misses)  # the recompile's graph: new input shapes
    kernels = [k for e in evs if e["event"] == "kernels" for k in e["kernels"]]
    assert kernels and all(k["name"] for k in kernels)


def test_trace_is_off_without_a_directory(tmp_path):
    with pyjit.config.patch(trace_dir=None):
        events.emit("span", phase="trace", name="x", start=0.0, dur=0.0)
        with events.frame_scope(test_trace_is_off_without_a_directory.__code__) as record:
            assert record.id == ""  # no id drawn, no stack walked
    assert not list(tmp_path.iterdir())


def test_trace_written_in_process_via_config(tmp_path):
    import torch

    def f(x):
        return x.cos() * 2

    pyjit.reset()
    try:
        with pyjit.config.patch(trace_dir=str(tmp_path), warm_start=False):
            jf = pyjit.jit(f)
            x = torch.randn(3)
            torch.testing.assert_close(jf(x), f(x))
    finally:
        events.close()
        pyjit.reset()
    evs = _events(str(tmp_path))
    assert [e["name"] for e in evs if e["event"] == "frame"] == ["f"]


DIST_CHILD = '''
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import pyjit


def worker(rank, store):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    f = pyjit.jit(lambda x: x * (rank + 2), backend="eager")
    assert torch.equal(f(torch.ones(3)), torch.ones(3) * (rank + 2))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2)
    print("DIST OK")
'''


def test_one_file_per_rank_under_torch_distributed(tmp_path):
    import subprocess
    import sys

    from .conftest import ROOT

    script = tmp_path / "dist_child.py"
    script.write_text(DIST_CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYJIT_", "RANK"))}
    env.update(PYJIT_TRACE=str(tmp_path / "trace"), PYJIT_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0 and "DIST OK" in proc.stdout, proc.stderr[-3000:]
    files = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "trace" / "*.jsonl")))
    assert [f.split(".")[1] for f in files] == ["rank0", "rank1"], files
    for name in files:
        rank = int(name.split(".")[1].removeprefix("rank"))
        with open(tmp_path / "trace" / name, encoding="utf-8") as f:
            evs = [json.loads(line) for line in f]
        assert {e["rank"] for e in evs} == {rank}
        assert any(e["event"] == "frame" and e["status"] == "compiled" for e in evs)
