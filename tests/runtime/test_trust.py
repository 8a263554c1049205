"""Trust checks: the cache root is private, refused when others could write it, entries 0600."""
from __future__ import annotations

import logging
import os
import stat

from pyjit.runtime import cache, trust


def _mode(path: os.PathLike | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_root_and_entries_are_private(cache_dir) -> None:
    path = cache.put_bytes("blobs", "abcdef01", b"payload")
    assert path is not None and path.startswith(str(cache_dir))
    assert _mode(cache_dir) == 0o700
    for folder, dirs, files in os.walk(cache_dir):
        for d in dirs:
            assert _mode(os.path.join(folder, d)) == 0o700, d
        for f in files:
            assert _mode(os.path.join(folder, f)) == 0o600, f


def test_world_writable_root_is_refused(cache_dir, caplog) -> None:
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    with caplog.at_level(logging.WARNING, logger="pyjit.cache"):
        path = cache.put_bytes("blobs", "abcdef01", b"payload")
        cache.get_bytes("blobs", "abcdef01")
    assert path is not None and not path.startswith(str(cache_dir))
    assert _mode(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(path))))) == 0o700
    refusals = [r.getMessage() for r in caplog.records if "not using the cache directory" in r.getMessage()]
    assert len(refusals) == 1, refusals  # one line, not one per access
    assert "writable by group or others" in refusals[0] and "chmod 700" in refusals[0]
    assert os.listdir(cache_dir) == []  # nothing was written into the refused directory


def test_other_owner_is_refused(cache_dir, caplog, monkeypatch) -> None:
    cache_dir.mkdir(mode=0o700)
    monkeypatch.setattr(trust, "current_uid", lambda: os.getuid() + 1)
    with caplog.at_level(logging.WARNING, logger="pyjit.cache"):
        root = cache.cache_root()
    assert root != str(cache_dir)
    assert any("owned by uid" in r.getMessage() for r in caplog.records)


def test_entry_of_other_owner_or_group_writable_is_not_loaded(cache_dir, caplog) -> None:
    path = cache.put_bytes("blobs", "abcdef02", b"payload")
    os.chmod(path, 0o666)
    with caplog.at_level(logging.WARNING, logger="pyjit.cache"):
        assert cache.get_bytes("blobs", "abcdef02") is None
    assert any("untrusted" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(path)  # removed; the next put rebuilds it
    assert cache.put_bytes("blobs", "abcdef02", b"payload") == path
    assert cache.get_bytes("blobs", "abcdef02") == b"payload"


def test_group_writable_subdirectory_is_refused(cache_dir) -> None:
    path = cache.put_bytes("blobs", "abcdef03", b"payload")
    shard = os.path.dirname(path)
    os.chmod(shard, 0o770)
    assert cache.get_bytes("blobs", "abcdef03") is None


def test_symlinked_root_is_refused(cache_dir, tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    cache_dir.symlink_to(real)
    assert cache.cache_root() != str(cache_dir)


def test_unusable_root_disables_only_the_cache(tmp_path, caplog, monkeypatch) -> None:
    from pyjit import config as cfg

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(trust, "private_fallback", lambda: None)
    trust.reset_warnings()
    with cfg.patch(cache_dir=str(blocker / "sub")), caplog.at_level(logging.WARNING, logger="pyjit.cache"):
        assert cache.cache_root() is None
        assert cache.put_bytes("blobs", "abcdef04", b"x") is None
        assert cache.get_bytes("blobs", "abcdef04") is None
        key, path, hit = cache.write_module("x = 1\n")  # generated modules still get a file
        assert os.path.exists(path) and not hit
    assert any("no disk cache" in r.getMessage() for r in caplog.records)


def test_symlinked_entry_is_not_followed(cache_dir, tmp_path) -> None:
    path = cache.put_bytes("blobs", "abcdef05", b"payload")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"payload")
    os.chmod(elsewhere, 0o600)
    os.unlink(path)
    os.symlink(elsewhere, path)
    assert cache.get_bytes("blobs", "abcdef05") is None
    assert not os.path.lexists(path) and elsewhere.exists()  # the link is removed, not its target
