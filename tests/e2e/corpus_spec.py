"""How a corpus case is described: the :class:`Case` record, input factories and registration.

A case is a callable (a function, a bound method or an ``nn.Module`` built deterministically),
an input factory that builds fresh arguments from a seeded ``torch.Generator``, and what the
frontend must produce for it: the number of graphs (always 1 here) and the number of counted
graph calls (rule: :func:`tests.e2e.support.count_graph_calls`, repeated in ``corpus.py``).

``dynamo_calls`` records torch.compile's count where it legitimately differs from pyjit's
expected count; ``note`` says why. ``check_corpus_with_dynamo.py`` uses both.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

# The cases, in registration order; filled by the corpus_* modules when ``corpus`` imports them.
CASES: list["Case"] = []


class Rand:
    """Factory of one random input from a generator (tensor, or any object via ``make``)."""

    def __init__(self, make: Callable[[torch.Generator], Any]):
        self.make = make

    def __call__(self, g: torch.Generator) -> Any:
        return self.make(g)


def t(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> Rand:
    """A standard-normal float tensor (``requires_grad`` leaves allowed)."""

    def make(g: torch.Generator) -> torch.Tensor:
        x = torch.randn(shape, generator=g).to(dtype)
        return x.requires_grad_(requires_grad) if requires_grad else x

    return Rand(make)


def ints(low: int, high: int, *shape: int) -> Rand:
    """An int64 tensor with values in [low, high)."""
    return Rand(lambda g: torch.randint(low, high, shape, generator=g))


def mask(*shape: int) -> Rand:
    """A random bool tensor."""
    return Rand(lambda g: torch.rand(*shape, generator=g) > 0.5)


def build(spec: Any, g: torch.Generator) -> Any:
    """Instantiate an input spec: ``Rand`` leaves are drawn, containers rebuilt, constants kept."""
    if isinstance(spec, Rand):
        return spec(g)
    if isinstance(spec, tuple) and hasattr(spec, "_fields"):  # namedtuple
        return type(spec)(*(build(v, g) for v in spec))
    if isinstance(spec, (list, tuple)):
        return type(spec)(build(v, g) for v in spec)
    if isinstance(spec, dict):
        return {k: build(v, g) for k, v in spec.items()}
    return spec


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make_fn: Callable[[], Callable[..., Any]]  # builds the callable (modules: seeded init)
    args: tuple[Any, ...]  # input spec, see ``build``
    kwargs: dict[str, Any]
    calls: int  # expected counted graph calls in the single graph
    graphs: int = 1
    dynamo_calls: int | None = None  # torch.compile's count when it legitimately differs
    note: str = ""  # why dynamo_calls differs, or anything surprising about the count
    category: str = ""

    def build_fn(self) -> Callable[..., Any]:
        # Seeded so nn.Module parameters are identical between the pyjit and Dynamo runs.
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            return self.make_fn()

    def make_inputs(self, seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        g = torch.Generator()
        g.manual_seed(seed)
        return build(self.args, g), build(self.kwargs, g)

    @property
    def expected_dynamo_calls(self) -> int:
        return self.calls if self.dynamo_calls is None else self.dynamo_calls


_category = ""


def category(name: str) -> None:
    """Set the category recorded on the cases registered next."""
    global _category
    _category = name


def _register(case_: Case) -> None:
    if any(c.name == case_.name for c in CASES):
        raise ValueError(f"duplicate corpus case name {case_.name!r}")
    CASES.append(case_)


def case(calls: int, *args: Any, kwargs: dict[str, Any] | None = None, name: str | None = None,
         dynamo_calls: int | None = None, note: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a plain function (or any ready callable) as a case."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _register(Case(name or fn.__name__, lambda: fn, args, kwargs or {}, calls,
                       dynamo_calls=dynamo_calls, note=note, category=_category))
        return fn

    return deco


def built_case(calls: int, *args: Any, kwargs: dict[str, Any] | None = None, name: str | None = None,
               dynamo_calls: int | None = None, note: str = "") -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register a builder (called with a fixed seed) returning the callable: modules, bound methods, closures."""

    def deco(builder: Callable[[], Any]) -> Callable[[], Any]:
        _register(Case(name or builder.__name__, builder, args, kwargs or {}, calls,
                       dynamo_calls=dynamo_calls, note=note, category=_category))
        return builder

    return deco
