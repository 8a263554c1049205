"""Corpus cases, part 4: Python language features around tensor code (assert, walrus, match,
chained comparisons, nested unpacking, dict merging, slice objects, iteration over tensors and
sizes, list methods on local lists, builtins on constants), more tensor methods, and autocast.

Each ``@case(N, *inputs)`` registers the function below it; N = expected counted graph calls.
"""
from __future__ import annotations

import collections.abc
import functools
import itertools
import math
import operator

import torch
import torch.nn.functional as F

from .corpus_spec import built_case, case, category, ints, t

category("python_features")


@case(1, t(4, 8))
def assert_on_shape(x):
    assert x.dim() == 2, f"expected 2-D input, got {x.dim()}-D"
    return x * 2


@case(2, t(4, 8))
def walrus_on_constant(x):
    if (n := x.shape[-1]) > 4:
        x = x[:, : n // 2]
    return x + n


@case(1, t(4, 8))
def match_on_string(x, mode="max"):
    match mode:
        case "sum":
            return x.sum()
        case "max":
            return x.amax(-1)
        case _:
            return x


@case(1, t(4, 8), note="structural pattern matching: MATCH_SEQUENCE and friends")
def match_on_shape_tuple(x):
    match tuple(x.shape):
        case (b, n) if n % 2 == 0:
            return x.view(b, 2, n // 2)
        case _:
            return x


@case(1, t(4, 8))
def chained_comparison(x):
    if 0 < x.shape[0] <= 4 < x.shape[1]:
        return x - 1
    return x


@case(2, (t(4), (t(4), t(4))))
def nested_unpacking(packed):
    a, (b, c) = packed
    return a * b - c


@case(2, {"a": t(4)}, {"b": t(4)})
def dict_merge(d1, d2):
    merged = {**d1, **d2, "c": 3}
    return merged["a"] + merged["b"] * merged["c"]


@case(1, t(4, 8))
def slice_object(x):
    s = slice(1, 3)
    return x[s]


@case(4, t(4, 8))
def iterate_over_tensor(x):
    rows = []
    for row in x:
        rows.append(row)
    return rows


@case(1, t(2, 3, 4))
def iterate_over_size(x):
    total = 1
    for s in x.shape:
        total *= s
    return x.reshape(total)


@case(2, [t(4), t(4)], [t(4)])
def list_methods(xs, ys):
    out = list(xs)
    out.extend(ys)
    out.insert(0, out.pop())
    out.reverse()
    return torch.stack(out) * len(out)


@case(1, t(4, 8))
def builtins_on_sizes(x):
    q, r = divmod(x.shape[1], 3)
    k = round(x.shape[0] / 3) + pow(2, 2) + math.ceil(2.5) + max(x.shape)
    return x * (q + r + k)


@case(2, t(4, 8))
def ternary_and_in(x):
    scale = 2.0 if "scale" in {"scale": 1, "shift": 2} else 1.0
    x = x * scale if x.shape[0] in (2, 4) else x
    return x + ("a" in "abc")


@case(1, [t(4), t(4)])
def isinstance_abc(xs):
    if isinstance(xs, collections.abc.Sequence) and not isinstance(xs, str):
        return torch.cat(xs)
    return xs


@case(4, t(4, 8))
def enumerate_start_zip3(x):
    parts = x.split(4, dim=1)
    scales = (1.0, 2.0)
    names = ("lo", "hi")
    out = {}
    for i, (p, s, n) in enumerate(zip(parts, scales, names), start=1):
        out[f"{n}{i}"] = p if s == 1.0 else p * s
    return out["lo1"], out["hi2"]


@case(1, t(4, 8))
def dict_from_zip(x):
    cfg = dict(zip(("alpha", "beta"), (0.5, 2.0)))
    return x * (cfg["alpha"] + cfg["beta"])


@case(1, t(4, 8))
def string_ops(x):
    name = "_".join(["layer", str(x.shape[0])]).upper()
    fmt = "%s:%d" % ("n", 3)
    if name == "LAYER_4" and fmt.endswith("3"):
        return x / 4
    return x


@case(1, t(4, 8))
def delete_local(x):
    tmp = x.shape[0]
    del tmp
    return x + 2


@case(1, t(4, 8))
def len_of_tensor(x):
    return x[: len(x) // 2]


@case(1, t(4, 8))
def set_ops_on_constants(x):
    axes = {0, 1} - {0}
    return x.sum(dim=tuple(sorted(axes)))


@case(1, t(4, 8))
def star_call_of_list(x):
    dims = [1, 0]
    return x.permute(*dims)


@case(1, t(4, 8))
def layout_and_element_size(x):
    if x.layout == torch.strided and x.element_size() == 4 and x.is_contiguous():
        return x * 0.5
    return x


# ----------------------------------------------------------------------------------------------
category("tensor_methods")


@case(2, t(4, 8), t(4, 8, dtype=torch.float64))
def type_as_other(x, y):
    return x.type_as(y) + y


@case(2, t(4, 8))
def new_ones_like_shape(x):
    return x.new_ones(x.shape) - x


@case(3, t(4, 8), ints(0, 8, 4, 1))
def scatter_inplace_on_zeros(x, idx):
    out = torch.zeros_like(x)
    out.scatter_(1, idx, 1.0)
    return out * x


@case(3, t(5, 3), ints(0, 5, 4))
def index_add_inplace(src, idx):
    acc = torch.zeros(5, 3)
    acc.index_add_(0, idx, src[:4])
    return acc


@case(3, t(4, 8))
def masked_fill_inplace(x):
    y = x.clone()
    y.masked_fill_(y > 1, 1.0)
    return y


@case(3, t(4, 8))
def repeat_and_interleave(x):
    return x.repeat(2, 1) + x.repeat_interleave(2, dim=0)


@case(3, t(4, 8))
def roll_and_flip(x):
    return x.roll(1, dims=1) - x.flip(0)


@case(1, t(4, 8), t(5, 8))
def cdist_pairwise(a, b):
    return torch.cdist(a, b)


@case(1, t(4, 8))
def linalg_norm(x):
    return torch.linalg.vector_norm(x, dim=-1)


@case(3, t(4, 8))
def nan_to_num_and_square(x):
    return torch.nan_to_num(x.log()).square()


@case(2, t(4, 8))
def clamp_min_max(x):
    return x.clamp_min(-0.1).clamp_max(0.1)


@case(2, ints(0, 10, 4, 3), t(10, 8))
def functional_embedding(idx, table):
    return F.embedding(idx, table).sum(1)


@case(5, t(2, 4, 8))
def amax_logsumexp(x):
    return x.amax(-1) - torch.logsumexp(x, -1) + x.var(-1)


@case(3, t(4, 8))
def sort_values_and_indices(x):
    v, i = x.sort(dim=-1)
    return v, i


# ----------------------------------------------------------------------------------------------
category("autocast")


@case(2, t(4, 8), t(8, 3), note="autocast regions: beyond no_grad, common in real code")
def autocast_bfloat16_matmul(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y.float()


@case(3, t(4, 8), t(8, 3), note="autocast regions: beyond no_grad, common in real code")
def autocast_disabled_inside(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = x @ w
    return a, b + 1


@case(1, t(4, 8, requires_grad=True))
def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y


# ----------------------------------------------------------------------------------------------
category("version_specific_bytecode")


class _ScaledLinear(torch.nn.Linear):
    """super().forward: LOAD_SUPER_ATTR on 3.12+, the __class__ cell on 3.11."""

    def forward(self, x):
        return super().forward(x) * 2


@built_case(2, t(4, 8))
def super_forward_in_subclass():
    return _ScaledLinear(8, 4)


@case(2, t(4, 8))
def unary_positive(x):
    # CALL_INTRINSIC_1(UNARY_POSITIVE) on 3.12+, UNARY_POSITIVE on 3.11
    return +x * 2


@case(1, [t(4), t(4)], (t(4),))
def star_literals(xs, ys):
    # LIST_EXTEND / BUILD_LIST from starred items
    return torch.cat([*xs, *ys])


@case(1, t(4, 8))
def dict_unpack_into_call(x):
    return torch.nn.functional.layer_norm(x, **{"normalized_shape": (8,)})


@case(1, t(4, 8))
def comprehension_shadowing_local(x):
    # 3.12 inlines comprehensions (LOAD_FAST_AND_CLEAR): the outer i must survive
    i = 3
    sizes = [i * 2 for i in range(2)]
    return x * (i + sum(sizes))


@case(1, t(4, 8))
def returns_constant_none_branch(x):
    y = x + 1
    if x.dim() == 3:
        return None  # RETURN_CONST on 3.12+, never taken here
    return y


# ----------------------------------------------------------------------------------------------
category("stdlib_on_constants")


@case(2, t(2, 3, 4))
def operator_and_reduce(x):
    numel = functools.reduce(operator.mul, x.shape, 1)
    return operator.mul(operator.add(x, 1), numel)


@case(2, t(4, 8))
def device_and_dtype_objects(x):
    dev = torch.device("cpu")
    y = x.to(device=dev, dtype=torch.float64)
    return y * (dev.type == "cpu")


@case(1, t(4, 8), note="itertools on constants: beyond the common builtins, common in real code")
def itertools_product_on_constants(x):
    pairs = list(itertools.product(range(2), range(3)))
    return x * len(pairs)


@case(1, t(4, 8))
def torch_environment_queries(x):
    # Same answer on the CPU machine and the GPU machine: only a constant depends on CUDA.
    scale = 2.0 if torch.cuda.is_available() else 3.0
    if torch.is_tensor(x) and torch.is_floating_point(x) and not torch.are_deterministic_algorithms_enabled():
        return x * scale
    return x
