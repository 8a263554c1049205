"""The order the scheduler emits groups in (``Scheduler._topological``): data dependencies first,
random externs in their program order where that is compatible with them, else data order only.

Built from stand-in groups (only what the ordering reads: names, program indices, the buffers
each node reads, and whether a node is a random extern), so each case is exact and small.
"""
from __future__ import annotations

import types

from pyjit.backend.ir import ExternKernel
from pyjit.backend.scheduler import Scheduler


def _node(name: str, index: int, reads: tuple[str, ...] = (), random: bool = False) -> types.SimpleNamespace:
    buf: object = object()
    if random:
        buf = ExternKernel.__new__(ExternKernel)
        buf.random = True  # type: ignore[attr-defined]
    return types.SimpleNamespace(name=name, index=index, read_names=frozenset(reads), buf=buf)


def _group(*nodes: types.SimpleNamespace) -> types.SimpleNamespace:
    return types.SimpleNamespace(nodes=list(nodes))


def _names(order: list) -> list[str]:
    return [g.nodes[0].name for g in order]


def test_random_ops_keep_program_order_ahead_of_an_early_reader() -> None:
    """``reader`` (first in program order) reads the second random op; the first random op is
    independent. Data order alone would run the second random op before the first (a different
    stream than eager's); the program order of random ops puts the first one ahead."""
    reader = _group(_node("reader", 0, reads=("r2",)))
    r1 = _group(_node("r1", 3, random=True))
    r2 = _group(_node("r2", 5, random=True))
    assert _names(Scheduler._topological([reader, r1, r2])) == ["r1", "r2", "reader"]
    assert _names(Scheduler._dependency_order([reader, r1, r2], {})) == ["r2", "reader", "r1"]


def test_an_impossible_random_order_falls_back_to_data_order() -> None:
    """A fused group feeding the first random op and reading the second: program order of the
    random ops would be a cycle, so the data dependencies alone order the groups."""
    r1 = _group(_node("r1", 0, reads=("g",), random=True))
    g = _group(_node("g", 1, reads=("r2",)))
    r2 = _group(_node("r2", 2, random=True))
    assert _names(Scheduler._topological([r1, g, r2])) == ["r2", "g", "r1"]
