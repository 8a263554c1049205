"""Aten-graph passes run between ``trace_to_aten`` and lowering (``compile_fx._compile``).

Each pass rewrites the functional aten graph in place, keeps every graph output's value (up to
floating-point reassociation), and leaves the graph alone where it cannot prove that:

* :mod:`.attention` -- hand-written ``softmax(q @ k^T * scale + mask) @ v`` -> torch's fused
  scaled-dot-product attention kernels (extern calls);
* :mod:`.conv_bn` -- an eval-mode batch norm (any per-channel affine chain) after a
  convolution folded into the convolution's weight and bias, computed inside the graph;
* :mod:`.collectives` -- each functional collective's ``wait_tensor`` moved to just before the
  first use of its result, so independent compute runs while the collective is in flight
  (also on symbolic graphs);
* :mod:`.layout` -- channels-last operands for 2-d convolutions, eager's strides re-propagated,
  graph outputs kept in their layout (``config.layout_opt``; runs last, on the folded convs).

One pass runs earlier, inside ``compile_fx.trace_to_aten`` on the graph before
functionalization: :mod:`.rng_order` makes in-place random fills draw in the memory order of the
tensor they fill, as eager does.

The passes are always on for graphs with static shapes; tests check them through
``pyjit.backend.metrics`` (``attention_rewrites``, ``attention_skipped``, ``conv_bn_folds``,
``layout_graphs``, ``layout_skipped``).
"""
from __future__ import annotations

import torch
import torch.fx

from .attention import rewrite_attention
from .collectives import sink_waits
from .conv_bn import fold_conv_bn
from .layout import optimize_layout

__all__ = ["run_passes", "rewrite_attention", "fold_conv_bn", "optimize_layout", "sink_waits"]


def run_passes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Run pyjit's aten-graph passes on ``gm`` (in place; returned for chaining).

    Graphs with symbolic sizes are left alone: the passes compare static shapes.
    """
    rewrite_attention(gm)
    fold_conv_bn(gm)
    optimize_layout(gm)
    sink_waits(gm)
    return gm
