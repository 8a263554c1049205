"""bench.runner and bench.backends: FAIL for wrong results (never timed), ERROR, UNAVAILABLE."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

from bench.backends import Backend, make_backend, make_backends
from bench.measure import TimingPlan
from bench.runner import Case, parse_phases
from bench.spec import Built, Workload

CPU = torch.device("cpu")
PLAN = TimingPlan(samples=3, sample_time_s=0.001, warmup_calls=1, warmup_time_s=0.0)


def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2.0 + y


def _build(device: torch.device, size: str) -> Built:
    return Built(scale_add, lambda g: (torch.randn(64, generator=g), torch.randn(64, generator=g)), "2x[64] f32")


WORKLOAD = Workload("scale_add", "kernels", _build, "x*2+y", memory_bound=True)


def _case() -> Case:
    return Case(WORKLOAD, CPU, "small", PLAN, copy_gbps=10.0, input_cap_bytes=1 << 20)


def test_eager_is_timed_and_wrong_backend_fails_untimed():
    case = _case()
    eager = case.run(make_backend("eager", CPU), None)
    assert eager["status"] == "OK"
    assert eager["speedup_vs_eager"] == 1.0
    assert len(eager["timing"]["samples"]) >= 3
    assert eager["bandwidth"]["bytes"] == 3 * 64 * 4
    wrong = case.run(make_backend("wrong", CPU), None)
    assert wrong["status"] == "FAIL"
    assert "differ" in wrong["reason"]
    assert "timing" not in wrong and "speedup_vs_eager" not in wrong


def test_baked_in_result_is_caught_by_second_input_set():
    case = _case()
    case.run(make_backend("eager", CPU), None)
    first_result: dict[str, torch.Tensor] = {}

    def memoizing(fn):  # returns the first answer forever: right once, wrong after
        def run(*args):
            if "out" not in first_result:
                first_result["out"] = fn(*args)
            return first_result["out"]

        return run

    b = Backend("memo", "test", True, "", memoizing, lambda: None)
    row = case.run(b, None)
    assert row["status"] == "FAIL"


def test_raising_backend_is_error_with_reason():
    def broken(fn):
        def run(*args):
            raise RuntimeError("kernel exploded")

        return run

    row = _case().run(Backend("broken", "test", True, "", broken, lambda: None), None)
    assert row["status"] == "ERROR" and "kernel exploded" in row["reason"]


def test_unavailable_backend_is_reported_not_dropped():
    row = _case().run(Backend("ghost", "test", False, "not installed", lambda f: f, lambda: None), None)
    assert row["status"] == "UNAVAILABLE" and row["reason"] == "not installed"


def test_make_backends_always_includes_eager_and_rejects_unknown():
    names = [b.name for b in make_backends(["wrong"], CPU)]
    assert names == ["eager", "wrong"]
    try:
        make_backend("nope", CPU)
    except ValueError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("unknown backend accepted")


def test_every_default_backend_is_available_or_says_why():
    for b in make_backends(["pyjit", "torch.compile", "pyjit+inductor", "dynamo+pyjit"], CPU):
        assert b.available or b.reason


def test_case_timeout_becomes_error():
    import time

    def slow(fn):
        def run(*args):
            time.sleep(5)
            return fn(*args)

        return run

    row = _case().run(Backend("slow", "test", True, "", slow, lambda: None), 0.5)
    assert row["status"] == "ERROR" and "time share" in row["reason"]


def test_parse_phases_structured_and_text():
    rec1 = logging.LogRecord("pyjit.compile_times", logging.INFO, "/x/convert.py", 1, "compiled f", None, None)
    rec1.phases = {"trace": 0.25, "codegen": 0.5}
    rec2 = logging.LogRecord("pyjit.compile_times", logging.INFO, "/x/convert.py", 1,
                             "f: trace=10ms triton: 1.5s", None, None)
    rec3 = logging.LogRecord("pyjit.compile_times", logging.INFO, "/x/compile_fx.py", 1,
                             "compiled g: trace 2.0 ms, lower+codegen 3 ms, kernels 4", None, None)
    phases = parse_phases([rec1, rec2, rec3])
    assert phases["trace"] == 0.25 and phases["codegen"] == 0.5
    assert abs(phases["convert.trace"] - 0.010) < 1e-12 and phases["convert.triton"] == 1.5
    assert abs(phases["compile_fx.trace"] - 0.002) < 1e-12 and abs(phases["compile_fx.lower+codegen"] - 0.003) < 1e-12
    assert not any(k.endswith("kernels") for k in phases)  # a count, not a time


def test_training_step_workload_checks_loss_and_gradients():
    from bench.workloads import by_name

    w = by_name("mlp_classifier_train")
    case = Case(w, CPU, "small", PLAN, copy_gbps=None, input_cap_bytes=1 << 20)
    n_params = len(list(case.built.fn.parameters()))
    assert len(case.refs[0]) == 1 + n_params  # the loss and one gradient per parameter
    eager = case.run(make_backend("eager", CPU), None)
    assert eager["status"] == "OK"

    def wrong_gradients(model):  # a compiled forward that is off by a scale: loss and grads differ
        def forward(x):
            return model(x) * 1.5

        return forward

    row = case.run(Backend("scaled", "test", True, "", wrong_gradients, lambda: None), None)
    assert row["status"] == "FAIL"
