"""Random tensor programs (``fuzz_programs.py``, fixed seed: the same programs on every run)
under ``pyjit.jit(fullgraph=True)``: each must be captured as one graph, hit the cache on a
second same-shaped call, recompile once for a new dtype, and match eager bit for bit.
"""
from __future__ import annotations

import importlib.util

import pytest
import torch

import pyjit

from .fuzz_programs import generate_module_source
from .support import CountingBackend, assert_same, assert_same_aliasing

COUNT = 80
SEED = 20261121


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    source, names = generate_module_source(COUNT, SEED)
    path = tmp_path_factory.mktemp("fuzz") / "pyjit_fuzz_programs.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("pyjit_fuzz_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _inputs(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(4, 8, generator=g).to(dtype) for _ in range(3))


@pytest.mark.parametrize("index", range(COUNT))
def test_random_program(programs, index):
    fn = getattr(programs, f"prog_{index}")
    backend = CountingBackend()
    jf = pyjit.jit(fn, backend=backend, fullgraph=True)
    for seed in (0, 1):
        args = _inputs(seed)
        try:
            expected, actual = fn(*args), jf(*args)
            assert_same(expected, actual)
            assert_same_aliasing(args, expected, args, actual)
        except AssertionError as e:
            raise AssertionError(f"{e}\nprogram source is in {fn.__code__.co_filename}:{fn.__code__.co_firstlineno}") from None
    assert backend.frame_count == 1, backend.graph_listing()
    args = _inputs(2, torch.float64)
    assert_same(fn(*args), jf(*args))
    assert backend.frame_count == 2


def test_generator_is_deterministic():
    assert generate_module_source(5, 1) == generate_module_source(5, 1)
    assert generate_module_source(5, 1) != generate_module_source(5, 2)
