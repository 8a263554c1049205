"""docs/layout.md lists every module under pyjit/ and csrc/, and only modules that exist (the map
a newcomer reads first must stay true). Torch-free."""
from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MODULE = re.compile(r"`((?:pyjit|csrc)/[\w/]+\.(?:py|pyi|c|h))`")


def _modules_on_disk() -> set[str]:
    found = set()
    for top in ("pyjit", "csrc"):
        for root, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            for name in files:
                if name.endswith((".py", ".pyi", ".c", ".h")):
                    found.add(os.path.relpath(os.path.join(root, name), ROOT).replace(os.sep, "/"))
    return found


def _modules_in_layout() -> set[str]:
    with open(os.path.join(ROOT, "docs", "layout.md"), encoding="utf-8") as f:
        return set(_MODULE.findall(f.read()))


def test_every_module_is_in_layout() -> None:
    missing = sorted(_modules_on_disk() - _modules_in_layout())
    assert not missing, "add a line for each to docs/layout.md (what the module owns):\n" + "\n".join(missing)


def test_layout_lists_no_module_that_is_gone() -> None:
    gone = sorted(_modules_in_layout() - _modules_on_disk())
    assert not gone, "docs/layout.md lists modules that no longer exist:\n" + "\n".join(gone)
