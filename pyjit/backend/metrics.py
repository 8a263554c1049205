"""Counters describing what the backend produced, for tests and diagnostics.

``metrics.generated_kernel_count`` (Triton kernels generated), ``extern_calls`` (aten calls in
wrappers: matmuls, convolutions, fallbacks), ``fallback_ops`` (ops that had no lowering, by
name), ``eager_graphs`` (graphs run as captured, with the reason). ``metrics.reset()`` clears.
"""
from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass
class Metrics:
    generated_kernel_count: int = 0
    extern_calls: int = 0
    fallback_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    eager_graphs: list[str] = dataclasses.field(default_factory=list)
    compiled_graphs: int = 0
    cache_hits: int = 0  # generated module already on disk
    graph_cache_hits: int = 0  # whole compile skipped (graph_cache.py)
    reused_buffers: int = 0

    def reset(self) -> None:
        fresh = Metrics()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))


metrics = Metrics()
