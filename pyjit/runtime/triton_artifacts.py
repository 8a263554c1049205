"""Triton's compiled kernels in portable artifacts (``runtime/artifacts.py``).

Triton keeps what it compiles (cubin/hsaco, PTX, metadata JSON) in its own cache directory,
one folder per compile key: ``<triton cache>/<key>/<kernel name>.<ext>`` plus
``__grp__<kernel name>.json``. A warm start from an artifact finds a generated module's kernels
compiled when those folders are there, since Triton's key depends only on the kernel source,
its specialisation, the target and Triton's version, all equal by the artifact's checks.

:func:`collect` returns the files of every folder that holds a kernel named in the given
generated modules (``@triton.jit`` functions, found with ``ast``; the modules are not imported);
:func:`install` writes them into this machine's Triton cache (folders that already exist are
kept). Names are checked to be plain ``<key>/<file>`` pairs, so nothing is written outside it.
"""
from __future__ import annotations

import ast
import os
import re

from . import cache

_NAME_RE = re.compile(r"^[0-9A-Za-z_\-]{1,128}/[0-9A-Za-z_.\-]{1,200}$")


def triton_cache_dir() -> str | None:
    """Triton's cache directory (its knob, else ``TRITON_CACHE_DIR``, else ``~/.triton/cache``)."""
    try:
        from triton import knobs  # Triton >= 3.4

        directory = knobs.cache.dir
        if directory:
            return str(directory)
    except Exception:  # noqa: BLE001 - older or absent Triton: the documented defaults
        pass
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    home = os.path.expanduser("~")
    return os.path.join(home, ".triton", "cache") if home and home != "~" else None


def kernel_names(module_source: str) -> set[str]:
    """Names of the ``@triton.jit`` functions of a generated module."""
    if "triton.jit" not in module_source:
        return set()
    try:
        tree = ast.parse(module_source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr == "jit" and \
                        isinstance(target.value, ast.Name) and target.value.id == "triton":
                    names.add(node.name)
    return names


def collect(module_sources: list[str]) -> list[tuple[str, bytes]]:
    """``(<key>/<file>, bytes)`` of every Triton cache folder holding one of the modules' kernels."""
    wanted: set[str] = set()
    for source in module_sources:
        wanted |= kernel_names(source)
    root = triton_cache_dir()
    if not wanted or root is None or not os.path.isdir(root):
        return []
    files: list[tuple[str, bytes]] = []
    for key in sorted(os.listdir(root)):
        folder = os.path.join(root, key)
        if os.path.islink(folder) or not os.path.isdir(folder):
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        stems = {n.split(".", 1)[0].removeprefix("__grp__") for n in names}
        if not stems & wanted:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path) or name.startswith(".") or \
                    not _NAME_RE.match(f"{key}/{name}"):
                continue
            with open(path, "rb") as f:
                files.append((f"{key}/{name}", f.read()))
    return files


def install(files: list[tuple[str, bytes]]) -> tuple[int, str | None]:
    """Write ``files`` into this machine's Triton cache; (files written, why some were not)."""
    root = triton_cache_dir()
    if root is None:
        return 0, "no Triton cache directory on this machine"
    written = 0
    for name, data in files:
        if not _NAME_RE.match(name) or ".." in name.split("/"):
            return written, f"unsafe file name {name!r} in the file"
        key, file = name.split("/")
        folder = os.path.join(root, key)
        target = os.path.join(folder, file)
        if os.path.exists(target):
            continue
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            cache.atomic_write(target, data)
        except OSError as e:
            return written, f"cannot write into {root} ({e})"
        written += 1
    return written, None
