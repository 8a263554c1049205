"""The backend's graph cache on top of the store: damaged entries are rebuilt and rewritten (the
run after hits again), misses say which key field differed, and a new process hits."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")  # these tests compile graphs; skipped where torch is absent

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend import graph_cache
from pyjit.runtime import cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def interp(cache_dir):
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True):
        backend.metrics.reset()
        yield cache_dir


def _compile(fn, inputs):
    gm = torch.fx.symbolic_trace(fn)
    compiled = backend.compile_fx(gm, list(inputs))
    assert not backend.metrics.eager_graphs
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))
    return gm


def _entry_paths(gm, inputs):
    fields = graph_cache.graph_key_fields(gm, inputs)
    index = cache.get_path("graphs", graph_cache.graph_key(gm, inputs), ".json")
    module_key = json.loads(open(index).read())["module_key"]
    return fields, index, cache.get_path("modules", module_key, ".py")


@pytest.mark.parametrize("damage", ["module_truncated", "module_zeroed", "module_garbled",
                                    "module_unloadable", "index_wrong_shape", "index_garbled"])
def test_damaged_entries_are_rebuilt_then_hit(interp, caplog, damage: str) -> None:
    fn = lambda x: torch.sigmoid(x) * 2 + 1  # noqa: E731
    x = torch.randn(5, 3)
    gm = _compile(fn, [x])
    fields, index, module = _entry_paths(gm, [x])
    if damage == "module_truncated":
        open(module, "r+b").truncate(20)
    elif damage == "module_zeroed":
        open(module, "wb").close()
    elif damage == "module_garbled":
        data = bytearray(open(module, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(module, "wb").write(bytes(data))
    elif damage == "module_unloadable":  # hash-valid but raises on import
        key = os.path.basename(module)[:-3]
        cache.put_bytes("modules", key, b"raise ImportError('boom')\n", ".py", overwrite=True)
    elif damage == "index_wrong_shape":
        cache.put_bytes("graphs", graph_cache.graph_key(gm, [x]), json.dumps({"module_key": 3}).encode(),
                        ".json", overwrite=True)
    else:
        open(index, "ab").write(b"garbage")
    if damage == "module_unloadable":  # a fresh process would import it again: so must this one
        for name in [n for n in sys.modules if n.startswith("pyjit_generated_" + key[:16])]:
            del sys.modules[name]
    backend.metrics.reset()
    with caplog.at_level(logging.INFO, logger="pyjit.cache"):
        _compile(fn, [x])
    assert backend.metrics.graph_cache_hits == 0
    assert any("rebuilt" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    _, index2, module2 = _entry_paths(gm, [x])  # rewritten and valid again
    assert index2 == index and module2 == module
    backend.metrics.reset()
    _compile(fn, [x])
    assert backend.metrics.graph_cache_hits == 1


def test_miss_names_the_differing_field(interp, caplog, monkeypatch) -> None:
    fn = lambda x: x.exp() - 1  # noqa: E731
    _compile(fn, [torch.randn(4)])
    with caplog.at_level(logging.INFO, logger="pyjit.cache"):
        _compile(fn, [torch.randn(4)])
        _compile(fn, [torch.randn(6)])
        with cfg.patch(backend_fusion=not cfg.config.backend_fusion):
            _compile(fn, [torch.randn(4)])
        real = cache.versions()
        monkeypatch.setattr(cache, "versions", lambda: {**real, "torch": "9.9.9"})
        monkeypatch.setattr(cache, "_version_tag", "v-test-other-torch")
        _compile(fn, [torch.randn(4)])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("graph cache")]
    assert lines[0].startswith("graph cache hit")
    assert lines[1].startswith("graph cache miss") and lines[1].endswith("differs from the earlier entry in: input metadata")
    assert lines[2].endswith("in: backend settings"), lines[2]
    assert "torch version 9.9.9" not in lines[3] and f"torch version {real['torch']} -> 9.9.9" in lines[3], lines[3]


_PROGRAM = textwrap.dedent("""
    import torch, pyjit
    torch.manual_seed(0)

    @pyjit.jit
    def fn(x, w):
        return torch.nn.functional.gelu(torch.layer_norm(x, (8,)) * w).softmax(-1)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 3

    m = pyjit.jit(M())
    x, w = torch.randn(4, 8), torch.randn(8)
    torch.save((fn(x, w), m(x)), __import__("sys").argv[1])
    info = pyjit.cache.info()
    print("INFO", info["hits"], info["misses"], info["entries"])
""")


def test_new_process_hits_graph_cache(cache_dir, tmp_path) -> None:
    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYJIT_LOGS": "cache",
           "PYJIT_CPU_BACKEND": "triton_interpret", "PYTHONPATH": REPO}
    runs = []
    for i in range(2):
        out = tmp_path / f"out{i}.pt"
        p = subprocess.run([sys.executable, "-c", _PROGRAM, str(out)], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        runs.append((p.stdout, p.stderr, torch.load(out)))
    (_, cold_log, cold), (warm_out, warm_log, warm) = runs
    assert cold_log.count("graph cache miss") == 2 and "graph cache hit" not in cold_log, cold_log
    # (A miss here "differing in: backend source" means pyjit/backend/*.py changed between the runs.)
    assert warm_log.count("graph cache hit") == 2 and "graph cache miss" not in warm_log, warm_log
    for a, b in zip(cold, warm):
        assert torch.equal(a, b)


_RACER = textwrap.dedent("""
    import sys, time, torch, pyjit
    torch.manual_seed(0)

    @pyjit.jit
    def fn(x, w):
        return torch.nn.functional.gelu(torch.layer_norm(x, (8,)) * w).softmax(-1)

    x, w = torch.randn(4, 8), torch.randn(8)
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    out = fn(x, w)
    ref = torch.nn.functional.gelu(torch.layer_norm(x, (8,)) * w).softmax(-1)
    print("OK" if torch.allclose(out, ref, atol=1e-6, rtol=1e-5) else "WRONG")
""")


def test_eight_processes_compile_one_graph(cache_dir) -> None:
    import time

    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYJIT_CPU_BACKEND": "triton_interpret",
           "PYTHONPATH": REPO}
    env.pop("PYJIT_LOGS", None)
    start = str(time.time() + 8.0)  # after every interpreter has imported torch
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, start], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e[-2000:] for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["OK"] * 8, outs
    assert not any("rebuilt" in e or "Traceback" in e for _, e in outs), [e for _, e in outs]
    assert cache.info()["by_namespace"] == {"modules": 1, "graphs": 1, "frames": 1}  # frames: warm-start record
    for ns, suffix in (("modules", ".py"), ("graphs", ".json")):
        folder = os.path.join(str(cache_dir), cache.version_tag(), ns)
        names = [f for _, _, files in os.walk(folder) for f in files if f.endswith(suffix)]
        assert len(names) == 1 and cache.get_path(ns, names[0][: -len(suffix)], suffix) is not None


@pytest.mark.skipif(not any(__import__("shutil").which(c) for c in ("c++", "g++", "clang++")),
                    reason="no C++ compiler")
def test_garbled_kernel_binary_is_rebuilt_in_the_next_process(cache_dir, tmp_path) -> None:
    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYJIT_LOGS": "cache", "PYJIT_CPU_BACKEND": "cpp",
           "PYTHONPATH": REPO}

    def run(i: int) -> tuple[str, tuple]:
        out = tmp_path / f"out{i}.pt"
        p = subprocess.run([sys.executable, "-c", _PROGRAM, str(out)], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stderr, torch.load(out)

    first_log, first = run(0)
    sos = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs if f.endswith(".so")]
    if not sos:
        pytest.skip("the cpp backend compiled no kernel binary here: " + first_log[-500:])
    for so in sos:
        data = bytearray(open(so, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(so, "wb").write(bytes(data))
    second_log, second = run(1)
    assert "failed its check (content hash mismatch)" in second_log and "compiled C++ kernels" in second_log
    third_log, third = run(2)
    assert "compiled C++ kernels" not in third_log and "failed its check" not in third_log, third_log
    assert "loaded from the cache" in third_log
    for a, b, c in zip(first, second, third):
        assert torch.equal(a, b) and torch.equal(a, c)
