"""Generated differential test: programs from ``diff_programs.py`` (tensors, Python objects,
aliasing, state across graph breaks) and ``diff_pyonly.py`` (plain Python), run eagerly and under
``pyjit.jit``, must be indistinguishable.

``diff_harness.py`` runs each program (its module loaded twice, three calls on fresh inputs) and
compares after every call: the exception (type, message, which call), stdout, the result,
requires_grad/is_leaf/grad_fn of returned and mutated tensors, aliasing of returned tensors with
the inputs (the same object, a view of one), the arguments' state, the ``G_*`` globals, the class
attributes of the program's classes and the closure cells. Tensors are compared with tight
tolerances (``rtol=1e-6, atol=1e-6``): the counting backend runs the captured graph as is, so any
difference beyond rounding is a frontend bug. A few programs also run on pyjit's default backend.

``python -m tests.e2e.test_differential --stats [--seeds A:B]`` prints how many programs compiled a
graph and every difference (never fails); ``--show SEED`` prints one program.
``python -m bench --suite differential`` counts differences by category.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

import pyjit

from .diff_harness import compare_program, source_of
from .diff_programs import feature_tags, generate_program
from .support import CountingBackend

COUNT = 1000
# Programs (seeds spread over the range) that also run on pyjit's default backend: code generation is
# slower than running the captured graph, so only a sample, with the backend's tolerances.
DEFAULT_BACKEND_SEEDS = (3, 100, 402, 777)
DEFAULT_RTOL = DEFAULT_ATOL = 1e-4


def _check(seed: int, directory: Path, backend: Any, **tolerances: float) -> None:
    diff = compare_program(seed, directory, backend, **tolerances)
    if diff is not None:
        listing = getattr(backend, "graph_listing", lambda: "")()
        raise AssertionError(f"{diff.describe()}\ngraphs so far:\n{listing}")


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("differential")


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


@pytest.mark.parametrize("seed", range(COUNT))
def test_program_matches_eager(seed, program_dir):
    _check(seed, program_dir, CountingBackend())


@pytest.mark.parametrize("seed", DEFAULT_BACKEND_SEEDS)
def test_program_matches_eager_default_backend(seed, program_dir):
    _check(seed, program_dir, "pyjit", rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL)


class _Counter:
    def __init__(self):
        self.count = 0


def _raise_if_big(a, k):
    if k > 4:
        raise ValueError(f"k={k}")
    return a + 1


def _finally_around_raising_callee(x, k, box):
    try:
        with torch.no_grad():
            x = _raise_if_big(x, k)
    finally:
        box.count += 1
    return x


def test_finally_mutation_when_callee_raises_inside_no_grad():
    """The finally block's attribute store must happen when the callee raises inside no_grad."""
    jitted = pyjit.jit(_finally_around_raising_callee, backend=CountingBackend())
    for k in (0, 5):
        seen = []
        for f in (_finally_around_raising_callee, jitted):
            box = _Counter()
            try:
                f(torch.ones(3), k, box)
                raised = None
            except ValueError as e:
                raised = str(e)
            seen.append((raised, box.count))
        assert seen[1] == seen[0], f"k={k}: jit (exception, box.count) {seen[1]} != eager {seen[0]}"


def test_generator_is_deterministic_and_covers_the_grammar():
    assert generate_program(11) == generate_program(11)
    assert generate_program(11) != generate_program(12)
    assert source_of(5) == source_of(5) and "import torch" in source_of(5)
    seen = set().union(*(feature_tags(s) for s in range(COUNT)))
    wanted = {"print", "print_shape", "item", "tensor_branch", "py_branch", "loop", "container", "helper",
              "mut_list", "mut_dict", "mut_attr", "mut_global", "mut_nonlocal", "closure", "no_grad", "try",
              "raise", "inplace", "inplace_input", "requires_grad", "new_object", "aliased_inputs", "break_continue",
              "try_finally", "class_attr", "slots", "dataclass", "dunder", "property", "pop_break", "del_item",
              "inplace_grad", "view_break", "mask", "float_arg", "alias_return"}
    assert wanted <= seen, f"never generated: {wanted - seen}"


# -- statistics (not a test) ------------------------------------------------------------------------

def stats(seeds: range = range(COUNT)) -> None:
    """Print how many programs compiled at least one graph vs ran fully eagerly, and every difference."""
    directory = Path(tempfile.mkdtemp(prefix="pyjit_differential_"))
    compiled, eager_only, failed = [], [], []
    by_tag: dict[str, list[int]] = {}
    for seed in seeds:
        pyjit.reset()
        backend = CountingBackend()
        with pyjit.config.patch(raise_on_internal_error=True):
            diff = compare_program(seed, directory, backend)
        if diff is not None:
            failed.append(diff.describe().splitlines()[0][:200])
        (compiled if backend.frame_count else eager_only).append(seed)
        for tag in feature_tags(seed):
            by_tag.setdefault(tag, [0, 0])[0 if backend.frame_count else 1] += 1
    pyjit.reset()
    print(f"{len(seeds)} programs (seeds {seeds.start}..{seeds.stop - 1}): {len(compiled)} compiled at least one graph, "
          f"{len(eager_only)} ran fully eagerly, {len(failed)} differ from eager")
    print("per construct (tensor programs using it: compiled / fully eager):")
    for tag in sorted(by_tag):
        print(f"  {tag:14s} {by_tag[tag][0]:4d} / {by_tag[tag][1]:4d}")
    for line in failed:
        print(f"  FAIL {line}")
    print(f"programs written to {directory}")


if __name__ == "__main__":
    if "--show" in sys.argv:
        print(source_of(int(sys.argv[sys.argv.index("--show") + 1])))
    else:
        # --seeds A:B explores other seeds than the test's 0..COUNT-1
        first, last = (map(int, sys.argv[sys.argv.index("--seeds") + 1].split(":")) if "--seeds" in sys.argv
                       else (0, COUNT))
        stats(range(first, last))
