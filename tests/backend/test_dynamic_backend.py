"""Symbolic sizes through pyjit's backend: one compiled artefact serves every size.

Graphs are recorded with ``torch.fx.symbolic_trace`` and given placeholders whose
``meta['example_value']`` are fake tensors with symbolic sizes (and ``SymInt``/``SymFloat``
scalars) of one ``ShapeEnv``: what the frontend hands ``compile_fx``. Each test compiles once,
then calls the compiled function with at least four different sizes, compares with eager and
asserts the backend compiled exactly one dynamic graph and ran nothing as captured.
Runs under ``PYJIT_CPU_BACKEND=triton_interpret`` and ``cpp`` on CPU, and on CUDA when present.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Sequence

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch._guards import Source
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.metrics import metrics


@dataclasses.dataclass(frozen=True)
class _ArgSource(Source):
    """A named source for a scalar symbol (the ShapeEnv wants one per symbol)."""

    text: str = ""

    @property  # type: ignore[misc]
    def name(self) -> str:  # type: ignore[override]
        return self.text

    def reconstruct(self, codegen: Any) -> None:  # pragma: no cover - never used
        raise NotImplementedError


Dyn = Any  # per argument: a list of bools (dynamic dims of a tensor), True (symbolic scalar), or None


def symbolic_graph(fn: Callable[..., Any], example: Sequence[Any], dyn: Sequence[Dyn]) -> torch.fx.GraphModule:
    """``fn`` traced by ``torch.fx.symbolic_trace`` (or ``fn`` itself when it is a graph module)
    with symbolic ``example_value`` s on its placeholders. A scalar marked ``"signed"`` gets a
    symbol of any sign, as the tracer makes for a Python int/float argument."""
    shape_env = ShapeEnv(duck_shape=False, specialize_zero_one=True)
    mode = FakeTensorMode(shape_env=shape_env)
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(example)
    for i, (node, value, d) in enumerate(zip(placeholders, example, dyn)):
        if isinstance(value, torch.Tensor):
            dims = d or [False] * value.dim()
            ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if k else DimDynamic.STATIC
                                                          for k in dims])
            node.meta["example_value"] = mode.from_tensor(value, symbolic_context=ctx)
        elif d:
            symbol = shape_env.create_unspecified_symbol(value, source=_ArgSource(f"arg{i}"),
                                                         dynamic_dim=DimDynamic.DYNAMIC) if d == "signed" \
                else shape_env.create_symbol(value, source=_ArgSource(f"arg{i}"))
            node.meta["example_value"] = shape_env.create_symintnode(symbol, hint=value) if isinstance(value, int) \
                else shape_env.create_symfloatnode(symbol, hint=value)
        else:
            node.meta["example_value"] = value
    return gm


def check_sizes(fn: Callable[..., Any], make: Callable[[int, str], Sequence[Any]], dyn: Sequence[Dyn],
                device: str, sizes: Sequence[int] = (6, 9, 17, 33, 130), atol: float = 1e-4, rtol: float = 1e-4
                ) -> Callable[..., Any]:
    """Compile ``fn`` once for ``make(sizes[0])`` with ``dyn`` symbolic, then run every size against eager."""
    example = list(make(sizes[0], device))
    gm = symbolic_graph(fn, example, dyn)
    before = len(metrics.eager_graphs)
    compiled = backend.compile_fx(gm, example)
    assert metrics.eager_graphs[before:] == []
    assert metrics.compiled_graphs == 1 and metrics.dynamic_graphs == 1
    for n in sizes:
        args = list(make(n, device))
        expected = fn(*args)
        got = compiled(*args)
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, msg=lambda m: f"size {n}: {m}")
    # Still one compile, and no call ran as captured (the module's check accepted every size).
    assert metrics.compiled_graphs == 1 and metrics.eager_graphs[before:] == []
    assert "def check(args)" in compiled.pyjit_source
    return compiled


def _randn(*size: int, device: str) -> torch.Tensor:
    return torch.randn(*size, device=device)


# --------------------------------------------------------------------------- pointwise
def test_pointwise_broadcast(target: str) -> None:
    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 + b) - x.sigmoid()

    check_sizes(fn, lambda n, d: (_randn(n, 8, device=d), _randn(8, device=d)), [[True, False], None], target)


def test_pointwise_two_symbols(target: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.exp() + y  # y broadcasts over x's rows: [n, m] + [1, m]

    check_sizes(fn, lambda n, d: (_randn(n, n + 3, device=d), _randn(1, n + 3, device=d)),
                [[True, True], [False, True]], target)


def test_noncontiguous_input(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.t() * 3 + 1

    check_sizes(fn, lambda n, d: (_randn(n, 12, device=d),), [[True, False]], target)


def test_transposed_input(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + 1

    check_sizes(fn, lambda n, d: (_randn(12, n, device=d).t(),), [[True, False]], target)


# --------------------------------------------------------------------------- views
def test_view_symbolic_sizes(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        y = x.view(b, t, 4, 8).transpose(1, 2)
        return (y * 2).reshape(b * 4, t * 8)

    check_sizes(fn, lambda n, d: (_randn(3, n, 32, device=d),), [[False, True, False]], target)


def test_cat_split(target: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = torch.cat([x, y * 2], dim=0)
        a, b = torch.split(z, [x.shape[0], y.shape[0]], dim=0)
        return z + 1, a - b.sum(0, keepdim=True)

    check_sizes(fn, lambda n, d: (_randn(n, 5, device=d), _randn(n + 2, 5, device=d)),
                [[True, False], [True, False]], target)


def test_slice_by_symbolic_size(target: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = y.shape[0]
        return x[:n] * y + x[n:].sum()

    check_sizes(fn, lambda n, d: (_randn(2 * n, device=d), _randn(n, device=d)), [[True], [True]], target)


def test_slice_guard_from_the_aten_trace_is_checked(target: str) -> None:
    """``x[:n]`` assumes ``n <= len(x)`` (a guard the aten trace adds): a call that breaks it
    runs as captured (eager clamps the slice) instead of reading past ``x``."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x[:y.shape[0]] * 2

    compiled = check_sizes(fn, lambda n, d: (_randn(2 * n, device=d), _randn(n, device=d)), [[True], [True]],
                           target)
    check_src = compiled.pyjit_source.split("def check(args):")[1].split("def call(args):")[0]
    assert "<=" in check_src
    x, y = _randn(3, device=target), _randn(5, device=target)
    torch.testing.assert_close(compiled(x, y), fn(x, y))  # 3 elements, as eager
    assert metrics.compiled_graphs == 1


def test_slice_from_the_end(target: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x[-y.shape[0]:] + y + x[-3:].sum()

    check_sizes(fn, lambda n, d: (_randn(n + 4, device=d), _randn(n, device=d)), [[True], [True]], target)


def test_select_and_narrow(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x[-1] + x[1] * x.narrow(0, 1, 2).sum(0) + x[:, -1:]

    check_sizes(fn, lambda n, d: (_randn(n, 4, device=d),), [[True, False]], target)


def test_mutated_input_region(target: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.narrow(0, 1, y.shape[0]).copy_(y * 2)  # x[1:n + 1] = y * 2 (fx cannot trace setitem)
        return x.sum()

    example = [_randn(12, device=target), _randn(6, device=target)]
    gm = symbolic_graph(fn, example, [[True], [True]])
    compiled = backend.compile_fx(gm, example)
    for n in (6, 9, 17):
        x, y = _randn(2 * n, device=target), _randn(n, device=target)
        x2 = x.clone()
        torch.testing.assert_close(compiled(x, y), fn(x2, y))
        torch.testing.assert_close(x, x2)  # the input was written as eager writes it
    assert metrics.compiled_graphs == 1 and metrics.dynamic_graphs == 1 and metrics.eager_graphs == []


def test_cpp_kernels_take_int64_sizes(target: str) -> None:
    """C++ kernels of a symbolic graph take the size symbols as int64_t parameters (and loop to
    them): nothing of the example size is baked in."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1) * 2

    compiled = check_sizes(fn, lambda n, d: (_randn(n, n + 5, device=d),), [[True, True]], target,
                           sizes=(11, 3, 40, 200))
    src = compiled.pyjit_source
    if target != "cpu" or cfg.config.cpu_backend != "cpp":
        return
    assert "int64_t s" in src and "'int64_t'" in src  # the parameter and its ctypes signature
    kernel = src[src.index('extern "C" void pyjit_fused'):src.index("_kernels = load_kernels")]
    assert re.search(r"(?<![\w.])(11|16|176)(?![\w.])", kernel) is None  # no example size (11 x 16)
    assert "row_tmp" not in kernel  # no per-row buffer of a symbolic length


def test_zeros_of_symbolic_size(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0] * 2, device=x.device) + x.repeat(2)

    check_sizes(fn, lambda n, d: (_randn(n, device=d),), [[True]], target)


# --------------------------------------------------------------------------- reductions
def _last_dim_reduction(op: str) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        if op == "softmax":
            return torch.softmax(x, dim=-1)
        if op == "var":
            return x.var(dim=-1)
        return getattr(x, op)(dim=-1)

    return fn


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "softmax", "var"])
def test_reduction_over_dynamic_dim(target: str, op: str) -> None:
    check_sizes(_last_dim_reduction(op), lambda n, d: (_randn(7, n * 3, device=d),), [[False, True]], target)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "softmax", "var"])
def test_reduction_dynamic_outer(target: str, op: str) -> None:
    check_sizes(_last_dim_reduction(op), lambda n, d: (_randn(n, 24, device=d),), [[True, False]], target)


def test_full_reduction(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum() + x.amax()

    check_sizes(fn, lambda n, d: (_randn(n, 5, device=d),), [[True, False]], target)


def test_layer_norm(target: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), w, b)

    check_sizes(fn, lambda n, d: (_randn(n, 32, device=d), _randn(32, device=d), _randn(32, device=d)),
                [[True, False], None, None], target)


def test_layer_norm_dynamic_row(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],))

    check_sizes(fn, lambda n, d: (_randn(4, n, device=d),), [[False, True]], target)


# --------------------------------------------------------------------------- externs
def test_matmul_extern(target: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) + 1

    check_sizes(fn, lambda n, d: (_randn(n, 16, device=d), _randn(16, 8, device=d)), [[True, False], None], target)


def test_batched_matmul_symbolic_batch(target: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)

    check_sizes(fn, lambda n, d: (_randn(2, n, 16, device=d), _randn(2, n, 16, device=d)),
                [[False, True, False], [False, True, False]], target)


def test_extern_output_layout_follows_traced_inputs(target: str) -> None:
    """CPU flash attention lays its output out after ``query``'s strides: a query that pyjit
    computes into a contiguous buffer (traced as a transposed view) is passed in the traced
    layout, so viewing the output with the traced strides reads the right elements."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        q = (x @ w).view(b, t, 2, 16).transpose(1, 2)
        out = F.scaled_dot_product_attention(q * 2 + 1, q.sin(), q, scale=0.25)
        return out.transpose(1, 2).reshape(b, t, 32) + 1

    check_sizes(fn, lambda n, d: (_randn(2, n, 32, device=d), _randn(32, 32, device=d)),
                [[False, True, False], None], target)


# --------------------------------------------------------------------------- scalars
def test_int_scalar_input(target: str) -> None:
    def fn(x: torch.Tensor, k: int) -> torch.Tensor:
        return x * k + (k * 2)

    gm_inputs = lambda n, d: (_randn(n, 4, device=d), n + 1)  # noqa: E731
    check_sizes(fn, gm_inputs, [[True, False], True], target)


def test_float_scalar_input(target: str) -> None:
    def fn(x: torch.Tensor, a: float) -> torch.Tensor:
        return torch.tanh(x * a) - a

    check_sizes(fn, lambda n, d: (_randn(n, 4, device=d), 0.25 * n), [[True, False], True], target)


def _scalar_graph(body: Callable[[torch.fx.Graph, Any, Any, Any], Any]) -> torch.fx.GraphModule:
    """A graph of ``(x, a: float, k: int)`` built node by node: ``torch.fx.symbolic_trace``
    cannot trace ``min``/``abs`` of a Python scalar."""
    g = torch.fx.Graph()
    x, a, k = g.placeholder("x"), g.placeholder("a"), g.placeholder("k")
    g.output(body(g, x, a, k))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_scalar_expressions_keep_python_semantics(target: str) -> None:
    """Expressions over symbolic scalar inputs compute as Python does for every value, also
    negative ints (``//`` and ``%`` floor) and floats (``min``, ``abs``, ``**``, ``math.floor``):
    the kernels' integer size arithmetic truncates toward zero and knows only int min/max (a
    float ``min(2.0, a)`` printed as an int64 minimum was 0 for ``a = 0.5``)."""
    import math
    import operator

    def body(g: torch.fx.Graph, x: Any, a: Any, k: Any) -> Any:
        terms = [g.call_function(torch.sym_min, (2.0, a)), g.call_function(torch.sym_max, (-2.0, a)),
                 g.call_function(operator.abs, (a,)), g.call_function(operator.pow, (a, 2)),
                 g.call_function(operator.floordiv, (a, 0.3)), g.call_function(math.floor, (a,)),
                 g.call_function(operator.floordiv, (k, 2)), g.call_function(operator.mod, (k, 3)),
                 g.call_function(operator.abs, (k,)), g.call_function(torch.sym_max, (k, -2)),
                 g.call_function(operator.truediv, (k, 3))]
        out = x
        for i, t in enumerate(terms):
            out = g.call_function(operator.add, (g.call_function(operator.mul, (out, 1.0 + i / 10)), t))
        return out

    def eager(x: torch.Tensor, a: float, k: int) -> torch.Tensor:
        terms = [min(2.0, a), max(-2.0, a), abs(a), a ** 2, a // 0.3, math.floor(a), k // 2, k % 3, abs(k),
                 max(k, -2), k / 3]
        for i, t in enumerate(terms):
            x = x * (1.0 + i / 10) + t
        return x

    x = _randn(3, 4, device=target)
    gm = symbolic_graph(_scalar_graph(body), [x, 0.5, 7], [None, "signed", "signed"])
    compiled = backend.compile_fx(gm, [x, 0.5, 7])
    for a, k in ((0.5, 7), (0.7, -7), (3.0, -3), (-2.5, 4), (1.25, -1), (0.1, 0)):
        torch.testing.assert_close(compiled(x, a, k), eager(x, a, k), msg=lambda m: f"a={a}, k={k}: {m}")
    assert metrics.compiled_graphs == 1 and metrics.eager_graphs == []


def test_view_offset_of_a_size_expression_is_valid_python(target: str) -> None:
    """The wrapper prints every size expression it holds through its printer: the offset of
    the row ``x[n % 3]`` written back into the input (a view at a symbolic offset) was printed
    with ``str`` as ``4*ModularIndexing(s0, 1, 3)``, a NameError on the first call."""
    def fn(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x.select(0, x.shape[0] % 3).fill_(v.sum() * 0.5)
        x.select(0, x.shape[0] // 2).mul_(2.0)
        return x.sum()

    example = [_randn(7, 4, device=target), _randn(2, device=target)]
    gm = symbolic_graph(fn, example, [[True, False], None])
    compiled = backend.compile_fx(gm, example)
    for n in (7, 9, 4, 17):
        x, v = _randn(n, 4, device=target), _randn(2, device=target)
        x2 = x.clone()
        torch.testing.assert_close(compiled(x, v), fn(x2, v))
        torch.testing.assert_close(x, x2)  # the rows were written as eager writes them
    assert metrics.compiled_graphs == 1 and metrics.dynamic_graphs == 1 and metrics.eager_graphs == []


# --------------------------------------------------------------------------- the check and the cache
def test_wrong_layout_runs_as_captured(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    compiled = check_sizes(fn, lambda n, d: (_randn(n, 4, device=d),), [[True, False]], target)
    other = _randn(8, 8, device=target)[:, :4]  # a stride the symbolic layout does not allow
    before = metrics.compiled_graphs
    torch.testing.assert_close(compiled(other), other + 1)
    assert metrics.compiled_graphs == before


def test_static_graph_unchanged(target: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)

    x = _randn(4, 8, device=target)
    gm = torch.fx.symbolic_trace(fn)
    compiled = backend.compile_fx(gm, [x])
    assert metrics.dynamic_graphs == 0 and "def check(args)" not in compiled.pyjit_source
    torch.testing.assert_close(compiled(x), fn(x))


def test_graph_cache_serves_other_sizes(target: str, tmp_path: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1) * 2

    with cfg.patch(cache_dir=str(tmp_path), backend_disk_cache=True):
        for n in (5, 11):  # a second compile with other example sizes: same symbolic graph
            x = _randn(n, 16, device=target)
            gm = symbolic_graph(fn, [x], [[True, False]])
            compiled = backend.compile_fx(gm, [x])
            torch.testing.assert_close(compiled(x), fn(x))
    # a graph served from the cache is still counted as symbolic (the bench's `graphs` column)
    assert metrics.compiled_graphs == 2 and metrics.graph_cache_hits == 1 and metrics.dynamic_graphs == 2


def test_graph_cache_keys_on_the_tracers_guards(target: str, tmp_path: Any) -> None:
    """The same graph code under opposite tracer guards (which the module relies on and the
    frame's guards check) must not share a cache entry: ``x[:n]`` slices ``n`` rows under
    ``n <= len(x)`` and ``len(x)`` rows under ``n > len(x)``."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x[:y.shape[0]] * 2

    with cfg.patch(cache_dir=str(tmp_path), backend_disk_cache=True):
        for xs, ys in ((10, 5), (3, 5)):  # the guard holds, then its opposite
            x, y = _randn(xs, device=target), _randn(ys, device=target)
            gm = symbolic_graph(fn, [x, y], [[True], [True]])
            fx_, fy = [n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"]
            bool(fy.shape[0] <= fx_.shape[0])  # the tracer's guard, decided on the example sizes
            compiled = backend.compile_fx(gm, [x, y])
            torch.testing.assert_close(compiled(x, y), fn(x, y))
    assert metrics.graph_cache_hits == 0 and metrics.compiled_graphs == 2


@pytest.mark.parametrize("op", ["softmax", "var", "argmax"])
def test_symbolic_row_length_picks_persistent_or_looped_per_call(target: str, op: str) -> None:
    """A reduction over a symbolic row length gets both kernels on Triton: rows up to the
    persistent limit run whole in registers (RBLOCK chosen per call), longer rows loop; the
    C++ generator has one general loop. Both branches are exercised (limit lowered to 128)."""
    def fn(x: torch.Tensor) -> Any:
        if op == "softmax":
            return torch.softmax(x, -1) * 2 + x.sum(-1, keepdim=True)
        if op == "var":
            return x.var(-1) + x.mean(-1)
        return x.argmax(-1)

    with cfg.patch(backend_persistent_reduction_max=128, backend_disk_cache=False):
        compiled = check_sizes(fn, lambda n, d: (_randn(5, n, device=d),), [[False, True]], target,
                               sizes=(40, 300, 7, 128, 129, 1000))
    if cfg.config.cpu_backend != "cpp" or target == "cuda":
        source = compiled.pyjit_source
        assert "persistent_meta(" in source and "else:" in source.split("def call(args):")[1]
