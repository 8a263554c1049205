"""Object-model, aliasing and state constructs of the differential programs (``diff_programs.py``).

``PRELUDE`` is module-level code every generated program starts with: user classes whose class
attributes count calls (``Acc.instances += 1`` in ``__init__``, ``type(self).count += 1``), a
``__slots__`` class, ``@dataclass`` classes (plain, ``frozen=True``, ``slots=True``) built by a
callee, a class with dunders (``__add__``, ``__getitem__``, ``__len__``, ``__contains__``,
``__bool__``) and a property, a user iterator (``__iter__``/``__next__``), hash keys whose
``__eq__``/``__hash__`` count calls or raise, a property with a counting setter, a module-level
closure counter (``TICK``, its cell changes on every call) and a helper that rebinds a global.
``lin_source(features, seed)`` adds ``LIN``, a small ``nn.Linear`` with seeded weights.

:class:`ConstructStatements` is a mixin of ``diff_programs._Gen``: each ``s_*`` method emits one
statement of the grammar below (names as in ``diff_programs``: ``T`` tensor, ``K`` int, ``F``
float; ``fl`` is a float argument and ``tl`` a list of tensors, both change between calls)::

    S := o = Acc(T, K); T = o.t * Acc.instances | c = Counted(K); type(c).count += 1; K = ...
       | sl = Slotted(T, F); try: sl.c = K except AttributeError: K = K + 1; T = sl.a * sl.b
       | dc = make_dc(T, K) / DC(T, K); dc.k += 1 | FrozenDC(...): assignment raises, replace()
       | SlotsDC(T); T = T * s.w + s.t
       | v = Vec(T, [K, 2, 3]) + 1.0; K = len(v) + v[0] + (2 in v) + bool(v) + v.total
       | K = K + sum(Countdown(n)) | {Key(K): T}[Key(K)] | try: {BadKey(K): 1} except TypeError
       | tp = Temp(K); tp.c = tp.c + 1 (property with a setter)
       | K = bump_global(n) (+ print, then read G_N) | K = TICK() + TICK()
       | pv = lst.pop() / d.pop("name", "zz") / tl.pop(); print(...); use pv   (pop, break, use)
       | del lst[0] / del tl[0] | x += LIN(x) / y += LIN(y) / T = T * 2; print(); T += LIN(T)
       | vw = y.t() / y[0] / y[:, :1] / y.view(-1); print(...); y.mul_(C); T = <vw back to shape>
       | print(f"...{Acc.instances}...{G_N}...") | F = T.sum().item(); if F > C: ... else: ...
       | ml = []; ml.append(T[T > 0]) / tl.append(T[T > C]); K = K + len(ml) + ml[0].numel()
       | T = T + min(2.0, fl) / max(-1.0, fl) | for i in range(n): T = T * 0.5 + fl

Every statement leaves every name defined on every path; all printed values and exception
messages are Python values (no object addresses), so eager and pyjit output can be compared.
"""
from __future__ import annotations

import random

PRELUDE = '''
class Acc:
    instances = 0

    def __init__(self, t, n=0):
        self.t = t
        self.n = n
        Acc.instances += 1


class Counted:
    count = 0

    def __init__(self, v):
        self.v = v
        type(self).count += 1


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


@dataclasses.dataclass
class DC:
    t: object
    k: int = 0


@dataclasses.dataclass(frozen=True)
class FrozenDC:
    a: float
    b: int = 1


@dataclasses.dataclass(slots=True)
class SlotsDC:
    t: object
    w: float = 0.5


def make_dc(t, k):
    dc = DC(t * 2, k)
    dc.k += 1
    return dc


class Vec:
    adds = 0

    def __init__(self, t, items):
        self.t = t
        self.items = list(items)

    def __add__(self, other):
        Vec.adds += 1
        return Vec(self.t + (other.t if isinstance(other, Vec) else other), self.items + [len(self.items)])

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)

    def __contains__(self, v):
        return v in self.items

    def __bool__(self):
        return len(self.items) > 3

    @property
    def total(self):
        return sum(self.items)


class Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


class Key:
    eq_calls = 0
    hash_calls = 0

    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        Key.eq_calls += 1
        return isinstance(other, Key) and self.k == other.k

    def __hash__(self):
        Key.hash_calls += 1
        return hash(self.k)


class BadKey:
    def __init__(self, k):
        self.k = k

    def __hash__(self):
        raise TypeError(f"BadKey {self.k} is not hashable")


class Temp:
    sets = 0

    def __init__(self, c):
        self._c = c

    @property
    def c(self):
        return self._c

    @c.setter
    def c(self, v):
        Temp.sets += 1
        self._c = v


def make_counter():
    count = 0

    def tick():
        nonlocal count
        count += 1
        return count
    return tick


TICK = make_counter()
G_N = 0


def bump_global(v):
    global G_N
    G_N += v
    return G_N
'''


def lin_source(features: int, seed: int) -> str:
    """``LIN = nn.Linear(features, features)`` with weights drawn from a generator of ``seed``
    (each copy of the module gets the same weights)."""
    return f'''
def _make_lin():
    g = torch.Generator().manual_seed({seed})
    lin = torch.nn.Linear({features}, {features})
    with torch.no_grad():
        lin.weight.copy_(torch.randn({features}, {features}, generator=g) * 0.3)
        lin.bias.copy_(torch.randn({features}, generator=g) * 0.1)
    return lin


LIN = _make_lin()
'''


# Statement kinds of the mixin and how often the body picks each (added to diff_programs' kinds).
CONSTRUCT_KINDS = ["cls_counter", "slots", "dataclass", "dunder", "dunder", "property", "global_helper", "tick",
                   "pop_break", "del_item", "view_break", "fstring_counter", "item_branch", "mask_append",
                   "float_arg", "float_arg"]


class ConstructStatements:
    """``s_*`` statement emitters of the constructs above (mixed into ``diff_programs._Gen``)."""

    r: random.Random
    tags: set[str]
    tensors: list[str]
    use_lin: bool

    # provided by _Gen
    def t(self) -> str: ...
    def k(self) -> str: ...
    def f(self) -> str: ...
    def c(self) -> str: ...
    def fresh(self, prefix: str) -> str: ...
    def emit(self, ind: int, text: str) -> None: ...
    def target(self, pool: list[str], prefix: str, top: bool) -> str: ...
    def add(self, pool: list[str], name: str) -> None: ...

    def _int_out(self, top: bool) -> str:
        out = self.target(self.ints, "k", top)  # type: ignore[attr-defined]
        return out

    def _t_out(self, top: bool) -> str:
        return self.target(self.tensors, "t", top)

    def s_cls_counter(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("class_attr")
        h = self.fresh("o")
        if self.r.random() < 0.5:
            out = self._t_out(top)
            self.emit(ind, f"{h} = Acc({self.t()}, {self.k()})\n{out} = {h}.t * Acc.instances + {h}.n")
            self.add(self.tensors, out)
        else:
            out = self._int_out(top)
            self.emit(ind, f"{h} = Counted({self.k()})\ntype({h}).count += 1\n{out} = {h}.v + Counted.count")
            self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_slots(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("slots")
        h, k = self.fresh("sl"), self.k()
        out = self._t_out(top)
        self.emit(ind, f"{h} = Slotted({self.t()}, {self.f()})\ntry:\n    {h}.c = {k}\nexcept AttributeError:\n"
                       f"    {k} = {k} + 1\n{h}.b = {h}.b + 1\n{out} = {h}.a * {h}.b")
        self.add(self.tensors, out)

    def s_dataclass(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("dataclass")
        h = self.fresh("dc")
        choice = self.r.randrange(4)
        if choice == 0:
            out = self._t_out(top)
            self.emit(ind, f"{h} = make_dc({self.t()}, {self.k()})\n{out} = {h}.t + {h}.k")
            self.add(self.tensors, out)
        elif choice == 1:
            out = self._t_out(top)
            self.emit(ind, f"{h} = DC({self.t()}, {self.k()})\n{h}.k += 1\n{h}.t = {h}.t * {h}.k\nbox.hist.append({h}.k)\n"
                           f"{out} = {h}.t")
            self.add(self.tensors, out)
        elif choice == 2:
            k = self.k()
            self.emit(ind, f"{h} = FrozenDC({self.f()}, {k})\ntry:\n    {h}.a = 1.0\n"
                           f"except dataclasses.FrozenInstanceError:\n    {k} = {k} + {h}.b\n"
                           f"{h} = dataclasses.replace({h}, b={k})\nprint(\"frozen\", {h}.b, {h} == FrozenDC({h}.a, {k}))")
        else:
            out = self._t_out(top)
            self.emit(ind, f"{h} = SlotsDC({self.t()})\n{h}.w = {h}.w * 2\n{out} = {self.t()} * {h}.w + {h}.t")
            self.add(self.tensors, out)

    def s_dunder(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("dunder")
        h = self.fresh("v")
        choice = self.r.randrange(5)
        out = self._int_out(top)
        if choice == 0:
            t = self._t_out(top)
            self.emit(ind, f"{h} = Vec({self.t()}, [{self.k()}, 2, 3]) + {self.c()}\n"
                           f"{out} = len({h}) + {h}[0] + (2 in {h}) + (1 if {h} else 0) + {h}.total\n{t} = {h}.t")
            self.add(self.tensors, t)
        elif choice == 1:
            self.emit(ind, f"{out} = {self.k()} + sum(Countdown(n)) + len(list(Countdown(2)))")
        elif choice == 2:
            t = self._t_out(top)
            self.emit(ind, f"{h} = {{Key({self.k()}): {self.t()}, Key(7): {self.t()}}}\n{t} = {h}[Key(7)] * 2\n"
                           f"{out} = len({h}) + (Key(7) in {h})")
            self.add(self.tensors, t)
        elif choice == 3:
            k = self.k()
            self.emit(ind, f"try:\n    {h} = {{BadKey({k}): 1}}\nexcept TypeError as e:\n    print(\"caught\", e)\n"
                           f"{out} = {k} + 1")
        else:
            t = self._t_out(top)
            self.emit(ind, f"{h} = Vec({self.t()}, lst) + Vec({self.t()}, [n])\n{out} = len({h}) + int(bool({h}))\n"
                           f"{t} = {h}.t - {h}.total")
            self.add(self.tensors, t)
        self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_property(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("property")
        h, out = self.fresh("tp"), self._int_out(top)
        self.emit(ind, f"{h} = Temp({self.k()})\n{h}.c = {h}.c + n\n{out} = {h}.c + Temp.sets")
        self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_global_helper(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_global")
        out = self._int_out(top)
        if self.r.random() < 0.5:
            self.emit(ind, f"{out} = bump_global({self.r.choice(['n', '1', self.k()])})")
        else:
            self.emit(ind, f"G_N += 1\nprint(\"G_N\", G_N)\n{out} = G_N + bump_global(1)")
        self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_tick(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("closure")
        out = self._int_out(top)
        self.emit(ind, self.r.choice([f"{out} = TICK() + TICK()", f"{out} = TICK()\nprint(\"tick\", {out})\n{out} = {out} * 10 + TICK()"]))
        self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_pop_break(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("pop_break")
        h = self.fresh("pv")
        choice = self.r.randrange(3)
        if choice == 0 and not getattr(self, "iterating_lst", False):
            f = self.f()
            self.emit(ind, f"if lst:\n    {h} = lst.pop()\n    print(\"popped\", len(lst))\n    {f} = {f} + {h}")
        elif choice == 1:
            k = self.k()
            self.emit(ind, f"{h} = d.pop(\"name\", \"zz\")\nprint(\"keys\", sorted(d))\n{k} = {k} + len({h})")
        else:
            t = self.t()
            self.emit(ind, f"if tl:\n    {h} = tl.pop({self.r.choice(['', '0'])})\n    print(\"tl\", len(tl))\n"
                           f"    {t} = {t} + {h}")

    def s_del_item(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("del_item")
        if self.r.random() < 0.5 and not getattr(self, "iterating_lst", False):
            self.emit(ind, "if lst:\n    del lst[0]")
        else:
            t = self.t()
            self.emit(ind, f"if len(tl) > 1:\n    del tl[0]\n    {t} = {t} + tl[0]")

    def s_inplace_lin(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("inplace_grad")
        choice = self.r.randrange(3)
        if choice == 0:
            self.emit(ind, "x += LIN(x)")
        elif choice == 1:
            self.emit(ind, "y += LIN(y)")
        else:
            out = self._t_out(top)
            self.emit(ind, f"{out} = {self.t()} * 2\nprint(\"lin\")\n{out} += LIN({out})")
            self.add(self.tensors, out)

    def s_view_break(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("view_break")
        h, a = self.fresh("vw"), self.t()
        out = self._t_out(top)
        view, back = self.r.choice([("y.t()", f"{h}.t() + 0"), ("y[0]", f"{a} * {h}"), ("y[:, :1]", f"{a} + {h}"),
                                    ("y.view(-1)", f"{h}.view(y.shape) * 1")])
        self.emit(ind, f"{h} = {view}\nprint(\"view\", tuple({h}.shape))\ny.mul_({self.c()})\n{out} = {back}")
        self.add(self.tensors, out)

    def s_fstring_counter(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("print")
        self.emit(ind, self.r.choice(['print(f"acc={Acc.instances} counted={Counted.count} n={G_N}")',
                                      'print(f"adds={Vec.adds} sets={Temp.sets} keys={Key.hash_calls}")',
                                      f'print(f"k={{{self.k()}}} G_N={{G_N:>3}} box={{box.count}}")']))

    def s_item_branch(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("item")
        f, k, t = self.fresh("f"), self.k(), self.t()
        self.emit(ind, f"{f} = {self.t()}.{self.r.choice(['sum', 'mean', 'max'])}().item()\n"
                       f"if {f} > {self.r.choice(['0', '0.5', '-0.5'])}:\n    {k} = {k} + 1\nelse:\n    {t} = {t} - 1")

    def s_mask_append(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mask")
        h, out, a = self.fresh("ml"), self._int_out(top), self.t()
        if self.r.random() < 0.5:
            self.emit(ind, f"{h} = []\n{h}.append({a}[{a} > 0])\n{out} = {self.k()} + len({h}) + {h}[0].numel()")
        else:
            self.emit(ind, f"tl.append({a}[{a} > {self.c()}])\n{out} = len(tl) + tl[-1].numel()")
        self.add(self.ints, out)  # type: ignore[attr-defined]

    def s_float_arg(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("float_arg")
        out, a = self._t_out(top), self.t()
        choice = self.r.randrange(4)
        if choice == 0:
            self.emit(ind, f"{out} = {a} + min(2.0, fl)")
        elif choice == 1:
            self.emit(ind, f"{out} = {a} * max(-1.0, fl) + abs(fl)")
        elif choice == 2:
            i = self.fresh("i")
            self.emit(ind, f"{out} = {a}\nfor {i} in range(n):\n    {out} = {out} * 0.5 + fl")
        else:
            self.emit(ind, f"{out} = {a} * (fl if fl > 0.3 else -fl) + round(fl * n, 2)")
        self.add(self.tensors, out)

    def alias_return(self) -> str | None:
        """A return statement that returns an input, a view of one, or a new tensor made from it."""
        self.tags.add("alias_return")
        return self.r.choice(["return x", "return x[0]", "return y.t()", "return x.detach()", "return torch.cat([y])",
                              f"return y, {self.t()}", "return y[:, :1], x", "return tl", "return tl[0] if tl else y"])
