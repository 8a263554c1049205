"""The public surface: decorator forms of ``pyjit.jit``, the backend registry
(``pyjit.backends.register``/``list``), backend callables following torch.compile's protocol,
the graph handed to a backend (readable names, example values, stack traces), ``pyjit.reset``,
``pyjit.config.patch``, and that ``import pyjit`` does not import the peer compiler.
"""
from __future__ import annotations

import ast
import functools
import os

import pytest
import torch
import torch.fx

import pyjit

from .support import CountingBackend, assert_same


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def test_decorator_without_parentheses():
    @pyjit.jit
    def f(x, y):
        return x * y - 1

    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(f(x, y), x * y - 1)


def test_decorator_with_arguments():
    backend = CountingBackend()

    @pyjit.jit(backend=backend, fullgraph=True)
    def f(x):
        return x.relu() + 2

    x = torch.randn(5)
    assert_same(x.relu() + 2, f(x))
    assert backend.frame_count == 1


def test_jit_keeps_function_metadata():
    def my_function(x):
        """doc"""
        return x + 1

    j = pyjit.jit(my_function, backend="eager")
    assert j.__name__ == "my_function"
    assert j.__doc__ == "doc"


def test_backends_registry_lists_builtin_names():
    names = pyjit.backends.list()
    assert "eager" in names and "pyjit" in names


def test_register_named_backend_and_use_it():
    seen: list[torch.fx.GraphModule] = []

    def recording(gm, example_inputs):
        seen.append(gm)
        assert all(isinstance(t, torch.Tensor) for t in example_inputs)
        return gm

    pyjit.backends.register("e2e_recording_backend", recording)
    assert "e2e_recording_backend" in pyjit.backends.list()

    def f(x):
        return x.sin() * 2

    j = pyjit.jit(f, backend="e2e_recording_backend")
    x = torch.randn(4)
    assert_same(f(x), j(x))
    assert len(seen) == 1


def test_unknown_backend_name_is_an_error_naming_it():
    def f(x):
        return x + 1

    with pytest.raises(Exception, match="no_such_backend_e2e"):
        pyjit.jit(f, backend="no_such_backend_e2e")(torch.randn(2))


def test_backend_receives_real_example_inputs():
    backend = CountingBackend()

    def f(x, y):
        return x @ y

    x, y = torch.randn(2, 3), torch.randn(3, 4)
    pyjit.jit(f, backend=backend)(x, y)
    inputs = backend.example_inputs[0]
    # Real tensors (not fake/meta) that equal the call's arguments, in placeholder order.
    placeholders = [n for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(inputs) == len(placeholders)
    assert all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == "cpu" for t in inputs)
    assert any(t is x or torch.equal(t, x) for t in inputs)
    assert any(t is y or torch.equal(t, y) for t in inputs)


def test_backend_result_is_what_runs():
    calls = []

    def wrapping_backend(gm, example_inputs):
        def run(*args):
            calls.append(len(args))
            return gm(*args)

        return run

    def f(x):
        return x * 5

    j = pyjit.jit(f, backend=wrapping_backend)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(f(x), j(x))
    assert len(calls) == 3


def test_graph_nodes_are_named_and_annotated():
    backend = CountingBackend()

    def scaled_sum(inputs, weight):
        projected = inputs @ weight
        activated = torch.relu(projected)
        return activated.sum(-1)

    pyjit.jit(scaled_sum, backend=backend)(torch.randn(2, 3), torch.randn(3, 4))
    gm = backend.graphs[0]
    names = [n.name for n in gm.graph.nodes]
    # Readable names derived from the user's variables.
    assert any("inputs" in n for n in names) and any("weight" in n for n in names), names
    this_file = os.path.basename(__file__)
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            ev = node.meta.get("example_value")
            assert isinstance(ev, torch.Tensor), f"{node.name}: no example_value"
            assert this_file in node.meta.get("stack_trace", ""), f"{node.name}: stack_trace does not point at the user's file"


def test_jit_of_functools_partial_and_lambda():
    j = pyjit.jit(lambda x: x * 2 + 1, backend="eager")
    x = torch.randn(3)
    assert_same(x * 2 + 1, j(x))

    def f(x, k):
        return x * k

    p = pyjit.jit(functools.partial(f, k=4.0), backend="eager")
    assert_same(x * 4.0, p(x))


def test_config_patch_is_scoped():
    before = pyjit.config.config.entry_limit
    with pyjit.config.patch(entry_limit=2):
        assert pyjit.config.config.entry_limit == 2
    assert pyjit.config.config.entry_limit == before


def test_reset_is_safe_to_call_repeatedly():
    pyjit.reset()
    pyjit.reset()

    def f(x):
        return x - 2

    j = pyjit.jit(f, backend="eager")
    x = torch.randn(2)
    assert_same(f(x), j(x))
    pyjit.reset()
    assert_same(f(x), j(x))


_FORBIDDEN_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch.aot_autograd")


def _forbidden_uses(path: str) -> list[str]:
    """Imports of the peer compiler and calls of torch.compile in one source file (by AST, so
    docstrings that mention them do not count). torch itself may import them lazily (fake
    tensors do), which is not pyjit's doing, so this is checked on pyjit's source."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                found.append(f"{path}:{node.lineno}: torch.compile(...)")
        for name in names:
            if any(name == m or name.startswith(m + ".") for m in _FORBIDDEN_MODULES):
                found.append(f"{path}:{node.lineno}: import {name}")
    return found


def test_pyjit_source_does_not_use_the_peer_compiler():
    root = os.path.dirname(os.path.abspath(pyjit.__file__))
    found = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                found += _forbidden_uses(os.path.join(dirpath, name))
    assert not found, "pyjit/ must not use torch._dynamo/_inductor/aot_autograd or torch.compile:\n" + "\n".join(found)


@pytest.mark.parametrize("dynamic", [None, False, True])
def test_dynamic_argument_is_accepted_and_results_are_right(dynamic):
    # dynamic=True may still specialise, but must stay correct.
    def f(x):
        return x.reshape(-1) * x.shape[0]

    j = pyjit.jit(f, backend="eager", dynamic=dynamic)
    for n in (2, 3, 2):
        x = torch.randn(n, 4)
        assert_same(f(x), j(x))


def test_enable_state_is_per_thread():
    import threading

    from .support import CountingBackend

    def work_a(x):
        return x.sin() + 1

    def work_b(x):
        return x.cos() - 1

    backends = {"a": CountingBackend(), "b": CountingBackend()}
    barrier = threading.Barrier(2)
    errors = []

    def run(name, fn):
        try:
            with pyjit.enable(backend=backends[name]):
                barrier.wait()  # both threads enabled at once, with different backends
                for _ in range(3):
                    torch.testing.assert_close(fn(torch.ones(3)), fn.__wrapped__(torch.ones(3))
                                               if hasattr(fn, "__wrapped__") else fn(torch.ones(3)))
                barrier.wait()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=("a", work_a)), threading.Thread(target=run, args=("b", work_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    names = {k: {type(g).__name__ for g in be.graphs} for k, be in backends.items()}
    assert all("work_b" not in n for n in names["a"]) and all("work_a" not in n for n in names["b"]), names
    assert any("work_a" in n for n in names["a"]) and any("work_b" in n for n in names["b"]), names


def test_concurrent_first_calls_compile_once():
    import threading

    from .support import CountingBackend

    def work(x):
        y = x
        for _ in range(40):  # a longer trace: the threads really overlap
            y = y * 1.01 + 0.5
        return y

    backend = CountingBackend()
    jf = pyjit.jit(work, backend=backend)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def call():
        try:
            barrier.wait()
            results.append(jf(torch.ones(4)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    expected = work(torch.ones(4))
    for r in results:
        torch.testing.assert_close(r, expected)
    assert backend.frame_count == 1  # one entry, not one per thread
    assert jf(torch.ones(4)) is not None and backend.frame_count == 1
