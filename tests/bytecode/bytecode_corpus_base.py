"""Shared pieces of the executing corpus: the registry, the side-effect log, helper classes.

``CASES`` holds (function, args, kwargs) triples; ``SNIPPETS`` holds module-level source texts
(run with ``exec`` in a fresh namespace) for opcodes that only occur outside functions or only
on newer versions' syntax.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

LOG: list = []


@dataclasses.dataclass
class Case:
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict

    @property
    def name(self) -> str:
        return f"{self.fn.__module__.rsplit('_', 1)[-1]}.{self.fn.__qualname__}{self.args!r}"[:90]


CASES: list[Case] = []


def case(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function with one argument set (stackable)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(fn, args, kwargs))
        return fn

    return register


@dataclasses.dataclass
class Snippet:
    name: str
    source: str
    mode: str = "exec"
    min_version: tuple[int, int] = (3, 11)


SNIPPETS: list[Snippet] = []


def snippet(name: str, source: str, mode: str = "exec", min_version: tuple[int, int] = (3, 11)) -> None:
    SNIPPETS.append(Snippet(name, source, mode, min_version))


class Box:
    """A small mutable object with operators, compared by value."""

    def __init__(self, v: Any) -> None:
        self.v = v

    def __matmul__(self, other: "Box") -> "Box":
        return Box(self.v * other.v + 1)

    def __imatmul__(self, other: "Box") -> "Box":
        self.v = self.v * other.v - 1
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and self.v == other.v

    def __repr__(self) -> str:
        return f"Box({self.v!r})"


class CM:
    """A context manager that logs enter/exit and tracks nesting like ``torch.no_grad()``.

    ``CM.active`` is the state a body observes; re-entering after an exit (what a resume
    function does) restores the same observable state.
    """

    active: list = []

    def __init__(self, name: str, suppress: bool = False) -> None:
        self.name = name
        self.suppress = suppress

    def __enter__(self) -> "CM":
        CM.active.append(self.name)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        CM.active.pop()
        LOG.append(("exit", self.name, exc_type.__name__ if exc_type else None, tuple(CM.active)))
        return self.suppress


def helper_global(x: Any) -> Any:
    LOG.append(("helper", x))
    return x * 2


def reset_state() -> None:
    LOG.clear()
    CM.active.clear()
