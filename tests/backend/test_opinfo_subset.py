"""A representative OpInfo subset through the backend (CPU CI budget); the full sweep is
``python -m tests.backend.opinfo_sweep`` (run on the GPU machine)."""
from __future__ import annotations

import pytest
import torch

from .opinfo_sweep import sweep_op

SUBSET = ["add", "mul", "div", "exp", "tanh", "sigmoid", "where", "clamp", "sum", "mean", "amax", "argmax", "var",
          "softmax", "nn.functional.gelu", "nn.functional.layer_norm", "cat", "gather", "transpose", "index_select",
          "nn.functional.pad", "cumsum", "abs", "pow", "remainder"]


def _ops() -> list:
    from torch.testing._internal.common_methods_invocations import op_db
    by_name = {}
    for op in op_db:
        if op.name in SUBSET and op.name not in by_name and not op.variant_test_name:
            by_name[op.name] = op
    return [by_name[n] for n in SUBSET if n in by_name]


@pytest.mark.parametrize("op", _ops(), ids=lambda op: op.name)
def test_opinfo_subset_never_silently_wrong(device: str, op) -> None:
    status, detail = sweep_op(op, device, torch.float32, max_samples=2)
    assert status in ("pass", "fallback", "skip"), detail
