"""pyjit's structured exceptions. Every user-facing error names the user's file:line and what to do.

- :class:`PyjitError`: base of everything pyjit raises on purpose.
- :class:`GraphBreakError`: raised under ``fullgraph=True`` (or by the tracer internally as
  :class:`Unsupported`) for a construct pyjit cannot put into a graph. Carries a structured
  :class:`GraphBreak` (kind from the registry, explanation, user location, hint).
- :class:`SkipFrame`: control flow: this frame is not worth compiling (e.g. no tensor work).
- :class:`BackendError`: the graph compiler failed; wraps the original exception.
- :class:`RecompileError`: a recompile under ``pyjit.set_stance("fail_on_recompile")``.
- :class:`ArtifactError`: ``pyjit.cache.load_artifacts`` refused a file, with the reason.
- :class:`LoweringError`: an aten op could not be lowered by pyjit's backend.
- :class:`GatherIndexError`: an out-of-range gathered index in a compiled graph (an ``IndexError``,
  as eager raises).
- :class:`InternalError`: a pyjit bug; caught at the frame boundary and turned into an eager fallback.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class UserLocation:
    """A place in the user's source: where a graph break or guard originated."""

    filename: str
    lineno: int
    function: str = ""
    source_line: str = ""

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}"
        if self.function:
            where += f" in {self.function}"
        if self.source_line:
            where += f"\n    {self.source_line.strip()}"
        return where


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """A structured reason why tracing could not continue (never free text alone)."""

    kind: str  # a pyjit.trace.graph_breaks.BreakKind (a str enum; docs/graph_breaks.md)
    explanation: str
    location: UserLocation | None = None
    inline_chain: tuple[UserLocation, ...] = ()
    hint: str = ""

    def format(self) -> str:
        lines = [f"[{self.kind}] {self.explanation}"]
        if self.location is not None:
            lines.append(f"  at {self.location}")
        for loc in self.inline_chain:
            lines.append(f"  called from {loc}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class PyjitError(Exception):
    """Base class of the errors pyjit raises deliberately."""


class Unsupported(PyjitError):
    """Raised inside the tracer for a construct it cannot trace; becomes a graph break or eager fallback."""

    def __init__(self, graph_break: GraphBreak):
        super().__init__(graph_break.format())
        self.graph_break = graph_break
        # The trace step (see Translator.run) before which a break can be placed: the step of the
        # innermost frame that met it (None: raised outside any frame's step loop).
        self.break_at: int | None = None


class GraphBreakError(Unsupported):
    """Raised to the user under ``fullgraph=True`` where pyjit would otherwise break the graph."""


class SkipFrame(PyjitError):
    """Control flow: leave this frame to the default evaluator (e.g. it does no tensor work)."""


class BackendError(PyjitError):
    """The graph compiler (backend) raised; ``__cause__`` holds the original exception."""


class RecompileError(PyjitError):
    """A jitted frame needed a new compile under ``pyjit.set_stance("fail_on_recompile")``; the
    message names the function's file:line and each cached entry's first failing guard."""


class ArtifactError(PyjitError):
    """``pyjit.cache.load_artifacts`` refused a file (damaged, truncated, or made by other
    versions or for another machine); the message says which check failed."""


class LoweringError(PyjitError):
    """An aten operator could not be lowered to pyjit's loop IR."""

    def __init__(self, target: object, args: Sequence[object] = (), reason: str = ""):
        self.target = target
        msg = f"cannot lower {target}"
        if reason:
            msg += f": {reason}"
        if args:
            msg += f"\n  args: {', '.join(_short(a) for a in args)}"
        super().__init__(msg)


class GraphRefusal(PyjitError):
    """A documented limit of the backend met while lowering a graph (not a bug): the graph runs
    as captured with the reason logged on ``fallbacks``, also under raise_on_internal_error."""


class GatherIndexError(IndexError):
    """An index of a gather (``embedding``, ``index_select``, ``gather``, ``x[idx]``) outside the
    indexed dimension in a compiled graph, where eager raises too (``runtime/checks.py``). The
    program's error, not pyjit's: raised as is, never a reason to stop using the compiled graph."""


class InternalError(PyjitError):
    """A bug in pyjit. The frame runs eagerly and the error is logged (raised under config.raise_on_internal_error)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
