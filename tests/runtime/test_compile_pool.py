"""Compile worker processes (``pyjit/runtime/compile_pool.py``, ``compile_worker.py``).

Triton compiles for a CUDA target without a GPU, so this runs on the CPU machine: a worker
compiles a request into Triton's on-disk cache, and the same compile in this process is then a
cache hit (no new cache entry). A request that cannot compile is reported, and the worker keeps
serving; a worker that dies fails its task instead of hanging.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

triton = pytest.importorskip("triton")

from pyjit.runtime import cache, compile_pool, fast_launch  # noqa: E402
from pyjit.runtime.launcher import load_module  # noqa: E402

# Shaped like a generated module: the worker runs only its Triton imports and kernels.
SOURCE = '''
import torch
import triton
import triton.language as tl
from pyjit.runtime.triton_compat import libdevice

DEVICE = torch.device("cpu")


@triton.jit
def pool_test_kernel(x, y, n,
                     BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)

    mask = offsets < n
    tl.store(y + offsets, libdevice.exp(tl.load(x + offsets, mask)) * 3, mask)


def call(args):
    return torch.empty_strided((4,), (1,), device=DEVICE)
'''


def _request(tmp_path: Any, block: int) -> tuple[dict[str, Any], Any]:
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    key, path, _ = cache.write_module(SOURCE)
    module = load_module(path, key, False)
    target = GPUTarget("cuda", 90, 32)
    options = CUDABackend(target).parse_options({}).__dict__
    request = {"signature": {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"},
               "constants": {(3,): block}, "attrs": {(0,): [["tt.divisibility", 16]]},
               "options": options, "target": target, "path": path, "module": module.__name__,
               "kernel": "pool_test_kernel", "env": {"TRITON_CACHE_DIR": str(tmp_path / "triton")}}
    return request, fast_launch.unwrap(module.pool_test_kernel)


def _entries(tmp_path: Any) -> set[str]:
    root = tmp_path / "triton"
    return set(os.listdir(root)) if root.exists() else set()


@pytest.fixture
def pool() -> Any:
    p = compile_pool.CompilePool(1)
    yield p
    p.close()


def test_worker_compile_is_a_cache_hit_here(tmp_path: Any, monkeypatch: Any, pool: Any) -> None:
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    request, kernel = _request(tmp_path, 256)
    ok, detail = pool.submit(request).result(timeout=120)
    assert ok, detail
    written = _entries(tmp_path)
    assert written, "the worker wrote nothing to Triton's cache"
    src = ASTSource(kernel, request["signature"], request["constants"], request["attrs"])
    compiled = triton.compile(src, target=request["target"], options=request["options"])
    assert compiled.asm.get("cubin")
    assert _entries(tmp_path) == written  # this process found the worker's result


def test_worker_runs_only_the_kernel_definitions() -> None:
    from pyjit.runtime.compile_worker import kernel_definitions

    kept = kernel_definitions(SOURCE).split("\n")
    lines = SOURCE.split("\n")
    assert len(kept) == len(lines)  # line numbers are part of Triton's cache key
    start = lines.index("@triton.jit")
    end = lines.index("def call(args):")
    assert kept[start:end] == lines[start:end]  # decorator, two-line signature, body with its blank line
    assert "import triton.language as tl" in kept and "from pyjit.runtime.triton_compat import libdevice" in kept
    assert not any("torch" in line for line in kept)  # nothing else runs in the worker


def test_failed_compile_is_reported_and_the_worker_goes_on(tmp_path: Any, pool: Any) -> None:
    request, _ = _request(tmp_path, 256)
    bad = dict(request, kernel="no_such_kernel")
    ok, detail = pool.submit(bad).result(timeout=120)
    assert not ok and "no_such_kernel" in detail
    ok, detail = pool.submit(dict(request, constants={(3,): 128})).result(timeout=120)
    assert ok, detail


def test_dead_worker_fails_its_task(tmp_path: Any, pool: Any) -> None:
    request, _ = _request(tmp_path, 64)
    assert pool.submit(request).result(timeout=120)[0]  # the worker is up
    for worker in pool.workers:
        worker.proc.kill()
        worker.proc.wait()
    ok, detail = pool.submit(dict(request, constants={(3,): 32})).result(timeout=60)
    assert not ok and "compile worker" in detail
    # With no worker left, later tasks fail at once instead of waiting forever.
    ok, detail = pool.submit(dict(request, constants={(3,): 16})).result(timeout=10)
    assert not ok


def test_forked_child_starts_its_own_pool() -> None:
    import os

    compile_pool.get(1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool object must not be reused
        try:
            os.write(write, b"1" if compile_pool._pool is None else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert compile_pool._pool is not None  # the parent keeps its own
