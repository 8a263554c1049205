"""A module-level counter for tests/e2e/test_replay_once.py: a module whose globals the jitted
code changes both through ``global`` in this module's function and as ``module.VALUE``."""
from __future__ import annotations

VALUE = 0


def bump() -> int:
    global VALUE
    VALUE += 1
    return VALUE
