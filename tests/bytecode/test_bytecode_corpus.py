"""Executing round trip: every corpus function behaves the same after an edit that inserts
no-op sequences before nearly every instruction (offsets move, jumps and constants need
EXTENDED_ARG), with and without redirecting jumps/handlers to the inserted code."""
from __future__ import annotations

import sys

import bytecode_corpus_a  # noqa: F401  (registers cases)
import bytecode_corpus_b  # noqa: F401
import bytecode_corpus_c  # noqa: F401
import bytecode_corpus_d  # noqa: F401
import pytest
from bytecode_corpus_base import CASES, SNIPPETS
from bytecode_helpers import all_code_objects, insert_noops, run, run_snippet, with_code

from pyjit.bytecode import decode, opcodes

ACTIVE_SNIPPETS = [s for s in SNIPPETS if sys.version_info[:2] >= s.min_version]

# Opcodes the compiler never puts into a code object's co_code (checked against the whole
# standard library in test_bytecode_stdlib.py): CACHE/EXTENDED_ARG are hidden by the model
# (EXTENDED_ARG is forced by the edit below), the others are interpreter-internal.
NEVER_EMITTED = {"CACHE", "EXTENDED_ARG", "RESERVED", "INTERPRETER_EXIT", "ENTER_EXECUTOR", "EXIT_INIT_CHECK"}


def test_corpus_size():
    functions = {c.fn for c in CASES}
    assert len(functions) >= 150, f"corpus has {len(functions)} functions"


@pytest.mark.parametrize("retarget", [False, True], ids=["keep-targets", "retarget"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_noop_edit_preserves_behaviour(case, retarget):
    expected = run(case.fn, case)
    edited = with_code(case.fn, insert_noops(case.fn.__code__, retarget))
    assert run(edited, case) == expected


@pytest.mark.parametrize("retarget", [False, True], ids=["keep-targets", "retarget"])
@pytest.mark.parametrize("snippet", ACTIVE_SNIPPETS, ids=[s.name for s in ACTIVE_SNIPPETS])
def test_noop_edit_preserves_snippets(snippet, retarget):
    expected = run_snippet(snippet)
    assert expected.error is None, expected.error
    assert run_snippet(snippet, lambda code: insert_noops(code, retarget)) == expected


def _corpus_codes():
    for c in CASES:
        yield from all_code_objects(c.fn.__code__)
    for s in ACTIVE_SNIPPETS:
        yield from all_code_objects(compile(s.source, s.name, s.mode))


def test_corpus_covers_every_opcode():
    used = {inst.opname for code in _corpus_codes() for inst in decode(code)}
    # 3.11's directional jumps are presented under one name; check the real ones separately.
    required = {n for n in opcodes.OPMAP if not n.startswith("INSTRUMENTED")} - NEVER_EMITTED
    real_used = set(used)
    for virtual, pair in opcodes.VIRTUAL_TO_REAL.items():
        real_used.discard(virtual)
        for code in _corpus_codes():
            raw = code.co_code
            real_used |= {name for name in pair if opcodes.OPMAP[name] in raw[::2]}
    missing = sorted(required - real_used)
    assert not missing, f"corpus does not use: {missing}"


def test_edit_forces_extended_args():
    """The edit must really exercise EXTENDED_ARG on jumps and on constant indices."""
    ext_jumps = ext_consts = 0
    for c in CASES:
        code = insert_noops(c.fn.__code__, retarget=True)
        raw = code.co_code
        for i in range(0, len(raw) - 2, 2):
            if raw[i] == opcodes.EXTENDED_ARG:
                nxt = opcodes.OPNAME[raw[i + 2]]
                if nxt in opcodes.REAL_JUMPS:
                    ext_jumps += 1
                elif nxt == "LOAD_CONST":
                    ext_consts += 1
    assert ext_jumps > 100 and ext_consts > 300, (ext_jumps, ext_consts)
