"""What a pyjit failure shows the program: one line on the ``fallbacks`` channel per code object,
no traceback by default; the traceback under ``PYJIT_LOGS=+fallbacks`` or in
``PYJIT_DEBUG_DIR``; raised under ``config.raise_on_internal_error``. And an exception of the
program's own met while tracing is no pyjit failure: nothing logged, the program raises it.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

import pyjit
import pyjit.frame.convert as convert
from pyjit.logs import CHANNELS

from .support import CountingBackend, assert_same

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    loggers = [logging.getLogger(f"pyjit.{ch}") for ch in CHANNELS]
    saved = [(lg, lg.level, list(lg.handlers)) for lg in loggers]
    with pyjit.config.patch(raise_on_internal_error=False):
        yield
    for lg, level, handlers in saved:
        lg.setLevel(level)
        lg.handlers[:] = handlers
    pyjit.reset()


@pytest.fixture
def broken_tracer(monkeypatch):
    """A pyjit bug: the frame converter raises (a two-line message, as many do)."""
    def convert_frame(*args, **kwargs):
        raise RuntimeError("tracer exploded\nsecond line of the message")

    monkeypatch.setattr(convert, "convert_frame", convert_frame)


def affine(x):
    return x * 2 + 1


def _fallback_records(caplog, level=logging.WARNING):
    return [r for r in caplog.records if r.name == "pyjit.fallbacks" and r.levelno >= level]


def test_internal_error_is_one_line_once_per_code_object(broken_tracer, caplog):
    x = torch.randn(3)
    with caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        for _ in range(3):
            # each pyjit.jit registers the code again, and so compiles (and fails) again
            assert_same(affine(x), pyjit.jit(affine, backend=CountingBackend())(x))
    records = _fallback_records(caplog, logging.INFO)
    assert len(records) == 1, [r.getMessage() for r in records]
    msg = records[0].getMessage()
    assert records[0].levelno == logging.WARNING
    assert "\n" not in msg, msg
    assert "Traceback" not in msg
    assert f"{__file__}:{affine.__code__.co_firstlineno}" in msg
    assert "RuntimeError: tracer exploded" in msg and "second line" not in msg
    assert "PYJIT_LOGS=+fallbacks" in msg  # what to do to see more
    assert "runs it eagerly" in msg  # the words other checks (bench, test_dynamic_shapes) look for


def test_verbose_fallbacks_gives_the_traceback(broken_tracer, caplog):
    pyjit.set_logs("+fallbacks")
    assert logging.getLogger("pyjit.fallbacks").isEnabledFor(logging.DEBUG)
    x = torch.randn(3)
    assert_same(affine(x), pyjit.jit(affine, backend=CountingBackend())(x))
    debug = [r.getMessage() for r in caplog.records if r.name == "pyjit.fallbacks" and r.levelno == logging.DEBUG]
    assert len(debug) == 1 and "Traceback (most recent call last)" in debug[0], debug
    assert "tracer exploded" in debug[0]


def test_plain_channel_name_is_not_verbose():
    pyjit.set_logs("fallbacks,guards")
    assert logging.getLogger("pyjit.fallbacks").getEffectiveLevel() == logging.INFO
    pyjit.set_logs("+all")
    assert all(logging.getLogger(f"pyjit.{ch}").getEffectiveLevel() == logging.DEBUG for ch in CHANNELS)
    with pytest.raises(ValueError, match="unknown pyjit log channel 'nope'"):
        pyjit.set_logs("+nope")


def test_debug_dir_gets_the_traceback(broken_tracer, caplog, tmp_path):
    x = torch.randn(3)
    with pyjit.config.patch(debug_dir=str(tmp_path)), caplog.at_level(logging.INFO, logger="pyjit.fallbacks"):
        assert_same(affine(x), pyjit.jit(affine, backend=CountingBackend())(x))
    files = list((tmp_path / "fallbacks").iterdir())
    assert len(files) == 1, files
    text = files[0].read_text()
    assert "Traceback (most recent call last)" in text and "tracer exploded" in text
    (record,) = _fallback_records(caplog)
    assert str(files[0]) in record.getMessage()


def test_raise_on_internal_error_raises(broken_tracer):
    with pyjit.config.patch(raise_on_internal_error=True), pytest.raises(RuntimeError, match="tracer exploded"):
        pyjit.jit(affine, backend=CountingBackend())(torch.randn(3))


def test_default_stderr_has_one_line_and_no_traceback(tmp_path):
    """In a plain program (no logging configured), the user's stderr gets the one line only."""
    child = (
        "import torch, pyjit, pyjit.frame.convert as c\n"
        "def boom(*a, **k):\n"
        "    raise RuntimeError('tracer exploded')\n"
        "c.convert_frame = boom\n"
        "def f(x):\n"
        "    return x + 1\n"
        "for _ in range(3):\n"
        "    pyjit.jit(f)(torch.ones(2))\n"
        "print('CHILD-OK')\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYJIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYJIT_LOGS", None)
    env.pop("PYJIT_DEBUG_DIR", None)
    proc = subprocess.run([sys.executable, "-c", child], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "pyjit failed to compile f" in lines[0] and "Traceback" not in proc.stderr


# -- the program's own exceptions met while tracing --------------------------------------------

def pop_twice(x, lst):
    def inner(a):
        return lst.pop() + a
    return inner(x) + inner(x)


def del_missing(x, d):
    y = x * 2
    del d["missing"]
    return y


@pytest.mark.parametrize("fn, make_args, exc", [
    (pop_twice, lambda: (torch.ones(1), [torch.ones(1)]), IndexError),
    (del_missing, lambda: (torch.ones(1), {"k": 1}), KeyError),
])
def test_program_exception_while_tracing_is_no_pyjit_failure(fn, make_args, exc, caplog, capfd):
    with pytest.raises(exc) as eager:
        fn(*make_args())
    with caplog.at_level(logging.DEBUG, logger="pyjit.fallbacks"):
        for _ in range(2):
            with pytest.raises(exc) as jitted:
                pyjit.jit(fn, backend=CountingBackend())(*make_args())
            assert str(jitted.value) == str(eager.value)
    assert not [r for r in caplog.records if r.name == "pyjit.fallbacks"], caplog.text
    assert "pyjit" not in capfd.readouterr().err


def test_program_exception_is_raised_under_raise_on_internal_error_too():
    # Not a pyjit failure: the flag for pyjit's own errors does not change it.
    with pyjit.config.patch(raise_on_internal_error=True), pytest.raises(IndexError, match="pop from empty list"):
        pyjit.jit(pop_twice, backend=CountingBackend())(torch.ones(1), [torch.ones(1)])
