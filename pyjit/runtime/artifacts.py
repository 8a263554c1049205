"""Portable cache artifacts: one file holding what a warm start needs, checked before anything
of it reaches the local cache.

:func:`write` collects, for the given frame-record keys, every cache entry a warm start of those
frames reads -- the frame records (guards, replacement code, resume functions), the graph-index
entries they name, the generated wrapper modules those name, the C++ shared objects those modules
load, the autotuning records this process used, and Triton's compiled kernels for the modules'
Triton kernels when Triton's cache holds them -- and writes them as one file::

    MAGIC | u64 big-endian header length | header JSON | blob 0 | blob 1 | ...

The header is ``{"manifest": {...}, "manifest_sha256": <sha256 of the canonical manifest>}``;
the manifest names the versions (Python and its bytecode magic, torch, Triton, pyjit and the
hash of its source, the store's version tag), the machine (GPU architecture where CUDA was in
use, the C++ compiler and CPU the shared objects were built for), the frames, and each blob's
namespace, key, suffix, size and sha256, in file order.

:func:`read` verifies a file completely before :func:`install` writes anything: the magic, the
header, the manifest's own hash, the total length (a truncated file is refused), every blob's
size and hash, the shape of what the warm start will parse (frame records unmarshal, graph
entries are JSON, a module's key is the hash of its source) and the versions. Nothing in the
file is imported, unmarshalled into running code or loaded as a library here; those happen later
through the usual cache loaders, each re-checking the entry's hash. A whole-file mismatch
(damage, other versions, another GPU architecture) raises :class:`~pyjit.errors.ArtifactError`
with the reason; shared objects built by another compiler or for another CPU are left out with
the reason (their kernels are then compiled locally on first use), as are Triton kernels when
this machine's Triton cache is not usable.

The hashes detect damage, not forgery: load files you trust, as you would a wheel.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import os
import struct
import sys
import time
from typing import Any

from ..errors import ArtifactError
from ..logs import get_logger
from . import cache

log = get_logger("cache")

MAGIC = b"PYJITART\n"
FORMAT = 1
_LEN = struct.Struct(">Q")
_MAX_HEADER = 64 << 20


@dataclasses.dataclass
class Blob:
    ns: str
    key: str
    suffix: str
    data: bytes

    def describe(self) -> dict[str, Any]:
        return {"ns": self.ns, "key": self.key, "suffix": self.suffix, "size": len(self.data),
                "sha256": hashlib.sha256(self.data).hexdigest()}


@dataclasses.dataclass
class LoadReport:
    """What :func:`install` did: entries written per namespace, entries already present, and the
    entries left out with the reason (``"cpp/<key>.so: built by ..."``)."""

    path: str
    frames: list[str]
    installed: dict[str, int] = dataclasses.field(default_factory=dict)
    present: int = 0
    refused: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        written = ", ".join(f"{n} {ns}" for ns, n in sorted(self.installed.items())) or "nothing new"
        text = f"pyjit artifacts {self.path}: {len(self.frames)} frame(s); installed {written}"
        if self.present:
            text += f"; {self.present} already in the cache"
        if self.refused:
            text += "; left out: " + "; ".join(self.refused)
        return text


# ----------------------------------------------------------------------------- this machine

def versions() -> dict[str, str]:
    """The versions an artifact must share with the process that loads it."""
    from .. import __version__

    # Python by minor version plus the bytecode format: what marshalled code objects depend on.
    return {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "bytecode": importlib.util.MAGIC_NUMBER.hex(),
            "torch": cache._package_version("torch"), "triton": cache._package_version("triton"),
            "pyjit": __version__, "pyjit source": cache.source_hash(), "store": cache.version_tag()}


def gpu_arch() -> str | None:
    """``sm_XY`` of the current CUDA device when this process already uses CUDA, else None
    (never initialises CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _compiler_fields(cc: Any) -> dict[str, Any]:
    from . import cpp_build

    return {"path": cc.path, "version": cc.version, "openmp": cc.openmp, "flags": cc.flags(), "cpu": cpp_build._cpu_tag()}


# ----------------------------------------------------------------------------- collecting

def _cpp_source(module_source: str) -> str | None:
    """The C++ translation unit a generated wrapper module loads (its ``CPP_SOURCE`` constant),
    read with ``ast`` (the module is not imported)."""
    if "CPP_SOURCE" not in module_source:
        return None
    try:
        tree = ast.parse(module_source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CPP_SOURCE" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _get(ns: str, key: str, suffix: str, missing: list[str]) -> Blob | None:
    data = cache.get_bytes(ns, key, suffix)
    if data is None:
        missing.append(f"{ns}/{key[:12]}{suffix}")
        return None
    return Blob(ns, key, suffix, data)


def collect(frame_keys: list[str]) -> tuple[list[Blob], dict[str, Any], list[str]]:
    """The blobs of ``frame_keys`` and what they depend on; (blobs, compiler fields or None,
    entries that were expected but are not in the cache)."""
    from . import frame_store

    blobs: dict[tuple[str, str, str], Blob] = {}
    missing: list[str] = []

    def add(ns: str, key: str, suffix: str) -> Blob | None:
        if (ns, key, suffix) in blobs:
            return blobs[(ns, key, suffix)]
        blob = _get(ns, key, suffix, missing)
        if blob is not None:
            blobs[(ns, key, suffix)] = blob
        return blob

    graph_keys: list[str] = []
    for key in frame_keys:
        blob = add(frame_store.NAMESPACE, key, ".rec")
        if blob is None:
            continue
        record = frame_store._from_payload(blob.data)
        for entry in record.entries:
            graph_keys.extend(str(k) for k in entry.graph_keys)
    cpp_sources: list[str] = []
    for gkey in dict.fromkeys(graph_keys):
        blob = add("graphs", gkey, ".json")
        if blob is None:
            continue
        module_key = str(json.loads(blob.data)["module_key"])
        module = add("modules", module_key, ".py")
        if module is not None:
            source = _cpp_source(module.data.decode())
            if source is not None:
                cpp_sources.append(source)
    compiler: dict[str, Any] | None = None
    if cpp_sources:
        from . import cpp_build

        cc = cpp_build.compiler()
        if cc is not None:
            compiler = _compiler_fields(cc)
            for source in cpp_sources:
                add("cpp", cpp_build.so_key(source, cc), ".so")
    for ns, key, suffix in sorted(cache.touched):
        if ns == "autotune":
            add(ns, key, suffix)
    return list(blobs.values()), compiler, missing


def write(path: str, frame_keys: list[str], frames: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the artifact file for ``frame_keys`` at ``path`` (atomically); returns its manifest."""
    blobs, compiler, missing = collect(frame_keys)
    from . import triton_artifacts

    triton_files = triton_artifacts.collect([b.data.decode() for b in blobs if b.ns == "modules"])
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
        "machine": {"gpu": gpu_arch(), "compiler": compiler},
        "frames": frames,
        "blobs": [b.describe() for b in blobs],
        "triton": [{"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                   for name, data in triton_files],
        "missing": missing,
    }
    body = _canonical(manifest)
    header = json.dumps({"manifest": manifest, "manifest_sha256": hashlib.sha256(body).hexdigest()}).encode()
    parts = [MAGIC, _LEN.pack(len(header)), header, *(b.data for b in blobs), *(d for _, d in triton_files)]
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    cache.atomic_write(os.path.abspath(path), b"".join(parts))
    if missing:
        log.warning("pyjit: artifacts %s: %d cache entr%s the frames use could not be read (%s); a warm start "
                    "from the file compiles what they held", path, len(missing), "y" if len(missing) == 1 else "ies",
                    ", ".join(missing[:5]))
    log.info("pyjit: wrote artifacts %s: %d frame(s), %d cache entries, %d Triton files", path, len(frames),
             len(blobs), len(triton_files))
    return manifest


def _canonical(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- reading

def read(path: str) -> tuple[dict[str, Any], list[Blob], list[tuple[str, bytes]]]:
    """The verified manifest, blobs and Triton files of ``path``; :class:`ArtifactError` (with
    the reason) for anything damaged, truncated or made by other versions or for another GPU."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ArtifactError(f"pyjit: cannot read artifacts {path}: {e}") from None

    def refuse(reason: str) -> ArtifactError:
        return ArtifactError(f"pyjit: refusing artifacts {path}: {reason}. Nothing was installed; the functions "
                             f"compile as usual. Save the file again (pyjit.cache.save_artifacts) with the same "
                             f"software as the process that loads it.")

    if not data.startswith(MAGIC):
        raise refuse("not a pyjit artifact file (bad magic)")
    start = len(MAGIC) + _LEN.size
    if len(data) < start:
        raise refuse(f"truncated ({len(data)} bytes, shorter than its header)")
    (header_len,) = _LEN.unpack_from(data, len(MAGIC))
    if header_len > _MAX_HEADER or start + header_len > len(data):
        raise refuse(f"truncated or damaged header ({len(data)} bytes, header of {header_len} bytes announced)")
    try:
        header = json.loads(data[start:start + header_len])
        manifest = header["manifest"]
        claimed = str(header["manifest_sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise refuse(f"its header is damaged ({type(e).__name__}: {e})") from None
    if not isinstance(manifest, dict) or hashlib.sha256(_canonical(manifest)).hexdigest() != claimed:
        raise refuse("its manifest does not match the manifest hash (edited or damaged)")
    if manifest.get("format") != FORMAT:
        raise refuse(f"artifact format {manifest.get('format')!r}, this pyjit reads {FORMAT}")
    try:
        specs = [(str(b["ns"]), str(b["key"]), str(b["suffix"]), int(b["size"]), str(b["sha256"]))
                 for b in manifest["blobs"]]
        tspecs = [(str(t["name"]), int(t["size"]), str(t["sha256"])) for t in manifest.get("triton", [])]
    except (KeyError, TypeError, ValueError) as e:
        raise refuse(f"its manifest has the wrong shape ({type(e).__name__}: {e})") from None
    expected = start + header_len + sum(s[3] for s in specs) + sum(t[1] for t in tspecs)
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has extra bytes"
        raise refuse(f"{what} ({len(data)} bytes, the manifest describes {expected})")
    _check_versions(manifest, refuse)
    offset = start + header_len
    blobs: list[Blob] = []
    for ns, key, suffix, size, sha in specs:
        payload = data[offset:offset + size]
        offset += size
        if hashlib.sha256(payload).hexdigest() != sha:
            raise refuse(f"content hash mismatch for {ns}/{key[:12]}{suffix} (the file was modified or damaged)")
        try:
            cache._check_names(ns, key, suffix)
        except cache.CacheKeyError as e:
            raise refuse(str(e)) from None
        blobs.append(Blob(ns, key, suffix, payload))
    triton_files: list[tuple[str, bytes]] = []
    for name, size, sha in tspecs:
        payload = data[offset:offset + size]
        offset += size
        if hashlib.sha256(payload).hexdigest() != sha:
            raise refuse(f"content hash mismatch for Triton file {name} (the file was modified or damaged)")
        triton_files.append((name, payload))
    for blob in blobs:
        reason = _shape_problem(blob)
        if reason is not None:
            raise refuse(f"{blob.ns}/{blob.key[:12]}{blob.suffix}: {reason}")
    return manifest, blobs, triton_files


def _check_versions(manifest: dict[str, Any], refuse: Any) -> None:
    recorded = manifest.get("versions")
    if not isinstance(recorded, dict):
        raise refuse("its manifest has no versions")
    here = versions()
    names = {"python": "Python", "bytecode": "Python bytecode magic", "torch": "torch", "triton": "Triton",
             "pyjit": "pyjit", "pyjit source": "pyjit source hash", "store": "cache store format"}
    for field, label in names.items():
        if recorded.get(field) != here[field]:
            raise refuse(f"made with {label} {recorded.get(field)}, this process has {here[field]}")
    machine = manifest.get("machine") or {}
    gpu = machine.get("gpu")
    if gpu is not None:
        local = _local_gpu_arch()
        if local != gpu:
            raise refuse(f"made on a {gpu} GPU, this machine has {local or 'no CUDA GPU'}")


def _local_gpu_arch() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _shape_problem(blob: Blob) -> str | None:
    """Why ``blob`` is not what its namespace holds (checked without running any of it)."""
    from . import frame_store

    if blob.ns == frame_store.NAMESPACE:
        try:
            frame_store._from_payload(blob.data)
        except Exception as e:  # noqa: BLE001 - any parse failure is a refusal
            return f"not a frame record ({type(e).__name__}: {e})"
    elif blob.ns in ("graphs", "autotune"):
        try:
            value = json.loads(blob.data)
        except ValueError as e:
            return f"not JSON ({e})"
        if blob.ns == "graphs" and not (isinstance(value, dict) and isinstance(value.get("module_key"), str)):
            return "not a graph-index entry"
    elif blob.ns == "modules":
        try:
            source = blob.data.decode()
        except UnicodeDecodeError:
            return "not text"
        if cache.module_key(source) != blob.key:
            return "its key is not the hash of its source"
    elif blob.ns != "cpp":
        return f"unknown namespace {blob.ns!r}"
    return None


# ----------------------------------------------------------------------------- installing

def install(path: str) -> LoadReport:
    """Verify ``path`` (:func:`read`) and write its entries into the local cache."""
    manifest, blobs, triton_files = read(path)
    frames = [f"{f.get('qualname')} ({f.get('filename')}:{f.get('firstlineno')})" for f in manifest.get("frames", [])]
    report = LoadReport(path, frames)
    allowed_so, so_reason = _local_so_keys(manifest, blobs)
    for blob in blobs:
        if blob.ns == "cpp" and blob.key not in allowed_so:
            report.refused.append(f"C++ object cpp/{blob.key[:12]}.so: {so_reason}")
            continue
        if cache.get_bytes(blob.ns, blob.key, blob.suffix) is not None:
            report.present += 1
            continue
        if cache.put_bytes(blob.ns, blob.key, blob.data, blob.suffix) is None:
            raise ArtifactError(f"pyjit: cannot install artifacts {path}: no usable cache directory "
                                f"(see the warning on the `cache` channel)")
        report.installed[blob.ns] = report.installed.get(blob.ns, 0) + 1
    if allowed_so:
        _remember_compiler(manifest)
    if triton_files:
        from . import triton_artifacts

        written, reason = triton_artifacts.install(triton_files)
        if written:
            report.installed["triton"] = written
        if reason:
            report.refused.append(f"Triton kernels: {reason}")
    log.info("%s", report)
    return report


def _local_so_keys(manifest: dict[str, Any], blobs: list[Blob]) -> tuple[set[str], str | None]:
    """Keys of the file's shared objects this machine's compiler would look up (the key of a
    C++ source in one of the file's modules, for the local compiler and CPU), and why the others
    are left out."""
    sos = [b for b in blobs if b.ns == "cpp"]
    if not sos:
        return set(), None
    recorded = (manifest.get("machine") or {}).get("compiler")
    from . import cpp_build

    found = cpp_build._candidates()
    if not found or not isinstance(recorded, dict):
        return set(), "no C++ compiler on this machine" if not found else "the file does not name its compiler"
    local = {"path": found[0], "version": cpp_build._version(found[0]), "cpu": cpp_build._cpu_tag()}
    for field in ("path", "version", "cpu"):
        if recorded.get(field) != local[field]:
            label = {"path": "compiler", "version": "compiler version", "cpu": "CPU (-march=native)"}[field]
            return set(), f"built with {label} {recorded.get(field)!r}, this machine has {local[field]!r}"
    cc = cpp_build.Compiler(found[0], local["version"], bool(recorded.get("openmp")))
    keys = set()
    for blob in blobs:
        if blob.ns == "modules":
            source = _cpp_source(blob.data.decode())
            if source is not None:
                keys.add(cpp_build.so_key(source, cc))
    return keys, "not the shared object of any C++ source in the file for this compiler and its flags"


def _remember_compiler(manifest: dict[str, Any]) -> None:
    """The file's shared objects were built by the local compiler (same path, version, CPU):
    record its check as passed, so the warm process skips the probe compile as well."""
    from . import cpp_build

    recorded = (manifest.get("machine") or {}).get("compiler") or {}
    cpp_build.remember_compiler(cpp_build.Compiler(str(recorded["path"]), str(recorded["version"]),
                                                   bool(recorded.get("openmp"))))
