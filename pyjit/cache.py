"""``pyjit.cache``: inspect and manage pyjit's on-disk cache (public API).

- :func:`info` -- entries and bytes on disk for the running versions, this process's hits,
  misses, corrupt entries removed, evictions and writes, the root in use and the size cap;
- :func:`clear` -- delete every entry (all versions) under the cache root;
- :func:`set_max_bytes` / :func:`max_bytes` -- the size cap (least recently used entries are
  evicted beyond it; default 1 GiB);
- :func:`save_artifacts` / :func:`load_artifacts` -- one portable file with everything a warm
  start of the frames compiled so far needs, and its verified installation into another cache
  (``pyjit/runtime/artifacts.py``; ``docs/warm_start.md``).

The root is ``PYJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pyjit``, else ``~/.cache/pyjit``; see
``docs/cache.md`` for the trust rules, the entry format and the storage API that code
generators use (``pyjit.runtime.cache``). Importing this module does not import torch.
"""
from __future__ import annotations

from typing import Any

from .runtime import cache as _store

__all__ = ["info", "clear", "set_max_bytes", "max_bytes", "save_artifacts", "load_artifacts"]


def info() -> dict[str, Any]:
    """``{"root", "version", "entries", "bytes", "max_bytes", "by_namespace", "hits", "misses",
    "corrupt", "evicted", "writes"}`` -- disk totals for this version, counters for this process."""
    return _store.info()


def clear() -> None:
    """Delete every cached entry under the cache root (compiled functions in memory keep working)."""
    _store.clear()


def set_max_bytes(limit: int) -> None:
    """Cap the cache's size in bytes; beyond it, least recently used entries are evicted."""
    _store.set_max_bytes(limit)
    _store.evict()


def max_bytes() -> int:
    """The current size cap in bytes."""
    return _store.max_bytes()


def save_artifacts(path: str, *, frames: Any = None) -> dict[str, Any]:
    """Write one file at ``path`` holding what a warm start of the frames compiled so far needs:
    frame records (guards, replacement code, resume functions), compiled graph entries,
    generated modules, C++ shared objects, autotuning records and Triton's compiled kernels,
    with a manifest of versions and content hashes. ``frames``: functions, jitted functions or
    modules (with the resume functions of their graph breaks) instead of every recorded frame.
    Returns the manifest. Needs the warm start (``pyjit.config.warm_start``) and the disk cache."""
    from .config import config
    from .errors import PyjitError
    from .frame import warm_start
    from .runtime import artifacts

    if not warm_start.active():
        raise PyjitError("pyjit.cache.save_artifacts needs frame records: turn on pyjit.config.warm_start "
                         "(PYJIT_WARM_START=1) and the disk cache (config.backend_disk_cache) before compiling")
    found = warm_start.artifact_frames(None if frames is None else list(frames))
    if not found:
        raise PyjitError(f"pyjit.cache.save_artifacts: no compiled frame with a record in the cache "
                         f"({config.default_cache_dir()}) to save; only frames compiled by pyjit's own backend "
                         f"are recorded (PYJIT_LOGS=cache says why a frame was not)")
    described = [{"qualname": c.co_qualname, "filename": c.co_filename, "firstlineno": c.co_firstlineno, "key": k}
                 for c, k in found]
    return artifacts.write(path, [k for _, k in found], described)


def load_artifacts(path: str) -> Any:
    """Verify the file ``path`` written by :func:`save_artifacts` and install its entries into
    this process's cache; later calls of its frames warm-start without tracing or compiling.
    Raises :class:`pyjit.ArtifactError` with the reason for a damaged or truncated file or one
    made by other versions or for another GPU; returns a report (entries installed, and those
    left out with the reason, e.g. C++ objects built by another compiler)."""
    from .runtime import artifacts

    return artifacts.install(path)
