"""Backend names (``pyjit/backends.py``): ``pyjit.list_backends()``, torch.compile's names,
plug-ins through the ``pyjit_backends`` entry-point group, ``"inductor"`` resolved only when a
user asks for it, and the error for an unknown name.

The plug-in and Inductor checks run in subprocesses: a fake installed distribution (a
``.dist-info`` folder with ``entry_points.txt``) on ``sys.path``, and a clean ``sys.modules``
to see what pyjit imports.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import pyjit

REPO = str(Path(__file__).resolve().parents[2])


def _run(code: str, tmp_path: Path, extra_path: str = "") -> dict[str, Any]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYJIT_")}
    env.update(PYJIT_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(p for p in (REPO, extra_path) if p))
    p = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_list_backends_has_pyjit_and_torch_compile_names() -> None:
    names = pyjit.list_backends()
    assert names == sorted(names)
    for name in ("pyjit", "eager", "aot_eager", "aot_eager_decomp_partition", "cudagraphs", "pyjit_cudagraphs",
                 "inductor"):
        assert name in names, name
    assert set(pyjit.backends.list()) <= set(names)


@pytest.mark.parametrize("name", ["eager", "aot_eager", "aot_eager_decomp_partition", "cudagraphs"])
def test_torch_compile_names_compile_correctly(name: str, fresh_pyjit: None) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 3 - x.sum()

    x = torch.randn(5)
    torch.testing.assert_close(pyjit.jit(f, backend=name)(x), f(x))


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(ValueError) as info:
        pyjit.jit(lambda x: x + 1, backend="inducter")
    text = str(info.value)
    assert "unknown pyjit backend 'inducter'" in text
    assert all(n in text for n in ("eager", "aot_eager", "inductor", "pyjit"))
    assert "pyjit_backends" in text


def test_entry_point_plugin_is_found_and_used(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "fakeplug-1.0.dist-info").mkdir(parents=True)
    (site / "fakeplug-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (site / "fakeplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[pyjit_backends]\nfakeplug_backend = fakeplug:backend\n")
    (site / "fakeplug.py").write_text(textwrap.dedent('''
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(len(list(gm.graph.nodes)))
            return gm.forward
    '''))
    result = _run('''
        import json, sys
        import torch, pyjit
        listed = "fakeplug_backend" in pyjit.list_backends()
        loaded_early = "fakeplug" in sys.modules
        def f(x):
            return torch.cos(x) + 1
        x = torch.randn(4)
        y = pyjit.jit(f, backend="fakeplug_backend")(x)
        import fakeplug
        print("RESULT " + json.dumps({"listed": listed, "loaded_early": loaded_early, "graphs": fakeplug.graphs,
                                      "same": bool(torch.allclose(y, f(x)))}))
    ''', tmp_path, str(site))
    assert result["listed"] and not result["loaded_early"], result
    assert len(result["graphs"]) == 1 and result["graphs"][0] > 0 and result["same"], result


def test_inductor_is_imported_only_when_asked_for(tmp_path: Path) -> None:
    result = _run('''
        import json, sys
        import torch, pyjit
        # torch's fake tensors import a few torch._inductor helpers themselves; torch's compiler
        # proper (compile_fx, its graph lowering and scheduler) is what pyjit must never load.
        compiler = ("torch._inductor.compile_fx", "torch._inductor.graph", "torch._inductor.scheduler")
        def f(x):
            return torch.sin(x) * 2 + 1
        x = torch.randn(8)
        y0 = pyjit.jit(f)(x)                      # pyjit's own pipeline (C++ kernels on CPU)
        names = pyjit.list_backends()
        before = [m for m in compiler if m in sys.modules]
        y1 = pyjit.jit(f, backend="inductor")(x)  # the one-word move from torch.compile
        after = [m for m in compiler if m in sys.modules]
        ok = {"pyjit": bool(torch.allclose(y0, f(x))), "inductor": bool(torch.allclose(y1, f(x)))}
        print("RESULT " + json.dumps({"before": before, "after": after, "ok": ok, "listed": "inductor" in names,
                                      "values": [f(x).tolist(), y0.tolist(), y1.tolist()]}))
    ''', tmp_path)
    assert all(result["ok"].values()) and result["listed"], result
    assert result["before"] == [], f"pyjit's pipeline imported torch's compiler: {result['before']}"
    assert "torch._inductor.compile_fx" in result["after"], result
