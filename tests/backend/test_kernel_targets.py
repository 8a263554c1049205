"""Every op of the ops-handler protocol through every kernel target, against eager.

Each case builds a one-node loop IR (``out[i] = op(load(arg0, i), ...)``) and generates its
kernel directly with each target's generator: Triton (run by Triton's interpreter on CPU
tensors) and C++ (compiled and called through ctypes). Nothing else of the pipeline is
involved, so a wrong or missing entry of a target's op table fails here by name.
"""
from __future__ import annotations

import math
import typing
from typing import Any, Callable

import pytest
import torch

from pyjit import config as cfg
from pyjit.backend.codegen import cpp_ops, triton_ops
from pyjit.backend.codegen.target import CppTarget, TritonTarget, kernel_target
from pyjit.backend.ir import ComputedBuffer, InputBuffer, Layout, Pointwise, Reduction
from pyjit.backend.ops_handler import BinaryOp, ReductionType, UnaryOp
from pyjit.backend.scheduler import FusedGroup, SchedulerNode

CPU = torch.device("cpu")
N = 67  # not a multiple of any block or vector width: tails are exercised
TARGETS = ["triton", "cpp"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Any) -> Any:
    with cfg.patch(cache_dir=str(tmp_path / "cache"), cpp_fast_compile=True):
        yield


def _group(inputs: list[torch.Tensor], out_dtype: torch.dtype, body: Callable[..., Any], rnumel: int = 0,
           rtype: ReductionType = "sum", pass_index: bool = False) -> tuple[FusedGroup, dict[str, torch.dtype]]:
    bufs = [InputBuffer(f"arg{i}_1", Layout.of(t)) for i, t in enumerate(inputs)]
    if rnumel:
        def red(ops: Any, index: Any, rindex: Any) -> Any:
            return body(ops, *[b.make_loader()(ops, [index[0], rindex[0]]) for b in bufs])
        rows = inputs[0].shape[0]
        data: Any = Reduction(CPU, out_dtype, [rows], inner_fn=red, reduction_ranges=[rnumel], reduction_type=rtype,
                              src_dtype=inputs[0].dtype)
        layout = Layout.contiguous(CPU, out_dtype, [rows])
    else:
        def pw(ops: Any, index: Any) -> Any:
            values = [b.make_loader()(ops, index) for b in bufs]
            return body(ops, index, *values) if pass_index else body(ops, *values)
        data = Pointwise(CPU, out_dtype, list(inputs[0].shape), inner_fn=pw)
        layout = Layout.contiguous(CPU, out_dtype, list(inputs[0].shape))
    node = SchedulerNode(ComputedBuffer("buf0", layout, data), 0)
    dtypes = {b.name: b.layout.dtype for b in bufs}
    dtypes["buf0"] = out_dtype
    return FusedGroup([node], node.group), dtypes


def run_on(target: str, inputs: list[torch.Tensor], out_dtype: torch.dtype, body: Callable[..., Any],
           rnumel: int = 0, rtype: ReductionType = "sum", pass_index: bool = False) -> torch.Tensor:
    """``body(ops, *loaded inputs)`` (``body(ops, index, ...)`` with ``pass_index``) computed by
    ``target``'s kernel for every element (or, with ``rnumel``, reduced over each row of the 2-D
    inputs)."""
    group, dtypes = _group(inputs, out_dtype, body, rnumel, rtype, pass_index)
    out = torch.empty(group.group[0], dtype=out_dtype)
    tensors = {f"arg{i}_1": t for i, t in enumerate(inputs)} | {"buf0": out}
    if target == "cpp":
        from pyjit.backend.codegen.cpp import generate_cpp_kernel, translation_unit
        from pyjit.runtime import cpp_build
        if cpp_build.compiler() is None:
            pytest.skip("no C++ compiler")
        src = generate_cpp_kernel(group, 0, set(), dtypes, {})
        fn = cpp_build.load_kernels(translation_unit([src]), {src.name: len(src.arg_names)})[src.name]
        fn(*[tensors[a].data_ptr() for a in src.arg_names])
        return out
    pytest.importorskip("triton")
    from pyjit.backend.codegen.triton import generate_kernel
    from pyjit.runtime import cache
    from pyjit.runtime.launcher import load_module
    ks = generate_kernel(group, 0, set(), dtypes, 1024, {})
    source = ("import torch\nimport triton\nimport triton.language as tl\n\n"
              "from pyjit.runtime.triton_compat import libdevice\n\n\n" + ks.source)
    key, path, _ = cache.write_module(source)
    module = load_module(path, key, interpret=True)
    sizes = [ks.xnumel] + ([ks.rnumel] if ks.rnumel != 1 else [])
    getattr(module, ks.name)[ks.grid](*[tensors[a] for a in ks.arg_names], *sizes, **ks.meta)
    return out


def _between(low: float, high: float) -> Callable[[], torch.Tensor]:
    return lambda: torch.linspace(low, high, N)


_SPECIAL = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 2.5, -2.5, 0.5, -0.5, 1.5])


def _with_special(low: float = -4.0, high: float = 4.0) -> Callable[[], torch.Tensor]:
    return lambda: torch.cat([_SPECIAL, torch.linspace(low, high, N - len(_SPECIAL))])


# op -> (eager function, float input maker, also on int32?)
UNARY_CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[], torch.Tensor], bool]] = {
    "abs": (torch.abs, _with_special(), True),
    "neg": (torch.neg, _with_special(), True),
    "exp": (torch.exp, _between(-20, 20), False),
    "exp2": (torch.exp2, _between(-20, 20), False),
    "expm1": (torch.expm1, _between(-5, 5), False),
    "log": (torch.log, _between(1e-3, 100), False),
    "log2": (torch.log2, _between(1e-3, 100), False),
    "log10": (torch.log10, _between(1e-3, 100), False),
    "log1p": (torch.log1p, _between(-0.9, 10), False),
    "sqrt": (torch.sqrt, _between(0, 100), False),
    "rsqrt": (torch.rsqrt, _between(0.01, 100), False),
    "sin": (torch.sin, _between(-6, 6), False),
    "cos": (torch.cos, _between(-6, 6), False),
    "tan": (torch.tan, _between(-1.4, 1.4), False),
    "asin": (torch.asin, _between(-0.99, 0.99), False),
    "acos": (torch.acos, _between(-0.99, 0.99), False),
    "atan": (torch.atan, _between(-10, 10), False),
    "sinh": (torch.sinh, _between(-5, 5), False),
    "cosh": (torch.cosh, _between(-5, 5), False),
    "tanh": (torch.tanh, _between(-10, 10), False),
    "asinh": (torch.asinh, _between(-10, 10), False),
    "acosh": (torch.acosh, _between(1, 10), False),
    "atanh": (torch.atanh, _between(-0.99, 0.99), False),
    "erf": (torch.erf, _between(-4, 4), False),
    "erfc": (torch.erfc, _between(-4, 4), False),
    "erfinv": (torch.erfinv, _between(-0.99, 0.99), False),
    "sigmoid": (torch.sigmoid, _between(-20, 20), False),
    "floor": (torch.floor, _with_special(), True),
    "ceil": (torch.ceil, _with_special(), True),
    "trunc": (torch.trunc, _with_special(), True),
    "round": (torch.round, _with_special(), True),
    "sign": (torch.sign, _with_special(), True),
    "reciprocal": (torch.reciprocal, _between(0.1, 10), False),
    "logical_not": (torch.logical_not, _with_special(), True),
    "bitwise_not": (torch.bitwise_not, _with_special(), True),  # int32 and bool only
    "isnan": (torch.isnan, _with_special(), True),
    "isinf": (torch.isinf, _with_special(), True),
    "signbit": (torch.signbit, _with_special(), True),
    "lgamma": (torch.lgamma, _between(0.1, 10), False),
    "square": (torch.square, _with_special(), True),
}


# op -> (eager function, float inputs, also on int32?)
BINARY_CASES: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str, bool]] = {
    "add": (torch.add, "any", True),
    "sub": (torch.sub, "any", True),
    "mul": (torch.mul, "any", True),
    "truediv": (torch.true_divide, "nonzero", False),
    "floordiv": (torch.floor_divide, "nonzero", True),
    "truncdiv": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), "nonzero", True),
    "mod": (torch.remainder, "nonzero", True),
    "remainder": (torch.remainder, "nonzero", True),
    "fmod": (torch.fmod, "nonzero", True),
    "pow": (torch.pow, "positive", False),
    "maximum": (torch.maximum, "nan", True),
    "minimum": (torch.minimum, "nan", True),
    "atan2": (torch.atan2, "any", False),
    "eq": (torch.eq, "ties", True),
    "ne": (torch.ne, "ties", True),
    "lt": (torch.lt, "ties", True),
    "le": (torch.le, "ties", True),
    "gt": (torch.gt, "ties", True),
    "ge": (torch.ge, "ties", True),
    "logical_and": (torch.logical_and, "ties", True),
    "logical_or": (torch.logical_or, "ties", True),
    "logical_xor": (torch.logical_xor, "ties", True),
    "bitwise_and": (torch.bitwise_and, "int", True),
    "bitwise_or": (torch.bitwise_or, "int", True),
    "bitwise_xor": (torch.bitwise_xor, "int", True),
    "lshift": (torch.bitwise_left_shift, "shift", True),
    "rshift": (torch.bitwise_right_shift, "shift", True),
    "copysign": (torch.copysign, "any", False),
    "hypot": (torch.hypot, "any", False),
}


def _binary_inputs(kind: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.int32:
        a = torch.randint(-20, 20, (N,), generator=g, dtype=dtype)
        b = torch.randint(-7, 8, (N,), generator=g, dtype=dtype)
        if kind == "shift":
            return a, torch.randint(0, 5, (N,), generator=g, dtype=dtype)
        if kind == "nonzero":
            b = torch.where(b == 0, torch.ones_like(b), b)
        if kind == "ties":
            b[::3] = a[::3]
        return a, b
    a, b = torch.randn(N, generator=g) * 3, torch.randn(N, generator=g) * 3
    if kind == "nonzero":
        b = torch.where(b.abs() < 0.1, torch.full_like(b, 0.5), b)
        a[:4] = torch.tensor([7.0, -7.0, 7.0, -7.0])  # exact quotients: the sign rules of mod/floordiv
        b[:4] = torch.tensor([2.0, 2.0, -2.0, -2.0])
    elif kind == "positive":
        a = a.abs() + 0.1
    elif kind == "nan":
        a[0], b[1] = math.nan, math.nan
    elif kind == "ties":
        b[::3] = a[::3]
        a[1] = 0.0
    return a, b


def _assert_matches(actual: torch.Tensor, expected: torch.Tensor, op: str, rtol: float = 2e-5,
                    atol: float = 1e-5) -> None:
    assert actual.dtype == expected.dtype, (op, actual.dtype, expected.dtype)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{op}: {m}")


_LOOSE = {"lgamma": 1e-4, "tan": 1e-4, "erfinv": 1e-4, "expm1": 1e-4, "acosh": 1e-4, "atanh": 1e-4, "erfc": 1e-4,
          "pow": 1e-4, "sinh": 1e-4, "cosh": 1e-4, "exp": 1e-4, "exp2": 1e-4}


def test_every_target_has_every_pointwise_op() -> None:
    for tables in (triton_ops, cpp_ops):
        assert set(tables.UNARY) == set(typing.get_args(UnaryOp)), tables.__name__
        assert set(tables.BINARY) == set(typing.get_args(BinaryOp)), tables.__name__
    assert set(UNARY_CASES) == set(typing.get_args(UnaryOp))
    assert set(BINARY_CASES) == set(typing.get_args(BinaryOp))


def test_target_is_chosen_per_device() -> None:
    with cfg.patch(cpu_backend="cpp"):
        assert isinstance(kernel_target("cpu"), CppTarget)
        assert not kernel_target("cpu").column_split
    with cfg.patch(cpu_backend="triton_interpret"):
        assert isinstance(kernel_target("cpu"), TritonTarget) and kernel_target("cpu").interpreted
    assert isinstance(kernel_target("cuda"), TritonTarget) and not kernel_target("cuda").interpreted


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", sorted(typing.get_args(UnaryOp)))
def test_unary(target: str, op: str) -> None:
    fn, maker, on_int = UNARY_CASES[op]
    cases = [] if op == "bitwise_not" else [maker()]
    if on_int:
        cases.append(torch.arange(-N // 2, N - N // 2, dtype=torch.int32))
        if op in ("bitwise_not", "logical_not"):
            cases.append(torch.arange(N) % 3 == 0)
    for x in cases:
        expected = fn(x)
        actual = run_on(target, [x], expected.dtype,
                        lambda ops, v: ops.to_dtype(ops.unary(op, v), expected.dtype))
        _assert_matches(actual, expected, f"{op}({x.dtype})", rtol=_LOOSE.get(op, 2e-5))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", sorted(typing.get_args(BinaryOp)))
def test_binary(target: str, op: str) -> None:
    fn, kind, on_int = BINARY_CASES[op]
    dtypes = ([] if kind in ("int", "shift") else [torch.float32]) + ([torch.int32] if on_int else [])
    for dtype in dtypes:
        a, b = _binary_inputs(kind, dtype)
        expected = fn(a, b)
        actual = run_on(target, [a, b], expected.dtype,
                        lambda ops, x, y: ops.to_dtype(ops.binary(op, x, y), expected.dtype))
        _assert_matches(actual, expected, f"{op}({dtype})", rtol=_LOOSE.get(op, 2e-5))


@pytest.mark.parametrize("target", TARGETS)
def test_where_constant_index_expr_and_casts(target: str) -> None:
    x = torch.linspace(-3.7, 3.7, N)

    def body(ops: Any, index: Any, v: Any) -> Any:
        cond = ops.binary("gt", v, ops.constant(0.0, torch.float32))
        scaled = ops.binary("mul", v, ops.index_expr(index[0] * 3 + 1, torch.float32))
        return ops.where(cond, scaled, ops.to_dtype(ops.to_dtype(v, torch.int32), torch.float32))

    expected = torch.where(x > 0, x * (torch.arange(N) * 3 + 1), x.to(torch.int32).float())
    _assert_matches(run_on(target, [x], torch.float32, body, pass_index=True), expected, "where/index_expr")
    for dtype in (torch.float16, torch.bfloat16):
        y = torch.linspace(-3.3, 3.3, N) / 7
        got = run_on(target, [y], torch.float32, lambda ops, v, dt=dtype: ops.to_dtype(v, dt))
        _assert_matches(got, y.to(dtype).float(), f"to_dtype({dtype})", rtol=0, atol=0)
    got = run_on(target, [x], torch.bool, lambda ops, v: ops.to_dtype(v, torch.bool))
    _assert_matches(got, x != 0, "to_dtype(bool)")


REDUCTION_CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda x: x.sum(1),
    "max": lambda x: x.amax(1),
    "min": lambda x: x.amin(1),
    "argmax": lambda x: x.argmax(1),
    "argmin": lambda x: x.argmin(1),
    "any": lambda x: (x > 1).any(1),
    "all": lambda x: (x > -1).all(1),
    "m2": lambda x: ((x - x.mean(1, keepdim=True)) ** 2).sum(1),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rtype", sorted(REDUCTION_CASES))
@pytest.mark.parametrize("rnumel", [37, 3000])
def test_reduction(target: str, rtype: str, rnumel: int) -> None:
    x = torch.randn(5, rnumel, generator=torch.Generator().manual_seed(1))
    x[3, 7] = math.nan  # NaN propagates through max/min, wins argmax/argmin, as in eager
    expected = REDUCTION_CASES[rtype](x)
    if rtype in ("any", "all"):
        cmp, bound = ("gt", 1.0) if rtype == "any" else ("gt", -1.0)

        def body(ops: Any, v: Any) -> Any:
            return ops.binary(cmp, v, ops.constant(bound, torch.float32))
    else:
        def body(ops: Any, v: Any) -> Any:
            return v
    out_dtype = expected.dtype
    actual = run_on(target, [x], out_dtype, body, rnumel=rnumel, rtype=rtype)  # type: ignore[arg-type]
    _assert_matches(actual, expected, rtype, rtol=1e-4, atol=1e-3)


def test_prod_is_no_reduction_of_the_lowerings() -> None:
    # "prod" is in the protocol but no lowering emits it (aten.prod falls back to eager):
    # neither target implements it, and both say so instead of computing something else.
    x = torch.rand(3, 8)
    for target in TARGETS:
        with pytest.raises(NotImplementedError):
            run_on(target, [x], torch.float32, lambda ops, v: v, rnumel=8, rtype="prod")


@pytest.mark.parametrize("op", ["exp", "tanh", "erf"])
def test_cpp_vector_math_accuracy(op: str) -> None:
    # fp32 exp/tanh/erf are the prelude's vectorizable helpers, not libm: a dense sweep against
    # the float64 result, in units of the fp32 spacing there (bounds: measured, rounded up).
    x = torch.linspace(-103.0, 88.7, 400_003) if op == "exp" else torch.linspace(-9.0, 9.0, 400_003)
    got = run_on("cpp", [x], torch.float32, lambda ops, v: ops.unary(op, v)).double()
    ref = getattr(torch, op)(x.double())
    spacing = (torch.nextafter(ref.float(), torch.tensor(math.inf)) - ref.float()).double()
    normal = ref.abs() > 1.2e-38
    ulp = ((got - ref).abs() / spacing)[normal]
    bound = {"exp": 1.5, "tanh": 2.0, "erf": 3.0}[op]
    assert ulp.max().item() <= bound, (op, ulp.max().item())
