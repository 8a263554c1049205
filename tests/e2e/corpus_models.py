"""Corpus cases, part 5: small but complete models of the kind people compile (nanoGPT-style
attention and blocks, a tiny GPT, a ResNet basic block, a ConvNeXt block, a hand-written RNN
loop, modules that walk their children or parameters by name).

Counts are given per module in comments; nn layers count as their functional calls
(see ``corpus_modules``). All modules run in eval mode unless the case says otherwise, so that
eager and jitted calls on the same instance see the same state.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .corpus_spec import built_case, category, ints, t

category("models")


class CausalSelfAttention(nn.Module):
    """23 calls: qkv linear, split + 3 getitem, 3 x (view, transpose), k.transpose, matmul, mul,
    mask getitem, == 0, masked_fill, softmax, matmul, transpose, contiguous, view, out linear."""

    def __init__(self, d: int = 16, heads: int = 4, block: int = 8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.n_head = heads
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class GPTBlock(nn.Module):
    """30 calls: ln (1) + attention (23) + add + ln (1) + mlp (3) + add."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    """66 calls: wte, arange, wpe, add, 2 blocks x 30, ln_f, lm_head."""

    def __init__(self, vocab: int = 32, d: int = 16, layers: int = 2, block: int = 8):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList([GPTBlock(d) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BasicBlock(nn.Module):
    """7 calls: conv, bn, relu, conv, bn, iadd, relu."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.downsample = None

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ConvNeXtBlock(nn.Module):
    """9 calls: depthwise conv, permute, layer_norm, linear, gelu, linear, mul gamma, permute, add."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pwconv1 = nn.Linear(c, 4 * c)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(1e-6 * torch.ones(c))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + x


class ManualRNN(nn.Module):
    """17 calls for T=3: new_zeros, 3 x (getitem, linear, linear, add, tanh), stack."""

    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(4, 8)
        self.hh = nn.Linear(8, 8)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], 8)
        outs = []
        for step in range(x.shape[1]):
            h = torch.tanh(self.ih(x[:, step]) + self.hh(h))
            outs.append(h)
        return torch.stack(outs, dim=1)


class NamedChildren(nn.Module):
    """4 calls: the four children in registration order."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.ReLU()
        self.c = nn.Linear(8, 4)
        self.d = nn.Tanh()

    def forward(self, x):
        for _, child in self.named_children():
            x = child(x)
        return x


class ParamRegularized(nn.Module):
    """7 calls: linear, 2 x (pow, sum), 2 additions of builtin sum (0 + a + b)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        reg = sum([p.pow(2).sum() for p in self.parameters()])
        return self.lin(x), reg


class GetattrLayers(nn.Module):
    """3 calls: layer0..layer2 reached through getattr with f-string names."""

    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, f"layer{i}", nn.Linear(8, 8))

    def forward(self, x):
        for i in range(3):
            x = getattr(self, f"layer{i}")(x)
        return x


class TiedEmbedding(nn.Module):
    """3 calls: embedding, layer_norm, linear with the embedding's weight."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, idx):
        h = self.norm(self.emb(idx))
        return F.linear(h, self.emb.weight)


@built_case(23, t(2, 8, 16))
def causal_self_attention():
    return CausalSelfAttention().eval()


@built_case(30, t(2, 8, 16))
def gpt_block():
    return GPTBlock().eval()


@built_case(66, ints(0, 32, 2, 8))
def tiny_gpt():
    return TinyGPT().eval()


@built_case(7, t(2, 4, 6, 6))
def resnet_basic_block():
    return BasicBlock().eval()


@built_case(9, t(2, 8, 6, 6))
def convnext_block():
    return ConvNeXtBlock().eval()


@built_case(17, t(2, 3, 4))
def manual_rnn_loop():
    return ManualRNN().eval()


@built_case(4, t(3, 8))
def named_children_loop():
    return NamedChildren()


@built_case(7, t(3, 8))
def parameter_regularizer():
    return ParamRegularized()


@built_case(3, t(3, 8))
def getattr_fstring_layers():
    return GetattrLayers()


@built_case(3, ints(0, 12, 2, 5))
def tied_embedding():
    return TiedEmbedding()
