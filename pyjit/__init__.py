"""pyjit: a just-in-time compiler for unmodified PyTorch programs.

Public API (see README.md and docs/getting-started.md): ``pyjit.jit``, ``pyjit.enable``,
``pyjit.reset``, ``pyjit.config``, ``pyjit.backends``, ``pyjit.GraphBreakError``.
The torch-free layers (``pyjit._C``, ``pyjit.bytecode``) import without torch installed,
so this module must not import torch at import time.
"""
from __future__ import annotations

from . import config as config
from . import cache as cache  # noqa: E402 - pyjit.cache: info()/clear() of the disk cache
from .errors import ArtifactError, GraphBreakError, PyjitError, RecompileError
from .logs import set_logs

__version__ = "0.1.0"

if config.config.logs:
    set_logs(config.config.logs)

__all__ = ["config", "GraphBreakError", "PyjitError", "set_logs", "__version__", "jit", "reset", "enable",
           "disable", "backends", "explain", "graph_break", "mark_dynamic", "mark_static",
           "set_stance", "list_backends", "RecompileError", "ArtifactError"]

# The frontend imports torch: load it on first use (``pyjit.jit`` ...), never at import time.
_LAZY = {"jit": "api", "reset": "api", "enable": "api", "disable": "api", "explain": "api", "graph_break": "api",
         "mark_dynamic": "api", "mark_static": "api", "set_stance": "frame.stance", "list_backends": "backends"}


def __getattr__(name: str):  # noqa: ANN202 - module __getattr__ (PEP 562)
    if name == "backends":
        import importlib

        return importlib.import_module(".backends", __name__)
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'pyjit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value
