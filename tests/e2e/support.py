"""Shared helpers of the end-to-end tests: a counting backend and a strict eager-vs-jit comparison.

The counting backend follows the backend protocol (``backend(gm, example_inputs) -> callable``)
and runs the graph it receives as is, so results must be bit-identical to eager execution.

How graph calls are counted (:func:`count_graph_calls`) -- the corpus's expected numbers use
exactly this rule:

- every FX node whose ``op`` is ``call_function``, ``call_method`` or ``call_module`` counts 1;
  ``placeholder``, ``get_attr`` and ``output`` nodes never count;
- except nodes that only switch global autograd/autocast state (``torch._C._set_grad_enabled``,
  ``torch.autograd.grad_mode`` helpers, inference-mode and autocast enter/exit): how a frontend represents a
  ``torch.no_grad()`` region inside the graph is its choice, so those are not counted. The
  comparison instead checks ``requires_grad`` of every output, which catches a region run with
  the wrong grad mode.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.fx

GRAPH_CALL_OPS = ("call_function", "call_method", "call_module")

# Names of callables that only switch global state; see the module docstring.
_STATE_SWITCH_NAMES = frozenset(
    {
        "_set_grad_enabled",
        "set_grad_enabled",
        "_enter_autocast",
        "_exit_autocast",
        "_enter_grad_mode",
        "_exit_grad_mode",
        "_enter_inference_mode",
        "_exit_inference_mode",
    }
)


def is_state_switch(node: torch.fx.Node) -> bool:
    """True for nodes that only flip grad mode / autocast state (not counted as graph calls)."""
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "")
    return name in _STATE_SWITCH_NAMES


def count_graph_calls(gm: torch.fx.GraphModule) -> int:
    """The corpus's op count of one graph (rule in the module docstring)."""
    return sum(1 for n in gm.graph.nodes if n.op in GRAPH_CALL_OPS and not is_state_switch(n))


def describe_graph_calls(gm: torch.fx.GraphModule) -> list[str]:
    """One short line per counted node, for assertion messages."""
    out = []
    for n in gm.graph.nodes:
        if n.op in GRAPH_CALL_OPS and not is_state_switch(n):
            target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", repr(n.target))
            out.append(f"{n.op}:{target}")
    return out


@dataclasses.dataclass
class CountingBackend:
    """Backend that records every graph it is given and runs it unchanged (eager semantics)."""

    graphs: list[torch.fx.GraphModule] = dataclasses.field(default_factory=list)
    call_counts: list[int] = dataclasses.field(default_factory=list)
    example_inputs: list[list[Any]] = dataclasses.field(default_factory=list)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        self.call_counts.append(count_graph_calls(gm))
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def frame_count(self) -> int:
        return len(self.graphs)

    def graph_listing(self) -> str:
        """All received graphs as readable code, for failure messages."""
        parts = []
        for i, gm in enumerate(self.graphs):
            parts.append(f"--- graph {i} ({self.call_counts[i]} counted calls: {describe_graph_calls(gm)})")
            parts.append(gm.code.strip())
        return "\n".join(parts) if parts else "(no graphs)"


# ----------------------------------------------------------------------------------------------
# comparison


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """Tensors inside ``value`` (args tuples, lists, dicts, namedtuples, dataclasses) in a fixed order."""
    out: list[torch.Tensor] = []
    _collect(value, out, set())
    return out


def _collect(value: Any, out: list[torch.Tensor], seen: set[int]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, out, seen)
    elif isinstance(value, dict):
        for v in value.values():
            _collect(v, out, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _collect(getattr(value, f.name), out, seen)


def assert_same(expected: Any, actual: Any, path: str = "result", *, exact: bool = True) -> None:
    """Structural equality: same container types and keys, tensors equal in value, dtype, shape,
    device and requires_grad (bit-identical and with the same strides when ``exact``, NaNs equal)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a Tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != eager {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)} != eager {tuple(expected.shape)}"
        assert actual.device == expected.device, f"{path}: device {actual.device} != eager {expected.device}"
        assert actual.requires_grad == expected.requires_grad, (
            f"{path}: requires_grad {actual.requires_grad} != eager {expected.requires_grad} "
            "(was a no_grad/enable_grad region run in the wrong grad mode?)"
        )
        if exact:
            # The graph runs the same ops as eager, so the memory layout must match too.
            if actual.numel() > 1:
                assert actual.stride() == expected.stride(), f"{path}: strides {actual.stride()} != eager {expected.stride()}"
            torch.testing.assert_close(actual.detach(), expected.detach(), rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{path}: {m}")
        else:
            torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True, msg=lambda m: f"{path}: {m}")
        return
    assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != eager {type(expected).__name__}"
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != eager {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{i}]", exact=exact)
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys {list(actual)} != eager {list(expected)}"
        for k in expected:
            assert_same(expected[k], actual[k], f"{path}[{k!r}]", exact=exact)
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_same(getattr(expected, f.name), getattr(actual, f.name), f"{path}.{f.name}", exact=exact)
    else:
        assert actual == expected, f"{path}: {actual!r} != eager {expected!r}"


def assert_same_aliasing(eager_args: Any, eager_out: Any, jit_args: Any, jit_out: Any) -> None:
    """Where eager returns one of its input tensors itself, the jitted call must return the
    corresponding input object too (inputs returned unchanged are rebuilt, not copied); and
    two outputs are the same object under jit exactly when they are in eager."""
    eager_in = {id(t): i for i, t in enumerate(tensor_leaves(eager_args))}
    jit_in = tensor_leaves(jit_args)
    eager_leaves, jit_leaves = tensor_leaves(eager_out), tensor_leaves(jit_out)
    for j, (e, a) in enumerate(zip(eager_leaves, jit_leaves)):
        if id(e) in eager_in:
            assert a is jit_in[eager_in[id(e)]], (
                f"output tensor #{j} is input tensor #{eager_in[id(e)]} itself in eager, but a different object under jit"
            )
    # The same tensor returned twice (``return y, y``) is one object under jit too.
    for j in range(len(jit_leaves)):
        for i in range(j):
            if (jit_leaves[i] is jit_leaves[j]) != (eager_leaves[i] is eager_leaves[j]):
                raise AssertionError(
                    f"output tensors #{i} and #{j}: same object in eager is {eager_leaves[i] is eager_leaves[j]}, "
                    f"under jit {jit_leaves[i] is jit_leaves[j]}"
                )


def run_against_eager(case: Any, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                      seeds: tuple[int, ...] = (0, 1), *, exact: bool = True) -> None:
    """Run a corpus case eagerly and through ``wrap(fn)`` on fresh inputs from each seed and
    compare results, input mutations and input identity. The same ``wrap``ped callable serves
    every seed, so the later seeds exercise the cache-hit path."""
    fn = case.build_fn()
    compiled = wrap(fn)
    for seed in seeds:
        eager_args, eager_kwargs = case.make_inputs(seed)
        jit_args, jit_kwargs = case.make_inputs(seed)
        expected = fn(*eager_args, **eager_kwargs)
        actual = compiled(*jit_args, **jit_kwargs)
        where = f"case {case.name!r}, inputs seed {seed}"
        try:
            assert_same(expected, actual, "result", exact=exact)
            assert_same((eager_args, eager_kwargs), (jit_args, jit_kwargs), "inputs after the call", exact=exact)
            assert_same_aliasing((eager_args, eager_kwargs), expected, (jit_args, jit_kwargs), actual)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None


def check_graph_meta(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> list[str]:
    """Problems with the per-node metadata the frontend promises for its graph output:
    every counted node has ``meta["example_value"]`` (fake tensors for tensor results, with the
    dtype, shape and strides of the real result, which is recomputed here by running the graph
    on the real example inputs) and a ``meta["stack_trace"]`` naming a source file and line."""
    from torch._subclasses.fake_tensor import FakeTensor

    problems: list[str] = []

    class _Checker(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            real = super().run_node(n)
            if n.op not in GRAPH_CALL_OPS or is_state_switch(n):
                return real
            if "example_value" not in n.meta:
                if real is not None:  # e.g. operator.setitem returns None: nothing to describe
                    problems.append(f"{n.name}: no meta['example_value']")
            else:
                _compare_meta(n.name, n.meta["example_value"], real, problems, FakeTensor)
            trace = n.meta.get("stack_trace") or ""
            if 'File "' not in trace or ", line " not in trace:
                problems.append(f"{n.name}: meta['stack_trace'] does not name a file and line: {trace!r:.120}")
            return real

    _Checker(gm).run(*[_copy_keep_strides(t) for t in example_inputs])
    return problems


def _copy_keep_strides(t: Any) -> Any:
    """A copy with the same strides (so in-place graph ops cannot touch the caller's tensors)."""
    if not isinstance(t, torch.Tensor):
        return t
    with torch.no_grad():
        out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
    return out.requires_grad_(t.requires_grad)


def _compare_meta(name: str, fake: Any, real: Any, problems: list[str], fake_type: type) -> None:
    if isinstance(real, torch.Tensor):
        if not isinstance(fake, fake_type):
            problems.append(f"{name}: example_value is {type(fake).__name__}, not a FakeTensor")
            return
        for attr in ("dtype", "shape", "device"):
            if getattr(fake, attr) != getattr(real, attr):
                problems.append(f"{name}: example_value {attr} {getattr(fake, attr)} != real {getattr(real, attr)}")
        if fake.shape == real.shape and real.numel() > 1 and fake.stride() != real.stride():
            problems.append(f"{name}: example_value strides {fake.stride()} != real {real.stride()}")
    elif isinstance(real, (tuple, list)):
        if not isinstance(fake, (tuple, list)) or len(fake) != len(real):
            problems.append(f"{name}: example_value {type(fake).__name__} does not match the real {type(real).__name__}")
            return
        for i, (f, r) in enumerate(zip(fake, real)):
            _compare_meta(f"{name}[{i}]", f, r, problems, fake_type)
