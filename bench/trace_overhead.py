"""What the compile trace and the profiler hooks cost (docs/observability.md).

``python -m bench.trace_overhead [--rounds N]`` measures, in one process with modes interleaved:

- compile time with ``PYJIT_TRACE`` on vs off: a tiny GPT-2 (random weights, CPU) and a small
  function with a graph break, compiled from scratch (``pyjit.reset()``, no disk cache) each
  round; reports the median compile seconds per mode and their ratio;
- cache-hit time per call of a small jitted function, trace on vs off, and with the C core's
  profiler hooks installed (the default) vs removed (``_C.set_profiler_hooks(None, ...)``);
  reports the median microseconds per call of each.

Numbers only: nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import pyjit
from pyjit import _C
from pyjit.report import events, profiler


def _gpt2() -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32, use_cache=False)
    return transformers.GPT2Model(cfg).eval(), torch.randint(0, 50, (2, 8))


def _with_break(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() * 2
    print(end="")  # a graph break
    return y.cos() + 1


def _compile_seconds(trace_dir: str | None, model: torch.nn.Module, ids: torch.Tensor) -> float:
    pyjit.reset()
    with pyjit.config.patch(trace_dir=trace_dir, backend_disk_cache=False, warm_start=False):
        start = time.perf_counter()
        with torch.no_grad():
            pyjit.jit(lambda m, i: m(i).last_hidden_state)(model, ids)
        pyjit.jit(_with_break)(torch.randn(16))
        took = time.perf_counter() - start
    events.close()
    return took


def _hit_us(fn, x: torch.Tensor, calls: int) -> float:
    for _ in range(100):
        fn(x)
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compile-rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    model, ids = _gpt2()
    trace_dir = tempfile.mkdtemp(prefix="pyjit-trace-bench-")
    _compile_seconds(None, model, ids)  # warm-up: imports and one-time initialisation
    on, off = [], []
    for _ in range(args.compile_rounds):
        off.append(_compile_seconds(None, model, ids))
        on.append(_compile_seconds(trace_dir, model, ids))
    print(f"compile (tiny GPT-2 + a function with a graph break), median of {args.compile_rounds}: "
          f"trace off {statistics.median(off):.3f} s, trace on {statistics.median(on):.3f} s, "
          f"ratio {statistics.median(on) / statistics.median(off):.3f}")

    pyjit.reset()
    fn = pyjit.jit(lambda t: t + 1)
    x = torch.randn(4)
    fn(x)
    modes: dict[str, list[float]] = {"hooks on, trace off": [], "hooks off, trace off": [], "hooks on, trace on": []}
    names = list(modes)
    for r in range(args.rounds):
        for mode in names[r % len(names):] + names[:r % len(names)]:  # rotated: no mode always first
            profiler.install(_C)
            if mode.startswith("hooks off"):
                _C.set_profiler_hooks(None, "", None, None)
            with pyjit.config.patch(trace_dir=trace_dir if mode.endswith("trace on") else None):
                modes[mode].append(_hit_us(fn, x, args.calls))
    profiler.install(_C)
    print("cache hit (t + 1 on 4 floats), us per call, median (min): "
          + ", ".join(f"{m} {statistics.median(v):.3f} ({min(v):.3f})" for m, v in modes.items()))


if __name__ == "__main__":
    main()
