"""A compile worker process: compiles Triton kernels into Triton's on-disk cache, for the parent.

Started by :mod:`pyjit.runtime.compile_pool` as ``python -m pyjit.runtime.compile_worker``. It
never touches the GPU: a task names a generated module file, the kernel in it and the exact
compile request the parent's Triton would make (signature, constants, attributes, options,
target: captured in the parent by ``runtime/precompile.py``), and the worker runs
``triton.compile`` on it. Triton stores the result under a key of those inputs, so the parent's
own compile of the same launch finds it on disk instead of compiling.

Protocol (binary, on the pipes the parent created): each message is an 8-byte little-endian
length and a pickle. Request: a dict ``{"path", "module", "kernel", "signature", "constants",
"attrs", "options", "target", "env"}`` (``env``: the parent's ``TRITON_*`` variables), or
``{"prewarm": target, "env"}`` (see :func:`prewarm`); reply: ``(True, seconds)`` or ``(False, "Type: message")``.
A request of ``None`` stops the worker. The worker's own stdout is redirected to stderr (the
parent discards it) so that nothing a library prints can corrupt the protocol.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
import time
import types
from typing import Any, BinaryIO

_LEN = struct.Struct("<Q")


def read_message(stream: BinaryIO) -> Any:
    header = stream.read(_LEN.size)
    if len(header) < _LEN.size:
        raise EOFError("compile worker pipe closed")
    (size,) = _LEN.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError("compile worker pipe closed mid-message")
    return pickle.loads(payload)


def write_message(stream: BinaryIO, value: Any) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(payload)) + payload)
    stream.flush()


_modules: dict[str, types.ModuleType] = {}


def _load(path: str, name: str) -> types.ModuleType:
    """The Triton kernels of the generated module at ``path``, under the parent's module name.

    Only the module's Triton imports and its ``@triton.jit`` functions run here
    (:func:`kernel_definitions`): the rest is the wrapper, which imports torch (and may import
    pyjit's backend and sympy), costing a worker seconds on its first task. The code is
    compiled under the file's own name with its line numbers kept, so Triton reads the same
    kernel source and computes the same cache key as the parent.
    """
    module = _modules.get(path)
    if module is None:
        with open(path) as f:
            source = f.read()
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module
        exec(compile(kernel_definitions(source), path, "exec"), module.__dict__)
        _modules[path] = module
    return module


_KEPT_IMPORTS = ("import triton", "from pyjit.runtime.triton_compat import ")


def kernel_definitions(source: str) -> str:
    """``source`` with every line blanked but the Triton imports and the ``@triton.jit``
    functions (decorator, signature, indented body): same line count, same kernel text."""
    lines = source.split("\n")
    kept = [False] * len(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(_KEPT_IMPORTS):
            kept[i] = True
        elif line.startswith("@triton.jit"):
            kept[i] = True
            i += 1
            while i < len(lines) and lines[i].startswith("@"):  # further decorators
                kept[i] = True
                i += 1
            if i < len(lines):  # the def line, then everything indented (or blank) below it
                kept[i] = True
                i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i][0] in " \t)"):
                kept[i] = True
                i += 1
            continue
        i += 1
    return "\n".join(line if keep else "" for line, keep in zip(lines, kept))


_PREWARM_SOURCE = """import triton
import triton.language as tl


@triton.jit
def pyjit_prewarm(x, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offsets, tl.load(x + offsets, offsets < n) + 1, offsets < n)
"""


def prewarm(target: Any) -> float:
    """Compile a tiny kernel for ``target``: Triton's first compile in a process pays about a
    second of one-time set-up (backend discovery, ``ptxas --version``...), which this moves off
    the first real task."""
    import tempfile

    import triton
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    start = time.perf_counter()
    path = os.path.join(tempfile.gettempdir(), f"pyjit_prewarm_{os.getpid()}.py")
    with open(path, "w") as f:
        f.write(_PREWARM_SOURCE)
    try:
        kernel = _load(path, f"pyjit_prewarm_{os.getpid()}").pyjit_prewarm
        options = make_backend(target).parse_options({})
        src = ASTSource(kernel, {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, {})
        _build_launcher(triton.compile(src, target=target, options=options.__dict__))  # driver set-up too
    finally:
        os.unlink(path)
    return time.perf_counter() - start


def _sync_environment(env: dict[str, str]) -> None:
    """The parent's Triton settings (cache directory, cache-invalidating switches) as of this
    task: they may have changed since this worker started."""
    for name in [n for n in os.environ if n.startswith("TRITON_") and n not in env]:
        del os.environ[name]
    os.environ.update(env)


def compile_task(task: dict[str, Any]) -> float:
    """Compile one kernel specialisation into Triton's cache; return the seconds it took."""
    import triton
    from triton.compiler import ASTSource

    _sync_environment(task["env"])
    if "prewarm" in task:
        return prewarm(task["prewarm"])
    start = time.perf_counter()
    kernel = getattr(_load(task["path"], task["module"]), task["kernel"])
    src = ASTSource(kernel, task["signature"], task["constants"], task["attrs"])
    compiled = triton.compile(src, target=task["target"], options=task["options"])
    _build_launcher(compiled)
    return time.perf_counter() - start


def _build_launcher(compiled: Any) -> None:
    """Triton versions that generate a C launcher per signature (3.6) build it with the system
    compiler on the kernel's first launch and cache the library on disk: build it here too.

    The launcher class is taken from the NVIDIA backend module, not from ``driver.active``:
    creating the active driver imports torch in Triton 3.6 (seconds per worker, and 16 workers
    importing it at once slow the parent's own start-up).
    """
    try:
        if getattr(compiled.metadata.target, "backend", None) != "cuda":
            return
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001 - only an optimisation: the parent builds it at launch
        pass


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    while True:
        try:
            task = read_message(requests)
        except EOFError:
            return
        if task is None:
            return
        try:
            reply: tuple[bool, Any] = (True, compile_task(task))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which compiles it itself
            reply = (False, f"{type(e).__name__}: {e}"[:2000])
        write_message(replies, reply)


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    try:
        os.nice(10)  # the parent's tracing and lowering come first
    except OSError:
        pass
    requests = sys.stdin.buffer
    # Import what every task needs while the parent is still tracing its graph; not torch,
    # which no task needs (see _load and _build_launcher) and which takes seconds to import.
    import triton  # noqa: F401
    write_message(replies, ("ready", os.getpid()))
    serve(requests, replies)


if __name__ == "__main__":
    main()
