"""Per-frame record store (the storage half of warm start): key fields, value/code encoding,
format versioning, damage handling, trust, and explained misses across processes."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch")  # these tests compile graphs; skipped where torch is absent

from pyjit.runtime import cache, frame_store as fs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCALE = 2.5


def user_fn(x, y):
    return torch.relu(x) * SCALE + y


def _graph_stub(*args):  # stands for the compiled graph: a constant marshal cannot store
    return "graph called"


def _record_for(code: types.CodeType) -> fs.FrameRecord:
    def replacement(x, y):
        return GRAPH(x, y)  # noqa: F821 - the placeholder constant below is what runs

    # Build a replacement code whose first constant is the compiled-graph callable.
    repl = replacement.__code__.replace(co_consts=(_graph_stub,) + replacement.__code__.co_consts[1:])
    stripped, placeholders = fs.strip_constants(repl, lambda v: {"graph": "ab" * 32} if v is _graph_stub else None)
    guards = [{"kind": "tensor", "source": "L['x']", "expected": fs.encode_value((torch.float32, torch.device("cpu"),
                                                                                     (3, 4), 1.5)), "extra": None},
              {"kind": "id", "source": "G['torch'].relu", "expected": fs.encode_value(torch.relu), "extra": None}]
    entry = fs.FrameEntry(guards=guards, code=stripped, placeholders=placeholders, graph_keys=["ab" * 32],
                          resumes=[{"name": "resume_in_user_fn_at_3", "code": stripped, "placeholders": placeholders}])
    return fs.FrameRecord(code.co_qualname, code.co_filename, code.co_firstlineno,
                          {"SCALE": fs.global_identity(SCALE), "torch": fs.global_identity(torch)}, [entry])


def test_roundtrip_restores_code_and_values(cache_dir) -> None:
    record = _record_for(user_fn.__code__)
    assert fs.save(user_fn.__code__, record) is not None
    loaded = fs.load(user_fn.__code__)
    assert loaded is not None and loaded.qualname == "user_fn" and loaded.globals == record.globals
    entry = loaded.entries[0]
    assert fs.decode_value(entry.guards[0]["expected"]) == (torch.float32, torch.device("cpu"), (3, 4), 1.5)
    assert fs.decode_value(entry.guards[1]["expected"]) is torch.relu
    code = fs.restore_constants(entry.code, entry.placeholders,
                                lambda p: _graph_stub if p == {"graph": "ab" * 32} else None)
    assert code.co_consts[0] is _graph_stub
    assert entry.resumes[0]["name"] == "resume_in_user_fn_at_3"
    assert fs.globals_mismatch(loaded.globals, globals()) is None


def test_unstorable_values_are_reported() -> None:
    with pytest.raises(fs.NotSerializable):
        fs.encode_value(lambda: 0)  # an identity from this process: no name to rebuild by
    with pytest.raises(fs.NotSerializable):
        fs.encode_value(torch.ones(2))
    with pytest.raises(fs.NotSerializable):
        fs.strip_constants(user_fn.__code__.replace(co_consts=(object(),)), lambda v: None)
    with pytest.raises(fs.RebuildError):
        fs.decode_value({"ref": ["no_such_module_xyz", "f"]})
    assert "unrebuildable" in fs.global_identity(torch.ones(1))


def test_globals_mismatch_reasons() -> None:
    recorded = {"SCALE": fs.global_identity(2.5), "helper": fs.global_identity(user_fn)}
    assert fs.globals_mismatch(recorded, {"SCALE": 2.5, "helper": user_fn}) is None
    assert "global 'SCALE' changed" in fs.globals_mismatch(recorded, {"SCALE": 3.0, "helper": user_fn})
    assert "no longer defined" in fs.globals_mismatch(recorded, {"helper": user_fn})
    assert "cannot be rebuilt" in fs.globals_mismatch({"t": fs.global_identity(torch.ones(1))}, {"t": 1})


def test_key_depends_on_code_not_on_process_identity() -> None:
    def a(x):
        return x + 1

    def b(x):
        return x + 1

    def c(x):
        return x + 2

    fa, fb, fc = (fs.frame_key_fields(f.__code__) for f in (a, b, c))
    assert {k for k in fa if fa[k] != fb[k]} == {"first line", "function"}
    assert {k for k in fa if fa[k] != fc[k]} == {"constants", "first line", "function"}


@pytest.mark.parametrize("damage", ["truncate", "garble_hash_ok", "bad_magic", "other_format", "wrong_shape"])
def test_damaged_or_foreign_records_are_removed(cache_dir, caplog, monkeypatch, damage: str) -> None:
    code = user_fn.__code__
    path = fs.save(code, _record_for(code))
    key = fs.frame_key(code)
    if damage == "truncate":
        open(path, "r+b").truncate(30)
    elif damage == "garble_hash_ok":  # stored with a valid hash: the payload check must catch it
        cache.put_bytes(fs.NAMESPACE, key, fs.MAGIC + b"\x00garbage", ".rec", overwrite=True)
    elif damage == "bad_magic":
        cache.put_bytes(fs.NAMESPACE, key, b"NOTMAGIC" + open(path, "rb").read()[8:], ".rec", overwrite=True)
    elif damage == "other_format":
        monkeypatch.setattr(fs, "FORMAT", fs.FORMAT + 1)
        fs.save(code, _record_for(code))
        monkeypatch.setattr(fs, "FORMAT", fs.FORMAT - 1)
    else:
        import marshal
        cache.put_bytes(fs.NAMESPACE, key, fs.MAGIC + marshal.dumps((fs.FORMAT, {"entries": 3})), ".rec",
                        overwrite=True)
    with caplog.at_level(logging.INFO, logger="pyjit.cache"):
        assert fs.load(code) is None
    assert any("rebuilt" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert not os.path.exists(path)
    fs.save(code, _record_for(code))
    assert fs.load(code) is not None


def test_record_with_loose_mode_is_not_loaded(cache_dir) -> None:
    path = fs.save(user_fn.__code__, _record_for(user_fn.__code__))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    os.chmod(path, 0o646)
    assert fs.load(user_fn.__code__) is None


_PROCESS = textwrap.dedent("""
    import importlib.util, sys
    from pyjit.runtime import frame_store as fs
    spec = importlib.util.spec_from_file_location("usermod", sys.argv[1])
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    code = mod.f.__code__
    record = fs.load(code)
    if record is None:
        entry = fs.FrameEntry(guards=[], code=code, placeholders=[])
        fs.save(code, fs.FrameRecord(code.co_qualname, code.co_filename, code.co_firstlineno,
                                     {"K": fs.global_identity(mod.K)}, [entry]))
        print("SAVED")
    else:
        print("LOADED", fs.globals_mismatch(record.globals, vars(mod)))
""")


def test_new_process_hits_and_misses_with_reasons(cache_dir, tmp_path) -> None:
    user = tmp_path / "usermod.py"
    env = {**os.environ, "PYJIT_CACHE_DIR": str(cache_dir), "PYJIT_LOGS": "cache", "PYTHONPATH": REPO}

    def run() -> tuple[str, str]:
        p = subprocess.run([sys.executable, "-c", _PROCESS, str(user)], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip(), p.stderr

    user.write_text("K = 3\n\ndef f(x):\n    return x * K + 1\n")
    out, err = run()
    assert out == "SAVED" and "frame cache miss for f" in err and "no earlier entry" in err
    out, err = run()
    assert out == "LOADED None" and "frame cache hit for f" in err
    user.write_text("K = 4\n\ndef f(x):\n    return x * K + 1\n")  # a global it reads changed
    out, err = run()
    assert out.startswith("LOADED global 'K' changed (3 -> 4)"), out
    user.write_text("K = 4\n\ndef f(x):\n    return x * K + 2\n")  # its source changed
    out, err = run()
    assert out == "SAVED" and "differs from the earlier entry in: constants" in err, err
    user.write_text("K = 4\n\n\ndef f(x):\n    return x * K + 2\n")  # moved down one line
    out, err = run()
    assert "differs from the earlier entry in: first line" in err, err
