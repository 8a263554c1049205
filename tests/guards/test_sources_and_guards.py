"""Sources print as Python expressions and read the same value in every rendering (including the
instructions they emit into generated code); guard sets
compile to the C tree and to Python with identical verdicts and source-form failure reasons."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

from pyjit import _C
from pyjit.guards.guards import GuardKind, GuardSet, TensorSpec, compile_c_tree, compile_python
from pyjit.guards.source import (AttrSource, ClosureSource, FrameValues, GlobalSource, ItemSource, LocalSource,
                                 ModuleDictSource)
from pyjit.trace.pycodegen import PyCodegen, make_function

SCALE = 2.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(2, 2))
        self.mode = "fast"


def _frame(fn, *args):
    closure = {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__ or ())}
    names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    return FrameValues(dict(zip(names, args)), fn.__globals__, closure)


def _make_fn():
    bias = torch.ones(2)

    def fn(self, xs, d):
        return bias, SCALE

    return fn


FN = _make_fn()
SELF = L_SELF = LocalSource("self", 0)
WEIGHT = ModuleDictSource(ModuleDictSource(ModuleDictSource(SELF, "_modules", "layers"), "_modules", "0"), "_parameters", "weight")
SOURCES = [
    (SELF, "L['self']"),
    (AttrSource(SELF, "mode"), "L['self'].mode"),
    (WEIGHT, "L['self'].layers[0].weight"),
    (ItemSource(LocalSource("xs", 1), 1), "L['xs'][1]"),
    (ItemSource(LocalSource("d", 2), "k"), "L['d']['k']"),
    (GlobalSource("SCALE"), "G['SCALE']"),
    (ClosureSource("bias", 0), "C['bias']"),
]


def _args():
    net = Net()
    return (net, [torch.zeros(1), torch.ones(3)], {"k": 5})


@pytest.mark.parametrize("source,name", SOURCES, ids=[s[1] for s in SOURCES])
def test_source_renderings_agree(source, name):
    args = _args()
    fv = _frame(FN, *args)
    assert source.name() == name
    expected = source.get(fv)
    # reconstruct(): the instructions reading it inside generated code with the flat signature
    cg = PyCodegen(FN.__code__)
    source.reconstruct(cg)
    cg.return_value()
    assert make_function(cg.finish("__probe"), FN)(*args) is expected
    # tree_node(): the C guard tree reaches the same object
    tree = _C.GuardTree()
    source.tree_node(tree).check_id(expected, 0)
    assert tree.check(FN, args) == -1


def _guards_for(args):
    net, xs, d = args
    g = GuardSet()
    g.add(GuardKind.ID_MATCH, SELF, net)
    g.add(GuardKind.EQUALS_MATCH, AttrSource(SELF, "mode"), "fast")
    g.add(GuardKind.TENSOR_MATCH, WEIGHT, TensorSpec.of(net.layers[0].weight))
    g.add(GuardKind.TYPE_MATCH, LocalSource("xs", 1), list)
    g.add(GuardKind.LEN_MATCH, LocalSource("xs", 1), 2)
    g.add(GuardKind.TENSOR_MATCH, ItemSource(LocalSource("xs", 1), 1), TensorSpec.of(xs[1]))
    g.add(GuardKind.DICT_KEYS, LocalSource("d", 2), ("k",))
    g.add(GuardKind.EQUALS_MATCH, GlobalSource("SCALE"), 2.0)
    g.add(GuardKind.TENSOR_MATCH, ClosureSource("bias", 0), TensorSpec.of(FN.__closure__[0].cell_contents))
    g.add(GuardKind.GLOBAL_STATE, None, True, extra=torch.is_grad_enabled)
    g.add(GuardKind.DISTINCT, None, extra=(ItemSource(LocalSource("xs", 1), 0), ItemSource(LocalSource("xs", 1), 1)))
    g.add(GuardKind.EQUALS_MATCH, GlobalSource("SCALE"), 2.0)  # duplicate: ignored
    return g


def _variants(args):
    net, xs, d = args
    yield "same", args, None
    yield "other module", (Net(), xs, d), "L['self']: expected the object"
    net2 = Net()
    yield "shape", (net, [xs[0], torch.ones(4)], d), "L['xs'][1].size()[0]: expected 3, got 4"
    yield "dtype", (net, [xs[0], torch.ones(3, dtype=torch.float64)], d), "L['xs'][1].dtype: expected torch.float32, got torch.float64"
    yield "requires_grad", (net, [xs[0], torch.ones(3, requires_grad=True)], d), "L['xs'][1].requires_grad: expected False, got True"
    yield "stride", (net, [xs[0], torch.ones(6)[::2]], d), "L['xs'][1].stride()[0]: expected 1, got 2"
    yield "len", (net, [xs[0], xs[1], xs[1]], d), "len(L['xs']): expected 2, got 3"
    yield "type", (net, tuple(xs), d), "type(L['xs']): expected list, got tuple"
    yield "keys", (net, xs, {"k": 5, "j": 1}), "L['d'].keys(): expected ['k'], got ['k', 'j']"
    yield "alias", (net, [xs[1], xs[1]], d), "distinct(L['xs'][0], L['xs'][1])"
    _ = net2


def test_python_and_c_verdicts_and_reasons_agree():
    args = _args()
    guards = _guards_for(args)
    assert len(guards) == 11
    tree = compile_c_tree(guards, _C, lambda a: _frame(FN, *a))
    check_py = compile_python(guards, FN.__code__, FN)
    for label, variant, reason in _variants(args):
        c_result = tree.check(FN, variant)
        py_ok = check_py(*variant)
        failure = guards.first_failure(_frame(FN, *variant))
        if reason is None:
            assert c_result == -1 and py_ok and failure is None, label
        else:
            assert c_result != -1 and not py_ok, label
            assert failure is not None and reason in failure[1], (label, failure)
            assert c_result == failure[0], label  # the C tree reports the same first failing guard


def test_global_and_attribute_changes_fail_their_guards():
    args = _args()
    guards = _guards_for(args)
    tree = compile_c_tree(guards, _C, lambda a: _frame(FN, *a))
    global SCALE
    old = SCALE
    try:
        SCALE = 3.0
        i = tree.check(FN, args)
        assert guards.guards[i].source == GlobalSource("SCALE")
        assert guards.first_failure(_frame(FN, *args))[1] == "G['SCALE']: expected 2.0, got 3.0"
    finally:
        SCALE = old
    args[0].mode = "slow"
    assert guards.first_failure(_frame(FN, *args))[1] == "L['self'].mode: expected 'fast', got 'slow'"
    assert tree.check(FN, args) != -1


def test_guard_descriptions_are_python_expressions():
    guards = _guards_for(_args())
    text = guards.describe()
    assert "L['self'].mode == 'fast'" in text
    assert "len(L['xs']) == 2" in text
    assert "torch.is_grad_enabled() == True" in text


def test_equals_guard_distinguishes_bool_int_float():
    g = GuardSet()
    g.add(GuardKind.EQUALS_MATCH, LocalSource("n", 0), 1)

    def fn(n):
        return n

    tree = compile_c_tree(g, _C)
    check = compile_python(g, fn.__code__, fn)
    for value, ok in ((1, True), (True, False), (1.0, False), (2, False)):
        assert (tree.check(fn, (value,)) == -1) is ok
        assert check(value) is ok


_ = types


def test_guard_sets_do_not_keep_modules_alive():
    import gc
    import weakref

    m = torch.nn.Linear(2, 2)
    g = GuardSet()
    g.add(GuardKind.ID_MATCH, LocalSource("m", 0), m)
    ref = weakref.ref(m)
    assert "L['m'] is <torch.nn.modules.linear.Linear" in g.describe()
    del m
    gc.collect()
    assert ref() is None
    assert "no longer exists" in g.first_failure(FrameValues({"m": torch.nn.Linear(2, 2)}, {}, {}))[1]


@pytest.mark.parametrize("traced,called,ok", [(0.0, -0.0, False), (-0.0, -0.0, True), (float("nan"), float("nan"), True),
                                              (float("nan"), 1.0, False), (0.0, 0.0, True), (2.5, 2.5, True)])
def test_float_constants_guarded_exactly(traced, called, ok):
    g = GuardSet()
    g.add(GuardKind.EQUALS_MATCH, LocalSource("s", 0), traced)

    def fn(s):
        return s

    assert (compile_c_tree(g, _C).check(fn, (called,)) == -1) is ok
    assert compile_python(g, fn.__code__, fn)(called) is ok
    assert (g.first_failure(FrameValues({"s": called}, {}, {})) is None) is ok


def test_shared_prefixes_of_module_parameters():
    from pyjit.guards.source import LocalSource, ModuleDictSource, shared_prefixes

    self_ = LocalSource("self", 0)
    layers = ModuleDictSource(self_, "_modules", "layers")
    sources = [LocalSource("x", 1)]
    for i in range(2):
        layer = ModuleDictSource(layers, "_modules", str(i))
        sources += [ModuleDictSource(layer, "_parameters", "weight"), ModuleDictSource(layer, "_parameters", "bias")]
    # Shortest first; ``L['self']._modules`` and ``L['self'].layers`` serve the same inputs as the
    # longer ``L['self'].layers._modules``, so only that one of the chain is listed.
    assert [p.name() for p in shared_prefixes(sources)] == [
        "L['self'].layers._modules", "L['self'].layers[0]._parameters", "L['self'].layers[1]._parameters"]
    assert shared_prefixes([sources[1]]) == []  # one input: nothing shared
