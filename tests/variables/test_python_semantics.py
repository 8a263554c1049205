"""General Python semantics the tracer runs symbolically (unmodified library code):
``__getattribute__``/``__getattr__`` overrides, C methods of builtin bases on user subclasses,
``in``/iteration through a class's own dunders, the frame's own ``**kwargs``, ``inspect.signature``,
slices of ``ModuleList``, ``torch.compiler.is_compiling()``. Each case compares with eager, checks
one graph (no break, ``fullgraph=True``) and, where the trace relied on an object's state, that
changing it gives eager's answer again."""
from __future__ import annotations

import inspect
from collections.abc import MutableMapping

import pytest
import torch

import pyjit

from .helpers import CompileCounter, check_world_change, same

X = torch.randn(4)


def _one_graph(fn, *args, **kwargs):
    counter = CompileCounter()
    jf = pyjit.jit(fn, backend=counter, fullgraph=True)
    same(fn(*args, **kwargs), jf(*args, **kwargs), "result")
    assert counter.graphs == 1
    return jf, counter


# -- __getattribute__ / __getattr__ ------------------------------------------------------------


class AliasConfig:
    """Like transformers' configs: aliases resolved by a Python __getattribute__."""

    attribute_map = {"hidden": "width"}

    def __init__(self) -> None:
        self.width = 3
        self.scale = 2.0

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


CFG = AliasConfig()


def reads_alias(x):
    return x * CFG.hidden + CFG.scale + getattr(CFG, "missing", 1.5) + hasattr(CFG, "width")


def test_getattribute_override_inlined():
    _one_graph(reads_alias, X)


def test_getattribute_override_guards_value():
    check_world_change(reads_alias, (X,), lambda: setattr(CFG, "width", 7), lambda: setattr(CFG, "width", 3))


def test_getattribute_override_guards_alias_map():
    def to_b():
        AliasConfig.attribute_map = {"hidden": "scale"}

    def to_a():
        AliasConfig.attribute_map = {"hidden": "width"}

    check_world_change(reads_alias, (X,), to_b, to_a)


class ObjectGetattribute:
    def __init__(self) -> None:
        self.a = 4

    def __getattribute__(self, key):
        if key == "double":
            return object.__getattribute__(self, "a") * 2
        return object.__getattribute__(self, key)


def test_object_getattribute_called_directly():
    o = ObjectGetattribute()
    _one_graph(lambda x: x * o.double + o.a, X)


class Fallback:
    def __init__(self) -> None:
        self.real = 2

    def __getattr__(self, name):
        if name.startswith("x_"):
            return len(name)
        raise AttributeError(name)


FB = Fallback()


def reads_fallback(x):
    return x * FB.real + FB.x_abc


def test_getattr_fallback_inlined():
    _one_graph(reads_fallback, X)


def test_getattr_fallback_guards_absence():
    # once the instance has the attribute itself, __getattr__ is no longer consulted
    check_world_change(reads_fallback, (X,), lambda: setattr(FB, "x_abc", 100), lambda: FB.__dict__.pop("x_abc", None))


# -- builtin bases, own dunders ---------------------------------------------------------------


class Registry(dict):
    def get(self, key):
        return super().get(str(key)) or {}


REG = Registry({"a": 2, "b": 3})


def test_dict_subclass_super_method():
    def f(x):
        return x * REG.get("a") + len(REG.get("zzz")) + dict.get(REG, "b")

    _one_graph(f, X)
    check_world_change(f, (X,), lambda: dict.__setitem__(REG, "a", 5), lambda: dict.__setitem__(REG, "a", 2))


def test_dict_subclass_iteration_and_in():
    def f(x):
        for k in REG:
            x = x + REG[k]
        return x, "a" in REG, len(REG)

    _one_graph(f, X)


class Interface(MutableMapping):
    _global = {"eager": 1, "fast": 2}

    def __init__(self) -> None:
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._global, **self._local})

    def __len__(self):
        return len(self._global.keys() | self._local.keys())


IFACE = Interface()


def test_mapping_abc_contains_get_iter():
    def f(x):
        n = 0
        for k in IFACE:
            n += IFACE[k]
        return x * n + ("fast" in IFACE) + IFACE.get("fast", 0)

    _one_graph(f, X)


# -- calls ---------------------------------------------------------------------------------------


def test_mutating_own_kwargs():
    def f(x, **kwargs):
        kwargs["scale"] = kwargs.get("scale", 2)
        kwargs.pop("unused", None)
        return x * kwargs["scale"], kwargs

    _one_graph(f, X, unused=1)


def _chunk(a, b, c=3):
    return a + b + c


def test_inspect_signature():
    def f(x):
        return x * len(inspect.signature(_chunk).parameters)

    _one_graph(f, X)


def test_is_compiling_answers_true():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    # As under torch.compile, the traced code takes its "compiling" branch (eager takes the other).
    counter = CompileCounter()
    assert torch.equal(pyjit.jit(f, backend=counter, fullgraph=True)(X), X + 1)
    assert counter.graphs == 1


def test_module_list_slice():
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
            self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))

        def forward(self, x):
            for layer in self.layers[:2]:
                x = layer(x)
            return self.seq[1:](x), len(self.layers[1:])

    with torch.no_grad():
        _one_graph(M(), X)


# -- library helpers ------------------------------------------------------------------------------


def test_typing_constructs_as_isinstance_targets():
    import collections.abc as cabc
    import typing

    def f(x):
        return (x + isinstance({}, cabc.Mapping) + isinstance([1], typing.Sequence)
                + isinstance(3, typing.Union[int, str]) + isinstance(None, int | None) + isinstance(x, typing.Optional[int]))

    _one_graph(f, X)


import functools  # noqa: E402


@functools.lru_cache(None)
def _cached_width(n):
    return n * 2


def test_lru_cache_function_inlined():
    _one_graph(lambda x: x * _cached_width(3), X)


class _WithCachedMethod:
    @functools.lru_cache(None)
    def factor(self, n):
        return n + 1


def test_lru_cache_method_keeps_binding():
    obj = _WithCachedMethod()
    _one_graph(lambda x: x * obj.factor(2), X)


def test_functools_reduce_traced():
    import operator

    _one_graph(lambda x: functools.reduce(operator.mul, x.shape, 1) + functools.reduce(lambda a, b: a + b, [x, x]), X)


def test_effectful_c_function_is_not_frozen():
    # a C function with an effect or a changing answer must run at every call (a graph break),
    # never be folded into the compiled code
    import warnings

    def f(x):
        warnings.warn("careful")
        return x + 1

    counter = CompileCounter()
    jf = pyjit.jit(f, backend=counter)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        f(X)
        jf(X)
        jf(X)
    assert len(rec) == 3
    with pytest.raises(pyjit.GraphBreakError, match="warnings.warn"):
        pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)


def test_disabled_logging_traces_away():
    import logging

    log = logging.getLogger("pyjit.tests.quiet")
    log.setLevel(logging.ERROR)

    def f(x):
        log.debug("value %s", 3)
        log.info("info")
        return x + 1

    _one_graph(f, X)


def test_logging_enabled_later_is_seen():
    import logging

    log = logging.getLogger("pyjit.tests.later")
    log.setLevel(logging.ERROR)
    log.propagate = False
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    log.addHandler(Keep())

    def f(x):
        log.info("value %s", 3)
        return x + 1

    jf = pyjit.jit(f, backend=CompileCounter())
    jf(X)
    assert records == []
    log.setLevel(logging.INFO)
    jf(X)
    assert records == ["value 3"]


# -- exceptions the trace models -----------------------------------------------------------------


class Layers(__import__("collections.abc").abc.Sequence):
    """Iterated through Sequence.__iter__: obj[0], obj[1], ... until IndexError."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError("list index out of range")
        return i * 10

    def __len__(self):
        return self.n


class OldStyle:
    def __getitem__(self, i):
        if i >= 3:
            raise IndexError
        return i + 1


def test_sequence_protocol_iteration_ends_at_index_error():
    layers, old = Layers(3), OldStyle()
    _one_graph(lambda x: [x * v for v in layers] + [x + v for v in old], X)


def test_getattr_fallback_raising_attribute_error_gives_default():
    class Strict:
        def __getattr__(self, name):
            raise AttributeError(name)

    s = Strict()
    _one_graph(lambda x: x + getattr(s, "nope", 2), X)


def test_raise_reports_the_exception():
    def f(x):
        raise ValueError("bad value here")

    with pytest.raises(pyjit.GraphBreakError, match="ValueError: bad value here"):
        pyjit.jit(f, backend=CompileCounter(), fullgraph=True)(X)


# -- custom autograd.Function --------------------------------------------------------------------


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.nn.functional.gelu(x) * ctx.scale

    @staticmethod
    def backward(ctx, g):  # never reached in these tests
        raise AssertionError


def test_autograd_function_apply_without_grad_is_its_forward():
    with torch.no_grad():
        _one_graph(lambda x: _Gelu.apply(x, 2.0) + 1, X)
    _one_graph(lambda x: _Gelu.apply(x, 3.0), X)  # X does not require grad


def test_autograd_function_apply_with_grad_is_one_call_of_the_real_apply():
    # Under grad the call is one opaque node calling the real apply (its backward is traced by
    # pyjit's training backend: tests/variables/test_autograd_function_grad.py).
    x = torch.randn(4, requires_grad=True)
    _, counter = _one_graph(lambda v: _Gelu.apply(v, 2.0), x)


# -- standard library over trackers --------------------------------------------------------------


def test_sorted_min_max_with_traced_key():
    def f(x):
        pairs = sorted([(2, x), (1, x * 2)], key=lambda t: t[0])
        best = max([x, x + 1], key=lambda t: 0)  # equal keys: the first, like Python
        names = sorted({"b": 2, "a": 1}, key=lambda k: -len(k), reverse=True)
        return pairs[0][1] + best, names, min(["bb", "a"], key=len)

    _one_graph(f, X)


def test_copy_and_deepcopy_of_containers():
    import copy

    def f(x):
        a = [x, 1]
        b = copy.copy(a)
        b.append(2)
        d = copy.deepcopy({"k": [1, 2]})
        d["k"].append(3)
        return x * len(a) + len(b) + len(d["k"])

    _one_graph(f, X)


def test_vars_fromkeys_and_join_of_generator():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        a: int = 2

    cfg = Cfg()

    def f(x):
        return x * vars(cfg)["a"] + len(dict.fromkeys(["a", "b"], 0)), "-".join(str(i) for i in range(3))

    _one_graph(f, X)
    check_world_change(lambda x: x * vars(cfg)["a"], (X,), lambda: setattr(cfg, "a", 5), lambda: setattr(cfg, "a", 2))


# -- logging: replayed after the graph, not a graph break ------------------------------------------

import functools  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402

_log = logging.getLogger("pyjit_tests_variables_deferred_logging")
_log_stream = io.StringIO()
_handler = logging.StreamHandler(_log_stream)
_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
_log.addHandler(_handler)
_log.propagate = False


@functools.lru_cache(None)
def _warn_once(self, *args):  # transformers' ``logger.warning_once``
    self.warning(*args)


logging.Logger.pyjit_tests_warn_once = _warn_once


def _logs(x, n):
    y = x * 2
    _log.info(f"scaled by {n}")
    _log.warning("value %d", n)
    _log.debug("hidden at INFO")
    _log.pyjit_tests_warn_once("only once")
    return y + n


def _run_logged(fn, calls):
    _log_stream.seek(0)
    _log_stream.truncate(0)
    _warn_once.cache_clear()
    results = [fn(X, 3) for _ in range(calls)]
    return results, _log_stream.getvalue()


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.ERROR])
def test_logging_is_replayed_as_in_eager(level):
    _log.setLevel(level)
    try:
        explanation = pyjit.explain(_logs)(X, 3)
        assert explanation.break_count == 0, explanation
        eager, eager_text = _run_logged(_logs, 3)
        jf, counter = _one_graph(_logs, X, 3)
        got, got_text = _run_logged(jf, 3)
        same(eager, got, "results")
        assert got_text == eager_text  # the lru_cache wrapper logs once, the rest on every call
        _log.setLevel(logging.CRITICAL)  # the logger's state is read at run time: no recompile
        assert _run_logged(jf, 1)[1] == _run_logged(_logs, 1)[1] == ""
        assert counter.graphs == 1
    finally:
        _log.setLevel(logging.NOTSET)


def test_logging_a_tensor_still_breaks():
    def logs_tensor(x):
        _log.warning("x = %s", x)
        return x + 1

    _log.setLevel(logging.CRITICAL)
    try:
        assert pyjit.explain(logs_tensor)(X).break_count >= 1
        same(logs_tensor(X), pyjit.jit(logs_tensor)(X), "result")
    finally:
        _log.setLevel(logging.NOTSET)


def test_truth_of_functions_and_methods():
    # huggingface_hub's validators: ``elif validator := TABLE.get(origin):`` with functions as values
    table = {int: reads_alias}

    def f(x):
        if _fn := table.get(int):
            x = x + 1
        if CFG.__getattribute__:
            x = x * 2
        if (lambda: 0):
            x = x - 3
        return x

    _one_graph(f, X)
