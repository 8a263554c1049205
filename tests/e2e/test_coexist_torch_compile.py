"""pyjit and torch.compile in one process.

Each case runs in a fresh subprocess under a timeout (the failures this guards against were a
hang at 100% CPU and a segmentation fault): a torch.compile'd function called inside a
pyjit-jitted one (or under ``pyjit.enable()``) and the reverse, each with and without an
earlier ``torch.compile`` whose backend raised, for pyjit's backends "eager" and the default.
Every case checks the results against eager, that each compiler really compiled its part
(pyjit has a cache entry for its function, torch.compile's backend saw a graph), exit code 0,
and that stderr has no warning from Dynamo about pyjit (Dynamo must not trace pyjit's entry
points or internals).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 240

CHILD = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("always")
    import torch
    import pyjit
    from pyjit import _C

    nesting, failed_first, backend, entry = sys.argv[1:5]
    tc_graphs = []

    def tc_backend(gm, example_inputs):  # torch.compile's "eager", counting graphs
        tc_graphs.append(gm)
        return gm.forward

    if failed_first == "1":
        def bad_backend(gm, example_inputs):
            raise RuntimeError("backend failure on purpose")

        def h(x):
            return x.sin() + 1

        try:
            torch.compile(h, backend=bad_backend)(torch.randn(3))
        except Exception as e:  # torch wraps it (BackendCompilerFailed)
            assert "backend failure on purpose" in str(e), e
        else:
            raise AssertionError("the failing torch.compile did not raise")

    def inner(x):
        return torch.cos(x) * 2 + x.sum()

    def expected(x):
        return (torch.cos(x + 1) * 2 + (x + 1).sum()) - 3

    xs = [torch.randn(4, 5), torch.randn(4, 5), torch.randn(4, 5)]

    if nesting == "pyjit_outer":  # torch.compile'd inner inside a pyjit-jitted outer
        tc_inner = torch.compile(inner, backend=tc_backend)

        def outer(x):
            y = x + 1
            return tc_inner(y) - 3

        if entry == "jit":
            run = pyjit.jit(outer, backend=backend)
        else:
            def run(x):
                with pyjit.enable(backend=backend):
                    return outer(x)
        got = [run(x) for x in xs]
        assert len(_C.cache_entries(outer.__code__)) >= 1, "pyjit compiled nothing for outer"
        assert tc_graphs, "torch.compile compiled nothing for inner"
    elif entry == "jit":  # a pyjit-jitted inner inside a torch.compile'd outer
        j_inner = pyjit.jit(inner, backend=backend)

        def outer(x):
            y = x + 1
            return j_inner(y) - 3

        tc_outer = torch.compile(outer, backend=tc_backend)
        got = [tc_outer(x) for x in xs]
        assert len(_C.cache_entries(inner.__code__)) >= 1, "pyjit compiled nothing for inner"
        assert tc_graphs, "torch.compile compiled nothing for outer"
    else:  # a torch.compile'd function called under pyjit.enable(): torch.compile owns its frames
        def outer(x):
            y = x + 1
            return inner(y) - 3

        tc_outer = torch.compile(outer, backend=tc_backend)

        def run(x):
            with pyjit.enable(backend=backend):
                return tc_outer(x)
        got = [run(x) for x in xs]
        assert tc_graphs, "torch.compile compiled nothing for outer"
        # pyjit stepped aside for the frames torch.compile ran (it never traced them)
        assert _C.cache_entries(inner.__code__) == [] and _C.cache_entries(outer.__code__) == []
    for x, g in zip(xs, got):
        torch.testing.assert_close(g, expected(x))
    # Both hooks off again: nothing left installed by pyjit once its calls returned.
    assert not _C._hook_installed()
    print("CHILD-OK")
    """
)


def _run_child(nesting: str, failed_first: bool, backend: str, entry: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYJIT_CACHE_DIR"] = str(tmp_path / "cache")
    env.setdefault("PYJIT_CPU_BACKEND", "cpp")
    return subprocess.run([sys.executable, "-c", CHILD, nesting, "1" if failed_first else "0", backend, entry],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def _check(proc: subprocess.CompletedProcess) -> None:
    out = f"exit code {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, out
    assert "CHILD-OK" in proc.stdout, out
    # No Dynamo warning (or graph-break trace) mentioning pyjit's internals.
    for line in proc.stderr.splitlines():
        low = line.lower()
        assert not ("pyjit" in low and ("dynamo" in low or "warning" in low)), out
    assert "Dynamo does not know how to trace" not in proc.stderr, out
    assert "pyjit failed to compile" not in proc.stderr, out


CASES = [(n, f, b, e)
         for n in ("pyjit_outer", "tc_outer")
         for f in (False, True)
         for b in ("eager", "pyjit")
         for e in ("jit", "enable")
         # the default backend is exercised with pyjit.jit only (enable() adds nothing backend-specific)
         if not (b == "pyjit" and e == "enable")]


@pytest.mark.parametrize("nesting,failed_first,backend,entry", CASES,
                         ids=[f"{n}-{'after_failed' if f else 'clean'}-{b}-{e}" for n, f, b, e in CASES])
def test_coexist(nesting, failed_first, backend, entry, tmp_path):
    _check(_run_child(nesting, failed_first, backend, entry, tmp_path))


def test_escape_only_for_a_hook_defined_in_torch(tmp_path):
    """The C core names the library that defines the hook on top of pyjit's; only torch's gets
    the torch.compiler.disable escape (another tool's hook: none, pyjit goes on top instead)."""
    import torch

    from pyjit.frame.coexist import make_escape

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_python.so")
    assert callable(make_escape(torch_lib))
    assert make_escape(None) is None
    assert make_escape(str(tmp_path / "libdebugger.so")) is None
    assert make_escape(os.path.dirname(torch.__file__) + "_other/lib.so") is None  # a sibling folder
