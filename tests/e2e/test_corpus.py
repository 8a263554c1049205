"""Every corpus case under ``pyjit.jit``: one graph, the expected number of graph calls, results
identical to eager on two sets of random inputs (the second call must hit the cache), and node
metadata (fake ``example_value`` matching the real result, ``stack_trace`` with file and line).

Uses the public API only (``pyjit.jit``, ``pyjit.reset``, ``pyjit.config.patch``). While the
frontend is missing these tests fail with AttributeError/ImportError; they never skip.
"""
from __future__ import annotations

import pytest
import torch

import pyjit

from .corpus import CASES
from .support import CountingBackend, check_graph_meta, run_against_eager


@pytest.fixture(autouse=True)
def _fresh_pyjit():
    # Cases share code objects (closure factories, module classes): start each from an empty cache.
    pyjit.reset()
    with pyjit.config.patch(raise_on_internal_error=True):
        yield
    pyjit.reset()


def test_corpus_is_large_enough():
    assert len(CASES) >= 120
    assert all(c.graphs == 1 for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_counting_backend(case):
    backend = CountingBackend()
    # fullgraph=True: every corpus case must be capturable whole; a failure then names the
    # construct and the user's file:line instead of silently running eagerly.
    run_against_eager(case, lambda fn: pyjit.jit(fn, backend=backend, fullgraph=True))
    assert backend.frame_count == case.graphs, (
        f"{case.name}: expected {case.graphs} graph(s) over two calls with same-shaped inputs, "
        f"got {backend.frame_count}\n{backend.graph_listing()}"
    )
    problems = check_graph_meta(backend.graphs[0], backend.example_inputs[0])
    assert not problems, f"{case.name}: node metadata:\n" + "\n".join(problems) + "\n" + backend.graph_listing()
    assert backend.call_counts[0] == case.calls, (
        f"{case.name}: expected {case.calls} counted graph calls, got {backend.call_counts[0]}"
        f"{' (' + case.note + ')' if case.note else ''}\n{backend.graph_listing()}"
    )


# A spread of cases (every 7th, one per stride across all categories) through the registered
# backends by name and with the default fullgraph=False.
_SAMPLE = CASES[::7]


@pytest.mark.parametrize("case", _SAMPLE, ids=[c.name for c in _SAMPLE])
def test_case_eager_backend_by_name(case):
    run_against_eager(case, lambda fn: pyjit.jit(fn, backend="eager"))


_SPARSE_SAMPLE = CASES[3::14]


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("case", _SPARSE_SAMPLE, ids=[c.name for c in _SPARSE_SAMPLE])
def test_case_under_outer_grad_mode(case, mode):
    # The whole call, input creation included, inside the mode: inference tensors reach the tracer.
    with getattr(torch, mode)():
        run_against_eager(case, lambda fn: pyjit.jit(fn, backend=CountingBackend()))


@pytest.mark.parametrize("case", _SAMPLE, ids=[c.name for c in _SAMPLE])
def test_case_default_backend(case):
    # The default backend ("pyjit") may reorder floating-point work (fusion, reductions): compare
    # with torch.testing's default tolerances instead of bit-identity.
    run_against_eager(case, pyjit.jit, exact=False)


# Frontend + pyjit's own backend end to end: the generated Triton kernels run on CPU through
# Triton's interpreter. The sample above plus the cases whose semantics a lowering can miss
# (autocast regions, in-place updates, integer division, dtype promotion).
_BACKEND_CASES = _SAMPLE + [c for c in CASES if c.name in {
    "autocast_bfloat16_matmul", "autocast_disabled_inside", "inplace_on_temporary", "int_floordiv_mod",
    "sum_of_bool_masks", "setitem_tensor_value", "index_add_inplace", "float16_ops", "int32_ops",
} and c not in _SAMPLE]


@pytest.mark.parametrize("case", _BACKEND_CASES, ids=[c.name for c in _BACKEND_CASES])
def test_case_pyjit_backend_triton_interpret(case):
    with pyjit.config.patch(cpu_backend="triton_interpret"):
        run_against_eager(case, lambda fn: pyjit.jit(fn, backend="pyjit"), exact=False)
