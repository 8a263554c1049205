"""Trust checks for the on-disk cache: who may have written what pyjit is about to load.

What pyjit reads from its cache is executed (generated modules, kernel binaries, bytecode), so
a directory or file that another user could have written must never be used. This module owns
the rules and nothing else:

- a *trusted directory* is a real directory (not a symlink) owned by the current user and not
  writable by group or others; a *trusted file* is a regular file with the same two properties;
- :func:`secure_root` creates the cache root with mode 0700; when the configured root exists but
  is not trusted (or cannot be created) it logs one warning line on the ``cache`` channel saying
  why and what to do, and returns a fresh private temporary directory instead (or None when even
  that fails, which disables the disk cache, never compilation);
- :func:`secure_subdir` does the same for directories below a trusted root, refusing (None) rather
  than substituting, since the root's owner decides there.

The uid compared against is :func:`current_uid` (tests patch it to simulate another owner).
"""
from __future__ import annotations

import os
import stat
import tempfile

from ..logs import get_logger

log = get_logger("cache")

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def current_uid() -> int:
    """The uid that cache directories and entries must be owned by."""
    return os.getuid()


def untrusted_reason(st: os.stat_result, kind: str = "directory") -> str | None:
    """Why a ``lstat`` result may not be trusted, or None when it may."""
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if stat.S_ISLNK(st.st_mode):
        return f"it is a symbolic link, not a {kind}"
    if not want(st.st_mode):
        return f"it is not a {kind}"
    if st.st_uid != current_uid():
        return f"it is owned by uid {st.st_uid}, not by the current user (uid {current_uid()})"
    mode = stat.S_IMODE(st.st_mode)
    if mode & _WRITABLE_BY_OTHERS:
        return f"it is writable by group or others (mode {mode:04o})"
    return None


def check_path(path: str, kind: str = "directory") -> str | None:
    """``untrusted_reason`` of ``path`` (which must exist; a missing path is a reason too)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"it cannot be inspected ({e.strerror})"
    return untrusted_reason(st, kind)


_private_fallback: str | None = None
_warned: set[str] = set()


def _warn_once(path: str, message: str) -> None:
    if path not in _warned:
        _warned.add(path)
        log.warning("%s", message)


def _make_dir(path: str) -> str | None:
    """Create ``path`` (and parents) with mode 0700; the reason on failure."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"it cannot be created ({e.strerror or e})"
    return None


def secure_root(path: str) -> str | None:
    """The directory to use as the cache root: ``path`` when trusted, else a private fallback.

    A missing ``path`` is created 0700 (the umask cannot widen it: the mode is set explicitly
    on a directory this call created). A refused ``path`` logs one line per process and path.
    """
    existed = os.path.lexists(path)
    reason = _make_dir(path)
    if reason is None and not existed:
        try:
            os.chmod(path, 0o700)
        except OSError as e:
            reason = f"its mode cannot be set ({e.strerror})"
    if reason is None:
        reason = check_path(path)
    if reason is None:
        return path
    fallback = private_fallback()
    where = f"a private temporary directory ({fallback}) for this process" if fallback else "no disk cache"
    fix = (f"`chmod 700 {path}` if you own it, or set PYJIT_CACHE_DIR to a directory only you can write"
           if "writable" in reason else "set PYJIT_CACHE_DIR to a directory that you own and only you can write")
    _warn_once(path, f"pyjit: not using the cache directory {path}: {reason}. Using {where} instead. Fix: {fix}.")
    return fallback


def private_fallback() -> str | None:
    """A fresh 0700 directory private to this process (created once), or None when impossible."""
    global _private_fallback
    if _private_fallback is None or not os.path.isdir(_private_fallback):
        try:
            _private_fallback = tempfile.mkdtemp(prefix="pyjit-cache-private-")
        except OSError:
            return None
    return _private_fallback


def secure_subdir(path: str) -> str | None:
    """Create/check a directory below a trusted root; None (logged once) when it is refused."""
    reason = _make_dir(path)
    if reason is None:
        reason = check_path(path)
    if reason is None:
        return path
    _warn_once(path, f"pyjit: not using the cache directory {path}: {reason}. "
                     f"Fix: remove it (pyjit.cache.clear()) or `chmod 700` it.")
    return None


def reset_warnings() -> None:
    """Forget which refusals were already logged (tests)."""
    _warned.clear()
