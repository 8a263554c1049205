"""Fixtures shared by the end-to-end tests."""
from __future__ import annotations

import pytest

import pyjit


@pytest.fixture
def fresh_pyjit():
    """A clean pyjit (no compiled entries) with internal errors raised, reset again after."""
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
