#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run the whole suite on the default python3.
# Installs the pinned CPU torch (never an unpinned torch: that would pull GBs of CUDA wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0 -r requirements-dev.txt
"$PY" setup.py -q build_ext --inplace
# Two worker processes (pytest-xdist): the CI machine has 2 cores and the suite is CPU-bound
# (tracing, lowering, Triton's interpreter); PYJIT_TEST_WORKERS=0 runs it in one process.
"$PY" -m pytest -q -p no:cacheprovider -n "${PYJIT_TEST_WORKERS:-2}" tests "$@"
