"""Channels-last layout for convolution graphs (``pyjit/backend/passes/layout.py``).

With ``config.layout_opt="on"`` the pass also runs on CPU, so every case runs on both CPU code
generators (``target``: Triton through its interpreter, and C++) and on CUDA where present,
against eager: values, and the strides of every output (they must equal eager's whatever the
pass did inside the graph). Structural checks read ``pyjit.backend.metrics`` and the generated
module: convolutions receive channels-last buffers and nothing transposes between them.
"""
from __future__ import annotations

import re
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.compile_fx import trace_to_aten
from pyjit.backend.passes import run_passes

from .conftest import compile_graph
from .test_aot_training import check_training


@pytest.fixture(autouse=True)
def _layout_on() -> Any:
    # No disk graph cache: a warm graph would skip the passes and their metrics.
    # cuDNN's TF32 (on by default) picks other algorithms for NHWC than for NCHW: values
    # differ from eager's at ~1e-3. The comparison is of layouts, so both run in IEEE fp32.
    # (The flags() context: torch.testing's common_utils, imported by the OpInfo tests, forbids
    # setting cuDNN flags directly.)
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        with cfg.patch(layout_opt="on", backend_disk_cache=False):
            backend.metrics.reset()
            yield


def _randomize_bn(bn: nn.Module) -> nn.Module:
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


class ConvBnRelu(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = _randomize_bn(nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class TwoBlocks(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.a, self.b = ConvBnRelu(c, c), ConvBnRelu(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class BasicBlock(nn.Module):
    """ResNet's basic block with a strided 1x1 downsample on the shortcut."""

    def __init__(self, cin: int = 8, cout: int = 16, stride: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _randomize_bn(nn.BatchNorm2d(cout))
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = _randomize_bn(nn.BatchNorm2d(cout))
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                  _randomize_bn(nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.down(x))


def _check(module: nn.Module, x: torch.Tensor, *, atol: float = 1e-4) -> Any:
    """Compile ``module`` (no grad) for ``x``; outputs equal eager's in value and in strides."""
    with torch.no_grad():
        expected = module(x)
        compiled = compile_graph(torch.fx.symbolic_trace(module), [x])
        actual = compiled(x)
    exp, act = torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)
    assert len(exp) == len(act)
    for e, a in zip(exp, act):
        torch.testing.assert_close(a, e, atol=atol, rtol=atol)
        assert a.stride() == e.stride(), (a.stride(), e.stride())
    return compiled


def _conv_inputs_channels_last(source: str) -> list[bool]:
    """For each convolution call of a generated wrapper: is its input allocated channels-last
    (or the output of an earlier extern call, whose layout aten chooses)?"""
    allocs = {name: (size, stride) for name, size, stride in
              re.findall(r"(buf\d+) = empty_strided\(\(([^)]*)\), \(([^)]*)\)", source)}
    out = []
    for arg in re.findall(r"(?:aten\.convolution\.default|torch\.convolution)\((\w+),", source):
        if arg not in allocs:
            out.append(arg.startswith("buf"))  # an extern's output (graph inputs are checked elsewhere)
            continue
        size = [int(s) for s in allocs[arg][0].split(",") if s.strip()]
        stride = [int(s) for s in allocs[arg][1].split(",") if s.strip()]
        n, c, h, w = size
        out.append(stride == [c * h * w, 1, w * c, c])
    return out


# ----------------------------------------------------------------------------- inference
def test_conv_bn_relu_two_blocks(target: str) -> None:
    torch.manual_seed(0)
    m = TwoBlocks().eval().to(target)
    x = torch.randn(2, 8, 10, 12, device=target)
    compiled = _check(m, x)
    assert backend.metrics.layout_graphs == 1
    assert backend.metrics.layout_skipped == []
    source = compiled.pyjit_source
    assert all(_conv_inputs_channels_last(source)) and len(_conv_inputs_channels_last(source)) == 2
    # Kernels: x to NHWC, the two weights to NHWC (small and independent: one kernel), one
    # epilogue per block (the second one also writes the NCHW output eager returns). Nothing
    # transposes between the convolutions.
    assert backend.metrics.generated_kernel_count == 4
    if "triton" in source:
        # The first block's epilogue iterates in memory (NHWC) order: every access is 1-D in
        # ``xindex`` (the per-channel parameters at ``xindex % C``).
        between = re.split(r"aten\.convolution\.default|torch\.convolution\(", source, maxsplit=2)[1]
        kernel = re.search(r"(pyjit_fused_\w+)\[", between).group(1)
        body = source.split(f"def {kernel}(")[1].split("\n\n")[0]
        indices = re.findall(r"tl\.(?:load|store)\(\w+ \+ \((.*?)\), ", body)
        assert indices and all(i in ("xindex", "(xindex % 8)") for i in indices), indices


def test_resnet_basic_block(target: str) -> None:
    torch.manual_seed(0)
    m = BasicBlock().eval().to(target)
    x = torch.randn(2, 8, 12, 12, device=target)
    compiled = _check(m, x)
    assert backend.metrics.layout_graphs == 1
    flags = _conv_inputs_channels_last(compiled.pyjit_source)
    assert len(flags) == 3 and all(flags)


def test_channels_last_user_inputs(target: str) -> None:
    """Module and input already channels-last (as a user converts them): no copy of the
    activation in, and the output is channels-last as in eager."""
    torch.manual_seed(0)
    m = BasicBlock().eval().to(target).to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 12, 12, device=target).to(memory_format=torch.channels_last)
    _check(m, x)
    assert backend.metrics.layout_graphs == 1
    # Weights are already channels-last too: only the epilogues remain (block and shortcut BN
    # fused with the residual add and ReLU; the first BN + ReLU), no copies at all.
    assert backend.metrics.generated_kernel_count == 2


def test_flatten_after_conv_and_two_outputs(target: str) -> None:
    """A ``view`` eager cannot take of the channels-last activation reads an NCHW copy; the
    activation is also returned (NCHW, as in eager)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = ConvBnRelu(4, 8)
            self.conv = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.conv(self.a(x))
            return y, y.flatten(1).sum(1)

    torch.manual_seed(0)
    _check(Net().eval().to(target), torch.randn(2, 4, 8, 8, device=target))
    assert backend.metrics.layout_graphs == 1


def test_pooling_head(target: str) -> None:
    """conv -> BN -> ReLU -> max pool -> global average pool -> linear (a small ResNet's stem and head)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = ConvBnRelu(3, 8, stride=2)
            self.block = BasicBlock(8, 8, stride=1)
            self.fc = nn.Linear(8, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.max_pool2d(self.stem(x), 3, stride=2, padding=1)
            y = F.adaptive_avg_pool2d(self.block(y), 1)
            return self.fc(torch.flatten(y, 1))

    torch.manual_seed(0)
    _check(Net().eval().to(target), torch.randn(2, 3, 32, 32, device=target))
    assert backend.metrics.layout_graphs == 1


# ----------------------------------------------------------------------------- training
def test_training_conv_bn_relu(target: str) -> None:
    """Train-mode batch norm (batch statistics, running statistics updated) between convs:
    outputs, every gradient and the running statistics equal eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).to(target).train()
    x = torch.randn(2, 4, 8, 8, device=target, requires_grad=True)
    check_training(m, [x], atol=2e-4, rtol=2e-4)
    assert backend.metrics.layout_graphs >= 1  # the forward graph (the backward has no convolution op)


# ----------------------------------------------------------------------------- left alone
class _ConvThen(nn.Module):
    """conv3x3 + ReLU, then ``tail`` (the construct the layout pass must not convert under)."""

    def __init__(self, tail: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.tail = tail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(torch.relu(self.conv(x)))


def _check_left_alone(tail: Any, target: str, reason: str) -> None:
    """``_ConvThen(tail)`` equals eager (same seed before each run) and the pass skipped it for ``reason``."""
    torch.manual_seed(0)
    m = _ConvThen(tail).to(target)
    x = torch.randn(2, 4, 6, 6, device=target)
    with torch.no_grad():
        torch.manual_seed(1)
        expected = m(x)
        compiled = compile_graph(torch.fx.symbolic_trace(m), [x])
        torch.manual_seed(1)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert backend.metrics.layout_graphs == 0
    assert any(reason in r for r in backend.metrics.layout_skipped), backend.metrics.layout_skipped


def test_as_strided_of_changed_layout_left_alone(target: str) -> None:
    _check_left_alone(lambda y: torch.as_strided(y, (2, 8), (3, 1)) + 1, target, "as_strided")


def test_conv1d_and_transposed_left_alone(target: str) -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv1d(4, 4, 3, padding=1)
            self.ct = nn.ConvTranspose2d(4, 4, 2, stride=2)

        def forward(self, x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.relu(self.c1(x)), torch.relu(self.ct(z))

    torch.manual_seed(0)
    m = Net().eval().to(target)
    x, z = torch.randn(2, 4, 10, device=target), torch.randn(2, 4, 5, 5, device=target)
    with torch.no_grad():
        expected = m(x, z)
        actual = compile_graph(torch.fx.symbolic_trace(m), [x, z])(x, z)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    assert backend.metrics.layout_graphs == 0
    assert backend.metrics.layout_skipped == ["only 1-d/3-d/transposed convolutions"]


def test_off_leaves_graphs_alone_and_auto_weighs_cpu_copies() -> None:
    """"off" never converts; on CPU "auto" leaves a block whose NCHW input and output would both
    be converted (copies of about 0.02 elements per multiply-add) alone, with the reason."""
    m = TwoBlocks().eval()
    x = torch.randn(2, 8, 6, 6)
    for mode in ("auto", "off"):
        aten_gm, _ = trace_to_aten(torch.fx.symbolic_trace(m), [x])
        before = aten_gm.code
        with cfg.patch(layout_opt=mode):
            run_passes(aten_gm)
        assert "channels_last" not in aten_gm.code and aten_gm.code == before
    assert backend.metrics.layout_graphs == 0
    assert len(backend.metrics.layout_skipped) == 1 and "copied elements per multiply-add" in backend.metrics.layout_skipped[0]


class _StemNet(nn.Module):
    """An NCHW image through a stem and wide convolutions, ending in a pooled classifier: only
    the 3-channel image is converted (and the small weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.convs = nn.ModuleList(nn.Conv2d(32, 32, 3, padding=1, bias=False) for _ in range(3))
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        for conv in self.convs:
            x = torch.relu(conv(x)) + x
        return self.head(x.mean((2, 3)))


def test_auto_converts_a_cpu_network_converted_once_at_its_stem() -> None:
    m = _StemNet().eval()
    x = torch.randn(4, 3, 32, 32)  # copies: the image and the weights, 0.0004 elements per multiply-add
    with torch.no_grad():
        expected = m(x)
        with cfg.patch(layout_opt="auto"):
            aten_gm, _ = trace_to_aten(torch.fx.symbolic_trace(m), [x])
            run_passes(aten_gm)
            actual = compile_graph(torch.fx.symbolic_trace(m), [x])(x)
    assert "channels_last" in aten_gm.code, backend.metrics.layout_skipped
    torch.testing.assert_close(actual, expected)


def test_pass_inserts_copies_only_where_needed() -> None:
    """One channels-last copy per value (x feeds the block's conv and the downsample), none for
    the ReLU between two convolutions (already channels-last) nor for the 1x1 downsample weight
    (contiguous is channels-last there), one copy back for the output."""
    m = BasicBlock().eval()
    x = torch.randn(2, 8, 8, 8)
    aten_gm, _ = trace_to_aten(torch.fx.symbolic_trace(m), [x])
    run_passes(aten_gm)
    clones = [n for n in aten_gm.graph.nodes if n.target is torch.ops.aten.clone.default]
    formats = sorted(str(n.kwargs.get("memory_format")) for n in clones)
    # x and the two 3x3 weights to channels-last; the output back to contiguous.
    assert formats == ["torch.channels_last"] * 3 + ["torch.contiguous_format"], formats
    out = next(n for n in aten_gm.graph.nodes if n.op == "output").args[0][0]
    assert out.meta["val"].is_contiguous()


def test_environment_variable() -> None:
    from pyjit.config import _from_environment
    assert _from_environment({"PYJIT_LAYOUT_OPT": "on"}).layout_opt == "on"
    assert _from_environment({}).layout_opt == "auto"
    with pytest.raises(ValueError, match="PYJIT_LAYOUT_OPT"):
        _from_environment({"PYJIT_LAYOUT_OPT": "yes"})


def test_training_channels_last_inputs_layout_off(target: str) -> None:
    """Channels-last module and input with the pass off: the batch-norm statistics kernel reads
    an x-only value realized after it (a fused group's nodes run in dependency order)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).to(target).train()
    m = m.to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 8, 8, device=target).to(memory_format=torch.channels_last).requires_grad_()
    with cfg.patch(layout_opt="off"):
        check_training(m, [x], atol=2e-4, rtol=2e-4)
    assert backend.metrics.layout_graphs == 0


def test_random_op_of_a_converted_conv_left_alone(target: str) -> None:
    """Random ops draw in memory order: ``rand_like`` of a channels-last value would give each
    element another draw than eager for the same seed, so the graph keeps eager's layouts
    (values equal to eager's). Dropout is fine either way: its mask is drawn for a fresh
    contiguous tensor, whatever its input's layout."""
    _check_left_alone(lambda y: y * torch.rand_like(y) + F.dropout(y, 0.5, training=True), target, "random op")

def _fake_cuda_conv_graph(channels: int, channels_last: bool) -> torch.fx.GraphModule:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode(allow_non_fake_inputs=True):
        c = channels
        x = torch.empty_strided((2, c, 8, 8), (64 * c, 1, 8 * c, c) if channels_last else (64 * c, 64, 8, 1),
                                device="cuda")
        w1 = torch.empty(channels, channels, 3, 3, device="cuda")
        w2 = torch.empty(channels, channels, 3, 3, device="cuda")

    def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(torch.relu(F.conv2d(x, w1, padding=1)), w2, padding=1))

    return make_fx(f, tracing_mode="real")(x, w1, w2)


@pytest.mark.parametrize("channels,channels_last,small_rule", [(64, False, True), (64, True, False), (128, False, False)])
def test_auto_skips_small_channel_nchw_graphs(channels: int, channels_last: bool, small_rule: bool) -> None:
    """"auto" (CUDA graphs; traced here with fake CUDA tensors) leaves graphs whose convolutions
    all have <= 64 channels and NCHW inputs alone (measured slower converted), not others (on a
    CPU-only build their rewrite then stops at re-propagating fake CUDA values; on the GPU
    machine they are converted: tests/backend/test_channels_last.py runs there with CUDA)."""
    from pyjit.backend.passes.layout import optimize_layout

    gm = _fake_cuda_conv_graph(channels, channels_last)
    rule = "every convolution has at most 64 channels and NCHW inputs"
    with cfg.patch(layout_opt="auto"):
        applied = optimize_layout(gm)
    assert (rule in backend.metrics.layout_skipped) is small_rule, backend.metrics.layout_skipped
    if small_rule:
        assert not applied
    elif torch.cuda.is_available():
        assert applied, backend.metrics.layout_skipped  # the reason the pass gave


@pytest.mark.parametrize("fn", [
    lambda x: x[:, :, :1, :1] * 2,  # NHWC with unit H, W: eager keeps (C, 1, C, C)
    lambda x: x.mean((2, 3), keepdim=True),  # eager's reduction gives (C, 1, 1, 1)
    lambda x: F.adaptive_avg_pool2d(x, 1) + 1,
], ids=["slice", "mean", "pool"])
def test_outputs_keep_eagers_strides_in_unit_dimensions(fn: Any) -> None:
    """Strides of size-1 dimensions move no element, but ``.stride()`` shows them and ATen's
    memory-format guess reads them (a ``[N, C, 1, 1]`` value with row-major strides counts as
    NCHW): compiled outputs have eager's, as a view of the same buffer."""
    x = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)
    with cfg.patch(backend_disk_cache=False):
        compiled = compile_graph(torch.fx.symbolic_trace(fn), [x])
    out, expected = compiled(x), fn(x)
    torch.testing.assert_close(out, expected)
    assert out.stride() == expected.stride()
