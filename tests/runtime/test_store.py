"""The artefact store: atomic write-once entries, hash checks, removal of bad entries, LRU cap,
info/clear, and 8 processes writing one key at once."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

import pyjit
from pyjit.runtime import cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_put_get_roundtrip_and_write_once(cache_dir) -> None:
    path = cache.put_bytes("blobs", "k1234567", b"first", ".bin")
    assert path.endswith("k1234567.bin") and open(path, "rb").read() == b"first"
    assert cache.put_bytes("blobs", "k1234567", b"second", ".bin") == path  # write-once
    assert cache.get_bytes("blobs", "k1234567", ".bin") == b"first"
    cache.put_bytes("blobs", "k1234567", b"second", ".bin", overwrite=True)
    assert cache.get_path("blobs", "k1234567", ".bin") == path
    assert cache.get_bytes("blobs", "k1234567", ".bin") == b"second"
    assert cache.get_bytes("blobs", "missing0") is None
    assert cache.stats["hits"] == 3 and cache.stats["misses"] == 1
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp-")]


def test_put_file_for_binaries(cache_dir, tmp_path) -> None:
    src = tmp_path / "lib.so"
    src.write_bytes(b"\x7fELF" + bytes(range(256)))
    path = cache.put_file("cpp", "abcd" * 16, str(src), ".so")
    assert cache.get_path("cpp", "abcd" * 16, ".so") == path
    assert open(path, "rb").read() == src.read_bytes()
    with cache.entry_lock("cpp", "abcd" * 16):  # re-entrant with put_*
        cache.put_file("cpp", "abcd" * 16, str(src), ".so")


@pytest.mark.parametrize("damage", ["truncate", "zero", "garble", "no_meta", "bad_meta", "meta_shape"])
def test_damaged_entry_is_logged_removed_and_rebuilt(cache_dir, caplog, damage: str) -> None:
    data = b"x = 1\n" * 100
    path = cache.put_bytes("modules", "deadbeef", data, ".py")
    if damage == "truncate":
        open(path, "r+b").truncate(10)
    elif damage == "zero":
        open(path, "wb").close()
    elif damage == "garble":
        with open(path, "r+b") as f:
            f.seek(50)
            f.write(b"\x00\xff")
    elif damage == "no_meta":
        os.unlink(path + cache.META_SUFFIX)
    elif damage == "bad_meta":
        open(path + cache.META_SUFFIX, "wb").write(b"{not json")
    else:
        open(path + cache.META_SUFFIX, "w").write(json.dumps([1, 2]))
    with caplog.at_level(logging.WARNING, logger="pyjit.cache"):
        assert cache.get_bytes("modules", "deadbeef", ".py") is None
    assert any("deadbeef" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(path) and not os.path.exists(path + cache.META_SUFFIX)
    assert cache.stats["corrupt"] == 1
    cache.put_bytes("modules", "deadbeef", data, ".py")
    assert cache.get_bytes("modules", "deadbeef", ".py") == data


def test_unsafe_names_are_rejected(cache_dir) -> None:
    for ns, key in [("blobs", "../../etc"), ("../x", "abcdef00"), ("blobs", "a/b/c/d")]:
        with pytest.raises(cache.CacheKeyError):
            cache.put_bytes(ns, key, b"")


def test_lru_cap_evicts_least_recently_used(cache_dir) -> None:
    import time

    keys = [f"key{i:05d}" for i in range(6)]
    for i, key in enumerate(keys):
        path = cache.put_bytes("blobs", key, bytes(1000))
        os.utime(path + cache.META_SUFFIX, (1000 + i, 1000 + i))  # written in order
    cache.get_bytes("blobs", keys[0])  # the oldest is used again: now the most recent
    assert os.stat(cache.get_path("blobs", keys[0]) + cache.META_SUFFIX).st_mtime > time.time() - 60
    per_entry = cache.info()["bytes"] // 6
    pyjit.cache.set_max_bytes(per_entry * 3)
    assert pyjit.cache.max_bytes() == per_entry * 3
    left = {k for k in keys if cache.get_bytes("blobs", k) is not None}
    assert left == {keys[0], keys[4], keys[5]}
    assert cache.stats["evicted"] == 3


def test_info_and_clear(cache_dir) -> None:
    cache.put_bytes("blobs", "aaaa0000", b"12345")
    cache.put_bytes("graphs", "bbbb0000", b"{}", ".json")
    cache.get_bytes("blobs", "aaaa0000")
    cache.get_bytes("blobs", "cccc0000")
    info = pyjit.cache.info()
    assert info["root"] == str(cache_dir) and info["entries"] == 2 and info["bytes"] > 7
    assert info["by_namespace"] == {"blobs": 1, "graphs": 1}
    assert info["hits"] == 1 and info["misses"] == 1 and info["writes"] == 2
    pyjit.cache.clear()
    info = pyjit.cache.info()
    assert info["entries"] == 0 and info["bytes"] == 0 and info["hits"] == 0
    assert os.path.isdir(cache_dir)


_WRITER = textwrap.dedent("""
    import hashlib, sys, time
    from pyjit.runtime import cache
    data = hashlib.sha256(b"seed").digest() * 20000   # 640 kB: a slow write widens the race
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    path = cache.put_bytes("blobs", "samekey0", data, ".bin")
    got = cache.get_bytes("blobs", "samekey0", ".bin")
    print("OK" if got == data else "BAD", path)
""")


def test_eight_processes_write_one_key(cache_dir) -> None:
    import time

    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYTHONPATH": REPO}
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(start)], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert [o.split()[0] for o, _ in outs] == ["OK"] * 8, outs
    assert len({o.split()[1] for o, _ in outs}) == 1
    info = cache.info()
    assert info["entries"] == 1
    shard = os.path.dirname(outs[0][0].split()[1])
    assert sorted(os.listdir(shard)) == [".lock", "samekey0.bin", "samekey0.bin.meta"]


def test_without_filelock_the_fcntl_lock_is_used(cache_dir, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "filelock", None)  # import filelock -> ImportError
    path = cache.put_bytes("blobs", "nolock00", b"data")
    with cache.entry_lock("blobs", "nolock00"):
        assert cache.get_bytes("blobs", "nolock00") == b"data"
    assert os.path.exists(os.path.join(os.path.dirname(path), ".lock"))


def test_threads_writing_one_key(cache_dir) -> None:
    import threading

    results: list[bytes | None] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        cache.put_bytes("blobs", "threaded", b"same bytes" * 1000)
        results.append(cache.get_bytes("blobs", "threaded"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [b"same bytes" * 1000] * 8 and cache.info()["entries"] == 1


def test_public_module_imports_without_torch(cache_dir) -> None:
    code = "import sys, pyjit; pyjit.cache.info(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": REPO, "PYJIT_CACHE_DIR": str(cache_dir)})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None,
                    reason="imports torch and triton after the first version_tag()")
def test_version_tag_does_not_depend_on_what_was_imported() -> None:
    code = ("from pyjit.runtime import cache; a = cache.version_tag(); import torch, triton; "
            "cache._version_tag = None; cache._package_version.cache_clear(); print(a == cache.version_tag(), a)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0 and out.stdout.split()[0] == "True", (out.stdout, out.stderr)
    assert out.stdout.split()[1] == cache.version_tag()


_BUILDER = textwrap.dedent("""
    import os, sys, time
    from pyjit.runtime import cache
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))

    def build(dest):
        with open(sys.argv[2], "a") as log:
            log.write("built\\n")
        time.sleep(0.3)  # a slow compiler: the others must wait, not build again
        with open(dest, "wb") as f:
            f.write(b"\\x7fELF fake shared object")

    path = cache.get_or_build_file("cpp", "feedface" * 8, ".so", build)
    print("OK" if open(path, "rb").read() == b"\\x7fELF fake shared object" else "BAD")
""")


def test_get_or_build_file_builds_once_across_processes(cache_dir, tmp_path) -> None:
    import time

    log = tmp_path / "builds.txt"
    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYTHONPATH": REPO}
    start = str(time.time() + 3.0)
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, start, str(log)], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [o.strip() for o, _ in outs] == ["OK"] * 4, outs
    assert log.read_text() == "built\n"
    assert cache.get_path("cpp", "feedface" * 8, ".so") is not None
