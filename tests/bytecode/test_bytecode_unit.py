"""Unit tests of pyjit.bytecode: model, edits, assembler rules, helpers, analysis, printer,
flat replacement code and resume functions on hand-picked examples."""
from __future__ import annotations

import dis
import sys
import traceback
import types

import pytest

import pyjit.bytecode as bc
from pyjit.bytecode import opcodes
from pyjit.bytecode.resume import resume_point

PY311 = sys.version_info[:2] == (3, 11)


def _fn(code, like, closure=None):
    return types.FunctionType(code, like.__globals__, code.co_name, like.__defaults__, closure or like.__closure__)


# ---------------------------------------------------------------- model


def _loop(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
    return total


def test_decode_hides_encoding_and_links_targets():
    instructions = bc.decode(_loop.__code__)
    names = {i.opname for i in instructions}
    assert "EXTENDED_ARG" not in names and "CACHE" not in names
    jumps = [i for i in instructions if i.is_jump]
    assert jumps and all(isinstance(j.target, bc.Instruction) and j.target in instructions for j in jumps)
    # dis agrees on every jump target offset and every argument value
    by_offset = {i.offset: i for i in dis.get_instructions(_loop.__code__)}
    for inst in instructions:
        ref = by_offset[inst.offset]
        if inst.target is not None:
            assert ref.argval == inst.target.offset
        elif inst.opname == ref.opname and inst.arg is not None and inst.opname != "LOAD_GLOBAL":
            assert ref.argval == inst.argval
    if PY311:
        assert not names & set(opcodes.REAL_TO_VIRTUAL)  # directional names are hidden


def test_load_global_flag_and_names():
    def f():
        return len([1])

    load = next(i for i in bc.decode(f.__code__) if i.opname == "LOAD_GLOBAL")
    assert load.argval == "len" and load.flags == 1


# ---------------------------------------------------------------- assembler rules


def test_jump_direction_is_chosen_by_position():
    """A JUMP_FORWARD placed after its target becomes JUMP_BACKWARD (a real loop)."""

    def counter(n):
        i = 0
        return i

    def edit(instructions, spec):
        store = next(i for i in instructions if i.opname == "STORE_FAST")
        at = instructions.index(store) + 1
        head = bc.create_load_fast("i")
        body = [
            head,
            bc.create_load_fast("n"),
            bc.create_compare_op("<"),
        ]
        exit_ = bc.create_load_fast("i")
        body += bc.create_pop_jump_if(False, exit_)
        body += [
            bc.create_load_fast("i"),
            bc.create_load_const(1),
            bc.create_binary_op("+"),
            bc.create_store_fast("i"),
            bc.create_jump(head),  # created as JUMP_FORWARD, points backward
            exit_,
            bc.create_return_value(),
        ]
        instructions[at:] = body

    code = bc.transform_code(counter.__code__, edit)
    assert _fn(code, counter)(7) == 7
    assert "JUMP_BACKWARD" in {i.opname for i in bc.decode(code)}


@pytest.mark.skipif(PY311, reason="3.11 has backward conditional jumps")
def test_backward_conditional_jump_is_refused_with_hint():
    def f(x):
        return x

    def edit(instructions, spec):
        first = instructions[1]
        instructions[-1:-1] = [bc.create_load_fast("x"), *bc.create_pop_jump_if(True, first)]

    with pytest.raises(bc.AssemblyError, match="trampoline"):
        bc.transform_code(f.__code__, edit)


@pytest.mark.skipif(PY311, reason="FOR_ITER has no END_FOR on 3.11")
def test_for_iter_must_target_end_for():
    def edit(instructions, spec):
        end_for = next(i for i in instructions if i.opname == "END_FOR")
        at = instructions.index(end_for)
        instructions.insert(at, bc.create_nop())
        next(i for i in instructions if i.opname == "FOR_ITER").target = instructions[at]

    with pytest.raises(bc.AssemblyError, match="END_FOR"):
        bc.transform_code(_loop.__code__, edit)


def _try(x):
    try:
        y = 10 // x
    except ZeroDivisionError:
        y = -1
    return y


def test_exception_table_follows_moved_and_inserted_instructions():
    def edit(instructions, spec):
        div = next(i for i in instructions if i.opname == "BINARY_OP")
        assert div.exn is not None
        # 300 instructions inside the protected range, sharing its handler
        pad = [bc.create_nop() for _ in range(300)]
        for p in pad:
            p.exn = div.exn
        at = instructions.index(div)
        instructions[at:at] = pad

    code = bc.transform_code(_try.__code__, edit)
    f = _fn(code, _try)
    assert (f(2), f(0)) == (_try(2), _try(0))
    entries = [line for line in dis.Bytecode(code).dis().splitlines() if "->" in line]
    assert entries  # the table was re-encoded


def test_positions_survive_edits_for_tracebacks():
    def boom(x):
        y = x + 1
        return y / 0

    code = bc.transform_code(boom.__code__, lambda ins, spec: ins.__setitem__(slice(2, 2), [bc.create_nop()] * 50))
    original = [p for p in boom.__code__.co_positions() if p[0] is not None]
    edited = [p for p in code.co_positions() if p[0] is not None]
    assert sorted(set(original)) == sorted(set(edited))
    try:
        _fn(code, boom)(1)
    except ZeroDivisionError as e:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        assert frame.lineno == boom.__code__.co_firstlineno + 2
        assert frame.line.strip() == "return y / 0"


def test_arbitrary_constants_and_extended_arg_constants():
    unhashable = [1, 2]

    def build(spec):
        return [
            *bc.create_call_const(lambda v: v + [3], [bc.create_load_const(unhashable)]),
            bc.create_return_value(),
        ]

    def f():
        pass

    code = bc.make_flat_replacement(f.__code__, build)
    assert _fn(code, f)() == [1, 2, 3]
    # many constants: indices beyond 255 are encoded with EXTENDED_ARG
    def many(spec):
        out = []
        for k in range(300):
            out += [bc.create_load_const(("c", k)), bc.create_pop_top()]
        return out + [bc.create_load_const(("c", 299)), bc.create_return_value()]

    assert _fn(bc.make_flat_replacement(f.__code__, many), f)() == ("c", 299)


def test_pair_super_instructions_split_when_locals_move():
    def f():
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = 1
        b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = b9 = 2
        return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 + b9

    def edit(instructions, spec):
        spec.varnames.reverse()  # a0.. move to slots >= 16

    code = bc.transform_code(f.__code__, edit)
    assert _fn(code, f)() == f()


# ---------------------------------------------------------------- helpers


class _Base:
    def m(self, v):
        return ("base", v)


class _Child(_Base):
    def m(self, v, *rest, key=None, **extra):
        return ("child", super().m(v), rest, key, extra)


def test_flat_replacement_signature_and_zero_arg_super():
    original = _Child.m.__code__

    def build(spec):
        assert spec.arg_names == ["self", "v", "key", "rest", "extra"]
        # super().m(v) through the frame's first slot and the __class__ cell, then a tuple
        return [
            *bc.with_push_null([bc.create_load_global("super")]),
            *bc.create_call(0),
            bc.create_load_method("m"),
            bc.create_load_fast("v"),
            *bc.create_call(1),
            bc.create_load_fast("rest"),
            bc.create_load_fast("key"),
            bc.create_load_fast("extra"),
            bc.create_build_tuple(4),
            bc.create_return_value(),
        ]

    code = bc.make_flat_replacement(original, build)
    assert code.co_argcount == 5 and code.co_kwonlyargcount == 0
    assert code.co_flags & (0x04 | 0x08 | 0x20 | 0x80 | 0x200) == 0
    assert code.co_freevars == original.co_freevars == ("__class__",)
    assert code.co_varnames[:5] == original.co_varnames[:5]
    fn = types.FunctionType(code, _Child.m.__globals__, "m", None, _Child.m.__closure__)
    assert fn(_Child(), 1, 2, (3,), {"z": 4}) == (("base", 1), (3,), 2, {"z": 4})


def test_flat_replacement_keeps_cells_and_generators_become_plain():
    def outer():
        k = 5

        def gen(a):
            yield a + k
            (lambda: a)()

        return gen

    gen = outer()

    def build(spec):
        assert spec.cellvars == ["a"]
        return [bc.create_load_deref("a"), bc.create_load_deref("k"), bc.create_build_tuple(2), bc.create_return_value()]

    code = bc.make_flat_replacement(gen.__code__, build)
    assert not code.co_flags & 0x20
    assert _fn(code, gen)(3) == (3, 5)


def test_call_helpers():
    def target(a, b=0, *args, c=0, **kw):
        return (a, b, args, c, sorted(kw.items()))

    def f():
        pass

    def build(spec):
        return [
            *bc.with_push_null([bc.create_load_const(target)]),
            bc.create_load_const(1),
            bc.create_load_const(2),
            bc.create_load_const(3),
            *bc.create_call_kw(3, ("c",)),
            *bc.with_push_null([bc.create_load_const(target)]),
            bc.create_load_const((7, 8, 9)),
            bc.create_load_const({"z": 1}),
            bc.create_call_function_ex(True),
            bc.create_load_const("x"),
            bc.create_load_const("y"),
            *bc.create_rotate(3),
            bc.create_build_tuple(4),
            bc.create_return_value(),
        ]

    got = _fn(bc.make_flat_replacement(f.__code__, build), f)()
    assert got == (target(1, 2, c=3), "y", target(7, 8, 9, z=1), "x")


# ---------------------------------------------------------------- analysis and printer


def _with(cm, xs):
    with cm:
        for x in xs:
            print(x)
    return xs


def test_stack_contents_and_liveness():
    instructions = bc.decode(_with.__code__)
    contents = bc.stack_contents(instructions)
    call = next(i for i in instructions if i.opname == "LOAD_GLOBAL" and i.argval == "print")
    stack = contents[id(call)]
    assert [s.is_with_exit for s in stack] == [True, False]
    assert [s.is_iterator for s in stack] == [False, True]
    live = bc.live_locals(instructions, call)
    assert live == {"x", "xs"}  # x is read by the call; cm is never read again
    depths, max_depth = bc.stack_depths(instructions)
    assert depths[id(call)] == 2 and max_depth == _with.__code__.co_stacksize


def test_basic_blocks_partition_the_code():
    instructions = bc.decode(_try.__code__)
    blocks = bc.basic_blocks(instructions)
    flat = [i for b in blocks for i in b.instructions]
    assert flat == instructions
    targets = {id(i.target) for i in instructions if i.target is not None}
    targets |= {id(i.exn.target) for i in instructions if i.exn is not None}
    assert all(id(b.first) in targets or b is blocks[0] or blocks[blocks.index(b) - 1].last.is_jump
               or blocks[blocks.index(b) - 1].last.opname in opcodes.TERMINATORS for b in blocks)
    assert any(b.handlers for b in blocks)


def test_disassemble_names_targets_and_handlers():
    text = bc.disassemble(_try.__code__)
    assert "exception table:" in text and "L1:" in text and "->" in text
    assert "ZeroDivisionError" in text
    created = [bc.create_load_const(1), bc.create_return_value()]
    assert "LOAD_CONST" in bc.disassemble(created)


# ---------------------------------------------------------------- resume functions


def _resume_fn(code, like, *args):
    return types.FunctionType(code, like.__globals__, code.co_name, None, like.__closure__)(*args)


def _calls(a, b):
    return list([a, b])  # break after the callable (and its NULL) were pushed


def test_resume_mid_call_with_null_slot():
    instructions = bc.decode(_calls.__code__)
    load_a = next(i for i in instructions if i.argval == "a" or (isinstance(i.argval, tuple) and "a" in i.argval))
    point = resume_point(_calls.__code__, load_a.offset)
    assert point.stack_depth == 2 and len(point.null_slots) == 1
    code = bc.make_resume_code(_calls.__code__, load_a.offset, 2, ["a", "b"], null_slots=point.null_slots)
    assert _resume_fn(code, _calls, list, 7, 8) == [7, 8]


def test_resume_is_cached_and_refuses_handlers_with_location():
    code = _try.__code__
    instructions = bc.decode(code)
    ret = instructions[-2] if instructions[-1].opname == "RETURN_VALUE" else instructions[-1]
    ret_point = next(i for i in instructions if i.opname == "LOAD_FAST" and i.argval == "y" and i.lineno == code.co_firstlineno + 5)
    a = bc.make_resume_code(code, ret_point.offset, 0, ["y"])
    assert bc.make_resume_code(code, ret_point.offset, 0, ["y"]) is a
    assert _resume_fn(a, _try, 42) == 42
    handler_store = next(i for i in instructions if i.opname == "STORE_FAST" and i.lineno == code.co_firstlineno + 4)
    point = resume_point(code, handler_store.offset)
    assert not point.supported
    with pytest.raises(bc.ResumeError, match=rf"{__file__.rsplit('/', 1)[-1]}:\d+"):
        bc.make_resume_code(code, handler_store.offset, point.stack_depth, [])
    assert ret is not None


def test_resume_missing_local_raises_instead_of_crashing():
    def f(x):
        y = x * 2
        return y + x

    instructions = bc.decode(f.__code__)
    ret = next(i for i in instructions if i.opname.startswith("LOAD_FAST") and i.lineno == f.__code__.co_firstlineno + 2)
    code = bc.make_resume_code(f.__code__, ret.offset, 0, ["x"])  # y is live but not passed
    with pytest.raises(UnboundLocalError):
        _resume_fn(code, f, 1)


def test_resume_shares_cells_with_closures_made_before_the_break():
    def f():
        n = 1
        get = lambda: n  # noqa: E731
        n = 2
        return get()

    instructions = bc.decode(f.__code__)
    point = next(i for i in instructions if i.lineno == f.__code__.co_firstlineno + 3 and i.opname == "LOAD_CONST")
    code = bc.make_resume_code(f.__code__, point.offset, 0, ["get", "n"])
    cell = types.CellType(1)
    # `get` over that cell, as the part of f run before the break would have built it
    inner = next(c for c in f.__code__.co_consts if isinstance(c, types.CodeType))
    get = types.FunctionType(inner, f.__globals__, "get", None, (cell,))
    assert _resume_fn(code, f, *[{"get": get, "n": cell}[n] for n in bc.resume_parameter_names(f.__code__, 0, ["get", "n"])]) == 2
    assert cell.cell_contents == 2


def test_resume_refuses_generators():
    def g():
        yield 1

    first = bc.decode(g.__code__)[-1]
    with pytest.raises(bc.ResumeError, match="generator"):
        bc.make_resume_code(g.__code__, first.offset, 0, [])


def test_copy_instructions_remaps_targets_and_handlers():
    original = bc.decode(_try.__code__)
    copied = bc.copy_instructions(original)
    assert all(a is not b for a, b in zip(original, copied))
    ids = {id(i) for i in copied}
    assert all(id(i.target) in ids for i in copied if i.target is not None)
    assert all(id(i.exn.target) in ids for i in copied if i.exn is not None)
    f = _fn(bc.assemble(copied, _try.__code__), _try)
    assert (f(5), f(0)) == (_try(5), _try(0))
    assert bc.assemble(original, _try.__code__).co_code == _try.__code__.co_code  # original untouched


def test_generated_code_is_dumped_to_the_debug_dir(tmp_path):
    from pyjit import config

    def f(x):
        y = x + 1
        return y

    ret = next(i for i in bc.decode(f.__code__) if i.lineno == f.__code__.co_firstlineno + 2)
    with config.patch(debug_dir=str(tmp_path)):
        code = bc.make_resume_code(f.__code__, ret.offset, 0, ["y"])
    dumped = list((tmp_path / "bytecode").iterdir())
    assert len(dumped) == 1 and code.co_name in dumped[0].name
    text = dumped[0].read_text()
    assert f"{__file__}:{ret.lineno}" in text and "RETURN_VALUE" in text


def test_inconsistent_edits_are_refused_not_assembled():
    def f(x):
        return x

    def unbalanced(instructions, spec):
        # a value pushed on one path only, joined with the other path: a crash if assembled
        ret = next(i for i in instructions if i.opname == "RETURN_VALUE")
        at = instructions.index(ret)
        load = instructions[at - 1]
        instructions[at - 1:at - 1] = [bc.create_load_fast("x"), *bc.create_pop_jump_if(True, load), bc.create_load_const(1)]

    with pytest.raises(bc.StackAnalysisError):
        bc.transform_code(f.__code__, unbalanced)

    def dangling(instructions, spec):
        instructions.insert(1, bc.create_jump(bc.create_nop()))

    with pytest.raises(bc.AssemblyError, match="not in the list"):
        bc.transform_code(f.__code__, dangling)


def test_generated_code_is_valid_for_dis():
    code = bc.make_resume_code(_with.__code__, next(
        i for i in bc.decode(_with.__code__) if i.opname == "LOAD_GLOBAL" and i.argval == "print"
    ).offset, 2, ["x", "xs"])
    text = dis.Bytecode(code).dis()
    assert "BEFORE_WITH" not in text  # the __exit__ was passed, not a context manager
    assert code.co_argcount == 4 and code.co_varnames[:4] == ("___stack0", "___stack1", "x", "xs")
