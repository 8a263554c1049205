"""Seeded generator of plain-Python differential programs: no tensor at all.

pyjit sees every frame of a jitted function, tensors or not; a function without tensor work must
behave exactly as in CPython. Each program is a module with the same interface as
``diff_programs.py`` (``build() -> (fn, peek)``, ``make_inputs(call)``, globals ``G_*``), starting
with ``diff_constructs.PRELUDE`` (its classes hold Python values here) and these helpers::

    def fact(n)  (recursive)        def fib(n, memo)  (recursive, memo dict)
    def evens(n)  (a generator)     def walk(node)  (recursion over nested lists)

``fn(n, s, lst, d, box, fl)``: ``n`` an int, ``s`` a string, ``lst`` a list of ints, ``d`` a
dict, ``box`` a ``Box`` and ``fl`` a float, all different on each of the three calls. Grammar of
the body (``K`` int, ``S`` str variables; nested bodies only rebind existing names)::

    S := K = fact(n % 6) + K | K = fib(K % 12, G_MEMO) | K = sum(evens(n)) | K = walk([lst, [K, [n]]])
       | S = S.upper() + str(K) | S = "-".join(sorted(S.split(","))) | S = S[::-1] | S = f"{S}:{K:>3}"
       | K = S.count("a") + len(S.replace("b", "")) | d[S] = K | K = d.get("k", 0) + len(d)
       | d.setdefault("hist", []).append(K) | K = sum(v for v in d.values() if isinstance(v, int))
       | lst.append(K) | lst.sort(key=lambda v: (v % 3, v)) | if lst: K = K + lst.pop() | del lst[0]
       | K = min(K, fl) / max(...) as int | K = K + round(fl * n)
       | objects of the prelude (Acc, Counted, Slotted, DC, FrozenDC, Vec, Countdown, Key, Temp)
       | K = bump_global(n) | G_LOG.append(K) | K = TICK() + TICK() | box.count += 1
       | calls += 1 (nonlocal, when fn is a closure)
       | for i in range(n): S+ | for i, v in enumerate(sorted(d)): S+ | if <cond>: S+ else: S+
       | try: K = lst[K] except IndexError: K = -1 | if n == C: raise ValueError(f"...")
       | print(...) / print(f"...")
    return (K, S, ...) | {"k": K, "s": S} | [lst, d]
"""
from __future__ import annotations

import random

from .diff_constructs import PRELUDE

HELPERS = '''
G_LOG = []
G_MEMO = {}


class Box:
    def __init__(self):
        self.count = 0
        self.hist = []


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def fib(n, memo):
    if n < 2:
        return n
    if n not in memo:
        memo[n] = fib(n - 1, memo) + fib(n - 2, memo)
    return memo[n]


def evens(n):
    for i in range(n):
        if i % 2 == 0:
            yield i * 2


def walk(node):
    if isinstance(node, list):
        return sum(walk(v) for v in node)
    return int(node)
'''


class _PyGen:
    def __init__(self, seed: int):
        self.seed = seed
        self.r = random.Random(seed)
        self.ints = ["k0"]
        self.strs = ["s0"]
        self.lines: list[str] = []
        self.counter = 0
        self.closure = self.r.random() < 0.4
        self.iterating = False

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, ind: int, text: str) -> None:
        for line in text.split("\n"):
            self.lines.append("    " * ind + line)

    def k(self) -> str:
        return self.r.choice(self.ints)

    def s(self) -> str:
        return self.r.choice(self.strs)

    def target(self, pool: list[str], prefix: str, top: bool) -> str:
        if top and self.r.random() < 0.6:
            name = self.fresh(prefix)
            pool.append(name)
            return name
        return self.r.choice(pool)

    def stmt(self, ind: int, depth: int, top: bool) -> None:
        r = self.r
        kinds = ["int", "int", "str", "str", "dict", "list", "object", "object", "state", "print", "try"]
        if depth < 2:
            kinds += ["for", "if"]
        if top:
            kinds.append("raise")
        getattr(self, "s_" + r.choice(kinds))(ind, depth, top)

    def block(self, ind: int, depth: int) -> None:
        for _ in range(self.r.randrange(1, 3)):
            self.stmt(ind, depth, top=False)

    def s_int(self, ind: int, depth: int, top: bool) -> None:
        src = self.k()
        expr = self.r.choice([f"fact(n % 6) + {src}", f"fib(abs({src}) % 12, G_MEMO)", f"sum(evens(n)) - {src}",
                              f"walk([lst, [{src}, [n]]])", f"int(min({src}, fl)) + int(max(-1.0, fl))",
                              f"{src} + round(fl * n)", f"({src} * 7 + n) % 11", f"divmod({src}, 3)[1] + len(s)"])
        self.emit(ind, f"{self.target(self.ints, 'k', top)} = {expr}")

    def s_str(self, ind: int, depth: int, top: bool) -> None:
        src, k = self.s(), self.k()
        expr = self.r.choice([f"{src}.upper() + str({k})", f'"-".join(sorted({src}.split(",")))', f"{src}[::-1]",
                              f'f"{{{src}}}:{{{k}:>3}}"', f'{src}.replace("a", "b")[:8]', f'{src} * (n % 3)',
                              f'"".join(c for c in {src} if c not in "aeiou")'])
        if self.r.random() < 0.3:
            out = self.target(self.ints, "k", top)
            self.emit(ind, f'{out} = {src}.count("a") + len({src}.replace("b", ""))')
        else:
            self.emit(ind, f"{self.target(self.strs, 's', top)} = {expr}")

    def s_dict(self, ind: int, depth: int, top: bool) -> None:
        k = self.k()
        self.emit(ind, self.r.choice([f"d[{self.s()}] = {k}", f'{k} = d.get("k", 0) + len(d)',
                                      f'd.setdefault("hist", []).append({k})',
                                      f"{k} = sum(v for v in d.values() if isinstance(v, int))",
                                      f'{k} = {k} + len(str(d.pop("tmp", "none")))',
                                      "d.update({str(i): i for i in range(n)})"]))

    def s_list(self, ind: int, depth: int, top: bool) -> None:
        k = self.k()
        options = [f"if lst:\n    {k} = {k} + lst[-1]", "lst.sort(key=lambda v: (v % 3, v))",
                   f"{k} = sum(v * v for v in lst) + len([v for v in lst if v > {k}])"]
        if not self.iterating:
            options += [f"lst.append({k})", f"if lst:\n    {k} = {k} + lst.pop()", "if lst:\n    del lst[0]",
                        f"lst.insert(0, {k} % 5)"]
        self.emit(ind, self.r.choice(options))

    def s_object(self, ind: int, depth: int, top: bool) -> None:
        h, k, s = self.fresh("o"), self.k(), self.s()
        out = self.target(self.ints, "k", top)
        self.emit(ind, self.r.choice([
            f"{h} = Acc({s}, {k})\n{out} = {h}.n + Acc.instances + len({h}.t)",
            f"{h} = Counted({k})\ntype({h}).count += 1\n{out} = {h}.v + Counted.count",
            f"{h} = Slotted({k}, n)\ntry:\n    {h}.c = 1\nexcept AttributeError as e:\n    print(\"slots\", e)\n{out} = {h}.a + {h}.b",
            f"{h} = make_dc({k}, n)\n{out} = {h}.t + {h}.k",
            f"{h} = FrozenDC(fl, {k})\n{out} = 0\ntry:\n    {h}.b = 0\nexcept dataclasses.FrozenInstanceError:\n    {out} = {h}.b + 1",
            f"{h} = SlotsDC({k})\n{h}.w = {h}.w + n\n{out} = int({h}.t * {h}.w)",
            f"{h} = Vec({k}, lst) + n\n{out} = len({h}) + ({k} in {h}) + int(bool({h})) + {h}.total",
            f"{out} = {k} + sum(Countdown(n)) + len(list(Countdown(3)))",
            f"{h} = {{Key({k}): 1, Key(n): 2}}\n{out} = {h}.get(Key(n), 0) + len({h})",
            f"try:\n    {h} = {{BadKey({k}): 1}}\nexcept TypeError as e:\n    print(\"caught\", e)\n{out} = {k} - 1",
            f"{h} = Temp({k})\n{h}.c = {h}.c * 2\n{out} = {h}.c + Temp.sets",
            f"{h} = DC({s}, {k})\n{h}.k += len({h}.t)\nbox.hist.append({h}.k)\n{out} = {h}.k",
        ]))
        if out not in self.ints:
            self.ints.append(out)

    def s_state(self, ind: int, depth: int, top: bool) -> None:
        k = self.k()
        options = [f"{k} = bump_global(n)", f"G_LOG.append({k})", f"{k} = TICK() + TICK()", "box.count += 1",
                   f'print("tick", TICK())\n{k} = {k} + G_N']
        if self.closure:
            options += ["calls += 1", f"acc = acc + {k}"]
        self.emit(ind, self.r.choice(options))

    def s_print(self, ind: int, depth: int, top: bool) -> None:
        self.emit(ind, self.r.choice([f'print("k", {self.k()}, {self.s()!s}, n)', f'print(f"{{{self.s()}!r}} {{{self.k()}:04d}}")',
                                      'print(sorted(d.items(), key=str), lst)',
                                      'print(f"acc={Acc.instances} counted={Counted.count} G_N={G_N} box={box.count}")']))

    def s_try(self, ind: int, depth: int, top: bool) -> None:
        k = self.k()
        self.emit(ind, self.r.choice([f"try:\n    {k} = lst[{k}]\nexcept IndexError:\n    {k} = -1",
                                      f'try:\n    {k} = {k} + d["missing"]\nexcept KeyError as e:\n    print("missing", e)',
                                      f"try:\n    {k} = 10 // ({k} - {k})\nexcept ZeroDivisionError:\n    {k} = {k} + 2\n"
                                      f"finally:\n    box.count += 1"]))

    def s_raise(self, ind: int, depth: int, top: bool) -> None:
        self.emit(ind, self.r.choice([f'if n == {self.r.randrange(4)}:\n    raise ValueError(f"bad n={{n}} k={{{self.k()}}}")',
                                      f'if {self.k()} > 40:\n    raise KeyError(("big", {self.k()}))']))

    def s_for(self, ind: int, depth: int, top: bool) -> None:
        i = self.fresh("i")
        if self.r.random() < 0.5:
            self.emit(ind, f"for {i} in range(n):")
        else:
            self.emit(ind, f"for {i}, key_{i} in enumerate(sorted(d, key=str)):")
        self.ints.append(i)
        outer, self.iterating = self.iterating, True
        self.block(ind + 1, depth + 1)
        self.iterating = outer
        self.ints.remove(i)

    def s_if(self, ind: int, depth: int, top: bool) -> None:
        cond = self.r.choice(["n > 1", f"{self.k()} % 2 == 0", f'"a" in {self.s()}', "len(lst) > 2", "fl > 0.5",
                              "box.count > 0", "Acc.instances > 1", "G_N > 2"])
        self.emit(ind, f"if {cond}:")
        self.block(ind + 1, depth + 1)
        if self.r.random() < 0.5:
            self.emit(ind, "else:")
            self.block(ind + 1, depth + 1)

    def body(self) -> list[str]:
        ind = 2 if self.closure else 1
        self.emit(ind, "global G_N")
        if self.closure:
            self.emit(ind, "nonlocal calls, acc")
        self.emit(ind, "k0 = n * 3 - len(lst)\ns0 = s + str(n)")
        for _ in range(self.r.randrange(3, 8)):
            self.stmt(ind, 0, top=True)
        ks, ss = self.r.sample(self.ints, min(2, len(self.ints))), self.r.choice(self.strs)
        self.emit(ind, self.r.choice([f"return ({', '.join(ks)}, {ss})", f'return {{"k": {ks[0]}, "s": {ss}}}',
                                      f"return [lst, d, {ks[0]}]", "return box"]))
        return self.lines

    def make_inputs(self) -> list[str]:
        r = self.r
        ns = [r.randrange(5) for _ in range(3)]
        words = ["a,b,c", "banana", "", "xy,za", "kayak,b"]
        ss = [r.choice(words) for _ in range(3)]
        lens = [r.randrange(5) for _ in range(3)]
        fls = [r.choice([0.25, 0.75, -1.5, 2.0]) for _ in range(3)]
        return ["def make_inputs(call):", f"    n = {ns}[call]", f"    s = {ss!r}[call]",
                f"    lst = [3, 1, 4, 1, 5][:{lens}[call]]", '    d = {"k": 1, "name": "d"}',
                f"    fl = {fls}[call]", "    return n, s, lst, d, Box(), fl"]

    def module(self) -> str:
        body = self.body()
        src = [f'"""Generated by tests/e2e/diff_pyonly.py, seed {self.seed} (do not edit)."""',
               "import dataclasses", "", "import torch", ""]
        src += HELPERS.strip("\n").split("\n") + ["", ""] + PRELUDE.strip("\n").split("\n") + ["", ""]
        sig = "def fn(n, s, lst, d, box, fl):"
        if self.closure:
            src += ["def build():", "    calls = 0", "    acc = 0", "", "    " + sig] + body + [
                "", "    def peek():", '        return {"calls": calls, "acc": acc}', "", "    return fn, peek", "", ""]
        else:
            src += [sig] + body + ["", "", "def build():", "    return fn, lambda: {}", "", ""]
        src += self.make_inputs()
        return "\n".join(src) + "\n"


def generate_pyonly_program(seed: int) -> str:
    """The source of plain-Python program ``seed`` (same interface as ``diff_programs``)."""
    return _PyGen(seed).module()
