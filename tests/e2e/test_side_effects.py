"""Side effects under ``pyjit.jit`` happen exactly as in eager code, on every call: in-place
tensor updates (inputs, views of inputs, module buffers), Python mutations (lists, dicts,
globals, object attributes, closure cells) and the global RNG.

Correctness only: the frontend may capture these in a graph, replay them in its replacement
code, or run the frame eagerly; the number of graphs is not asserted here. Each test runs the
same sequence of calls eagerly and jitted from identical starting state and compares results and
the state afterwards.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn as nn

import pyjit

from .support import CountingBackend, assert_same, assert_same_aliasing


pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # tests/e2e/conftest.py


def _jit(fn):
    return pyjit.jit(fn, backend=CountingBackend())


def _compare_calls(fn, make_args, calls=3):
    """Call fn eagerly and jitted ``calls`` times on identical fresh arguments; compare results,
    arguments afterwards and identity of returned inputs."""
    jf = _jit(fn)
    for i in range(calls):
        eager_args, jit_args = make_args(i), make_args(i)
        expected, actual = fn(*eager_args), jf(*jit_args)
        assert_same(expected, actual, f"result of call {i}")
        assert_same(eager_args, jit_args, f"arguments after call {i}")
        assert_same_aliasing(eager_args, expected, jit_args, actual)


def _rand(i, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


def test_inplace_update_of_input_returned():
    def f(x):
        x.add_(1)
        return x

    _compare_calls(f, lambda i: (_rand(i, 4, 3),))


def test_inplace_update_through_view_of_input():
    def f(x):
        x[0].zero_()
        x[:, 1] = 5.0
        return x.sum()

    _compare_calls(f, lambda i: (_rand(i, 4, 3),))


def test_inplace_on_input_then_use():
    def f(x, y):
        y.mul_(x)
        return y + x

    _compare_calls(f, lambda i: (_rand(i, 4), _rand(i + 10, 4)))


def test_append_to_input_list():
    def f(x, out):
        out.append(x * 2)
        return x + 1

    _compare_calls(f, lambda i: (_rand(i, 3), [torch.ones(3)]))


def test_setitem_on_input_dict():
    def f(d):
        d["y"] = d["x"] + 1
        return d["x"] * 2

    _compare_calls(f, lambda i: ({"x": _rand(i, 3)},))


def test_replace_list_element():
    def f(xs):
        xs[0] = xs[0] + 1
        return xs[1] * 2

    _compare_calls(f, lambda i: ([_rand(i, 3), _rand(i + 1, 3)],))


CALLS = 0
HISTORY: list = []


def _global_counter(x):
    global CALLS
    CALLS += 1
    HISTORY.append(CALLS)
    return x * CALLS


def test_global_writes_happen_every_call():
    global CALLS
    x = torch.randn(3)
    CALLS = 0
    HISTORY.clear()
    expected = [_global_counter(x) for _ in range(3)]
    expected_history = list(HISTORY)
    CALLS = 0
    HISTORY.clear()
    jf = _jit(_global_counter)
    actual = [jf(x) for _ in range(3)]
    assert CALLS == 3 and HISTORY == expected_history
    assert_same(expected, actual)


class Tracker:
    def __init__(self):
        self.count = 0
        self.last = None


def test_object_attribute_writes():
    def f(x, t):
        t.count += 1
        t.last = x.sum()
        return x * t.count

    te, tj = Tracker(), Tracker()
    jf = _jit(f)
    for i in range(3):
        x = _rand(i, 4)
        assert_same(f(x, te), jf(x, tj))
        assert tj.count == te.count
        assert_same(te.last, tj.last)


def test_closure_cell_writes():
    def make():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x + n

        return step, lambda: n

    fe, ne = make()
    fj, nj = make()
    jf = _jit(fj)
    for i in range(3):
        x = _rand(i, 3)
        assert_same(fe(x), jf(x))
    assert nj() == ne() == 3


class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
        self.steps = 0

    def forward(self, x):
        self.avg.mul_(0.9).add_(x.mean(0) * 0.1)
        self.steps += 1
        return x - self.avg


def test_module_buffer_and_attribute_updates():
    ref = EMA()
    m = copy.deepcopy(ref)
    jm = pyjit.jit(m, backend=CountingBackend())
    for i in range(3):
        x = _rand(i, 5, 4)
        assert_same(ref(x), jm(x), f"output of call {i}")
        assert_same(ref.avg, m.avg, f"buffer after call {i}")
        assert m.steps == ref.steps


def test_random_ops_follow_the_global_rng():
    def f(x):
        return x + torch.rand_like(x) + torch.randn(x.shape[0])

    jf = _jit(f)
    x = torch.zeros(4)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = f(x)
        after_eager = torch.rand(1)
        torch.manual_seed(seed)
        actual = jf(x)
        after_jit = torch.rand(1)
        assert_same(expected, actual)
        # Tracing must not consume random numbers: the RNG stream continues identically.
        assert_same(after_eager, after_jit)


def test_dropout_in_training_mode_matches_under_same_seed():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    jm = pyjit.jit(m, backend=CountingBackend())
    x = torch.randn(3, 4)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = m(x)
        torch.manual_seed(seed)
        assert_same(expected, jm(x))


def test_inplace_on_input_seen_through_view_argument():
    def f(a, b):
        a.add_(1)
        return b * 2

    jf = _jit(f)
    for _ in range(2):
        xe = torch.randn(3, 4)
        xj = xe.clone()
        assert_same(f(xe, xe[0]), jf(xj, xj[0]))
        assert_same(xe, xj, "mutated input")
    # and with unrelated arguments of the same shapes afterwards
    xe, ye = torch.randn(3, 4), torch.randn(4)
    xj, yj = xe.clone(), ye.clone()
    assert_same(f(xe, ye), jf(xj, yj))


def test_backward_inside_jitted_function():
    def step(x, w):
        loss = (x @ w).square().sum()
        loss.backward()
        return loss.detach()

    jf = _jit(step)
    x = torch.randn(3, 4)
    we = torch.randn(4, 2, requires_grad=True)
    wj = we.detach().clone().requires_grad_(True)
    for _ in range(2):
        assert_same(step(x, we), jf(x, wj))
        assert_same(we.grad, wj.grad, "accumulated grad")


def test_manual_seed_inside_jitted_function():
    def f(x):
        torch.manual_seed(5)
        return x + torch.rand(x.shape)

    jf = _jit(f)
    x = torch.zeros(3)
    assert_same(f(x), jf(x))
    torch.manual_seed(0)
    f(x)
    after_eager = torch.rand(2)
    torch.manual_seed(0)
    jf(x)
    after_jit = torch.rand(2)
    assert_same(after_eager, after_jit, "global RNG after the call")


def test_mutable_default_argument_accumulates():
    def make():
        def f(x, acc=[]):  # noqa: B006  (the Python gotcha, on purpose)
            acc.append(x.sum())
            return x * len(acc)

        return f

    fe, fj = make(), make()
    jf = _jit(fj)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(fe(x), jf(x))
    assert len(fe.__defaults__[0]) == len(fj.__defaults__[0]) == 3


def test_manual_sgd_update_through_data():
    def step(w, g, lr):
        w.data.add_(g, alpha=-lr)
        w.grad = None
        return w.data.norm()

    jf = _jit(step)
    we = torch.randn(4, requires_grad=True)
    wj = we.detach().clone().requires_grad_(True)
    for i in range(3):
        g = _rand(i, 4)
        assert_same(step(we, g, 0.1), jf(wj, g, 0.1), f"step {i}")
        assert_same(we, wj, f"weights after step {i}")
        assert wj.grad is None


# -- side effects replayed in the graph's replacement code (no graph break) ---------------------
# Each case also runs under ``fullgraph=True``: a graph break would raise GraphBreakError, so these
# assert that the mutations are captured (they used to break with kind ``side_effect``).


def _jit_full(fn):
    backend = CountingBackend()
    return pyjit.jit(fn, backend=backend, fullgraph=True), backend


def _compare_full(fn, make_args, calls=3, state=lambda args: args):
    """Like _compare_calls, fullgraph: eager and jitted from identical fresh arguments, then the
    results and the arguments' state (``state(args)``) compared."""
    jf, backend = _jit_full(fn)
    for i in range(calls):
        eager_args, jit_args = make_args(i), make_args(i)
        expected, actual = fn(*eager_args), jf(*jit_args)
        assert_same(expected, actual, f"result of call {i}")
        assert_same(state(eager_args), state(jit_args), f"arguments after call {i}")
    assert backend.frame_count > 0
    return backend


def test_list_mutations_of_input_replayed_in_place():
    def f(x, xs):
        xs.append(x * 2)
        xs.insert(0, x + 1)
        y = xs.pop(1)
        xs[0] = xs[0] * 3
        xs.extend([x, x])
        xs += [x - 1]
        del xs[-2]
        return y + len(xs)

    _compare_full(f, lambda i: (_rand(i, 3), [_rand(i + 5, 3)]))
    jf, _ = _jit_full(f)
    xs = [torch.zeros(3)]
    jf(torch.ones(3), xs)
    assert len(xs) == 4  # the caller's own list object was changed


def test_dict_mutations_of_input_replayed_in_place():
    def f(x, d):
        d["y"] = x + 1
        d.update(z=x * 2)
        d.pop("a")
        d.setdefault("w", 4)
        return d["y"] + len(d)

    _compare_full(f, lambda i: (_rand(i, 3), {"a": _rand(i + 1, 3), "b": 1}))


def test_list_read_again_after_mutation_sees_it():
    def f(x, holder):
        holder.items.append(x)
        return sum(holder.items) + len(holder.items)  # a second read of holder.items

    class Holder:
        def __init__(self):
            self.items = [torch.ones(2)]

    _compare_full(f, lambda i: (_rand(i, 2), Holder()), state=lambda a: a[1].items)


def test_same_list_passed_twice_behaves_like_eager():
    def f(a, b):
        a.append(1)
        b.append(2)
        return torch.ones(1) * len(a)

    jf, backend = _jit_full(f)
    xe, xj = [], []
    assert_same(f(xe, xe), jf(xj, xj))
    assert xe == xj == [1, 2]
    ye, yj = [], []
    assert_same(f(xe, ye), jf(xj, yj))  # distinct now: a guard fails, traced again
    assert (xe, ye) == (xj, yj)
    assert_same(f(xe, xe), jf(xj, xj))
    assert xe == xj


class _Point:
    def __init__(self):
        self.count = 0
        self.a = torch.ones(2)
        self.b = torch.zeros(2)


def _point_state(args):
    return [vars(a) if isinstance(a, _Point) else a for a in args]


def test_attribute_writes_read_back_and_swapped():
    def f(x, t):
        t.count += 1
        t.last = x.sum()
        t.a, t.b = t.b, t.a  # every value is read before the first store is replayed
        return x * t.count + t.last + t.a

    _compare_full(f, lambda i: (_rand(i, 2), _Point()), state=_point_state)


def test_setattr_delattr_getattr_hasattr():
    def f(x, t):
        setattr(t, "z", x + 1)
        delattr(t, "b")
        return getattr(t, "z") * 2, hasattr(t, "b"), hasattr(t, "z"), getattr(t, "b", None)

    _compare_full(f, lambda i: (_rand(i, 2), _Point()), state=_point_state)


def test_attribute_write_through_alias_is_guarded():
    def f(x, a, b):
        a.count = 5
        return x + b.count

    jf, _ = _jit_full(f)
    p, q = _Point(), _Point()
    assert_same(f(torch.ones(1), _Point(), _Point()), jf(torch.ones(1), p, q))
    r = _Point()
    assert_same(jf(torch.ones(1), r, r), torch.ones(1) + 5)  # aliased: not the distinct trace


class _Validated:
    def __init__(self):
        object.__setattr__(self, "log", [])

    def __setattr__(self, name, value):
        self.log.append(name)
        super().__setattr__(name, value)

    @property
    def scaled(self):
        return self._v * 2

    @scaled.setter
    def scaled(self, v):
        self._v = v / 2


def test_python_setattr_and_property_setter_are_inlined():
    def f(x, o):
        o.w = x + 1
        o.scaled = x * 4
        return o.scaled + o.w

    _compare_full(f, lambda i: (_rand(i, 2), _Validated()), state=lambda a: [a[0], vars(a[1])])


COUNTER = 0


def _bump(x):
    global COUNTER
    COUNTER = COUNTER + 1
    y = x + COUNTER  # reads the value assigned above
    return y


def test_global_store_read_back_and_replayed():
    global COUNTER
    x = torch.ones(2)
    COUNTER = 0
    expected = [_bump(x) for _ in range(3)]
    COUNTER = 0
    jf, backend = _jit_full(_bump)
    actual = [jf(x) for _ in range(3)]
    assert COUNTER == 3
    assert_same(expected, actual)
    assert backend.frame_count > 0


def test_global_store_in_an_inlined_function_of_another_module():
    import sys
    import types

    mod = types.ModuleType("pyjit_test_side_effects_mod")
    exec("hits = 0\ndef hit(x):\n    global hits\n    hits += 1\n    return x * hits\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    try:
        def f(x):
            return mod.hit(x) + 1

        jf, _ = _jit_full(f)
        assert_same(jf(torch.ones(2)), torch.ones(2) * 1 + 1)
        assert mod.hits == 1
        jf(torch.ones(2))
        assert mod.hits == 2
    finally:
        del sys.modules[mod.__name__]


def test_nonlocal_store_root_and_inlined_closure():
    def make():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x + n

        return step, lambda: n

    def outer(x, step):
        return step(x) * 2  # the cell belongs to a function passed in

    fe, ne = make()
    fj, nj = make()
    jf, backend = _jit_full(fj)
    for i in range(3):
        assert_same(fe(_rand(i, 3)), jf(_rand(i, 3)))
    assert nj() == ne() == 3
    ge, me = make()
    gj, mj = make()
    jo, _ = _jit_full(outer)
    for i in range(2):
        assert_same(outer(_rand(i, 3), ge), jo(_rand(i, 3), gj))
    assert mj() == me() == 2


class _Stats(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
        self.count = 0

    def forward(self, x):
        self.count += 1
        self.avg = self.avg * 0.9 + x.mean(0) * 0.1  # buffer reassigned: stays a buffer
        self.last = x.sum()
        return x - self.avg + self.last  # reads see the new values


@pytest.mark.parametrize("make", [_Stats, lambda: nn.BatchNorm1d(4)], ids=["reassigned_buffer", "batchnorm"])
def test_module_buffer_and_attribute_updates_compile(make):
    ref = make().train()
    m = copy.deepcopy(ref)
    backend = CountingBackend()
    jm = pyjit.jit(m, backend=backend, fullgraph=True)
    for i in range(3):
        x = _rand(i, 5, 4)
        assert_same(ref(x), jm(x), f"output of call {i}")
        for k, v in ref.state_dict().items():
            assert_same(v, m.state_dict()[k], f"{k} after call {i}")
        assert vars(ref).get("count") == vars(m).get("count")
        assert set(m._buffers) == set(ref._buffers)
    assert backend.frame_count > 0


class _Node:
    def __init__(self, v, parent=None):
        self.v = v
        self.parent = parent
        self.kids = []


class _Leaf(_Node):
    def __init__(self, v):
        super().__init__(v * 2)
        self.extra = 1


def test_objects_created_and_returned():
    def f(x):
        n = _Leaf(x)
        n.kids.append(_Node(x + 1, n))
        return n, n.kids[0].v

    jf, backend = _jit_full(f)
    x = torch.ones(2)
    e, a = f(x), jf(x)
    assert type(a[0]) is _Leaf and a[0].kids[0].parent is a[0]
    assert_same(e[0].v, a[0].v)
    assert_same(e[1], a[1])
    assert a[1] is a[0].kids[0].v  # the same graph output, one object
    assert a[0].extra == 1 and backend.frame_count == 1
    assert jf(x)[0] is not a[0]  # a new object on every call


@dataclasses.dataclass
class _Out:
    a: torch.Tensor
    b: int = 3

    def __post_init__(self):
        self.c = self.b * 2


def test_object_created_stored_into_input_then_mutated():
    def f(x, holder, xs):
        o = _Out(x + 1)
        holder.child = o
        xs.append(o)
        o.b = 7
        o.a = o.a * 2
        return o.c

    jf, backend = _jit_full(f)
    he, hj, le, lj = _Point(), _Point(), [], []
    x = torch.ones(2)
    assert f(x, he, le) == jf(x, hj, lj)
    assert hj.child is lj[0] and hj.child.b == 7 and hj.child.c == 6
    assert_same(he.child, hj.child)


def test_model_output_built_in_the_trace():
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")

    def f(x):
        out = modeling_outputs.BaseModelOutput(last_hidden_state=x + 1, hidden_states=None)
        return out, out[0] + out["last_hidden_state"] + out.last_hidden_state, out.to_tuple()

    jf, backend = _jit_full(f)
    x = torch.ones(2)
    e, a = f(x), jf(x)
    assert type(a[0]) is type(e[0]) and list(a[0].keys()) == list(e[0].keys())
    assert_same(dict(e[0]), dict(a[0]))
    assert_same(e[1:], a[1:])
    assert a[0].hidden_states is None and a[0].last_hidden_state is a[0]["last_hidden_state"]


def test_dynamic_cache_updated_and_created():
    transformers = pytest.importorskip("transformers")

    def update(k, cache):
        kk, vv = cache.update(k, k * 2, 0)
        return kk.sum() + vv.sum()

    def create(k):
        cache = transformers.DynamicCache()
        cache.update(k, k + 1, 0)
        return cache

    jf, backend = _jit_full(update)
    ce, cj = transformers.DynamicCache(), transformers.DynamicCache()
    for i in range(2):
        k = _rand(i, 1, 2, 3, 4)
        assert_same(update(k, ce), jf(k, cj))
        assert cj.get_seq_length() == ce.get_seq_length()
    jc, _ = _jit_full(create)
    k = _rand(0, 1, 2, 3, 4)
    e, a = create(k), jc(k)
    assert type(a) is type(e) and a.get_seq_length() == e.get_seq_length() == 3
    assert_same(e.layers[0].keys, a.layers[0].keys)
    assert_same(e.layers[0].values, a.layers[0].values)


def test_list_built_in_trace_stored_and_returned_is_one_object():
    class Keeper:
        pass

    def f(x, k):
        k.cache = []
        k.cache.append(x + 1)
        k.index = {"a": k.cache}
        n = _Node(x)
        n.kids = k.cache
        return k.cache, n

    jf, _ = _jit_full(f)
    k = Keeper()
    out, n = jf(torch.ones(2), k)
    assert out is k.cache and k.index["a"] is out and n.kids is out
    assert_same(out, [torch.ones(2) + 1])


def test_parameter_free_torch_modules_built_in_forward():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            act = nn.LeakyReLU(0.2)
            self.last_act = act  # escapes: built again by the replay
            return nn.Dropout(p=0.0)(act(self.fc(x))), act

    ref = Net()
    m = copy.deepcopy(ref)
    backend = CountingBackend()
    jm = pyjit.jit(m, backend=backend, fullgraph=True)
    torch.manual_seed(0)
    x = _rand(0, 2, 4)
    (ye, _ae), (yj, aj) = ref(x), jm(x)
    assert_same(ye, yj)
    assert type(aj) is nn.LeakyReLU and aj.negative_slope == 0.2 and m.last_act is aj
    assert "last_act" in m._modules  # Module.__setattr__ registered it, as in eager
    assert backend.frame_count == 1


BREAK_LOG: list = []


def test_mutations_before_and_after_a_graph_break_equal_eager():
    class State:
        def __init__(self):
            self.n = 0
            self.seen = []

    def f(x, s, xs, d):
        s.n += 1
        xs.append(x + 1)
        d["before"] = x * 2
        box = _Node(x * 3)
        s.box = box
        BREAK_LOG.append(len(xs))
        pyjit.graph_break()  # the replay runs before the break: the native code sees the state
        BREAK_LOG.append(len(xs))
        s.seen.append(s.n)
        d["after"] = box.v + 1
        box.v = box.v - 1
        return box, x + s.n

    jf = _jit(f)
    se, sj, xe, xj, de, dj = State(), State(), [], [], {}, {}
    for i in range(3):
        x = _rand(i, 2)
        BREAK_LOG.clear()
        be, re = f(x, se, xe, de)
        log_e = list(BREAK_LOG)
        BREAK_LOG.clear()
        bj, rj = jf(x, sj, xj, dj)
        assert BREAK_LOG == log_e
        assert_same(re, rj)
        assert bj is sj.box
        assert_same(be.v, bj.v)
        assert (se.n, se.seen) == (sj.n, sj.seen)
        assert_same((xe, de), (xj, dj))


def test_inplace_repeat_of_input_list():
    def f(x, xs):
        ys = xs
        ys *= 2
        return x * len(xs)

    _compare_full(f, lambda i: (_rand(i, 2), [1, 2]))


def test_inplace_add_to_input_list_of_constants():
    def f(x, xs):
        ys = xs
        ys += [3]
        return x * len(xs)

    _compare_full(f, lambda i: (_rand(i, 2), [1, 2]))


def test_llama_decoding_steps_update_an_outside_dynamic_cache():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                      num_key_value_heads=2, intermediate_size=64, vocab_size=100)
    model = transformers.LlamaModel(config).eval()

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True)

    jstep, backend = _jit_full(step)
    ce, cj = transformers.DynamicCache(config=config), transformers.DynamicCache(config=config)
    with torch.no_grad():
        for n in (8, 1):
            ids = torch.randint(0, 100, (1, n))
            e, a = step(ids, ce), jstep(ids, cj)
            assert type(a) is type(e) and a.past_key_values is cj
            assert_same(e.last_hidden_state, a.last_hidden_state, exact=False)
            assert cj.get_seq_length() == ce.get_seq_length()
            for le, lj in zip(ce.layers, cj.layers):
                assert_same((le.keys, le.values), (lj.keys, lj.values), exact=False)
    assert backend.frame_count == 2  # one graph per step (static shapes: the length changed)


def _plus_100(t):
    return t + 100


class _WithHooks:
    def __init__(self, scale):
        self.scale = scale
        self.history = []

    def apply(self, x):
        self.history.append(x.shape[0])
        return x * self.scale


def test_built_object_instance_attribute_shadows_method_and_escapes_through_closure_list():
    def make():
        made = []

        def f(x):
            o = _WithHooks(3)
            o.apply = _plus_100  # shadows the method, as in eager
            made.append(o)
            return o.apply(x), _WithHooks.apply(o, x)

        return f, made

    fe, me = make()
    fj, mj = make()
    jf, backend = _jit_full(fj)
    x = torch.ones(2)
    assert_same(fe(x), jf(x))
    assert len(mj) == 1 and type(mj[0]) is _WithHooks and mj[0].history == me[0].history == [2]
    assert mj[0].apply(torch.zeros(1)).item() == 100


class _Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.act = nn.ReLU()  # a submodule: Module.__setattr__ puts it in _modules

    def forward(self, x):
        return self.act(x) * self.s


def test_user_module_built_in_forward_and_stored():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            sc = _Scale(3.0)
            self.sc = sc
            return sc(self.fc(x)), sc

    ref = Net()
    m = copy.deepcopy(ref)
    backend = CountingBackend()
    jm = pyjit.jit(m, backend=backend, fullgraph=True)
    x = _rand(0, 2, 4)
    (ye, se), (yj, sj) = ref(x), jm(x)
    assert_same(ye, yj)
    assert type(sj) is _Scale and m.sc is sj and m._modules["sc"] is sj
    assert list(vars(sj)) == list(vars(se))  # the same Module state, in the same order
    assert {k: type(v) for k, v in vars(sj).items()} == {k: type(v) for k, v in vars(se).items()}
    assert list(sj._modules) == ["act"] and sj.training and sj.s == 3.0
    _, sj2 = jm(x)
    assert sj2 is not sj and sj2._non_persistent_buffers_set is not sj._non_persistent_buffers_set
    assert backend.frame_count == 1


def test_set_returned_is_a_new_object_each_call():
    def f(x):
        return x + 1, {1, 2}

    jf, _ = _jit_full(f)
    a, b = jf(torch.ones(1))[1], jf(torch.ones(1))[1]
    assert a == b == {1, 2} and a is not b


@dataclasses.dataclass
class _Pair:
    n: int
    xs: list = dataclasses.field(default_factory=list)


def test_built_dataclasses_compare_with_their_eq_and_default_factories():
    def f(x):
        a = _Pair(1)
        a.xs.append(x + 1)
        return a, _Pair(2) == _Pair(2), _Pair(2) != _Pair(3), _Pair(1, [1]) == _Pair(1, [2]), _Pair(1).xs

    jf, _ = _jit_full(f)
    e, a = f(torch.ones(1)), jf(torch.ones(1))
    assert_same(e, a)


def _update_list_in_place(a, b, scale):
    xs = [a, b]
    returned = torch.ops.aten._foreach_mul_.Scalar(xs, scale)  # returns None; tensors only in a list
    torch.ops.aten._foreach_add_.List(xs, [b, a], alpha=0.5)
    torch.add(a, 1.0, out=b)  # the tensor written is a keyword argument
    return returned, a * 2


def test_calls_returning_none_with_tensors_in_lists_or_kwargs_are_kept():
    """A torch call that returns None (or a constant) is folded away only when no argument holds
    a tensor -- also inside a list or a keyword argument: such a call updates tensors in place
    (foreach ops, an optimizer's functions) and dropping it would silently lose the update."""
    eager_args = [torch.randn(4), torch.randn(4)]
    jit_args = [t.clone() for t in eager_args]
    expected = _update_list_in_place(*eager_args, 3.0)
    actual = _jit(_update_list_in_place)(*jit_args, 3.0)
    assert_same(expected, actual)
    assert_same(eager_args, jit_args)
