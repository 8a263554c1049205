"""Randomised cross-check of the flat-vector call: functions with random signatures
(positional-only, defaults, keyword-only, *args, **kwargs, cell arguments, closures) called
with random valid arguments give the same result through replacement code as plainly."""
from __future__ import annotations

import random

from pyjit import _C

from .core_helpers import Compiler


def make_function(rng: random.Random, index: int):
    names = [f"p{i}" for i in range(rng.randint(0, 4))]
    n_posonly = rng.randint(0, len(names))
    n_defaults = rng.randint(0, len(names))
    kwonly = [f"k{i}" for i in range(rng.randint(0, 3))]
    varargs, varkw = rng.random() < 0.5, rng.random() < 0.5
    parts = []
    for i, n in enumerate(names):
        default = f"={i * 10}" if i >= len(names) - n_defaults else ""
        parts.append(n + default)
        if i == n_posonly - 1:
            parts.append("/")
    if varargs:
        parts.append("*rest")
    elif kwonly:
        parts.append("*")
    parts += [k + ("=-1" if rng.random() < 0.5 else "") for k in kwonly]
    if varkw:
        parts.append("**kw")
    all_names = names + kwonly + (["rest"] if varargs else []) + (["kw"] if varkw else [])
    cell = rng.choice(all_names) if all_names and rng.random() < 0.5 else None
    inner = f"    def inner():\n        return {cell}\n" if cell else ""
    body = ", ".join(all_names + (["inner()"] if cell else []) + ["free"])
    src = (f"def outer(free):\n    def f{index}({', '.join(parts)}):\n{inner.replace(chr(10) + '    ', chr(10) + '        ')}"
           f"        return ({body},)\n    return f{index}\n")
    src = src.replace("    def inner", "        def inner", 1) if cell else src
    ns: dict = {}
    exec(src, ns)
    fn = ns["outer"](f"free{index}")
    spec = (names, n_posonly, n_defaults, kwonly, varargs, varkw)
    return fn, spec, src


def random_call(rng: random.Random, spec):
    names, n_posonly, n_defaults, kwonly, varargs, varkw = spec
    n_required = len(names) - n_defaults
    n_given = rng.randint(n_required, len(names))
    args, kwargs = [], {}
    for i in range(n_given):
        if i < n_posonly or rng.random() < 0.5 or (varargs and i < n_given - 1):
            if kwargs:  # keep positionals before keywords
                kwargs[names[i]] = rng.randint(0, 99)
            else:
                args.append(rng.randint(0, 99))
        else:
            kwargs[names[i]] = rng.randint(0, 99)
    if varargs and len(args) == len(names) and not kwargs:
        args += [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]
    for k in kwonly:
        if rng.random() < 0.7:
            kwargs[k] = rng.randint(0, 99)
    if varkw:
        for j in range(rng.randint(0, 2)):
            kwargs[f"extra{j}"] = j
    return tuple(args), kwargs


def test_random_signatures_same_results():
    rng = random.Random(1234)
    checked = 0
    for index in range(60):
        fn, spec, src = make_function(rng, index)
        calls = [random_call(rng, spec) for _ in range(8)]
        expected = []
        for args, kwargs in calls:
            try:
                expected.append(("ok", fn(*args, **kwargs)))
            except TypeError as e:  # an invalid random call: must fail identically
                expected.append(("err", str(e)))
        comp = Compiler(fn)
        _C.set_callback(comp)
        try:
            got = []
            for args, kwargs in calls:
                try:
                    got.append(("ok", fn(*args, **kwargs)))
                except TypeError as e:
                    got.append(("err", str(e)))
        finally:
            _C.set_callback(None)
        assert got == expected, src
        checked += sum(1 for kind, _ in got if kind == "ok")
        assert len(comp.calls) <= 1
    assert checked > 300
