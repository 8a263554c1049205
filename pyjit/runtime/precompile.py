"""Parallel compilation of Triton kernels: a generated module's kernels before its first call,
and autotuning candidates before they are timed.

Triton compiles a kernel the first time it is launched with a new specialisation (argument
dtypes, 16-byte alignment of pointers, integers equal to 1 or divisible by 16, ``constexpr``
values). A generated module launches its kernels one after another, so its first call compiled
them serially: about 0.1-0.3 s each on the GPU machine, 15 s of a GPT-2 training step's first
call. This module instead compiles them all at once, before the first call runs
(``warm_module``):

1. The module's ``call`` is executed once as a *dry run*: the same code object with globals in
   which every Triton kernel is replaced by a recorder, on fake tensors (``FakeTensorMode``)
   made from the real arguments. Fake tensors allocate nothing and extern aten calls only
   compute metadata, so the dry run has no effect on the user's tensors, the random stream or
   the device; it yields, for each launch, the arguments the real call will pass.
2. Each recorded launch becomes ``kernel.warmup(...)`` with stand-ins carrying the dtype and
   the pointer's alignment (graph inputs: the real tensor's address; buffers the module
   allocates: the caching allocator's aligned address plus the view's offset): Triton's own
   binder then computes the specialisation the real launch will have.
3. ``"processes"`` (the default): the warm-up's compile request (signature, constants,
   attributes, options, target) is intercepted before Triton compiles, and sent to compile
   worker processes (``runtime/compile_pool.py``), which compile it into Triton's on-disk cache;
   the real launch's compile is then a cache hit (about 1 ms). ``"threads"``: the warm-up runs
   under Triton's ``AsyncCompileMode``, which compiles in a thread pool and stores the result in
   the kernel's in-memory cache; Triton holds the GIL for much of a compile, so this measured
   only about 2x faster than one thread.
4. Both wait for every compile; the real call then finds each kernel compiled.

Everything here is an optimisation: a dry run that fails (an op fake tensors cannot run, a
data-dependent size), a specialisation guessed differently from the real launch, a worker that
dies, or a Triton whose compile cannot be intercepted (then threads) or that has no
``AsyncCompileMode`` only means the kernel compiles on its first launch, as before. A
kernel that fails to compile fails again on its real launch, where the caller's fallback
(the graph runs as captured, logged) handles it.

``warm_launches`` does the same for autotuning candidates (``runtime/autotune.py``), whose
runners carry ``warm_launch = (kernel, warm)``, ``warm()`` being the benchmark's launch as a
``kernel.warmup``.

Controlled by ``config.parallel_compile`` (``PYJIT_PARALLEL_COMPILE``) and
``config.compile_threads``; the time spent is logged on the ``compile_times`` channel.
"""
from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time
import types
from typing import Any, Callable, Iterable

import torch

from ..config import config
from ..logs import get_logger
from .fast_launch import unwrap

time_log = get_logger("compile_times")

# Counters for tests and the bench: modules warmed, kernels submitted, dry runs that failed,
# autotuning candidates submitted, kernels the worker processes compiled.
stats: dict[str, int] = {"modules": 0, "kernels": 0, "dry_run_failures": 0, "candidates": 0, "in_workers": 0}

_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
# How long the first call waits for one kernel compiled elsewhere before compiling it itself.
_WAIT_S = 600.0
# While no worker is ready, batches of more kernels than this wait for the workers (a kernel
# takes ~0.3-1 s to compile here, GIL-bound; a worker is ready seconds after it starts).
_WAIT_FOR_WORKERS_ABOVE = 8


def _forget_after_fork() -> None:
    """A forked child inherits the thread pool object without its threads: start afresh."""
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _cpus() -> int:
    """The CPUs this process may run on, shared with the other ranks of this machine."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, n // max(1, config.compile_share))


def _threads() -> int:
    n = config.compile_threads
    if n > 0:
        return n
    if config.parallel_compile == "processes":
        # At most 16: each worker is an interpreter with Triton imported (not torch). They run at
        # nice 10, so the main thread keeps tracing and lowering at full speed while they start.
        return max(2, min(16, _cpus()))
    return max(1, min(32, _cpus()))


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(_threads(), thread_name_prefix="pyjit-compile")
        return _executor


def _async_compile_mode() -> Any:
    """Triton's ``AsyncCompileMode`` class, or None when this Triton has none."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return None
    return AsyncCompileMode


def mode() -> str | None:
    """How kernels are compiled in parallel here: "processes", "threads" or None (not at all)."""
    choice = config.parallel_compile
    if choice == "off" or _threads() < 2:
        return None
    if choice == "threads":
        return "threads" if _async_compile_mode() is not None else None
    return "processes"


def enabled() -> bool:
    return mode() is not None


def prestart() -> None:
    """Start the compile workers (a CUDA graph is about to be compiled, or the program uses
    CUDA and the frontend is starting): they import Triton while the graph is traced and lowered."""
    if mode() == "processes":
        from . import compile_pool
        try:
            from triton.runtime import driver
            target = driver.active.get_current_target()
        except Exception:  # noqa: BLE001 - no target known: workers start without warming up
            target = None
        compile_pool.prestart(_threads(), target)


# ---------------------------------------------------------------------- stand-in arguments
def _mock_tensor_class() -> type:
    from triton.runtime.jit import MockTensor

    class AlignedMock(MockTensor):  # type: ignore[misc, valid-type]
        """A dtype and an address: all Triton's specialisation reads from a tensor argument."""

        def __init__(self, dtype: torch.dtype, address: int):
            super().__init__(dtype)
            self._address = address

        def data_ptr(self) -> int:  # type: ignore[override]
            return self._address

    return AlignedMock


class _Addresses:
    """The address a fake tensor's real counterpart will have, modulo 16 (all that matters).

    Fake tensors made from the real inputs share a storage with them; anything else the dry run
    creates is a fresh allocation, which the caching allocator aligns (512 bytes). A view adds
    its storage offset in bytes.
    """

    def __init__(self) -> None:
        self.bases: dict[int, int] = {}  # id of a fake's UntypedStorage impl -> real base address

    @staticmethod
    def _storage_key(t: torch.Tensor) -> int:
        return int(t.untyped_storage()._cdata)

    def note_input(self, fake: torch.Tensor, real: torch.Tensor) -> None:
        try:
            base = real.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - a tensor without storage (e.g. a subclass): assume aligned
            return
        self.bases[self._storage_key(fake)] = base

    def address(self, fake: torch.Tensor) -> int:
        base = self.bases.get(self._storage_key(fake), 0)
        return base + fake.storage_offset() * fake.element_size()


# ---------------------------------------------------------------------- module warm-up
def _is_triton_kernel(value: Any) -> bool:
    """A compiled-Triton kernel of a module (wrapped by ``fast_launch.FastKernel`` or not)."""
    if "triton" not in sys.modules:
        return False  # no module imported Triton, so none has a Triton kernel (C++ kernels)
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    return isinstance(unwrap(value), JITFunction)


class _LaunchRecorder:
    """Stands in for one kernel during the dry run: ``kernel[grid](*args, **meta)`` records."""

    def __init__(self, kernel: Any, launches: list[tuple[Any, Any, tuple, dict]]):
        self.kernel = kernel
        self.launches = launches

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.launches.append((self.kernel, grid, args, kwargs))
        return record


def record_launches(call: Callable[[list[Any]], Any], args: list[Any]
                    ) -> tuple[list[tuple[Any, Any, tuple, dict]], _Addresses]:
    """Dry-run ``call`` (a generated module's) on fake copies of ``args``; return its launches.

    Raises whatever the dry run raises (the caller gives up warming, nothing else).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    launches: list[tuple[Any, Any, tuple, dict]] = []
    module_globals = call.__globals__  # type: ignore[attr-defined]
    dry_globals = dict(module_globals)
    for name, value in module_globals.items():
        if _is_triton_kernel(value):
            dry_globals[name] = _LaunchRecorder(unwrap(value), launches)
    dry_call = types.FunctionType(call.__code__, dry_globals, call.__name__,  # type: ignore[attr-defined]
                                  call.__defaults__, call.__closure__)  # type: ignore[attr-defined]
    addresses = _Addresses()
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    fakes: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            fake = mode.from_tensor(a)
            addresses.note_input(fake, a)
            fakes.append(fake)
        else:
            fakes.append(a)
    with mode, torch.no_grad():
        dry_call(fakes)
    return launches, addresses


def warm_module(call: Callable[[list[Any]], Any], args: list[Any]) -> int:
    """Compile the Triton kernels ``call`` will launch on ``args``, in parallel; return how many
    were submitted (0 when disabled, nothing to do, or the dry run failed: all harmless)."""
    if not enabled():
        return 0
    if not any(_is_triton_kernel(v) for v in call.__globals__.values()):  # type: ignore[attr-defined]
        return 0
    if not any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
        return 0  # interpreted CPU kernels are not compiled
    start = time.perf_counter()
    try:
        launches, addresses = record_launches(call, args)
    except Exception as e:  # noqa: BLE001 - only an optimisation: kernels compile on first launch
        stats["dry_run_failures"] += 1
        time_log.info("parallel compile: dry run of %s failed (%s: %s); kernels compile on first launch",
                      call.__module__, type(e).__name__, e)
        return 0
    mock = _mock_tensor_class()

    def warmer(kernel: Any, grid: Any, launch_args: tuple, kwargs: dict) -> Callable[[], object]:
        stand_ins = [mock(a.dtype, addresses.address(a)) if isinstance(a, torch.Tensor) else a
                     for a in launch_args]
        return lambda: kernel.warmup(*stand_ins, grid=grid, **kwargs)

    submitted = _warm([(launch[0], warmer(*launch)) for launch in launches])
    stats["modules"] += 1
    stats["kernels"] += submitted
    time_log.info("parallel compile (%s): %d kernel launches of %s compiled in %.1f ms", mode(), submitted,
                  call.__module__, (time.perf_counter() - start) * 1e3)
    return submitted


def warm_launches(launches: Iterable[tuple[Any, Callable[[], object]] | None]) -> int:
    """Compile autotuning candidates in parallel: each is ``(kernel, warm)``, ``warm()`` being a
    ``kernel.warmup(...)`` of the launch the benchmark will make."""
    todo = [w for w in launches if w is not None]
    if not todo or not enabled():
        return 0
    submitted = _warm(todo)
    stats["candidates"] += submitted
    return submitted


def _warm(warmers: list[tuple[Any, Callable[[], object]]]) -> int:
    """Compile what each ``(kernel, warm)`` would, in parallel; wait for all.

    Compile errors are swallowed here: the real launch compiles again and reports them where
    the caller handles failures.
    """
    if not warmers:
        return 0
    if mode() == "processes":
        done = _warm_in_processes(warmers)
        if done is not None:
            return done
    return _warm_in_threads([w for _, w in warmers])


def _warm_in_threads(warmers: list[Callable[[], object]]) -> int:
    """Each warmer under Triton's ``AsyncCompileMode``: compiles run in a thread pool."""
    mode_cls = _async_compile_mode()
    if mode_cls is None:
        return 0
    submitted = 0
    try:
        async_mode = mode_cls(_pool(), ignore_errors=True)
    except TypeError:  # Triton before 3.9: no ignore_errors (a failure is raised on exit, caught below)
        async_mode = mode_cls(_pool())
    try:
        with async_mode:
            from ..report import progress

            for done, warm in enumerate(warmers):
                progress.count(done, len(warmers), "kernels submitted")
                try:
                    warm()
                    submitted += 1
                except Exception as e:  # noqa: BLE001 - a launch we could not mimic: compiled later
                    time_log.info("parallel compile: a warm-up failed (%s: %s)", type(e).__name__, e)
    except Exception as e:  # noqa: BLE001 - a compile that failed in the pool: it fails again at launch
        time_log.info("parallel compile: a kernel failed to compile in the pool (%s: %s)", type(e).__name__, e)
    return submitted


class _Captured(Exception):
    """Raised by the stand-in compiler: the request Triton was about to compile."""

    def __init__(self, request: dict[str, Any]):
        super().__init__("captured")
        self.request = request


def _capture(kernel: Any, warm: Callable[[], object]) -> dict[str, Any] | None:
    """The compile request ``warm()`` makes of ``kernel``, without compiling (None: it needs no
    compile, being compiled already). Raises if this Triton cannot be intercepted."""
    _bind_for_current_device(kernel)
    if not hasattr(kernel, "compile"):  # an older Triton calling its module's compile(): not interceptable
        raise NotImplementedError("this Triton's JITFunction has no compile attribute to intercept")

    def stand_in(src: Any, target: Any = None, options: Any = None, **_: Any) -> Any:
        raise _Captured({"signature": src.signature, "constants": src.constants, "attrs": src.attrs,
                         "options": options, "target": target})

    own = vars(kernel).get("compile", _MISSING)  # set per instance by the binder (or on the class)
    kernel.compile = stand_in
    try:
        warm()
    except _Captured as c:
        return c.request
    finally:
        if own is _MISSING:
            del kernel.compile
        else:
            kernel.compile = own
    return None


_MISSING = object()


def _bind_for_current_device(kernel: Any) -> None:
    """Make Triton build ``kernel``'s per-device state for the current device now.

    Triton (3.6 and 3.9 checked) sets ``JITFunction.compile`` only when a kernel's first launch
    on a device builds its binder (``device_caches`` is a defaultdict of ``create_binder``).
    Before that the attribute does not exist, so there was nothing to intercept and every
    kernel compiled in this process, GIL-bound; and a binder built during the intercepted
    warm-up would overwrite the stand-in with the real compiler. Building it first (what that
    launch does anyway) makes every kernel interceptable.
    """
    if hasattr(kernel, "compile"):
        return
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        return
    try:
        from triton.runtime import driver
        caches[driver.active.get_current_device()]
    except Exception:  # noqa: BLE001 - no device to bind to: _capture reports the kernel not interceptable
        pass


def _warm_in_processes(warmers: list[tuple[Any, Callable[[], object]]]) -> int | None:
    """Capture each launch's compile request here, compile them in the worker processes (into
    Triton's on-disk cache), wait. None: interception is impossible, use threads instead."""
    import pickle
    import sys

    from . import compile_pool

    pool = compile_pool.get(_threads())
    if pool.ready == 0 and len(warmers) <= _WAIT_FOR_WORKERS_ABOVE:
        # The workers are still starting (importing Triton: a second or more): for a few
        # kernels, waiting for them would cost more than compiling here, in threads.
        time_log.info("parallel compile: compile workers still starting, %d kernel(s) compiled in this "
                      "process", len(warmers))
        return None
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    futures = []
    seen: set[bytes] = set()
    for kernel, warm in warmers:
        kernel = unwrap(kernel)
        try:
            request = _capture(kernel, warm)
        except NotImplementedError:
            return None
        except Exception as e:  # noqa: BLE001 - a launch we could not mimic: compiled at launch
            time_log.info("parallel compile: a warm-up failed (%s: %s)", type(e).__name__, e)
            continue
        if request is None:
            continue
        module = sys.modules.get(kernel.fn.__module__)
        path = getattr(module, "__file__", None)
        if path is None:
            continue
        request.update(path=path, module=kernel.fn.__module__, kernel=kernel.fn.__name__, env=env)
        try:
            blob = pickle.dumps(request)
        except Exception:  # noqa: BLE001 - an option that does not pickle: compiled at launch
            continue
        if blob in seen:
            continue
        seen.add(blob)
        futures.append(pool.submit(request))
    ok, busy, longest = 0, 0.0, 0.0
    from ..report import progress

    for done, future in enumerate(futures):
        progress.count(done, len(futures))
        try:
            success, detail = future.result(timeout=_WAIT_S)
        except concurrent.futures.TimeoutError:
            success, detail = False, f"no answer within {_WAIT_S:.0f} s"
        if success:
            ok += 1
            busy += float(detail)
            longest = max(longest, float(detail))
        else:
            time_log.info("parallel compile: a worker could not compile a kernel (%s); it compiles at launch",
                          detail)
    stats["in_workers"] += ok
    time_log.info("parallel compile: %d distinct kernels compiled by %d workers (%.1f worker-seconds, longest "
                  "%.2f s)", ok, pool.size, busy, longest)
    return ok
