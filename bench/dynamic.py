"""The ``dynamic`` suite: varying input sizes, pyjit's automatic dynamic against torch.compile's.

Per workload and compiler (``pyjit``, ``torch.compile``; eager is the reference) one row:

* **sweep**: a fresh compiler (reset caches), then one call at each of 20 sizes of the varying
  dimension (batch rows, or a GPT-2 block's sequence length), every result checked against
  eager; ``dynamic.sweep_s`` is the wall time of those 20 first calls (compiles included: what
  a server seeing 20 new batch sizes pays), ``dynamic.compiles`` how many graphs/frames were
  compiled (pyjit: frame compiles; torch.compile: Dynamo's unique graphs);
* **steady**: ``timing`` is the steady-state time of the entry the sweep left (dynamic after the
  second size) at the kernels suite's shape, and ``dynamic.static_timing`` the same compiler's
  static compile (``dynamic=False``) at that shape, sampled interleaved with it;
  ``dynamic.dynamic_over_static`` is their ratio (the target: within 1.10 on the GPU);
  for pyjit, ``dynamic.backend_graphs`` counts the sweep's graphs its backend compiled, those
  compiled with symbolic sizes and those it ran as captured (a fallback, also in the table).

Compiles per size are what the suite is about, so each row starts cold: empty in-memory caches
(``reset``) and, for the row's duration, empty on-disk caches (pyjit's cache and warm-start index,
Inductor's and Triton's cache directories point at a fresh temporary directory). Otherwise a
second run would measure pyjit's warm start (0 compiles) and Inductor's FX-graph cache.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator

import torch

from bench import workloads
from bench.measure import BatchTimer, time_interleaved
from bench.runner import STATUS_ERROR, STATUS_FAIL, STATUS_OK, STATUS_SKIPPED, STATUS_UNAVAILABLE
from bench.spec import randn

SWEEP_SIZES = 20
COMPILERS = ("pyjit", "torch.compile")  # each has a dynamic=False switch for the static baseline

Inputs = Callable[[torch.Generator, int], tuple[Any, ...]]


class DynamicWorkload:
    """A function and its inputs as a function of the varying size ``n``."""

    def __init__(self, name: str, description: str, fn: Callable[..., Any], make: Callable[[torch.device, str], Inputs],
                 full: dict[str, int], atol: float = 1e-4, rtol: float = 1e-4, quick: bool = False):
        self.name = name
        self.description = description
        self.fn = fn
        self.make = make
        self.full = full  # size class -> the kernels suite's value of the varying dimension
        self.atol, self.rtol = atol, rtol
        self.quick = quick

    def sizes(self, size: str) -> list[int]:
        """20 distinct sizes up to the kernels suite's, none of them 0 or 1, the full size last
        and never first (so the steady-state call runs the dynamic entry)."""
        top = self.full[size]
        out: list[int] = []
        for i in range(SWEEP_SIZES - 1):
            n = max(2, top * (i + 1) // SWEEP_SIZES - (i % 3))
            while n in out or n == top:
                n += 1
            out.append(n)
        order = out[1::2] + out[0::2]  # not monotonic: a server sees sizes in any order
        return order + [top]


def _rows_cols(size: str) -> tuple[int, int]:
    return {"small": (256, 1024), "large": (8192, 4096)}[size]


def _pointwise(device: torch.device, size: str) -> Inputs:
    return lambda g, n: (randn(g, device, n, 64), randn(g, device, n, 64))


def _rows(extra: int) -> Callable[[torch.device, str], Inputs]:
    def make(device: torch.device, size: str) -> Inputs:
        cols = _rows_cols(size)[1]
        return lambda g, n: (randn(g, device, n, cols), *[randn(g, device, cols) for _ in range(extra)])

    return make


def _cross_entropy(device: torch.device, size: str) -> Inputs:
    cols = {"small": 1000, "large": 32000}[size]
    return lambda g, n: (randn(g, device, n, cols), torch.randint(0, cols, (n,), generator=g).to(device))


class _Block:
    """The kernels suite's GPT-2 block, built once per device and size class."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, str], Any] = {}

    def module(self, device: torch.device, size: str) -> Any:
        key = (str(device), size)
        if key not in self.cache:
            _, _, d, h = {"small": (2, 64, 128, 4), "large": (8, 1024, 768, 12)}[size]
            torch.manual_seed(0)
            self.cache[key] = workloads.models.GPT2Block(d, h).to(device).eval()
        return self.cache[key]


_BLOCK = _Block()


def gpt2_block_seq(x: torch.Tensor, block: Any) -> torch.Tensor:
    return block(x)


def _gpt2_block(device: torch.device, size: str) -> Inputs:
    b, _, d, _ = {"small": (2, 64, 128, 4), "large": (8, 1024, 768, 12)}[size]
    block = _BLOCK.module(device, size)
    return lambda g, n: (randn(g, device, b, n, d), block)


DYNAMIC: tuple[DynamicWorkload, ...] = (
    DynamicWorkload("pointwise_chain", "pointwise chain, rows vary", workloads.pointwise_chain, _pointwise,
                    {"small": 4096, "large": 1 << 18}, quick=True),
    DynamicWorkload("softmax", "softmax over the last dim, rows vary", workloads.softmax, _rows(0),
                    {"small": 256, "large": 8192}, quick=True),
    DynamicWorkload("layer_norm", "F.layer_norm with affine, rows vary", workloads.layer_norm, _rows(2),
                    {"small": 256, "large": 8192}),
    DynamicWorkload("rms_norm", "x * rsqrt(mean(x^2)+eps) * w, rows vary", workloads.rms_norm, _rows(1),
                    {"small": 256, "large": 8192}),
    DynamicWorkload("cross_entropy", "F.cross_entropy, rows vary", workloads.cross_entropy, _cross_entropy,
                    {"small": 256, "large": 4096}),
    DynamicWorkload("softmax_row_length", "softmax over the last dim, row length varies", workloads.softmax,
                    lambda device, size: (lambda g, n: (randn(g, device, _rows_cols(size)[0], n),)),
                    {"small": 1024, "large": 4096}),
    DynamicWorkload("gpt2_block", "GPT-2 style pre-LN block, sequence length varies", gpt2_block_seq, _gpt2_block,
                    {"small": 64, "large": 1024}, atol=1e-3, rtol=1e-3),
)


def _compile_count(backend: str) -> int:
    if backend.startswith("pyjit"):
        from pyjit.frame import policy

        return sum(s.compiles for s in policy._targets.values())
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _pyjit_backend_counts() -> tuple[int, int, int]:
    """(graphs compiled, of them with symbolic sizes, graphs run as captured) by pyjit's backend."""
    from pyjit.backend.metrics import metrics

    return metrics.compiled_graphs, getattr(metrics, "dynamic_graphs", 0), len(metrics.eager_graphs)


def _static(backend: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The same compiler with dynamic shapes off."""
    if backend.name == "pyjit":
        import pyjit

        return lambda fn: pyjit.jit(fn, dynamic=False)
    if backend.name == "torch.compile":
        return lambda fn: torch.compile(fn, dynamic=False)
    raise ValueError(backend.name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _close(actual: Any, expected: Any, w: DynamicWorkload) -> str | None:
    try:
        torch.testing.assert_close(actual, expected, atol=w.atol, rtol=w.rtol)
    except AssertionError as e:
        return str(e).splitlines()[0][:200]
    return None


@contextlib.contextmanager
def _cold_disk_caches() -> Iterator[None]:
    """Every compiler's on-disk cache in a fresh temporary directory, restored afterwards."""
    root = tempfile.mkdtemp(prefix="pyjit-bench-dynamic-")
    names = {"PYJIT_CACHE_DIR": "pyjit", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
    saved_env = {k: os.environ.get(k) for k in names}
    os.environ.update({k: os.path.join(root, sub) for k, sub in names.items()})
    patch: Any = contextlib.nullcontext()
    try:
        from pyjit import config as pyjit_config  # read at import; the env var alone is too late

        patch = pyjit_config.patch(cache_dir=os.path.join(root, "pyjit"))
    except ImportError:
        pass
    try:
        with patch:
            yield
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(root, ignore_errors=True)


def run_one(w: DynamicWorkload, backend: Any, device: torch.device, size: str, plan: Any) -> dict[str, Any]:
    """One row (see the module docstring), with cold on-disk caches."""
    with _cold_disk_caches():
        return _run_one(w, backend, device, size, plan)


def _run_one(w: DynamicWorkload, backend: Any, device: torch.device, size: str, plan: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"suite": "dynamic", "workload": w.name, "backend": backend.name, "status": STATUS_SKIPPED,
                           "reason": None, "params": {"size": size, "device": str(device),
                                                      "description": w.description}}
    if not backend.available:
        row.update(status=STATUS_UNAVAILABLE, reason=backend.reason)
        return row
    make = w.make(device, size)
    sizes = w.sizes(size)
    gen = torch.Generator().manual_seed(1234)
    inputs = [make(gen, n) for n in sizes]
    row["params"]["sizes"] = sizes
    try:
        with torch.no_grad():
            refs = [w.fn(*args) for args in inputs]
            backend.reset()
            if backend.name == "torch.compile":
                from torch._dynamo.utils import counters

                counters.clear()
            compiled = backend.compile(w.fn)
            before = _compile_count(backend.name)
            counts_before = _pyjit_backend_counts() if backend.name == "pyjit" else None
            _sync(device)
            t0 = time.perf_counter()
            outs = []
            for args in inputs:
                outs.append(compiled(*args))
            _sync(device)
            sweep_s = time.perf_counter() - t0
            compiles = _compile_count(backend.name) - before
            backend_graphs = None
            if counts_before is not None:
                after = _pyjit_backend_counts()
                backend_graphs = dict(zip(("compiled", "symbolic", "as_captured"),
                                          (a - b for a, b in zip(after, counts_before))))
            for n, out, ref in zip(sizes, outs, refs):
                bad = _close(out, ref, w)
                if bad is not None:
                    row.update(status=STATUS_FAIL, reason=f"size {n}: result differs from eager: {bad}")
                    return row
            del outs
            top = inputs[-1:]
            static = _static(backend)(w.fn)
            static_out = static(*top[0])
            bad = _close(static_out, refs[-1], w)
            if bad is not None:
                row.update(status=STATUS_FAIL, reason=f"static compile differs from eager: {bad}")
                return row
            timers = [BatchTimer(compiled, top, device, plan), BatchTimer(static, top, device, plan),
                      BatchTimer(w.fn, top, device, plan)]
            for t in timers:
                t.calibrate()
            time_interleaved(timers, plan)
    except Exception as e:  # a compiler failure is a result, not a crash of the harness
        row.update(status=STATUS_ERROR, reason=f"{type(e).__name__}: {e}"[:300])
        return row
    finally:
        try:
            backend.reset()
        except Exception:
            pass
    dyn, stat, eager = (t.timing() for t in timers)
    row.update(status=STATUS_OK, timing=dyn.summary(), speedup_vs_eager=eager.median / dyn.median)
    row["dynamic"] = {"sweep_s": sweep_s, "compiles": compiles, "static_timing": stat.summary(),
                      "eager_timing": eager.summary(), "dynamic_over_static": dyn.median / stat.median,
                      "backend_graphs": backend_graphs}
    return row


def selected(quick: bool, names: set[str] | None) -> list[DynamicWorkload]:
    return [w for w in DYNAMIC if (w.quick or not quick) and (names is None or w.name in names)]


def table(rows: list[dict[str, Any]]) -> str:
    """The terminal table of the suite."""
    lines = ["== dynamic (20 sizes: first calls incl. compiles; steady = dynamic entry at the full shape;"
             " graphs = pyjit backend's compiled/symbolic/as-captured)",
             f"{'workload':<16} {'backend':<14} {'status':<6} {'sweep':>9} {'compiles':>8} {'steady':>10} "
             f"{'static':>10} {'dyn/static':>10} {'graphs':>8}"]
    for r in rows:
        d = r.get("dynamic") or {}
        if r.get("status") != STATUS_OK:
            lines.append(f"{r['workload']:<16} {r['backend']:<14} {r['status']:<6} {r.get('reason') or ''}")
            continue
        lines.append(f"{r['workload']:<16} {r['backend']:<14} {'OK':<6} {d['sweep_s']:>8.3f}s {d['compiles']:>8} "
                     f"{r['timing']['median'] * 1e6:>8.1f}us {d['static_timing']['median'] * 1e6:>8.1f}us "
                     f"{d['dynamic_over_static']:>10.2f} {_graphs(d.get('backend_graphs')):>8}")
    return "\n".join(lines)


def _graphs(counts: dict[str, int] | None) -> str:
    return "" if not counts else f"{counts['compiled']}/{counts['symbolic']}/{counts['as_captured']}"
