"""Python side effects under ``pyjit.jit`` happen exactly once per call, in program order, and
every value the caller sees is the one the program computed at that point: across graph breaks
and their resume functions, inside inlined calls, and on cache hits (the 2nd and 3rd call run
the compiled replacement code, the 1st one traces).

Each case runs a program in three *modes*: ``plain`` (one frame), ``break`` (a ``print`` graph
break between the effects) and ``inlined`` (a helper function does the effect). The program is
called three times eagerly and three times jitted, each from the same starting state; returned
values, printed output and the final state of everything it mutated (containers, globals,
closure cells, class attributes, object attributes) must match eager after every call.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

import pytest
import torch

import pyjit

from .support import CountingBackend, assert_same

pytestmark = pytest.mark.usefixtures("fresh_pyjit")  # raise_on_internal_error (tests/e2e/conftest.py)

MODES = ("plain", "break", "inlined")


def _backend(dynamic: bool) -> CountingBackend:
    """Runs the graphs as they are; ``dynamic``: it accepts symbolic graphs, so an int that
    changes between calls (a counter) becomes a graph input rebuilt in the replacement code
    instead of a constant of a new entry."""
    backend = CountingBackend()
    backend.pyjit_dynamic = dynamic  # type: ignore[attr-defined]
    return backend


def _run(fn: Callable[..., Any], make_args: Callable[[int], tuple], reset: Callable[[], None],
         state: Callable[[tuple], Any], calls: int = 3) -> None:
    """Eager and jitted ``fn`` (static, then dynamic), ``calls`` calls each from the same
    starting state (``reset`` before each series): after every call, compare the result, what
    it printed and ``state(args)`` (the mutated containers, globals, cells, class attributes)."""
    for dynamic in (False, True):
        pyjit.reset()
        _run_once(fn, make_args, reset, state, calls, _backend(dynamic))


def _run_once(fn: Callable[..., Any], make_args: Callable[[int], tuple], reset: Callable[[], None],
              state: Callable[[tuple], Any], calls: int, backend: CountingBackend) -> None:
    expected = []
    reset()
    for i in range(calls):
        args = make_args(i)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = fn(*args)
        expected.append((result, out.getvalue(), state(args)))
    reset()
    jf = pyjit.jit(fn, backend=backend)
    for i in range(calls):
        args = make_args(i)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = jf(*args)
        eager_result, eager_printed, eager_state = expected[i]
        where = f"call {i} ({'dynamic' if getattr(backend, 'pyjit_dynamic') else 'static'})"
        assert_same(eager_result, result, f"result of {where}")
        assert out.getvalue() == eager_printed, f"printed output of {where}"
        assert_same(eager_state, state(args), f"state after {where}")


def _rand(i: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


def _brk(mode: str) -> None:
    if mode == "break":
        print("graph break")


# -- class attributes through type(obj) and the class name --------------------------------------
class Counted:
    count = 0

    def __init__(self) -> None:
        Counted.count += 1


def _bump_class_of(obj: Any) -> None:
    type(obj).count += 1


def _class_attr_program(mode: str) -> Callable[..., Any]:
    def f(x):
        c = Counted()
        if mode == "inlined":
            _bump_class_of(c)
        else:
            type(c).count += 1
        _brk(mode)
        Counted.count += 1
        return x + Counted.count, type(c).count

    return f


@pytest.mark.parametrize("mode", MODES)
def test_class_attribute_via_type_of_obj(mode):
    def reset():
        Counted.count = 0

    _run(_class_attr_program(mode), lambda i: (_rand(i, 3),), reset, lambda args: Counted.count)


# -- closure cells --------------------------------------------------------------------------------
def _make_counter() -> Callable[[], int]:
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return count

    return tick


TICK = _make_counter()


def _tick_twice() -> int:
    return TICK() + TICK()


def _closure_program(mode: str) -> Callable[..., Any]:
    def f(x):
        if mode == "inlined":
            a = _tick_twice()
            b = TICK()
        else:
            a = TICK()
            _brk(mode)
            b = TICK()
        return x + a + b, a, b

    return f


@pytest.mark.parametrize("mode", MODES)
def test_closure_cell_updated_by_each_call(mode):
    global TICK

    def reset():
        global TICK
        TICK = _make_counter()

    _run(_closure_program(mode), lambda i: (_rand(i, 3),), reset, lambda args: TICK.__closure__[0].cell_contents)


# -- module globals read after their own update -----------------------------------------------
COUNTER = 0


def _bump_global() -> int:
    global COUNTER
    COUNTER += 1
    return COUNTER


def _global_program(mode: str) -> Callable[..., Any]:
    def f(x):
        global COUNTER
        before = COUNTER  # read before the increment: the old value
        y = x + 1
        if mode == "inlined":
            after = _bump_global()
        else:
            COUNTER += 1
            after = COUNTER
        _brk(mode)
        return y * after, before, after, COUNTER

    return f


@pytest.mark.parametrize("mode", MODES)
def test_global_value_read_around_its_update(mode):
    def reset():
        global COUNTER
        COUNTER = 0

    _run(_global_program(mode), lambda i: (_rand(i, 3),), reset, lambda args: COUNTER)


# -- values popped from containers of the caller ------------------------------------------------
def _pop_last(xs: list) -> Any:
    return xs.pop()


def _list_pop_program(mode: str, index: int | None) -> Callable[..., Any]:
    def f(x, xs):
        if mode == "inlined":
            p = _pop_last(xs) if index is None else xs.pop(index)
        else:
            p = xs.pop() if index is None else xs.pop(index)
        _brk(mode)
        return p, x + 1, len(xs)

    return f


@pytest.mark.parametrize("index", [None, 0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_list_pop_returns_the_popped_item(mode, index):
    make = lambda i: (_rand(i, 2), [_rand(i + 1, 2), _rand(i + 2, 2), _rand(i + 3, 2)])  # noqa: E731
    _run(_list_pop_program(mode, index), make, lambda: None, lambda args: args[1])


def _dict_pop_program(mode: str) -> Callable[..., Any]:
    def f(x, d):
        t = d.pop("e", x)          # present on the first call: the item
        u = d.pop("missing", x * 2)  # absent: the default
        _brk(mode)
        return t, u, x + 1, list(d)

    return f


@pytest.mark.parametrize("mode", ["plain", "break"])
def test_dict_pop_returns_the_popped_value(mode):
    make = lambda i: (_rand(i, 2), {"e": _rand(i + 1, 2), "k": _rand(i + 2, 2)})  # noqa: E731
    _run(_dict_pop_program(mode), make, lambda: None, lambda args: args[1])


# -- del of a list item after breaks --------------------------------------------------------------
def _del_first(xs: list) -> None:
    del xs[0]


def _del_program(mode: str) -> Callable[..., Any]:
    def f(x, xs):
        t = x * 2
        local = [x + 1, t]
        _brk(mode)
        if mode == "inlined":
            _del_first(local)
            _del_first(xs)
        else:
            del local[0]
            del xs[0]
        return local, t, xs[0], len(xs)

    return f


@pytest.mark.parametrize("mode", MODES)
def test_del_list_item_after_break(mode):
    make = lambda i: (_rand(i, 3), [_rand(i + 1, 3), _rand(i + 2, 3)])  # noqa: E731
    _run(_del_program(mode), make, lambda: None, lambda args: args[1])


def test_del_local_list_item_after_several_breaks():
    """Four breaks (tolist, float, item, print), then a del on a list of the last frame whose
    item is also returned: the return value must not be read from the list after the del."""
    def f(x, y, z, k):
        tp1 = (x * (x > 0).float().mean(), max(3, k), x.tolist()[0][1])
        t2 = tp1[0] * (1 + tp1[1] % 2)
        d4 = {"g": x, "e": y + max(-2.0, min(2.0, float(t2.mean())))}
        l5 = [torch.full((3, 4), 0.5) * max(-2.0, min(2.0, z[k % 3, 0].item())), t2]
        print("step")
        del l5[0]
        return d4, t2, 0.5 - x

    _run(f, lambda i: (_rand(i, 4, 3).t(), _rand(i + 1, 3, 4), _rand(i + 2, 3, 4), 2), lambda: None,
         lambda args: None)


# -- appending a value of data-dependent size ------------------------------------------------
def _append_masked(out: list, y: torch.Tensor) -> None:
    out.append(y[y > 0])


def _mask_program(mode: str) -> Callable[..., Any]:
    def f(y, out):
        local = []
        if mode == "inlined":
            _append_masked(local, y)
            _append_masked(out, y)
        else:
            local.append(y[torch.tensor([True, False, True])])
            _brk(mode)
            out.append(y[y > 0] + 1)
        return local, local, len(out)

    return f


@pytest.mark.parametrize("mode", MODES)
def test_append_of_boolean_mask_index(mode):
    def make(i):
        return (_rand(i, 3, 4), [])

    _run(_mask_program(mode), make, lambda: None, lambda args: args[1])
    # the list returned twice is one object, as in eager
    f = pyjit.jit(_mask_program(mode), backend=CountingBackend())
    with contextlib.redirect_stdout(io.StringIO()):
        for i in range(3):
            first, second, _ = f(*make(i))
            assert first is second, f"call {i}: the list returned twice is two objects"


# -- __slots__ ----------------------------------------------------------------------------------
class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a = a
        self.b = b


class SlottedChild(Slotted):
    __slots__ = ("c",)


def _slots_state(obj: Any) -> Any:
    if isinstance(obj, Slotted):
        return (type(obj).__name__, {k: getattr(obj, k, "<unset>") for k in ("a", "b", "c") if hasattr(type(obj), k)})
    if isinstance(obj, (list, tuple)):
        return [_slots_state(o) for o in obj]
    return obj


def _store_outside_slots(obj: Any) -> str:
    try:
        obj.c = 1
    except AttributeError:
        return "caught"
    return "stored"


def _slots_try_program(mode: str) -> Callable[..., Any]:
    def f(x):
        s = Slotted(x, 0.5)
        if mode == "inlined":
            r = _store_outside_slots(s)
        else:
            try:
                s.c = 1
                r = "stored"
            except AttributeError:
                r = "caught"
        _brk(mode)
        return s.a * s.b, r

    return f


@pytest.mark.parametrize("mode", MODES)
def test_slots_store_outside_slots_raises_catchable_attribute_error(mode):
    _run(_slots_try_program(mode), lambda i: (_rand(i, 2),), lambda: None, lambda args: None)


def _slots_program(mode: str) -> Callable[..., Any]:
    def f(x, outside):
        outside.a = outside.a + 1     # a slot of the caller's object
        built = SlottedChild(x, 2.0)  # a slotted object built in the trace
        built.c = x + outside.a
        _brk(mode)
        del built.b
        try:
            built.b
        except AttributeError:
            built.a = built.a * 3
        if mode == "inlined":
            r = _store_outside_slots(outside)
        else:
            r = _store_outside_slots(built)
        return built, outside.b * x, r

    return f


@pytest.mark.parametrize("mode", MODES)
def test_slots_read_written_and_rebuilt(mode):
    f = _slots_program(mode)

    def make(i):
        return (_rand(i, 2), Slotted(i, _rand(i + 1, 2)))

    for dynamic in (False, True):
        pyjit.reset()
        jf = pyjit.jit(f, backend=_backend(dynamic))
        for i in range(3):
            eager_args, jit_args = make(i), make(i)
            out_e, out_j = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out_e):
                expected = _slots_state(f(*eager_args))
            with contextlib.redirect_stdout(out_j):
                actual = _slots_state(jf(*jit_args))
            assert_same(expected, actual, f"result of call {i}")
            assert out_e.getvalue() == out_j.getvalue(), f"printed output of call {i}"
            assert_same(_slots_state(eager_args[1]), _slots_state(jit_args[1]), f"state after call {i}")


def _global_returned_program(mode: str) -> Callable[..., Any]:
    def f(x):
        global COUNTER
        before = COUNTER
        y = x + 1
        if mode == "inlined":
            _bump_global()
        else:
            COUNTER += 1
        _brk(mode)
        return before, COUNTER, y

    return f


@pytest.mark.parametrize("mode", MODES)
def test_global_value_returned_after_its_update(mode):
    """The values are returned as they are (not used by tensor code): once the global changes
    between calls it becomes a symbolic input whose value is rebuilt in the replacement code."""
    def reset():
        global COUNTER
        COUNTER = 0

    _run(_global_returned_program(mode), lambda i: (_rand(i, 3),), reset, lambda args: COUNTER)


# -- a module's globals, through `global` in its function and as module attributes --------------
def _module_global_program(mode: str) -> Callable[..., Any]:
    from . import replay_once_counter as counter

    def f(x):
        before = counter.VALUE
        a = counter.bump()            # `global VALUE` in the module's own function
        _brk(mode)
        counter.VALUE = counter.VALUE + 5  # an attribute store on the module
        b = counter.bump()
        return x + a, before, a, b, counter.VALUE

    return f


@pytest.mark.parametrize("mode", ["plain", "break"])
def test_module_global_through_function_and_attribute(mode):
    from . import replay_once_counter as counter

    def reset():
        counter.VALUE = 0

    _run(_module_global_program(mode), lambda i: (_rand(i, 3),), reset, lambda args: counter.VALUE)
