"""pyjit's logging channels on the standard ``logging`` module.

Each channel is a child logger of ``pyjit`` (``pyjit.guards``, ``pyjit.recompiles``...).
Channels named in ``PYJIT_LOGS`` (read by :mod:`pyjit.config`) or passed to
:func:`set_logs` print at INFO level to stderr; a name with a ``+`` prefix (``+fallbacks``)
prints the channel's verbose form too (DEBUG level: e.g. the traceback of a pyjit failure).
Channels not named keep Python's default: only warnings, which reach stderr through
``logging``'s last-resort handler unless the program configures logging. Known channels:

``graph_breaks``, ``recompiles``, ``guards``, ``graph_code``, ``bytecode``, ``output_code``,
``perf_hints``, ``fallbacks``, ``compile_times``, ``cache``, ``dynamic`` (symbols created and
specialised while tracing with dynamic shapes), ``ddp`` (DistributedDataParallel's buckets and
the subgraphs a DDP-wrapped module's graph is split into). ``all`` enables every channel.
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
    "ddp",
)

_root = logging.getLogger("pyjit")
_handler: logging.Handler | None = None


def get_logger(channel: str) -> logging.Logger:
    """The logger of one channel; unknown names are a programming error."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown pyjit log channel {channel!r}; known: {', '.join(CHANNELS)}")
    return _root.getChild(channel)


def set_logs(spec: str | list[str]) -> None:
    """Enable the given channels (comma-separated string or list) at INFO on stderr, ``+name``
    at DEBUG (the verbose form); others stay quiet."""
    global _handler
    names: list[str] = []
    verbose: set[str] = set()
    for raw in (spec.split(",") if isinstance(spec, str) else spec):
        name = raw.strip()
        if not name:
            continue
        plus = name.startswith("+")
        name = name.lstrip("+").strip()
        group = list(CHANNELS) if name == "all" else [name]
        for ch in group:
            if ch not in CHANNELS:
                raise ValueError(f"unknown pyjit log channel {ch!r} in PYJIT_LOGS; known: {', '.join(CHANNELS)} "
                                 "(prefix a name with + for its verbose form)")
            names.append(ch)
            if plus:
                verbose.add(ch)
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    for channel in CHANNELS:
        logger = _root.getChild(channel)
        if channel in names:
            logger.setLevel(logging.DEBUG if channel in verbose else logging.INFO)
            if _handler not in logger.handlers:
                logger.addHandler(_handler)
        else:
            logger.setLevel(logging.WARNING)
            if _handler in logger.handlers:
                logger.removeHandler(_handler)
