"""bench.external: the layers' plug-in scripts are called through run_bench(), run(), or reported."""
from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("torch")  # bench.external imports torch; skipped where torch is absent

from bench import external


@pytest.fixture
def fake_script(monkeypatch, tmp_path):
    """Register a module ``bench._fake_plugin`` whose file exists, as the real scripts' would."""
    path = tmp_path / "_fake_plugin.py"
    path.write_text("# fake\n")
    monkeypatch.setattr(external, "_script_path", lambda name: str(path) if name == "_fake_plugin" else "/nonexistent")

    def install(**attrs):
        mod = types.ModuleType("bench._fake_plugin")
        for k, v in attrs.items():
            setattr(mod, k, v)
        monkeypatch.setitem(sys.modules, "bench._fake_plugin", mod)

    return install


def test_missing_script_is_unavailable_with_reason():
    entry = external.run_script("no_such_script", quick=True, device="cpu", time_budget_s=None)
    assert entry["status"] == "UNAVAILABLE" and "does not exist" in entry["reason"]


def test_run_bench_rows_are_kept_and_malformed_rows_reported(fake_script):
    seen = {}

    def run_bench(*, quick, device, time_budget_s):
        seen.update(quick=quick, device=device)
        return [{"name": "x", "value": 1.5, "unit": "us"}, {"name": "broken"}]

    fake_script(run_bench=run_bench)
    entry = external.run_script("_fake_plugin", quick=True, device="cpu", time_budget_s=10)
    assert seen == {"quick": True, "device": "cpu"}
    assert entry["rows"] == [{"name": "x", "value": 1.5, "unit": "us"}]
    assert entry["status"] == "ERROR" and "row 1" in entry["reason"]


def test_run_dict_is_kept_under_data(fake_script):
    fake_script(run=lambda quick=False: {"quick_was": quick, "numbers": (1, 2)})
    entry = external.run_script("_fake_plugin", quick=True, device="cpu", time_budget_s=None)
    assert entry["status"] == "OK" and entry["data"] == {"quick_was": True, "numbers": [1, 2]}


def test_raising_script_is_error(fake_script):
    def run_bench(**kwargs):
        raise RuntimeError("no GPU here")

    fake_script(run_bench=run_bench)
    entry = external.run_script("_fake_plugin", quick=False, device="cpu", time_budget_s=None)
    assert entry["status"] == "ERROR" and "no GPU here" in entry["reason"]


def test_script_without_entry_point_is_skipped_in_quick(fake_script):
    fake_script()
    entry = external.run_script("_fake_plugin", quick=True, device="cpu", time_budget_s=None)
    assert entry["status"] == "SKIPPED" and "run_bench" in entry["reason"]
