#!/usr/bin/env bash
# The README's main command: install what is needed, build pyjit._C, run the quick benchmark suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0 -r requirements-dev.txt
"$PY" setup.py -q build_ext --inplace
"$PY" -m bench "$@"
