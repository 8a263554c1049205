"""Seeded generator of small Python+PyTorch programs for the differential test
(``test_differential.py``).

Every program is the SOURCE of one module (``generate_program(seed)``), written to a real file
so tracebacks and pyjit's file:line locations point at readable code. ``random.Random(seed)``
is the only source of randomness: the same seed always gives the same text.

Module layout (every program)::

    import dataclasses, torch
    G_COUNT, G_SCALE, G_LOG, G_T          # module globals: read, rebound (`global`), mutated
    class Box                             # small object passed in; attributes read and stored
    PRELUDE of diff_constructs.py         # user classes (class counters, slots, dataclasses,
                                          # dunders, properties), TICK closure, G_N, bump_global
    LIN                                   # small seeded nn.Linear (some programs)
    def inner_<m>(a, k) / outer_<m>(a, b, k)   # helpers, outer calls inner (two levels deep)
    def build() -> (fn, peek)             # fn is a closure over `calls`/`acc` (nonlocal stores)
                                          # or a module-level function; peek() reads the cells
    def make_inputs(call) -> args         # fresh inputs of call 0, 1, 2 (different branches)

``fn(x, y, n, flag, lst, d, box, fl, tl)``: ``x``, ``y`` float tensors of one shape (``x``
requires grad in some programs; call 2 may use another shape unless the program uses ``LIN``),
``n`` a small int, ``flag`` a bool, ``lst`` a list of floats, ``d`` a dict, ``box`` a ``Box``,
``fl`` a float and ``tl`` a list of tensors of x's shape (``n``, ``fl`` and ``tl`` change between
calls). Some programs alias inputs: ``y is x``, or ``d["lst"] is lst``.

Grammar of the body of ``fn`` (``S`` = statement; nested bodies hold 1-3 ``S`` and only rebind
variables that already exist, so every name is defined on every path; depth <= 2)::

    S := T = T op T | T op C | torch.<unary>(T) | T - T.mean(dim, keepdim=True) | cat of slices
       | T = T.clone(); T.mul_(C).add_(C)                      (in-place on a fresh tensor)
       | y.add_(C) | y.mul_(C)                                 (in-place on an input)
       | F = T.sum().item() ...; F = F * C + n                 (.item() then Python arithmetic)
       | K = (K * 3 + n) % 5 | K = T.shape[0] * 2 - T.size(1) ... | max/min/divmod/abs/isinstance
       | for i in range(n) / range(C): S+        | for j, v in enumerate(lst): S+
       | for i, (u, w) in enumerate(zip([T, T], [C, C])): S+ | w = 0; while w < n: S+; w += 1
       | w = 0; while w < 3 and T.abs().sum() > C: w += 1; S+
       | if <python condition>: S+ else: S+      (flag, n, len(lst), key in d, K, F)
       | if <tensor condition>: S+ else: S+      (T.sum() > 0, (T*T).mean() < C, T.max() > C)
       | lists/tuples/dicts built, indexed, unpacked; list and dict comprehensions;
         iteration over dict.items()
       | print(<python values>) | print(T.shape) | print(f"...")
       | lst.append/extend/insert/item store/pop/del | d[key] = ... / d.get / d.pop / d.update
       | d.setdefault(...).append | o = Box(); o.t = T; d["box"] = o   (object created inside)
       | box.count += 1 | box.t = T | box.hist.append(K) | box.hist = box.hist + [K]
       | setattr(box, "extra", ...) | T = T * box.scale
       | G_COUNT += 1 | G_T = T | G_LOG.append(K) | T = T * G_SCALE
       | calls += 1 | acc = acc + K                (nonlocal, when fn is a closure)
       | K = bump(n)                               (nested closure with its own nonlocal)
       | T = outer_m(T, T, K)                      (outer_m calls inner_m; either may print,
                                                     call .item(), branch on a tensor, append to
                                                     G_LOG or raise)
       | with torch.no_grad(): S+ | with torch.no_grad(): S+; with torch.enable_grad(): S+
       | try: S+ finally: box.count += 1; G_LOG.append(n)
       | if <tensor or Python condition>: break / continue   (inside loops)
       | [T[i].sum().item() * 2 for i in range(2)] | sum(generator) | max(generator, default=0)
       | try: d["missing"] except KeyError: K = K + 1
       | if <condition true on some calls>: raise ValueError/RuntimeError(f"...")
       | v = lst[n + 10]                            (IndexError)
       | <the statements of diff_constructs.py>     (objects, pops then breaks, views across
                                                     breaks, x += LIN(x), masks, float args)
    return (T..., K, F) | {"out": T, ...} | [T, K] | T, lst, d, box   (inputs returned themselves)
         | x | x[0] | y.t() | x.detach() | torch.cat([y]) | tl ...     (aliasing of inputs)

Numbers printed are ints, bools, shapes or ``round(F, 3)``; exception messages hold Python
values only. ``feature_tags(seed)`` lists the constructs a program uses (for statistics).
"""
from __future__ import annotations

import random

from .diff_constructs import CONSTRUCT_KINDS, PRELUDE, ConstructStatements, lin_source

_UNARY = ["torch.sin", "torch.cos", "torch.tanh", "torch.relu", "torch.sigmoid", "torch.abs", "torch.neg"]
_BINARY = ["+", "-", "*"]
_CONSTS = ["0.5", "2", "1.5", "-1.0", "0.25", "3"]
_SHAPES = [(3, 4), (2, 5), (4, 4), (5, 3), (2, 2)]


class _Gen(ConstructStatements):
    def __init__(self, seed: int):
        self.seed = seed
        self.r = random.Random(seed)
        self.tensors = ["x", "y"]
        self.ints = ["k0"]
        self.floats = ["f0"]
        self.lines: list[str] = []
        self.counter = 0
        self.tags: set[str] = set()
        self.closure = self.r.random() < 0.6
        self.has_bump = False
        self.n_helpers = self.r.randrange(1, 3)
        self.in_loop = 0  # > 0 inside a for/while body: break/continue allowed
        self.iterating_lst = False  # inside `for ... in enumerate(lst)`: no appends (no endless loop)
        self.shape = self.r.choice(_SHAPES)
        self.use_lin = self.r.random() < 0.25  # LIN needs one feature size: no shape change then

    # -- small pieces -------------------------------------------------------------------------
    def t(self) -> str:
        return self.r.choice(self.tensors)

    def k(self) -> str:
        return self.r.choice(self.ints)

    def f(self) -> str:
        return self.r.choice(self.floats)

    def c(self) -> str:
        return self.r.choice(_CONSTS)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, ind: int, text: str) -> None:
        for line in text.split("\n"):
            self.lines.append("    " * ind + line)

    def target(self, pool: list[str], prefix: str, top: bool) -> str:
        """A new name at the top level (added to the pool after the statement), else an existing one."""
        if top and self.r.random() < 0.7:
            return self.fresh(prefix)
        return self.r.choice([v for v in pool if v not in ("x", "y")] or pool)

    def add(self, pool: list[str], name: str) -> None:
        if name not in pool:
            pool.append(name)

    # -- statements ---------------------------------------------------------------------------
    def block(self, ind: int, depth: int) -> None:
        for _ in range(self.r.randrange(1, 4)):
            self.stmt(ind, depth, top=False)

    def stmt(self, ind: int, depth: int, top: bool) -> None:
        r = self.r
        kinds = ["tensor"] * 6 + ["item", "int", "print", "print", "mut_list", "mut_dict", "mut_box",
                                  "mut_global", "helper", "container", "container", "try"]
        kinds += CONSTRUCT_KINDS
        if self.use_lin:
            kinds += ["inplace_lin", "inplace_lin"]
        if self.closure:
            kinds.append("nonlocal")
        if self.has_bump:
            kinds.append("bump")
        if depth < 2:
            kinds += ["for", "for", "while", "if_py", "if_py", "if_tensor", "if_tensor", "no_grad", "enable_grad"]
        if top:
            kinds += ["raise"]
        if self.in_loop:
            kinds += ["loop_exit"]
        if depth < 2:
            kinds += ["try_finally"]
        kind = r.choice(kinds)
        getattr(self, "s_" + kind)(ind, depth, top)

    def s_tensor(self, ind: int, depth: int, top: bool) -> None:
        r, out = self.r, self.target(self.tensors, "t", top)
        a, b = self.t(), self.t()
        choice = r.randrange(8)
        if choice == 7 and r.random() < 0.5:
            self.tags.add("inplace_input")
            self.emit(ind, f"y.{r.choice(['add_', 'mul_'])}({self.c()})")
            return
        if choice == 0:
            self.emit(ind, f"{out} = {a} {r.choice(_BINARY)} {b}")
        elif choice == 1:
            self.emit(ind, f"{out} = {a} {r.choice(_BINARY)} {self.c()}")
        elif choice == 2:
            self.emit(ind, f"{out} = {r.choice(_UNARY)}({a})")
        elif choice == 3:
            dim = r.randrange(2)
            self.emit(ind, f"{out} = {a} - {b}.mean(dim={dim}, keepdim=True)")
        elif choice == 4:
            self.emit(ind, f"{out} = torch.cat([{a}[:, :1], {b}[:, 1:]], dim=1)")
        elif choice == 5:
            self.tags.add("inplace")
            self.emit(ind, f"{out} = {a}.clone()\n{out}.mul_({self.c()}).add_({b})")
        else:
            self.emit(ind, f"{out} = torch.tanh({a} * {b} + {self.c()})")
        self.add(self.tensors, out)

    def s_item(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("item")
        out = self.target(self.floats, "f", top)
        a = self.t()
        red = self.r.choice(["sum", "mean", "max", "min"])
        self.emit(ind, f"{out} = {a}.{red}().item()")
        self.emit(ind, f"{out} = {out} * {self.c()} + n")
        self.add(self.floats, out)
        if self.r.random() < 0.5:
            t = self.target(self.tensors, "t", top)
            self.emit(ind, f"{t} = {self.t()} * {out}")
            self.add(self.tensors, t)

    def s_int(self, ind: int, depth: int, top: bool) -> None:
        out = self.target(self.ints, "k", top)
        src = self.k()
        t = self.t()
        self.emit(ind, self.r.choice([f"{out} = ({src} * 3 + n) % 5", f"{out} = {src} + len(lst)",
                                      f"{out} = int({self.f()} > 0) + {src}",
                                      f"{out} = {t}.shape[0] * 2 - {t}.size(1) + {src} % 3",
                                      f"{out} = max({src}, n) - min(len(G_LOG), 3)",
                                      f"{out}, rem_{out} = divmod(abs({src}) + {t}.numel(), 4)",
                                      f"{out} = {src} + (1 if isinstance({self.f()}, float) else 2)"]))
        self.add(self.ints, out)

    def s_print(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("print")
        r = self.r
        choice = r.randrange(5)
        if choice == 0:
            self.emit(ind, f'print("step", n, {self.k()}, flag)')
        elif choice == 1:
            self.tags.add("print_shape")
            self.emit(ind, f"print({self.t()}.shape)")
        elif choice == 2:
            self.emit(ind, f"print(tuple({self.t()}.shape), len(lst), sorted(d))")
        elif choice == 3:
            self.emit(ind, f'print(f"k={{{self.k()}}} f={{round({self.f()}, 3)}}")')
        else:
            self.emit(ind, self.r.choice(['print("lst", lst, box.count)', 'print(*lst, sep=", ", end=";\\n")',
                                          f'print(f"{{{self.f()}:.2f}}|{{n:>3}}|{{flag!r}}")']))

    def s_mut_list(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_list")
        choice = 2 if self.iterating_lst else self.r.randrange(5)
        if choice == 4:
            self.emit(ind, f"if len(lst) > 1:\n    del lst[0]\nlst.insert(0, {self.k()} * 0.5)")
        elif choice == 0:
            self.emit(ind, f"lst.append({self.k()})")
        elif choice == 1:
            self.emit(ind, f"lst.extend([n, {self.c()}])")
        elif choice == 2:
            self.emit(ind, "if lst:\n    lst[0] = lst[0] + 1")
        else:
            self.emit(ind, f"if lst:\n    {self.k()} = {self.k()} + int(lst.pop())")

    def s_mut_dict(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_dict")
        choice = self.r.randrange(6)
        if choice == 4:
            self.tags.add("new_object")
            nb = self.fresh("nb")
            self.emit(ind, f'{nb} = Box()\n{nb}.count = {self.k()}\n{nb}.t = {self.t()} * 2\nd["box"] = {nb}')
        elif choice == 5:
            self.emit(ind, f'{self.k()} = len(d.pop("name", "xy"))\nd.update(extra=n)')
        elif choice == 0:
            self.emit(ind, f'd["t"] = {self.t()} * {self.c()}')
        elif choice == 1:
            self.emit(ind, f'd["n"] = d.get("n", 0) + {self.k()}')
        elif choice == 2:
            self.emit(ind, f'd.setdefault("hist", []).append({self.k()})')
        else:
            t = self.target(self.tensors, "t", top)
            self.emit(ind, f'{t} = {self.t()} * d["scale"]')
            self.add(self.tensors, t)

    def s_mut_box(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_attr")
        choice = self.r.randrange(5)
        if choice == 4:
            self.emit(ind, f"box.hist = box.hist + [{self.k()}]\nsetattr(box, 'extra', len(box.hist))")
        elif choice == 0:
            self.emit(ind, "box.count += 1")
        elif choice == 1:
            self.emit(ind, f"box.t = {self.t()} + {self.c()}")
            if self.r.random() < 0.5:
                self.emit(ind, f"box.t.mul_({self.c()})")
        elif choice == 2:
            self.emit(ind, f"box.hist.append({self.k()})\nbox.scale = box.scale * 0.5")
        else:
            t = self.target(self.tensors, "t", top)
            self.emit(ind, f"{t} = {self.t()} * box.scale")
            self.add(self.tensors, t)

    def s_mut_global(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_global")
        choice = self.r.randrange(4)
        if choice == 0:
            self.emit(ind, "G_COUNT += 1")
        elif choice == 1:
            self.emit(ind, f"G_T = {self.t()} - 1")
        elif choice == 2:
            self.emit(ind, f"G_LOG.append({self.k()})")
        else:
            t = self.target(self.tensors, "t", top)
            self.emit(ind, f"{t} = {self.t()} * G_SCALE + G_COUNT")
            self.add(self.tensors, t)

    def s_nonlocal(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("mut_nonlocal")
        self.emit(ind, self.r.choice(["calls += 1", f"acc = acc + {self.k()}"]))

    def s_bump(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("closure")
        out = self.target(self.ints, "k", top)
        self.emit(ind, f"{out} = bump({self.r.choice(['n', '1', self.k()])})")
        self.add(self.ints, out)

    def s_helper(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("helper")
        m = self.r.randrange(self.n_helpers)
        out = self.target(self.tensors, "t", top)
        self.emit(ind, f"{out} = outer_{m}({self.t()}, {self.t()}, {self.k()})")
        self.add(self.tensors, out)

    def s_container(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("container")
        r = self.r
        out = self.target(self.tensors, "t", top)
        a, b = self.t(), self.t()
        h = self.fresh("c")
        choice = r.randrange(9)
        if choice == 7:
            self.tags.add("item")
            self.emit(ind, f"{h} = [{a}[i].sum().item() * 2 for i in range(2)]\n{out} = {b} * {h}[0] - {h}[-1]")
        elif choice == 8:
            self.emit(ind, f"{out} = {a} + sum(v * 0.5 for v in lst) + max((len(k) for k in d), default=0)")
        elif choice == 0:
            self.emit(ind, f"{h} = [{a}, {b} * 2, torch.relu({a})]\n{out} = {h}[0] + {h}[-1] - {h}[1]")
        elif choice == 1:
            self.emit(ind, f"{h} = [{a} * i for i in range(3)]\n{out} = sum({h}) + len({h})")
        elif choice == 2:
            self.emit(ind, f"p_{h}, q_{h} = {a} + 1, ({b} - 1, {self.k()})\n{out} = p_{h} * q_{h}[0] + q_{h}[1]")
        elif choice == 3:
            self.emit(ind, f'{h} = {{"u": {a}, "v": {b}}}\n{out} = {h}["u"] * 0.5 + {h}["v"]')
        elif choice == 4:
            self.emit(ind, f'{h} = {{key: {a} * i for i, key in enumerate(["p", "q", "r"])}}\n'
                           f"{out} = {b}\nfor key_{h}, val_{h} in {h}.items():\n"
                           f"    {out} = {out} + val_{h} * len(key_{h})")
        elif choice == 5:
            self.emit(ind, f"{h} = ({a}, {b}, {self.k()})\nfirst_{h}, *rest_{h} = {h}\n"
                           f"{out} = first_{h} + rest_{h}[0] * rest_{h}[1]")
        else:
            self.emit(ind, f"{h} = [v * 2 for v in lst if v > 0]\n{out} = {a} + len({h}) + sum({h})")
        self.add(self.tensors, out)

    def s_loop_exit(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("break_continue")
        cond = self.r.choice([f"{self.t()}.sum() > {self.c()}", f"{self.k()} > 2", "flag", "len(lst) > n"])
        if "sum()" in cond:
            self.tags.add("tensor_branch")
        self.emit(ind, f"if {cond}:\n    {self.r.choice(['break', 'continue'])}")

    def s_try_finally(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("try_finally")
        self.emit(ind, "try:")
        self.block(ind + 1, depth + 1)
        self.emit(ind, f"finally:\n    box.count += 1\n    G_LOG.append({self.r.choice(['n', '-1'])})")

    def s_enable_grad(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("no_grad")
        self.emit(ind, "with torch.no_grad():")
        self.block(ind + 1, depth + 1)
        self.emit(ind + 1, "with torch.enable_grad():")
        self.block(ind + 2, depth + 1)

    def s_try(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("try")
        k = self.k()
        self.emit(ind, f'try:\n    {k} = {k} + d["missing"]\nexcept KeyError:\n    {k} = {k} + 1')

    def s_raise(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("raise")
        r = self.r
        choice = r.randrange(4)
        if choice == 0:
            self.emit(ind, f'if n == {r.randrange(4)}:\n    raise ValueError(f"bad n={{n}} k={{{self.k()}}}")')
        elif choice == 1:
            self.tags.add("tensor_branch")
            self.emit(ind, f'if {self.t()}.sum() > {r.choice(["0", "1.0", "-1.0"])}:\n'
                           f'    raise RuntimeError(f"positive sum, lst={{lst}}")')
        elif choice == 2:
            self.emit(ind, f"if not flag:\n    {self.k()} = lst[n + 10]")
        else:
            self.emit(ind, f'if {self.k()} > 3:\n    raise KeyError(("too big", {self.k()}))')

    def s_for(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("loop")
        r = self.r
        i = self.fresh("i")
        choice = r.randrange(4)
        if choice == 0:
            self.emit(ind, f"for {i} in range(n):")
        elif choice == 1:
            self.emit(ind, f"for {i} in range({r.randrange(1, 4)}):")
        elif choice == 2:
            self.emit(ind, f"for {i}, v_{i} in enumerate(lst):")
            t = self.t()
            self.emit(ind + 1, f"{t} = {t} + v_{i} * 0.1")
        else:
            self.emit(ind, f"for {i}, (u_{i}, w_{i}) in enumerate(zip([{self.t()}, {self.t()}], [{self.c()}, {self.c()}])):")
            t = self.r.choice([v for v in self.tensors if v not in ("x", "y")] or self.tensors)
            self.emit(ind + 1, f"{t} = {t} + u_{i} * w_{i} - {i}")
        self.ints.append(i)
        outer_iterating, self.iterating_lst = self.iterating_lst, self.iterating_lst or choice == 2
        self.in_loop += 1
        self.block(ind + 1, depth + 1)
        self.in_loop -= 1
        self.iterating_lst = outer_iterating
        self.ints.remove(i)

    def s_while(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("loop")
        w = self.fresh("w")
        bound = self.r.choice(["n", "3", f"{self.k()} % 3", f"3 and {self.t()}.abs().sum() > {self.c()}"])
        if "sum()" in bound:
            self.tags.add("tensor_branch")
        self.emit(ind, f"{w} = 0\nwhile {w} < {bound}:")
        self.emit(ind + 1, f"{w} += 1")
        self.in_loop += 1
        self.block(ind + 1, depth + 1)
        self.in_loop -= 1

    def _branches(self, ind: int, depth: int) -> None:
        self.block(ind + 1, depth + 1)
        if self.r.random() < 0.6:
            self.emit(ind, "else:")
            self.block(ind + 1, depth + 1)

    def s_if_py(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("py_branch")
        cond = self.r.choice(["flag", "n > 1", "len(lst) > 2", '"n" in d', f"{self.k()} % 2 == 0",
                              f"{self.f()} > 0", "not flag and n < 3", "box.count > 0"])
        self.emit(ind, f"if {cond}:")
        self._branches(ind, depth)

    def s_if_tensor(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("tensor_branch")
        a, b = self.t(), self.t()
        cond = self.r.choice([f"{a}.sum() > 0", f"({a} * {b}).mean() < 0.1", f"{a}.max() > 1.0",
                              f"bool(({a} > 0).any())", f"{a}[0, 0] < {b}[0, 0]"])
        self.emit(ind, f"if {cond}:")
        self._branches(ind, depth)

    def s_no_grad(self, ind: int, depth: int, top: bool) -> None:
        self.tags.add("no_grad")
        self.emit(ind, "with torch.no_grad():")
        self.block(ind + 1, depth + 1)

    # -- helpers, inputs, module ----------------------------------------------------------------
    def helpers(self) -> list[str]:
        r, out = self.r, []
        for m in range(self.n_helpers):
            inner = [f"def inner_{m}(a, k):", f"    a = a * {self.c()} + k"]
            extra = r.randrange(7)
            if extra == 0:
                inner.append('    print("inner", k, tuple(a.shape))')
                self.tags.add("print")
            elif extra == 1:
                inner += ["    if a.sum() > 0:", "        a = a - 1", "    else:", "        a = a + 0.5"]
                self.tags.add("tensor_branch")
            elif extra == 2:
                inner += ["    s = a.mean().item()", "    a = a + round(s, 2)"]
                self.tags.add("item")
            elif extra == 3:
                inner.append("    G_LOG.append(k)")
                self.tags.add("mut_global")
            elif extra == 4:
                inner += ["    if k > 4:", '        raise ValueError(f"inner_%d: k={k}")' % m]
            elif extra == 5:
                inner += ["    global G_COUNT", "    G_COUNT = G_COUNT + k"]
                self.tags.add("mut_global")
            inner.append(f"    return {r.choice(_UNARY)}(a)")
            outer = [f"def outer_{m}(a, b, k):"]
            if r.random() < 0.3:
                outer.append('    print("outer", k)')
            if r.random() < 0.4:
                outer += ["    with torch.no_grad():", f"        b = b * {self.c()}"]
            outer += [f"    c = inner_{m}(a + b, k)", f"    return c * {self.c()} + b"]
            out += inner + ["", ""] + outer + ["", ""]
        return out

    def make_inputs(self) -> list[str]:
        r = self.r
        shape = self.shape
        shapes = [shape, shape, r.choice(_SHAPES) if r.random() < 0.3 and not self.use_lin else shape]
        signs = [1.0, -1.0, r.choice([1.0, -1.0, 0.5])]
        ns = [r.randrange(4) for _ in range(3)]
        flags = [True, False, r.random() < 0.5]
        lens = [r.randrange(4) for _ in range(3)]
        fls = [r.choice([0.1, 0.5, -0.7, 2.5, 3.0]) for _ in range(3)]
        tlens = [r.randrange(4) for _ in range(3)]
        grad = r.random() < 0.3
        if grad:
            self.tags.add("requires_grad")
        alias_y = not grad and r.random() < 0.1      # y is x: in-place updates of y change x
        alias_lst = r.random() < 0.3                 # d["lst"] is lst: mutations seen through both
        if alias_y or alias_lst:
            self.tags.add("aliased_inputs")
        return [
            "def make_inputs(call):",
            f"    g = torch.Generator().manual_seed({self.seed} * 7 + call)",
            f"    shape = {shapes}[call]",
            f"    x = torch.randn(*shape, generator=g) * {signs}[call] + {signs}[call] * 0.3",
            "    y = torch.randn(*shape, generator=g)",
            f"    x.requires_grad_({grad})",
            f"    n = {ns}[call]",
            f"    flag = {flags}[call]",
            f"    lst = [1.0, -2.5, 0.5][:{lens}[call]]",
            '    d = {"scale": 0.5, "name": "d"}',
            *(["    y = x"] if alias_y else []),
            *(['    d["lst"] = lst'] if alias_lst else []),
            f"    fl = {fls}[call]",
            f"    tl = [torch.randn(*shape, generator=g) for _ in range({tlens}[call])]",
            "    return x, y, n, flag, lst, d, Box(), fl, tl",
        ]

    def body(self) -> list[str]:
        self.lines = []
        ind = 2 if self.closure else 1
        self.emit(ind, "global G_COUNT, G_T, G_N")
        if self.closure:
            self.emit(ind, "nonlocal calls, acc")
        self.emit(ind, "k0 = n * 2 - 1")
        self.emit(ind, "f0 = 0.5 * len(lst)")
        if self.r.random() < 0.3:
            self.has_bump = True
            self.tags.add("closure")
            self.emit(ind, "loc = 0\n\ndef bump(v):\n    nonlocal loc\n    loc = loc + v\n    return loc\n")
        for _ in range(self.r.randrange(3, 7)):
            self.stmt(ind, 0, top=True)
        r = self.r
        ts = r.sample(self.tensors, min(len(self.tensors), r.randrange(1, 4)))
        choice = r.randrange(5)
        if choice == 4:
            self.emit(ind, self.alias_return())
        elif choice == 3:
            self.emit(ind, f"return {ts[0]}, lst, d, box")
        elif choice == 0:
            self.emit(ind, f"return ({', '.join(ts)}, {self.k()}, {self.f()})")
        elif choice == 1:
            self.emit(ind, f'return {{"out": {ts[0]}, "k": {self.k()}, "all": [{", ".join(ts)}]}}')
        else:
            self.emit(ind, f"return [{ts[-1]}, {self.k()}]")
        return self.lines

    def module(self) -> str:
        helpers = self.helpers()
        inputs = self.make_inputs()
        body = self.body()
        src = [f'"""Generated by tests/e2e/diff_programs.py, seed {self.seed} (do not edit)."""',
               "import dataclasses", "", "import torch", "", "G_COUNT = 0", "G_SCALE = 1.5", "G_LOG = []", "G_T = None", "", "",
               "class Box:", "    def __init__(self):", "        self.count = 0", "        self.scale = 0.5",
               "        self.hist = []", "        self.t = None", "", ""]
        src += PRELUDE.strip("\n").split("\n") + ["", ""]
        if self.use_lin:
            src += lin_source(self.shape[1], self.seed).strip("\n").split("\n") + ["", ""]
        src += helpers
        sig = "def fn(x, y, n, flag, lst, d, box, fl, tl):"
        if self.closure:
            src += ["def build():", "    calls = 0", "    acc = 0", "", "    " + sig] + body + [
                "", "    def peek():", '        return {"calls": calls, "acc": acc}', "",
                "    return fn, peek", "", ""]
        else:
            src += [sig] + body + ["", "", "def build():", "    return fn, lambda: {}", "", ""]
        src += inputs
        return "\n".join(src) + "\n"


def generate_program(seed: int) -> str:
    """The source of program ``seed`` (a module defining ``build``, ``make_inputs``, ``Box``, ``G_*``, the
    prelude's classes)."""
    return _Gen(seed).module()


def feature_tags(seed: int) -> set[str]:
    """The constructs program ``seed`` uses (``print``, ``item``, ``tensor_branch``, ``mut_global``...)."""
    g = _Gen(seed)
    g.module()
    return g.tags
