"""Counters describing what the backend produced, for tests and diagnostics.

``metrics.generated_kernel_count`` (Triton kernels generated), ``extern_calls`` (aten calls in
wrappers: matmuls, convolutions, fallbacks), ``fallback_ops`` (ops that had no lowering, by
name), ``eager_graphs`` (graphs run as captured, with the reason), the aten-graph passes'
``attention_rewrites`` / ``attention_skipped`` / ``conv_bn_folds`` / ``host_values``. ``metrics.reset()`` clears.
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
    dynamic_graphs: int = 0  # of compiled_graphs: compiled with symbolic sizes (one artefact, every size)
    cache_hits: int = 0  # generated module already on disk
    graph_cache_hits: int = 0  # whole compile skipped (graph_cache.py)
    reused_buffers: int = 0
    attention_rewrites: int = 0  # hand-written attention -> fused SDPA (passes/attention.py)
    attention_skipped: list[str] = dataclasses.field(default_factory=list)  # near misses, with the reason
    conv_bn_folds: int = 0  # eval batch norms folded into the convolution (passes/conv_bn.py)
    layout_graphs: int = 0  # graphs whose convolutions were made channels-last (passes/layout.py)
    layout_skipped: list[str] = dataclasses.field(default_factory=list)  # graphs left alone, with the reason
    traced_already: int = 0  # training graphs lowered as the joint trace made them (compile_fx._traced_already)
    host_values: int = 0  # 0-d CPU values read by a CUDA graph, moved in one copy (passes/host_values.py)

    def reset(self) -> None:
        fresh = Metrics()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))


metrics = Metrics()
