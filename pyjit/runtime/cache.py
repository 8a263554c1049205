"""pyjit's on-disk artefact store: trusted, hash-checked, atomic, locked, size-capped.

Everything pyjit persists goes through this module: generated wrapper modules (``modules``),
the graph-level index (``graphs``, see ``pyjit/backend/graph_cache.py``), per-frame records
(``frames``, see ``frame_store.py``) and binaries of other code generators (for example the CPU
C++ generator's ``.so`` files). The API is small and stable (documented in ``docs/cache.md``):

- ``put_bytes(ns, key, data, suffix)`` / ``get_bytes(ns, key, suffix)``: a blob by key;
- ``put_file(ns, key, src, suffix)`` / ``get_path(ns, key, suffix)``: a file that must stay a
  real file on disk (importable ``.py``, ``dlopen``-able ``.so``); ``get_path`` returns a path
  whose content was just verified;
- ``entry_lock(ns, key)``: a cross-process lock to compile something once;
  ``get_or_build_file(ns, key, suffix, build)`` wraps lock + lookup + build + store;
- ``info()``, ``clear()``, ``set_max_bytes()`` (public through ``pyjit.cache``).

Layout: ``<root>/<version tag>/<ns>/<key[:2]>/<key><suffix>`` plus ``<key><suffix>.meta``
(JSON: format, sha256 and size of the payload), where the root is ``config.default_cache_dir()``
checked by :mod:`trust` and the version tag names the store format and the pyjit, torch, Triton
and Python versions (a new version never reads an old entry). Writes: temporary file in the same
directory (mode 0600), ``fsync``, ``rename``; payload first, then its meta, both under the
shard's lock; an existing valid entry is kept (write-once). Reads verify ownership, mode, size
and sha256; a bad entry is logged on the ``cache`` channel, removed, and reported as a miss, so
the caller rebuilds and rewrites it. Least-recently-used entries (by the meta's mtime, touched on
every hit) are evicted once the store exceeds its cap.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any, Callable, Iterator

from ..config import config
from ..logs import get_logger
from . import trust

log = get_logger("cache")

FORMAT_VERSION = 2
META_SUFFIX = ".meta"
DEFAULT_MAX_BYTES = 1 << 30

_KEY_RE = re.compile(r"^[0-9A-Za-z_\-]{4,128}$")
_NS_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_SUFFIX_RE = re.compile(r"^(\.[A-Za-z0-9_]{1,16})?$")

_state_lock = threading.Lock()
_max_bytes = DEFAULT_MAX_BYTES
stats: Counter[str] = Counter()  # "hits", "misses", "corrupt", "evicted", "writes" (this process)
# (namespace, key, suffix) of every entry this process read or wrote (portable artifacts collect
# the autotuning records a compile used from it).
touched: set[tuple[str, str, str]] = set()
_scratch_root: str | None = None
_last_evict_check = 0.0
_written_since_check = 0


class CacheKeyError(ValueError):
    """A namespace, key or suffix that is not a safe file name component."""


@functools.lru_cache(maxsize=None)
def _package_version(name: str) -> str:
    """The installed version of a distribution, independent of whether it was imported yet.

    Distribution metadata first (the module's ``__version__`` can differ from it, e.g. a local
    ``+cu130`` tag, and must not make a process that imported torch use another folder than one
    that did not), else the module's ``__version__``, else ``none``.
    """
    try:
        from importlib.metadata import version as dist_version
        return str(dist_version(name))
    except Exception:  # noqa: BLE001 - no metadata (source checkout): ask the module
        pass
    try:
        import importlib
        return str(importlib.import_module(name).__version__)
    except Exception:  # noqa: BLE001 - not installed: part of the tag all the same
        return "none"


_version_tag: str | None = None


def version_tag() -> str:
    """The store format plus pyjit/torch/Triton/Python versions: one directory per combination."""
    global _version_tag
    if _version_tag is None:
        from .. import __version__
        py = f"py{sys.version_info[0]}{sys.version_info[1]}"
        tag = f"v{FORMAT_VERSION}-{__version__}-{_package_version('torch')}-{_package_version('triton')}-{py}"
        _version_tag = re.sub(r"[^0-9A-Za-z_.\-]", "_", tag)
    return _version_tag


def versions() -> dict[str, str]:
    """The version fields of :func:`version_tag` by name (for explaining misses)."""
    from .. import __version__
    return {"format": str(FORMAT_VERSION), "pyjit": __version__, "torch": _package_version("torch"),
            "triton": _package_version("triton"), "python": sys.version.split()[0]}


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """sha256 of pyjit's own Python source (every ``.py`` under the package): what frame records
    and portable artifacts are keyed on besides the version numbers, so an edited or other pyjit
    never installs entries another one recorded."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digest.update(os.path.relpath(path, root).encode() + b"\0" + f.read())
    return digest.hexdigest()


def cache_root() -> str | None:
    """The trusted root of the store (created 0700), a private fallback, or None (no disk cache).

    With ``config.backend_disk_cache`` off this is a private per-process scratch directory, so
    nothing is shared across processes.
    """
    global _scratch_root
    if not config.backend_disk_cache:
        if _scratch_root is None or not os.path.isdir(_scratch_root):
            _scratch_root = tempfile.mkdtemp(prefix="pyjit-nocache-")
        return _scratch_root
    return trust.secure_root(config.default_cache_dir())


def _check_names(ns: str, key: str, suffix: str) -> None:
    if not _NS_RE.match(ns) or not _KEY_RE.match(key) or not _SUFFIX_RE.match(suffix):
        raise CacheKeyError(f"unsafe cache name: namespace {ns!r}, key {key!r}, suffix {suffix!r}")


def _shard_dir(ns: str, key: str, create: bool) -> str | None:
    root = cache_root()
    if root is None:
        return None
    directory = os.path.join(root, version_tag(), ns, key[:2])
    if not create and not os.path.isdir(directory):
        return None
    for part in (os.path.join(root, version_tag()), os.path.join(root, version_tag(), ns), directory):
        if trust.secure_subdir(part) is None:
            return None
    return directory


def entry_path(ns: str, key: str, suffix: str = "") -> str | None:
    """Where the entry would live (it may not exist); None when there is no usable store."""
    _check_names(ns, key, suffix)
    directory = _shard_dir(ns, key, create=True)
    return None if directory is None else os.path.join(directory, key + suffix)


# ----------------------------------------------------------------------------- locking

_held = threading.local()  # lock paths this thread holds (re-entrancy)


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    held.add(path)
    try:
        with _os_file_lock(path):
            yield
    finally:
        held.discard(path)


@contextlib.contextmanager
def _os_file_lock(path: str) -> Iterator[None]:
    try:
        from filelock import FileLock
    except ImportError:  # filelock absent: plain fcntl (POSIX); rename-based writes stay atomic
        FileLock = None  # type: ignore[assignment, misc]  # noqa: N806
    if FileLock is not None:
        try:
            lock = FileLock(path, mode=0o600)
        except TypeError:  # filelock < 3.10 has no mode
            lock = FileLock(path)
        with lock:
            yield
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def entry_lock(ns: str, key: str) -> Iterator[None]:
    """Hold the cross-process lock of the shard that ``key`` lives in (no-op without a store).

    Use it to compile an artefact once when several processes may miss at the same time:
    ``with entry_lock(ns, key): path = get_path(...) or build_and_put(...)``. Re-entrant within
    a thread (``put_*`` take it too).
    """
    _check_names(ns, key, "")
    directory = _shard_dir(ns, key, create=True)
    if directory is None:
        yield
        return
    with _file_lock(os.path.join(directory, ".lock")):
        yield


# ----------------------------------------------------------------------------- writing

def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: same-directory temp file (0600), fsync, rename."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _meta_bytes(data: bytes) -> bytes:
    return json.dumps({"format": FORMAT_VERSION, "sha256": hashlib.sha256(data).hexdigest(),
                       "size": len(data)}).encode()


def put_bytes(ns: str, key: str, data: bytes, suffix: str = "", overwrite: bool = False) -> str | None:
    """Store ``data`` under ``(ns, key)``; returns the payload's path, or None without a store.

    Write-once: a valid existing entry is kept unless ``overwrite``.
    """
    path = entry_path(ns, key, suffix)
    if path is None:
        return None
    with entry_lock(ns, key):
        if not overwrite and _verified(path, ns, key, quiet=True) is not None:
            return path
        with contextlib.suppress(OSError):
            os.unlink(path + META_SUFFIX)  # readers see no entry while the payload is replaced
        try:
            atomic_write(path, data)
            atomic_write(path + META_SUFFIX, _meta_bytes(data))
        except OSError as e:
            log.warning("pyjit: could not write cache entry %s/%s (%s); continuing without it", ns, key, e)
            return None
    stats["writes"] += 1
    touched.add((ns, key, suffix))
    _after_write(len(data))
    return path


def put_file(ns: str, key: str, src: str, suffix: str = "", overwrite: bool = False) -> str | None:
    """Copy the file ``src`` into the store (atomically); returns the stored path or None."""
    with open(src, "rb") as f:
        data = f.read()
    return put_bytes(ns, key, data, suffix, overwrite)


# ----------------------------------------------------------------------------- reading

def _read_verified(path: str) -> tuple[bytes | None, str | None]:
    """(payload, None) when the entry at ``path`` is intact, else (None, reason)."""
    try:
        nofollow = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)  # a symlink fails to open (ELOOP)
        with os.fdopen(os.open(path + META_SUFFIX, nofollow), "rb") as f:
            meta_st = os.fstat(f.fileno())
            meta = json.loads(f.read())
        with os.fdopen(os.open(path, nofollow), "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as e:
        return None, f"unreadable ({type(e).__name__}: {e})"
    for s in (meta_st, st):
        reason = trust.untrusted_reason(s, "file")
        if reason is not None:
            return None, f"untrusted: {reason}"
    if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str) or not isinstance(meta.get("size"), int):
        return None, "its metadata has the wrong shape"
    if meta["size"] != len(data):
        return None, f"truncated or extended ({len(data)} bytes, expected {meta['size']})"
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        return None, "content hash mismatch"
    return data, None


def _verified(path: str, ns: str, key: str, quiet: bool = False) -> bytes | None:
    data, reason = _read_verified(path)
    if data is not None:
        return data
    if reason == "missing":
        if os.path.exists(path) or os.path.exists(path + META_SUFFIX):
            reason = "half-written (payload or metadata missing)"
        else:
            return None
    if reason.startswith("untrusted") and quiet:
        return None
    stats["corrupt"] += 1
    log.warning("pyjit: cache entry %s/%s failed its check (%s); removing it, it will be rebuilt", ns, key, reason)
    _remove_paths(path)
    return None


def _remove_paths(path: str) -> None:
    for p in (path + META_SUFFIX, path):
        with contextlib.suppress(OSError):
            os.unlink(p)


def _lookup(ns: str, key: str, suffix: str) -> tuple[str, bytes] | None:
    _check_names(ns, key, suffix)
    directory = _shard_dir(ns, key, create=False)
    if directory is None:
        stats["misses"] += 1
        return None
    path = os.path.join(directory, key + suffix)
    data, reason = _read_verified(path)
    if data is None and (reason != "missing" or os.path.lexists(path) or os.path.lexists(path + META_SUFFIX)):
        # Re-check under the lock: a writer may be between its two renames.
        with entry_lock(ns, key):
            data = _verified(path, ns, key)
    if data is None:
        stats["misses"] += 1
        return None
    stats["hits"] += 1
    touched.add((ns, key, suffix))
    with contextlib.suppress(OSError):
        os.utime(path + META_SUFFIX)  # LRU clock
    return path, data


def get_bytes(ns: str, key: str, suffix: str = "") -> bytes | None:
    """The verified payload of ``(ns, key)``, or None (a miss; bad entries are removed)."""
    found = _lookup(ns, key, suffix)
    return None if found is None else found[1]


def get_path(ns: str, key: str, suffix: str = "") -> str | None:
    """The path of the verified entry ``(ns, key)``, or None (a miss; bad entries are removed)."""
    found = _lookup(ns, key, suffix)
    return None if found is None else found[0]


def get_or_build_file(ns: str, key: str, suffix: str, build: Callable[[str], None]) -> str:
    """The verified path of ``(ns, key)``, calling ``build(dest)`` once across processes on a miss.

    ``build`` writes the artefact to ``dest`` (a path in a fresh private directory); it runs
    under the entry's lock, so concurrent processes missing the same key wait and then reuse the
    first one's result. Without a usable store the private build's path is returned.
    """
    path = get_path(ns, key, suffix)
    if path is not None:
        return path
    with entry_lock(ns, key):
        directory = _shard_dir(ns, key, create=False)
        if directory is not None and _read_verified(os.path.join(directory, key + suffix))[0] is not None:
            return os.path.join(directory, key + suffix)  # built by another process while we waited
        tmpdir = tempfile.mkdtemp(prefix="pyjit-build-")
        dest = os.path.join(tmpdir, key + suffix)
        build(dest)
        stored = put_file(ns, key, dest, suffix, overwrite=True)
        if stored is None:
            return dest
        shutil.rmtree(tmpdir, ignore_errors=True)
        return stored


def remove(ns: str, key: str, suffix: str = "") -> None:
    """Delete one entry (for example one that verified but failed to load)."""
    _check_names(ns, key, suffix)
    directory = _shard_dir(ns, key, create=False)
    if directory is not None:
        _remove_paths(os.path.join(directory, key + suffix))


# ----------------------------------------------------------------------------- size cap, info

def set_max_bytes(limit: int) -> None:
    """Cap the store's size (payload + metadata bytes); least recently used entries go first."""
    global _max_bytes
    if limit < 0:
        raise ValueError(f"cache size cap must be >= 0, got {limit}")
    _max_bytes = int(limit)


def max_bytes() -> int:
    return _max_bytes


def _entries(root: str) -> list[tuple[float, int, str]]:
    """(last use, bytes, payload path) of every entry of the current version under ``root``."""
    found = []
    base = os.path.join(root, version_tag())
    for folder, _, files in os.walk(base):
        for name in files:
            if not name.endswith(META_SUFFIX):
                continue
            meta = os.path.join(folder, name)
            payload = meta[: -len(META_SUFFIX)]
            try:
                mst = os.stat(meta)
                size = mst.st_size + os.stat(payload).st_size
            except OSError:
                continue
            found.append((mst.st_mtime, size, payload))
    return found


def _after_write(nbytes: int) -> None:
    global _last_evict_check, _written_since_check
    with _state_lock:
        _written_since_check += nbytes
        now = time.monotonic()
        if _written_since_check < _max_bytes // 32 and now - _last_evict_check < 10.0 and _last_evict_check:
            return
        _written_since_check = 0
        _last_evict_check = now
    evict()


def evict(limit: int | None = None) -> int:
    """Remove least recently used entries until the store is under ``limit`` (the cap); count."""
    root = cache_root()
    if root is None:
        return 0
    limit = _max_bytes if limit is None else limit
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, payload in sorted(entries):
        if total <= limit:
            break
        with _file_lock(os.path.join(os.path.dirname(payload), ".lock")):  # not under a reader's re-check
            _remove_paths(payload)
        total -= size
        removed += 1
    if removed:
        stats["evicted"] += removed
        log.info("evicted %d least recently used cache entries (cap %d bytes)", removed, limit)
    return removed


def info() -> dict[str, Any]:
    """Entries and bytes on disk (current version), plus this process's hits/misses/corrupt."""
    root = cache_root()
    entries = _entries(root) if root is not None else []
    by_ns: Counter[str] = Counter()
    for _, _, payload in entries:
        by_ns[os.path.basename(os.path.dirname(os.path.dirname(payload)))] += 1
    return {"root": root, "version": version_tag(), "entries": len(entries),
            "bytes": sum(size for _, size, _ in entries), "max_bytes": _max_bytes,
            "by_namespace": dict(by_ns), "hits": stats["hits"], "misses": stats["misses"],
            "corrupt": stats["corrupt"], "evicted": stats["evicted"], "writes": stats["writes"]}


def clear() -> None:
    """Delete every entry of every version under the cache root (the root itself stays)."""
    root = cache_root()
    if root is None:
        return
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("v") and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif name == "explain" and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
    stats.clear()


# ----------------------------------------------------------------------------- generated modules

def module_key(source: str) -> str:
    """The key of a generated wrapper module: sha256 of the versions and its source."""
    return hashlib.sha256((version_tag() + "\n" + source).encode()).hexdigest()


def write_module(source: str) -> tuple[str, str, bool]:
    """Store a generated module; returns (key, path to import, already_present).

    Falls back to a private scratch file when there is no usable store.
    """
    key = module_key(source)
    path = get_path("modules", key, ".py")
    if path is not None:
        return key, path, True
    path = put_bytes("modules", key, source.encode(), ".py")
    if path is None:
        global _scratch_root
        if _scratch_root is None or not os.path.isdir(_scratch_root):
            _scratch_root = tempfile.mkdtemp(prefix="pyjit-nocache-")
        path = os.path.join(_scratch_root, f"{key}.py")
        atomic_write(path, source.encode())
    return key, path, False


# ----------------------------------------------------------------------------- explaining misses

def _neighbour_path(ns: str, family: str) -> str | None:
    root = cache_root()
    if root is None:
        return None
    directory = os.path.join(root, "explain", ns)
    for part in (os.path.join(root, "explain"), directory):
        if trust.secure_subdir(part) is None:
            return None
    return os.path.join(directory, hashlib.sha256(family.encode()).hexdigest()[:40] + ".json")


NEIGHBOURS = 8  # entries remembered per family for explaining misses


def _read_neighbours(path: str | None) -> list[dict[str, Any]]:
    try:
        if path is None or trust.check_path(path, "file") is not None:
            return []
        with open(path, "rb") as f:
            old = json.loads(f.read())
    except (OSError, ValueError):
        return []
    if not isinstance(old, list):
        return []
    return [n for n in old if isinstance(n, dict)]


def record_neighbour(ns: str, family: str, fields: dict[str, str]) -> None:
    """Remember the key fields of the entry just written for ``family`` (a function, a graph name).

    The last few per family are kept outside the version directory so that a later miss, even
    under other versions, can say which field differed. Only ever used for log messages.
    """
    _check_names(ns, "family", "")
    path = _neighbour_path(ns, family)
    if path is None:
        return
    new = {**versions(), **fields}
    with _file_lock(path + ".lock"):
        old = [n for n in _read_neighbours(path) if n != new]
        with contextlib.suppress(OSError):
            atomic_write(path, json.dumps((old + [new])[-NEIGHBOURS:]).encode())


def explain_miss(ns: str, family: str, fields: dict[str, str]) -> str:
    """Why ``fields`` missed: the fields in which the closest recorded entry of ``family`` differs."""
    _check_names(ns, "family", "")
    known = _read_neighbours(_neighbour_path(ns, family))
    if not known:
        return "no earlier entry for it"
    new = {**versions(), **fields}
    best: list[str] | None = None
    for old in reversed(known):  # most recent first: it wins ties
        diffs = []
        for name, value in new.items():
            before = old.get(name)
            if before != value:
                diffs.append(f"{name} version {before} -> {value}" if name in versions() else name)
        if best is None or len(diffs) < len(best):
            best = diffs
    if not best:
        return "an entry with the same key fields was written but is gone (evicted, cleared or corrupt)"
    return "differs from the earlier entry in: " + ", ".join(best)
