"""Channels-last layout for convolution graphs (``config.layout_opt``, ``PYJIT_LAYOUT_OPT``).

cuDNN's fastest convolutions (NHWC tensor-core kernels, TF32 in fp32) want channels-last
operands; given NCHW tensors it transposes them in and out around every convolution. This
pass makes the input and the weight of every 4-d (2-d spatial), non-transposed
``aten.convolution`` channels-last: it inserts ``aten.clone(x, memory_format=channels_last)``
where the value is not already channels-last (one per value, shared by every convolution that
reads it), then re-propagates the fake-tensor values (``node.meta["val"]``) through the whole
graph, so every node carries the strides eager gives it for the new inputs: a convolution on
channels-last operands returns channels-last, and pointwise ops and batch norm keep it. The
lowering realizes such values with eager's strides (``graph.GraphLowering.realize``), so
conv -> BN -> ReLU -> conv stays NHWC with no transposing copy in between.

Semantics: a convolution's value does not depend on its operands' strides, and every other op
of a functional aten graph computes its value from logical indices, with these exceptions,
which the pass handles:

* a ``view``/``_unsafe_view`` that eager cannot take of the new strides (``flatten`` of a
  channels-last activation) gets a copy of its input in the input's original layout first;
* ``as_strided`` (and its relatives) address storage: if its input's strides changed the
  graph is left alone; so are random ops (dropout) reading a value whose layout changed, whose
  draws follow memory order (the same seed would give other masks than eager);
* graph outputs keep exactly the strides they had before the pass (users, and the backward
  graph of a training forward, see eager's strides): where one changed, a copy into the
  original layout is inserted before the output.

Left alone (reason in ``metrics.layout_skipped``, logged on ``perf_hints``): graphs with
symbolic sizes, graphs whose convolutions are all 1-d/3-d/transposed (those convolutions are
never converted), and any graph the re-propagation fails on. ``"auto"``: on CUDA, not when
every convolution has at most 64 input and output channels and reads NCHW values (measured
slower there); on CPU, only when the layout copies it inserts move few elements against the
convolutions' multiply-adds (``_CPU_COPY_PER_MAC``: an image converted once at the stem of a
network, not a block whose NCHW input and output are both converted). ``"on"`` converts on
every device.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.fx import Node

from ...config import config
from ...logs import get_logger
from ..metrics import metrics
from .graph_utils import eliminate_dead_code, is_target, val

aten = torch.ops.aten
log = get_logger("perf_hints")

# Views whose validity (not meaning) depends on the input's strides.
_VIEWS = (aten.view.default, aten._unsafe_view.default)
# Ops that address their input's storage: their meaning depends on its strides.
_STORAGE_OPS = (aten.as_strided.default, aten.as_strided_.default, aten.as_strided_copy.default, aten.as_strided_scatter.default,
                aten._reshape_alias.default)


class _Refuse(Exception):
    """The pass cannot prove the rewritten graph computes what the original did."""


def optimize_layout(gm: torch.fx.GraphModule) -> bool:
    """Make ``gm``'s 2-d convolutions channels-last (in place); True when the graph changed."""
    if config.layout_opt == "off":
        return False
    convs = [n for n in gm.graph.nodes if is_target(n, aten.convolution.default)]
    if not convs:
        return False
    first = val(convs[0])
    if not isinstance(first, torch.Tensor):
        return False
    if _symbolic(gm):
        return _skip("symbolic sizes")
    targets = [c for c in convs if _convertible(c)]
    if not targets:
        return _skip("only 1-d/3-d/transposed convolutions")
    cuda = first.device.type == "cuda"
    if config.layout_opt == "auto" and cuda and all(_small_channels(c) for c in targets) \
            and not any(_is_channels_last(val(c.args[0])) for c in targets):
        # Measured on an H100 (docs/performance.md): two 64-channel 3x3 convolutions with BN and
        # ReLU ran 1.25x -> 0.90x over eager once converted (cuDNN's NCHW kernels are good at 64
        # channels and the copies in and out cost more), a 128-channel ResNet block 1.28x -> 1.77x.
        return _skip("every convolution has at most 64 channels and NCHW inputs")
    if all(_is_channels_last(val(c.args[0])) and _is_channels_last(val(c.args[1])) for c in targets):
        # Model and input already channels-last (as users convert them): no copy would be
        # inserted, so no value would change; the re-propagation (a fake run of every node,
        # about a second for a MobileNet's training graph) is skipped.
        metrics.layout_graphs += 1
        log.info("channels-last layout: the %d convolution(s) already read channels-last values", len(targets))
        return True
    from ..compile_fx import copy_graph

    graph = copy_graph(gm.graph)  # rewritten on a copy: a refusal leaves ``gm`` untouched
    try:
        rw = _rewrite(graph)
    except _Refuse as e:
        return _skip(str(e))
    except Exception as e:  # noqa: BLE001 - an op fake tensors cannot run: keep the original graph
        return _skip(f"re-propagation failed ({type(e).__name__}: {e})")
    copies = rw.copies
    if config.layout_opt == "auto" and not cuda:
        copied, macs = rw.copied_elements(), _conv_macs(graph)
        if copied > _CPU_COPY_PER_MAC * macs:
            return _skip(f"layout copies of {copied} elements against {macs} convolution multiply-adds "
                         f"(CPU: converted only below {_CPU_COPY_PER_MAC} copied elements per multiply-add)")
    gm.graph = graph
    eliminate_dead_code(graph)
    graph.lint()
    gm.recompile()
    metrics.layout_graphs += 1
    log.info("channels-last layout for %d convolution(s); %d layout copies inserted", len(targets), copies)
    return True


def _skip(reason: str) -> bool:
    metrics.layout_skipped.append(reason)
    log.info("channels-last layout not applied: %s", reason)
    return False


def _symbolic(gm: torch.fx.GraphModule) -> bool:
    for n in gm.graph.nodes:
        v = val(n)
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
            return True
    return False


def _convertible(conv: Node) -> bool:
    """A non-transposed convolution of 4-d operands (2-d spatial)."""
    x, w = val(conv.args[0]), val(conv.args[1])
    return isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dim() == 4 and w.dim() == 4 \
        and not conv.args[6]


def _small_channels(conv: Node) -> bool:
    w = val(conv.args[1])
    return isinstance(w, torch.Tensor) and w.shape[0] <= 64 and w.shape[1] * int(conv.args[8]) <= 64


def _is_channels_last(v: torch.Tensor) -> bool:
    return v.is_contiguous(memory_format=torch.channels_last)


def _same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal strides in every dim of size > 1 (the others never move an index)."""
    return tuple(a.shape) == tuple(b.shape) and all(
        n == 1 or sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()))


def _fake_mode(graph: torch.fx.Graph) -> Any:
    for n in graph.nodes:
        mode = getattr(val(n), "fake_mode", None)
        if mode is not None:
            return mode
    raise _Refuse("no fake tensor values in the graph")


def _rewrite(graph: torch.fx.Graph) -> "_Rewriter":
    """Insert the channels-last copies, re-propagate values, restore output layouts; returns
    the rewriter (its copies). Raises ``_Refuse`` where semantics are not proven."""
    rw = _Rewriter(graph)
    rw.repropagate()
    rw.restore_outputs()
    return rw


# On CPU oneDNN's channels-last convolutions gain little over its NCHW ones (it reorders NCHW
# internally), while every layout copy the pass inserts is a transposing C++ loop. Measured on a
# 2-core x86 machine, one thread (docs/performance.md, "CPU layouts"): about 1.9 ps saved per
# multiply-add against about 1 ns per copied element, so the break-even is near 0.002 copied
# elements per multiply-add. A small ResNet on an NCHW image (input copy only, 0.0008) gained;
# a residual block with NCHW input and output (0.004) and a two-convolution block (0.008) lost.
_CPU_COPY_PER_MAC = 0.002


def _conv_macs(graph: torch.fx.Graph) -> int:
    """Multiply-adds of the graph's convertible convolutions."""
    total = 0
    for n in graph.nodes:
        if is_target(n, aten.convolution.default) and _convertible(n):
            out, w = val(n), val(n.args[1])
            if isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor):
                total += out.numel() * w[0].numel()
    return total


class _Rewriter:
    """One walk over ``graph`` in order: a convertible convolution's operands are made
    channels-last (judged on their *new* values: a ReLU between two convolutions already is),
    every node's fake value is recomputed from its inputs' new values, and views eager cannot
    take of the new strides read a copy in their input's original layout."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self.mode = _fake_mode(graph)
        self.old = {n: val(n) for n in graph.nodes}
        self.copies = 0
        # (value, memory format) -> the copy of the value in that format (shared by its readers)
        self.made: dict[tuple[Node, torch.memory_format], Node] = {}

    def repropagate(self) -> None:
        for n in list(self.graph.nodes):
            if n.op in ("placeholder", "get_attr", "output"):
                continue
            if n.op != "call_function":
                raise _Refuse(f"{n.op} node {n.name}")
            if is_target(n, aten.convolution.default) and _convertible(n):
                for arg in n.args[:2]:
                    if isinstance(arg, Node) and not _is_channels_last(val(arg)):
                        n.replace_input_with(arg, self.copy(arg, torch.channels_last, after=arg))
            changed = [a for a in n.all_input_nodes if isinstance(self.old.get(a), torch.Tensor)
                       and not _same_strides(self.old[a], val(a))]
            if n.target in _STORAGE_OPS and changed:
                raise _Refuse(f"{n.target} addresses the storage of a value whose layout changed ({n.name})")
            if changed and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
                # Random ops fill their output in memory order: in another layout the same seed
                # would give each element another draw than eager (dropout masks differ).
                raise _Refuse(f"random op {n.target} reads a value whose layout changed ({n.name})")
            if n.target in _VIEWS and changed and not _view_ok(n, self.mode):
                src = n.args[0]
                n.replace_input_with(src, self.copy_to_layout(src, self.old[src], before=n))
            n.meta["val"] = _run(n, self.mode)

    def restore_outputs(self) -> None:
        """Every graph output keeps the strides it had: copies where the layout changed."""
        out = next(n for n in self.graph.nodes if n.op == "output")
        new_args = []
        for a in out.args[0]:
            if isinstance(a, Node) and isinstance(self.old.get(a), torch.Tensor) \
                    and not _same_strides(self.old[a], val(a)):
                a = self.copy_to_layout(a, self.old[a], before=out)
            new_args.append(a)
        out.args = (type(out.args[0])(new_args),) + tuple(out.args[1:])

    def copied_elements(self) -> int:
        """Elements the inserted layout copies move per call."""
        return sum(v.numel() for v in (val(n) for n in self.made.values()) if isinstance(v, torch.Tensor))

    def copy_to_layout(self, src: Node, want: torch.Tensor, *, before: Node) -> Node:
        """A node computing ``src``'s value in ``want``'s strides (contiguous or channels-last)."""
        if want.is_contiguous():
            fmt = torch.contiguous_format
        elif want.dim() == 4 and _is_channels_last(want):
            fmt = torch.channels_last
        else:
            raise _Refuse(f"{src.name} needs strides {tuple(want.stride())} back, neither contiguous nor "
                          "channels-last")
        node = self.copy(src, fmt, before=before)
        if not _same_strides(val(node), want):
            raise _Refuse(f"copy of {src.name} did not restore strides {tuple(want.stride())}")
        return node

    def copy(self, src: Node, fmt: torch.memory_format, *, after: Node | None = None,
             before: Node | None = None) -> Node:
        """``clone(src, memory_format=fmt)``, one per value and format (placed at its first use)."""
        key = (src, fmt)
        if key not in self.made:
            where = self.graph.inserting_after(src) if after is not None else self.graph.inserting_before(before)
            with where:
                node = self.graph.call_function(aten.clone.default, (src,), {"memory_format": fmt})
            node.meta.update({k: v for k, v in src.meta.items() if k != "val"})
            node.meta["val"] = _run(node, self.mode)
            self.made[key] = node
            self.copies += 1
        return self.made[key]


def _view_ok(n: Node, mode: Any) -> bool:
    try:
        _run(n, mode)
    except (RuntimeError, ValueError):  # torch raises either for a view the strides do not allow
        return False
    return True


def _run(n: Node, mode: Any) -> Any:
    args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: val(a))
    with mode:
        return n.target(*args, **kwargs)


