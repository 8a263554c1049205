#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run the whole suite on the default python3.
# Installs the pinned CPU torch (never an unpinned torch: that would pull GBs of CUDA wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0 -r requirements-dev.txt
"$PY" setup.py -q build_ext --inplace
# Lint first (rules in pyproject.toml): unused imports/names and undefined names fail the run.
"$PY" -m ruff check .
# Types of pyjit/ (settings and the documented per-module exceptions in pyproject.toml).
"$PY" -m mypy
# Two worker processes (pytest-xdist): the CI machine has 2 cores and the suite is CPU-bound
# (tracing, lowering, Triton's interpreter); PYJIT_TEST_WORKERS=0 runs it in one process.
# CI unset, as users run it: pytest takes other code paths then (it builds frozen slots
# dataclasses while explaining a failed assert, frames pyjit sees), and CI would otherwise never
# exercise them. The suite passes either way (run it with CI=true by hand as well).
env -u CI "$PY" -m pytest -q -p no:cacheprovider -n "${PYJIT_TEST_WORKERS:-2}" tests "$@"
