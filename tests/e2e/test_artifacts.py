"""Portable cache artifacts (``pyjit.cache.save_artifacts`` / ``load_artifacts``,
``pyjit/runtime/artifacts.py``): a process on a fresh cache directory warm-starts from the file
with no tracing and no compiler run, and damaged or foreign files are refused with the reason.

On CPU with the default CPU backend (C++ code generation), so the file holds a compiled C++
shared object. The cold process and the warm processes are subprocesses with their own
``PYJIT_CACHE_DIR``; the refusals are checked in this process against a temporary cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import pyjit
from pyjit.runtime import artifacts

REPO = str(Path(__file__).resolve().parents[2])

PROGRAM = textwrap.dedent('''
    import json, os, sys
    import torch
    from torch._subclasses import fake_tensor
    import pyjit
    from pyjit.runtime import cpp_build

    fake_modes = [0]
    _init = fake_tensor.FakeTensorMode.__init__
    def _counting_init(self, *args, **kwargs):
        fake_modes[0] += 1
        _init(self, *args, **kwargs)
    fake_tensor.FakeTensorMode.__init__ = _counting_init

    def small(x, w):
        return torch.softmax(torch.relu(x @ w) * 2.0 + 1.0, -1)

    def broken(x):
        y = torch.tanh(x) * 3.0
        print("break")
        return y.exp() - 1.0

    torch.manual_seed(0)
    device = os.environ.get("DEVICE", "cpu")
    x, w = torch.randn(16, 8, device=device), torch.randn(8, 8, device=device)
    report = None
    if os.environ.get("LOAD"):
        report = str(pyjit.cache.load_artifacts(os.environ["LOAD"]))
    checks, jitted = {}, {}
    with torch.no_grad():
        for fn, args in ((small, (x, w)), (broken, (x,))):
            jf = jitted[fn.__name__] = pyjit.jit(fn)
            ref = fn(*args)
            got = [jf(*args), jf(*args)]
            checks[fn.__name__] = all(torch.allclose(ref, g, atol=1e-5, rtol=1e-5) for g in got)
    manifest = subset = None
    if os.environ.get("SAVE"):
        manifest = pyjit.cache.save_artifacts(os.environ["SAVE"])
        subset = [f["qualname"] for f in pyjit.cache.save_artifacts(os.environ["SAVE"] + ".broken",
                                                                    frames=[jitted["broken"]])["frames"]]
    from pyjit.frame import warm_start
    print("RESULT " + json.dumps({"checks": checks, "stats": dict(warm_start.stats), "report": report,
                                  "tracer": "pyjit.frame.convert" in sys.modules, "fake_modes": fake_modes[0],
                                  "cxx_runs": cpp_build.compile_count, "subset": subset,
                                  "blobs": [b["ns"] for b in manifest["blobs"]] if manifest else None,
                                  "triton": [t["name"] for t in manifest["triton"]] if manifest else None}),
          flush=True)
''')


def _run(program: Path, cache: Path, **env: str) -> tuple[dict[str, Any], str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYJIT_")}
    full.update(PYJIT_CACHE_DIR=str(cache), PYJIT_LOGS="cache", PYTHONPATH=REPO, **env)
    p = subprocess.run([sys.executable, str(program)], cwd=REPO, env=full, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), p.stderr


@pytest.fixture(scope="module")
def saved(tmp_path_factory: Any) -> tuple[Path, Path, dict[str, Any]]:
    """The program compiled on an empty cache, its artifacts saved to a file."""
    root = tmp_path_factory.mktemp("artifacts")
    program = root / "prog.py"
    program.write_text(PROGRAM)
    path = root / "prog.pyjit"
    result, _ = _run(program, root / "cold-cache", SAVE=str(path))
    return program, path, result


def test_save_holds_every_kind_of_entry(saved) -> None:
    _, path, result = saved
    assert all(result["checks"].values()), result
    assert result["tracer"] and result["cxx_runs"] >= 1
    # two frames and the resume function of the graph break, their graphs, modules and C++ objects
    assert result["blobs"].count("frames") == 3, result["blobs"]
    for ns in ("graphs", "modules", "cpp"):
        assert ns in result["blobs"], result["blobs"]
    manifest, _, _ = artifacts.read(str(path))
    assert {"python", "bytecode", "torch", "triton", "pyjit", "pyjit source"} <= set(manifest["versions"])
    assert manifest["machine"]["compiler"]["version"]
    assert manifest["missing"] == []
    # frames=[one jitted function]: that frame and the resume function of its graph break only
    assert sorted(result["subset"]) == ["broken", next(q for q in result["subset"] if "__resume_at_" in q)]
    assert len(result["subset"]) == 2, result["subset"]


def test_new_cache_dir_warm_starts_without_tracing_or_compiling(saved, tmp_path) -> None:
    program, path, _ = saved
    result, log = _run(program, tmp_path / "fresh-cache", LOAD=str(path))
    assert all(result["checks"].values()), result
    assert not result["tracer"], "the tracer was imported after loading the artifacts"
    assert result["fake_modes"] == 0
    assert result["cxx_runs"] == 0, "the C++ compiler ran (a kernel or the compiler check)"
    assert result["stats"].get("entries_installed") == 3, result
    assert "installed" in result["report"] and "cpp" in result["report"] and "left out" not in result["report"]
    assert "frame record saved" not in log


def _rewrite_manifest(data: bytes, edit: Any, rehash: bool = True) -> bytes:
    """The file with its manifest changed by ``edit`` (and its manifest hash recomputed)."""
    start = len(artifacts.MAGIC) + 8
    (n,) = struct.unpack(">Q", data[len(artifacts.MAGIC):start])
    header = json.loads(data[start:start + n])
    edit(header["manifest"])
    if rehash:
        body = json.dumps(header["manifest"], sort_keys=True, separators=(",", ":")).encode()
        header["manifest_sha256"] = hashlib.sha256(body).hexdigest()
    new = json.dumps(header).encode()
    return data[:len(artifacts.MAGIC)] + struct.pack(">Q", len(new)) + new + data[start + n:]


def _other_torch(m: dict[str, Any]) -> None:
    m["versions"]["torch"] = "1.13.0"


def _other_pyjit(m: dict[str, Any]) -> None:
    m["versions"]["pyjit source"] = "0" * 64


def _tamper(data: bytes) -> bytes:
    i = len(data) - 200  # inside the last blob
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]


@pytest.mark.parametrize("damage, reason", [
    (_tamper, "content hash mismatch"),
    (lambda d: d[:-300], "truncated"),
    (lambda d: d[:20], "truncated"),
    (lambda d: _rewrite_manifest(d, _other_torch), "made with torch 1.13.0, this process has"),
    (lambda d: _rewrite_manifest(d, _other_pyjit), "pyjit source hash"),
    (lambda d: _rewrite_manifest(d, _other_torch, rehash=False), "does not match the manifest hash"),
    (lambda d: b"not an artifact" + d, "bad magic"),
], ids=["tampered", "truncated", "truncated_header", "other_torch", "other_pyjit", "edited_manifest", "magic"])
def test_bad_files_are_refused_with_the_reason(saved, tmp_path, damage, reason) -> None:
    _, path, _ = saved
    bad = tmp_path / "bad.pyjit"
    bad.write_bytes(damage(path.read_bytes()))
    with pyjit.config.patch(cache_dir=str(tmp_path / "cache"), backend_disk_cache=True):
        with pytest.raises(pyjit.ArtifactError, match=reason):
            pyjit.cache.load_artifacts(str(bad))
        assert pyjit.cache.info()["entries"] == 0, "a refused file installed something"


def test_shared_objects_of_another_compiler_are_left_out(saved, tmp_path) -> None:
    program, path, _ = saved

    def other_compiler(m: dict[str, Any]) -> None:
        m["machine"]["compiler"]["version"] = "c++ 1.0"

    moved = tmp_path / "moved.pyjit"
    moved.write_bytes(_rewrite_manifest(path.read_bytes(), other_compiler))
    result, _ = _run(program, tmp_path / "fresh-cache", LOAD=str(moved))
    assert all(result["checks"].values()), result
    assert "left out: C++ object" in result["report"] and "compiler version 'c++ 1.0'" in result["report"]
    # no tracing: the frames, graphs and modules installed; only the kernels are compiled here
    assert not result["tracer"] and result["stats"].get("entries_installed") == 3, result
    assert result["cxx_runs"] >= 1


def test_save_without_compiled_frames_explains(tmp_path) -> None:
    with pyjit.config.patch(cache_dir=str(tmp_path / "cache"), warm_start=True, backend_disk_cache=True):
        with pytest.raises(pyjit.PyjitError, match="no compiled frame"):
            pyjit.cache.save_artifacts(str(tmp_path / "x.pyjit"), frames=[_rewrite_manifest])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="Triton kernels need a CUDA GPU")
def test_cuda_artifacts_carry_triton_kernels(tmp_path) -> None:
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    path = tmp_path / "cuda.pyjit"
    cold, _ = _run(program, tmp_path / "c1", SAVE=str(path), DEVICE="cuda", TRITON_CACHE_DIR=str(tmp_path / "t1"))
    assert all(cold["checks"].values()) and cold["triton"], cold
    triton_dir = tmp_path / "t2"
    warm, _ = _run(program, tmp_path / "c2", LOAD=str(path), DEVICE="cuda", TRITON_CACHE_DIR=str(triton_dir))
    assert all(warm["checks"].values()), warm
    assert not warm["tracer"] and warm["stats"].get("entries_installed") == 3, warm
    assert "triton" in warm["report"], warm["report"]
    # every folder of compiled kernels in the new Triton cache came from the file: none compiled here
    carried = {name.split("/")[0] for name in cold["triton"]}
    compiled = {d.name for d in triton_dir.iterdir() if any(f.suffix in (".cubin", ".hsaco") for f in d.iterdir())}
    assert compiled <= carried, compiled - carried
