#!/usr/bin/env bash
# Build pyjit._C and run the torch-free tests (C core, bytecode) under every extra CPython
# found (pyenv 3.12.x and 3.13.x). Fails if a found interpreter fails. Each interpreter gets
# its own venv under $PYJIT_CI_VENVS (default ~/.cache/pyjit-ci) with pytest + setuptools only.
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS=${PYJIT_CI_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/pyjit-ci}
TORCHFREE_TESTS=(tests/core tests/bytecode tests/meta)
roots=()
if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)/versions"); fi
roots+=("$HOME/.pyenv/versions")
found=0
for minor in 3.12 3.13; do
  interp=""
  for root in "${roots[@]}"; do
    for cand in "$root"/"$minor".*/bin/python"$minor"; do
      [ -x "$cand" ] && interp="$cand" && break 2
    done
  done
  if [ -z "$interp" ]; then
    interp=$(command -v "python$minor" || true)
  fi
  if [ -z "$interp" ]; then
    echo "== python$minor not found: skipped"
    continue
  fi
  found=$((found + 1))
  echo "== torch-free tests under $interp"
  venv="$VENVS/venv-$minor"
  if [ ! -x "$venv/bin/python" ]; then
    "$interp" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest setuptools
  "$venv/bin/python" setup.py -q build_ext --inplace
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TORCHFREE_TESTS[@]}"
done
echo "== torch-free runs: $found interpreter(s)"
