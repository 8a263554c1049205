import pytest

pytest.importorskip("torch")  # these tests trace and compile torch programs; skipped where torch is absent

import pyjit


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()
