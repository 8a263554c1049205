"""Checks a compiled result against eager before anything is timed.

A wrong result is a FAIL and is never timed: a fast wrong answer must not look like a speed-up.
Outputs are compared leaf by leaf after flattening (tuples, lists, dicts, dataclasses that
``torch.utils._pytree`` knows): same structure, same shapes and dtypes, values within the
workload's tolerance (NaN equals NaN; integer and bool tensors must match exactly).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch.utils import _pytree as pytree


@dataclasses.dataclass
class Verdict:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0

    def as_dict(self, atol: float, rtol: float) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "max_abs_err": _finite_or_none(self.max_abs_err),
            "max_rel_err": _finite_or_none(self.max_rel_err),
            "atol": atol,
            "rtol": rtol,
        }


def _finite_or_none(value: float) -> float | None:
    # JSON has no inf/nan; an infinite error is reported through ok=False and the reason.
    return value if math.isfinite(value) else None


def compare(expected: Any, actual: Any, atol: float, rtol: float) -> Verdict:
    """Compare two (nested) outputs; the first difference found is the reason."""
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    if exp_spec != act_spec:
        return Verdict(False, f"output structure differs: expected {exp_spec}, got {act_spec}")
    worst_abs = 0.0
    worst_rel = 0.0
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
            if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
                return Verdict(False, f"output {i}: expected {type(e).__name__}, got {type(a).__name__}")
            if e.shape != a.shape:
                return Verdict(False, f"output {i}: shape {tuple(a.shape)} != eager {tuple(e.shape)}")
            if e.dtype != a.dtype:
                return Verdict(False, f"output {i}: dtype {a.dtype} != eager {e.dtype}")
            abs_err, rel_err, bad = _tensor_errors(e, a, atol, rtol)
            worst_abs = max(worst_abs, abs_err)
            worst_rel = max(worst_rel, rel_err)
            if bad:
                return Verdict(
                    False,
                    f"output {i}: values differ from eager (max abs err {abs_err:.3g}, max rel err {rel_err:.3g}, "
                    f"atol {atol:g}, rtol {rtol:g})",
                    worst_abs,
                    worst_rel,
                )
        elif e != a and not (isinstance(e, float) and isinstance(a, float) and math.isnan(e) and math.isnan(a)):
            return Verdict(False, f"output {i}: {a!r} != eager {e!r}")
    return Verdict(True, "", worst_abs, worst_rel)


def _tensor_errors(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> tuple[float, float, bool]:
    """(max abs error, max relative error, any element outside tolerance)."""
    e = e.detach()
    a = a.detach().to(e.device)
    if e.numel() == 0:
        return 0.0, 0.0, False
    if not (e.dtype.is_floating_point or e.dtype.is_complex):
        equal = bool(torch.equal(e, a))
        return (0.0 if equal else math.inf), (0.0 if equal else math.inf), not equal
    e64 = e.to(torch.float64) if not e.dtype.is_complex else e.to(torch.complex128)
    a64 = a.to(e64.dtype)
    both_nan = torch.isnan(e64) & torch.isnan(a64)
    same_inf = torch.isinf(e64) & (e64 == a64)
    diff = (e64 - a64).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=math.inf)
    allowed = atol + rtol * e64.abs()
    allowed = torch.where(torch.isfinite(allowed), allowed, torch.zeros_like(allowed))
    bad = bool((diff > allowed).any())
    max_abs = float(diff.max())
    rel = diff / e64.abs().clamp_min(1e-12)
    max_rel = float(rel.max())
    return max_abs, max_rel, bad
