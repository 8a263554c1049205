"""pyjit's one typed configuration object, and the only place the environment is read.

Every tunable lives on :data:`config` (an instance of :class:`Config`). Code reads
``pyjit.config.config.<field>``; tests and users change settings for a scope with
``with pyjit.config.patch(field=value): ...``. Environment variables are read once, at
import, by :func:`_from_environment` and nowhere else:

- ``PYJIT_LOGS``: comma-separated log channels (see :mod:`pyjit.logs`), e.g. ``guards,recompiles``;
  ``+name`` for a channel's verbose form (``+fallbacks``: tracebacks of pyjit failures).
- ``PYJIT_CACHE_DIR``: on-disk cache root (default ``$XDG_CACHE_HOME/pyjit`` or ``~/.cache/pyjit``).
- ``PYJIT_DEBUG_DIR``: when set, generated code (bytecode, FX graphs, Triton, wrappers) is dumped there.
- ``PYJIT_CPU_BACKEND``: ``cpp`` (default: C++/OpenMP kernels built with the system compiler;
  graphs run as captured when no compiler works, logged once on ``fallbacks``), ``eager`` (CPU
  graphs run as captured) or ``triton_interpret`` (generated Triton kernels run on CPU tensors
  through Triton's interpreter).
- ``PYJIT_WARM_START``: ``1`` (default) or ``0``: a new process installs the compiled entries
  of a function from its frame record (no re-tracing) when the disk cache is on.
- ``PYJIT_LAYOUT_OPT``: ``auto`` (default), ``on`` or ``off``: channels-last layout for
  convolution graphs (``backend/passes/layout.py``).
- ``PYJIT_CAPTURE_SCALAR_OUTPUTS``: ``0`` (default) or ``1``: keep ``tensor.item()`` in the graph
  while it only feeds tensor operations (``config.capture_scalar_outputs``);
- ``PYJIT_MATMUL_PROLOGUE``: ``1`` (default) or ``0``: elementwise operands of matmul templates
  computed in the template's loads (``backend/lowering/matmul.py``).
- ``PYJIT_PARALLEL_COMPILE``: ``processes`` (default; or ``1``), ``threads`` or ``off`` (or ``0``):
  how a CUDA module's Triton kernels are compiled in parallel before its first call
  (``runtime/precompile.py``); ``PYJIT_COMPILE_THREADS``: how many workers (0, the default: the
  CPUs this process may use, divided by torchrun's ``LOCAL_WORLD_SIZE`` when set).
- ``PYJIT_TRACE``: a directory; pyjit writes its structured compile trace there (one JSONL file
  per process and rank, ``pyjit/report/events.py``; render it with ``python -m pyjit report``).
- ``PYJIT_NATIVE_LAUNCH``: ``1`` (default) or ``0``: launch compiled Triton kernels through pyjit's
  own driver call (``runtime/fast_launch.py``) or always through Triton's launcher.
- ``PYJIT_CONV_WARMUP``: ``1`` (default) or ``0``: cuDNN's first-call work for a graph's
  convolutions run on a background thread while the graph compiles (``runtime/conv_warmup.py``).
- ``PYJIT_PROGRESS``: ``0`` turns off the progress line of long compiles on a terminal
  (``pyjit/report/progress.py``); ``1`` (default) keeps it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Iterator, Literal

CpuBackend = Literal["cpp", "eager", "triton_interpret"]


@dataclasses.dataclass
class Config:
    # Comma-separated log channels enabled at start-up (PYJIT_LOGS).
    logs: str = ""
    # Root of the on-disk cache (PYJIT_CACHE_DIR); None means the XDG default.
    cache_dir: str | None = None
    # Where generated code is dumped for debugging (PYJIT_DEBUG_DIR); None disables dumping.
    debug_dir: str | None = None
    # How graphs whose tensors live on the CPU are run (PYJIT_CPU_BACKEND).
    cpu_backend: CpuBackend = "cpp"
    # C++ backend: compile with -O1 instead of -O3 -march=native (faster builds, for tests).
    cpp_fast_compile: bool = False
    # C++ backend: a kernel touching at least this many elements runs its outer loop with OpenMP.
    cpp_parallel_min: int = 32768
    # Cache entries (guarded compiled versions) per code object before it runs eagerly.
    entry_limit: int = 8
    # Raise pyjit's internal errors instead of falling back to eager (for tests).
    raise_on_internal_error: bool = False
    # A backend the user supplied that raises: fall back to running the frame eagerly (logged)
    # instead of raising pyjit.BackendError to the user. pyjit's own backend always falls back.
    suppress_errors: bool = False
    # Keep ``tensor.item()`` in the graph while the number only feeds tensor operations and
    # arithmetic (torch.compile's capture_scalar_outputs; PYJIT_CAPTURE_SCALAR_OUTPUTS=1): a
    # break comes only where Python needs the number (variables/captured_scalar.py).
    capture_scalar_outputs: bool = False
    # Maximum depth of inlined user-function calls while tracing.
    inline_depth_limit: int = 32
    # Tracing budgets for calls with no tensor work (docs/graph_breaks.md, `inline_budget`):
    # an inlined call handed no tensor that runs this many instructions (its own and its
    # callees') without recording a graph node, or a function inlined into its own recursion more than
    # `inline_recursion_limit` times, is not traced further: the outermost such call runs
    # natively (as its own frame under the hook) and tracing resumes after it. Not applied
    # under fullgraph=True.
    inline_instruction_budget: int = 2000
    inline_recursion_limit: int = 4
    # Instructions one trace may run in all (the frame and every call it inlines) before it
    # stops with a `loop_limit` break.
    trace_instruction_limit: int = 200_000
    # Triton launch: default number of warps for pointwise kernels when no heuristic applies.
    triton_default_num_warps: int = 4
    # Backend (owner: backend): fuse loop nodes into shared kernels (off = one kernel per buffer).
    backend_fusion: bool = True
    # Backend: reductions of at most this many elements per row run as one persistent block;
    # longer ones loop over the row in chunks (several loops in one kernel when needed).
    backend_persistent_reduction_max: int = 8192
    # Backend: a looped reduction kernel that would read its rows in several passes (softmax,
    # log_softmax/cross_entropy: max pass + sum-exp pass) runs persistent up to this row length
    # instead, so each row is read from memory once and the passes reuse registers.
    backend_persistent_multi_pass_max: int = 32768
    # Backend: sum/max/min/any/all over fewer than 128 rows of at least this many elements are
    # split into parallel chunks plus a combining reduction (one program per row would idle a GPU).
    backend_split_reduction_min: int = 65536
    # Backend: fold an eval batch norm's per-channel scale into the preceding convolution's
    # weights (passes/conv_bn.py). Off: measured slower on an H100 (the unfolded batch norm
    # already fuses into one epilogue pass; the fold adds a weight kernel per call, see
    # docs/passes.md). The convolution's bias still moves into its pointwise epilogue.
    backend_fold_conv_bn: bool = False
    # Backend (owner: autotune): benchmark candidate kernels (matmul template configurations
    # against the extern aten call) on the device at compile time and keep the fastest; results
    # live in the on-disk cache (runtime/autotune.py). Only CUDA graphs are ever benchmarked.
    autotune: bool = True
    # Backend (owner: autotune): launch parameters of generated Triton kernels (XBLOCK, RBLOCK,
    # num_warps; persistent vs looped rows) timed among a few neighbours of the heuristic's
    # choice (codegen/launch_autotune.py), the choice stored on disk. "auto": CUDA graphs with
    # static sizes when `autotune` is on; "force": also Triton-interpreted CPU graphs (tests;
    # with a real timer that is slow); "off": the heuristics alone.
    autotune_launch: Literal["auto", "force", "off"] = "auto"
    # Launch autotuning: only reductions moving at least this many bytes (pointwise kernels: 16x
    # as many); smaller kernels are launch bound and every candidate costs a Triton compile.
    autotune_launch_min_bytes: int = 1 << 20
    # "auto" launch autotuning: only reductions whose rows hold at least this many elements
    # (below it the heuristics measured as good as the best candidate; "force" tunes all).
    autotune_launch_min_row: int = 16384
    # Backend: matmuls (mm/addmm/bmm) as a Triton template with fused epilogues. "auto": a
    # candidate on CUDA, chosen over the extern by autotuning (extern when autotune is off);
    # "force": always the template where Triton kernels run (CUDA; CPU under triton_interpret,
    # for tests), configurations still tuned on CUDA; "off": always the extern aten call.
    matmul_template: Literal["auto", "force", "off"] = "auto"
    # Backend: a template operand that is a cheap elementwise value of graph inputs or extern
    # outputs (a weight cast to bf16, a scaled input) is computed in the template's loads (a
    # prologue) instead of by a separate kernel; under "auto" autotuning times it against the
    # unfused template and the extern (lowering/matmul.py). PYJIT_MATMUL_PROLOGUE=0 turns it off.
    matmul_prologue: bool = True
    # Backend: channels-last layout for convolution graphs (passes/layout.py, PYJIT_LAYOUT_OPT):
    # 4-d convolutions get channels-last input and weight, values between them stay NHWC (eager's
    # strides), graph outputs keep their strides. "auto": static graphs on CUDA with a 2-d
    # convolution (cuDNN's NHWC kernels); "on": also on CPU (tests); "off": never.
    layout_opt: Literal["auto", "on", "off"] = "auto"
    # Backend: depthwise convolutions (one filter per channel) as generated kernels with their
    # batch norm and activation fused (lowering/convolution.py, PYJIT_CONV_TEMPLATE=1), on every
    # target. Off: every convolution is an extern call (cuDNN, oneDNN), which measured faster on
    # an H200 and on this repository's CPU (docs/performance.md, "Depthwise convolutions").
    conv_template: bool = False
    # Training runtime (backend/aot): a graph that needs autograd first runs a forward that saves
    # only its inputs; the first backward through it recomputes the saved activations and from
    # then on the forward saves them (min-cut partition). So grad-enabled inference
    # (`model.eval(); model(x)` without no_grad) runs the no_grad kernels and writes nothing
    # for a backward that never comes. Not for graphs with random ops or mutated inputs (their
    # forward cannot be replayed). Off: the forward always saves (one compile fewer in training).
    aot_defer_saving: bool = True
    # Training runtime: a graph with symbolic sizes that needs autograd gets a static training
    # graph per distinct input size, at most this many; further sizes run as captured (logged).
    aot_static_sizes_max: int = 8
    # A module wrapped in DistributedDataParallel: its training graph is split into subgraphs at
    # DDP's gradient-bucket boundaries, each with its own backward, so a bucket's all-reduce
    # starts while earlier layers' backward still runs (pyjit/distributed/ddp.py). Off: one graph.
    ddp_split: bool = True
    # Backend (runtime/precompile.py, PYJIT_PARALLEL_COMPILE): compile a CUDA module's Triton
    # kernels in parallel before its first call (from a dry run on fake tensors), and autotuning
    # candidates before they are timed. "processes": in compile worker processes
    # (runtime/compile_pool.py; threads where this Triton cannot be intercepted); "threads": in a
    # thread pool (Triton's AsyncCompileMode; the GIL limits it); "off": each kernel compiles on
    # its first launch.
    parallel_compile: Literal["processes", "threads", "off"] = "processes"
    # Workers (processes or threads) of that pool; 0: the CPU count, at most 32.
    # Processes on this machine sharing its cores for compilation (torchrun's LOCAL_WORLD_SIZE):
    # with compile_threads 0, each gets its share of the cores, so 8 ranks do not start 8 full pools.
    compile_share: int = 1
    # Backend (runtime/fast_launch.py): after a launch site's first launch, generated modules call
    # the compiled kernel's launcher directly (checking the alignment and integers its
    # specialisation assumed) instead of Triton's JITFunction.run (~20 us of host time each).
    fast_launch: bool = True
    # ... and, where the compiled kernel's parameters are modelled, through pyjit._C.KernelLauncher
    # (one cuLaunchKernel call; PYJIT_NATIVE_LAUNCH=0 keeps Triton's launcher for every site).
    native_launch: bool = True
    compile_threads: int = 0
    # Backend (runtime/conv_warmup.py, PYJIT_CONV_WARMUP): each CUDA convolution a graph lowers
    # (and its backward) runs once on zero-filled tensors on a background thread while the graph
    # compiles, so cuDNN's plan building (run-time kernel compiles) is off the first call's path.
    conv_warmup: bool = True
    # Threads running those warm-up calls (PYJIT_CONV_WARMUP_THREADS). 0: one; four measured
    # slower on an H200 host (cuDNN's run-time compiles contend; docs/performance.md).
    conv_warmup_threads: int = 0
    # Backend: use the on-disk cache of generated modules (PYJIT_CACHE_DIR).
    backend_disk_cache: bool = True
    # Warm start (PYJIT_WARM_START): record compiled frames on disk and install them in a new
    # process without tracing (pyjit/frame/warm_start.py); only with backend_disk_cache.
    warm_start: bool = True
    # Structured compile trace (PYJIT_TRACE): the directory its JSONL files go to; None: off.
    trace_dir: str | None = None
    # The rank written in the trace when torch.distributed is not initialised (launcher's RANK).
    trace_rank: int = 0
    # Progress line of a long compile on stderr when it is a terminal (PYJIT_PROGRESS); never
    # under pytest (``under_test``).
    progress: bool = True
    # Seconds a compile runs before its progress line appears.
    progress_after_s: float = 2.0

    def default_cache_dir(self) -> str:
        """The cache root: PYJIT_CACHE_DIR, else $XDG_CACHE_HOME/pyjit, else ~/.cache/pyjit."""
        if self.cache_dir:
            return self.cache_dir
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "pyjit")


_VALID_CPU_BACKENDS = ("cpp", "eager", "triton_interpret")


def _from_environment(env: "os._Environ[str] | dict[str, str]") -> Config:
    cfg = Config()
    cfg.logs = env.get("PYJIT_LOGS", "")
    cfg.cache_dir = env.get("PYJIT_CACHE_DIR") or None
    cfg.debug_dir = env.get("PYJIT_DEBUG_DIR") or None
    cpu = env.get("PYJIT_CPU_BACKEND", "cpp") or "cpp"
    if cpu not in _VALID_CPU_BACKENDS:
        raise ValueError(
            f"PYJIT_CPU_BACKEND={cpu!r} is not one of {_VALID_CPU_BACKENDS}; unset it or pick one of those"
        )
    cfg.cpu_backend = cpu  # type: ignore[assignment]
    warm = env.get("PYJIT_WARM_START", "1").strip() or "1"
    if warm not in ("0", "1"):
        raise ValueError(f"PYJIT_WARM_START={warm!r} must be 0 or 1")
    cfg.warm_start = warm == "1"
    layout = env.get("PYJIT_LAYOUT_OPT", "auto").strip() or "auto"
    if layout not in ("auto", "on", "off"):
        raise ValueError(f"PYJIT_LAYOUT_OPT={layout!r} must be auto, on or off")
    cfg.layout_opt = layout  # type: ignore[assignment]
    conv = env.get("PYJIT_CONV_TEMPLATE", "0").strip() or "0"
    if conv not in ("0", "1"):
        raise ValueError(f"PYJIT_CONV_TEMPLATE={conv!r} must be 0 or 1")
    cfg.conv_template = conv == "1"
    parallel = env.get("PYJIT_PARALLEL_COMPILE", "processes").strip() or "processes"
    parallel = {"1": "processes", "0": "off"}.get(parallel, parallel)
    if parallel not in ("processes", "threads", "off"):
        raise ValueError(f"PYJIT_PARALLEL_COMPILE={parallel!r} must be processes (or 1), threads or off (or 0)")
    cfg.parallel_compile = parallel  # type: ignore[assignment]
    workers = env.get("PYJIT_COMPILE_THREADS", "0").strip() or "0"
    if not workers.isdigit():
        raise ValueError(f"PYJIT_COMPILE_THREADS={workers!r} must be a whole number (0: the CPU count, at most 32)")
    cfg.compile_threads = int(workers)
    prologue = env.get("PYJIT_MATMUL_PROLOGUE", "1").strip() or "1"
    if prologue not in ("0", "1"):
        raise ValueError(f"PYJIT_MATMUL_PROLOGUE={prologue!r} must be 0 or 1")
    cfg.matmul_prologue = prologue == "1"
    captured = env.get("PYJIT_CAPTURE_SCALAR_OUTPUTS", "0").strip() or "0"
    if captured not in ("0", "1"):
        raise ValueError(f"PYJIT_CAPTURE_SCALAR_OUTPUTS={captured!r} must be 0 or 1")
    cfg.capture_scalar_outputs = captured == "1"
    cfg.trace_dir = env.get("PYJIT_TRACE") or None
    rank = env.get("RANK", "0").strip() or "0"
    cfg.trace_rank = int(rank) if rank.isdigit() else 0
    native = env.get("PYJIT_NATIVE_LAUNCH", "1").strip() or "1"
    if native not in ("0", "1"):
        raise ValueError(f"PYJIT_NATIVE_LAUNCH={native!r} must be 0 or 1")
    cfg.native_launch = native == "1"
    warmup = env.get("PYJIT_CONV_WARMUP", "1").strip() or "1"
    if warmup not in ("0", "1"):
        raise ValueError(f"PYJIT_CONV_WARMUP={warmup!r} must be 0 or 1")
    cfg.conv_warmup = warmup == "1"
    threads = env.get("PYJIT_CONV_WARMUP_THREADS", "0").strip() or "0"
    if not threads.isdigit():
        raise ValueError(f"PYJIT_CONV_WARMUP_THREADS={threads!r} must be a whole number (0: one thread)")
    cfg.conv_warmup_threads = int(threads)
    progress = env.get("PYJIT_PROGRESS", "1").strip() or "1"
    if progress not in ("0", "1"):
        raise ValueError(f"PYJIT_PROGRESS={progress!r} must be 0 or 1")
    cfg.progress = progress == "1"
    local = env.get("LOCAL_WORLD_SIZE", "1").strip() or "1"
    cfg.compile_share = int(local) if local.isdigit() and int(local) > 0 else 1
    return cfg


config: Config = _from_environment(os.environ)


def under_test() -> bool:
    """A pytest test is running (pytest sets ``PYTEST_CURRENT_TEST`` per test): interactive
    output such as the progress line stays off."""
    return "PYTEST_CURRENT_TEST" in os.environ


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[Config]:
    """Temporarily change fields of :data:`config`; restores the old values on exit."""
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = set(changes) - names
    if unknown:
        raise AttributeError(f"pyjit.config has no setting(s) {sorted(unknown)}; known: {sorted(names)}")
    old = {name: getattr(config, name) for name in changes}
    try:
        for name, value in changes.items():
            setattr(config, name, value)
        yield config
    finally:
        for name, value in old.items():
            setattr(config, name, value)
