"""Generated Python code objects with a frame's *flat* signature (replacement code, guard checkers).

The C core runs a replacement code object in place of a frame. Its contract (docs/contracts.md):
parameters are the original's argument slots as plain positionals (positional, keyword-only,
``*args`` tuple, ``**kwargs`` dict, in frame order) and ``co_freevars`` is identical to the
original's. Rather than hand-assembling bytecode for every Python version, we write readable
Python source with exactly that shape and let CPython's compiler produce the code object:

    def __outer():
        k = None                       # one dummy per free variable of the original
        def __pyjit_f_0(self, x):      # the original's argument names, flat
            __graph = '__pyjit_const_0__'   # patched to the compiled graph object
            __out = __graph(x, self._modules['fc']._parameters['weight'])
            return (__out[0], x)
        return __pyjit_f_0

The inner code object is taken from ``__outer``'s constants, and the placeholder strings in its
``co_consts`` are replaced by the real objects (graph callables, types, expected values). This
keeps the compiled callable out of the user's module globals, works unchanged on 3.11-3.13, and
``PYJIT_DEBUG_DIR``/``bytecode`` logging can show the source itself.
"""
from __future__ import annotations

import types
from typing import Any

from ..logs import get_logger

_log = get_logger("bytecode")


def flat_arg_names(code: types.CodeType) -> list[str]:
    """The names of the frame's argument slots in frame order (what the C callback's args hold)."""
    n = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & 0x04:  # CO_VARARGS
        n += 1
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        n += 1
    return list(code.co_varnames[:n])


class ConstPool:
    """Objects the generated code needs, referenced by local names bound from patched constants."""

    def __init__(self, prefix: str = "___") -> None:
        self.prefix = prefix
        self._by_id: dict[int, str] = {}
        self.values: dict[str, Any] = {}  # local name -> object
        self._keep: list[Any] = []

    def ref(self, obj: Any, hint: str = "c") -> str:
        """A local name that holds ``obj`` inside the generated function."""
        key = id(obj)
        if key in self._by_id:
            return self._by_id[key]
        hint = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in hint)[:40]
        name = f"{self.prefix}{hint}_{len(self.values)}"
        self._by_id[key] = name
        self.values[name] = obj
        self._keep.append(obj)  # keep ids unique while the pool lives
        return name


def build_flat_code(
    original: types.CodeType,
    fn_name: str,
    body: list[str],
    pool: ConstPool,
) -> tuple[types.CodeType, str]:
    """Compile ``body`` (lines, no indentation) into a code object with ``original``'s flat shape.

    Returns the code object and the generated source (for logs and debug dumps).
    """
    params = flat_arg_names(original)
    freevars = list(original.co_freevars)
    lines = ["def __pyjit_outer():"]
    for var in freevars:
        lines.append(f"    {var} = None")
    lines.append(f"    def {fn_name}({', '.join(params)}):")
    if freevars:
        # Mention every free variable so the inner function closes over all of them, in the
        # compiler's canonical (sorted) order, exactly like the original.
        lines.append(f"        if 0: ({', '.join(freevars)},)")
    placeholders: dict[str, Any] = {}
    for i, (name, value) in enumerate(pool.values.items()):
        marker = f"__pyjit_const_{i}_{id(pool)}__"
        placeholders[marker] = value
        lines.append(f"        {name} = {marker!r}")
    for line in body:
        lines.append("        " + line)
    lines.append(f"    return {fn_name}")
    source = "\n".join(lines) + "\n"
    outer = compile(source, f"<pyjit generated for {original.co_name} at {original.co_filename}:{original.co_firstlineno}>", "exec")
    inner = _find_code(outer, fn_name)
    consts = tuple(placeholders.get(c, c) if isinstance(c, str) else c for c in inner.co_consts)
    code = inner.replace(co_consts=consts)
    if code.co_freevars != original.co_freevars:
        raise AssertionError(
            f"generated code free variables {code.co_freevars} differ from {original.co_freevars}"
        )
    _log.info("generated %s:\n%s", fn_name, source)
    return code, source


def _find_code(module_code: types.CodeType, fn_name: str) -> types.CodeType:
    for c in module_code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == fn_name:
                return c
            found = _find_code_or_none(c, fn_name)
            if found is not None:
                return found
    raise AssertionError(f"generated function {fn_name} not found")


def _find_code_or_none(code: types.CodeType, fn_name: str) -> types.CodeType | None:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == fn_name:
                return c
            found = _find_code_or_none(c, fn_name)
            if found is not None:
                return found
    return None


def make_function(code: types.CodeType, func: types.FunctionType) -> types.FunctionType:
    """A function running ``code`` with ``func``'s globals and closure (the pure-Python runtime)."""
    return types.FunctionType(code, func.__globals__, code.co_name, None, func.__closure__)
