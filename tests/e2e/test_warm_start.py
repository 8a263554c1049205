"""Warm start without re-tracing: a new process installs the compiled entries of
its functions from their frame records (``pyjit/frame/warm_start.py``) -- no tracer, no fake
tensors -- and results equal eager.

Each scenario runs a user program in fresh subprocesses with a temporary ``PYJIT_CACHE_DIR`` and
reads what happened from the ``cache`` log and from the counters the program prints
(``pyjit.frame.warm_start.stats``; whether ``pyjit.frame.convert``, which imports the tracer, was
ever imported). One cold run fills a cache that the scenarios copy.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = str(Path(__file__).resolve().parents[2])

PROGRAM = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.nn.functional as F
    from typing import Optional
    from torch._subclasses import fake_tensor
    import pyjit

    fake_modes = [0]  # FakeTensorMode instances made by this process (tracing makes them)
    _init = fake_tensor.FakeTensorMode.__init__
    def _counting_init(self, *args, **kwargs):
        fake_modes[0] += 1
        _init(self, *args, **kwargs)
    fake_tensor.FakeTensorMode.__init__ = _counting_init

    OPT = Optional[torch.Tensor]  # a typing object: pinned by identity, no importable name

    def helper(t):
        return t * 0.5 + 1.0

    def small(x, w, b):
        y = F.layer_norm(x, (x.shape[-1],), w, b)
        return torch.softmax(F.gelu(y), -1)

    def broken(x):
        y = x.sin()
        print("break")
        return y.cos() + 1

    def reads_global(x):
        return helper(torch.tanh(x)) + F.relu(x)

    def pinned(x):
        kind = OPT
        return x.exp() + 2.0

    if os.environ.get("RENAME_CFG"):
        class Other:
            scale = 3.0
        CfgNow = Other
    else:
        class Cfg:
            scale = 3.0
        CfgNow = Cfg

    def with_cfg(x, cfg):
        return x * cfg.scale

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.scale = 2.0

        def forward(self, x):
            return torch.relu(self.fc(x)) * self.scale

    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    net = Net()
    jnet = pyjit.jit(net)
    cases = {"small": (small, (x, w, b)), "broken": (broken, (x,)), "reads_global": (reads_global, (x,)),
             "pinned": (pinned, (x,)), "with_cfg": (with_cfg, (x, CfgNow())), "Net.forward": (None, (x,))}
    checks = {}
    with torch.no_grad():
        for name in os.environ["FUNCS"].split(","):
            fn, args = cases[name]
            jf = jnet if fn is None else pyjit.jit(fn)
            ref = net(*args) if fn is None else fn(*args)
            got = [jf(*args), jf(*args)]  # the second call hits the installed entry in C
            checks[name] = all(torch.allclose(ref, g, atol=1e-5, rtol=1e-5) for g in got)
    from pyjit.frame import warm_start
    print("RESULT " + json.dumps({"checks": checks, "stats": dict(warm_start.stats),
                                  "tracer": "pyjit.frame.convert" in sys.modules,
                                  "fake_modes": fake_modes[0]}), flush=True)
''')

ALL = "small,broken,reads_global,pinned,with_cfg,Net.forward"
REBUILDABLE = "small,broken,reads_global,Net.forward"


def _run(program: Path, cache: Path, funcs: str, **env: str) -> tuple[dict[str, Any], str]:
    full = {k: v for k, v in os.environ.items() if k != "PYJIT_WARM_START"}
    full.update(PYJIT_CACHE_DIR=str(cache), PYJIT_LOGS="cache", PYTHONPATH=REPO, FUNCS=funcs, **env)
    p = subprocess.run([sys.executable, str(program)], cwd=REPO, env=full, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), p.stderr


def _installed(log: str, name: str) -> bool:
    return f"warm start: installed an entry of {name} " in log


def _traced(log: str, name: str) -> bool:
    # a compile of pyjit's backend saves (or declines to save) the frame's record
    return f"frame record saved for {name} " in log or f"no frame record for an entry of {name} " in log


@pytest.fixture(scope="module")
def cold(tmp_path_factory: Any) -> tuple[Path, Path, dict[str, Any], str]:
    """The program run once on an empty cache (every frame traced and recorded)."""
    root = tmp_path_factory.mktemp("warm")
    program = root / "prog.py"
    program.write_text(PROGRAM)
    cache = root / "cache"
    result, log = _run(program, cache, ALL)
    return program, cache, result, log


def _copy(cold: tuple[Path, Path, dict[str, Any], str], tmp_path: Path) -> tuple[Path, Path]:
    """The program (same path: the file name is part of a frame's key) and a copy of the cache."""
    program, cache, _, _ = cold
    shutil.copytree(cache, tmp_path / "cache")
    return program, tmp_path / "cache"


def test_cold_run_records_every_serialisable_frame(cold) -> None:
    _, _, result, log = cold
    assert all(result["checks"].values()), result
    assert result["tracer"] and result["fake_modes"] > 0
    for name in ("small", "broken", "broken__resume_at_", "reads_global", "with_cfg", "Net.forward"):
        assert f"frame record saved for {name}" in log, name
    # an identity of this process (a typing object read as a global): no record, with the reason
    assert "no frame record for an entry of pinned" in log and "G['OPT']" in log


def test_warm_process_installs_without_tracing(cold, tmp_path) -> None:
    program, cache = _copy(cold, tmp_path)
    result, log = _run(program, cache, REBUILDABLE)
    assert all(result["checks"].values()), result
    assert not result["tracer"], "the tracer was imported on the warm path"
    assert result["fake_modes"] == 0, "a FakeTensorMode was made on the warm path"
    # LayerNorm/GELU/softmax, the graph break and its resume function, a global helper
    # re-resolved by name, an nn.Module method with parameters guarded by path
    for name in ("small", "broken", "broken__resume_at_", "reads_global", "Net.forward"):
        assert f"frame cache hit for {name}" in log, name
        assert _installed(log, name) or name.endswith("_") and "installed an entry of broken__resume_at_" in log, name
    assert result["stats"]["entries_installed"] == 5, result
    assert "frame record saved" not in log and "rebuild" not in result["stats"]


def test_unrebuildable_guards_retrace_with_reason(cold, tmp_path) -> None:
    program, cache = _copy(cold, tmp_path)
    # `with_cfg` was traced with an argument of class __main__.Cfg, which this run does not define;
    # `pinned` has no record (its guard pins an object of the first process).
    result, log = _run(program, cache, "pinned,with_cfg", RENAME_CFG="1")
    assert all(result["checks"].values()), result
    assert "an entry of with_cfg" in log and "cannot be rebuilt" in log and "__main__.Cfg" in log
    assert _traced(log, "with_cfg") and _traced(log, "pinned")
    assert result["stats"]["rebuild_failures"] == 1 and result["tracer"]


def test_edited_source_misses_with_the_differing_field(cold, tmp_path) -> None:
    program, cache = _copy(cold, tmp_path)
    src = program.read_text()
    # same lines, other constants: `small` itself and `helper`, a global `reads_global` calls
    edited = src.replace("torch.softmax(F.gelu(y), -1)", "torch.softmax(F.gelu(y) * 1.5, -1)")
    edited = edited.replace("t * 0.5 + 1.0", "t * 0.25 + 1.0")
    assert edited != src
    program.write_text(edited)
    try:
        result, log = _run(program, cache, "small,reads_global,Net.forward")
    finally:
        program.write_text(src)
    assert all(result["checks"].values()), result  # compared against eager of the edited code
    miss = next(ln for ln in log.splitlines() if "frame cache miss for small " in ln)
    assert "differs from the earlier entry in:" in miss and "constants" in miss, miss
    assert "frame record of reads_global" in log and "global 'helper' changed" in log
    assert _traced(log, "small") and _traced(log, "reads_global")
    assert _installed(log, "Net.forward")  # untouched code still starts warm


def test_switched_off(cold, tmp_path) -> None:
    program, cache = _copy(cold, tmp_path)
    result, log = _run(program, cache, "small", PYJIT_WARM_START="0")
    assert all(result["checks"].values()) and result["tracer"]
    assert "frame cache hit" not in log and not result["stats"]


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_corrupt_record_is_removed_and_rebuilt(cold, tmp_path, damage) -> None:
    program, cache = _copy(cold, tmp_path)
    records = [p for p in cache.rglob("*.rec")]
    assert records
    from_small = []
    for p in records:
        data = p.read_bytes()
        if b"small" in data:
            from_small.append(p)
            p.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:20] + bytes(64) + data[84:])
    assert len(from_small) == 1
    result, log = _run(program, cache, "small")
    assert all(result["checks"].values()), result
    assert "frames/" in log and "failed its check" in log and "removing it" in log, log[-2000:]
    assert _traced(log, "small") and "frame record saved for small" in log
    result, log = _run(program, cache, "small")  # the rewritten record hits again
    assert _installed(log, "small") and not result["tracer"], log[-2000:]


# ----------------------------------------------------------------------------- dynamic shapes
# A jitted function called with three batch sizes has two entries (static for the first size,
# dynamic after the second); a new process installs the dynamic entry from the record.

DYN_PROGRAM = textwrap.dedent('''
    import json, os, sys
    import torch
    import pyjit
    from pyjit.frame import warm_start

    captured = [0]  # calls that ran the graph as captured (the module's check refused them)
    _forward = warm_start._CapturedGraph.forward
    def _counting(self, *args):
        captured[0] += 1
        return _forward(self, *args)
    warm_start._CapturedGraph.forward = _counting

    def rows(x, y):
        # broadcasting x + y relies on x.size(0) == y.size(0): a relation between two slots
        return (x * 2 + y).sum(-1) + x.size(0)

    def branch(x, y):
        if x.size(0) == y.size(0):  # an equality the trace specialised on
            return x + y
        return x.sum(0) + y.sum(0)

    def scaled(x, n):
        return x * n + x.size(0)  # n: a symbolic int graph input after two values

    torch.manual_seed(0)
    steps = []
    with torch.no_grad():
        for n in [int(s) for s in os.environ["SIZES"].split(",")]:
            x = torch.randn(n, 4)
            y = torch.randn(n - 5 if os.environ.get("MISMATCH") else n, 4)
            checks = {}
            for name in os.environ["FUNCS"].split(","):
                fn = {"rows": rows, "branch": branch, "scaled": scaled}[name]
                args = (x, n) if name == "scaled" else (x, y)
                jf = pyjit.jit(fn)
                ref = fn(*args)
                got = [jf(*args), jf(*args)]
                checks[name] = all(g.shape == ref.shape and torch.allclose(ref, g, atol=1e-5) for g in got)
            steps.append({"size": n, "checks": checks, "tracer": "pyjit.frame.convert" in sys.modules,
                          "stats": dict(warm_start.stats), "captured": captured[0]})
    print("RESULT " + json.dumps(steps), flush=True)
''')

DYN_FUNCS = "rows,branch,scaled"


def _run_dyn(program: Path, cache: Path, funcs: str, sizes: str, **env: str) -> tuple[list[dict[str, Any]], str]:
    full = {k: v for k, v in os.environ.items() if k != "PYJIT_WARM_START"}
    full.update(PYJIT_CACHE_DIR=str(cache), PYJIT_LOGS="cache", PYTHONPATH=REPO, FUNCS=funcs, SIZES=sizes, **env)
    p = subprocess.run([sys.executable, str(program)], cwd=REPO, env=full, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), p.stderr


@pytest.fixture(scope="module")
def cold_dynamic(tmp_path_factory: Any) -> tuple[Path, Path, list[dict[str, Any]], str]:
    """Sizes 3, 5, 7 on an empty cache: each function gets a static and a dynamic entry."""
    root = tmp_path_factory.mktemp("warm_dyn")
    program = root / "dyn.py"
    program.write_text(DYN_PROGRAM)
    cache = root / "cache"
    steps, log = _run_dyn(program, cache, DYN_FUNCS, "3,5,7")
    return program, cache, steps, log


def _copy_dyn(cold_dynamic: tuple[Path, Path, Any, str], tmp_path: Path) -> tuple[Path, Path]:
    program, cache, _, _ = cold_dynamic
    shutil.copytree(cache, tmp_path / "cache")
    return program, tmp_path / "cache"


def test_cold_run_records_dynamic_entries(cold_dynamic) -> None:
    _, _, steps, log = cold_dynamic
    assert all(all(s["checks"].values()) for s in steps), steps
    for name in DYN_FUNCS.split(","):
        # the static entry (size 3) and the dynamic one (from size 5): both recorded
        assert f"frame record saved for {name} " in log and f"{name} (" in log, name
        assert any(f"frame record saved for {name} " in ln and ": 2 entries" in ln for ln in log.splitlines()), name
        assert f"no frame record for an entry of {name} " not in log, name


def test_warm_process_installs_dynamic_entry_without_tracing(cold_dynamic, tmp_path) -> None:
    program, cache = _copy_dyn(cold_dynamic, tmp_path)
    steps, log = _run_dyn(program, cache, DYN_FUNCS, "9,11,3,1")
    by_size = {s["size"]: s for s in steps}
    assert all(all(s["checks"].values()) for s in steps), steps
    # 9 and 11 (sizes never seen before): the dynamic entries, installed from the record
    for n in (9, 11):
        assert not by_size[n]["tracer"], f"the tracer was imported for size {n}"
        assert by_size[n]["stats"].get("entries_installed") == 3, by_size[n]
        assert by_size[n]["captured"] == 0, "the module's check refused a call: it ran as captured"
    for name in DYN_FUNCS.split(","):
        assert _installed(log, name), name
    # 3 is served by the dynamic entry too (C hit): still no tracer, nothing more installed
    assert not by_size[3]["tracer"] and by_size[3]["stats"]["entries_installed"] == 3
    # 1: the 0/1 specialisation guard (size >= 2) fails and no recorded entry matches: traced
    assert by_size[1]["tracer"] and by_size[1]["stats"].get("rebuild_failures") is None, by_size[1]
    assert _traced(log, "rows") and _traced(log, "scaled")


def test_failing_relation_makes_the_dynamic_entry_not_match(cold_dynamic, tmp_path) -> None:
    program, cache = _copy_dyn(cold_dynamic, tmp_path)
    # x has 9 rows, y 4: branch's dynamic entry relied on x.size(0) == y.size(0)
    steps, log = _run_dyn(program, cache, "branch", "9", MISMATCH="1")
    assert steps[0]["checks"]["branch"], steps  # the other branch, as eager
    assert steps[0]["tracer"] and not _installed(log, "branch") and _traced(log, "branch"), log[-2000:]
    assert "entries_installed" not in steps[0]["stats"] and "rebuild_failures" not in steps[0]["stats"]


def _rewrite_dynamic_record(cache: Path, name: str, edit: Any) -> None:
    """Apply ``edit`` to the guards of ``name``'s dynamic entry and store the record again through
    the cache (valid integrity data: only the content is wrong)."""
    import pyjit
    from pyjit.runtime import cache as store
    from pyjit.runtime import frame_store

    paths = [p for p in cache.rglob("*.rec") if frame_store._from_payload(p.read_bytes()).qualname == name]
    assert len(paths) == 1, paths
    record = frame_store._from_payload(paths[0].read_bytes())
    dynamic = [e for e in record.entries if any(g.get("kind") == "shape" for g in e.guards[1:])]
    assert len(dynamic) == 1
    edit(dynamic[0].guards)
    with pyjit.config.patch(cache_dir=str(cache)):
        written = store.put_bytes(frame_store.NAMESPACE, paths[0].stem, frame_store._to_payload(record), ".rec",
                                  overwrite=True)
    assert written == str(paths[0])


def _shape_guard(guards: list[dict[str, Any]]) -> dict[str, Any]:
    return next(g for g in guards[1:] if g["kind"] == "shape")


def _tensor_guard(guards: list[dict[str, Any]]) -> dict[str, Any]:
    return next(g for g in guards[1:] if g["kind"] == "tensor" and g["expected"]["bind"])


_DAMAGE = {
    # a format-1 record (before symbolic tensor specs and shape guards)
    "old_format": (lambda gs: gs[0].update(format=1), "guard format"),
    # Python text that is not a relation over v[k]: must never be executed
    "python_code": (lambda gs: _shape_guard(gs)["expected"].update(
        python="__import__('pathlib').Path('PWNED').touch() or v[0] >= 2"), "relation source"),
    "python_name": (lambda gs: _shape_guard(gs)["expected"].update(python="open(v[0]) >= 2"), "relation source"),
    "program": (lambda gs: _shape_guard(gs)["expected"].update(program=[1, 999, 0, 2, 16]), "program reads slot"),
    "origin": (lambda gs: _shape_guard(gs)["expected"]["origins"][0].__setitem__(1, "itemsize"), "bad slot origin"),
    "unbound_dim": (lambda gs: _tensor_guard(gs)["expected"].update(bind=[]), "bound to no slot"),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_damaged_dynamic_record_is_refused_with_reason(cold_dynamic, tmp_path, damage) -> None:
    program, cache = _copy_dyn(cold_dynamic, tmp_path)
    edit, reason = _DAMAGE[damage]
    _rewrite_dynamic_record(cache, "rows", edit)
    steps, log = _run_dyn(program, cache, "rows", "9")
    assert steps[0]["checks"]["rows"], steps
    refusal = [ln for ln in log.splitlines() if "an entry of rows" in ln and "cannot be rebuilt" in ln]
    assert refusal and reason in refusal[0], log[-2000:]
    assert steps[0]["stats"].get("rebuild_failures") == 1 and steps[0]["tracer"]
    assert not _installed(log, "rows") and _traced(log, "rows")
    assert not (Path(REPO) / "PWNED").exists() and not (cache.parent / "PWNED").exists()
