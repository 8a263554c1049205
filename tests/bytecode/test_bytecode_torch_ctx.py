"""Resume inside ``with torch.no_grad():`` when torch is installed (skipped otherwise; the
corpus tests use a plain context manager with the same observable-state behaviour)."""
from __future__ import annotations

import types

import pytest

import pyjit.bytecode as bc
from pyjit.bytecode.resume import resume_point

torch = pytest.importorskip("torch")


def _body(x, log):
    y = x + 1
    with torch.no_grad():
        log.append(torch.is_grad_enabled())
        z = y * 2
        log.append(torch.is_grad_enabled())
    log.append(torch.is_grad_enabled())
    return z


def test_resume_reenters_no_grad():
    code = _body.__code__
    instructions = bc.decode(code)
    # the statement `z = y * 2` inside the block
    point_inst = next(i for i in instructions if i.lineno == code.co_firstlineno + 4)
    point = resume_point(code, point_inst.offset)
    assert point.supported and point.context_slots == (0,)
    values = {"x": 3, "y": 4}
    # z is live too (a suppressing __exit__ would reach `return z`) but unbound here: not passed
    assert point.live_locals == {"log", "y", "z"}
    live = ["log", "y"]
    resume = bc.make_resume_code(code, point_inst.offset, point.stack_depth, live, context_slots=(0,))
    fn = types.FunctionType(resume, _body.__globals__, resume.co_name)
    log = [torch.is_grad_enabled()]
    values["log"] = log
    args = [torch.no_grad() if n == "___stack0" else values[n] for n in bc.resume_parameter_names(code, 1, live)]
    assert fn(*args) == 8
    assert log == [True, False, True]
    assert torch.is_grad_enabled()
