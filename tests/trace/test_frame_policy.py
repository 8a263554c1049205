"""Frame conversion policy: internal errors fall back to eager with file:line, recompiles are
logged with the failing guard, library frames are skipped, reset forgets, the pure-Python
runtime (no C extension) gives the same results."""
from __future__ import annotations

import logging

import pytest
import torch

import pyjit
from pyjit import _C
from pyjit.config import patch
from pyjit.errors import BackendError

from .conftest import same


def affine(x):
    return x * 2 + 1


def failing_backend(gm, example_inputs):
    raise RuntimeError("backend exploded")


def test_user_backend_error_falls_back_under_suppress_errors_and_logs_location(caplog):
    x = torch.randn(3)
    with patch(raise_on_internal_error=False, suppress_errors=True), \
            caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
        out = pyjit.jit(affine, backend=failing_backend)(x)
    same(affine(x), out)
    msg = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{__file__}:{affine.__code__.co_firstlineno}" in msg and "backend exploded" in msg
    assert _C.is_skip(affine.__code__)


def test_user_backend_error_raises_to_the_user_by_default():
    # The user's own backend failed: their error (as torch.compile's BackendCompilerFailed),
    # naming the graph's frame; pyjit's own backend keeps falling back with a log line.
    with patch(raise_on_internal_error=False), pytest.raises(BackendError, match="backend exploded") as info:
        pyjit.jit(affine, backend=failing_backend)(torch.randn(3))
    assert f"{__file__}:{affine.__code__.co_firstlineno}" in str(info.value)


def test_internal_error_raises_under_config_flag():
    with pytest.raises(BackendError, match="backend exploded"):
        pyjit.jit(affine, backend=failing_backend)(torch.randn(3))


def test_recompile_is_logged_with_failing_guard_in_source_form(rec, caplog):
    jf = pyjit.jit(affine, backend=rec)
    with caplog.at_level(logging.INFO, logger="pyjit.recompiles"):
        jf(torch.randn(8))
        jf(torch.randn(16))
        jf(torch.randn(8, dtype=torch.float64))
    msgs = [r.getMessage() for r in caplog.records]
    assert len(rec.graphs) == 3
    assert any("L['x'].size()[0]: expected 8, got 16" in m for m in msgs)
    assert any("L['x'].dtype: expected torch.float32, got torch.float64" in m for m in msgs)


def test_unchanged_inputs_never_recompile_and_reset_forgets(rec):
    jf = pyjit.jit(affine, backend=rec)
    for _ in range(5):
        same(affine(x := torch.randn(4)), jf(x))
    assert len(rec.graphs) == 1
    pyjit.reset()
    same(affine(x), jf(x))
    assert len(rec.graphs) == 2


def test_entry_limit_then_eager(rec, caplog):
    rec.pyjit_dynamic = False  # one static entry per size, so the sizes reach the limit
    with patch(entry_limit=2), caplog.at_level(logging.WARNING, logger="pyjit.recompiles"):
        jf = pyjit.jit(affine, backend=rec)
        for n in (1, 2, 3, 4):
            same(affine(x := torch.randn(n)), jf(x))
    assert len(rec.graphs) == 2
    assert any("entry limit" in r.getMessage() for r in caplog.records)


def test_library_frames_reached_during_a_call_are_marked_skip(rec):
    jf = pyjit.jit(affine, backend="pyjit")
    jf(torch.randn(3))
    jf(torch.randn(3))
    # The GraphModule forward / torch internals ran while the callback was installed.
    from pyjit.frame.policy import is_library_code

    assert is_library_code(torch.nn.Module.__call__.__code__)
    assert not is_library_code(affine.__code__)


def test_python_runtime_matches(rec, monkeypatch):
    """Without the C extension JitFunction keeps its own cache; same results and recompiles."""
    import pyjit.api as api

    monkeypatch.setattr(api, "_C", None)

    def f(x, *rest, scale=2.0, **kw):
        return x * scale + len(rest) + kw.get("shift", 0)

    jf = pyjit.jit(f, backend=rec)
    x = torch.randn(4)
    same(f(x, 1, 2, scale=3.0, shift=1), jf(x, 1, 2, scale=3.0, shift=1))
    same(f(x, 1, 2, scale=3.0, shift=1), jf(x, 1, 2, scale=3.0, shift=1))
    assert len(rec.graphs) == 1
    same(f(x), jf(x))
    assert len(rec.graphs) == 2


def test_jit_method_and_decorated_method(rec):
    class Model:
        def __init__(self):
            self.w = torch.randn(3)

        @pyjit.jit(backend=rec)
        def apply(self, x):
            return x * self.w

    m = Model()
    x = torch.randn(3)
    same(x * m.w, m.apply(x))
    same(x * m.w, pyjit.jit(m.apply.__wrapped__.__get__(m), backend=rec)(x))


def test_enable_disable_compiles_user_frames(rec):
    def g(x):
        return x.sin() + 1

    pyjit.enable(backend=rec)
    try:
        out = g(torch.ones(2))
    finally:
        pyjit.disable()
    same(torch.ones(2).sin() + 1, out)
    assert len(rec.graphs) == 1


def test_python_runtime_graph_break_and_kwonly(rec, monkeypatch):
    import pyjit.api as api

    monkeypatch.setattr(api, "_C", None)

    def f(x, *, k=2):
        return x * k + x.sum().item()

    jf = pyjit.jit(f, backend=rec)
    x = torch.randn(3)
    same(f(x, k=3), jf(x, k=3))
    same(f(x), jf(x))
    # The prefix before .item() is compiled once per k; the resume function runs as plain
    # Python (the pure-Python runtime has no hook to compile it).
    assert len(rec.graphs) == 2


def test_explain_reports_graph_guards_and_breaks():
    def good(x, n=2):
        return x.relu() * n

    def bad(x):
        return x * x.sum().item()

    e = pyjit.explain(good)(torch.randn(3))
    assert e.graph_count == 1 and e.call_count == 2 and e.graph_break is None
    assert any("L['x']" in g for g in e.guards) and "graphs: 1" in str(e)
    b = pyjit.explain(bad)(torch.randn(3))
    # The prefix (x.sum()) is one graph, .item() runs natively, the resume function another graph.
    assert b.graph_count == 2 and b.break_count == 1 and b.graph_break.kind == "data_dependent"
    assert b.graph_break.location.lineno == bad.__code__.co_firstlineno + 1
    assert len(b.resume_functions) == 1 and "__resume_at_" in b.resume_functions[0]
    assert "resume functions:" in str(b) and "graph break 1:" in str(b)
    assert pyjit.explain(lambda n: n + 1)(3).skipped_reason


def test_import_inside_function_and_unbound_tensor_method(rec):
    def f(x):
        import math

        from torch.nn import functional as F

        return torch.Tensor.add(F.relu(x), math.pi)

    x = torch.randn(4)
    same(f(x), pyjit.jit(f, backend=rec, fullgraph=True)(x))


def test_pyjit_backend_failing_at_run_time_falls_back(monkeypatch, caplog):
    import pyjit.backends as backends

    class Boom:
        @staticmethod
        def compile_fx(gm, example_inputs):
            def run(*args):
                raise RuntimeError("kernel launch failed")

            return run

    monkeypatch.setattr(backends.importlib, "import_module", lambda name: Boom)
    x = torch.randn(3)
    with patch(raise_on_internal_error=False), caplog.at_level(logging.WARNING, logger="pyjit.fallbacks"):
        jf = pyjit.jit(affine)
        same(affine(x), jf(x))
        same(affine(x), jf(x))
    assert any("kernel launch failed" in r.getMessage() for r in caplog.records)


class _Scaler:
    factor = 3

    @classmethod
    def scale(cls, v):
        return v * cls.factor


def test_python_runtime_vanished_guard_path_is_a_miss(monkeypatch):
    """A classmethod replaced by a plain function: the guard on ``...scale.__func__`` can no
    longer be evaluated. That must be a miss (recompile), as in the C tree, never an error."""
    from pyjit import api

    monkeypatch.setattr(api, "_C", None)
    obj = _Scaler()

    def f(x):
        return obj.scale(x)

    jf = pyjit.jit(f, backend="eager")
    x = torch.randn(4)
    same(f(x), jf(x))
    original = _Scaler.__dict__["scale"]
    try:
        _Scaler.scale = lambda self, v: v - 1  # a plain function now: no __func__
        same(f(x), jf(x))
    finally:
        _Scaler.scale = original
