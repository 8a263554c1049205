"""Fixtures shared by the end-to-end tests."""
from __future__ import annotations

import pytest

import pyjit

# In-process tests count frame compiles: a warm-start record that an earlier run of the suite left
# in the shared disk cache would install a frame without tracing it (0 compiles). Warm start has
# its own tests (test_warm_start.py), run in subprocesses with their own caches and settings.
pyjit.config.config.warm_start = False


@pytest.fixture
def fresh_pyjit():
    """A clean pyjit (no compiled entries) with internal errors raised, reset again after."""
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
