"""The backend registry: name -> ``backend(gm, example_inputs) -> callable`` (torch.compile's protocol).

Built in:

- ``"eager"``: runs the captured FX graph as is (its generated ``forward``, without the
  ``nn.Module.__call__`` overhead);
- ``"pyjit"``: pyjit's own compiler ``pyjit.backend.compile_fx`` when that module exists; if it
  is missing or raises, the graph runs as is and the reason is logged on ``fallbacks``.

- ``"aot_eager"``: the training path (joint forward/backward aten graph, min-cut partition,
  ``torch.autograd.Function``) with both aten graphs run as captured: for debugging.

- ``"pyjit_cudagraphs"``: ``"pyjit"`` with each compiled graph replayed from a CUDA graph where
  possible (``pyjit.runtime.cudagraphs``); what ``pyjit.jit(fn, mode="reduce-overhead")`` uses.
  ``with_cudagraphs(backend)`` does the same for any backend.

``aot(fw_compiler, bw_compiler=None, *, decompositions=None, partition="min_cut")`` builds a
backend from compilers of aten graphs (torch.compile's custom-backend pattern with a forward and a
backward compiler).

torch.compile's names that map to something pyjit has: ``"eager"`` and ``"aot_eager"`` (above),
``"aot_eager_decomp_partition"`` (the same backend: pyjit's ``aot_eager`` already decomposes and
partitions with min-cut), ``"cudagraphs"`` (the captured graph replayed from CUDA graphs, no
compiler) and ``"inductor"``: torch's own compiler, resolved when, and only when, a user asks for
it by name (``torch._inductor`` is imported then, never by pyjit's own pipeline), so moving from
``torch.compile(fn)`` is ``pyjit.jit(fn, backend="inductor")``. Inductor gets static graphs
(``pyjit_dynamic = False``): it specialises on its example inputs.

Third-party backends register through the entry-point group ``pyjit_backends`` (in a package's
metadata: ``[project.entry-points.pyjit_backends] mybackend = "mypkg.backend:compile"``); an
entry point is loaded the first time its name is asked for.

``register(name, fn)`` adds a backend; ``list()`` names the ones resolved so far;
``list_backends()`` every name ``pyjit.jit(backend=...)`` accepts (also ``pyjit.list_backends()``);
``lookup(name_or_callable)`` resolves what ``pyjit.jit(backend=...)`` was given, or raises a
``ValueError`` listing the accepted names.
"""
from __future__ import annotations

import builtins
import importlib
from typing import Any, Callable

from .logs import get_logger

Backend = Callable[..., Callable[..., Any]]
_fallback_log = get_logger("fallbacks")
_REGISTRY: dict[str, Backend] = {}


def register(name: str, fn: Backend | None = None) -> Any:
    """Register ``fn`` under ``name`` (also usable as ``@register("name")``)."""
    if fn is None:
        def deco(f: Backend) -> Backend:
            _REGISTRY[name] = f
            return f

        return deco
    _REGISTRY[name] = fn
    return fn


def list() -> builtins.list[str]:  # noqa: A001 - public API name
    """Names of the registered (resolved) backends, sorted; :func:`list_backends` adds the ones
    resolved on first use (``"inductor"``, entry points)."""
    return sorted(_REGISTRY)


ENTRY_POINT_GROUP = "pyjit_backends"


def _entry_points() -> dict[str, Any]:
    """The ``pyjit_backends`` entry points of the installed distributions, by name (not loaded)."""
    from importlib import metadata

    try:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as e:  # noqa: BLE001 - broken metadata of some distribution: no plug-ins
        _fallback_log.warning("pyjit: could not read the %s entry points (%s: %s)", ENTRY_POINT_GROUP,
                              type(e).__name__, e)
        return {}
    return {ep.name: ep for ep in found}


def _inductor_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def list_backends() -> builtins.list[str]:
    """Every name ``pyjit.jit(backend=...)`` accepts: registered backends, ``"inductor"`` when
    torch is installed, and the ``pyjit_backends`` entry points; sorted. Loads nothing."""
    names = set(_REGISTRY) | set(_entry_points())
    if _inductor_available():
        names.add("inductor")
    return sorted(names)


def _inductor() -> Backend:
    """torch's own compiler as a backend; imported here, when a user asked for "inductor"."""
    # The one place pyjit reaches torch's compiler: by name, on a user's request (its own
    # pipeline never imports it, so every number it reports is its own compiler's).
    inductor_mod = importlib.import_module("torch._inductor")
    compile_fn = getattr(inductor_mod, "compile", None)
    if compile_fn is None:
        compile_fn = importlib.import_module("torch._inductor.compile_fx").compile_fx

    def inductor(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
        return compile_fn(gm, example_inputs)

    inductor.pyjit_dynamic = False  # type: ignore[attr-defined]  # specialises on example inputs
    return inductor


def _resolve(name: str) -> Backend | None:
    """A backend resolved on first use ("inductor", an entry point), registered once found."""
    if name == "inductor" and _inductor_available():
        return register(name, _inductor())
    ep = _entry_points().get(name)
    if ep is None:
        return None
    try:
        fn = ep.load()
    except Exception as e:
        raise ValueError(f"pyjit backend {name!r} from entry point {ep.value!r} (group {ENTRY_POINT_GROUP}) "
                         f"failed to load: {type(e).__name__}: {e}") from e
    if not callable(fn):
        raise ValueError(f"pyjit backend {name!r} from entry point {ep.value!r} is a {type(fn).__name__}, "
                         f"not a callable backend(gm, example_inputs) -> callable")
    return register(name, fn)


def lookup(backend: str | Backend) -> Backend:
    if callable(backend):
        return backend
    found = _REGISTRY.get(backend)
    if found is not None:
        return found
    if not isinstance(backend, str):
        raise TypeError(f"pyjit backend must be a name or a callable backend(gm, example_inputs), "
                        f"got {type(backend).__name__}")
    found = _resolve(backend)
    if found is not None:
        return found
    raise ValueError(f"unknown pyjit backend {backend!r}; available: {', '.join(list_backends())}. "
                     f"Register one with pyjit.backends.register(name, fn) or through the "
                     f"{ENTRY_POINT_GROUP!r} entry-point group.") from None


def eager(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
    """Run the FX graph as captured (its forward, skipping Module.__call__)."""
    _mark_skip(gm.forward)
    return gm.forward


def pyjit_backend(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
    """pyjit's compiler when available, else the graph as is (logged)."""
    try:
        mod = importlib.import_module("pyjit.backend.compile_fx")
    except ImportError as e:
        _fallback_log.info("pyjit.backend.compile_fx is not available (%s); running the graph as captured", e)
        return eager(gm, example_inputs)
    compile_fx = getattr(mod, "compile_fx", None)
    if compile_fx is None:
        _fallback_log.info("pyjit.backend.compile_fx has no compile_fx(); running the graph as captured")
        return eager(gm, example_inputs)
    try:
        compiled = compile_fx(gm, example_inputs)
    except Exception as e:  # the backend's own bug must not break the user's program
        from .config import config

        if config.raise_on_internal_error:
            raise
        _fallback_log.warning("pyjit backend failed on graph %s (%s: %s); running the graph as captured",
                              type(gm).__name__, type(e).__name__, e)
        return eager(gm, example_inputs)
    _mark_skip(compiled)
    return _GuardedCompiled(compiled, gm)


class _GuardedCompiled:
    """pyjit's compiled graph, falling back to the captured graph if it ever raises at run time
    (a backend bug must not break the user's program; logged once on ``fallbacks``)."""

    __slots__ = ("fn", "gm", "failed", "range_name", "prof")
    pauses_frame_hook = True  # runs the graph with pyjit's frame hook off (see __call__)

    def __init__(self, fn: Callable[..., Any], gm: Any) -> None:
        self.fn = fn
        self.gm = gm
        # The backend chose to run the graph as captured: nothing to fall back from (running it
        # again after it raised would repeat the in-place updates it made before raising).
        self.failed = fn == getattr(gm, "forward", None)
        # ``pyjit: <frame> graph <n>`` in torch.profiler traces (pyjit/report/profiler.py): set by
        # the frontend; ``prof`` is torch.autograd.profiler, read once per call for its flag.
        self.range_name: str | None = None
        self.prof: Any = None

    def __call__(self, *args: Any) -> Any:
        compiled_error: Exception | None = None
        if not self.failed:
            # The compiled graph runs inside a jitted frame: pause pyjit's frame hook so that the
            # frames it calls (Triton's launcher compiling a kernel on first launch) are not converted.
            previous = _set_callback(None)
            try:
                prof = self.prof
                if prof is not None and prof._is_profiler_enabled:
                    with prof.record_function(self.range_name):
                        return self.fn(*args)
                return self.fn(*args)
            except Exception as e:
                from .errors import GatherIndexError

                if isinstance(e, GatherIndexError):
                    raise  # (an out-of-range index is the program's error, as in eager)
                compiled_error = e
            finally:
                _set_callback(previous)
        import torch  # a graph exists, so torch is imported (this module is imported without it)

        # After the compiled graph raised, the captured graph decides: compiled graphs write
        # input mutations back only after every kernel ran, so it sees the inputs unchanged.
        grad_mode = torch.is_grad_enabled()
        try:
            result = self.gm.forward(*args)
        except BaseException as eager_error:
            # The graph records grad-mode switches (an optimizer step's no_grad) as calls: restore
            # the caller's mode as eager's context managers would when an op raises.
            torch._C._set_grad_enabled(grad_mode)
            if compiled_error is not None and type(eager_error) is not type(compiled_error):
                self._give_up(compiled_error)
            # Same error as eager (a failed check: ``cholesky`` of a matrix that is not positive
            # definite): the program's own error, raised as eager raises it; the compiled graph
            # stays in use.
            raise
        if compiled_error is not None:
            self._give_up(compiled_error)
        return result

    def _give_up(self, error: Exception) -> None:
        from .config import config

        if config.raise_on_internal_error:
            raise error  # the compiled graph failed where the captured one did not: a pyjit bug
        self.failed = True
        _fallback_log.warning("compiled graph %s raised %s: %s; running the captured graph from now on",
                              type(self.gm).__name__, type(error).__name__, error)


def _load_set_callback() -> Callable[[Any], Any]:
    try:
        from . import _C
    except ImportError:  # the C extension is not built: no frame hook to pause
        return lambda cb: None
    return _C.set_callback


_set_callback = _load_set_callback()


def _mark_skip(fn: Any) -> None:
    """Frames of the compiled callable must not re-enter pyjit's callback (cheap C skip)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:
        return
    try:
        from . import _C

        _C.mark_skip(code)
    except ImportError:
        pass


def aot(fw_compiler: Backend, bw_compiler: Backend | None = None, *,
        decompositions: dict[Any, Callable[..., Any]] | None = None, partition: str = "min_cut") -> Backend:
    """A backend that hands ``fw_compiler`` (and ``bw_compiler``, default ``fw_compiler``) aten graphs.

    The captured graph is traced to one joint forward/backward aten graph (decomposed with
    ``decompositions``, default pyjit's table; functionalized), split by ``partition``
    (``"min_cut"`` or ``"reference"``), and run by one ``torch.autograd.Function``: the forward
    graph is compiled at once, the backward graph on the first backward. Without grad (or no
    input requiring grad) only a forward graph exists. Each compiler is called as
    ``compiler(aten_gm, example_inputs) -> callable`` returning the flat outputs. Graphs the
    training path does not support run as captured (logged on ``fallbacks``).
    """
    if partition not in ("min_cut", "reference"):
        raise ValueError(f"unknown partition {partition!r}: use 'min_cut' or 'reference'")

    def aot_backend(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
        from .backend.aot import aot_compile

        try:
            compiled = aot_compile(gm, example_inputs, fw_compiler, bw_compiler,
                                   decompositions=decompositions, partition=partition)
        except NotImplementedError as e:
            _fallback_log.info("aot backend: running graph %s as captured: %s", type(gm).__name__, e)
            return eager(gm, example_inputs)
        _mark_skip(compiled)
        return compiled

    aot_backend.pyjit_size_placeholders = False  # type: ignore[attr-defined]  # reads sizes from its tensors
    return aot_backend


# (id(inner), dynamic) -> wrapper; the inner backends are kept alive so an id is never reused.
_cudagraph_wrappers: dict[tuple[int, bool], tuple[Backend, Backend]] = {}
MODES = (None, "default", "reduce-overhead")


def with_cudagraphs(inner: str | Backend, *, dynamic: bool = False) -> Backend:
    """``inner`` with its compiled graphs replayed from CUDA graphs (``pyjit.runtime.cudagraphs``).

    ``dynamic=False`` asks the tracer for static graphs (one cache entry and one CUDA graph per
    input shape); ``dynamic=True`` lets ``inner`` get symbolic graphs, which then run without
    CUDA graphs (logged). The same arguments return the same object, so jitting twice with
    ``mode="reduce-overhead"`` shares one cache."""
    inner = lookup(inner)
    key = (id(inner), dynamic)
    found = _cudagraph_wrappers.get(key)
    if found is not None:
        return found[0]

    def pyjit_cudagraphs(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
        from .runtime.cudagraphs import wrap_compiled

        return wrap_compiled(inner(gm, example_inputs), gm, example_inputs)

    pyjit_cudagraphs.pyjit_dynamic = dynamic and accepts_symbolic(inner)  # type: ignore[attr-defined]
    pyjit_cudagraphs.pyjit_size_placeholders = False  # type: ignore[attr-defined]  # inner is handed the graph as is
    _cudagraph_wrappers[key] = (pyjit_cudagraphs, inner)
    return pyjit_cudagraphs


def for_mode(backend: str | Backend, mode: str | None, dynamic: bool | None) -> Backend:
    """The backend ``pyjit.jit(backend=..., mode=...)`` compiles with (ValueError for an unknown mode)."""
    if mode not in MODES:
        raise ValueError(f"pyjit: unknown mode {mode!r}; accepted: None, 'default', 'reduce-overhead'")
    if mode == "reduce-overhead":
        return with_cudagraphs(backend, dynamic=dynamic is True)
    return lookup(backend)


def _run_aten_graph(gm: Any, example_inputs: builtins.list[Any]) -> Callable[..., Any]:
    return gm.forward


def accepts_symbolic(backend: Any) -> bool:
    """Whether ``backend`` is handed graphs with symbolic sizes once a size has changed.

    As under torch.compile, every backend does unless it declares ``pyjit_dynamic = False``
    (then each new size is a static trace and a new backend call, up to the entry limit). A
    symbolic graph reads its sizes from its tensor inputs (``x.size()[0]`` nodes) and takes
    Python numbers that changed as int/float placeholders; its example inputs are the real
    values of the call that compiled it, so a backend can run the graph on them. A backend that
    specialises on its example inputs' sizes (it traces or records them) must declare
    ``pyjit_dynamic = False``."""
    return bool(getattr(backend, "pyjit_dynamic", True))


eager.pyjit_dynamic = True  # type: ignore[attr-defined]
pyjit_backend.pyjit_dynamic = True  # type: ignore[attr-defined]
# pyjit's own backends read symbolic sizes from their tensor inputs (frame/size_symbols.py).
eager.pyjit_size_placeholders = False  # type: ignore[attr-defined]
pyjit_backend.pyjit_size_placeholders = False  # type: ignore[attr-defined]

register("eager", eager)
register("pyjit", pyjit_backend)
register("aot_eager", aot(_run_aten_graph))
register("pyjit_cudagraphs", with_cudagraphs(pyjit_backend))
# torch.compile's names for backends pyjit has (see the module docstring).
register("aot_eager_decomp_partition", _REGISTRY["aot_eager"])
register("cudagraphs", with_cudagraphs(eager))
