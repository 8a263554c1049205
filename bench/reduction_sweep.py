"""Reductions across row widths: eager vs torch.compile vs pyjit, one run, on a GPU.

``python -m bench.reduction_sweep [--widths 64,...] [--out DIR] [--explore] [--budget S]``

Workloads (fp32, contiguous rows): ``layer_norm`` (weight and bias) and ``softmax`` over rows
of 64..65536 elements, each shape holding ``2**26`` elements (256 MB in, 256 MB out: far
larger than an H100's L2), plus 8192x1024 (a transformer's hidden rows, 32 MB) and ``cross_entropy``
over 32000- and 128000-wide vocabularies (4096 and 1024 rows). Each row reports ms per call (median of CUDA-event timings) and the achieved
bandwidth (bytes of inputs + outputs / time) as a % of the measured device-to-device copy
bandwidth, for eager, ``torch.compile`` (inductor) and pyjit's backend (``compile_fx`` on the
symbolically traced function).

``--explore`` also times pyjit's generated reduction kernel under other launch parameters
(rows per program ``XBLOCK``, ``RBLOCK``, ``num_warps``; persistent and looped variants) by
rewriting the launch line of the generated wrapper: the data behind the heuristics in
``pyjit/backend/codegen/reduction_heuristics.py``. Results are printed as they come and
written to ``DIR/reduction_sweep.json``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

TOTAL = 1 << 26
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTHS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
_LAUNCH = re.compile(r"(\w+)\[\((\d+),\)\]\((.*), (\d+), (\d+), XBLOCK=(\d+), RBLOCK=(\d+), num_warps=(\d+)\)")


def _time_ms(fn: Callable[[], Any], samples: int = 15, calls: int = 10) -> float:
    """Median over ``samples`` of the mean time of ``calls`` back-to-back calls (CUDA events).

    Back-to-back calls keep the GPU queue full, so a wrapper's Python overhead (guards,
    launch) is hidden whenever it is shorter than the kernel, and the number is kernel time.
    """
    if not torch.cuda.is_available():  # CPU smoke run (Triton interpreter): wall time
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    src = torch.empty(nbytes // 4, device=DEVICE, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), 5, 5)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def shapes(widths: list[int]) -> list[tuple[str, int, int]]:
    out = [(w, n, TOTAL // n) for w in ("layer_norm", "softmax") for n in widths]
    extra = [("layer_norm", 8192, 1024), ("softmax", 8192, 1024),  # a transformer's hidden rows (32 MB)
             ("cross_entropy", 4096, 32000), ("cross_entropy", 1024, 128000)]
    return [(name, rows, n) for name, n, rows in out] + [e for e in extra if e[2] in widths or e[0] == "cross_entropy"]


def workload(name: str, rows: int, n: int) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    d = torch.device(DEVICE)
    x = torch.randn(rows, n, device=d)
    if name == "layer_norm":
        return (lambda a, g, b: F.layer_norm(a, (n,), g, b)), [x, torch.randn(n, device=d), torch.randn(n, device=d)]
    if name == "softmax":
        return (lambda a: F.softmax(a, -1)), [x]
    if name == "cross_entropy":
        return (lambda a, t: F.cross_entropy(a, t)), [x, torch.randint(0, n, (rows,), device=d)]
    raise ValueError(name)


def _load(source: str, tmp: str, tag: str) -> Any:
    """Import a generated wrapper module from source (Triton needs a real file)."""
    path = os.path.join(tmp, f"sweep_{tag}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"sweep_{tag}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _relaunch(source: str, rnumel: int, xblock: int, rblock: int, warps: int) -> str | None:
    """The wrapper source with the launch of the kernel over rows of ``rnumel`` changed."""
    done = False

    def sub(m: re.Match[str]) -> str:
        nonlocal done
        if int(m.group(5)) != rnumel:
            return m.group(0)
        done = True
        x = int(m.group(4))
        return (f"{m.group(1)}[({-(-x // xblock)},)]({m.group(3)}, {x}, {rnumel}, XBLOCK={xblock}, "
                f"RBLOCK={rblock}, num_warps={warps})")

    out = _LAUNCH.sub(sub, source)
    return out if done else None


def _candidates(n: int) -> list[tuple[str, int, int, int]]:
    """(variant, XBLOCK, RBLOCK, num_warps) to try for rows of ``n``."""
    r = 1 << (n - 1).bit_length()
    out = []
    if r <= 32768:
        for tile in sorted({r, 1024, 2048, 4096, 8192}):
            xb = tile // r
            if xb < 1:
                continue
            for w in (1, 2, 4, 8, 16):
                if 4 <= tile // (32 * w) <= 64:
                    out.append(("persistent", xb, r, w))
    if n >= 4096:
        for rb in (1024, 2048, 4096):
            for w in (4, 8, 16):
                if rb // (32 * w) >= 4:
                    out.append(("looped", 1, rb, w))
    return out


def main() -> None:
    global TOTAL
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--workloads", default="layer_norm,softmax,cross_entropy")
    ap.add_argument("--out", default=".")
    ap.add_argument("--explore", action="store_true")
    ap.add_argument("--budget", type=float, default=400.0, help="seconds after which exploring stops")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--total", type=int, default=TOTAL, help="elements per layer_norm/softmax shape")
    args = ap.parse_args()
    import pyjit.backend as pb
    from pyjit import config as cfg

    TOTAL = args.total
    if DEVICE == "cpu":
        cfg.config.cpu_backend = "triton_interpret"

    start = time.time()
    peak = copy_bandwidth_gbs(1 << 30 if DEVICE == "cuda" else 1 << 24)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__,
                              "copy_bandwidth_gbs": peak, "rows": [], "explore": []}
    print(f"# {result['device']} torch {torch.__version__} copy {peak:.0f} GB/s", flush=True)
    wanted = set(args.workloads.split(","))
    todo = [s for s in shapes([int(w) for w in args.widths.split(",")]) if s[0] in wanted]
    sources: dict[tuple[str, int, int], tuple[str, list[torch.Tensor], int]] = {}
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    with cfg.patch(backend_disk_cache=False), torch.no_grad():
        for name, rows, n in todo:
            fn, inputs = workload(name, rows, n)
            out = fn(*inputs)
            nbytes = sum(t.numel() * t.element_size() for t in [*inputs, out])
            row: dict[str, Any] = {"workload": name, "rows": rows, "n": n, "bytes": nbytes}
            backends: list[tuple[str, Callable[..., Any]]] = [("eager", fn)]
            if not args.no_inductor:
                torch._dynamo.reset()
                backends.append(("inductor", torch.compile(fn, dynamic=False)))
            compiled = pb.compile_fx(torch.fx.symbolic_trace(fn), inputs)
            backends.append(("pyjit", compiled))
            for label, f in backends:
                try:
                    ms = _time_ms(lambda: f(*inputs))
                    row[f"{label}_ms"] = ms
                    row[f"{label}_pct"] = 100 * nbytes / (ms * 1e-3) / 1e9 / peak
                except Exception as e:  # reported, not fatal
                    row[f"{label}_error"] = f"{type(e).__name__}: {e}"[:300]
            torch.testing.assert_close(compiled(*inputs), out, atol=1e-3, rtol=1e-3)
            row["pyjit_launch"] = [m.group(0)[m.group(0).index("XBLOCK"):] for m in _LAUNCH.finditer(compiled.pyjit_source)]
            result["rows"].append(row)
            sources[(name, rows, n)] = (compiled.pyjit_source, inputs, nbytes)
            print(json.dumps(row), flush=True)
        if args.explore:
            order = sorted(todo, key=lambda s: (s[2] not in (1024, 32000, 65536), s[2]))
            for key in order:
                name, rows, n = key
                if time.time() - start > args.budget:
                    break
                base, inputs, nbytes = sources[key]
                fn, _ = workload(name, rows, n)
                ref = fn(*inputs)
                looped_src = None
                for variant, xb, rb, w in _candidates(n):
                    if time.time() - start > args.budget:
                        break
                    src = base
                    if variant == "looped":
                        if looped_src is None:
                            with cfg.patch(backend_persistent_reduction_max=0, backend_persistent_multi_pass_max=0):
                                looped_src = pb.compile_fx(torch.fx.symbolic_trace(fn), inputs).pyjit_source
                        src = looped_src
                    elif "for roffset" in src:
                        with cfg.patch(backend_persistent_reduction_max=65536, backend_persistent_multi_pass_max=65536):
                            src = pb.compile_fx(torch.fx.symbolic_trace(fn), inputs).pyjit_source
                    new = _relaunch(src, n, xb, rb, w)
                    if new is None:
                        continue
                    rec = {"workload": name, "n": n, "variant": variant, "XBLOCK": xb, "RBLOCK": rb, "num_warps": w}
                    try:
                        mod = _load(new, tmp, f"{len(result['explore'])}")
                        torch.testing.assert_close(mod.call(list(inputs))[0], ref, atol=1e-3, rtol=1e-3)
                        ms = _time_ms(lambda: mod.call(list(inputs)))
                        rec.update(ms=ms, pct=100 * nbytes / (ms * 1e-3) / 1e9 / peak)
                    except Exception as e:
                        rec["error"] = f"{type(e).__name__}: {e}"[:200]
                    result["explore"].append(rec)
                    print(json.dumps(rec), flush=True)
    with open(os.path.join(args.out, "reduction_sweep.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n| workload | rows x n | eager %copy | torch.compile %copy | pyjit %copy | pyjit launch |")
    print("|---|---|---|---|---|---|")
    for r in result["rows"]:
        cells = [f"{r.get(k + '_pct', float('nan')):.0f}% ({r.get(k + '_ms', float('nan')) * 1e3:.0f} us)"
                 for k in ("eager", "inductor", "pyjit")]
        print(f"| {r['workload']} | {r['rows']}x{r['n']} | {' | '.join(cells)} | {'; '.join(r['pyjit_launch'])} |")
    print(f"# total {time.time() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
