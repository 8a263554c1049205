"""Guard-set serialisation for the warm start (pyjit/guards/serialize.py), on dynamic-shape
guard sets traced by pyjit: symbolic tensor specs with slot bindings and SHAPE relations go
through the recorded (JSON) form and back, and the rebuilt set gives the same verdict as the
original on many inputs, through the C guard tree and through Python. Malformed records and
relation texts that are not plain expressions over ``v[k]`` are refused."""
from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # skipped where torch is absent

import pyjit
from pyjit import _C
from pyjit.frame import policy
from pyjit.guards import serialize
from pyjit.guards.guards import GuardKind, compile_c_tree
from pyjit.guards.shape_relation import ShapeRelation, check_python_source
from pyjit.runtime.frame_store import RebuildError


def _pair(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).sum(-1) + x.size(0)


def _slice(x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
    return x[: y.size(0)] * n + y


def _dynamic_guards(fn: Any, *args: Any, again: tuple[Any, ...] | None = None) -> Any:
    """The guards of ``fn``'s newest entry: every size symbolic from the first call, or
    (``again``) automatic dynamic after a second call, which also makes int scalars symbolic."""
    pyjit.reset()
    with pyjit.config.patch(backend_disk_cache=False):
        jf = pyjit.jit(fn, dynamic=None if again else True)
        jf(*args)
        if again is not None:
            jf(*again)
    state = policy.lookup_target(fn.__code__)
    assert state is not None and state.frames
    return state.frames[-1]


def _round_trip(frame: Any, fn: Any, args: tuple[Any, ...]) -> Any:
    data = json.loads(json.dumps(serialize.dump_guards(frame.guards)))  # what the record holds
    return serialize.load_guards(data, policy.frame_values(fn, frame.arg_names, args))


def _verdicts(guards: Any, fn: Any, names: list[str], calls: list[tuple[Any, ...]]) -> list[bool]:
    tree = compile_c_tree(guards, _C, lambda a: policy.frame_values(fn, names, tuple(a)))
    return [tree.check(fn, args) == _C.PASS for args in calls]


CALLS_PAIR = [(torch.randn(n, 4), torch.randn(m, k)) for n, m, k in
              [(4, 4, 4), (9, 9, 4), (2, 2, 4), (1, 1, 4), (9, 8, 4), (5, 5, 3), (0, 0, 4), (3, 1, 4)]]


def test_dynamic_tensor_guards_and_relations_round_trip() -> None:
    frame = _dynamic_guards(_pair, torch.randn(4, 4), torch.randn(4, 4))
    kinds = [g.kind for g in frame.guards]
    assert GuardKind.SHAPE in kinds
    assert any(g.kind is GuardKind.TENSOR_MATCH and g.expected.bind for g in frame.guards)
    rebuilt = _round_trip(frame, _pair, CALLS_PAIR[0])
    assert [g.describe() for g in rebuilt] == [g.describe() for g in frame.guards]
    for old, new in zip(frame.guards, rebuilt):
        if old.kind is GuardKind.TENSOR_MATCH:
            assert new.expected == old.expected  # sizes with None, strides, bind
        if old.kind is GuardKind.SHAPE:
            assert (new.expected.slots, new.expected.program, new.expected.python_source) == \
                (old.expected.slots, old.expected.program, old.expected.python_source)
            assert [o.text() for o in new.expected.origins] == [o.text() for o in old.expected.origins]
    want = _verdicts(frame.guards, _pair, frame.arg_names, CALLS_PAIR)
    assert want[:3] == [True, True, True] and not want[3] and not want[4]  # size 1; 9 vs 8 rows
    assert _verdicts(rebuilt, _pair, frame.arg_names, CALLS_PAIR) == want
    # the Python view of a rebuilt relation (recompile reasons) agrees as well
    fv = policy.frame_values(_pair, frame.arg_names, CALLS_PAIR[4])
    assert rebuilt.first_failure(fv) is not None and frame.guards.first_failure(fv) is not None


def test_symbolic_scalar_inputs_round_trip() -> None:
    frame = _dynamic_guards(_slice, torch.randn(6, 4), torch.randn(4, 4), 3,
                            again=(torch.randn(8, 4), torch.randn(5, 4), 4))
    scalar = [o for g in frame.guards if g.kind is GuardKind.SHAPE for o in g.expected.origins if o.what == "scalar"]
    assert scalar and scalar[0].source.name() == "L['n']"
    calls = [(torch.randn(n, 4), torch.randn(m, 4), k) for n, m, k in
             [(6, 4, 3), (10, 7, 5), (7, 7, -2), (3, 5, 2), (6, 4, 2.5), (6, 4, True), (6, 1, 3)]]
    rebuilt = _round_trip(frame, _slice, calls[0])
    assert [g.describe() for g in rebuilt] == [g.describe() for g in frame.guards]
    want = _verdicts(frame.guards, _slice, frame.arg_names, calls)
    assert want[:3] == [True, True, True] and not any(want[3:]), want  # y longer; float, bool; y of 1 row
    assert _verdicts(rebuilt, _slice, frame.arg_names, calls) == want


def test_old_guard_format_is_refused() -> None:
    frame = _dynamic_guards(_pair, torch.randn(4, 4), torch.randn(4, 4))
    data = serialize.dump_guards(frame.guards)
    data[0] = {"format": 1}
    with pytest.raises(RebuildError, match="guard format"):
        serialize.load_guards(data, None)


def _damaged(edit: Any) -> list[dict[str, Any]]:
    frame = _dynamic_guards(_pair, torch.randn(4, 4), torch.randn(4, 4))
    data = json.loads(json.dumps(serialize.dump_guards(frame.guards)))
    edit(data)
    return data


def _first(data: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(g for g in data[1:] if g["kind"] == kind and (kind != "tensor" or g["expected"]["bind"]))


@pytest.mark.parametrize("edit,reason", [
    (lambda d: _first(d, "tensor")["expected"].update(bind=[[0, 5, 0]]), "does not name a symbolic dimension"),
    (lambda d: _first(d, "tensor")["expected"].update(bind=[[0, 0, 0], [0, 0, 1]]), "bound twice"),
    (lambda d: _first(d, "tensor")["expected"].update(bind=[["0", 0, 0]]), "is not an int"),
    (lambda d: _first(d, "tensor")["expected"].update(sizes=[None, "4"]), "is not an int"),
    (lambda d: _first(d, "shape")["expected"].update(python="v[7] >= 2"), "indexes"),
    (lambda d: _first(d, "shape")["expected"].update(python="v.__class__ >= 2"), "Attribute"),
    (lambda d: _first(d, "shape")["expected"].update(program=[1, 0, 0, 2]), "stack"),
    (lambda d: _first(d, "shape")["expected"].update(program=[1, 0, 99, 2, 16]), "unknown opcode"),
    (lambda d: _first(d, "shape")["expected"].update(slots=[0, 9]), "out of range"),
    (lambda d: _first(d, "shape")["expected"]["origins"][0].__setitem__(0, ["Q", "x"]), "unknown source tag"),
    (lambda d: _first(d, "shape")["expected"]["origins"][0].__setitem__(2, None), "bad slot origin"),
    (lambda d: _first(d, "shape")["expected"].pop("python"), "KeyError"),
])
def test_malformed_dynamic_guards_are_refused(edit: Any, reason: str) -> None:
    data = _damaged(edit)
    with pytest.raises(RebuildError, match=reason):
        serialize.load_guards(data, None)


@pytest.mark.parametrize("source", [
    "v[1] == v[0]", "v[0] >= 2", "(8*(v[0] // 8)) == v[0]", "(v[0] % 8) == 0", "max(v[0], v[1]) <= 3",
    "v[0] > 2 and v[1] < 3", "not v[0] > 2 or v[1] < 3", "v[0]*v[0] == v[1]", "(((-1)*v[0]) + 2*v[1]) == 1",
    "(v[0] / v[1]) == 1.5000000000000000", "v[0]**3 <= 2**40", "abs(min(v[0], 4) - int(float(v[1]))) != 0",
])
def test_relation_source_accepted(source: str) -> None:
    check_python_source(source, 2)
    # the rebuilt check evaluates it exactly as Python would
    assert ShapeRelation.rebuild("t", (), _origins(2), source, None).holds([6, 3]) == bool(eval(source, {}, {"v": [6, 3]}))


@pytest.mark.parametrize("source", [
    "__import__('os').system('true')", "v[0].__class__", "open('x')", "math.ceil(v[0]) > 1",
    "torch.sym_float(v[0]) == 1.0", "(lambda: 1)()", "[v[0] for _ in ()]", "v[2] > 1", "v[-1] > 1", "v[v[0]] > 1",
    "v > 1", "min > 1", "'a' == v[0]", "v[0] ** v[1] > 1", "v[0] ** 100 > 1", "max(v[0], key=abs) > 1",
    "v[0] if v[1] else v[1]", "x := 1", "v[0] > 1; import os",
])
def test_relation_source_refused(source: str) -> None:
    with pytest.raises(ValueError):
        check_python_source(source, 2)


def _origins(n: int) -> tuple[Any, ...]:
    from pyjit.guards.shape_relation import SlotOrigin
    from pyjit.guards.source import LocalSource

    return tuple(SlotOrigin(LocalSource("x", 0), "size", d) for d in range(n))
