"""One Python function that reads the values of many sources from a frame.

Guards that relate several values (``distinct_memory(...)`` over a graph's inputs,
``a is b`` between two paths to one object) run in Python on every call. Reading each source
through :meth:`Source.get` walks a chain of method calls per attribute; a model's graph has
hundreds of inputs (``L['self'].layer1[0].bn1.running_mean``...), so that walk cost about a
millisecond a call. :func:`compile_reader` instead generates the expressions themselves
(``getattr(f.locals['self'], 'layer1')``...) into one function, evaluated by the interpreter
at bytecode speed, with every base shared by several sources read once.

The generated code does exactly what ``Source.get`` does (``getattr``, subscripts with the same
keys, the same dicts of the frame); sources of other kinds, and keys whose ``repr`` is not a
literal, are read through their own ``get``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .source import AttrSource, ClosureSource, FrameValues, ItemSource, LocalSource, ModuleDictSource, Source

Reader = Callable[[FrameValues], tuple[Any, ...]]


def _literal_key(key: Any) -> bool:
    return type(key) in (int, str)


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[Source, str] = {}
        self.constants: dict[str, Any] = {}

    def value(self, source: Source) -> str:
        """A local variable holding ``source``'s value (emitting its read once)."""
        name = self.names.get(source)
        if name is not None:
            return name
        expr = self._expr(source)
        name = f"v{len(self.names)}"
        self.lines.append(f"    {name} = {expr}")
        self.names[source] = name
        return name

    def _expr(self, s: Source) -> str:
        if type(s) is LocalSource:
            return f"f.locals[{s.local_name!r}]"
        if type(s) is ClosureSource:
            return f"f.closure[{s.var!r}]"
        if isinstance(s, AttrSource):  # FuncAttrSource reads the same way
            return f"getattr({self.value(s.base)}, {s.attr!r})"
        if type(s) is ItemSource and _literal_key(s.key):
            return f"{self.value(s.base)}[{s.key!r}]"
        if type(s) is ModuleDictSource:
            return f"getattr({self.value(s.base)}, {s.dict_name!r})[{s.key!r}]"
        const = f"s{len(self.constants)}"
        self.constants[const] = s
        return f"{const}.get(f)"


def compile_reader(sources: Sequence[Source]) -> Reader:
    """``reader(frame) == tuple(s.get(frame) for s in sources)``, in one generated function.
    Exceptions of a read propagate as they would from ``Source.get``."""
    em = _Emitter()
    outs = [em.value(s) for s in sources]
    body = "\n".join(em.lines) or "    pass"
    src = f"def read(f):\n{body}\n    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})\n"
    namespace: dict[str, Any] = dict(em.constants)
    exec(compile(src, "<pyjit source reader>", "exec"), namespace)  # noqa: S102 - our own generated reads
    reader: Reader = namespace["read"]
    reader.__doc__ = src  # what it reads, for debugging
    return reader
