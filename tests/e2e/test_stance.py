"""``pyjit.set_stance``: the four stances, as a call, a context manager and a decorator, nested,
per thread, and the text of ``RecompileError`` (``pyjit/frame/stance.py``).

A counting backend tells compiles (backend calls) from runs of compiled graphs; results are
checked against eager on every call.
"""
from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

import pyjit
from pyjit.frame import stance as stance_mod


class Counting:
    """A backend that runs the captured graph and counts compiles and compiled runs."""

    def __init__(self) -> None:
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
        self.compiles += 1

        def run(*args: Any) -> Any:
            self.runs += 1
            return gm.forward(*args)

        return run


def fn(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2.0 + 1.0


@pytest.fixture
def jitted(fresh_pyjit: None) -> tuple[Any, Counting]:
    backend = Counting()
    yield pyjit.jit(fn, backend=backend, dynamic=False), backend
    pyjit.set_stance("default")


def _check(jf: Any, x: torch.Tensor) -> None:
    torch.testing.assert_close(jf(x), fn(x))


def test_default_compiles_and_recompiles(jitted) -> None:
    jf, be = jitted
    assert stance_mod.current() == "default"
    _check(jf, torch.randn(4))
    _check(jf, torch.randn(5))
    assert (be.compiles, be.runs) == (2, 2)


def test_force_eager_traces_nothing_and_runs_no_entry(jitted) -> None:
    jf, be = jitted
    x = torch.randn(4)
    with pyjit.set_stance("force_eager"):
        _check(jf, x)
        assert be.compiles == 0
    _check(jf, x)  # default again: compiles
    assert (be.compiles, be.runs) == (1, 1)
    with pyjit.set_stance("force_eager"):
        _check(jf, x)
        _check(jf, x)
    assert (be.compiles, be.runs) == (1, 1), "a cached entry ran under force_eager"
    _check(jf, x)
    assert be.runs == 2


def test_force_eager_also_stops_enable(fresh_pyjit: None) -> None:
    be = Counting()
    with pyjit.set_stance("force_eager"), pyjit.enable(backend=be):
        _check(fn, torch.randn(3))
    assert be.compiles == 0
    with pyjit.enable(backend=be):
        _check(fn, torch.randn(3))
    assert be.compiles == 1


def test_eager_on_recompile_runs_entries_and_never_recompiles(jitted) -> None:
    jf, be = jitted
    x4 = torch.randn(4)
    with pyjit.set_stance("eager_on_recompile"):
        _check(jf, x4)  # a first compile is no recompile
        assert (be.compiles, be.runs) == (1, 1)
        _check(jf, torch.randn(6))  # guard failure: runs eagerly
        _check(jf, torch.randn(6))
        assert (be.compiles, be.runs) == (1, 1)
        _check(jf, x4)  # the cached entry still runs
        assert be.runs == 2
    _check(jf, torch.randn(6))
    assert be.compiles == 2


def test_fail_on_recompile_names_guard_and_location(jitted) -> None:
    jf, be = jitted
    x = torch.randn(4)
    _check(jf, x)
    with pyjit.set_stance("fail_on_recompile"):
        _check(jf, x)  # a hit is fine
        with pytest.raises(pyjit.RecompileError) as info:
            jf(torch.randn(4, dtype=torch.float64))
    text = str(info.value)
    assert f"{__file__}:{fn.__code__.co_firstlineno}" in text
    assert "L['x'].dtype" in text and "torch.float32" in text and "torch.float64" in text
    assert be.compiles == 1
    # the failed call compiled nothing: under the default stance it compiles now
    _check(jf, torch.randn(4, dtype=torch.float64))
    assert be.compiles == 2


def test_call_form_and_restore(jitted) -> None:
    jf, be = jitted
    handle = pyjit.set_stance("force_eager")
    assert stance_mod.current() == "force_eager"
    _check(jf, torch.randn(2))
    handle.restore()
    assert stance_mod.current() == "default"
    _check(jf, torch.randn(2))
    assert be.compiles == 1


def test_nesting_and_decorator(jitted) -> None:
    jf, be = jitted

    @pyjit.set_stance("force_eager")
    def eager_call(x: torch.Tensor) -> torch.Tensor:
        assert stance_mod.current() == "force_eager"
        return jf(x)

    assert stance_mod.current() == "default", "decorating must not change the stance"
    with pyjit.set_stance("fail_on_recompile"):
        with pyjit.set_stance("force_eager"):
            assert stance_mod.current() == "force_eager"
        assert stance_mod.current() == "fail_on_recompile"
        x = torch.randn(3)
        torch.testing.assert_close(eager_call(x), fn(x))
        assert stance_mod.current() == "fail_on_recompile"
        assert be.compiles == 0
    assert stance_mod.current() == "default"
    with pytest.raises(ValueError, match="unknown stance 'fast'"):
        pyjit.set_stance("fast")


def test_stance_is_per_thread(jitted) -> None:
    jf, be = jitted
    seen: dict[str, Any] = {}
    ready, go = threading.Event(), threading.Event()

    def other() -> None:
        seen["stance"] = stance_mod.current()
        x = torch.randn(4)
        seen["ok"] = torch.allclose(jf(x), fn(x))
        seen["compiles"] = be.compiles
        ready.set()
        go.wait(10)

    with pyjit.set_stance("force_eager"):
        t = threading.Thread(target=other)
        t.start()
        assert ready.wait(60)
        assert stance_mod.current() == "force_eager"
        go.set()
        t.join()
    assert seen == {"stance": "default", "ok": True, "compiles": 1}

    def fails() -> None:
        with pyjit.set_stance("fail_on_recompile"):
            try:
                jf(torch.randn(7, 2))
            except pyjit.RecompileError:
                seen["raised"] = True

    t = threading.Thread(target=fails)
    t.start()
    t.join()
    assert seen.get("raised") and stance_mod.current() == "default"
    _check(jf, torch.randn(7, 2))  # this thread's default stance compiles it
    assert be.compiles == 2


def test_pure_python_runtime_follows_the_stances(fresh_pyjit: None, monkeypatch: Any) -> None:
    """Without the C extension (JitFunction's own Python cache) the stances mean the same."""
    import pyjit.api as api

    monkeypatch.setattr(api, "_C", None)
    be = Counting()
    jf = pyjit.jit(fn, backend=be, dynamic=False)
    x = torch.randn(4)
    try:
        with pyjit.set_stance("force_eager"):
            _check(jf, x)
        assert be.compiles == 0
        _check(jf, x)
        with pyjit.set_stance("force_eager"):
            _check(jf, x)
        assert (be.compiles, be.runs) == (1, 1)
        with pyjit.set_stance("eager_on_recompile"):
            _check(jf, torch.randn(6))
        assert be.compiles == 1
        with pyjit.set_stance("fail_on_recompile"), pytest.raises(pyjit.RecompileError, match=r"L\['x'\]"):
            jf(torch.randn(6))
        _check(jf, torch.randn(6))
        assert be.compiles == 2
    finally:
        pyjit.set_stance("default")
