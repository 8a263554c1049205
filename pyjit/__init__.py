"""pyjit: a just-in-time compiler for unmodified PyTorch programs.

Public API (see README.md and docs/getting-started.md): ``pyjit.jit``, ``pyjit.enable``,
``pyjit.reset``, ``pyjit.config``, ``pyjit.backends``, ``pyjit.GraphBreakError``.
The torch-free layers (``pyjit._C``, ``pyjit.bytecode``) import without torch installed,
so this module must not import torch at import time.
"""
from __future__ import annotations

from . import config as config
from .errors import GraphBreakError, PyjitError
from .logs import set_logs

__version__ = "0.1.0"

if config.config.logs:
    set_logs(config.config.logs)

__all__ = ["config", "GraphBreakError", "PyjitError", "set_logs", "__version__"]
