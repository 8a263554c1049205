"""Host (CPU) time per call against synchronised wall time, per backend: is a workload launch bound?

For each workload and backend (CUDA): 5 warm-up calls, then 20 calls each timed twice: when the
call returns to Python (the host's share: guards, wrapper, kernel launches) and after
``torch.cuda.synchronize()`` (wall). Where the host time approaches the device time, the wall
time follows the host's speed, which varies with the machine's load. Also prints the host cost
of one Triton ``JITFunction`` launch and of one aten ``add_`` on this machine, for scale.

    python -m bench.host_overhead [--workloads small_resnet,gpt2_decoder] [--backends eager,pyjit,torch.compile]
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable


def _per_call_us(fn: Any, n: int = 2000) -> float:
    """Host microseconds per call of ``fn`` (min of 3 rounds; the device is synchronised between rounds)."""
    import torch

    best = float("inf")
    for _ in range(3):
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
        torch.cuda.synchronize()
    return best / n * 1e6


def _launch_costs() -> None:
    """The host cost of each piece a generated module's call is made of, on this machine."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import driver

    from pyjit.runtime.fast_launch import FastKernel

    @triton.jit
    def add_one(x, y, z, w, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        v = tl.load(x + offsets, mask) + tl.load(y + offsets, mask) + tl.load(z + offsets, mask)
        tl.store(w + offsets, v, mask)

    x, y, z, w = (torch.zeros(1024, device="cuda") for _ in range(4))
    fast = FastKernel(add_one)
    compiled = add_one[(1,)](x, y, z, w, 1024, BLOCK=1024)
    fast[(1,)](x, y, z, w, 1024, BLOCK=1024)
    site = fast.sites[(1,)]
    bound = site.bound
    dev = torch.cuda.current_device()
    stream = driver.active.get_current_stream(dev)
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    img = torch.randn(1, 8, 8, 8, device="cuda").to(memory_format=torch.channels_last)
    weight = torch.randn(8, 8, 3, 3, device="cuda").to(memory_format=torch.channels_last)
    a, b, bias = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda"), torch.randn(8, device="cuda")
    conv_args = (img, weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    cuda = torch.device("cuda")
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("JITFunction kernel[grid](...)", lambda: add_one[(1,)](x, y, z, w, 1024, BLOCK=1024)),
        ("FastKernel kernel[grid](...)", lambda: fast[(1,)](x, y, z, w, 1024, BLOCK=1024)),
        ("launcher run(...) alone", lambda: run(1, 1, 1, stream, function, packed, None, None, None,
                                                x, y, z, w, 1024, 1024)),
        ("pyjit._C.KernelLauncher alone", (lambda: bound.native(stream, (x, y, z, w, 1024)))
         if bound is not None and bound.native is not None else (lambda: None)),
        ("  torch.cuda.current_device()", torch.cuda.current_device),
        ("  driver get_current_stream(dev)", lambda: driver.active.get_current_stream(dev)),
        ("  hooks_off()", bound.hooks_off if bound is not None else (lambda: None)),
        ("  4x tensor.data_ptr()", lambda: (x.data_ptr(), y.data_ptr(), z.data_ptr(), w.data_ptr())),
        ("empty_strided(cuda, device=DEVICE)", lambda: torch.empty_strided((32, 64, 56, 56), (200704, 1, 3584, 64),
                                                                          device=cuda, dtype=torch.bfloat16)),
        ("aten add_ (for scale)", lambda: x.add_(1)),
        ("torch.ops.aten.convolution.default", lambda: torch.ops.aten.convolution.default(*conv_args)),
        ("torch.convolution", lambda: torch.convolution(*conv_args)),
        ("torch.ops.aten.addmm.default", lambda: torch.ops.aten.addmm.default(bias, a, b)),
        ("torch.addmm", lambda: torch.addmm(bias, a, b)),
        ("torch.as_strided", lambda: torch.as_strided(x, (32, 32), (32, 1))),
    ]
    print(f"triton {triton.__version__}, torch {torch.__version__}: host us per call")
    for label, fn in rows:
        print(f"  {label:40s} {_per_call_us(fn):7.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    import torch

    from bench import workloads
    from bench.backends import make_backend

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="small_resnet,gpt2_decoder")
    p.add_argument("--backends", default="eager,pyjit,torch.compile")
    p.add_argument("--size", default="large")
    args = p.parse_args(argv)
    _launch_costs()
    device = torch.device("cuda")
    for name in args.workloads.split(","):
        built = workloads.by_name(name).build(device, args.size)
        inputs = built.make_inputs(torch.Generator().manual_seed(0))
        for backend_name in args.backends.split(","):
            backend = make_backend(backend_name, device)
            fn = built.callable_for(backend.compile(built.fn))
            host, wall = [], []
            with torch.no_grad():
                for _ in range(5):
                    fn(*inputs)
                torch.cuda.synchronize()
                for _ in range(20):
                    start = time.perf_counter()
                    fn(*inputs)
                    returned = time.perf_counter()
                    torch.cuda.synchronize()
                    host.append(returned - start)
                    wall.append(time.perf_counter() - start)
            host.sort()
            wall.sort()
            print(f"{name:16s} {backend_name:14s} host {host[10] * 1e3:.3f} ms  wall {wall[10] * 1e3:.3f} ms",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
