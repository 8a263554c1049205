"""A traced run shared by the report tests: a tiny GPT-2 (random weights, CPU) called through a
jitted function with a graph break (a print) and a recompile (another input shape), run in a
subprocess with ``PYJIT_TRACE`` so that the trace file is the whole process's."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent('''
    import torch
    import transformers
    import pyjit

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32, use_cache=False)
    model = transformers.GPT2Model(cfg).eval()


    def run(model, ids):  # RUN_LINE
        h = model(ids).last_hidden_state
        print("between graphs")  # BREAK_LINE
        return h.sum(-1)


    jrun = pyjit.jit(run)
    with torch.no_grad():
        for shape in [(2, 8), (2, 8), (3, 5)]:
            ids = torch.randint(0, 50, shape)
            torch.testing.assert_close(jrun(model, ids), run(model, ids))
    print("TRACED RUN OK")
''')


@dataclasses.dataclass
class TracedRun:
    trace_dir: str
    program: str
    run_line: int     # where the jitted function starts (its recompiles are reported there)
    break_line: int   # the print that breaks the graph


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if marker in line)


@pytest.fixture(scope="session")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> TracedRun:
    pytest.importorskip("transformers")
    base = tmp_path_factory.mktemp("traced_run")
    program = base / "prog.py"
    program.write_text(PROGRAM)
    trace_dir = base / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYJIT_")}
    env.update(PYJIT_TRACE=str(trace_dir), PYJIT_CACHE_DIR=str(base / "cache"),
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=str(base))
    assert proc.returncode == 0 and "TRACED RUN OK" in proc.stdout, proc.stderr[-4000:]
    return TracedRun(str(trace_dir), str(program), _line_of("RUN_LINE"), _line_of("BREAK_LINE"))
