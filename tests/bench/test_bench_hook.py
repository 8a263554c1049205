"""Smoke test of the ``hook`` suite: it runs at small sizes and reports a ratio per workload and,
for the mixed workloads, whether the tensor part was compiled (no timing assertions)."""
from __future__ import annotations

import json

import pytest

from bench import schema

pytest.importorskip("torch")  # the harness records torch's version and runs torch workloads
from bench.cli import main


def test_hook_suite_reports_ratio_and_compiled_tensor_part(tmp_path, capsys):
    code = main(["--suite", "hook", "--size", "small", "--samples", "2", "--out", str(tmp_path), "--name", "t",
                 "--quiet", "--no-plots", "--no-external"])
    assert code == 0
    with open(tmp_path / "t.json") as f:
        doc = json.load(f)
    assert schema.validate(doc) == []
    rows = {r["workload"]: r for r in doc["results"]}
    assert {"recursion", "objects", "generators", "strings_dicts", "interpreter", "mixed_preprocess",
            "mixed_driver"} <= set(rows)
    for name, row in rows.items():
        assert row["status"] == "OK", (name, row["reason"])
        assert row["params"]["ratio_min"] > 0
    for name in ("mixed_preprocess", "mixed_driver"):
        assert rows[name]["params"]["tensor_part_compiled"], name
    printed = capsys.readouterr().out
    assert "hook recursion" in printed and "ratio" in printed and "tensor part compiled" in printed
