"""Corpus cases, part 2: loops, inlined helpers, closures, methods of user objects, no_grad
regions, isinstance/hasattr checks and f-strings on constants, and common model snippets.

Each ``@case(N, *inputs)`` registers the function below it; ``@built_case`` registers a
builder returning the callable (closures, bound methods). N = expected counted graph calls.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .corpus_spec import built_case, case, category, ints, mask, t

# Module-level constants and objects read by the cases (guarded by the frontend).
ACTIVATION = "relu"


class _Config:
    eps = 1e-6
    temperature = 2.0


CONFIG = _Config()

# ----------------------------------------------------------------------------------------------
category("loops")


@case(6, t(4, 8))
def range_loop(x):
    for i in range(3):
        x = x * 2 + i
    return x


@case(2, t(4, 8))
def loop_over_constant_list(x):
    for s in [0.5, 1.5]:
        x = x * s
    return x


@case(4, [t(4), t(4), t(4)])
def loop_over_tensor_list(xs):
    acc = torch.zeros_like(xs[0])
    for v in xs:
        acc = acc + v
    return acc


@case(3, [t(4), t(4)], [t(4), t(4)])
def zip_loop(xs, ws):
    out = None
    for a, b in zip(xs, ws):
        out = a * b if out is None else out + a * b
    return out


@case(7, [t(4), t(4), t(4)])
def enumerate_loop(xs):
    acc = xs[0] * 0
    for i, v in enumerate(xs):
        acc = acc + v * (i + 1)
    return acc


@case(2, {"a": t(4, 8), "b": t(4, 8)})
def dict_items_loop(d):
    out = {}
    for k, v in d.items():
        out[k] = v.sum()
    return out


@case(4, t(4, 8))
def nested_range_loops(x):
    for i in range(2):
        for j in range(2):
            x = x + i * j
    return x


@case(3, t(4, 8))
def while_constant_counter(x):
    i = 0
    while i < 3:
        x = x - 1
        i += 1
    return x


@case(3, t(4, 8))
def loop_with_break(x):
    for i in range(10):
        if i == 3:
            break
        x = x + 1
    return x


@case(2, t(4, 8))
def loop_with_continue(x):
    for i in range(4):
        if i % 2:
            continue
        x = x * 2
    return x


@case(4, {"c": t(4), "a": t(4), "b": t(4)})
def sorted_dict_keys(d):
    out = [d[k] * 2 for k in sorted(d)]
    return torch.stack(out)


@case(3, t(4, 8))
def reversed_range(x):
    for i in reversed(range(3)):
        x = x * (i + 1)
    return x


@case(4, t(4, 8))
def loop_unpacking_constant_pairs(x):
    for a, b in [(1, 2), (3, 4)]:
        x = x * a + b
    return x


@case(1, [t(4), t(4), t(4), t(4)])
def range_step_len(xs):
    out = []
    for i in range(0, len(xs), 2):
        out.append(xs[i])
    return torch.cat(out)


@case(4, [t(4), t(4), t(4)])
def map_builtin(xs):
    return torch.stack(list(map(torch.relu, xs)))


@case(1, [t(4), t(4), t(4)])
def iter_next(xs):
    it = iter(xs)
    a = next(it)
    b = next(it)
    return a - b


@case(1, t(4, 8))
def all_over_shape(x):
    if all([s > 0 for s in x.shape]):
        x = x + 1
    return x


@case(5, t(4, 8))
def min_max_on_constants(x):
    k = min(x.shape[0], 3)
    m = max(abs(-2), 1)
    return x[:k] * m + x[:k].sum()


# ----------------------------------------------------------------------------------------------
category("helpers")


def _scale(v, factor=2.0):
    return v * factor


def _affine(v, weight, bias=0.0):
    return v * weight + bias


def _sum_all(*vs):
    acc = vs[0]
    for v in vs[1:]:
        acc = acc + v
    return acc


def _apply(v, **opts):
    if opts.get("square"):
        v = v * v
    return v + opts.get("shift", 0)


def _pow_rec(v, n):
    return v if n == 0 else v * _pow_rec(v, n - 1)


def _stats(v):
    return v.mean(), v.std()


def _norm(v, *, eps):
    return v / (v.norm() + eps)


def _act(v):
    return torch.relu(v)


def _layer(v, w):
    return _act(v @ w)


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@_logged
def _twice(v):
    return v * 2


class Ops:
    factor = 3.0

    @staticmethod
    def double(v):
        return v * 2

    @classmethod
    def scaled(cls, v):
        return v * cls.factor


@case(3, t(4, 8), t(4, 8))
def helper_with_default(x, y):
    return _scale(x) + _scale(y, 3.0)


@case(2, t(4, 8), t(8))
def helper_with_keywords(x, w):
    return _affine(x, bias=1.0, weight=w)


@case(2, t(4), t(4), t(4))
def helper_star_args(x, y, z):
    return _sum_all(x, y, z)


@case(2, t(4, 8))
def helper_star_kwargs(x):
    return _apply(x, square=True, shift=1)


@case(3, t(4, 8))
def recursive_helper(x):
    return _pow_rec(x, 3)


@case(3, t(4, 8), t(4, 8))
def nested_def(x, y):
    def inner(v):
        return v.sin()

    return inner(x) + inner(y)


@case(2, t(4, 8))
def lambda_local(x):
    f = lambda v: v * 2 + 1  # noqa: E731
    return f(x)


@case(2, t(4, 8))
def partial_of_torch_and_user(x):
    clamp0 = functools.partial(torch.clamp, min=0.0)
    triple = functools.partial(_scale, factor=3.0)
    return triple(clamp0(x))


@case(4, t(4, 8))
def helper_returning_tuple(x):
    m, s = _stats(x)
    return (x - m) / s


@case(3, t(4, 8))
def helper_keyword_only(x):
    return _norm(x, eps=1e-6)


@case(2, t(4, 8), t(8, 8))
def two_level_helpers(x, w):
    return _layer(x, w)


@case(1, t(4, 8))
def wraps_decorated_helper(x):
    return _twice(x)


@case(3, t(4, 8))
def static_and_class_methods(x):
    return Ops.double(x) + Ops.scaled(x)


@case(2, t(4, 8))
def call_with_star_args_tuple(x):
    args = (x, 2.0)
    kwargs = {"bias": 1.0}
    return _affine(*args, **kwargs)


# ----------------------------------------------------------------------------------------------
category("closures")


def _make_scaler(s):
    def scaler(x):
        return x * s

    return scaler


def _make_bias_adder(bias):
    def add_bias(x):
        return x + bias

    return add_bias


def _make_composed(f, g):
    def composed(x):
        return g(f(x))

    return composed


def _make_poly(coeffs):
    def poly(x):
        acc = torch.full_like(x, coeffs[0])
        for c in coeffs[1:]:
            acc = acc * x + c
        return acc

    return poly


@built_case(1, t(4, 8))
def closure_over_float():
    return _make_scaler(3.0)


@built_case(1, t(4, 8))
def closure_over_tensor():
    return _make_bias_adder(torch.randn(8))


@built_case(2, t(4, 8))
def closure_over_functions():
    return _make_composed(torch.sin, torch.cos)


@built_case(5, t(4, 8))
def closure_over_list():
    return _make_poly([1.0, 2.0, 3.0])


@case(2, t(4, 8), t(4, 8))
def closure_created_in_frame(x, y):
    k = y * 2

    def inner(v):
        return v + k

    return inner(x)


# ----------------------------------------------------------------------------------------------
category("methods")


class Scaler:
    """A plain user class (read-only attribute access)."""

    def __init__(self, factor: float, offset: float):
        self.factor = factor
        self.offset = offset

    @property
    def gain(self) -> float:
        return self.factor * 2

    def apply(self, x):
        return x * self.factor + self.offset

    def _pre(self, x):
        return x - self.offset

    def pipeline(self, x):
        return self._pre(x) * self.gain


SCALER = Scaler(1.5, 0.25)


@built_case(2, t(4, 8))
def bound_method():
    return Scaler(2.0, 1.0).apply


@built_case(2, t(4, 8))
def method_calling_method_and_property():
    return Scaler(0.5, 0.1).pipeline


@case(4, t(4, 8))
def global_object_attribute(x):
    return x / (x.abs().max() + CONFIG.eps)


@case(2, t(4, 8))
def global_instance_method(x):
    return SCALER.apply(x)


@case(1, t(4, 8))
def property_on_global(x):
    return x * SCALER.gain


# ----------------------------------------------------------------------------------------------
category("grad_mode")


def _mean_no_grad(v):
    with torch.no_grad():
        return v.mean(0)


@torch.no_grad()
def _frozen_scale(v):
    return v * 4


@case(2, t(4, 8, requires_grad=True))
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    return y + x


@case(2, t(4, 8, requires_grad=True))
def no_grad_in_helper(x):
    return x - _mean_no_grad(x)


@case(2, t(4, 8, requires_grad=True))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * 2
    return a, b


@case(1, t(4, 8, requires_grad=True))
def set_grad_enabled_false(x):
    with torch.set_grad_enabled(False):
        return x * 2


@case(1, t(4, 8, requires_grad=True))
def branch_on_grad_mode(x):
    if torch.is_grad_enabled():
        return x * 2
    return x


@case(1, t(4, 8, requires_grad=True))
def no_grad_decorated_helper(x):
    return _frozen_scale(x)


# ----------------------------------------------------------------------------------------------
category("checks")


@case(1, t(4, 8), 2)
def isinstance_on_int_arg(x, scale):
    if isinstance(scale, (int, float)):
        x = x * scale
    return x


@case(1, t(4, 8))
def isinstance_on_tensor(x):
    if isinstance(x, torch.Tensor):
        return x + 1
    return x


@case(1, [t(4), t(4)])
def isinstance_on_list(xs):
    if isinstance(xs, (list, tuple)):
        return torch.stack(list(xs))
    return xs


@case(1, t(4, 8))
def hasattr_on_global(x):
    if hasattr(CONFIG, "eps") and not hasattr(CONFIG, "missing"):
        return x + CONFIG.eps
    return x


@case(1, t(4, 8))
def getattr_with_default(x):
    return getattr(CONFIG, "missing", 0.5) * x


@case(1, t(4, 8))
def fstring_from_shape(x):
    name = f"{x.shape[0]}x{x.shape[1]}"
    return {name: x + 1}


@case(1, t(4, 8))
def fstring_format_spec(x):
    key = f"scale_{2.5:.1f}"
    if key == "scale_2.5":
        return x * 2.5
    return x


@case(1, t(4, 8))
def str_methods_on_constants(x):
    mode = "Mean".lower()
    if mode.startswith("me") and mode == "mean":
        return x.mean()
    return x.sum()


@case(1, t(4, 8))
def type_is_tensor(x):
    if type(x) is torch.Tensor:
        return x * 2
    return x


@case(1, t(4, 8), kwargs={"mask_": None})
def optional_none(x, mask_=None):
    if mask_ is not None:
        x = x * mask_
    return x + 1


@case(2, t(4, 8), kwargs={"mask_": t(4, 8)})
def optional_given(x, mask_=None):
    if mask_ is not None:
        x = x * mask_
    return x + 1


@case(1, t(4, 8))
def global_string_membership(x):
    if ACTIVATION in ("relu", "gelu"):
        return F.relu(x)
    return x


@case(1, t(4, 8), "gelu")
def string_argument_dispatch(x, act):
    return getattr(F, act)(x)


@case(1, t(4, 8))
def int_float_bool_constructors(x):
    n = int(x.shape[0] / 3)
    f = float(n) + 0.5
    if bool(n) and tuple([n]) == (1,) and list((n,)) == [1]:
        return x * f
    return x


@case(1, t(4, 8))
def math_functions_on_constants(x):
    return x * (math.cos(0.0) + math.log(math.e) + math.floor(1.7))


# ----------------------------------------------------------------------------------------------
category("snippets")


@case(8, t(4, 8))
def gelu_tanh_formula(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


@case(6, t(4, 8), t(8))
def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@case(4, t(2, 4, 8))
def rotate_half(x):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((-x2, x1), dim=-1)


@case(1, t(4, 5), ints(0, 5, 4))
def cross_entropy_loss(logits, target):
    return F.cross_entropy(logits, target)


@case(1, t(4, 8), t(4, 8))
def mse_loss(a, b):
    return F.mse_loss(a, b)


@case(2, ints(0, 5, 6))
def one_hot_float(idx):
    return F.one_hot(idx, 5).float()


@case(3, t(4, 8), mask(4, 8))
def masked_softmax(scores, keep):
    return scores.masked_fill(~keep, float("-inf")).softmax(-1)


@case(1, t(4, 8))
def argmax_last(x):
    return x.argmax(-1)


@case(1, t(4, 8))
def normalize_rows(x):
    return F.normalize(x, dim=-1)


@case(1, t(1, 2, 4, 4))
def interpolate_nearest(x):
    return F.interpolate(x, scale_factor=2, mode="nearest")


@case(1, t(2, 3, 5))
def pad_last_dim(x):
    return F.pad(x, (1, 1))


@case(1, t(1, 2, 4, 4))
def avg_pool(x):
    return F.avg_pool2d(x, 2)


@case(1, t(2, 3, 4), t(2, 4, 5))
def batched_matmul(a, b):
    return torch.bmm(a, b)


@case(1, t(2, 2, 4, 8), t(2, 2, 4, 8), t(2, 2, 4, 8))
def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@case(8, t(2, 4, 8), t(2, 4, 8), t(2, 4, 8))
def manual_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.softmax(dim=-1)
    out = weights @ v
    return out.sum(-1) + out.mean(-1)


@case(3, t(4, 8), ints(0, 2, 4, 8))
def where_on_int_mask(x, m):
    return torch.where(m.bool(), x, torch.zeros_like(x))


@case(3, t(4, 8))
def temperature_softmax_from_global(x):
    return F.log_softmax(x / CONFIG.temperature, dim=-1).exp()


# ----------------------------------------------------------------------------------------------
category("signatures")


@case(2, t(4), t(4), t(4))
def top_level_star_args(x, *rest):
    return x * rest[0] + rest[1]


@case(1, t(4), kwargs={"scale": 2.0, "name": "a"})
def top_level_star_kwargs(x, **opts):
    return x * opts["scale"] if opts["name"] == "a" else x


@case(1, t(4), kwargs={"bias": t(4)})
def top_level_keyword_only(x, *, bias):
    return x + bias


@case(1, t(4))
def top_level_defaults_used(x, y=None, scale=2.0):
    return x * scale if y is None else x * y


@case(1, t(4), t(4))
def top_level_positional_only(x, y, /):
    return x - y


@case(2, t(4), t(4), kwargs={"z": t(4)})
def top_level_everything(x, /, y, *args, z, **kw):
    return (x + y) * z


@case(3, t(4, 8))
def constants_in_result(x):
    return x + 1, x.shape[0], "ok", None, torch.float32, (x * 2).sum()


@case(1, t(4, 8))
def same_tensor_returned_twice(x):
    y = x + 1
    return y, [y], {"y": y}


@case(2, t(4, 8))
def input_returned_with_new_tensor(x):
    return x, x * 2, x.sum()
