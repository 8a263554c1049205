"""Direct measurements of pyjit internals through their public contracts (overhead suite).

- :func:`hook_overhead_row`: what ``pyjit.enable()`` (the global frame hook) costs ordinary,
  tensor-free Python code: ``fib(15)`` with the hook off and on, samples interleaved.
- :func:`guard_check_row`: one ``pyjit._C.GuardTree.check`` over 1/4/16 tensor arguments (the
  per-call guard cost of a cache hit), built with the contract's ``check_tensor``.

Both report UNAVAILABLE with the reason while the layer they probe is missing.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from bench.measure import BatchTimer, TimingPlan, time_calls, time_interleaved
from bench.runner import STATUS_ERROR, STATUS_OK, STATUS_UNAVAILABLE


def _pure_python_workload() -> int:
    """No tensors at all: measures what the global hook costs ordinary Python code."""

    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    return fib(15)


def hook_overhead_row(plan: TimingPlan) -> dict[str, Any]:
    """Time a pure-Python function with and without ``pyjit.enable()`` (the global hook)."""
    row: dict[str, Any] = {"suite": "overhead", "workload": "hook_pure_python", "backend": "pyjit.enable",
                           "status": STATUS_UNAVAILABLE, "reason": None,
                           "params": {"device": "cpu", "description": "fib(15) in pure Python, hook on vs off"}}
    from bench.backends import pyjit_api

    pyjit, why = pyjit_api()
    if pyjit is None:
        row["reason"] = why
        return row
    enable, disable = getattr(pyjit, "enable", None), getattr(pyjit, "disable", None)
    if not (callable(enable) and callable(disable)):
        row["reason"] = "pyjit.enable/pyjit.disable do not exist yet"
        return row
    cpu = torch.device("cpu")

    def hooked(step: Callable[[], Any]) -> Callable[[], Any]:
        # The hook is switched on around each calibration/sample, outside the timed batch.
        def with_hook() -> Any:
            enable()
            try:
                return step()
            finally:
                disable()

        return with_hook

    try:
        off = BatchTimer(_pure_python_workload, [()], cpu, plan)
        on = BatchTimer(_pure_python_workload, [()], cpu, plan)
        on.calibrate = hooked(on.calibrate)  # type: ignore[method-assign]
        on.sample = hooked(on.sample)  # type: ignore[method-assign]
        off.calibrate()
        on.calibrate()
        time_interleaved([off, on], plan)  # same noise for both
    except Exception as exc:
        row.update(status=STATUS_ERROR, reason=f"{type(exc).__name__}: {exc}"[:300])
        return row
    finally:
        if callable(getattr(pyjit, "reset", None)):
            pyjit.reset()
    t_on, t_off = on.timing(), off.timing()
    row.update(status=STATUS_OK, timing=t_on.summary(), timing_hook_off=t_off.summary(),
               hook_overhead_fraction=(t_on.median - t_off.median) / t_off.median if t_off.median > 0 else None)
    return row


def guard_check_row(n_tensors: int, plan: TimingPlan) -> dict[str, Any]:
    """Time ``GuardTree.check`` of a tree holding one tensor check per argument (all passing)."""
    row: dict[str, Any] = {"suite": "overhead", "workload": f"guard_check_{n_tensors}_tensors",
                           "backend": "pyjit._C", "status": STATUS_UNAVAILABLE, "reason": None,
                           "params": {"device": "cpu", "shape": f"{n_tensors}x[8] f32",
                                      "description": f"GuardTree.check, {n_tensors} tensor checks, passing"}}
    try:
        from pyjit import _C
    except Exception as exc:
        row["reason"] = f"pyjit._C is not built ({type(exc).__name__}: {exc})"[:300]
        return row
    try:
        args = tuple(torch.randn(8) for _ in range(n_tensors))
        tree = _C.GuardTree()
        for i, t in enumerate(args):
            tree.arg(i).check_tensor(type(t), t.dtype, t.device, t.requires_grad, tuple(t.shape), t.stride(), i)

        def target(*a: Any) -> None:  # the function whose frame the guard would belong to
            return None

        if tree.check(target, args) != -1:
            raise RuntimeError("the guard tree rejected the very tensors it was built from")
        timing = time_calls(tree.check, [(target, args)], torch.device("cpu"), plan)
    except Exception as exc:
        row.update(status=STATUS_ERROR, reason=f"{type(exc).__name__}: {exc}"[:300])
        return row
    row.update(status=STATUS_OK, timing=timing.summary(), per_tensor_s=timing.median / n_tensors)
    return row
