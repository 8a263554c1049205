"""The generated wrapper module: kernels plus ``call(args)`` that allocates, launches and returns.

The module is plain, readable Python: ``empty_strided`` allocations (or reuse of a dead
buffer of the same layout, planned by ``pyjit.runtime.allocator``), kernel launches with
their grids, extern aten calls, ``del`` at each buffer's last use, write-back of mutated
inputs, and the outputs. ``python <module>.py`` runs it standalone on random inputs and
prints its time per call.

Dynamic shapes: ``call`` first binds each size symbol from the inputs (``s0 = arg0_1.shape[0]``,
or a stride; a symbolic scalar input is unpacked under its symbol's name; host values,
``hs0 = float(min(2.0, zf0))``, follow in Python), then allocates,
launches and computes grids with expressions over them. Such a module also defines
``check(args)``: True when the call's inputs fit the symbolic layouts the kernels were
generated for (dtype, device, rank, every size and stride equal to its expression, guards the
aten trace added, int32 index range of Triton kernels; C++ kernels index in int64); the compiled
callable runs the graph as captured otherwise.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from ...runtime.allocator import Step, plan_buffers
from ..graph import GraphLowering
from ..ir import Buffer, ExternKernel, IRNode, MultiOutput, ReinterpretView
from ..scheduler import Scheduler
from ..symbolic import hint, is_static, pexpr
from .common import IndentedBuffer
from .target import kernel_target


@dataclasses.dataclass
class GeneratedModule:
    source: str
    kernel_names: list[str]
    extern_calls: int
    reused_buffers: int


# Extern kernels called through torch's public function rather than the op overload: the same
# aten kernel, reached by torch's argument parser instead of the overload's Python ``__call__``
# and the dispatcher's boxed call from Python (about 1 us less per call on a small CPU matmul).
# Only ops whose public function takes the schema's positional arguments in order and the
# schema's keyword-only ones by the same names.
_PUBLIC_FUNCTIONS = {
    "aten::mm.default": ("torch.mm", frozenset()),
    "aten::bmm.default": ("torch.bmm", frozenset()),
    "aten::addmm.default": ("torch.addmm", frozenset({"beta", "alpha"})),
    "aten::baddbmm.default": ("torch.baddbmm", frozenset({"beta", "alpha"})),
    "aten::mv.default": ("torch.mv", frozenset()),
    "aten::dot.default": ("torch.dot", frozenset()),
    "aten::convolution.default": ("torch.convolution", frozenset()),
}


def _op_path(op: Any, kwargs: Any = ()) -> str:
    if isinstance(op, torch._ops.OpOverload):
        public = _PUBLIC_FUNCTIONS.get(f"{op._schema.name}.{op._overloadname}")
        if public is not None and set(kwargs) <= public[1]:
            return public[0]
        return f"torch.ops.{op.namespace}.{op._schema.name.split('::')[1]}.{op._overloadname}"
    raise NotImplementedError(f"cannot name extern kernel {op!r}")


def _const(value: Any) -> str:
    if isinstance(value, sympy.Basic):
        return pexpr(value)  # a size expression: its symbols are bound at the top of call()
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, torch.layout):
        return str(value)
    if isinstance(value, torch.memory_format):
        return str(value)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_const(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_const(v)}" for k, v in value.items()) + "}"
    return repr(value)


class WrapperCodegen:
    def __init__(self, graph: GraphLowering, scheduler: Scheduler, device: torch.device, persistent_rmax: int):
        self.graph = graph
        self.scheduler = scheduler
        self.device = device
        self.persistent_rmax = persistent_rmax
        self.uses_persistent_meta = False  # a reduction over a symbolic row length picks its kernel per call
        self.uses_column_meta = False  # the same for a column reduction (reduction_heuristics.column_meta)
        self.inputs = list(graph.graph_inputs) + [b for b, _ in graph.constants]
        self.dtypes: dict[str, torch.dtype] = {b.name: b.layout.dtype for b in self.inputs}
        self.dtypes.update({b.name: b.layout.dtype for b in graph.buffers if b.layout is not None})
        # Which kernels this device's graphs get (codegen/target.py): every kernel step, the
        # module's header and its kernel definitions come from it.
        self.target = kernel_target(device)
        self.input_names = list(graph.input_names) + [b.name for b, _ in graph.constants]
        self.extra_guards: list[sympy.Expr] = list(getattr(graph, "extra_guards", []))
        self.bindings, self.symbols = self._bind_symbols()
        self.dynamic = bool(self.symbols)
        # Symbolic float scalar inputs (``double`` parameters of C++ kernels).
        self.float_symbols = frozenset([p.name for p in graph.placeholders
                                        if isinstance(p, sympy.Symbol) and not p.is_integer]
                                       + [symbol.name for symbol, _, _ in graph.host_scalars if not symbol.is_integer])
        # Symbolic element counts that kernels index with int32: each call checks they fit.
        self.int32_limits: list[sympy.Expr] = []
        # Launch autotuning of static Triton kernels: the chosen launch is baked into the module.
        self.launch_tuner = self._launch_tuner()
        # Whether each matmul template keeps its fused epilogue, by timing (epilogue_tuning.py).
        self.epilogue_tuner = self._epilogue_tuner()
        self.shared_kernels: dict[str, str] = {}  # kernel code without name and comments -> first name

    def value(self, node: Any) -> str:
        if isinstance(node, ReinterpretView):
            lay = node.layout
            return (f"reinterpret({node.data.name}, {_const(tuple(lay.size))}, {_const(tuple(lay.stride))}, "
                    f"{_const(lay.offset)})")
        if isinstance(node, Buffer):
            return node.name
        if isinstance(node, IRNode):
            raise AssertionError(f"unrealized value reached the wrapper: {node!r}")
        if isinstance(node, (list, tuple)):
            inner = ", ".join(self.value(v) for v in node)
            return f"[{inner}]" if isinstance(node, list) else f"({inner}{',' if len(node) == 1 else ''})"
        return _const(node)

    def _write_backs(self, mutations: list[tuple[Any, Any]]) -> list[str]:
        """Lines writing each mutated input's new value back. Several inputs (a training step's
        batch-norm running statistics) go in one ``torch._foreach_copy_``, one launch for all
        on CUDA instead of one per input; only where no two targets share an input and no value
        reads a target (the fused copy does not order them)."""
        def root(node: Any) -> str:
            return node.data.name if isinstance(node, ReinterpretView) else node.name

        targets = [root(t) for t, _ in mutations]
        values = [root(v) for _, v in mutations]
        if len(mutations) < 2 or len(set(targets)) != len(targets) or set(targets) & set(values):
            return [f"{self.value(t)}.copy_({self.value(v)})  # write back the mutated input" for t, v in mutations]
        dst = ", ".join(self.value(t) for t, _ in mutations)
        src = ", ".join(self.value(v) for _, v in mutations)
        return [f"torch._foreach_copy_([{dst}], [{src}])  # write back the mutated inputs"]

    def generate(self) -> GeneratedModule:
        graph = self.graph
        keep = self._kept_names()
        if self.epilogue_tuner is not None:
            self.scheduler.groups = self.epilogue_tuner.decide(self.scheduler.groups)
            self.epilogue_tuner.report()
        removed = self._removed_buffers(keep)
        kernels: list[Any] = []  # KernelSource (Triton) or CppKernelSource
        steps: list[Step] = []
        lines: list[tuple[str, list[str]]] = []  # (kind, lines) per step
        extern_calls = 0
        for group in self.scheduler.groups:
            if group.is_extern:
                buf = group.nodes[0].buf
                reads = set(group.nodes[0].read_names)
                if isinstance(buf, MultiOutput):
                    step_lines = [f"{buf.name} = {buf.parent.name}[{buf.indices[0]}]"]
                else:
                    assert isinstance(buf, ExternKernel)
                    extern_calls += 1
                    args = [self.value(a) for a in buf.args]
                    args += [f"{k}={self.value(v)}" for k, v in buf.kwargs.items()]
                    note = f"  # fallback: {buf.reason}" if buf.reason else ""
                    step_lines = [f"{buf.name} = {_op_path(buf.kernel, buf.kwargs)}({', '.join(args)}){note}"]
                from ..lowering.fallbacks import EXTERN_BY_DESIGN
                pinned = {buf.name} if not (isinstance(buf, ExternKernel) and buf.kernel in EXTERN_BY_DESIGN) else set()
                steps.append(Step([], reads, pinned=pinned | (reads if pinned else set())))
                lines.append(("extern", step_lines))
                continue
            step, step_lines = self.target.kernel_step(self, group, kernels, removed)
            steps.append(step)
            lines.append(("kernel", step_lines))
        if self.launch_tuner is not None:
            self.launch_tuner.report()
        recyclable = {name for s in steps for name, _ in s.allocs}
        plan = plan_buffers(steps, keep, recyclable)
        out = IndentedBuffer()
        out.writelines(self.target.header(self))
        out.writelines(self.target.definitions(self, kernels))
        out.writeline("")
        out.writeline("")
        if self.dynamic:
            out.writelines(self._check_function(steps))
        out.writeline("def call(args):")
        with out.indent():
            names = self.input_names
            if names:
                out.writeline(f"{', '.join(names)}, = args")
            out.writelines(self.bindings)
            for name, size, negative, site in graph.gather_checks:
                out.writeline(f"check_gather_index({name}, {size}, {negative}, {site!r})")
            for step, (kind, step_lines), frees in zip(steps, lines, plan.frees):
                for name, key in step.allocs:
                    size, stride, dtype = key
                    if name in plan.reuse:
                        out.writeline(f"{name} = {plan.reuse[name]}; del {plan.reuse[name]}  # reuse a dead buffer")
                    else:
                        out.writeline(f"{name} = empty_strided({_const(tuple(size))}, {_const(tuple(stride))}, "
                                      f"device=DEVICE, dtype={dtype})")
                out.writelines(step_lines)
                if frees:
                    out.writeline(f"del {', '.join(frees)}")
            out.writelines(self._write_backs(graph.mutations))
            outs = ", ".join(self.value(o) for o in graph.outputs)
            out.writeline(f"return ({outs}{',' if len(graph.outputs) == 1 else ''})")
        out.writelines(self._benchmark_main())
        return GeneratedModule(out.getvalue(), [k.name for k in kernels], extern_calls, len(plan.reuse))

    def _epilogue_tuner(self) -> Any:
        """An ``epilogue_tuning.EpilogueTuner`` for a static graph with matmul templates, when enabled."""
        from . import epilogue_tuning
        if not self.target.tunes or self.dynamic or not any(g.is_template for g in self.scheduler.groups) \
                or not epilogue_tuning.enabled(self.device):
            return None
        layouts = {b.name: b.layout for b in [*self.inputs, *self.graph.buffers] if b.layout is not None}
        return epilogue_tuning.EpilogueTuner(self.device, layouts, self.dtypes, self.graph.node_info,
                                             self.persistent_rmax, self._kept_names())

    def _launch_tuner(self) -> Any:
        """A ``launch_autotune.LaunchTuner`` for a static graph of Triton kernels, when enabled."""
        from . import launch_autotune
        if not self.target.tunes or self.dynamic or not launch_autotune.enabled(self.device):
            return None
        layouts = {b.name: b.layout for b in [*self.inputs, *self.graph.buffers] if b.layout is not None}
        return launch_autotune.LaunchTuner(self.device, layouts, self.dtypes, self.graph.node_info,
                                           self.persistent_rmax)

    # ------------------------------------------------------------------ dynamic shapes
    def _bind_symbols(self) -> tuple[list[str], list[str]]:
        """(lines binding each size symbol from the inputs, all symbol names), in call() order.

        A scalar input is bound by the unpacking itself; a tensor input binds the symbols that
        are a whole size or stride of it. A symbol no input binds this way cannot be computed.
        """
        graph = self.graph
        bound: set[str] = {name for name, p in zip(graph.input_names, graph.placeholders)
                           if isinstance(p, sympy.Symbol) and p.name == name}
        used: set[str] = set()
        lines: list[str] = []
        for p in [*graph.placeholders, *self.extra_guards]:
            if isinstance(p, sympy.Basic):
                used |= {s.name for s in p.free_symbols}
        for buf in graph.graph_inputs:
            lay = buf.layout
            for kind, values in (("shape", lay.size), ("stride()", lay.stride)):
                for d, v in enumerate(values):
                    if is_static(v):
                        continue
                    used |= {s.name for s in v.free_symbols}
                    if isinstance(v, sympy.Symbol) and v.name not in bound:
                        bound.add(v.name)
                        lines.append(f"{v.name} = {buf.name}.{kind}[{d}]")
        for symbol, text, reads in graph.host_scalars:
            used |= reads
            lines.append(f"{symbol.name} = {text}")
        if used - bound:
            raise NotImplementedError(f"size symbols {sorted(used - bound)} are not a size of any input")
        return lines, sorted(bound | {symbol.name for symbol, _, _ in graph.host_scalars})

    def _check_function(self, steps: list[Step]) -> list[str]:
        """``check(args)``: do the call's inputs fit the symbolic layouts (see the module docstring)?"""
        graph = self.graph
        lines = ["def check(args):"]
        body = [f"{', '.join(self.input_names)}, = args"] if self.input_names else []
        conds_pre: list[str] = []
        # A scalar input that is not its own symbol (a training graph's saved ``numel``, an
        # expression over sizes) must equal its expression, evaluated once the symbols are bound.
        conds_scalars: list[str] = []
        for name, p in zip(graph.input_names, graph.placeholders):
            if isinstance(p, sympy.Basic):
                kind = "int" if p.is_integer else "float"
                conds_pre.append(f"type({name}) is {kind}")
                if not isinstance(p, sympy.Symbol) or p.name != name:
                    conds_scalars.append(f"{name} == {pexpr(p)}")
                continue
            lay = p.layout
            conds_pre.append(f"isinstance({name}, torch.Tensor) and {name}.dim() == {len(lay.size)} and "
                             f"{name}.dtype == {lay.dtype} and {name}.device == DEVICE")
        body.append(f"if not ({' and '.join(conds_pre) or 'True'}):")
        body.append("    return False")
        body += self.bindings
        conds: list[str] = list(conds_scalars)
        for buf in graph.graph_inputs:
            lay = buf.layout
            conds.append(f"{buf.name}.shape == ({''.join(pexpr(s) + ', ' for s in lay.size)})")
            conds.append(f"{buf.name}.stride() == ({''.join(pexpr(s) + ', ' for s in lay.stride)})")
            if not self.target.indexes_int64 and not all(is_static(s) for s in (*lay.size, *lay.stride)):
                span = sympy.Add(1, *[(s - 1) * st for s, st in zip(lay.size, lay.stride)])
                self.int32_limits.append(span)
        for step in steps if not self.target.indexes_int64 else []:
            for _, (size, _stride, _dtype) in step.allocs:
                if not all(is_static(s) for s in size):
                    self.int32_limits.append(sympy.Mul(*size))
        limits = sorted({pexpr(e) for e in self.int32_limits if not is_static(e)})
        if limits:
            conds.append(f"max({', '.join(limits)}{',' if len(limits) == 1 else ''}) < 2 ** 31" if len(limits) > 1
                         else f"{limits[0]} < 2 ** 31")
        conds += [pexpr(g) for g in self.extra_guards]
        body.append(f"return {' and '.join(f'({c})' for c in conds) or 'True'}")
        lines += ["    " + ln for ln in body]
        return lines + ["", ""]

    def _kept_names(self) -> set[str]:
        keep = {b.name for b in self.inputs}
        for value in list(self.graph.outputs) + [v for _, v in self.graph.mutations]:
            if isinstance(value, ReinterpretView):
                keep.add(value.data.name)
            elif isinstance(value, Buffer):
                keep.add(value.name)
        return keep

    def _removed_buffers(self, keep: set[str]) -> set[str]:
        """Buffers computed and consumed inside one kernel: never stored nor allocated."""
        removed = set()
        for group in self.scheduler.groups:
            if group.is_extern:
                continue
            names = group.names
            for n in group.nodes:
                if n.name not in keep and n.users and n.users <= names:
                    removed.add(n.name)
        return removed

    def _check_imports(self) -> list[str]:
        lines = ["import math"] if self.graph.host_scalars else []  # host scalars may call math.floor...
        return lines + (["from pyjit.runtime.checks import check_gather_index"] if self.graph.gather_checks else [])

    def _benchmark_main(self) -> list[str]:
        # Symbolic sizes and scalar inputs take their example values.
        specs: list[Any] = [hint(p) if not isinstance(p, Buffer) else
                            (tuple(hint(s) for s in p.layout.size), tuple(hint(s) for s in p.layout.stride),
                             p.layout.dtype) for p in self.graph.placeholders]
        specs += [(tuple(b.layout.size), tuple(b.layout.stride), b.layout.dtype) for b, _ in self.graph.constants]
        # Scalar inputs (symbolic graphs only) are passed as they are; a static graph's module
        # keeps the plain loop it always had.
        loop = ["    for spec in specs:", "        if not isinstance(spec, tuple):", "            out.append(spec)",
                "            continue", "        size, stride, dtype = spec"] \
            if any(not isinstance(sp, tuple) for sp in specs) else ["    for size, stride, dtype in specs:"]
        return [
            "",
            "",
            "def make_inputs():",
            f"    specs = {_const(specs)}",
            "    out = []",
            *loop,
            "        t = torch.empty_strided(size, stride, device=DEVICE, dtype=dtype)",
            "        t.copy_(torch.randn(size).to(dtype) if dtype.is_floating_point else torch.randint(0, 2, size).to(dtype))",
            "        out.append(t)",
            "    return out",
            "",
            "",
            "def benchmark(iters=100):",
            "    import time",
            "    inputs = make_inputs()",
            "    call(list(inputs))",
            "    sync = torch.cuda.synchronize if DEVICE.type == 'cuda' else (lambda: None)",
            "    sync()",
            "    start = time.perf_counter()",
            "    for _ in range(iters):",
            "        call(list(inputs))",
            "    sync()",
            "    return (time.perf_counter() - start) / iters * 1e3",
            "",
            "",
            'if __name__ == "__main__":',
            '    print(f"{benchmark():.4f} ms per call")',
        ]

