"""``pyjit.cache``: inspect and manage pyjit's on-disk cache (public API).

- :func:`info` -- entries and bytes on disk for the running versions, this process's hits,
  misses, corrupt entries removed, evictions and writes, the root in use and the size cap;
- :func:`clear` -- delete every entry (all versions) under the cache root;
- :func:`set_max_bytes` / :func:`max_bytes` -- the size cap (least recently used entries are
  evicted beyond it; default 1 GiB).

The root is ``PYJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pyjit``, else ``~/.cache/pyjit``; see
``docs/cache.md`` for the trust rules, the entry format and the storage API that code
generators use (``pyjit.runtime.cache``). Importing this module does not import torch.
"""
from __future__ import annotations

from typing import Any

from .runtime import cache as _store

__all__ = ["info", "clear", "set_max_bytes", "max_bytes"]


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
