"""The ``hook`` suite: what ``pyjit.enable()`` costs programs that are (mostly) plain Python.

Plain workloads (recursion, object-heavy code, generators and comprehensions, string and dict
work, a small bytecode interpreter) are timed natively and inside ``pyjit.enable()``; mixed
workloads (about 95% plain Python around a small tensor function) also count the graphs a
counting backend received, to show the tensor part was compiled. Each workload is timed
``repeats`` times per mode, modes interleaved so both see the same noise; the row reports the
minimum of each mode and their ratio (``hook_overhead_fraction`` = ratio - 1). The first call
under ``pyjit.enable()`` (tracing, compiling) is a warm-up and never timed.

The target (docs/performance.md): at most 1.05x on the plain workloads. What a PEP 523 hook
costs at best (CPython stops inlining Python-to-Python calls while one is installed) is
measured by the ``overhead`` suite's ``hook_pure_python`` row.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import torch

from bench.runner import STATUS_ERROR, STATUS_OK, STATUS_UNAVAILABLE


# -- plain-Python workloads (n scales the size) ---------------------------------------------------

def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def recursion(n: int) -> int:
    return _fib(n)


class _Node:
    def __init__(self, value: int, nxt: "_Node | None") -> None:
        self.value = value
        self.nxt = nxt


def objects(n: int) -> int:
    head = None
    for i in range(n):
        head = _Node(i, head)
    total = 0
    while head is not None:
        total += head.value
        head = head.nxt
    return total


def _evens(n: int) -> Any:
    for i in range(n):
        if i % 2 == 0:
            yield i


def generators(n: int) -> int:
    lengths = sum(len(str(i)) for i in range(n))
    squares = [i * i for i in range(n) if i % 3]
    return lengths + len(squares) + sum(_evens(n))


def strings_dicts(n: int) -> int:
    words = [f"w{i % 97}x{i % 13}" for i in range(n)]
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    text = " ".join(sorted(counts))
    return len(text.upper().split()) + max(counts.values())


def _interpret(program: list[tuple[str, int]], steps: int) -> int:
    stack: list[int] = []
    pc = 0
    acc = 0
    for _ in range(steps):
        op, arg = program[pc]
        if op == "push":
            stack.append(arg)
        elif op == "add":
            stack.append(stack.pop() + stack.pop())
        elif op == "store":
            acc = (acc + stack.pop()) % 1_000_003
        pc = (pc + 1) % len(program)
    return acc


def interpreter(n: int) -> int:
    program = [("push", 3), ("push", 4), ("add", 0), ("store", 0)]
    return _interpret(program, n)


# -- mixed workloads: plain Python around a small tensor function -----------------------------------

def _tensor_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w).sum(dim=0)


def mixed_preprocess(n: int, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Tokenise-and-count in Python, then one tensor step."""
    counts: dict[str, int] = {}
    for i in range(n):
        key = f"t{i % 50}"
        counts[key] = counts.get(key, 0) + 1
    scale = float(len(counts)) / 50.0
    return _tensor_step(x, w) * scale


def mixed_driver(n: int, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A pure-Python loop that calls a tensor function a few times between plain work."""
    out = x
    for k in range(4):
        _fib(max(2, n // 4))  # plain work between the tensor steps
        out = _tensor_step(out, w)[None].expand(x.shape[0], -1) * 0.5
    return out


@dataclasses.dataclass(frozen=True)
class HookWorkload:
    name: str
    fn: Callable[..., Any]
    size: int          # the "large" argument; "small" uses a fifth
    mixed: bool = False
    description: str = ""


WORKLOADS: tuple[HookWorkload, ...] = (
    HookWorkload("recursion", recursion, 20, description="recursive fib(n)"),
    HookWorkload("objects", objects, 50_000, description="build and walk an n-node linked list of a small class"),
    HookWorkload("generators", generators, 20_000,
                 description="generator expression, list comprehension, generator function over range(n)"),
    HookWorkload("strings_dicts", strings_dicts, 20_000, description="format, count in a dict, join, split n words"),
    HookWorkload("interpreter", interpreter, 40_000, description="a 4-instruction stack machine run for n steps"),
    HookWorkload("mixed_preprocess", mixed_preprocess, 40_000, mixed=True,
                 description="dict counting over n tokens, then one relu(x @ w).sum(0)"),
    HookWorkload("mixed_driver", mixed_driver, 80, mixed=True,
                 description="a Python loop: fib(n/4) then a tensor step, 4 times"),
)


def _size(w: HookWorkload, size: str) -> int:
    if size == "large" or w.name == "recursion":
        return w.size if size == "large" else w.size - 4
    return max(4, w.size // 5)


class _CountingEager:
    """A backend that counts the graphs it receives and runs them as captured."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def run_one(w: HookWorkload, size: str, repeats: int) -> dict[str, Any]:
    """Time one workload natively and under ``pyjit.enable()``; the result row."""
    n = _size(w, size)
    row: dict[str, Any] = {"suite": "hook", "workload": w.name, "backend": "pyjit.enable",
                           "status": STATUS_UNAVAILABLE, "reason": None,
                           "params": {"device": "cpu", "size": size, "n": n, "description": w.description}}
    from bench.backends import pyjit_api

    pyjit, why = pyjit_api()
    if pyjit is None or not callable(getattr(pyjit, "enable", None)):
        row["reason"] = why or "pyjit.enable does not exist"
        return row
    args: tuple[Any, ...] = (n,)
    if w.mixed:
        gen = torch.Generator().manual_seed(0)
        args = (n, torch.randn(16, 32, generator=gen), torch.randn(32, 32, generator=gen))
    backend = _CountingEager()
    try:
        pyjit.reset()
        expected = w.fn(*args)
        with pyjit.enable(backend=backend):
            got = w.fn(*args)  # warm-up: traces and compiles what it must
        same = torch.equal(expected, got) if isinstance(expected, torch.Tensor) else expected == got
        if not same:
            row.update(status=STATUS_ERROR, reason=f"result under pyjit.enable() differs from native: {got!r}"[:300])
            return row
        native: list[float] = []
        hooked: list[float] = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            w.fn(*args)
            native.append(time.perf_counter() - t0)
            with pyjit.enable(backend=backend):
                t0 = time.perf_counter()
                w.fn(*args)
                hooked.append(time.perf_counter() - t0)
    except Exception as exc:
        row.update(status=STATUS_ERROR, reason=f"{type(exc).__name__}: {exc}"[:300])
        return row
    finally:
        pyjit.reset()
    t_nat, t_hook = min(native), min(hooked)
    ratio = t_hook / t_nat if t_nat > 0 else None
    row.update(status=STATUS_OK, timing=_summary(hooked), timing_hook_off=_summary(native),
               hook_overhead_fraction=None if ratio is None else ratio - 1.0)
    row["params"]["ratio_min"] = ratio
    if w.mixed:
        row["params"]["graphs"] = backend.graphs
        row["params"]["tensor_part_compiled"] = backend.graphs > 0
    return row


def _summary(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    k = len(s)
    q1, med, q3 = s[k // 4], s[k // 2], s[(3 * k) // 4]
    return {"unit": "s", "timer": "perf_counter", "samples": samples, "calls_per_sample": 1, "warmup_calls": 1,
            "median": med, "q1": q1, "q3": q3, "iqr": q3 - q1, "min": s[0], "mean": sum(s) / k}


def describe(row: dict[str, Any]) -> str:
    """One line per workload: native and pyjit minimum, ratio, graphs of mixed workloads."""
    p = row["params"]
    if row["status"] != STATUS_OK:
        return f"hook {row['workload']:<17} {row['status']}: {row['reason']}"
    line = (f"hook {row['workload']:<17} native {row['timing_hook_off']['min'] * 1e3:8.2f} ms   "
            f"pyjit.enable {row['timing']['min'] * 1e3:8.2f} ms   ratio {p['ratio_min']:.3f}x")
    if "graphs" in p:
        line += f"   graphs {p['graphs']} ({'tensor part compiled' if p['tensor_part_compiled'] else 'NOT compiled'})"
    return line


def selected(workload_filter: set[str] | None) -> list[HookWorkload]:
    return [w for w in WORKLOADS if workload_filter is None or w.name in workload_filter]
