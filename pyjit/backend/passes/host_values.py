"""Host values in a device graph: CPU tensors that a CUDA graph computes with.

``torch.optim``'s multi-tensor paths (Adam, AdamW, ... with ``foreach=True``, the default for
CUDA parameters) keep their step counters as 0-d CPU tensors unless ``capturable=True``: a
jitted training step's update graph then increments them on the host, computes bias
corrections from them on the host, and hands the results to the CUDA updates as 0-d CPU
tensors (eager's kernels read such a tensor as a scalar argument). ``torch.tensor(0.0)`` made
inside the graph (an optimizer's lazy state) is such a value too.

What this pass owns (:func:`move_host_values`, run on the aten graph of a CUDA graph before
lowering):

- **Classification.** A node whose traced value is a CPU tensor is a *host* node; the
  lowering runs host nodes as aten calls from the wrapper (``GraphLowering.call_function``),
  never as generated kernels (which run on the graph's device).
- **One transfer.** Every host value a device node reads must be 0-d; they are stacked per
  dtype into one 1-d CPU tensor, copied to the device once per call (``_to_copy``), and each
  device use reads its element (``select``): a 0-d device tensor with the same dtype, so type
  promotion and values are unchanged (0-d tensors promote alike on either device). Without this,
  each reading kernel would get a CPU pointer.
- **Order.** Host nodes are moved before the first device node, so the stack can be built
  before any device node reads it; they read only host values and inputs, so moving them
  keeps every dependency. Writes into graph inputs (``copy_``, the functional graph's
  epilogue) stay where they are, so values read before the write are the old ones.
- **Extern readers keep the host value.** An op pyjit has no lowering for runs as an aten call
  from the wrapper, which takes a 0-d CPU tensor exactly as eager does; some require one: the
  attention backward kernels read their philox seed and offset on the host, and given the
  device copy they dereferenced a device pointer (a segfault in a GPT-2 training step with
  attention dropout on the GPU).
- **Refusals** (:class:`~pyjit.errors.GraphRefusal`, the graph then runs as captured, logged):
  a host value computed from device values (a device-to-host copy: ``.cpu()``, ``.item()``),
  a host value of more than one element read by a device op, a node with outputs on both.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ...errors import GraphRefusal

aten = torch.ops.aten


def _devices(val: Any) -> set[str]:
    return {t.device.type for t in pytree.tree_leaves(val) if isinstance(t, torch.Tensor)}


def _is_input_write(node: torch.fx.Node) -> bool:
    return node.target is aten.copy_.default and isinstance(node.args[0], torch.fx.Node) \
        and node.args[0].op == "placeholder"


def _classify(gm: torch.fx.GraphModule, device: str) -> dict[torch.fx.Node, str]:
    """``"host"`` or ``"device"`` for every node with tensor values (others are not listed)."""
    kind: dict[torch.fx.Node, str] = {}
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function", "get_attr"):
            continue
        devs = _devices(node.meta.get("val"))
        if not devs:
            continue
        if devs == {"cpu"}:
            kind[node] = "host"
        elif devs == {device}:
            kind[node] = "device"
        else:
            raise GraphRefusal(f"{node.name} has outputs on several devices {sorted(devs)}")
    return kind


def _runs_as_aten_call(node: torch.fx.Node) -> bool:
    """Whether the lowering calls aten for ``node``: a functional op with no lowering registered
    (in-place variants, which functionalization removes before lowering, count as lowered)."""
    from ..lowering import LOWERINGS
    schema = getattr(node.target, "_schema", None)
    if schema is None or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return False
    return node.target not in LOWERINGS


def move_host_values(gm: torch.fx.GraphModule, device: torch.device) -> int:
    """Rewrite ``gm`` (a graph for ``device``, not CPU) as described above; returns the number of
    host values now read on the device (0: the graph is unchanged)."""
    if device.type == "cpu":
        return 0
    kind = _classify(gm, device.type)
    hosts = [n for n, k in kind.items() if k == "host"]
    if not hosts:
        return 0
    graph = gm.graph
    # Host values read by device nodes, in graph order, with those readers.
    read_on_device: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        inputs = [a for a in node.all_input_nodes if kind.get(a) is not None]
        if kind.get(node) == "host" or (node not in kind and all(kind[a] == "host" for a in inputs) and inputs):
            bad = [a.name for a in inputs if kind[a] == "device"]
            if bad:
                raise GraphRefusal(f"host value {node.name} ({node.target}) is computed from device values "
                                   f"{bad} (a device-to-host copy)")
            if node not in kind:
                kind[node] = "host"  # a getitem of a host tuple, a size query of a host value
            continue
        for a in inputs:
            if kind[a] != "host" or _runs_as_aten_call(node):
                continue
            val = a.meta.get("val")
            if not isinstance(val, torch.Tensor) or val.dim() != 0:
                shape = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
                raise GraphRefusal(f"a CPU value {a.name} of shape {shape} is read by {node.target} on {device.type}")
            read_on_device.setdefault(a, []).append(node)
    if not read_on_device:
        return 0
    # Constants, then host nodes first (after the inputs), in their order; writes into inputs
    # stay in place.
    anchor = [n for n in graph.nodes if n.op == "placeholder"][-1] if any(
        n.op == "placeholder" for n in graph.nodes) else None
    for node in list(graph.nodes):
        movable = node.op == "get_attr" or (node.op == "call_function" and kind.get(node) == "host"
                                            and not _is_input_write(node))
        if anchor is None:
            anchor = node.prev  # no inputs: before the first node
        if movable:
            if node is not anchor.next:
                anchor.append(node)
            anchor = node
    fake = next(v for v in (a.meta.get("val") for a in read_on_device) if isinstance(v, torch.Tensor))
    mode = getattr(fake, "fake_mode", None)
    by_dtype: dict[torch.dtype, list[torch.fx.Node]] = {}
    for a in read_on_device:
        by_dtype.setdefault(a.meta["val"].dtype, []).append(a)
    assert anchor is not None
    with graph.inserting_after(anchor):
        inserted: list[torch.fx.Node] = []
        for dtype, values in by_dtype.items():
            stacked = graph.call_function(aten.stack.default, ([*values], 0))
            moved = graph.call_function(aten._to_copy.default, (stacked,), {"device": device})
            inserted += [stacked, moved]
            for i, a in enumerate(values):
                elem = graph.call_function(aten.select.int, (moved, 0, i))
                inserted.append(elem)
                for user in read_on_device[a]:
                    user.replace_input_with(a, elem)
                _set_meta(elem, mode, lambda: torch.empty((), dtype=dtype, device=device))
            _set_meta(stacked, mode, lambda: torch.empty((len(values),), dtype=dtype))
            _set_meta(moved, mode, lambda: torch.empty((len(values),), dtype=dtype, device=device))
    # ``inserting_after`` puts each new node right after the anchor: restore creation order.
    for prev, node in zip([anchor, *inserted], inserted):
        if prev.next is not node:
            prev.append(node)
    graph.lint()
    gm.recompile()
    return len(read_on_device)


def _set_meta(node: torch.fx.Node, mode: Any, make: Any) -> None:
    if mode is not None:
        with mode:
            node.meta["val"] = make()
    else:  # pragma: no cover - aten graphs always carry fake values
        node.meta["val"] = make().to("meta")
