"""Buffer lifetimes and reuse for generated wrappers.

:func:`plan_buffers` walks the wrapper's steps in order and decides, for every buffer the
wrapper allocates, whether it can take the storage of a buffer that died earlier (same
device, dtype, size and strides), and after which step each buffer is released (``del``).
Pure bookkeeping on names, so it is testable without a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Hashable, Sequence


@dataclasses.dataclass
class Step:
    """One wrapper step: allocates ``allocs`` (name, layout key), then reads ``reads``."""

    allocs: list[tuple[str, Hashable]]
    reads: set[str]
    # Buffers produced by this step that may alias their inputs (fallback ops): never recycled.
    pinned: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Plan:
    reuse: dict[str, str]  # new buffer -> dead buffer whose storage it takes
    frees: list[list[str]]  # names to ``del`` after each step (pooled buffers are not listed)


def plan_buffers(steps: Sequence[Step], keep: set[str], recyclable: set[str]) -> Plan:
    """``keep``: names alive at the end (outputs and their bases); ``recyclable``: wrapper-allocated buffers."""
    last_use: dict[str, int] = {}
    for i, step in enumerate(steps):
        for name, _ in step.allocs:
            last_use.setdefault(name, i)
        for name in step.reads:
            last_use[name] = i
    pinned = set().union(*[s.pinned for s in steps]) if steps else set()
    pool: dict[Hashable, list[str]] = {}
    key_of: dict[str, Hashable] = {}
    reuse: dict[str, str] = {}
    frees: list[list[str]] = []
    for i, step in enumerate(steps):
        for name, key in step.allocs:
            key_of[name] = key
            free = pool.get(key)
            if name in recyclable and free:
                donor = free.pop()
                reuse[name] = donor
        dead = [n for n, last in last_use.items() if last == i and n not in keep]
        released = []
        for n in sorted(dead):
            if n in recyclable and n not in pinned and n in key_of:
                # Kept under its name until a later allocation takes it (then ``del``-ed there).
                pool.setdefault(key_of[n], []).append(n)
            else:
                released.append(n)
        frees.append(released)
    return Plan(reuse, frees)
