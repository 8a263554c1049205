"""The guards the class-member lookups install: printed form, and the same verdict from the C
guard tree and the generated Python checker (the ``DICT_CONTAINS`` kind added for this)."""
from __future__ import annotations

import torch

import pyjit
from pyjit import _C
from pyjit.guards.guards import GuardKind, GuardSet, compile_c_tree, compile_python
from pyjit.guards.source import AttrSource, FrameValues, LocalSource


class Obj:
    def apply(self, v):
        return v + 1


def _fn(obj):
    return obj


def _frame(args):
    return FrameValues({"obj": args[0]}, _fn.__globals__, {})


def test_dict_contains_guard_in_both_compilations():
    obj = Obj()
    g = GuardSet()
    src = AttrSource(LocalSource("obj", 0), "__dict__")
    g.add(GuardKind.DICT_CONTAINS, src, False, extra="apply")
    assert g.guards[0].describe() == "('apply' in L['obj'].__dict__) == False"
    tree = compile_c_tree(g, _C, _frame)
    check = compile_python(g, _fn.__code__, _fn)
    shadowed = Obj()
    shadowed.apply = lambda v: v
    for value, ok in ((obj, True), (shadowed, False), (Obj(), True)):
        assert (tree.check(_fn, (value,)) == -1) is ok
        assert check(value) is ok
        reason = g.first_failure(_frame((value,)))
        assert (reason is None) is ok
    assert "'apply' in L['obj'].__dict__: expected False, got True" in g.first_failure(_frame((shadowed,)))[1]


def test_method_lookup_guards_are_logged(caplog):
    obj = Obj()

    def f(x):
        return obj.apply(x)

    with pyjit.config.patch(raise_on_internal_error=True):
        jf = pyjit.jit(f, backend=lambda gm, ex: gm.forward)
        import logging

        with caplog.at_level(logging.DEBUG):
            from pyjit.logs import get_logger

            get_logger("guards").setLevel(logging.DEBUG)
            try:
                jf(torch.ones(2))
            finally:
                get_logger("guards").setLevel(logging.NOTSET)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "('apply' in C['obj'].__dict__) == False" in text
    assert "C['obj'].__class__.apply is " in text
