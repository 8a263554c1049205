"""Cold start: the first compile of a new process reports its one-time costs (``imports`` of the
frontend's modules, torch's ``init`` behind the first FakeTensorMode) as their own
``compile_times`` phases, not inside ``trace``; later compiles report only their own phases."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

import pyjit
from pyjit.frame import coldstart

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs in a fresh interpreter: the one-time work can only be observed once per process.
_CHILD = r"""
import json, logging, torch, pyjit
recs = []
class Keep(logging.Handler):
    def emit(self, record):
        if isinstance(getattr(record, "phases", None), dict):
            recs.append(record.phases)
pyjit.set_logs("compile_times")
logging.getLogger("pyjit.compile_times").addHandler(Keep())
x, y = torch.randn(8), torch.randn(8)
f = pyjit.jit(lambda a, b: (a + b).relu() * 2, backend="eager")
g = pyjit.jit(lambda a, b: (a - b).sin() * 3, backend="eager")
ok = [torch.equal(f(x, y), (x + y).relu() * 2), torch.equal(g(x, y), (x - y).sin() * 3)]
print(json.dumps({"phases": recs, "ok": ok}))
"""


def test_first_compile_reports_one_time_phases_apart_from_trace():
    env = {**os.environ, "PYTHONPATH": _REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYJIT_LOGS", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] == [True, True]
    first, second = out["phases"]
    assert set(first) == {"imports", "init", "trace", "backend", "codegen"}
    assert set(second) == {"trace", "backend", "codegen"}
    assert all(v >= 0 for v in [*first.values(), *second.values()])


def test_one_time_phases_are_reported_once_in_process():
    f = pyjit.jit(lambda a: a * 2 + 1, backend="eager")
    x = torch.randn(4)
    assert torch.equal(f(x), x * 2 + 1)
    # Whatever compiled first in this process took the one-time phases; none are left over.
    assert coldstart.take_one_time_phases() == {}
    coldstart.ensure_initialized()  # idempotent: no second "init"
    assert coldstart.take_one_time_phases() == {}
