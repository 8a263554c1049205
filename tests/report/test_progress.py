"""The progress line of a long compile (pyjit/report/progress.py): drawn and erased on a terminal
(a pseudo-terminal here), absent when stderr is a pipe, under PYJIT_PROGRESS=0 and in tests.
The child compiles through a backend that takes 0.6 s, with the threshold set to 0."""
from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap

import pyjit
from pyjit.report import progress

from .conftest import ROOT

CHILD = textwrap.dedent('''
    import time
    import torch
    import pyjit

    pyjit.config.config.progress_after_s = 0.0


    def slow_backend(gm, example_inputs):
        time.sleep(0.6)
        return gm.forward


    def f(x):  # F_LINE
        return x.sin() + 1


    out = pyjit.jit(f, backend=slow_backend)(torch.ones(3))
    assert torch.equal(out, torch.ones(3).sin() + 1)
    print("CHILD DONE", flush=True)
''')
F_LINE = next(i for i, line in enumerate(CHILD.splitlines(), 1) if "F_LINE" in line)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYJIT_", "PYTEST_"))}
    env.update(PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""), **extra)
    return env


def _run_on_pty(tmp_path, **extra: str) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=slave,
                                env=_env(PYJIT_CACHE_DIR=str(tmp_path / "cache"), **extra))
        os.close(slave)
        chunks = []
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                data = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        stdout = proc.communicate(timeout=120)[0]
    finally:
        os.close(master)
    assert proc.returncode == 0 and b"CHILD DONE" in stdout
    return b"".join(chunks).decode("utf-8", "replace")


def test_progress_drawn_and_erased_on_a_terminal(tmp_path):
    out = _run_on_pty(tmp_path)
    label = f"pyjit: f (child.py:{F_LINE}): "
    assert label in out, repr(out)
    last = out.rindex(label)
    assert "\r\x1b[K" in out[last:], repr(out[last:])  # erased after its last drawing
    assert out[last:].rstrip("\r\n").endswith("\r\x1b[K"), repr(out[last:])  # nothing left on the line


def test_progress_off_under_PYJIT_PROGRESS_0(tmp_path):
    out = _run_on_pty(tmp_path, PYJIT_PROGRESS="0")
    assert "pyjit: f (" not in out and "\x1b[K" not in out


def test_progress_off_when_stderr_is_not_a_terminal(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=_env(PYJIT_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0 and "CHILD DONE" in proc.stdout
    assert "pyjit: f (" not in proc.stderr and "\x1b[K" not in proc.stderr


class _FakeTerminal:
    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        pass


def test_progress_off_in_tests(monkeypatch):
    fake = _FakeTerminal()
    assert "PYTEST_CURRENT_TEST" in os.environ
    assert not progress._wanted(fake)
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert progress._wanted(fake)  # the same terminal outside a test
    with pyjit.config.patch(progress=False):
        assert not progress._wanted(fake)


def test_stage_and_count_update_the_line(monkeypatch):
    fake = _FakeTerminal()
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setattr(sys, "stderr", fake)
    with pyjit.config.patch(progress_after_s=3600.0):  # never drawn: only the text is checked
        with progress.compiling("forward (model.py:41)"):
            progress.count(37, 120)
            assert progress._current[0].text().startswith("pyjit: forward (model.py:41): 37/120 kernels, ")
            progress.stage("lowering")
            assert "): lowering, " in progress._current[0].text()
    assert not progress._current and fake.written == []
