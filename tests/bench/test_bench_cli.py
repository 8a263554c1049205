"""End-to-end runs of the harness: it runs, its JSON has the documented schema, outputs land in --out."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

from bench import schema
from bench.cli import main
from bench.compare import compare_docs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, *args: str) -> dict:
    code = main([*args, "--out", str(tmp_path), "--name", "t", "--quiet", "--samples", "3"])
    assert code == 0
    with open(tmp_path / "t.json") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def kernels_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernels")
    return _run(out, "--suite", "kernels", "--workloads", "softmax,mlp", "--backends", "eager,wrong", "--csv",
                "--no-external"), out


def test_json_matches_schema_and_wrong_backend_fails(kernels_doc):
    doc, out = kernels_doc
    assert schema.validate(doc) == []
    rows = {(r["workload"], r["backend"]): r for r in doc["results"]}
    assert set(rows) == {("softmax", "eager"), ("softmax", "wrong"), ("mlp", "eager"), ("mlp", "wrong")}
    for wl in ("softmax", "mlp"):
        assert rows[(wl, "eager")]["status"] == "OK"
        assert rows[(wl, "wrong")]["status"] == "FAIL"
        assert "timing" not in rows[(wl, "wrong")]
    meta = doc["metadata"]
    expected_device = "cuda" if torch.cuda.is_available() else "cpu"
    assert meta["torch"] and meta["python"] and meta["device"]["type"] == expected_device
    assert meta["copy_bandwidth"]["gbps"] > 0
    assert os.path.exists(out / "t.csv")


def test_plots_are_png_files(kernels_doc, tmp_path):
    pytest.importorskip("matplotlib")
    from bench.plots import write_plots

    doc, out = kernels_doc
    # eager vs a FAIL backend has no speed-up to plot: no PNG is claimed that does not exist
    for name in doc["plots"]:
        assert os.path.getsize(out / name) > 0
    doc = json.loads(json.dumps(doc))
    fast = dict(next(r for r in doc["results"] if r["backend"] == "eager"), backend="fast", speedup_vs_eager=2.0)
    compiled = {"suite": "compile", "workload": "softmax", "backend": "fast", "status": "OK", "reason": None,
                "params": {}, "compile": {"cold_s": 2.0, "warm_s": 0.5}}
    doc["results"] += [fast, compiled]
    written, why = write_plots(doc, str(tmp_path), "p")
    assert why is None and sorted(written) == ["p_compile.png", "p_speedup.png"]
    for name in written:
        with open(tmp_path / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_schema_validator_rejects_bad_documents(kernels_doc):
    doc, _ = kernels_doc
    bad = json.loads(json.dumps(doc))
    bad["results"][0]["status"] = "MAYBE"
    del bad["metadata"]["git"]
    fail_row = next(r for r in bad["results"] if r["status"] == "FAIL")
    fail_row["timing"] = bad["results"][0].get("timing") or {}
    problems = schema.validate(bad)
    assert any("MAYBE" in p for p in problems)
    assert any("git" in p for p in problems)
    assert any("never be timed" in p for p in problems)


def test_compare_flags_only_changes_beyond_noise(kernels_doc):
    doc, _ = kernels_doc
    doc = json.loads(json.dumps(doc))
    for r in doc["results"]:
        if r["status"] == "OK":  # a known, small spread: this tests the rule, not the machine's noise
            r["timing"]["iqr"] = 0.01 * r["timing"]["median"]
    old = json.loads(json.dumps(doc))
    new = json.loads(json.dumps(doc))
    entries, _ = compare_docs(old, new)
    assert entries and not any(e["regression"] for e in entries)
    for r in new["results"]:
        if r["status"] == "OK":
            r["timing"]["median"] *= 3.0
    entries, _ = compare_docs(old, new)
    assert all(e["regression"] for e in entries if e["metric"] == "median")
    # within the noise: 4 % slower with 1 % + 1 % relative IQR and a 5 % floor is not a regression
    for r in new["results"]:
        if r["status"] == "OK":
            r["timing"]["median"] = r["timing"]["median"] / 3.0 * 1.04
    entries, _ = compare_docs(old, new)
    assert not any(e["regression"] for e in entries)
    # a status that went from OK to FAIL is a regression
    new2 = json.loads(json.dumps(doc))
    eager_row = next(r for r in new2["results"] if r["status"] == "OK")
    eager_row["status"] = "FAIL"
    entries, _ = compare_docs(old, new2)
    assert any(e["metric"] == "status" and e["regression"] for e in entries)


def test_time_budget_skips_rather_than_drops(tmp_path):
    doc = _run(tmp_path, "--suite", "kernels", "--workloads", "softmax,gelu", "--backends", "eager",
               "--time-budget", "0.001")
    assert schema.validate(doc) == []
    assert {r["workload"] for r in doc["results"]} == {"softmax", "gelu"}
    assert all(r["status"] == "SKIPPED" and "budget" in r["reason"] for r in doc["results"])


def test_overhead_suite_reports_overhead_and_unavailable_pieces(tmp_path):
    doc = _run(tmp_path, "--suite", "overhead", "--workloads", "call_1_tensor", "--backends", "eager,wrong",
               "--no-external")
    assert schema.validate(doc) == []
    by_workload = {(r["workload"], r["backend"]): r for r in doc["results"]}
    assert by_workload[("call_1_tensor", "eager")]["overhead_vs_eager_s"] == 0.0
    assert by_workload[("call_1_tensor", "wrong")]["status"] == "FAIL"
    for key in [("hook_pure_python", "pyjit.enable")] + [(f"guard_check_{n}_tensors", "pyjit._C") for n in (1, 4, 16)]:
        row = by_workload[key]
        assert row["status"] == "OK" or row["reason"], row
        if row["status"] == "OK":
            assert row["timing"]["median"] > 0
    for name in ("core_overhead", "frontend_overhead"):
        assert doc["external"][name]["status"] == "SKIPPED"


def test_compile_suite_runs_workers_in_new_processes(tmp_path):
    doc = _run(tmp_path, "--suite", "compile", "--workloads", "pointwise_chain", "--backends", "eager,wrong")
    assert schema.validate(doc) == []
    (row,) = doc["results"]
    assert row["backend"] == "wrong" and row["status"] == "FAIL"
    assert row["compile"]["cold"]["process_s"] > 0
    assert "cold" in row["reason"]


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--time-budget" in out.stdout and "--compare" in out.stdout


def test_list_names_every_backend_with_its_availability(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("eager", "pyjit", "torch.compile", "pyjit+inductor", "dynamo+pyjit"):
        line = next(line for line in out.splitlines() if line.strip().startswith(name + " "))
        assert "available" in line


def test_unknown_suite_is_an_error(tmp_path):
    assert main(["--suite", "nope", "--out", str(tmp_path)]) == 2


def test_compile_cold_then_warm_rows_have_both_numbers(tmp_path):
    """The cold/warm plumbing end to end, with eager standing in for a compiler (cheap)."""
    import torch

    from bench import suites, workloads
    from bench.backends import make_backend
    from bench.measure import TimingPlan

    ctx = suites.RunContext(device=torch.device("cpu"), size="small", plan=TimingPlan.quick(), backends=[],
                            budget=suites.Budget(None), quick=True, on_row=lambda row: None)
    row = {"suite": "compile", "workload": "call_1_tensor", "backend": "eager", "status": "SKIPPED",
           "reason": None, "params": {}}
    suites._compile_row(ctx, workloads.by_name("call_1_tensor"), make_backend("eager", ctx.device), row, 2)
    assert row["status"] == "OK", row
    comp = row["compile"]
    assert comp["cold"]["status"] == comp["warm"]["status"] == "OK"
    assert comp["cold_s"] >= 0 and comp["warm_s"] >= 0
    assert comp["cold_process_s"] >= comp["cold"]["first_call_s"]


def test_compare_from_the_command_line(tmp_path, kernels_doc, capsys):
    doc, _ = kernels_doc
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    code = main(["--suite", "kernels", "--workloads", "softmax", "--backends", "eager,wrong", "--out",
                 str(tmp_path), "--name", "new", "--quiet", "--samples", "3", "--no-plots", "--no-external",
                 "--compare", str(old), "--fail-on-regression"])
    assert "compared with" in capsys.readouterr().out
    with open(tmp_path / "new.json") as f:
        entries, _ = compare_docs(doc, json.load(f))
    assert entries  # softmax/eager is in both runs
    assert code == (2 if any(e["regression"] for e in entries) else 0)


def test_dynamic_suite_sweeps_twenty_sizes_with_two_compiles(tmp_path):
    """pyjit over 20 row counts: every result checked against eager, the first size static and
    then one dynamic entry (2 compiles), whose graph pyjit's backend compiled with symbolic sizes;
    the steady-state row compares it with a static compile at the full shape."""
    doc = _run(tmp_path, "--suite", "dynamic", "--workloads", "softmax", "--backends", "pyjit")
    assert schema.validate(doc) == []
    (row,) = [r for r in doc["results"] if r["suite"] == "dynamic"]
    assert row["status"] == "OK", row.get("reason")
    d = row["dynamic"]
    assert len(set(row["params"]["sizes"])) == 20 and row["params"]["sizes"][-1] == 256
    assert d["compiles"] == 2 and d["sweep_s"] > 0 and d["dynamic_over_static"] > 0
    assert d["backend_graphs"]["symbolic"] >= 1 and d["backend_graphs"]["as_captured"] == 0


def test_artifacts_row_cold_then_fresh_cache_from_the_file(tmp_path):
    """The artifacts suite's plumbing end to end with pyjit: the second process, on another empty
    cache directory, installs the cold process's file and its first call traces nothing."""
    from bench import report, suites, workloads
    from bench.backends import make_backend
    from bench.measure import TimingPlan

    ctx = suites.RunContext(device=torch.device("cpu"), size="small", plan=TimingPlan.quick(), backends=[],
                            budget=suites.Budget(None), quick=True, on_row=lambda row: None)
    row = {"suite": "artifacts", "workload": "pointwise_chain", "backend": "pyjit", "status": "SKIPPED",
           "reason": None, "params": {}}
    suites._artifact_row(ctx, workloads.by_name("pointwise_chain"), make_backend("pyjit", ctx.device), row, 2)
    assert row["status"] == "OK", row
    comp = row["compile"]
    assert comp["cold_s"] > 0 and comp["artifact_s"] >= 0 and comp["load_s"] > 0 and comp["file_bytes"] > 0
    warm = comp["artifact"]["warm_start"]
    assert warm["entries_installed"] >= 1 and not warm["tracer_imported"], warm
    assert "installed" in comp["artifact"]["artifact_load"]
    assert "artifact/cold" in report._artifacts_table([row])
