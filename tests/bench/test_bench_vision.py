"""bench/vision.py on CPU: each (model, backend) runs in its own process and reports a step time,
a first-call time and the first output's checksum, which must agree between eager and pyjit."""
from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("transformers")

from bench import vision  # noqa: E402


def test_vision_smoke_on_cpu(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vision.json"
    rc = vision.main(["--device", "cpu", "--models", "mobilenetv3_large_100", "--backends", "eager,pyjit",
                      "--batch", "1", "--image", "32", "--reps", "2", "--warmup", "1", "--timeout", "300",
                      "--json", str(out)])
    assert rc == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["rows"]}
    for backend in ("eager", "pyjit"):
        row = rows[backend]
        assert row["status"] == "OK", row
        assert row["median_ms"] > 0 and row["first_call_s"] > 0
    assert rows["pyjit"]["checksum"] == pytest.approx(rows["eager"]["checksum"], rel=1e-3, abs=1e-30)
    assert "| mobilenetv3_large_100 | infer |" in capsys.readouterr().out
