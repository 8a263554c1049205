"""pyjit's bytecode layer: decode, edit, assemble and analyse code objects (CPython 3.11-3.13).

Torch-free and pure Python. The frontend builds its symbolic interpreter on :func:`decode`
and its replacement/resume code on the ``create_*`` helpers, :func:`make_flat_replacement`,
:func:`make_resume_code` and :func:`assemble`. Design, opcode coverage and test counts:
``docs/bytecode.md``; the contract: ``docs/contracts.md``.

Modules: ``opcodes`` (version tables), ``instruction`` (model), ``decode``, ``assemble``,
``codetables`` (line/exception table formats), ``stack_effect``, ``analysis``, ``create``
(instruction builders), ``transform`` (flat replacement), ``resume`` (resume functions),
``disasm`` (printer).
"""
from __future__ import annotations

import sys

from .analysis import (
    BasicBlock,
    StackAnalysisError,
    StackSlot,
    basic_blocks,
    compute_stacksize,
    live_locals,
    live_locals_map,
    stack_contents,
    stack_depths,
)
from .assemble import AssemblyError, assemble
from .create import (
    create_before_with,
    create_binary_op,
    create_binary_subscr,
    create_build_list,
    create_build_map,
    create_build_tuple,
    create_call,
    create_call_const,
    create_call_function_ex,
    create_call_kw,
    create_compare_op,
    create_copy,
    create_delete_fast,
    create_jump,
    create_load_attr,
    create_load_closure,
    create_load_const,
    create_load_deref,
    create_load_fast,
    create_load_fast_check,
    create_load_global,
    create_load_method,
    create_nop,
    create_pop_jump_if,
    create_pop_top,
    create_push_null,
    create_raise,
    create_resume,
    create_return_const,
    create_return_value,
    create_rotate,
    create_store_attr,
    create_store_deref,
    create_store_fast,
    create_store_global,
    create_store_subscr,
    create_swap,
    create_unpack_sequence,
    with_push_null,
)
from .decode import decode, localsplus_names
from .disasm import disassemble
from .instruction import ExnHandler, Instruction, copy_instructions, create_instruction
from .stack_effect import stack_effect, stack_effect_split
from .transform import CodeSpec, argument_slot_count, make_flat_replacement, transform_code

from .resume import (
    ResumeError,
    ResumePoint,
    make_resume_code,
    resume_cache_size,
    resume_parameter_names,
    resume_point,
)

# The public names: everything imported above (submodules stay reachable as attributes).
__all__ = sorted(
    name
    for name, value in list(globals().items())
    if not name.startswith("_") and name != "annotations" and not isinstance(value, type(sys))
)
