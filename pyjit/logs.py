"""pyjit's logging channels on the standard ``logging`` module.

Each channel is a child logger of ``pyjit`` (``pyjit.guards``, ``pyjit.recompiles``...).
Channels named in ``PYJIT_LOGS`` (read by :mod:`pyjit.config`) or passed to
:func:`set_logs` print at INFO level to stderr. Known channels:

``graph_breaks``, ``recompiles``, ``guards``, ``graph_code``, ``bytecode``, ``output_code``,
``perf_hints``, ``fallbacks``, ``compile_times``, ``cache``, ``dynamic`` (symbols created and
specialised while tracing with dynamic shapes). ``all`` enables every channel.
"""
from __future__ import annotations

import logging
import sys

CHANNELS = (
    "graph_breaks",
    "recompiles",
    "guards",
    "graph_code",
    "bytecode",
    "output_code",
    "perf_hints",
    "fallbacks",
    "compile_times",
    "cache",
    "dynamic",
)

_root = logging.getLogger("pyjit")
_handler: logging.Handler | None = None


def get_logger(channel: str) -> logging.Logger:
    """The logger of one channel; unknown names are a programming error."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown pyjit log channel {channel!r}; known: {', '.join(CHANNELS)}")
    return _root.getChild(channel)


def set_logs(spec: str | list[str]) -> None:
    """Enable the given channels (comma-separated string or list) at INFO on stderr; others stay quiet."""
    global _handler
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if "all" in names:
        names = list(CHANNELS)
    for name in names:
        if name not in CHANNELS:
            raise ValueError(f"unknown pyjit log channel {name!r} in PYJIT_LOGS; known: {', '.join(CHANNELS)}")
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    for channel in CHANNELS:
        logger = _root.getChild(channel)
        if channel in names:
            logger.setLevel(logging.INFO)
            if _handler not in logger.handlers:
                logger.addHandler(_handler)
        else:
            logger.setLevel(logging.WARNING)
            if _handler in logger.handlers:
                logger.removeHandler(_handler)
