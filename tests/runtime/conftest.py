"""Fixtures for cache tests: each test gets its own empty cache root and fresh counters."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from pyjit import config as cfg
from pyjit.runtime import cache, trust


@pytest.fixture
def cache_dir(tmp_path: Any) -> Iterator[Any]:
    root = tmp_path / "pyjit-cache"
    trust.reset_warnings()
    cache.stats.clear()
    with cfg.patch(cache_dir=str(root), backend_disk_cache=True):
        yield root
    trust.reset_warnings()
    cache.set_max_bytes(cache.DEFAULT_MAX_BYTES)
