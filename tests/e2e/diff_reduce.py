"""Shrink a differing differential program by deleting lines while the difference stays.

``python -m tests.e2e.diff_reduce SEED [--backend eager|default]`` writes the program of ``SEED``,
then repeatedly deletes one line (with the block it opens) wherever the program still compiles and
the first difference keeps its category and kind (``diff_harness.Difference.label``), and prints
the reduced program. Reduction is by lines only: rename and simplify by hand afterwards.
"""
from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import pyjit

from .diff_harness import compare_path, source_of


def _label(src: str, directory: Path, seed: int, backend: str, trial: list[int]) -> str | None:
    trial[0] += 1
    path = directory / f"pyjit_diff_reduce_{seed}_{trial[0]}.py"
    path.write_text(src)
    try:
        compile(src, str(path), "exec")
    except SyntaxError:
        return None
    pyjit.reset()
    tol = 1e-4 if backend == "pyjit" else 1e-6
    try:
        with contextlib.redirect_stderr(io.StringIO()), pyjit.config.patch(raise_on_internal_error=False, warm_start=False):
            diff = compare_path(path, seed, backend, rtol=tol, atol=tol)
    except Exception:  # noqa: BLE001 - a broken candidate (e.g. a deleted definition)
        return None
    return None if diff is None else diff.label


def _block_end(lines: list[str], i: int) -> int:
    indent = len(lines[i]) - len(lines[i].lstrip())
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
        j += 1
    return j


def _deletable(lines: list[str], i: int) -> bool:
    """Top-level definitions as a whole, and any line of ``fn`` (not ``make_inputs``/``build``'s frame)."""
    line = lines[i]
    if not line.strip() or line.lstrip().startswith(("def make_inputs", "def build", "return fn", "def fn(", "def peek",
                                                       "import ")):
        return False
    if not line.startswith(" "):
        return True
    start = next(j for j in range(i, -1, -1) if lines[j].strip() and not lines[j].startswith(" "))
    if lines[start].startswith("def build"):
        return True
    fn_line = next((j for j in range(start, i) if lines[j].lstrip().startswith("def fn(")), None)
    return lines[start].startswith("def fn(") or fn_line is not None


def reduce(seed: int, backend: str = "eager") -> str:
    directory = Path(tempfile.mkdtemp(prefix="pyjit_diff_reduce_"))
    trial = [0]
    lines = source_of(seed).split("\n")
    want = _label("\n".join(lines), directory, seed, backend, trial)
    if want is None:
        raise SystemExit(f"seed {seed} agrees with eager")
    changed = True
    while changed:
        changed = False
        i = len(lines) - 1
        while i >= 0:
            if _deletable(lines, i):
                cand = lines[:i] + lines[_block_end(lines, i):]
                if _label("\n".join(cand), directory, seed, backend, trial) == want:
                    lines, changed = cand, True
            i = min(i - 1, len(lines) - 1)
    return f"# {want}\n" + "\n".join(lines)


if __name__ == "__main__":
    be = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "eager"
    print(reduce(int(sys.argv[1]), "pyjit" if be == "default" else "eager"))
