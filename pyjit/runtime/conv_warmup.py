"""cuDNN's first-call work for a graph's convolutions, paid on a background thread while pyjit compiles.

The first call of a convolution of a new shape, layout and dtype makes cuDNN build an execution
plan: heuristics, and for many bf16/fp16 channels-last and depthwise convolutions a kernel compiled
at run time. That is host work of 30-300 ms per convolution and per direction (forward, backward
data, backward weight), which eager pays inside its first step and a compiled graph inside its first
call: about 12 s of a MobileNetV3 training step's first call on an H200. cuDNN keeps its run-time
compiled kernels per process, and torch releases the GIL around the call, so the same convolutions
run once on zero-filled tensors on a background thread (``config.conv_warmup_threads``: one by
default) compile them while the main thread traces, lowers and generates code.

ATen keeps the plans themselves in a per-thread cache, so what a warm-up thread leaves for the
main thread is the compiled kernels (the expensive part), not the plan. A backward convolution is
then made once more on autograd's worker thread for the device, where the compiled backward will
make it, which leaves its plan there too.

:func:`request` takes one ``aten.convolution`` or ``aten.convolution_backward`` call described by
:class:`TensorSpec` in place of its tensors; the backend calls it for every convolution it lowers
(``lowering/fallbacks.py``) and for those of a training graph's backward as soon as it is
partitioned (``backend/aot``), before that backward is compiled. Calls run in the order they were
queued, except that a graph's own convolutions, queued when it starts compiling, go ahead of
earlier requests (its first call comes before the backward's). Each distinct call runs once per
process. The results are discarded; nothing the compiled code computes depends on these threads.
Each call is a ``conv_warmup`` span in the compile trace (``PYJIT_TRACE``).

What keeps it out of the way:

- only CUDA devices, only while ``config.conv_warmup`` is on, never under
  ``torch.backends.cudnn.benchmark`` (that mode times every algorithm, and a measurement beside
  pyjit's compile would be noisy);
- the threads work only while pyjit holds a caller's thread (:func:`active`: compiling a graph,
  making its first call), and leaving waits for the calls in flight, so no user code (a CUDA graph
  capture, a timing) ever runs beside a warm-up call; calls still queued wait for the next region
  (a backward's convolutions are queued when the forward compiles and run while the backward does);
- it starts no convolution while an autotuning measurement runs (:func:`timing`, used by
  ``runtime/autotune.py``), so pyjit's own timings see at most the tail of one per thread;
- backward convolutions are replayed on autograd's worker thread for the device, where the
  compiled backward makes them (ATen's plan cache is per thread; :func:`_run_on_backward_thread`);
- a failure (out of memory, an argument cuDNN refuses) is logged on ``compile_times`` and that call
  is skipped: the compiled graph makes the same call itself later and reports any real error there;
- at interpreter exit the queue is dropped and the thread finishes at most its current call.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import os
import threading
import time
from typing import Any, Iterator

import torch

from ..config import config
from ..logs import get_logger

log = get_logger("compile_times")

_CONV_OPS = ("convolution", "convolution_backward")


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor argument: what cuDNN's plan cache keys on (sizes, strides, dtype, device)."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorSpec | None":
        """The spec of a real or fake tensor, or None when a size or stride is symbolic."""
        size, stride = tuple(t.shape), tuple(t.stride())
        if not all(type(x) is int for x in (*size, *stride)):
            return None
        return cls(size, stride, t.dtype, t.device)

    def make(self) -> torch.Tensor:
        return torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device).zero_()


# Counters for tests and diagnostics: requested (distinct calls queued), ran, failed, skipped
# (requests refused: not CUDA, benchmark mode, switched off, already seen), ms (time in calls).
counters: collections.Counter = collections.Counter()

_lock = threading.Lock()
_changed = threading.Condition(_lock)  # any of the state below changed
_queue: collections.deque = collections.deque()
_seen: set[tuple] = set()
_threads: list[threading.Thread] = []
_closing = False
_active = 0  # regions pyjit holds (compiles, first calls): the thread works only inside one
_timing = 0  # device timings in progress: no call starts during one
_running = 0  # calls in progress (at most one per thread, plus one on autograd's device thread)
# Backward calls already run on a warm-up thread, to be replayed on autograd's device thread
# (:func:`_run_on_backward_thread`), and batches of them handed over and not finished.
_backward_queue: collections.deque = collections.deque()
_backward_thread: threading.Thread | None = None
_submitted = 0
# Test hook: the device types the warm-up serves (CUDA only: on CPU oneDNN's first call is cheap
# and the cores are the compiler's).
device_types: frozenset[str] = frozenset({"cuda"})


def _hashable(a: Any) -> Any:
    if isinstance(a, (list, tuple)):
        return tuple(_hashable(x) for x in a)
    return a


def enabled_for(device: torch.device) -> bool:
    return bool(config.conv_warmup) and device.type in device_types and not torch.backends.cudnn.benchmark


def request(op: str, args: tuple, position: int | None = None) -> bool:
    """Queue ``torch.ops.aten.<op>.default(*args)`` (``op`` in ``convolution``,
    ``convolution_backward``) with :class:`TensorSpec` in place of tensors, at the end of the
    queue or at ``position``; False when refused."""
    specs = [a for a in args if isinstance(a, TensorSpec)]
    if op not in _CONV_OPS or not specs or not enabled_for(specs[0].device):
        counters["skipped"] += 1
        return False
    key = (op, _hashable(args), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic)
    with _lock:
        if key in _seen or _closing:
            counters["skipped"] += 1
            return False
        _seen.add(key)
        if position is None:
            _queue.append((op, args))
        else:
            _queue.insert(min(position, len(_queue)), (op, args))
        counters["requested"] += 1
        if len(_threads) < min(thread_count(), len(_queue) + _running):
            thread = threading.Thread(target=_serve, name=f"pyjit-conv-warmup-{len(_threads)}", daemon=True)
            _threads.append(thread)
            thread.start()
        _changed.notify_all()
    return True


def thread_count() -> int:
    """How many warm-up threads may run (``config.conv_warmup_threads``; 0: one). On an H200 host
    four threads slowed each other and the main thread's own convolutions: cuDNN's run-time
    compiles do not scale across threads there (docs/performance.md)."""
    return max(1, config.conv_warmup_threads)


def request_from_node(node: torch.fx.Node, position: int | None = None) -> bool:
    """Queue an aten graph's convolution (or its backward) from the node's traced values."""
    name = getattr(getattr(node.target, "_overloadpacket", None), "__name__", None)
    if node.op != "call_function" or name not in _CONV_OPS:
        return False
    args: list[Any] = []
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            val = a.meta.get("val")
            spec = TensorSpec.of(val) if isinstance(val, torch.Tensor) else None
            if spec is None:
                return False
            args.append(spec)
        elif isinstance(a, (list, tuple)) and any(isinstance(x, torch.fx.Node) for x in a):
            return False  # symbolic sizes in the arguments
        else:
            args.append(a)
    return request(name, tuple(args), position)


def request_graph(gm: torch.fx.GraphModule, urgent: bool = False) -> int:
    """Queue every convolution of an aten graph, in graph order, at the end of the queue or
    (``urgent``) ahead of every call queued before; how many were queued."""
    queued = 0
    for n in gm.graph.nodes:
        if n.op == "call_function" and request_from_node(n, queued if urgent else None):
            queued += 1
    return queued


@contextlib.contextmanager
def active() -> Iterator[None]:
    """A region in which the threads may work: pyjit compiling a graph or making its first call.

    Outside every region the threads start nothing, and leaving the last region waits for the
    calls in flight: user code never runs beside a warm-up call (a CUDA graph capture there
    would be invalidated by the threads' allocations and launches)."""
    global _active
    with _lock:
        _active += 1
        _changed.notify_all()
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            while _active == 0 and _running:
                _changed.wait()
            _changed.notify_all()


@contextlib.contextmanager
def timing() -> Iterator[None]:
    """Around a device timing: no warm-up call starts inside it."""
    global _timing
    with _lock:
        _timing += 1
    try:
        yield
    finally:
        with _lock:
            _timing -= 1
            _changed.notify_all()


def drain(timeout: float | None = None) -> bool:
    """Run the queue to its end (tests, diagnostics); False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with active(), _lock:
        while _queue or _backward_queue or _running or _submitted:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            _changed.wait(remaining)
    return True


def reset() -> None:
    """Forget which calls ran and the counters (tests); drains the queue first."""
    drain(timeout=30.0)
    with _lock:
        _seen.clear()
        counters.clear()


def _wait_for_work(queue: collections.deque) -> bool:
    """(Holding the lock.) Wait until ``queue`` has a call that may start now (inside a region,
    outside a timing); False when the module is closing instead."""
    while not (_closing or (queue and _active and not _timing)):
        _changed.wait()
    return not _closing


def _serve() -> None:
    global _running
    while True:
        with _lock:
            if not _wait_for_work(_queue):
                return
            op, args = _queue.popleft()
            _running += 1
        try:
            if _run(op, args) and op == "convolution_backward":
                _replay_later(op, args)
        finally:
            with _lock:
                _running -= 1
                _log_if_done()
                _changed.notify_all()


def _log_if_done() -> None:
    """(Holding the lock.) Logged before waking drain(), which tests read the log after."""
    if not _queue and not _backward_queue and not _running and not _submitted:
        log.info("convolution warm-up: queue done, %d call(s) run in %.1f s on %d warm-up thread(s), %d "
                 "replayed on autograd's device thread (%d failed, %d dropped)", counters["ran"],
                 counters["ms"] / 1e3, len(_threads), counters["replayed"], counters["failed"], counters["dropped"])


def _replay_later(op: str, args: tuple) -> None:
    global _backward_thread
    with _lock:
        if _closing:
            return
        _backward_queue.append((op, args))
        if _backward_thread is None:
            _backward_thread = threading.Thread(target=_serve_backward, name="pyjit-conv-warmup-backward",
                                                daemon=True)
            _backward_thread.start()
        _changed.notify_all()


def _serve_backward() -> None:
    """Hands the replays queued so far, as one batch, to autograd's device thread; repeats."""
    global _submitted
    while True:
        with _lock:
            if not _wait_for_work(_backward_queue):
                return
            batch = list(_backward_queue)
            _backward_queue.clear()
            _submitted += 1
        try:
            _run_on_backward_thread(batch)
        finally:
            with _lock:
                _submitted -= 1
                _log_if_done()
                _changed.notify_all()


class _OnBackwardThread(torch.autograd.Function):
    """Runs ``job`` in its backward: on autograd's worker thread for the anchor's device."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, job: Any) -> torch.Tensor:
        ctx.job = job
        return anchor.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.job()
        return grad, None


def _run_on_backward_thread(batch: list[tuple[str, tuple]]) -> None:
    """Replay backward convolutions where the compiled backward will run them.

    ATen keeps cuDNN's execution plans in a per-thread cache, and autograd runs a CUDA graph's
    backward on its own worker thread for the device. A call made on a warm-up thread fills
    cuDNN's process-wide cache of run-time compiled kernels (the expensive part, done there in
    parallel with the compile) but that worker thread would still build its plan, tens of
    milliseconds per call. So the calls are made again inside the backward of a one-element
    autograd graph, which autograd hands to that worker thread (a CPU graph runs it here).
    Each starts only inside a region and outside a timing, as the others; those whose region
    has ended by the time the worker thread gets to them are dropped."""
    device = next(a.device for a in batch[0][1] if isinstance(a, TensorSpec))

    def job() -> None:
        global _running
        for k, (op, args) in enumerate(batch):
            with _lock:
                while _active and _timing and not _closing:
                    _changed.wait()
                if not _active or _closing:
                    counters["dropped"] += len(batch) - k
                    return
                _running += 1
            try:
                _run(op, args, replay=True)
            finally:
                with _lock:
                    _running -= 1
                    _changed.notify_all()

    with torch.enable_grad():
        anchor = torch.zeros((), device=device, requires_grad=True)
        out = _OnBackwardThread.apply(anchor, job)
    out.backward()


def _run(op: str, args: tuple, replay: bool = False) -> bool:
    from ..report import events

    device = next(a.device for a in args if isinstance(a, TensorSpec))
    start, wall = time.perf_counter(), time.time()
    try:
        device_ctx = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
        with device_ctx, torch.no_grad():
            real = tuple(a.make() if isinstance(a, TensorSpec) else a for a in args)
            getattr(torch.ops.aten, op).default(*real)
        with _lock:
            counters["replayed" if replay else "ran"] += 1
            counters["ms"] += int((time.perf_counter() - start) * 1e3)
        shape = next(a.size for a in args if isinstance(a, TensorSpec))
        events.record_span("conv_warmup", f"{'replay ' if replay else ''}{op} {list(shape)}", wall,
                           time.perf_counter() - start)
        return True
    except Exception as e:  # noqa: BLE001 - the compiled graph makes this call itself and reports it
        with _lock:
            counters["failed"] += 1
        log.info("convolution warm-up skipped one %s call (%s: %s)", op, type(e).__name__, e)
        return False


def _close() -> None:
    global _closing
    with _lock:
        _closing = True
        _queue.clear()
        _backward_queue.clear()
        _changed.notify_all()
    for thread in [*_threads, *([_backward_thread] if _backward_thread is not None else [])]:
        thread.join(timeout=5.0)


def _after_fork_in_child() -> None:
    """A forked child has no warm-up threads, and the lock may be held by a thread it lacks."""
    global _lock, _changed, _active, _timing, _running, _submitted, _backward_thread
    _lock = threading.Lock()
    _changed = threading.Condition(_lock)
    _queue.clear()
    _backward_queue.clear()
    _threads.clear()
    _backward_thread = None
    _active, _timing, _running, _submitted = 0, 0, 0, 0


atexit.register(_close)
os.register_at_fork(after_in_child=_after_fork_in_child)
