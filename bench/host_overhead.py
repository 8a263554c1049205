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


def _launch_costs() -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + offsets, tl.load(x + offsets, offsets < n) + 1, offsets < n)

    x = torch.zeros(1024, device="cuda")
    for _ in range(10):
        add_one[(1,)](x, 1024, BLOCK=1024)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(2000):
        add_one[(1,)](x, 1024, BLOCK=1024)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    aten = time.perf_counter() - start
    torch.cuda.synchronize()
    print(f"triton {triton.__version__}: JITFunction launch {host / 2000 * 1e6:.1f} us host; "
          f"aten add_ {aten / 2000 * 1e6:.1f} us host")


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
