"""Functions that import inside their bodies (tests/e2e/test_long_tail_calls.py)."""


def relative_module(x):
    from . import helpers
    return helpers.double(x) + 1


def relative_name(x):
    from .helpers import double
    return double(x) - 1
