"""Python semantics the symbolic interpreter must reproduce: each function runs eagerly and
through ``pyjit.jit`` (fullgraph, one graph) and the results must be identical."""
from __future__ import annotations

import collections
import dataclasses
import functools
import math
import operator

import pytest
import torch

import pyjit

from .conftest import same

Point = collections.namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Cfg:
    scale: float = 2.0
    act: str = "relu"


def _helper(x, a=1, *rest, k=3, **extra):
    total = x * a + k
    for r in rest:
        total = total + r
    for name, v in extra.items():
        total = total - v
    return total


def _make_closure(factor):
    def inner(t):
        return t * factor

    return inner


_closure = _make_closure(3.0)
_partial = functools.partial(_helper, a=2, k=5)


def f_defaults_kwargs_varargs(x):
    return _helper(x), _helper(x, 2, x, 1.0, k=0, z=4.0)


def f_closure_and_partial(x):
    return _closure(x) + _partial(x)


def f_lambda_and_map(x):
    sq = lambda t: t * t  # noqa: E731
    return list(map(sq, [x, x + 1]))


def f_nested_closure_mutation(x):
    acc = []

    def push(t):
        acc.append(t.sin())

    push(x)
    push(x * 2)
    return torch.stack(acc)


def f_comprehensions(x):
    parts = [x[i] * i for i in range(x.shape[0])]
    d = {f"p{i}": p for i, p in enumerate(parts) if i % 2 == 0}
    return sum(parts), d, tuple(v.sum() for v in d.values())


def f_unpacking(x):
    a, *rest = x.unbind(0)
    (b, c), d = (rest[0], rest[1]), rest[2:]
    return a + b + c, len(d)


def f_zip_reversed_sorted(x):
    ws = [1.0, 2.0, 3.0]
    out = x
    for w, i in zip(reversed(ws), sorted([2, 0, 1])):
        out = out * w + i
    return out


def f_constants(x):
    n = x.shape[-1]
    scale = 1 / math.sqrt(n)
    name = f"dim={n:03d}"
    flag = isinstance(n, int) and hasattr(x, "shape") and not callable(n)
    return x * scale, name, flag, max(n, 2), abs(-n), divmod(n, 3), operator.mul(n, 2)


def f_namedtuple_and_dataclass(x, p: Point, cfg: Cfg):
    y = x * p.x + p.y
    if cfg.act == "relu":
        y = torch.relu(y)
    return Point(y, y * cfg.scale), p._replace(y=1) if False else p.y


def f_tensor_methods_and_attrs(x):
    return x.T.contiguous(), x.mT, x.size(1), x.dim(), x.numel(), x.dtype, x.is_floating_point(), x.ndim


def f_indexing(x):
    return x[0], x[:, 1:], x[..., None], x[x.shape[0] - 1, ::2]


def f_inplace_on_local(x):
    y = x.clone()
    y += 1
    y[0] = 5.0
    y.mul_(2)
    return y


def f_while_constant(x):
    i = 0
    while i < 3:
        x = x + i
        i += 1
    return x


def f_chained_compare_and_boolean(x):
    n = x.shape[0]
    small = 0 < n < 10
    return (x * 2 if small and n != 3 else x * 3), not small or n == 4


def f_dict_methods(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d.get("a") + d.pop("b")
    d.update(e=x.sum())
    keys = list(d.keys())
    return d, keys, "a" in d, len(d)


def f_super_method_module(x):
    class Base(torch.nn.Module):
        def act(self, t):
            return t.relu()

    class Child(Base):
        def act(self, t):
            return super().act(t) * 2

    return x


def f_torch_functions(x):
    w = torch.ones(x.shape[-1], dtype=x.dtype)
    y = torch.nn.functional.gelu(x) @ w
    return torch.cat([y, y.neg()]), torch.where(x > 0, x, torch.zeros_like(x))


def f_min_max_generators(x):
    sizes = [x.shape[0], 7, 3]
    return x[: min(sizes)] * max(s for s in sizes), any(s > 5 for s in sizes), all(sizes)


def f_string_ops(x):
    mode = "Mean".lower()
    parts = "a,b".split(",")
    return (x.mean() if mode.startswith("me") else x.sum()), "-".join(parts), mode.upper()


CASES = [
    (f_defaults_kwargs_varargs, lambda: (torch.randn(4),)),
    (f_closure_and_partial, lambda: (torch.randn(4),)),
    (f_lambda_and_map, lambda: (torch.randn(4),)),
    (f_nested_closure_mutation, lambda: (torch.randn(4),)),
    (f_comprehensions, lambda: (torch.randn(4, 2),)),
    (f_unpacking, lambda: (torch.randn(5, 2),)),
    (f_zip_reversed_sorted, lambda: (torch.randn(3),)),
    (f_constants, lambda: (torch.randn(2, 16),)),
    (f_namedtuple_and_dataclass, lambda: (torch.randn(3), Point(2.0, 0.5), Cfg())),
    (f_tensor_methods_and_attrs, lambda: (torch.randn(3, 4),)),
    (f_indexing, lambda: (torch.randn(4, 6),)),
    (f_inplace_on_local, lambda: (torch.randn(3),)),
    (f_while_constant, lambda: (torch.randn(3),)),
    (f_chained_compare_and_boolean, lambda: (torch.randn(4),)),
    (f_dict_methods, lambda: (torch.randn(3),)),
    (f_torch_functions, lambda: (torch.randn(3, 5),)),
    (f_min_max_generators, lambda: (torch.randn(6, 2),)),
    (f_string_ops, lambda: (torch.randn(3),)),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_matches_eager(fn, make, rec):
    jf = pyjit.jit(fn, backend=rec, fullgraph=True)
    for seed in (0, 1):
        torch.manual_seed(seed)
        args = make()
        same(fn(*args), jf(*args))
    assert len(rec.graphs) == 1


def test_python_only_frame_with_tensor_argument_is_skipped(rec):
    # Builds classes and returns its input: no tensor op, so the frame runs as Python.
    x = torch.randn(2)
    assert pyjit.jit(f_super_method_module, backend=rec)(x) is x
    assert rec.graphs == []


class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.LayerNorm(4), torch.nn.Identity()])
        self.register_buffer("shift", torch.ones(4))
        self.factor = 0.5

    @property
    def doubled(self):
        return self.factor * 2

    def helper(self, t):
        return t * self.doubled + self.shift

    def forward(self, x):
        x = self.lin(x)
        for block in self.blocks:
            x = block(x)
        return self.helper(x), len(self.blocks), [n for n, _ in self.named_parameters()]


def test_module_method_property_and_containers(rec):
    m = Scaler()
    jm = pyjit.jit(m, backend=rec, fullgraph=True)
    x = torch.randn(2, 4)
    same(m(x), jm(x))
    assert len(rec.graphs) == 1
    # The jitted module shares the original's state.
    assert jm.state_dict().keys() == m.state_dict().keys()
    jm.eval()
    assert not m.training and isinstance(jm, Scaler)
    m.factor = 3.0  # an attribute read by the trace: guarded, recompiles, stays correct
    same(m(x), jm(x))
    assert len(rec.graphs) == 2


def test_containers_from_the_frame_are_returned_as_the_same_objects(rec):
    def f(x, cfg, *rest, **kw):
        return x * 2, cfg, rest, kw

    cfg = {"a": [1, 2]}
    out = pyjit.jit(f, backend=rec)(torch.randn(2), cfg, 1, 2, k=3)
    assert out[1] is cfg and out[2] == (1, 2) and out[3] == {"k": 3}


@pyjit.jit
def _jitted_helper(t):
    return t.exp()


def test_calling_a_jitted_function_from_jitted_code_traces_through(rec):
    def f(x):
        return _jitted_helper(x) + 1

    x = torch.randn(3)
    same(x.exp() + 1, pyjit.jit(f, backend=rec, fullgraph=True)(x))
    assert rec.calls() == ["exp", "add"]


def test_globals_of_methods_defined_in_other_modules_are_guarded(rec, tmp_path, monkeypatch):
    (tmp_path / "pyjit_other_mod.py").write_text(
        "SCALE = 2.0\n"
        "class M:\n"
        "    def go(self, x):\n"
        "        return x * SCALE\n"
        "import torch\n"
        "class Mod(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + SCALE\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import pyjit_other_mod as other

    def f(obj, x):
        return obj.go(x)

    def g(mod, x):
        return mod(x)

    jf, jg = pyjit.jit(f, backend=rec), pyjit.jit(g, backend=rec)
    obj, mod, x = other.M(), other.Mod(), torch.randn(3)
    same(f(obj, x), jf(obj, x))
    same(g(mod, x), jg(mod, x))
    other.SCALE = 5.0  # a global of the *other* module, read by inlined methods
    same(f(obj, x), jf(obj, x))
    same(g(mod, x), jg(mod, x))
    assert len(rec.graphs) == 4


def test_globals_of_sourceless_functions_are_guarded_through_their_module(rec, tmp_path, monkeypatch):
    (tmp_path / "pyjit_other_mod2.py").write_text(
        "import torch\n"
        "SCALE = 2.0\n"
        "T = torch.ones(3)\n"
        "def make():\n"
        "    def inner(x):\n"
        "        return x * SCALE + T\n"
        "    return inner\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import pyjit_other_mod2 as other

    def f(x):
        return other.make()(x)  # `inner` is created by a call: no source of its own

    jf = pyjit.jit(f, backend=rec)
    x = torch.randn(3)
    same(f(x), jf(x))
    other.SCALE = 5.0
    same(f(x), jf(x))
    other.T = torch.zeros(3)  # a tensor global of the other module: a graph input read each call
    same(f(x), jf(x))
    assert len(rec.graphs) == 2


def test_itertools_over_constants_and_tensors(rec):
    import itertools

    def f(x, ys):
        pairs = list(itertools.product(range(2), range(3)))
        total = x
        for a, b in itertools.combinations(ys, 2):
            total = total + a * b
        for i, t in zip(itertools.count() if False else range(9), itertools.chain(ys, [x])):
            total = total + i * t
        return total, pairs, list(itertools.islice("abcdef", 2, 4))

    x, ys = torch.randn(3), [torch.randn(3) for _ in range(3)]
    same(f(x, ys), pyjit.jit(f, backend=rec, fullgraph=True)(x, ys))


def test_return_types_fields(rec):
    def f(x):
        r = x.max(dim=0)
        v, i = torch.sort(x, dim=1)
        return r.values + 1, r.indices, v, i, r

    x = torch.randn(3, 4)
    same(f(x), pyjit.jit(f, backend=rec, fullgraph=True)(x))
