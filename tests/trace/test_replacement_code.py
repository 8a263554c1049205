"""Replacement code assembled with pyjit.bytecode: its shape (flat signature, same free variables,
the user's filename), what it references (the compiled graph as a constant, never a new global),
tracebacks through it, debug output, and every supported return form against eager."""
from __future__ import annotations

import collections
import logging
import os
import traceback

import pytest
import torch

import pyjit
from pyjit import _C
from pyjit.bytecode import decode, disassemble
from pyjit.config import patch

from .conftest import same

Pair = collections.namedtuple("Pair", "first second")
OFFSET = torch.full((3,), 0.5)


def _replacement(fn) -> "object":
    entries = _C.cache_entries(fn.__code__)
    assert len(entries) == 1
    return entries[0][1]


def _global_loads(code) -> set[str]:
    return {i.argval for i in decode(code) if i.opname == "LOAD_GLOBAL"}


def _make_closure():
    scale = torch.full((3,), 2.0)

    def with_closure(x, *rest, k=1, **extra):
        return x * scale + OFFSET + k

    return with_closure


def test_shape_constants_and_no_new_globals(rec):
    fn = _make_closure()
    globals_before = dict(fn.__globals__)
    x = torch.randn(3)
    same(fn(x, 5, k=2, z=1), pyjit.jit(fn, backend=rec)(x, 5, k=2, z=1))
    code = _replacement(fn)
    orig = fn.__code__
    assert code.co_filename == orig.co_filename and code.co_firstlineno == orig.co_firstlineno
    assert code.co_freevars == orig.co_freevars
    assert code.co_varnames[:code.co_argcount] == ("x", "k", "rest", "extra")  # flat: frame slot order
    assert not code.co_flags & 0x0C  # no *args/**kwargs flags
    # The compiled graph is a constant of the code (wrapped to run with the frame hook off);
    # nothing was added to the user's globals, and the only globals read are ones the user's
    # code reads too.
    assert any(getattr(getattr(c, "__wrapped__", c), "__self__", None) is rec.graphs[0] for c in code.co_consts)
    assert dict(fn.__globals__).keys() == globals_before.keys()
    assert _global_loads(code) <= _global_loads(orig)
    text = disassemble(code)
    assert "LOAD_DEREF" in text and "'scale'" in text and "LOAD_GLOBAL" in text and "'OFFSET'" in text


def raising_backend(gm, example_inputs):
    def run(*args):
        raise ValueError("raised inside the compiled region")

    return run


def compiled_region(x):
    y = x + 1
    return y * 2


def test_traceback_through_replacement_names_the_users_file():
    with pytest.raises(ValueError, match="inside the compiled region") as info:
        pyjit.jit(compiled_region, backend=raising_backend)(torch.randn(2))
    frames = traceback.extract_tb(info.tb)
    code = compiled_region.__code__
    body = range(code.co_firstlineno, code.co_firstlineno + 3)
    assert any(f.filename == __file__ and f.lineno in body and f.name.startswith("__pyjit_compiled_region")
               for f in frames), [(f.filename, f.lineno, f.name) for f in frames]


def test_bytecode_log_and_debug_dir(tmp_path, caplog):
    with patch(debug_dir=str(tmp_path)), caplog.at_level(logging.INFO, logger="pyjit.bytecode"):
        pyjit.jit(compiled_region, backend="eager")(torch.randn(2))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "replacement code for compiled_region" in logged and "RETURN_VALUE" in logged
    names = os.listdir(tmp_path)
    graph = [n for n in names if n.endswith("_graph.py")]
    repl = [n for n in names if n.endswith("_replacement.txt")]
    assert len(graph) == 1 and repl == [graph[0].replace("_graph.py", "_replacement.txt")]
    dumped = (tmp_path / repl[0]).read_text()
    assert "compiled_region" in dumped and "BINARY_SUBSCR" in dumped  # reads the graph's output


def ret_input(x, y):
    z = y * 3
    return x, z


def ret_constants(x):
    return x.sin(), None, 3, -0.0, "text", (1, 2.5), b"\x00"


def ret_containers(x, d):
    y = x.cos()
    return [y, (x, [y.sum()])], {"a": y, 1: d, "nested": {"x": x}}


def ret_namedtuple(x):
    return Pair(x + 1, 7), torch.max(x.view(2, 2), 0)


def ret_ordered(x, od):
    new = od.copy()  # an OrderedDict built by the trace: rebuilt as OrderedDict({...})
    new["b"] = x * 2
    return new


def ret_varargs(x, *rest, scale=1.0, **kw):
    return x * scale, rest, kw


def ret_cell_argument(x, w):
    inner = lambda: w  # noqa: E731  (w is a cell variable of this frame)
    return x @ inner() + w.sum()


def ret_out_name(___graph_out):
    return ___graph_out + 1, ___graph_out


CASES = {
    "input": (ret_input, lambda: (torch.randn(3), torch.randn(3)), {}),
    "constants": (ret_constants, lambda: (torch.randn(3),), {}),
    "containers": (ret_containers, lambda: (torch.randn(3), {"k": 1}), {}),
    "namedtuple": (ret_namedtuple, lambda: (torch.randn(4),), {}),
    "ordered_dict": (ret_ordered, lambda: (torch.randn(2), collections.OrderedDict(z=1, a=2)), {}),
    "varargs": (ret_varargs, lambda: (torch.randn(2), 1, "a"), {"scale": 2.0, "extra": 3}),
    "cell_argument": (ret_cell_argument, lambda: (torch.randn(2, 2), torch.randn(2, 2)), {}),
    "out_name": (ret_out_name, lambda: (torch.randn(2),), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_return_forms_match_eager(name, rec):
    fn, make_args, kwargs = CASES[name]
    args = make_args()
    expected = fn(*args, **kwargs)
    jitted = pyjit.jit(fn, backend=rec)
    for _ in range(2):  # first call compiles, second runs the cached replacement code
        got = jitted(*args, **kwargs)
        same(expected, got)
        assert type(got) is type(expected)
    assert len(rec.graphs) == 1 and len(_C.cache_entries(fn.__code__)) == 1


def test_returned_inputs_are_the_same_objects(rec):
    x, y = torch.randn(3), torch.randn(3)
    d = {"k": 1}
    jitted_input = pyjit.jit(ret_input, backend=rec)
    jitted_containers = pyjit.jit(ret_containers, backend=rec)
    for _ in range(2):
        assert jitted_input(x, y)[0] is x
        assert jitted_containers(x, d)[1][1] is d
        assert jitted_containers(x, d)[0][1][0] is x


class _Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_shared_bases_of_graph_inputs_are_read_once(rec):
    # Each layer's weight and bias pass through L['self'].layers._modules and that layer's
    # _parameters: the replacement reads those into locals once instead of once per input.
    model = _Stack()
    x = torch.randn(2, 4)
    with torch.no_grad():
        same(model(x), pyjit.jit(model, backend=rec)(x))
    attrs = [i.argval for i in decode(_replacement(_Stack.forward)) if i.opname == "LOAD_ATTR"]
    assert attrs.count("_modules") == 2 and attrs.count("_parameters") == 3


class _Holder:
    def __init__(self, inner) -> None:
        self.inner = inner


def test_shared_bases_are_read_again_after_the_side_effects(rec):
    # ``box.inner`` is read once for the two graph inputs; the replayed side effect rebinds it,
    # and the returned ``box.inner.w`` is read after that, as eager reads it.
    def fn(box, x):
        y = x * box.inner.w + box.inner.b
        box.inner = _Holder(None)
        box.inner.w = y
        return y, box.inner.w

    def fresh():
        inner = _Holder(None)
        inner.w, inner.b = torch.full((3,), 2.0), torch.full((3,), 1.0)
        return _Holder(inner)

    x = torch.randn(3)
    want_box, got_box = fresh(), fresh()
    jf = pyjit.jit(fn, backend=rec)
    for _ in range(2):
        want_box, got_box = fresh(), fresh()
        want, got = fn(want_box, x), jf(got_box, x)
        same(want, got)
        same(want_box.inner.w, got_box.inner.w)
