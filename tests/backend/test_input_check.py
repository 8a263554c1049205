"""The per-call input check of static compiled graphs (backend/input_check.py): what it accepts
equals the Python comparison's answer, through the compiled guard tree after the first call."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from pyjit.backend.input_check import InputCheck


def _examples() -> list[Any]:
    return [torch.randn(4, 3), torch.randn(3, 4).t(), torch.zeros(2, dtype=torch.int64)]


def _spy(check: InputCheck, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each answer of the Python comparison (it runs only where the tree refused)."""
    seen: list[bool] = []
    original = InputCheck._python

    def python(self: InputCheck, args: Any, grad: bool) -> bool:
        seen.append(original(self, args, grad))
        return seen[-1]

    monkeypatch.setattr(InputCheck, "_python", python)
    return seen


def test_tree_accepts_what_python_accepts_after_the_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    examples = _examples()
    check = InputCheck(examples)
    seen = _spy(check, monkeypatch)
    same = tuple(t.clone() if t.is_contiguous() else t.clone().t().contiguous().t() for t in examples)
    assert check(same, grad=False) and seen == [True] and check.tree is not None
    for _ in range(3):
        assert check(same, grad=False)
    assert seen == [True]  # the tree answered
    # Another stride, dtype or size: refused by both.
    assert not check((examples[0], examples[1].contiguous(), examples[2]), grad=False)
    assert not check((examples[0].double(), examples[1], examples[2]), grad=False)
    assert not check((torch.randn(5, 3), examples[1], examples[2]), grad=False)
    assert seen == [True, False, False, False]


def test_what_only_the_tree_pins_goes_to_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree pins exact types and requires_grad; without grad mode neither matters, so a
    Parameter or a tensor requiring grad is still accepted (by the Python comparison)."""
    examples = _examples()
    check = InputCheck(examples)
    seen = _spy(check, monkeypatch)
    assert check(tuple(examples), grad=False)
    param = torch.nn.Parameter(examples[0].clone())
    assert check((param, examples[1], examples[2]), grad=False)
    assert check((examples[0].clone().requires_grad_(), examples[1], examples[2]), grad=False)
    assert seen == [True, True, True]
    # Under grad mode an input requiring grad needs autograd: refused (the tree is not used).
    assert not check((param, examples[1], examples[2]), grad=True)
    assert check(tuple(examples), grad=True)


def test_scalars_keep_the_python_comparison() -> None:
    check = InputCheck([torch.randn(3), 4])
    assert check((torch.randn(3), 4), grad=False) and check.tree is None
    assert not check((torch.randn(3), 5), grad=False)
    assert not check((torch.randn(3), 4.0), grad=False)
    assert not check((torch.randn(3),), grad=False)
