"""Build hygiene: pyjit._C imports without torch, and links only symbols libpython exports."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from pyjit import _C


def test_import_does_not_import_torch():
    code = "import sys; import pyjit._C; import pyjit.guards.tree; print('torch' in sys.modules)"
    root = os.path.dirname(os.path.dirname(os.path.abspath(_C.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}, check=True)
    assert out.stdout.strip() == "False"


def _dynamic_symbols(path: str, *flags: str) -> set[str]:
    out = subprocess.run(["nm", "-D", *flags, path], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.skipif(shutil.which("nm") is None or sys.platform != "linux", reason="needs nm on Linux")
def test_no_symbol_hidden_in_libpython():
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY")
    libpython = os.path.join(libdir or "", ldlib or "")
    if not ldlib or not ldlib.endswith(".so") and ".so." not in ldlib or not os.path.exists(libpython):
        pytest.skip(f"no shared libpython to compare with ({libpython})")
    undefined = {s for s in _dynamic_symbols(_C.__file__, "--undefined-only") if s.startswith(("_Py", "Py"))}
    exported = _dynamic_symbols(libpython, "--defined-only")
    missing = sorted(undefined - exported)
    assert not missing, f"pyjit._C needs symbols libpython does not export: {missing}"
    assert undefined, "nm found no Python symbols at all: the check itself is broken"


def test_stub_lists_every_module_attribute():
    import ast

    stub_path = os.path.join(os.path.dirname(os.path.abspath(_C.__file__)), "_C.pyi")
    with open(stub_path) as fh:
        tree = ast.parse(fh.read())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target] if isinstance(t, ast.Name)}
    public = {k for k in dir(_C) if not k.startswith("__")}
    assert public == names
    stub_methods = {f.name for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
                    if isinstance(f, ast.FunctionDef)}
    real_methods = {k for k in vars(_C.GuardNode) if not k.startswith("__")}
    assert real_methods <= stub_methods
