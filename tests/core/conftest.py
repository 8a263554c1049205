"""Shared fixtures for the C-core tests: every test starts and ends with pristine _C state."""
from __future__ import annotations

import pytest

from pyjit import _C


@pytest.fixture(autouse=True)
def clean_c_state():
    _C.set_callback(None)
    _C.set_run_only_mode(False)
    _C.reset()
    _C.set_entry_limit(8)
    _C.set_limit_callback(None)
    yield
    _C.set_callback(None)
    _C.set_run_only_mode(False)
    _C.reset()
    _C.set_entry_limit(8)
    _C.set_limit_callback(None)
