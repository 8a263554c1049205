"""Corpus cases, part 1: tensor arithmetic, containers, slicing/indexing and shape arithmetic.

Each ``@case(N, *inputs)`` registers the function below it: N is the expected number of
counted graph calls (rule in ``corpus.py``). Shapes are static, so ``x.shape``/``x.size()``/
``x.dim()``/``x.numel()`` are constants and produce no node.
"""
from __future__ import annotations

import collections
import dataclasses
import math

import torch
import torch.nn.functional as F

from .corpus_spec import Rand, case, category, ints, t

Pair = collections.namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Affine:
    """A user dataclass holding tensors, passed as an argument."""

    w: torch.Tensor
    b: torch.Tensor


# ----------------------------------------------------------------------------------------------
category("arithmetic")


@case(1, t(4, 8))
def add_const(x):
    return x + 1


@case(3, t(4, 8))
def const_chain(x):
    return (x + 1) * 2 - 3


@case(2, t(4, 8), t(4, 8))
def two_tensor_ops(x, y):
    return x * y + x


@case(2, t(4, 8))
def div_then_pow(x):
    return (x / 2) ** 2


@case(3, t(4, 8), t(4, 8))
def neg_and_builtin_abs(x, y):
    return -x + abs(y)


@case(1, t(4, 8))
def reflected_sub(x):
    return 1 - x


@case(3, t(4, 8))
def reflected_div(x):
    return 2.0 / (x.abs() + 1)


@case(1, t(4, 8), t(8, 3))
def matmul_operator(x, y):
    return x @ y


@case(3, ints(-20, 20, 4, 8))
def int_floordiv_mod(a):
    return (a // 3) + (a % 5)


@case(3, t(4, 8))
def compare_and_cast(x):
    return (x > 0).float() * x


@case(2, t(4, 8), t(4, 8))
def where_select(x, y):
    return torch.where(x > 0, x, y)


@case(1, t(4, 8))
def clamp_keywords(x):
    return x.clamp(min=-0.5, max=0.5)


@case(3, t(4, 8))
def torch_trig(x):
    return torch.sin(x) + torch.cos(x)


@case(3, t(4, 8))
def log_exp(x):
    return torch.log(torch.exp(x) + 1)


@case(4, t(4, 8))
def reductions(x):
    return x.sum() + x.mean(dim=1).sum()


@case(1, t(4, 8))
def softmax_last(x):
    return torch.softmax(x, dim=-1)


@case(2, t(4, 8))
def functional_acts(x):
    return F.gelu(F.relu(x))


@case(3, t(4, 8))
def inplace_on_temporary(x):
    y = x * 2
    y.add_(1)
    y.mul_(3)
    return y


@case(1, t(4, 8))
def folded_python_constant(x):
    scale = 2 ** 3 / 4
    return x * scale


@case(1, t(4, 8))
def math_on_shape(x):
    return x / math.sqrt(x.shape[-1])


@case(3, t(4, 8), t(4, 8))
def augmented_assignment(x, y):
    x = x.clone()
    x += 1
    x *= y
    return x


@case(3, t(4, 8), t(4, 8))
def logical_and(x, y):
    return (x > 0) & (y < 0)


@case(2, t(4, 8))
def to_dtype(x):
    return x.to(torch.float64) * 2


@case(2, ints(0, 10, 4, 8), t(4, 8))
def int_to_float(a, x):
    return a.float() + x


@case(4, t(4, 8))
def like_constructors(x):
    return torch.zeros_like(x) + torch.ones_like(x) * 3


@case(2, t(4, 8))
def ones_from_shape(x):
    return torch.ones(x.shape) * x


@case(2, t(4, 8))
def arange_from_size(x):
    return x + torch.arange(x.shape[-1])


@case(5, t(4, 8))
def max_with_indices(x):
    v, i = x.max(dim=1)
    return v + i.float()


@case(4, t(4, 8))
def topk_pair(x):
    vals, idx = torch.topk(x, 2)
    return vals * 2, idx


@case(5, t(4, 8))
def standardize(x):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)


@case(1, t(4, 8))
def finfo_eps(x):
    return x + torch.finfo(x.dtype).eps


@case(2, t(4, 8))
def constant_tensor(x):
    return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])


@case(3, t(4, 8), t(4, 8))
def max_min_elementwise(x, y):
    return torch.maximum(x, y) - torch.minimum(x, y)


@case(2, t(4, 8, requires_grad=True))
def detach_then_scale(x):
    return x.detach() * 2


@case(3, t(4, 8))
def cumulative(x):
    return x.cumsum(0) - x.cumprod(1)


# ----------------------------------------------------------------------------------------------
category("containers")


@case(2, t(4, 8))
def return_tuple(x):
    return x + 1, x * 2


@case(1, t(4, 8), t(4, 8))
def return_list_with_inputs(x, y):
    # x and y come back unchanged: the same objects, not copies.
    return [x, y, x + y]


@case(1, t(4, 8), t(4, 8))
def return_dict(x, y):
    return {"a": x + 1, "b": y}


@case(1, (t(4, 8), t(4, 8)))
def tuple_argument(pair):
    a, b = pair
    return a * b


@case(2, [t(4), t(4), t(4)])
def list_argument(xs):
    return xs[0] + xs[1] + xs[2]


@case(2, {"x": t(4, 8), "w": t(8), "b": t(8)})
def dict_argument(d):
    return d["x"] * d["w"] + d["b"]


@case(2, t(4, 8), t(4, 8))
def stack_built_list(x, y):
    return torch.stack([x, y, x * y])


@case(1, t(4, 8), t(2, 8))
def cat_tuple(x, y):
    return torch.cat((x, y), dim=0)


@case(3, [t(4), t(4), t(4)])
def star_unpack_and_sum(xs):
    first, *rest = xs
    # builtin sum over tensors: 0 + rest[0] + rest[1], two additions, then one more.
    return first + sum(rest)


@case(4, t(4, 8), t(4, 8))
def sum_of_bool_masks(x, y):
    # sum() starts from 0: 0 + bool tensor is int64, so "0 +" must not be dropped (bool + bool
    # stays bool); this is why builtin sum counts one addition per element.
    return sum([x > 0, y > 0])


@case(2, t(4, 8), t(4, 8))
def nested_output(x, y):
    return {"out": (x + 1, [y * 2])}


@case(2, t(4, 8), t(4, 8))
def namedtuple_output(x, y):
    return Pair(x + 1, y - 1)


@case(1, Pair(t(4, 8), t(4, 8)))
def namedtuple_argument(p):
    return p.a * p.b


@case(2, t(4, 8), Rand(lambda g: Affine(torch.randn(8, 3, generator=g), torch.randn(3, generator=g))))
def dataclass_argument(x, aff):
    return x @ aff.w + aff.b


@case(3, t(4, 8))
def fstring_keys(x):
    out = {}
    for i in range(3):
        out[f"y{i}"] = x * i
    return out


@case(5, t(4, 8))
def append_then_stack(x):
    outs = []
    for i in range(4):
        outs.append(x + i)
    return torch.stack(outs)


@case(1, t(4, 8), t(4, 8))
def tuple_concat(x, y):
    parts = (x,) + (y,)
    return torch.cat(parts)


@case(3, [t(4), t(4), t(4)])
def list_comprehension(xs):
    return [v * 2 for v in xs]


@case(2, {"p": t(4), "q": t(4)})
def dict_comprehension(d):
    return {k: v + 1 for k, v in d.items()}


@case(1, [t(4), t(4), t(4)])
def python_list_slice(xs):
    return torch.cat(xs[1:])


@case(1, [t(4), t(5), t(6)])
def reversed_list(xs):
    return torch.cat(list(reversed(xs)))


@case(1, t(4, 8), t(4, 8))
def swap_unpack(a, b):
    a, b = b, a
    return a - b


@case(1, {"x": t(4, 8)})
def dict_get_default(d):
    return d.get("scale", 2.0) * d["x"]


@case(1, [t(4), t(4), t(4)])
def len_of_list(xs):
    return xs[0] * len(xs)


@case(1, [t(4), t(4), t(4)])
def negative_list_index(xs):
    return xs[-1] - xs[0]


# ----------------------------------------------------------------------------------------------
category("indexing")


@case(1, t(4, 8))
def index_int(x):
    return x[0]


@case(1, t(4, 8))
def slice_columns(x):
    return x[:, 1:3]


@case(1, t(4, 8))
def ellipsis_step(x):
    return x[..., ::2]


@case(1, t(4, 8))
def none_and_int(x):
    return x[None, :, 0]


@case(2, t(4, 8))
def slice_then_add(x):
    return x[1:-1, :] + 1


@case(1, t(4, 8), ints(0, 4, 3))
def index_with_tensor(x, idx):
    return x[idx]


@case(2, t(4, 8))
def masked_fill_negative(x):
    return x.masked_fill(x < 0, 0.0)


@case(2, t(4, 8))
def setitem_on_clone(x):
    y = x.clone()
    y[:, 0] = 0.0
    return y


@case(3, t(4, 8))
def setitem_tensor_value(x):
    y = torch.zeros(4, 8)
    y[1:3] = x[1:3]
    return y


@case(1, t(4, 8), ints(0, 8, 4, 2))
def gather_dim1(x, idx):
    return torch.gather(x, 1, idx)


@case(1, t(4, 8))
def narrow_cols(x):
    return x.narrow(1, 2, 3)


@case(4, t(4, 8))
def split_pair(x):
    a, b = x.split(4, dim=1)
    return a * b


@case(8, t(4, 8))
def unbind_rows(x):
    r0, r1, r2, r3 = x.unbind(0)
    return r0 * r1 + r2 * r3


@case(4, t(4, 8))
def chunk_and_swap(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([b, a], -1)


@case(1, t(4, 8))
def last_column(x):
    return x[:, -1]


@case(1, t(4, 8))
def list_index_constant(x):
    return x[[0, 2]]


@case(3, t(4, 8), t(5))
def outer_by_broadcast(x, y):
    return x[..., None] * y[None, ...]


@case(3, t(6, 6))
def triangles(x):
    return torch.tril(x) + x.triu(1)


# ----------------------------------------------------------------------------------------------
category("shapes")


@case(1, t(4, 8))
def view_from_unpacked_shape(x):
    b, n = x.shape
    return x.view(b * n)


@case(1, t(2, 3, 4))
def reshape_with_size(x):
    return x.reshape(x.size(0), -1)


@case(1, t(2, 3, 4))
def flatten_from_1(x):
    return x.flatten(1)


@case(1, t(2, 3, 4))
def permute_reversed_dims(x):
    return x.permute(*reversed(range(x.ndim)))


@case(2, t(4, 8))
def transpose_contiguous(x):
    return x.transpose(0, 1).contiguous()


@case(2, t(4, 8))
def transpose_property(x):
    return x.T @ x


@case(2, t(4, 8))
def unsqueeze_expand(x):
    return x.unsqueeze(0).expand(3, *x.shape)


@case(3, t(4, 8))
def halves_by_size(x):
    h = x.shape[-1] // 2
    return x[..., :h] * x[..., h:]


@case(2, t(4, 8))
def divide_by_numel(x):
    return x.view(-1) / x.numel()


@case(2, t(4, 8))
def pad_with_new_zeros(x):
    return torch.cat([x, x.new_zeros(x.shape[0], 2)], dim=1)


@case(1, t(4, 8), t(4, 8))
def branch_on_shape_equality(x, y):
    if x.shape == y.shape:
        return x + y
    return x - y.sum()


@case(2, t(3, 4, 8))
def branch_on_dim(x):
    if x.dim() == 3:
        x = x.mean(0)
    return x * 2


@case(1, t(3, 8))
def size_tuple_arithmetic(x):
    shape = x.shape[:-1] + (2, 4)
    return x.view(shape)


@case(1, t(3, 4))
def math_prod_of_shape(x):
    n = math.prod(x.shape)
    return x.reshape(n)


@case(3, t(4, 8))
def dtype_device_from_input(x):
    return torch.zeros(3, dtype=x.dtype, device=x.device) + x[0, :3]


@case(2, t(1, 8), t(4, 8))
def broadcast_to_other(x, y):
    return x.broadcast_to(y.shape) + y


@case(1, t(4, 8), t(8, 3))
def einsum_matmul(x, y):
    return torch.einsum("ij,jk->ik", x, y)


@case(1, t(4, 8))
def size_call_index(x):
    return x.size()[1] * x


@case(2, t(4, 8))
def is_floating_point_branch(x):
    if x.is_floating_point():
        x = x * 0.5
    return x + 1


@case(1, t(4, 8))
def device_type_branch(x):
    if x.device.type == "cpu" and not x.is_cuda:
        return x - 1
    return x + 1


@case(1, t(4, 8, requires_grad=True))
def requires_grad_branch(x):
    if x.requires_grad:
        return x * 3
    return x


# ----------------------------------------------------------------------------------------------
category("dtypes_and_layouts")


@case(2, t(4, 8, dtype=torch.float16))
def float16_ops(x):
    return x * 2 + 1


@case(2, t(4, 8, dtype=torch.bfloat16), t(8, 3, dtype=torch.bfloat16))
def bfloat16_matmul_float(x, w):
    return (x @ w).float()


@case(3, Rand(lambda g: torch.randint(-5, 5, (4, 8), generator=g, dtype=torch.int32)))
def int32_ops(a):
    return (a * 3) // 2 - a


@case(3, Rand(lambda g: torch.rand(4, 8, generator=g) > 0.3))
def bool_tensor_ops(m):
    return (m & ~m).sum()


@case(2, t(), t(4, 8))
def zero_dim_tensor(s, x):
    return x * s + s


@case(2, t(0, 8))
def empty_tensor(x):
    return x.sum(0) + 1


@case(2, Rand(lambda g: torch.randn(8, 4, generator=g).t()))
def transposed_input(x):
    return x.contiguous().view(-1)


@case(2, Rand(lambda g: torch.randn(4, 16, generator=g)[:, ::2]))
def strided_input(x):
    return x * 2 + x.stride()[0]


@case(1, Rand(lambda g: torch.nn.Parameter(torch.randn(4, generator=g))))
def parameter_argument(p):
    return p * 2


@case(1, Rand(lambda g: torch.randn(2, 3, 4, generator=g).permute(2, 0, 1)))
def permuted_input_reduction(x):
    return x.sum(dim=(1, 2))
