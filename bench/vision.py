"""Vision suite: popular image classifiers, eager against torch.compile against pyjit.

Each (model, backend, mode) runs in its own fresh interpreter with its own empty pyjit, Inductor,
Triton and CUDA JIT (``CUDA_CACHE_PATH``: cuDNN's run-time compiled kernels) cache directories, so
its first call is a cold compile in a new process. The child:

1. builds the model with random weights (``timm`` when it is installed, else the same
   architecture from ``transformers``: ResNet-50, ConvNeXt-T, MobileNetV2, EfficientNet-B0,
   RegNet, ViT-S/16, Swin-T, DeiT-S), puts model and input in channels-last;
2. compiles it with the backend (``eager``: none) and times the first call (compile included);
   (``--first-call-profile-dir``: a cProfile of that call, main thread only);
3. times steady calls with CUDA events (CPU: ``perf_counter``): the median of ``--reps`` timed
   calls after a warm-up;
4. compares the compiled output with eager's (bf16 tolerance), and with ``--profile`` prints
   the ten kernels that took the most device time (torch.profiler), the place to start when a
   row is slow.

Backends: ``eager``, ``torch.compile``, ``pyjit``, and with CUDA graph replay
``torch.compile-cg`` / ``pyjit-cg`` (``mode="reduce-overhead"`` of each: at batch 32 these models
are bound by launching kernels from the host, which replay removes).

Modes: ``infer`` (``eval()``, ``torch.no_grad()``) and ``train`` (``train()``, forward,
cross-entropy against fixed labels, backward; the optimizer is not part of the step). Both run
under ``torch.autocast`` in bf16 on CUDA (fp32 on CPU unless ``--bf16``).

With ``--jobs N`` up to N children run at once: they compile side by side (first calls then read
high, so report them from a ``--jobs 1`` run), and take an exclusive file lock around their timed
part, so no two measure at the same time.

Usage::

    python -m bench.vision --device cuda --mode infer,train --backends eager,torch.compile,pyjit
    python -m bench.vision --device cpu --models resnet50 --batch 2 --image 64   # a smoke run
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

RESULT_TAG = "VISION_RESULT "
# The classifiers of the suite, by timm name; each maps to a transformers builder of the same
# architecture for machines without timm.
MODELS = ("resnet50", "efficientnet_b0", "mobilenetv3_large_100", "convnext_tiny", "regnetx_032",
          "vit_small_patch16_224", "densenet121", "swin_tiny_patch4_window7_224")


def _transformers_model(name: str, image: int) -> Any:
    """The architecture of timm's ``name`` built from a transformers config (random weights)."""
    import transformers as tr

    if name.startswith("resnet"):
        return tr.ResNetForImageClassification(tr.ResNetConfig())
    if name.startswith("efficientnet"):
        cfg = tr.EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280, image_size=image)
        return tr.EfficientNetForImageClassification(cfg)
    if name.startswith("mobilenet"):
        return tr.MobileNetV2ForImageClassification(tr.MobileNetV2Config(image_size=image))
    if name.startswith("convnext"):
        return tr.ConvNextForImageClassification(tr.ConvNextConfig())
    if name.startswith("regnet"):
        return tr.RegNetForImageClassification(tr.RegNetConfig())
    if name.startswith("vit"):
        cfg = tr.ViTConfig(hidden_size=384, num_attention_heads=6, intermediate_size=1536, image_size=image)
        return tr.ViTForImageClassification(cfg)
    if name.startswith("swin"):
        return tr.SwinForImageClassification(tr.SwinConfig(image_size=image))
    if name.startswith("densenet"):
        raise ValueError("transformers has no DenseNet")
    raise ValueError(f"no transformers builder for {name}")


def build_model(name: str, image: int) -> tuple[Any, str]:
    """``(model, source)``: timm's model when timm imports, else the transformers builder."""
    try:
        import timm
    except ImportError:
        return _transformers_model(name, image), "transformers"
    return timm.create_model(name, pretrained=False, img_size=image) if "vit" in name or "swin" in name \
        else timm.create_model(name, pretrained=False), "timm"


def _logits(out: Any) -> Any:
    return out.logits if hasattr(out, "logits") else out


def _backend(name: str) -> Callable[[Any], Any]:
    import torch

    if name == "eager":
        return lambda m: m
    if name == "torch.compile":
        return lambda m: torch.compile(m)
    if name == "torch.compile-cg":
        return lambda m: torch.compile(m, mode="reduce-overhead")
    if name in ("pyjit", "pyjit-cg"):
        import pyjit

        mode = "reduce-overhead" if name == "pyjit-cg" else None
        return lambda m: pyjit.jit(m, mode=mode) if mode else pyjit.jit(m)
    raise ValueError(f"unknown backend {name!r}")


def _timed_calls(step: Callable[[], Any], device: Any, reps: int) -> list[float]:
    """Seconds per call of ``reps`` calls, each timed alone (CUDA events on CUDA)."""
    import torch

    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return times


def _top_kernels(step: Callable[[], Any], device: Any, n: int = 10) -> tuple[list[tuple[str, float]], float, int]:
    """The ``n`` device kernels with the most total time over 5 calls (microseconds per call),
    the device time of all kernels per call and the number of kernels per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(5):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    rows = []
    launches = 0
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) if device.type == "cuda" else e.self_cpu_time_total
        if t > 0 and (device.type != "cuda" or e.device_type.name == "CUDA"):
            rows.append((e.key[:90], t / 5))
            launches += e.count
    rows.sort(key=lambda r: -r[1])
    return rows[:n], sum(t for _, t in rows), launches // 5


def _host_ms(step: Callable[[], Any], reps: int) -> float:
    """Median host time of a call (enqueue only, no device sync between calls): where a model is
    bound by launching, this is its step time."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _host_profile(step: Callable[[], Any], sync: Callable[[], None], n: int = 14, dump: str | None = None) -> list[str]:
    """The Python functions with the most own time over 20 calls (cProfile), per call; ``dump``:
    also write the whole profile there (for ``pstats``)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        step()
    sync()
    prof.disable()
    if dump:
        prof.dump_stats(dump)
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:n]
    return [f"{tt / 20 * 1e6:8.1f} us own {ct / 20 * 1e6:8.1f} us cum {nc / 20:6.1f}x {os.path.basename(f)}:{line}({fn})"
            for (f, line, fn), (_, nc, tt, ct, _) in rows]


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    model, source = build_model(args.model, args.image)
    model = model.to(device).to(memory_format=torch.channels_last)
    train = args.mode == "train"
    model.train(train)
    x = torch.randn(args.batch, 3, args.image, args.image, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (args.batch,), device=device)
    dtype = torch.bfloat16 if device.type == "cuda" or args.bf16 else None
    compiled = _backend(args.backend)(model)

    def step() -> Any:
        autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with (contextlib.nullcontext() if train else torch.no_grad()), autocast:
            logits = _logits(compiled(x))
            if train:
                loss = torch.nn.functional.cross_entropy(logits.float(), labels)
                loss.backward()
                return loss.detach()
            return logits

    out: dict[str, Any] = {"model": args.model, "backend": args.backend, "mode": args.mode, "source": source,
                           "device": str(device), "batch": args.batch, "image": args.image}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prof = None
    if args.first_call_profile_dir:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    first = step()
    sync()
    out["first_call_s"] = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.path.join(args.first_call_profile_dir, f"{args.model}_{args.backend}_{args.mode}_first.pstats"))
    out["checksum"] = float(first.float().abs().mean())
    lock = open(os.path.join(tempfile.gettempdir(), "pyjit-vision.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one child measures at a time (--jobs)
    try:
        for _ in range(args.warmup):
            step()
        sync()
        times = _timed_calls(step, device, args.reps)
        out["median_ms"] = statistics.median(times) * 1e3
        out["min_ms"] = min(times) * 1e3
        if device.type == "cuda":
            out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        sync()
        out["host_ms"] = _host_ms(step, args.reps)
        sync()
        if args.profile:
            out["top_kernels"], out["device_us"], out["kernels_per_call"] = _top_kernels(step, device)
        if args.host_profile:
            dump = os.path.join(args.host_profile_dir, f"{args.model}_{args.backend}_{args.mode}.pstats") \
                if args.host_profile_dir else None
            out["host_profile"] = _host_profile(step, sync, dump=dump)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
    if args.backend == "pyjit":
        from pyjit.backend.metrics import metrics

        out["pyjit_metrics"] = {k: v for k, v in vars(metrics).items() if isinstance(v, (int, float)) and v}
        from pyjit.runtime import conv_warmup

        out["conv_warmup"] = dict(conv_warmup.counters)
    return out


def _spawn(model: str, backend: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.vision", "--child", "--model", model, "--backend", backend,
           "--mode", mode, "--device", args.device, "--batch", str(args.batch), "--image", str(args.image),
           "--reps", str(args.reps), "--warmup", str(args.warmup)]
    cmd += ["--profile"] if args.profile else []
    cmd += ["--host-profile"] if args.host_profile else []
    cmd += ["--host-profile-dir", args.host_profile_dir] if args.host_profile_dir else []
    cmd += ["--bf16"] if args.bf16 else []
    cmd += ["--first-call-profile-dir", args.first_call_profile_dir] if args.first_call_profile_dir else []
    with tempfile.TemporaryDirectory(prefix="pyjit-vision-") as cache:
        env = dict(os.environ, PYJIT_CACHE_DIR=os.path.join(cache, "pyjit"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), TRITON_CACHE_DIR=os.path.join(cache, "triton"),
                   # the CUDA driver's JIT cache too: cuDNN's run-time compiled kernels land there,
                   # and a row would otherwise find those of the rows before it
                   CUDA_CACHE_PATH=os.path.join(cache, "cuda"))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return {"model": model, "backend": backend, "mode": mode, "status": "TIMEOUT",
                    "wall_s": time.perf_counter() - t0}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            row = {**json.loads(line[len(RESULT_TAG):]), "status": "OK", "wall_s": time.perf_counter() - t0}
            if args.logs_tail:
                row["log_tail"] = [ln for ln in proc.stderr.splitlines() if ln.startswith("[pyjit.")][-args.logs_tail:]
            return row
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"model": model, "backend": backend, "mode": mode, "status": "ERROR", "error": " | ".join(tail)[-500:]}


def _table(rows: list[dict[str, Any]], backends: list[str]) -> str:
    """One line per (model, mode): each backend's median step, speed-up over eager, first call."""
    lines = ["| model | mode | " + " | ".join(backends) + " |", "|---|---|" + "---|" * len(backends)]
    keys = sorted({(r["model"], r["mode"]) for r in rows}, key=lambda k: (k[1], MODELS.index(k[0]) if k[0] in MODELS else 99))
    for model, mode in keys:
        by = {r["backend"]: r for r in rows if r["model"] == model and r["mode"] == mode}
        base = by.get("eager", {}).get("median_ms")
        cells = []
        for b in backends:
            r = by.get(b)
            if r is None or r.get("status") != "OK":
                cells.append("-" if r is None else r.get("status", "?"))
                continue
            speed = f" {base / r['median_ms']:.2f}x" if base and b != "eager" else ""
            cells.append(f"{r['median_ms']:.2f} ms{speed} (first {r['first_call_s']:.1f} s)")
        lines.append(f"| {model} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--backends", default="eager,torch.compile,pyjit")
    p.add_argument("--mode", default="infer", help="infer, train or both (comma-separated)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--host-profile", action="store_true", help="cProfile of the host side of 20 calls")
    p.add_argument("--host-profile-dir", default=None, help="with --host-profile: also write each child's whole "
                   "profile there (<model>_<backend>_<mode>.pstats)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on CPU too")
    p.add_argument("--first-call-profile-dir", default=None,
                   help="cProfile each child's first call into <dir>/<model>_<backend>_<mode>_first.pstats")
    p.add_argument("--json", default=None, help="write every row here")
    p.add_argument("--logs-tail", type=int, default=0, help="keep this many last pyjit log lines of each child "
                   "(set PYJIT_LOGS=compile_times to see where a first call went)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(RESULT_TAG + json.dumps(run_child(args)), flush=True)
        return 0
    backends = args.backends.split(",")
    jobs = [(m, b, mode) for mode in args.mode.split(",") for m in args.models.split(",") for b in backends]
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for row in pool.map(lambda j: _spawn(*j, args), jobs):
            rows.append(row)
            brief = {k: row.get(k) for k in ("model", "backend", "mode", "status", "median_ms", "host_ms", "device_us",
                                             "kernels_per_call", "first_call_s", "error")}
            print(json.dumps(brief), flush=True)
            for name, us in row.get("top_kernels", []):
                print(f"    {us:9.1f} us  {name}", flush=True)
            for line in row.get("host_profile", []):
                print(f"    {line}", flush=True)
            for line in row.get("log_tail", []):
                print(f"    | {line[:200]}", flush=True)
    print(_table(rows, backends))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
