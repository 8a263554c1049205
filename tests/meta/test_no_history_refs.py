"""Code, tests and docs say the reason, not the history: no issue numbers, numbered runs
(a numbered stop, wave or run), "the seeds", or documents outside the repository (DESIGN.md).
A reader of this tree cannot look those up; the reason itself can be written down. Torch-free."""
from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIS = os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")

# Case-insensitive extended regexes for `git grep`; each names something a newcomer cannot resolve.
PATTERNS = [
    r"\bissues? #?[0-9]",        # an issue number, or a range of them
    r"\bissue #",
    r"\b(this|that|a later|the next) issue\b",
    r"\bwave ?[0-9]",            # numbered work waves
    r"\bstops? ?[0-9]+\b",       # numbered runs (the logs of a numbered stop)
    r"_stop[0-9]+",              # folders named after them
    r"\bround [0-9]",
    r"\bruns? #[0-9]",
    r"\bthe seeds\b",
    r"\bseeds'",
    r"\bDESIGN\.md\b",           # a design document that is not in this repository
]


def test_no_history_references_in_tracked_files() -> None:
    args = ["git", "grep", "-nIiE", "-e", PATTERNS[0]]
    for p in PATTERNS[1:]:
        args += ["-e", p]
    try:
        out = subprocess.run(args + ["--", ".", f":!{THIS}"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        pytest.skip("git is not installed")
    if out.returncode not in (0, 1):
        pytest.skip(f"not a git checkout: {out.stderr.strip()}")
    assert out.stdout == "", "write the reason instead of the history reference:\n" + out.stdout
