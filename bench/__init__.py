"""pyjit's microbenchmark harness: ``python -m bench``.

Owns the benchmark suites (overhead, compile, artifacts, kernels, models, dynamic, hook, quick; ``differential`` counts
generated programs that differ from eager, :mod:`bench.differential`), the backends they compare
(eager, pyjit, torch.compile and the two crossings), measurement, and reporting (terminal table,
JSON, CSV, PNG plots, ``--compare``). Module map, in the order a run uses them:

- :mod:`bench.cli`: command line, suite selection, time budget.
- :mod:`bench.backends`: backend registry and run-time availability detection.
- :mod:`bench.workloads` / :mod:`bench.models`: what is measured (functions, modules, inputs).
- :mod:`bench.measure`: timers, warm-up, medians/IQR, rotated inputs, copy bandwidth.
- :mod:`bench.correctness`: results against eager before any timing.
- :mod:`bench.runner`: runs one (workload, backend) case and returns a result row.
- :mod:`bench.suites`: the suites themselves (:mod:`bench.dynamic`: the dynamic-shapes suite;
  :mod:`bench.hook_overhead`: the ``hook`` suite, plain Python under ``pyjit.enable()``;
  :mod:`bench.distributed`: the ``distributed`` suite, DDP training steps on two ranks it launches); :mod:`bench.compile_worker` is the child process
  of the compile suite; :mod:`bench.external` runs the other layers' scripts.
- :mod:`bench.env`: run metadata; :mod:`bench.schema`: the JSON schema and its validator;
  :mod:`bench.report`, :mod:`bench.plots`, :mod:`bench.compare`: output.

This package may import ``torch._dynamo``/``torch._inductor`` as the peer to compare against;
``pyjit/`` never does.
"""
from __future__ import annotations

SCHEMA_VERSION = "pyjit-bench/1"
# Names the command line offers; kept here (torch-free) so ``python -m bench --help`` is instant.
SUITES = ("quick", "overhead", "compile", "artifacts", "kernels", "models", "dynamic", "hook", "differential",
          "distributed")
DEFAULT_BACKENDS = ("eager", "pyjit", "torch.compile", "pyjit+inductor", "dynamo+pyjit")
ALL_BACKENDS = DEFAULT_BACKENDS + ("wrong",)
