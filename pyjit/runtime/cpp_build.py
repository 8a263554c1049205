"""Building and loading the C++ translation units of the CPU code generator.

Owns everything about the system C++ compiler: finding it (``$CXX``, else ``c++``/``g++``/
``clang++`` on ``PATH``), checking once per process that it works (with OpenMP, else without),
the flags, compiling one translation unit per graph into a shared object, and loading it with
``ctypes``. Shared objects live in pyjit's on-disk cache (namespace ``cpp``) under the sha256 of
the source, the compiler, its flags and the CPU (``-march=native``), so identical kernels never
recompile and a warm start loads the ``.so`` without invoking the compiler. The cache calls of
the C++ path are in :func:`_cached_so` and, for the compiler check's verdict (``.probe`` entries
keyed by the compiler's file and the CPU, so later processes skip the probe compile), in
:func:`remember_compiler` / :func:`_known_compiler`.

The outcome of the compiler check is logged once per process as one line on ``fallbacks``:
the CPU backend chosen and why (``cpp`` with the compiler, its version and OpenMP; or ``eager``,
graphs run as captured, with each candidate's complaint); every compile and every cache load of a
``.so`` is logged on ``cache``.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

from ..config import config
from ..logs import get_logger

log = get_logger("fallbacks")
cache_log = get_logger("cache")

# No -ffast-math (NaN/inf semantics stay eager's); no FP contraction (pointwise chains stay
# bit-identical to eager); no errno/trap bookkeeping (lets floor/round/sqrt vectorize).
_BASE_FLAGS = ["-shared", "-fPIC", "-std=c++17", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-w"]
_PROBE = (
    "#include <cstdint>\n"
    'extern "C" void pyjit_probe(float* x, int64_t n) {\n'
    "    #pragma omp parallel for\n"
    "    for (int64_t i = 0; i < n; ++i) x[i] = __builtin_expf(x[i]);\n"
    "}\n"
)


@dataclasses.dataclass(frozen=True)
class Compiler:
    """A C++ compiler that built and loaded the probe."""

    path: str
    version: str
    openmp: bool

    def flags(self) -> list[str]:
        opt = ["-O1"] if config.cpp_fast_compile else ["-O3", "-march=native"]
        return [*opt, *_BASE_FLAGS, *(["-fopenmp"] if self.openmp else [])]


_lock = threading.Lock()
_checked = False
_compiler: Compiler | None = None
_reason = ""
compile_count = 0  # compiler invocations in this process (tests read it)


def _candidates() -> list[str]:
    names = [os.environ["CXX"]] if os.environ.get("CXX") else []
    names += ["c++", "g++", "clang++"]
    found = []
    for name in names:
        path = shutil.which(name)
        if path is not None and path not in found:
            found.append(path)
    return found


def _try_build(cxx: str, flags: list[str], source: str) -> str | None:
    """Compile ``source`` and load it; None when that works, else the compiler's complaint."""
    with tempfile.TemporaryDirectory(prefix="pyjit-cxx-probe-") as tmp:
        try:
            so = _compile(cxx, flags, source, tmp)
            ctypes.CDLL(so)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return None


def compiler() -> Compiler | None:
    """The working compiler (checked once per process, the result logged on ``fallbacks``)."""
    global _checked, _compiler, _reason
    if _checked:
        return _compiler
    with _lock:
        if _checked:
            return _compiler
        problems = []
        known = _known_compiler()
        if known is not None:
            _compiler = known
            log.info("pyjit CPU backend: cpp (C++ kernels compiled with %s, %s, %s): the probe kernel built and "
                     "loaded with this compiler in an earlier process", known.path, known.version,
                     "with OpenMP" if known.openmp else "without OpenMP", extra={"pyjit_kind": "choice"})
            _checked = True
            return _compiler
        for cxx in _candidates():
            version = _version(cxx)
            for openmp in (True, False):
                flags = ["-O1", *_BASE_FLAGS, *(["-fopenmp"] if openmp else [])]
                err = _try_build(cxx, flags, _PROBE)
                if err is None:
                    _compiler = Compiler(cxx, version, openmp)
                    remember_compiler(_compiler)
                    break
                problems.append(f"{cxx}{' -fopenmp' if openmp else ''}: {err}")
            if _compiler is not None:
                break
        # The choice and its reason: one line on ``fallbacks`` per process (not one per graph).
        # The working-compiler line is informational, not a fallback: its record carries
        # ``pyjit_kind='choice'`` so consumers counting fallbacks (bench) can tell it apart.
        if _compiler is None:
            _reason = "; ".join(problems) or "no C++ compiler on PATH (set $CXX or install g++/clang++)"
            log.info("pyjit CPU backend: eager (CPU graphs run as captured) instead of cpp: no working C++ "
                     "compiler: %s", _reason)
        else:
            omp = "with OpenMP" if _compiler.openmp else "without OpenMP (the compiler rejected -fopenmp)"
            log.info("pyjit CPU backend: cpp (C++ kernels compiled with %s, %s, %s): cpu_backend='cpp' "
                     "(PYJIT_CPU_BACKEND, the default) and the compiler built and loaded the probe kernel",
                     _compiler.path, _compiler.version, omp, extra={"pyjit_kind": "choice"})
        _checked = True
    return _compiler


def _identity(cxx: str) -> dict[str, str] | None:
    """What a probe's verdict depends on: the compiler's path, its file (resolved path, size,
    mtime) and the CPU; None when the file cannot be inspected."""
    try:
        real = os.path.realpath(cxx)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": cxx, "real": real, "size": str(st.st_size), "mtime": str(st.st_mtime_ns), "cpu": _cpu_tag()}


def _verdict_key(identity: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def remember_compiler(cc: Compiler) -> None:
    """Store that ``cc`` built and loaded the probe (namespace ``cpp``, suffix ``.probe``), so
    later processes skip the probe compile (about 0.15 s) for the same compiler file and CPU."""
    from . import cache

    identity = _identity(cc.path)
    if identity is None:
        return
    verdict = {"version": cc.version, "openmp": cc.openmp}
    try:
        cache.put_bytes("cpp", _verdict_key(identity), json.dumps(verdict).encode(), ".probe", overwrite=True)
    except Exception as e:  # noqa: BLE001 - only the next process's probe is at stake
        cache_log.info("pyjit: could not store the C++ compiler check (%s: %s)", type(e).__name__, e)


def _known_compiler() -> Compiler | None:
    """The first candidate compiler, when an earlier process's probe passed with it (same file,
    same CPU) and it still reports the same version."""
    from . import cache

    found = _candidates()
    identity = _identity(found[0]) if found else None
    if identity is None:
        return None
    data = cache.get_bytes("cpp", _verdict_key(identity), ".probe")
    if data is None:
        return None
    try:
        verdict = json.loads(data)
        version, openmp = str(verdict["version"]), bool(verdict["openmp"])
    except (ValueError, KeyError, TypeError):
        return None
    if _version(found[0]) != version:
        return None
    return Compiler(found[0], version, openmp)


def unavailable_reason() -> str:
    """Why :func:`compiler` found nothing (empty when it found one)."""
    compiler()
    return _reason


def _version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.splitlines()[0].strip() if out else "unknown"


def _cpu_tag() -> str:
    """What ``-march=native`` depends on: the machine and its CPU feature flags."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = line
                    break
    except OSError:
        pass
    return f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def _compile(cxx: str, flags: list[str], source: str, workdir: str) -> str:
    global compile_count
    src = os.path.join(workdir, "kernels.cpp")
    so = os.path.join(workdir, "kernels.so")
    with open(src, "w") as f:
        f.write(source)
    compile_count += 1
    proc = subprocess.run([cxx, *flags, src, "-o", so], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cxx)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return so


def so_key(source: str, cc: Compiler) -> str:
    text = "\n".join([cc.path, cc.version, " ".join(cc.flags()), _cpu_tag(), source])
    return hashlib.sha256(text.encode()).hexdigest()


def _cached_so(source: str, cc: Compiler) -> str:
    """Path of the shared object built from ``source``: from the cache, else compiled and stored."""
    from . import cache

    key = so_key(source, cc)
    with cache.entry_lock("cpp", key):
        path = cache.get_path("cpp", key, ".so")
        if path is not None:
            cache_log.info("pyjit: C++ kernels %s loaded from the cache (no compile)", key[:12])
            return path
        tmp = tempfile.mkdtemp(prefix="pyjit-cxx-")
        start = time.perf_counter()
        from ..report import events, progress

        progress.stage("C++ build")
        with events.span("kernel_compile", f"C++ kernels {key[:12]}"):
            built = _compile(cc.path, cc.flags(), source, tmp)
        cache_log.info("pyjit: compiled C++ kernels %s in %.2f s (%s)", key[:12], time.perf_counter() - start,
                       " ".join(cc.flags()))
        stored = cache.put_file("cpp", key, built, ".so")
        if stored is None:  # no usable store: keep the private build
            return built
        shutil.rmtree(tmp, ignore_errors=True)
        return stored


_SCALAR_CTYPES = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}


def load_kernels(source: str, signatures: dict[str, int | tuple[int, tuple[str, ...]]]) -> dict[str, Any]:
    """Build (or fetch) ``source`` and return its kernels as ``ctypes`` functions.

    A signature is ``n`` (the kernel takes ``n`` data pointers: static sizes) or
    ``(n, ("int64_t", "double", ...))``: ``n`` pointers, then scalars of those C types (the size
    symbols of a dynamic-shape graph), which ``ctypes`` then converts from Python ints/floats.
    """
    cc = compiler()
    if cc is None:
        raise RuntimeError(f"no working C++ compiler: {unavailable_reason()}")
    lib = ctypes.CDLL(_cached_so(source, cc))
    import torch  # the kernels use as many OpenMP threads as torch does at load time

    lib.pyjit_set_num_threads(ctypes.c_int(torch.get_num_threads()))
    kernels = {}
    for name, sig in signatures.items():
        nptrs, scalars = (sig, ()) if isinstance(sig, int) else sig
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * nptrs + [_SCALAR_CTYPES[t] for t in scalars]
        fn.restype = None
        kernels[name] = fn
    return kernels
