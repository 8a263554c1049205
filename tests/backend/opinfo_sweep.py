"""OpInfo sweep: run op_db samples through pyjit's backend and compare with eager.

``python -m tests.backend.opinfo_sweep [--device cuda] [--limit N]`` writes docs/opinfo.md with one
row per op: pass (compiled, equal to eager), fallback (compiled, but some aten op ran as an
extern fallback), fail (a loud error; never a silent mismatch: mismatches are reported as fail).
``sweep_op`` is also used by the CPU subset test.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

import pyjit.backend as backend
from pyjit import config as cfg



def _assert_matches(actual: Any, expected: Any) -> None:
    exp, act = torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)
    assert len(exp) == len(act), f"{len(act)} outputs, eager has {len(exp)}"
    for a, e in zip(act, exp):
        if isinstance(e, torch.Tensor) and e.dtype in (torch.float32, torch.float64):
            # Reductions may sum in another order than eager.
            torch.testing.assert_close(a, e, equal_nan=True, atol=1e-4, rtol=1e-4)
        else:
            torch.testing.assert_close(a, e, equal_nan=True)  # torch's per-dtype tolerances


def sweep_op(op: Any, device: str, dtype: torch.dtype = torch.float32, max_samples: int = 3) -> tuple[str, str]:
    """(status, detail) for one OpInfo entry."""
    status = "pass"
    fallbacks: list[str] = []
    backend.metrics.fallback_ops.clear()
    if "empty" in op.name:
        return "skip", "uninitialized values (allocation only)"
    if "wrapper_set_seed" in getattr(getattr(op.op, "__code__", None), "co_names", ()):
        # The sample function reseeds at trace time only; random ops are aten fallbacks anyway.
        return "skip", "random op (reseeds inside the sample function)"
    try:
        samples = list(op.sample_inputs(device, dtype, requires_grad=False))[:max_samples]
    except Exception as e:
        return "skip", f"no samples: {type(e).__name__}"
    if not samples:
        return "skip", "no samples"
    for sample in samples:
        inputs = [sample.input, *sample.args]
        tensor_pos = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]
        if not tensor_pos:
            continue
        consts = list(inputs)
        kwargs = sample.kwargs

        def fn(*tensors: Any, _consts: list = consts, _pos: list = tensor_pos, _kw: dict = kwargs) -> Any:
            args = list(_consts)
            for p, t in zip(_pos, tensors):
                args[p] = t
            return op.op(*args, **_kw)

        tensors = [inputs[i] for i in tensor_pos]
        try:
            torch.manual_seed(0)  # random ops are aten fallbacks: same seed, same numbers
            expected = fn(*[t.clone() for t in tensors])
            torch.manual_seed(0)
            again = fn(*[t.clone() for t in tensors])
        except Exception:
            continue
        try:
            torch.testing.assert_close(again, expected, equal_nan=True, atol=0, rtol=0)
        except Exception:
            return "skip", "eager itself is not deterministic for this sample"
        try:
            gm = torch.fx.experimental.proxy_tensor.make_fx(fn)(*tensors)
        except Exception as e:
            return "skip", f"not traceable: {type(e).__name__}"
        before = sum(backend.metrics.fallback_ops.values())
        eager_before = len(backend.metrics.eager_graphs)
        try:
            compiled = backend.compile_fx(gm, [t.clone() for t in tensors])
            torch.manual_seed(0)
            actual = compiled(*[t.clone() for t in tensors])
            _assert_matches(actual, expected)
        except Exception as e:
            return "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        if sum(backend.metrics.fallback_ops.values()) > before or len(backend.metrics.eager_graphs) > eager_before:
            status = "fallback"
            for name, count in backend.metrics.fallback_ops.items():
                if count and name not in fallbacks:
                    fallbacks.append(name)
            if len(backend.metrics.eager_graphs) > eager_before:
                fallbacks.append("graph run as captured: " + backend.metrics.eager_graphs[-1].splitlines()[0][:80])
    return status, ", ".join(fallbacks)


def main(argv: list[str]) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--out", default="docs/opinfo.md")
    args = parser.parse_args(argv)
    rows = []
    with cfg.patch(cpu_backend="triton_interpret", raise_on_internal_error=True):
        for op in op_db[: args.limit or None]:
            if torch.float32 not in op.supported_dtypes(args.device):
                continue
            status, detail = sweep_op(op, args.device)
            rows.append((f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}", status, detail))
            print(rows[-1], flush=True)
    counts = {s: sum(1 for r in rows if r[1] == s) for s in ("pass", "fallback", "fail", "skip")}
    with open(args.out, "w") as f:
        f.write("# OpInfo sweep through pyjit's backend\n\n")
        f.write(f"Command: `python -m tests.backend.opinfo_sweep --device {args.device}"
                f"{' --limit ' + str(args.limit) if args.limit else ''}` (float32, up to 3 samples per op).\n\n")
        f.write("pass: compiled and equal to eager; fallback: equal, with an extern aten fallback; "
                "fail: loud error or mismatch; skip: no usable sample / not traceable.\n\n")
        f.write(f"Totals: {counts}\n\n| op | status | detail |\n|---|---|---|\n")
        for name, status, detail in rows:
            f.write(f"| {name} | {status} | {detail.replace('|', '/')} |\n")


if __name__ == "__main__":
    main(sys.argv[1:])
