"""Per-call cost of shape guards in the C guard tree (docs/internals.md, "Shape guards").

Trees over two CPU tensors x (B, 64) and y (B, 64), all passing:

- static: today's tensor checks, every size and stride static;
- dynamic: dim 0 unchecked (None), no bindings, no symbol checks;
- symbolic: dim 0 unchecked, size(0) of x and y bound to slots 0/1, and 3 symbol checks
  (s0 >= 2, s0 == s1, s0 % 8 == 0);
- symbolic+stride: as symbolic, plus x.stride(0) bound to slot 2 and s2 == 64 as a 4th check
  (a bound stride costs a stride() call).

Run: ``python -m bench.shape_guard_cost``. Samples of the variants are interleaved so they
see the same machine noise; the median and minimum ns per ``GuardTree.check`` call are
printed, and the difference to "dynamic" (what the bindings and symbol checks add).
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from pyjit import _C
from pyjit.guards.shape_program import compile_relation


def _trees(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    import sympy

    s0, s1, s2 = sympy.symbols("s0 s1 s2", integer=True, positive=True)
    slots = {s0: 0, s1: 1, s2: 2}
    relations = [compile_relation(r, slots) for r in (s0 >= 2, sympy.Eq(s0, s1), sympy.Eq(sympy.Mod(s0, 8), 0))]
    stride_rel = compile_relation(sympy.Eq(s2, 64), slots)

    def build(dynamic: bool, bind: bool, stride: bool) -> Any:
        tree = _C.GuardTree()
        for i, t in enumerate((x, y)):
            sizes = (None, *t.shape[1:]) if dynamic else tuple(t.shape)
            strides = (None, *t.stride()[1:]) if dynamic else t.stride()
            binds = ((0, 0, i),) if bind else ()
            if stride and i == 0:
                binds += ((1, 0, 2),)
            tree.arg(i).check_tensor(type(t), t.dtype, t.device, t.requires_grad, sizes, strides, i, bind=binds)
        if bind:
            for k, p in enumerate(relations):
                tree.check_symbols(p, 10 + k)
        if stride:
            tree.check_symbols(stride_rel, 20)
        return tree

    return {
        "static": build(False, False, False),
        "dynamic": build(True, False, False),
        "symbolic": build(True, True, False),
        "symbolic+stride": build(True, True, True),
    }


def main(batch: int = 16, calls: int = 20000, repeats: int = 25) -> None:
    x, y = torch.randn(batch, 64), torch.randn(batch, 64)
    trees = _trees(x, y)

    def target(a: Any, b: Any) -> None:
        return None

    args = (x, y)
    for name, tree in trees.items():
        assert tree.check(target, args) == -1, name
    samples: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(repeats):
        for name, tree in trees.items():
            check = tree.check
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                check(target, args)
            samples[name].append((time.perf_counter_ns() - t0) / calls)
    base, base_min = statistics.median(samples["dynamic"]), min(samples["dynamic"])
    print(f"GuardTree.check, 2 tensors ({batch}, 64) f32 cpu, {repeats} samples x {calls} calls:")
    print(f"  {'tree':16s} {'median':>8s} {'min':>8s}   (vs dynamic: median, min)")
    for name, ns in samples.items():
        med, lo = statistics.median(ns), min(ns)
        print(f"  {name:16s} {med:8.1f} {lo:8.1f}   ({med - base:+6.1f}, {lo - base_min:+6.1f}) ns/call")


if __name__ == "__main__":
    main()
