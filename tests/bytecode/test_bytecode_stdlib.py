"""Standard-library sweep: every code object (nested functions, comprehensions, lambdas, class
bodies included) of every .py file of the running interpreter's standard library directory
(site-packages excluded) must decode and reassemble to byte-identical ``co_code``, exception
table and line table, with the same ``co_stacksize``; and pyjit's stack-effect table must agree
with ``dis.stack_effect`` on every instruction. Files are compiled with ``compile()``, which
produces the same code objects as importing them (files that do not compile on this version,
e.g. lib2to3 test data, are counted and skipped).

Time switch: by default CPython's own regression-test package (``Lib/test``, ~900 files) is left
out to keep this folder within its time budget; ``PYJIT_TEST_STDLIB=full`` includes it (counts of
both runs are in docs/bytecode.md).

``co_stacksize`` is compared too. The only allowed difference: CPython sizes the stack for
handler code it later proved unreachable (6 functions of ``Lib/test`` per version), so its value
can be larger than the maximum over reachable code, which is what pyjit computes; such cases are
counted.
"""
from __future__ import annotations

import dis
import os
import sys
import sysconfig
import types
import warnings

import pytest
from bytecode_helpers import all_code_objects

from pyjit.bytecode import assemble, decode, opcodes, stack_depths, stack_effect
from pyjit.bytecode.analysis import initial_depth


FULL = os.environ.get("PYJIT_TEST_STDLIB", "") == "full"


def _stdlib_files() -> list[str]:
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        parts = os.path.relpath(dirpath, root).split(os.sep)
        if "site-packages" in parts or (not FULL and parts[0] == "test"):
            dirnames[:] = []
            continue
        dirnames.sort()
        files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return files


class Sweep:
    def __init__(self) -> None:
        self.files = self.skipped = self.codes = self.identical = 0
        self.instructions = self.effects_checked = 0
        self.mismatches: list[str] = []
        self.dead_code_stacksize: list[str] = []
        self.effect_mismatches: list[str] = []


@pytest.fixture(scope="module")
def sweep() -> Sweep:
    s = Sweep()
    for path in _stdlib_files():
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                top = compile(source, path, "exec")
        except (SyntaxError, UnicodeDecodeError, ValueError):
            s.skipped += 1
            continue
        s.files += 1
        for code in all_code_objects(top):
            s.codes += 1
            _roundtrip(code, s)
    print(
        f"\n[stdlib sweep {sys.version_info[0]}.{sys.version_info[1]}] files={s.files} skipped={s.skipped} "
        f"codes={s.codes} identical={s.identical} dead_code_stacksize={len(s.dead_code_stacksize)} "
        f"instructions={s.instructions} "
        f"stack_effects_checked={s.effects_checked}"
    )
    return s


def _roundtrip(code: types.CodeType, s: Sweep) -> None:
    where = f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}"
    try:
        instructions = decode(code)
        for inst in instructions:
            _check_effect(inst, s, where)
        new = assemble(instructions, code)
    except Exception as e:  # reported as a mismatch, with the location
        s.mismatches.append(f"{where}: {type(e).__name__}: {e}")
        return
    s.instructions += len(instructions)
    diffs = [
        name for name in ("co_code", "co_exceptiontable", "co_linetable") if getattr(new, name) != getattr(code, name)
    ]
    if diffs:
        s.mismatches.append(f"{where}: {diffs}")
        return
    s.identical += 1
    if new.co_stacksize != code.co_stacksize:
        reachable = stack_depths(instructions, initial_depth(instructions, code.co_flags))[0]
        if new.co_stacksize < code.co_stacksize and len(reachable) < len(instructions):
            s.dead_code_stacksize.append(where)
        else:
            s.mismatches.append(f"{where}: co_stacksize {new.co_stacksize} != {code.co_stacksize}")


def _check_effect(inst, s: Sweep, where: str) -> None:
    real = opcodes.OPMAP.get(inst.opname, inst.opcode)  # 3.11 virtual jumps: the decoded opcode
    op = inst.opcode if inst.opname in opcodes.VIRTUAL_TO_REAL else real
    arg = inst.arg if opcodes.has_arg(op) else None
    for jump in ((False, True) if inst.target is not None else (False,)):
        s.effects_checked += 1
        expected = dis.stack_effect(op, arg, jump=jump)
        got = stack_effect(inst.opname, arg, jump)
        if got != expected and len(s.effect_mismatches) < 50:
            s.effect_mismatches.append(f"{where}: {inst!r} jump={jump}: {got} != {expected}")


def test_stdlib_roundtrip_is_byte_identical(sweep):
    assert sweep.codes > 10000  # the sweep really ran over the standard library
    assert len(sweep.dead_code_stacksize) <= sweep.codes // 1000
    assert not sweep.mismatches, f"{len(sweep.mismatches)} of {sweep.codes}:\n" + "\n".join(sweep.mismatches[:20])


def test_stdlib_stack_effects_agree_with_dis(sweep):
    assert sweep.effects_checked > 500000
    assert not sweep.effect_mismatches, "\n".join(sweep.effect_mismatches)
