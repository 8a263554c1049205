"""What the harness measures: the kernel workloads and the per-call overhead workloads.

A :class:`Workload` builds, for a device and a size class (``small`` for CPU runs, ``large`` for
GPUs), the function or ``nn.Module`` to compile and a factory of fresh inputs. Functions are
written the way users write them (plain torch calls) and named after what they compute, so the
code pyjit generates for them is named after them too. Modules and models are in
:mod:`bench.models`. Nothing is downloaded: weights are random with a fixed seed.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from bench import models
from bench.spec import Built, Workload, module_built, randn

# --- kernel workloads: the functions -------------------------------------------------------


def pointwise_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x * y + 1.0
    b = torch.sigmoid(a) * x
    c = torch.tanh(b - y)
    return c * 0.5 + a.relu()


def gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target)


def linear_gelu_residual(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x + F.gelu(F.linear(x, weight, bias))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    n = q.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_handwritten_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # The common mixed-precision spelling: bf16 matmuls, softmax in fp32, weights cast back.
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


# --- kernel workloads: the builders ----------------------------------------------------------

_ROWS_COLS = {"small": (256, 1024), "large": (8192, 4096)}
_POINTWISE_N = {"small": 1 << 18, "large": 1 << 24}


def _build_pointwise(device: torch.device, size: str) -> Built:
    n = _POINTWISE_N[size]
    return Built(pointwise_chain, lambda g: (randn(g, device, n), randn(g, device, n)), f"2x[{n}] f32")


def _build_gelu(device: torch.device, size: str) -> Built:
    n = _POINTWISE_N[size]
    return Built(gelu, lambda g: (randn(g, device, n),), f"[{n}] f32")


def _build_softmax(device: torch.device, size: str, width: int | None = None) -> Built:
    r, c = _rows_cols(size, width)
    return Built(softmax, lambda g: (randn(g, device, r, c),), f"[{r},{c}] f32")


def _build_layer_norm(device: torch.device, size: str, width: int | None = None) -> Built:
    r, c = _rows_cols(size, width)
    return Built(
        layer_norm,
        lambda g: (randn(g, device, r, c), randn(g, device, c), randn(g, device, c)),
        f"[{r},{c}] f32",
    )


def _rows_cols(size: str, width: int | None) -> tuple[int, int]:
    """(rows, width) of a row-wise workload: the default shape, or rows of ``width`` elements
    holding as many elements in all (2^25 on "large", 2^18 on "small"), so only the row width
    changes between the variants."""
    r, c = _ROWS_COLS[size]
    return (r, c) if width is None else (r * c // width, width)


def _rows_of(build: Callable[..., Built], width: int) -> Callable[[torch.device, str], Built]:
    return lambda device, size: build(device, size, width)


def _build_rms_norm(device: torch.device, size: str) -> Built:
    r, c = _ROWS_COLS[size]
    return Built(rms_norm, lambda g: (randn(g, device, r, c), randn(g, device, c)), f"[{r},{c}] f32")


def _build_cross_entropy(device: torch.device, size: str) -> Built:
    r, c = {"small": (256, 1000), "large": (4096, 32000)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        return randn(g, device, r, c), torch.randint(0, c, (r,), generator=g).to(device)

    return Built(cross_entropy, make, f"[{r},{c}] f32")


def _build_linear_gelu_residual(device: torch.device, size: str) -> Built:
    r, c = {"small": (256, 256), "large": (8192, 2048)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        return randn(g, device, r, c), randn(g, device, c, c) / math.sqrt(c), randn(g, device, c)

    return Built(linear_gelu_residual, make, f"[{r},{c}]x[{c},{c}] f32", flops=2.0 * r * c * c)


def _build_linear_gelu_residual_bf16(device: torch.device, size: str) -> Built:
    r, c = {"small": (256, 256), "large": (8192, 2048)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        x, w, b = randn(g, device, r, c), randn(g, device, c, c) / math.sqrt(c), randn(g, device, c)
        return x.to(torch.bfloat16), w.to(torch.bfloat16), b.to(torch.bfloat16)

    return Built(linear_gelu_residual, make, f"[{r},{c}]x[{c},{c}] bf16", flops=2.0 * r * c * c)


def _build_attention(device: torch.device, size: str) -> Built:
    b, h, n, d = {"small": (2, 4, 128, 32), "large": (8, 16, 1024, 64)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        return tuple(randn(g, device, b, h, n, d) for _ in range(3))

    return Built(causal_attention, make, f"[{b},{h},{n},{d}] f32", flops=4.0 * b * h * n * n * d)


def _build_attention_bf16(device: torch.device, size: str) -> Built:
    b, h, n, d = {"small": (2, 4, 128, 32), "large": (16, 16, 512, 64)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        return tuple(randn(g, device, b, h, n, d).to(torch.bfloat16) for _ in range(3))

    return Built(attention_handwritten_bf16, make, f"[{b},{h},{n},{d}] bf16", flops=4.0 * b * h * n * n * d)


def _build_conv_bn_relu(device: torch.device, size: str) -> Built:
    b, c, hw = {"small": (4, 16, 16), "large": (32, 64, 56)}[size]
    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(c, c, 3, 1, 1), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
        torch.nn.Conv2d(c, c, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
    )
    with torch.no_grad():  # running statistics of a trained network, not the identity
        for bn in (block[1], block[4]):
            bn.running_mean.normal_(0.0, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.normal_(1.0, 0.2)
            bn.bias.normal_(0.0, 0.2)
    built = module_built(block, device, lambda g: (randn(g, device, b, c, hw, hw),), f"[{b},{c},{hw},{hw}] 2x conv3x3 f32")
    built.flops = 2 * 2.0 * b * c * c * 9 * hw * hw
    return built


def _build_inverted_residual(device: torch.device, size: str) -> Built:
    """MobileNetV2's block: 1x1 expand + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 project + BN,
    residual (eval batch norms with trained-looking statistics)."""
    b, c, hw = {"small": (4, 16, 16), "large": (32, 64, 56)}[size]
    e = 4 * c
    torch.manual_seed(0)
    block = models.InvertedResidual(c, e)
    with torch.no_grad():
        for bn in block.norms():
            bn.running_mean.normal_(0.0, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.normal_(1.0, 0.2)
            bn.bias.normal_(0.0, 0.2)
    built = module_built(block.eval(), device, lambda g: (randn(g, device, b, c, hw, hw),),
                         f"[{b},{c},{hw},{hw}] expand {e}, depthwise 3x3 f32")
    built.flops = 2.0 * b * hw * hw * (2 * c * e + 9 * e)
    return built


def _build_gpt2_block(device: torch.device, size: str) -> Built:
    b, t, d, h = {"small": (2, 64, 128, 4), "large": (8, 1024, 768, 12)}[size]
    torch.manual_seed(0)
    block = models.GPT2Block(d, h)
    return module_built(block, device, lambda g: (randn(g, device, b, t, d),), f"[{b},{t},{d}] h={h} f32")


def _build_resnet_block(device: torch.device, size: str) -> Built:
    b, c, hw = {"small": (4, 32, 16), "large": (32, 128, 56)}[size]
    torch.manual_seed(0)
    block = models.BasicBlock(c, c)
    return module_built(block, device, lambda g: (randn(g, device, b, c, hw, hw),), f"[{b},{c},{hw},{hw}] f32")


def _build_cross_entropy_128k(device: torch.device, size: str) -> Built:
    r, c = {"small": (64, 4000), "large": (1024, 128000)}[size]

    def make(g: torch.Generator) -> tuple[Any, ...]:
        return randn(g, device, r, c), torch.randint(0, c, (r,), generator=g).to(device)

    return Built(cross_entropy, make, f"[{r},{c}] f32")


def _build_gpt2_block_bf16(device: torch.device, size: str) -> Built:
    base = _build_gpt2_block(device, size)
    module = base.fn.to(torch.bfloat16)
    make = base.make_inputs
    return Built(module, lambda g: tuple(t.to(torch.bfloat16) for t in make(g)),
                 base.shape.replace(" f32", " bf16"))


def _build_mlp(device: torch.device, size: str) -> Built:
    b, d = {"small": (64, 256), "large": (4096, 4096)}[size]
    torch.manual_seed(0)
    mlp = models.MLP(d, 4 * d, d)
    return module_built(mlp, device, lambda g: (randn(g, device, b, d),), f"[{b},{d}] hidden={4 * d} f32")


def _build_mlp_autocast(device: torch.device, size: str) -> Built:
    b, d = {"small": (64, 256), "large": (4096, 4096)}[size]
    torch.manual_seed(0)
    mlp = models.AutocastMLP(d, 4 * d, d)
    return module_built(mlp, device, lambda g: (randn(g, device, b, d),),
                        f"[{b},{d}] hidden={4 * d} fp32 weights, autocast bf16")


KERNELS: tuple[Workload, ...] = (
    Workload("pointwise_chain", "kernels", _build_pointwise, "mul/add/sigmoid/tanh/relu chain of 2 inputs",
             memory_bound=True, quick=True),
    Workload("gelu", "kernels", _build_gelu, "F.gelu (erf)", memory_bound=True),
    Workload("softmax", "kernels", _build_softmax, "softmax over the last dim", memory_bound=True, quick=True),
    Workload("layer_norm", "kernels", _build_layer_norm, "F.layer_norm with affine", memory_bound=True, quick=True,
             atol=1e-4, rtol=1e-4),
    Workload("rms_norm", "kernels", _build_rms_norm, "x * rsqrt(mean(x^2)+eps) * w", memory_bound=True),
    Workload("softmax_256", "kernels", _rows_of(_build_softmax, 256), "softmax over rows of 256", memory_bound=True),
    Workload("softmax_1024", "kernels", _rows_of(_build_softmax, 1024), "softmax over rows of 1024",
             memory_bound=True),
    Workload("layer_norm_256", "kernels", _rows_of(_build_layer_norm, 256), "F.layer_norm over rows of 256",
             memory_bound=True, atol=1e-4, rtol=1e-4),
    Workload("layer_norm_1024", "kernels", _rows_of(_build_layer_norm, 1024), "F.layer_norm over rows of 1024",
             memory_bound=True, atol=1e-4, rtol=1e-4),
    Workload("cross_entropy", "kernels", _build_cross_entropy, "F.cross_entropy, mean reduction", memory_bound=True),
    Workload("cross_entropy_128k", "kernels", _build_cross_entropy_128k,
             "F.cross_entropy over a 128000-wide vocabulary", memory_bound=True),
    Workload("linear_gelu_residual", "kernels", _build_linear_gelu_residual, "x + gelu(linear(x))",
             atol=1e-3, rtol=1e-3),
    Workload("linear_gelu_residual_bf16", "kernels", _build_linear_gelu_residual_bf16,
             "x + gelu(linear(x)) in bf16 (matmul template with fused epilogue on CUDA)", atol=3e-2, rtol=3e-2),
    Workload("attention", "kernels", _build_attention, "causal attention, explicit softmax", atol=1e-3, rtol=1e-3),
    Workload("attention_handwritten_bf16", "kernels", _build_attention_bf16,
             "softmax(q@kT/sqrt(d)) @ v in bf16, fp32 softmax (rewritten to fused SDPA)", atol=2e-2, rtol=2e-2),
    Workload("conv_bn_relu_block", "kernels", _build_conv_bn_relu,
             "2x (conv3x3 + eval BatchNorm + ReLU) (BN folded into the conv)",
             # cuDNN convolutions run in TF32 by default on CUDA: eager itself is ~8e-4 off fp64 here.
             atol=3e-3, rtol=3e-3),
    Workload("gpt2_block", "kernels", _build_gpt2_block, "GPT-2 style pre-LN block", atol=1e-3, rtol=1e-3),
    Workload("gpt2_block_bf16", "kernels", _build_gpt2_block_bf16, "gpt2_block in bf16", atol=5e-2, rtol=5e-2),
    Workload("resnet_block", "kernels", _build_resnet_block, "ResNet basic block (eval BN)", atol=1e-3, rtol=1e-3),
    Workload("conv_bn_relu_block_cl", "kernels", models.channels_last(_build_conv_bn_relu),
             "conv_bn_relu_block with module and input in channels_last", atol=3e-3, rtol=3e-3),
    Workload("resnet_block_cl", "kernels", models.channels_last(_build_resnet_block),
             "resnet_block with module and input in channels_last", atol=1e-3, rtol=1e-3),
    Workload("inverted_residual_cl", "kernels", models.channels_last(_build_inverted_residual),
             "MobileNetV2 block (1x1, depthwise 3x3, 1x1; eval BN) in channels_last", atol=3e-3, rtol=3e-3),
    Workload("mlp", "kernels", _build_mlp, "Linear-GELU-Linear", atol=1e-3, rtol=1e-3),
    Workload("mlp_autocast_bf16", "kernels", _build_mlp_autocast,
             "Linear-GELU-Linear, fp32 weights under torch.autocast bf16 (weight casts as matmul prologues)",
             atol=5e-2, rtol=5e-2),
)


# --- overhead workloads: tiny tensors, so the call path is what is measured -----------------


def add_1(a: torch.Tensor) -> torch.Tensor:
    return a + 1.0


def add_4(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return a + b + c + d


def _sum_args(*tensors: torch.Tensor) -> torch.Tensor:
    out = tensors[0]
    for t in tensors[1:]:
        out = out + t
    return out


def add_16(
    a0: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor, a3: torch.Tensor,
    a4: torch.Tensor, a5: torch.Tensor, a6: torch.Tensor, a7: torch.Tensor,
    a8: torch.Tensor, a9: torch.Tensor, a10: torch.Tensor, a11: torch.Tensor,
    a12: torch.Tensor, a13: torch.Tensor, a14: torch.Tensor, a15: torch.Tensor,
) -> torch.Tensor:
    return _sum_args(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)


def _tiny_args(fn: Callable[..., Any], n: int) -> Callable[[torch.device, str], Built]:
    def build(device: torch.device, size: str) -> Built:
        return Built(fn, lambda g: tuple(randn(g, device, 8) for _ in range(n)), f"{n}x[8] f32")

    return build


def _build_module_20(device: torch.device, size: str) -> Built:
    torch.manual_seed(0)
    module = models.TinyStack(width=8, layers=10)  # 10 x (weight, bias) = 20 parameters
    return module_built(module, device, lambda g: (randn(g, device, 2, 8),), "[2,8], 20 params")


OVERHEAD: tuple[Workload, ...] = (
    Workload("call_1_tensor", "overhead", _tiny_args(add_1, 1), "a + 1 on 8 elements", quick=True),
    Workload("call_4_tensors", "overhead", _tiny_args(add_4, 4), "sum of 4 tensors of 8 elements", quick=True),
    Workload("call_16_tensors", "overhead", _tiny_args(add_16, 16), "sum of 16 tensors of 8 elements"),
    Workload("module_20_params", "overhead", _build_module_20, "nn.Module with 20 parameters (10 Linear 8x8)",
             quick=True, atol=1e-5, rtol=1e-5),
)


def by_name(name: str) -> Workload:
    for w in KERNELS + OVERHEAD + models.MODELS:
        if w.name == name:
            return w
    raise KeyError(f"unknown workload {name!r}")
