"""Randomised cross-check: the C guard evaluation against the pure-Python reference
(`pyjit.guards.tree.evaluate`) on random trees over random nested values, including missing
attributes/keys, out-of-range indices, type changes, NaN and -0.0. Seeded: reproducible."""
from __future__ import annotations

import copy
import random

from pyjit import _C
from pyjit.guards.tree import evaluate, format_tree

GLOBAL_INT = 4
GLOBAL_LIST = [1, (2.0, "x"), {"k": None}]


class Box:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"Box({self.__dict__!r})"


def target(a, b, c=None):
    return a


SCALARS = [0, 1, -3, 2**70, 1.5, 0.0, -0.0, float("nan"), "s", "", b"b", None, True, False]


def rand_value(rng: random.Random, depth: int):
    r = rng.random()
    if depth <= 0 or r < 0.35:
        return rng.choice(SCALARS)
    if r < 0.5:
        return tuple(rand_value(rng, depth - 1) for _ in range(rng.randint(0, 3)))
    if r < 0.65:
        return [rand_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if r < 0.8:
        keys = rng.sample(["x", "y", 0, 1, (1, 2), True], rng.randint(0, 3))
        return {k: rand_value(rng, depth - 1) for k in keys}
    return Box(**{n: rand_value(rng, depth - 1) for n in rng.sample(["p", "q", "r"], rng.randint(0, 3))})


def safe_len(value):
    try:
        return len(value)
    except TypeError:
        return None


def children_of(value):
    """(step, child value) pairs that exist, plus some that do not."""
    out = [(("len",), None), (("type",), None)]
    if isinstance(value, (list, tuple)):
        for i in range(len(value)):
            out.append((("item", i), value[i]))
            out.append((("item", i - len(value)), value[i]))
        out.append((("item", len(value) + 1), None))
    if isinstance(value, dict):
        out += [(("item", k), v) for k, v in value.items()]
        out.append((("item", "nope"), None))
    if isinstance(value, Box):
        out += [(("attr", k), v) for k, v in vars(value).items()]
        out.append((("attr", "nope"), None))
    return out


def add_random_checks(rng, node, value, next_id):
    for _ in range(rng.randint(0, 2)):
        kind = rng.choice(["type", "eq", "eq", "id", "not_none", "len", "dict_keys", "fn"])
        cid = next_id()
        if kind == "type":
            node.check_type(type(value) if rng.random() < 0.7 else rng.choice([int, str, list, Box]), cid)
        elif kind == "eq":
            const = value if rng.random() < 0.7 else rng.choice(SCALARS)
            try:
                node.check_eq(const, cid)
            except TypeError:
                node.check_not_none(cid)
        elif kind == "id":
            node.check_id(value if rng.random() < 0.7 else rng.choice([None, GLOBAL_LIST]), cid)
        elif kind == "not_none":
            node.check_not_none(cid)
        elif kind == "len":
            n = safe_len(value) if safe_len(value) is not None and rng.random() < 0.7 else rng.randint(0, 3)
            node.check_len(n, cid)
        elif kind == "dict_keys":
            keys = tuple(value) if isinstance(value, dict) and rng.random() < 0.7 else ("x",)
            node.check_dict_keys(keys, cid)
        else:
            node.check_fn(rng.choice([lambda v: v is None, lambda v: len(v) > 1, lambda v: v == v]), cid)


def random_tree(rng, args):
    tree = _C.GuardTree()
    counter = iter(range(10_000))

    def next_id():
        return next(counter)

    roots = [(tree.arg(i), args[i]) for i in range(len(args))]
    roots.append((tree.arg(len(args) + 2), None))  # out-of-range slot
    roots.append((tree.global_("GLOBAL_INT"), GLOBAL_INT))
    roots.append((tree.global_("GLOBAL_LIST"), GLOBAL_LIST))
    roots.append((tree.global_("NOT_A_GLOBAL"), None))
    roots.append((tree.builtin("len"), len))
    roots.append((tree.frame_args(), tuple(args)))
    frontier = rng.sample(roots, rng.randint(1, len(roots)))
    for _ in range(rng.randint(1, 12)):
        if not frontier:
            break
        node, value = rng.choice(frontier)
        add_random_checks(rng, node, value, next_id)
        kids = children_of(value)
        step, child_value = rng.choice(kids)
        kind = step[0]
        child = {"len": lambda: node.len(), "type": lambda: node.type(),
                 "item": lambda: node.item(step[1]), "attr": lambda: node.attr(step[1])}[kind]()
        if kind == "len":
            child_value = safe_len(value)
        elif kind == "type":
            child_value = type(value)
        frontier.append((child, child_value))
    return tree


def mutate(rng, value, depth=3):
    """A copy of value with one random change somewhere inside (or the same value)."""
    if depth == 0 or rng.random() < 0.3:
        return rand_value(rng, 2) if rng.random() < 0.5 else value
    if isinstance(value, list) and value:
        out = list(value)
        i = rng.randrange(len(out))
        out[i] = mutate(rng, out[i], depth - 1)
        return out
    if isinstance(value, tuple) and value:
        i = rng.randrange(len(value))
        return value[:i] + (mutate(rng, value[i], depth - 1),) + value[i + 1:]
    if isinstance(value, dict) and value:
        out = dict(value)
        k = rng.choice(list(out))
        if rng.random() < 0.2:
            del out[k]
        else:
            out[k] = mutate(rng, out[k], depth - 1)
        return out
    if isinstance(value, Box):
        out = Box(**vars(value))
        if vars(out):
            k = rng.choice(list(vars(out)))
            setattr(out, k, mutate(rng, getattr(out, k), depth - 1))
        return out
    return value


SEEDS = range(12)


def test_c_evaluation_matches_python_reference():
    outcomes = set()
    for seed in SEEDS:
        rng = random.Random(seed)
        for _ in range(60):
            base = tuple(rand_value(rng, 3) for _ in range(3))
            tree = random_tree(rng, base)
            inputs = [base, copy.deepcopy(base)] + [tuple(mutate(rng, v) for v in base) for _ in range(6)]
            for args in inputs:
                got = tree.check(target, args)
                want = evaluate(tree, target, args)
                assert got == want, (f"seed {seed}: C {got} != Python {want} for args={args!r}\n"
                                     f"{format_tree(tree)}")
                outcomes.add(got == -1)
    assert outcomes == {True, False}, "the random trees must both pass and fail"
