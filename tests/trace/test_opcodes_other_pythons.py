"""The opcode self-check (``opcode_selfcheck.py``) on this interpreter and, through a stand-in
torch, on the other supported CPython versions installed here (3.12, 3.13)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from . import opcode_selfcheck

_HERE = os.path.dirname(os.path.abspath(__file__))
_OTHERS = {
    "3.12": os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3.12"),
    "3.13": os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3.13"),
}


@pytest.mark.parametrize("fn,args", opcode_selfcheck.FUNCTIONS, ids=[f.__name__ for f, _ in opcode_selfcheck.FUNCTIONS])
def test_selfcheck_here(fn, args):
    assert opcode_selfcheck.trace(fn, args) == fn(*args)


@pytest.mark.parametrize("version", sorted(_OTHERS))
def test_selfcheck_on_other_python(version):
    exe = _OTHERS[version]
    if not os.path.exists(exe):
        pytest.skip(f"python {version} not installed at {exe}")
    proc = subprocess.run([exe, os.path.join(_HERE, "opcode_selfcheck.py"), "--stub"], capture_output=True,
                          text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(opcode_selfcheck.FUNCTIONS)}/{len(opcode_selfcheck.FUNCTIONS)} functions agree" in proc.stdout


_ = sys
