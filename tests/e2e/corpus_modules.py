"""Corpus cases, part 3: ``nn.Module`` instances (library layers and small user modules).

Modules are inlined through ``forward``, so a library layer counts as the functional call(s)
its ``forward`` makes: ``nn.Linear`` -> ``F.linear`` (1), ``nn.LayerNorm`` -> ``F.layer_norm``
(1), ``nn.Conv2d`` -> ``F.conv2d`` (1), ``nn.ReLU``/``nn.GELU`` -> 1, ``nn.Flatten`` ->
``flatten`` (1), ``nn.Identity`` -> 0. Parameters and buffers are graph inputs, never calls.
Each builder runs under a fixed seed; modules that behave differently in training are put in
eval mode where the case says so.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .corpus_spec import built_case, category, ints, t

category("modules")


class MLP(nn.Module):
    def __init__(self, d: int = 8, hidden: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class PreNormResidual(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.net = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))

    def forward(self, x):
        return x + self.net(self.norm(x))


class Stack(nn.Module):
    def __init__(self, d: int = 8, depth: int = 3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) + x
        return x


class Heads(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(d, 2), "b": nn.Linear(d, 2)})

    def forward(self, x):
        return self.heads["a"](x) + self.heads["b"](x)


class ScaleBuffer(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.register_buffer("scale", torch.arange(d, dtype=torch.float32) / d)

    def forward(self, x):
        return x * self.scale


class RawParams(nn.Module):
    def __init__(self, d_in: int = 8, d_out: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in))
        self.bias = nn.Parameter(torch.randn(d_out))

    def forward(self, x):
        return x @ self.weight.t() + self.bias


class FlagModule(nn.Module):
    def __init__(self, use_bias: bool):
        super().__init__()
        self.use_bias = use_bias
        self.w = nn.Parameter(torch.randn(8))
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):
        x = x * self.w
        if self.use_bias:
            x = x + self.b
        return x


class SelfAttention(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.d = d

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)
        return scores.softmax(-1) @ v


class EmbedProject(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 3)

    def forward(self, idx):
        return self.proj(self.emb(idx))


class TrainingBranch(nn.Module):
    def forward(self, x):
        if self.training:
            x = x * 2
        return x + 1


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 3 * 3, 5))

    def forward(self, x):
        return self.head(self.features(x))


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(self.lin(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.mlp(x))


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.blocks(x)


class HelperMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def _project(self, x, scale=1.0):
        return self.lin(x) * scale

    def forward(self, x):
        return self._project(x, scale=0.5) + self._project(x)


class NoGradStats(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            stats = x.mean(0)
        return x - stats


class SkipIdentity(nn.Module):
    def __init__(self):
        super().__init__()
        self.skip = nn.Identity()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.skip(x) + self.lin(x)


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, *, residual=None, scale: float = 1.0):
        y = self.lin(x) * scale
        if residual is not None:
            y = y + residual
        return y


class ReturnsDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 4)
        self.dec = nn.Linear(4, 8)

    def forward(self, x):
        z = self.enc(x)
        return {"latent": z, "recon": self.dec(z)}


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return a * F.silu(b)


@built_case(1, t(4, 8))
def linear():
    return nn.Linear(8, 4)


@built_case(1, t(4, 8), name="linear_no_bias")
def linear_no_bias():
    return nn.Linear(8, 4, bias=False)


@built_case(3, t(4, 8))
def sequential_mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


@built_case(1, t(4, 8))
def layer_norm():
    return nn.LayerNorm(8)


@built_case(1, t(2, 3, 8, 8))
def conv2d_padded():
    return nn.Conv2d(3, 4, 3, padding=1)


@built_case(3, t(2, 3, 8, 8))
def conv_bn_relu_eval():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()


@built_case(3, t(4, 8))
def user_mlp():
    return MLP()


@built_case(5, t(4, 8))
def pre_norm_residual():
    return PreNormResidual()


@built_case(6, t(4, 8))
def module_list_loop():
    return Stack()


@built_case(3, t(4, 8))
def module_dict_heads():
    return Heads()


@built_case(1, t(4, 8))
def buffer_use():
    return ScaleBuffer()


@built_case(3, t(4, 8))
def raw_parameters():
    return RawParams()


@built_case(2, t(4, 8))
def flag_attribute_true():
    return FlagModule(True)


@built_case(1, t(4, 8))
def flag_attribute_false():
    return FlagModule(False)


@built_case(8, t(2, 4, 8))
def self_attention():
    return SelfAttention()


@built_case(2, ints(0, 10, 4))
def embedding_projection():
    return EmbedProject()


@built_case(2, t(4, 8))
def dropout_eval():
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1)).eval()


@built_case(1, t(4, 8))
def training_flag_eval():
    return TrainingBranch().eval()


@built_case(2, t(4, 8))
def training_flag_train():
    return TrainingBranch().train()


@built_case(5, t(2, 1, 8, 8))
def small_cnn():
    return SmallCNN()


@built_case(2, t(4, 8))
def shared_submodule():
    return Shared()


@built_case(10, t(4, 8))
def nested_blocks():
    # Block: MLP (3) + add + layer_norm = 5; two blocks.
    return Tower()


@built_case(5, t(4, 8))
def module_helper_method():
    return HelperMethod()


@built_case(2, t(4, 8, requires_grad=True))
def module_no_grad_region():
    return NoGradStats()


@built_case(2, t(4, 8))
def identity_skip():
    return SkipIdentity()


@built_case(1, t(2, 4, 3, 3))
def group_norm():
    return nn.GroupNorm(2, 4)


@built_case(2, t(4, 8))
def softmax_tanh_modules():
    return nn.Sequential(nn.Tanh(), nn.Softmax(dim=-1))


@built_case(3, t(4, 8), kwargs={"residual": t(4, 8), "scale": 2.0})
def module_keyword_only_forward():
    return KwargsForward()


@built_case(2, t(4, 8))
def module_returning_dict():
    return ReturnsDict()


@built_case(6, t(4, 8))
def gated_linear_unit():
    # linear, chunk, 2 getitem, silu, mul
    return Gated()


@built_case(3, t(4, 8))
def requires_grad_params_train_mode():
    # Parameters require grad (default): the outputs must require grad too.
    return nn.Sequential(nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 2)).train()
