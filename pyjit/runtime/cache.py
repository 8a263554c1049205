"""On-disk cache of generated modules: content-hash keyed, versioned, atomic, user-only.

Layout: ``<cache root>/v<FORMAT>-<pyjit>-<torch>-<triton>/modules/<key[:2]>/<key>.py`` where
the key is the sha256 of the module source plus those versions, and ``.../graphs/<key>.json``:
the graph-level index (FX graph + input metadata + settings -> module key and output structure)
that lets a warm start skip tracing and lowering. The root (``pyjit.config``:
PYJIT_CACHE_DIR or the XDG default) is created with mode 0700 (generated modules are code
that gets executed: only the user may write them). Writes go to a temporary file renamed into
place under a file lock, so concurrent processes never see half-written files.
"""
from __future__ import annotations

import hashlib
import os
import tempfile

from ..config import config

FORMAT_VERSION = 1


def _versions() -> str:
    import torch
    import triton

    from .. import __version__
    return f"v{FORMAT_VERSION}-{__version__}-{torch.__version__}-{triton.__version__}".replace("+", "_")


def cache_root() -> str:
    root = config.default_cache_dir()
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def module_key(source: str) -> str:
    return hashlib.sha256((_versions() + "\n" + source).encode()).hexdigest()


_scratch_root: str | None = None


def write_module(source: str) -> tuple[str, str, bool]:
    """Store ``source``; returns (key, path, already_present).

    With ``config.backend_disk_cache`` off, modules go to a private per-process temporary
    directory instead of the persistent cache (nothing is reused across processes).
    """
    global _scratch_root
    key = module_key(source)
    root = cache_root()
    if not config.backend_disk_cache:
        if _scratch_root is None:
            _scratch_root = tempfile.mkdtemp(prefix="pyjit-nocache-")
        root = _scratch_root
    directory = os.path.join(root, _versions(), "modules", key[:2])
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"{key}.py")
    if os.path.exists(path):
        return key, path, True
    from filelock import FileLock

    with FileLock(path + ".lock"):
        if os.path.exists(path):
            return key, path, True
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return key, path, False


def _graph_dir() -> str:
    directory = os.path.join(cache_root(), _versions(), "graphs")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return directory


def read_graph_entry(key: str) -> dict | None:
    import json

    path = os.path.join(_graph_dir(), f"{key}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_graph_entry(key: str, entry: dict) -> None:
    import json

    directory = _graph_dir()
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)
    os.replace(tmp, os.path.join(directory, f"{key}.json"))
