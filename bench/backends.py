"""The backends a benchmark compares, and whether each one is usable on this machine.

- ``eager``: the function as written (the baseline of every speed-up).
- ``pyjit``: ``pyjit.jit(fn)`` with pyjit's own backend.
- ``torch.compile``: ``torch.compile(fn)`` (TorchDynamo + TorchInductor), the peer.
- ``pyjit+inductor``: pyjit's frontend driving TorchInductor (``pyjit.jit(fn, backend=...)``):
  isolates pyjit's frontend.
- ``dynamo+pyjit``: TorchDynamo driving ``pyjit.backend.compile_fx``: isolates pyjit's backend.
- ``pyjit-cg``: ``pyjit.jit(fn, mode="reduce-overhead")``: pyjit with CUDA graph replay
  (opt-in, not in the default set: ``--backends eager,pyjit,pyjit-cg``).
- ``wrong``: a self-test of the harness, never selected by default: eager with a perturbed
  output, which the correctness check must report as FAIL.

Availability is detected at run time by imports and attribute checks, because the layers are
built in parallel; an unavailable backend is reported with its reason, never dropped silently.
"""
from __future__ import annotations

import dataclasses
import functools
import shutil
from typing import Any, Callable

import torch

Compiler = Callable[[Callable[..., Any]], Callable[..., Any]]

from bench import ALL_BACKENDS, DEFAULT_BACKENDS  # noqa: E402,F401  (re-exported)


@dataclasses.dataclass
class Backend:
    name: str
    description: str
    available: bool
    reason: str  # why it is unavailable ("" when available)
    compile: Compiler
    reset: Callable[[], None]
    uses_pyjit: bool = False  # pyjit's log channels are worth capturing for this backend

    def info(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason or None, "description": self.description}


def _unavailable(name: str, description: str, reason: str) -> Backend:
    def refuse(fn: Callable[..., Any]) -> Callable[..., Any]:
        raise RuntimeError(f"backend {name} is unavailable: {reason}")

    return Backend(name, description, False, reason, refuse, lambda: None)


def _short_exc(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:200]


def pyjit_api() -> tuple[Any | None, str]:
    """The object carrying pyjit's public functions (``jit``, ``reset``, ``enable``...).

    Normally the ``pyjit`` package itself. ADAPTER (bench-only, while the package root does not
    export them yet): falls back to ``pyjit.api``, which defines them.
    """
    try:
        import pyjit
    except Exception as exc:  # a half-built tree must still be benchmarkable
        return None, f"import pyjit failed ({_short_exc(exc)})"
    if callable(getattr(pyjit, "jit", None)):
        return pyjit, ""
    try:
        from pyjit import api
    except Exception as exc:
        return None, f"pyjit.jit does not exist and pyjit.api does not import ({_short_exc(exc)})"
    if callable(getattr(api, "jit", None)):
        return api, ""
    return None, "pyjit.jit does not exist yet (frontend not built)"


def _pyjit_reset() -> None:
    api, _ = pyjit_api()
    reset = getattr(api, "reset", None)
    if callable(reset):
        try:
            reset()
        except Exception:
            pass  # reset is best effort between cases; a broken reset shows up as case errors


def _dynamo_reset() -> None:
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception:
        pass


def _torch_compile_problem(device: torch.device) -> str:
    if not hasattr(torch, "compile"):
        return "this torch has no torch.compile"
    if device.type == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "TorchInductor on CPU needs a C++ compiler (g++/clang++) and none is on PATH"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except Exception as exc:
            return f"TorchInductor on CUDA needs triton ({_short_exc(exc)})"
    return ""


def _inductor_backend() -> tuple[Callable[..., Any] | None, str]:
    """TorchInductor as a plain ``(gm, example_inputs) -> callable`` backend (the peer's half)."""
    try:
        import torch._inductor

        compile_fn = getattr(torch._inductor, "compile", None)
        if compile_fn is None:
            from torch._inductor.compile_fx import compile_fx as compile_fn  # older spelling
    except Exception as exc:
        return None, f"torch._inductor is not importable ({_short_exc(exc)})"

    def inductor(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        return compile_fn(gm, example_inputs)

    return inductor, ""


def _pyjit_backend_fn() -> tuple[Callable[..., Any] | None, str]:
    try:
        import pyjit.backend as pb
    except Exception as exc:
        return None, f"import pyjit.backend failed ({_short_exc(exc)})"
    fn = getattr(pb, "compile_fx", None)
    if not callable(fn):
        return None, "pyjit.backend.compile_fx does not exist yet (backend not built)"
    return fn, ""


def _wrap_pyjit(pyjit: Any, **options: Any) -> Compiler:
    def compile_with_pyjit(target: Callable[..., Any]) -> Callable[..., Any]:
        return pyjit.jit(target, **options)

    return compile_with_pyjit


def _perturb(out: Any) -> Any:
    """Change the first floating-point tensor of an output visibly (the ``wrong`` backend)."""
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten(out)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.numel() > 0:
            leaves[i] = leaf + (1e-2 * (1.0 + leaf.abs()))
            break
    return pytree.tree_unflatten(leaves, spec)


def _wrong_compile(target: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(target)
    def wrong(*args: Any, **kwargs: Any) -> Any:
        return _perturb(target(*args, **kwargs))

    return wrong


def make_backend(name: str, device: torch.device) -> Backend:
    """Build one backend, detecting whether it works here."""
    if name == "eager":
        return Backend(name, "the function as written (baseline)", True, "", lambda fn: fn, lambda: None)
    if name == "wrong":
        return Backend(name, "harness self-test: eager with a perturbed output (must FAIL)", True, "", _wrong_compile, lambda: None)
    if name == "pyjit":
        desc = "pyjit.jit(fn): pyjit frontend + pyjit backend"
        pyjit, why = pyjit_api()
        if pyjit is None:
            return _unavailable(name, desc, why)
        return Backend(name, desc, True, "", _wrap_pyjit(pyjit), _pyjit_reset, uses_pyjit=True)
    if name == "pyjit-cg":
        desc = "pyjit.jit(fn, mode='reduce-overhead'): pyjit with CUDA graph replay"
        pyjit, why = pyjit_api()
        if pyjit is None:
            return _unavailable(name, desc, why)
        if device.type != "cuda":
            return _unavailable(name, desc, "CUDA graphs need a CUDA device")
        return Backend(name, desc, True, "", _wrap_pyjit(pyjit, mode="reduce-overhead"), _pyjit_reset, uses_pyjit=True)
    if name == "torch.compile":
        desc = "torch.compile(fn): TorchDynamo + TorchInductor (peer)"
        problem = _torch_compile_problem(device)
        if problem:
            return _unavailable(name, desc, problem)
        return Backend(name, desc, True, "", lambda fn: torch.compile(fn), _dynamo_reset)
    if name == "pyjit+inductor":
        desc = "pyjit.jit(fn, backend=TorchInductor): pyjit frontend, peer backend"
        pyjit, why = pyjit_api()
        if pyjit is None:
            return _unavailable(name, desc, why)
        problem = _torch_compile_problem(device)
        if problem:
            return _unavailable(name, desc, problem)
        inductor, why = _inductor_backend()
        if inductor is None:
            return _unavailable(name, desc, why)
        return Backend(name, desc, True, "", _wrap_pyjit(pyjit, backend=inductor), _pyjit_reset, uses_pyjit=True)
    if name == "dynamo+pyjit":
        desc = "torch.compile(fn, backend=pyjit.backend.compile_fx): peer frontend, pyjit backend"
        if not hasattr(torch, "compile"):
            return _unavailable(name, desc, "this torch has no torch.compile")
        compile_fx, why = _pyjit_backend_fn()
        if compile_fx is None:
            return _unavailable(name, desc, why)
        return Backend(
            name, desc, True, "", lambda fn: torch.compile(fn, backend=compile_fx), _dynamo_reset, uses_pyjit=True
        )
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(ALL_BACKENDS)}, pyjit-cg")


def make_backends(names: list[str], device: torch.device) -> list[Backend]:
    if "eager" not in names:
        names = ["eager", *names]  # every speed-up and correctness check needs the baseline
    return [make_backend(n, device) for n in names]
