"""Diagnostics through pyjit's log channels (``pyjit.logs``): guards print as Python
expressions on sources (``L['x']...``), a recompile says which guard failed, a frame that falls
back to eager says why and where (the user's file:line), and generated code leaves the user's
module globals alone.
"""
from __future__ import annotations

import logging
import os
import sys

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same

_THIS_FILE = os.path.basename(__file__)
CHANNELS = ("guards", "recompiles", "graph_breaks", "fallbacks")


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    yield
    pyjit.reset()


@pytest.fixture
def pyjit_logs(caplog):
    for ch in CHANNELS:
        caplog.set_level(logging.INFO, logger=f"pyjit.{ch}")
    return caplog


def _messages(caplog, channel):
    return [r.getMessage() for r in caplog.records if r.name == f"pyjit.{channel}"]


def test_guards_print_as_source_expressions(pyjit_logs):
    def scale_rows(x):
        return x * x.shape[0]

    pyjit.jit(scale_rows, backend=CountingBackend())(torch.randn(4, 8))
    text = "\n".join(_messages(pyjit_logs, "guards"))
    assert "L['x']" in text, f"guards log does not mention L['x']:\n{text}"


def test_recompile_names_the_failing_guard(pyjit_logs):
    def f(x):
        return x + 1

    jf = pyjit.jit(f, backend=CountingBackend())
    jf(torch.randn(3))
    pyjit_logs.clear()
    jf(torch.randn(3, dtype=torch.float64))
    text = "\n".join(_messages(pyjit_logs, "recompiles"))
    assert "L['x']" in text, f"recompiles log does not name the failing guard's source:\n{text}"


def test_eager_fallback_says_where(pyjit_logs):
    def f(x):
        return x + x.sum().item()  # the unsupported line

    jf = pyjit.jit(f, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(f(x), jf(x))
    text = "\n".join(_messages(pyjit_logs, "graph_breaks") + _messages(pyjit_logs, "fallbacks"))
    line = f.__code__.co_firstlineno + 1
    assert f"{_THIS_FILE}:{line}" in text, f"no graph_breaks/fallbacks record names {_THIS_FILE}:{line}:\n{text}"


def test_user_module_globals_are_untouched():
    module = sys.modules[__name__]
    before = set(vars(module))

    def f(x):
        return x.exp()

    jf = pyjit.jit(f, backend=CountingBackend())
    jf(torch.randn(3))
    jf(torch.randn(3, dtype=torch.float64))
    assert set(vars(module)) == before
