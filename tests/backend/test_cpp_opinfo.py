"""OpInfo through the C++ generator: a CI subset, and the full sweep as a script.

``python -m tests.backend.test_cpp_opinfo [--limit N]`` runs every op_db entry (float32, up to 3
samples) with ``PYJIT_CPU_BACKEND=cpp`` through ``opinfo_sweep.sweep_op`` and writes the table to
``docs/opinfo_cpp.md`` (totals to compare with the Triton-interpreter sweep in ``docs/opinfo.md``).
"""
from __future__ import annotations

import argparse
import sys

import pytest
import torch

from pyjit import config as cfg
from pyjit.runtime import cpp_build

from .opinfo_sweep import sweep_op

_SUBSET = ["erfinv", "lgamma", "remainder", "fmod", "floor_divide", "atan2", "hypot", "copysign", "sign",
           "round", "logsumexp", "var", "std", "argmin", "amax", "nan_to_num", "where", "bitwise_xor",
           "clamp", "special.log_ndtr"]


@pytest.mark.skipif(cpp_build.compiler() is None, reason="no working C++ compiler")
@pytest.mark.parametrize("name", _SUBSET)
def test_cpp_opinfo_subset(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == name and not op.variant_test_name]
    assert ops, name
    with cfg.patch(cpu_backend="cpp", cpp_fast_compile=True, raise_on_internal_error=True,
                   cache_dir=str(tmp_path)):
        status, detail = sweep_op(ops[0], "cpu")
    assert status in ("pass", "fallback", "skip"), detail


def main(argv: list[str]) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--out", default="docs/opinfo_cpp.md")
    args = parser.parse_args(argv)
    rows = []
    with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True):
        for op in op_db[: args.limit or None]:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
            status, detail = sweep_op(op, "cpu")
            rows.append((f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}", status, detail))
            print(rows[-1], flush=True)
    counts = {s: sum(1 for r in rows if r[1] == s) for s in ("pass", "fallback", "fail", "skip")}
    with open(args.out, "w") as f:
        f.write("# OpInfo sweep through pyjit's C++ generator (CPU)\n\n")
        f.write(f"Command: `python -m tests.backend.test_cpp_opinfo{' --limit ' + str(args.limit) if args.limit else ''}`"
                " (float32, up to 3 samples per op, `PYJIT_CPU_BACKEND=cpp`, -O3 -march=native).\n\n")
        f.write("pass: compiled and equal to eager; fallback: equal, with an extern aten fallback; "
                "fail: loud error or mismatch; skip: no usable sample / not traceable.\n\n")
        f.write(f"Totals: {counts}\n\n| op | status | detail |\n|---|---|---|\n")
        for name, status, detail in rows:
            f.write(f"| {name} | {status} | {detail.replace('|', '/')} |\n")


if __name__ == "__main__":
    main(sys.argv[1:])
