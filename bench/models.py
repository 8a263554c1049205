"""Modules the harness benchmarks, built in-process with random weights (no downloads).

Building blocks (a GPT-2 style pre-LN transformer block, a ResNet basic block, an MLP, a stack of
tiny Linear layers for the call-overhead suite) and the end-to-end models of the ``models``
suite: a GPT-2 style decoder of a few layers, a small ResNet and an MLP classifier, benchmarked
for inference, plus training steps (forward + backward, the model compiled by the backend) of the
MLP classifier and the decoder.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from bench.spec import Built, Workload, module_built, randn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        # (b, t, d) -> (b, heads, t, d/heads)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GPT2Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) with tanh-GELU."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2Decoder(nn.Module):
    """Token + position embeddings, a few blocks, final LayerNorm, tied LM head."""

    def __init__(self, vocab: int, ctx: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok.weight.t()


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu-conv-bn plus the (projected if needed) shortcut, relu."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand-bn-relu6, depthwise 3x3-bn-relu6, 1x1 project-bn, residual."""

    def __init__(self, c: int, expanded: int):
        super().__init__()
        self.expand = nn.Conv2d(c, expanded, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(expanded)
        self.depthwise = nn.Conv2d(expanded, expanded, 3, 1, 1, groups=expanded, bias=False)
        self.bn2 = nn.BatchNorm2d(expanded)
        self.project = nn.Conv2d(expanded, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def norms(self) -> list[nn.BatchNorm2d]:
        return [self.bn1, self.bn2, self.bn3]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.bn1(self.expand(x)))
        y = F.relu6(self.bn2(self.depthwise(y)))
        return x + self.bn3(self.project(y))


class SmallResNet(nn.Module):
    """A ResNet-18-shaped network shrunk to two stages of two blocks each."""

    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, out: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class AutocastMLP(nn.Module):
    """An fp32 :class:`MLP` run under ``torch.autocast`` in bf16: every call casts the fp32
    weights to bf16 before its matmuls (mixed-precision inference as AMP users write it)."""

    def __init__(self, dim: int, hidden: int, out: int):
        super().__init__()
        self.mlp = MLP(dim, hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return self.mlp(x)


class MLPClassifier(nn.Module):
    def __init__(self, dim: int, hidden: int, classes: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.net(x), dim=-1)


class TinyStack(nn.Module):
    """``layers`` Linear(width, width) layers with ReLU: 2 * layers parameters, tiny compute."""

    def __init__(self, width: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _build_gpt2(device: torch.device, size: str) -> Built:
    vocab, ctx, dim, heads, layers, b, t = {
        "small": (512, 64, 64, 4, 2, 2, 32),
        "large": (50257, 1024, 768, 12, 4, 8, 512),
    }[size]
    torch.manual_seed(0)
    model = GPT2Decoder(vocab, ctx, dim, heads, layers)

    def make(g: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randint(0, vocab, (b, t), generator=g).to(device),)

    return module_built(model, device, make, f"tokens [{b},{t}] dim={dim} layers={layers} vocab={vocab}")


def _build_resnet(device: torch.device, size: str) -> Built:
    width, b, hw = {"small": (16, 4, 32), "large": (64, 64, 64)}[size]
    torch.manual_seed(0)
    return module_built(SmallResNet(width), device, lambda g: (randn(g, device, b, 3, hw, hw),),
                        f"[{b},3,{hw},{hw}] width={width}")


def _build_mlp_classifier(device: torch.device, size: str) -> Built:
    b, dim, hidden, classes = {"small": (64, 256, 512, 10), "large": (4096, 1024, 4096, 1000)}[size]
    torch.manual_seed(0)
    return module_built(MLPClassifier(dim, hidden, classes), device, lambda g: (randn(g, device, b, dim),),
                        f"[{b},{dim}] hidden={hidden} classes={classes}")


def train_step(model: Callable[..., torch.Tensor], x: torch.Tensor, target: torch.Tensor,
               params: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Forward + loss + backward; returns the loss and every gradient (no optimizer mutation, so
    each call, and each backend, computes the same thing and can be checked against eager)."""
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return (loss.detach(), *torch.autograd.grad(loss, params))


def _training(built: Built, model: nn.Module, make_target: Callable[[torch.Generator, tuple], torch.Tensor]) -> Built:
    """Turn an inference workload into a training step: the backend compiles the model."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    make_x = built.make_inputs

    def make(g: torch.Generator) -> tuple:
        x = make_x(g)
        return (*x, make_target(g, x))

    def call(compiled: Callable[..., torch.Tensor]) -> Callable[..., tuple]:
        def step(x: torch.Tensor, target: torch.Tensor) -> tuple:
            return train_step(compiled, x, target, params)

        return step

    return Built(model, make, built.shape + ", forward+backward", call=call)


def _build_mlp_classifier_train(device: torch.device, size: str) -> Built:
    built = _build_mlp_classifier(device, size)
    classes = built.fn.net[-1].out_features
    return _training(built, built.fn, lambda g, x: torch.randint(0, classes, (x[0].shape[0],), generator=g).to(device))


def _build_gpt2_train(device: torch.device, size: str) -> Built:
    built = _build_gpt2(device, size)
    vocab = built.fn.tok.num_embeddings
    return _training(built, built.fn, lambda g, x: torch.randint(0, vocab, x[0].shape, generator=g).to(device))


def channels_last(build: Callable[[torch.device, str], Built]) -> Callable[[torch.device, str], Built]:
    """``build``'s workload with the module and every 4-d input in channels_last memory format
    (how users run convolution networks on tensor cores)."""
    def built(device: torch.device, size: str) -> Built:
        base = build(device, size)
        module = base.fn.to(memory_format=torch.channels_last)
        make = base.make_inputs

        def make_cl(g: torch.Generator) -> tuple[Any, ...]:
            return tuple(t.contiguous(memory_format=torch.channels_last)
                         if isinstance(t, torch.Tensor) and t.dim() == 4 else t for t in make(g))

        out = Built(module, make_cl, f"{base.shape} channels_last")
        out.flops = base.flops
        return out
    return built


MODELS: tuple[Workload, ...] = (
    Workload("gpt2_decoder", "models", _build_gpt2, "GPT-2 style decoder, few layers, inference",
             atol=2e-3, rtol=2e-3),
    Workload("gpt2_decoder_grad", "models", _build_gpt2,
             "GPT-2 style decoder inference with grad enabled (model.eval(); model(x) without no_grad)",
             atol=2e-3, rtol=2e-3, inference=False),
    Workload("small_resnet", "models", _build_resnet, "small ResNet (2 stages x 2 basic blocks), inference",
             atol=2e-3, rtol=2e-3),
    Workload("small_resnet_cl", "models", channels_last(_build_resnet),
             "small_resnet with module and input in channels_last", atol=2e-3, rtol=2e-3),
    Workload("mlp_classifier", "models", _build_mlp_classifier, "3-layer MLP classifier with log_softmax",
             atol=1e-3, rtol=1e-3, quick=True),
    Workload("mlp_classifier_train", "models", _build_mlp_classifier_train,
             "MLP classifier training step: forward, cross-entropy, backward (loss + all gradients)",
             atol=1e-3, rtol=1e-3, inference=False),
    Workload("gpt2_decoder_train", "models", _build_gpt2_train,
             "GPT-2 style decoder training step: forward, cross-entropy, backward (loss + all gradients)",
             atol=2e-3, rtol=2e-3, inference=False),
)
