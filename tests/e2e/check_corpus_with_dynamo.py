"""Opt-in validation of the corpus itself (not part of the test run; pytest does not collect it).

1. every case runs eagerly on both input sets and gives the same structure twice;
2. torch.compile (the peer) with a counting backend and ``fullgraph=True`` produces one graph
   whose counted calls equal ``case.expected_dynamo_calls`` (``case.calls`` unless the case
   documents why Dynamo differs), and results identical to eager.

Usage (from the repository root):
    python3 -m tests.e2e.check_corpus_with_dynamo            # all cases
    python3 -m tests.e2e.check_corpus_with_dynamo -k attention   # names containing 'attention'
    python3 -m tests.e2e.check_corpus_with_dynamo --eager-only
Exit status 0 when every case agrees.
"""
from __future__ import annotations

import argparse
import sys
import traceback

import torch
import torch._dynamo

from .corpus import CASES
from .support import CountingBackend, run_against_eager


def check_eager(case) -> str | None:
    fn = case.build_fn()
    for seed in (0, 1):
        args, kwargs = case.make_inputs(seed)
        fn(*args, **kwargs)
    return None


def check_dynamo(case) -> str | None:
    torch._dynamo.reset()
    backend = CountingBackend()
    run_against_eager(case, lambda fn: torch.compile(fn, backend=backend, fullgraph=True))
    if backend.frame_count != case.graphs:
        return f"graphs: dynamo {backend.frame_count} != expected {case.graphs}\n{backend.graph_listing()}"
    got = backend.call_counts[0]
    if got != case.expected_dynamo_calls:
        return (f"calls: dynamo {got} != expected {case.expected_dynamo_calls} (pyjit expects {case.calls})\n"
                f"{backend.graph_listing()}")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--eager-only", action="store_true")
    opts = parser.parse_args(argv)
    cases = [c for c in CASES if opts.k in c.name]
    failures = 0
    for case in cases:
        try:
            problem = check_eager(case)
            if problem is None and not opts.eager_only:
                problem = check_dynamo(case)
        except Exception:  # report every case, keep going
            problem = traceback.format_exc(limit=4)
        if problem:
            failures += 1
            print(f"MISMATCH {case.name}: {problem}\n")
    differing = [c.name for c in cases if c.dynamo_calls is not None]
    print(f"{len(cases)} cases checked, {failures} mismatches; "
          f"{len(differing)} documented Dynamo differences: {', '.join(differing) or '-'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
