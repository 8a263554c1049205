"""Direct launches of generated Triton kernels (``pyjit/runtime/fast_launch.py``).

On CUDA: after each launch site's first launch the compiled kernel is launched directly
(through pyjit._C.KernelLauncher where its parameters are modelled); results stay equal to
eager across calls, when an input pointer loses the alignment the kernel was specialised for
(the slow path compiles the other specialisation), when sizes change (dynamic graphs), and
when a Triton launch hook is installed (the hook sees every launch). On CPU: a site whose
binding fails keeps the slow path, and the launcher's parameter model is checked on stubs.
"""
from __future__ import annotations

import inspect
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # these tests compile graphs; skipped where torch is absent

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime import fast_launch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="launches CUDA kernels")


class _StubCompiled:
    pass


class _StubKernel:
    """Counts launches; binding it fails (no CUDA device here, or no launcher)."""

    def __init__(self) -> None:
        self.launches = 0
        self.arg_names = ["x", "n", "XBLOCK"]
        self.constexprs = [2]

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **meta: Any) -> Any:
            self.launches += 1
            return _StubCompiled()
        return launch


def test_site_without_a_usable_binding_keeps_the_slow_path() -> None:
    stub = _StubKernel()
    kernel = fast_launch.FastKernel(stub)
    assert kernel.arg_names == stub.arg_names  # attributes pass through
    for _ in range(3):
        kernel[(4,)](torch.zeros(4), 4, XBLOCK=4)
    assert stub.launches == 3
    assert fast_launch.unwrap(kernel) is stub


class _Chain:
    """Triton 3.6's ``HookChain``: a list of calls that profilers append to."""

    def __init__(self) -> None:
        self.calls: list[Any] = []


def test_hook_check_sees_every_way_a_hook_appears(monkeypatch: Any) -> None:
    """The per-launch hook test is specialised to the hooks installed at binding; any change
    (a hook added to a chain, a chain or function put in its place) makes it fail."""
    knobs = pytest.importorskip("triton").knobs
    rt = knobs.runtime
    monkeypatch.setattr(rt, "launch_enter_hook", None)
    monkeypatch.setattr(rt, "launch_exit_hook", None)
    off = fast_launch._hooks_check()
    assert off()
    monkeypatch.setattr(rt, "launch_exit_hook", lambda metadata: None)
    assert not off()
    enter, leave = _Chain(), _Chain()
    monkeypatch.setattr(rt, "launch_enter_hook", enter)
    monkeypatch.setattr(rt, "launch_exit_hook", leave)
    off = fast_launch._hooks_check()
    assert off()
    leave.calls.append(print)
    assert not off()
    leave.calls.clear()
    monkeypatch.setattr(rt, "launch_enter_hook", _Chain())
    assert not off()
    monkeypatch.setattr(rt, "launch_enter_hook", lambda metadata: None)
    assert not fast_launch._hooks_check()()


def _module_of(compiled: Any) -> Any:
    return inspect.getmodule(compiled.pyjit_call)


def _bound_sites(module: Any) -> int:
    return sum(1 for v in vars(module).values() if isinstance(v, fast_launch.FastKernel)
               for site in v.sites.values() if site.bound is not None)


@cuda
def test_direct_launches_match_eager(tmp_path: Any) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * y + 1, -1).sum(0)

    x, y = torch.randn(64, 128, device="cuda"), torch.randn(128, device="cuda")
    with cfg.patch(cache_dir=str(tmp_path), raise_on_internal_error=True):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [x, y])
        for i in range(5):
            xi = x + i
            torch.testing.assert_close(compiled(xi, y), fn(xi, y))
        assert _bound_sites(_module_of(compiled)) > 0


@cuda
def test_unaligned_input_takes_the_slow_path(tmp_path: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.exp() * 2

    base = torch.randn(4097, device="cuda")
    aligned = base[:4096]
    unaligned = base[1:]  # 4 bytes past a 16-byte boundary
    assert unaligned.data_ptr() % 16 != 0 and aligned.stride() == unaligned.stride()
    with cfg.patch(cache_dir=str(tmp_path), raise_on_internal_error=True):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [aligned])
        torch.testing.assert_close(compiled(aligned), fn(aligned))
        torch.testing.assert_close(compiled(aligned), fn(aligned))  # a direct launch
        torch.testing.assert_close(compiled(unaligned), fn(unaligned))
        torch.testing.assert_close(compiled(unaligned), fn(unaligned))
        torch.testing.assert_close(compiled(aligned), fn(aligned))


@cuda
def test_dynamic_sizes_and_launch_hooks(tmp_path: Any) -> None:
    import pyjit
    from triton import knobs

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x) + x.sum(-1, keepdim=True)

    seen: list[Any] = []
    with cfg.patch(cache_dir=str(tmp_path), raise_on_internal_error=True):
        jitted = pyjit.jit(fn, dynamic=True)
        for rows in (8, 9, 33, 8, 64, 9):
            x = torch.randn(rows, 256, device="cuda")
            torch.testing.assert_close(jitted(x), fn(x))
        old = knobs.runtime.launch_enter_hook
        knobs.runtime.launch_enter_hook = lambda metadata: seen.append(metadata)
        try:
            x = torch.randn(9, 256, device="cuda")
            torch.testing.assert_close(jitted(x), fn(x))
        finally:
            knobs.runtime.launch_enter_hook = old
    assert seen, "a launch hook installed after binding did not see the launches"


class _Meta:
    num_warps, shared, num_ctas, cluster_dims = 4, 1024, 1, (1, 1, 1)
    launch_cooperative_grid = launch_pdl = False
    global_scratch_size = profile_scratch_size = 0


class _Src:
    def __init__(self, signature: dict[Any, str]) -> None:
        self.signature = signature


class _Compiled:
    def __init__(self, signature: dict[Any, str], **meta: Any) -> None:
        self.src, self.function = _Src(signature), 0x1234
        self.metadata = _Meta()
        for k, v in meta.items():
            setattr(self.metadata, k, v)


class _Named:
    arg_names = ["in_ptr0", "out_ptr0", "n", "m", "one", "XBLOCK"]


def test_native_launcher_models_each_parameter(monkeypatch: Any) -> None:
    """Pointers, 32/64-bit integers, an integer Triton specialised away (== 1) and the trailing
    constexpr map to the launcher's kinds; anything unmodelled keeps Triton's launcher."""
    from pyjit import _C

    made: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_C, "KernelLauncher", lambda *a: made.append(a) or "launcher", raising=False)
    sig = {"in_ptr0": "*fp32", "out_ptr0": "*bf16", "n": "i32", "m": "i64", "one": "constexpr", "XBLOCK": "constexpr"}
    args = (torch.zeros(2), torch.zeros(2), 7, 1 << 40, 1)
    assert fast_launch.native_launcher(_Named(), _Compiled(sig), args, (3, 1, 1)) == "launcher"
    assert made == [(0x1234, (3, 1, 1), 128, 1024, "PPil-", 2)]
    by_index = {i: t for i, t in enumerate(sig.values())}  # signatures keyed by position
    assert fast_launch.native_launcher(_Named(), _Compiled(by_index), args, (3, 1, 1)) == "launcher"
    refusals = [
        fast_launch.native_launcher(_Named(), _Compiled(sig, num_ctas=2), args, (3, 1, 1)),
        fast_launch.native_launcher(_Named(), _Compiled(sig, global_scratch_size=64), args, (3, 1, 1)),
        fast_launch.native_launcher(_Named(), _Compiled({**sig, "n": "fp16"}), args, (3, 1, 1)),
        fast_launch.native_launcher(_Named(), _Compiled({**sig, "XBLOCK": "i32"}), args, (3, 1, 1)),
        fast_launch.native_launcher(_Named(), _Compiled(sig), (1, *args[1:]), (3, 1, 1)),  # not a tensor
    ]
    assert all(isinstance(r, str) for r in refusals), refusals
    assert len(made) == 2


def test_kernel_launcher_validates_without_a_driver() -> None:
    """The C launcher refuses bad kinds before it looks for the driver; without libcuda (this
    machine) it says so, and the binding keeps Triton's launcher."""
    from pyjit import _C

    with pytest.raises(ValueError, match="unknown argument kind"):
        _C.KernelLauncher(1, (1, 1, 1), 128, 0, "PX", 2)
    with pytest.raises(ValueError, match="scratch"):
        _C.KernelLauncher(1, (1, 1, 1), 128, 0, "P", 9)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="libcuda"):
            _C.KernelLauncher(1, (1, 1, 1), 128, 0, "Pi", 2)
        sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "n": "i32", "m": "i32", "one": "i32", "XBLOCK": "constexpr"}
        why = fast_launch.native_launcher(_Named(), _Compiled(sig), (torch.zeros(1), torch.zeros(1), 1, 2, 3), (1, 1, 1))
        assert isinstance(why, str) and "libcuda" in why


@cuda
def test_native_launches_match_triton(tmp_path: Any) -> None:
    """Every site of a compiled graph launches natively after its first launch, with results
    equal to eager's over several calls (pointwise, reductions, several outputs)."""
    if not cfg.config.native_launch:
        pytest.skip("PYJIT_NATIVE_LAUNCH=0")

    def fn(x: torch.Tensor, y: torch.Tensor) -> Any:
        z = torch.relu(x * 2 + y)
        return z, z.sum(-1), (x - y).var(0), x.softmax(-1)

    x, y = torch.randn(64, 300, device="cuda"), torch.randn(64, 300, device="cuda")
    with cfg.patch(cache_dir=str(tmp_path), raise_on_internal_error=True):
        compiled = backend.compile_fx(torch.fx.symbolic_trace(fn), [x, y])
        for _ in range(4):
            x, y = torch.randn(64, 300, device="cuda"), torch.randn(64, 300, device="cuda")
            for got, want in zip(compiled(x, y), fn(x, y)):
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    module = _module_of(compiled)
    sites = [site for v in vars(module).values() if isinstance(v, fast_launch.FastKernel) for site in v.sites.values()]
    assert sites and all(site.bound is not None and site.bound.native is not None for site in sites), \
        fast_launch.native_refusals
