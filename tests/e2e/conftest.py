"""Fixtures shared by the end-to-end tests."""
from __future__ import annotations

import zlib

import pytest

torch = pytest.importorskip("torch")  # these tests trace and compile torch programs; skipped where torch is absent

import pyjit

# In-process tests count frame compiles: a warm-start record that an earlier run of the suite left
# in the shared disk cache would install a frame without tracing it (0 compiles). Warm start has
# its own tests (test_warm_start.py), run in subprocesses with their own caches and settings.
pyjit.config.config.warm_start = False


@pytest.fixture(autouse=True)
def _seeded_inputs(request):
    """Random inputs drawn from a seed of the test's own id, not from whatever the tests before
    it in the same pytest-xdist worker left in the global generator: a tolerance failure on
    unlucky inputs then repeats instead of coming and going (tests that seed themselves still do)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def fresh_pyjit():
    """A clean pyjit (no compiled entries) with internal errors raised, reset again after."""
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
