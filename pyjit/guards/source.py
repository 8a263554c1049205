"""Sources: how a value is reached from a frame, printed as a Python expression.

A source names a value the tracer read from outside the traced code (an argument, a global,
a closure cell, an attribute or item of one of those). It has three renderings:

- ``name()``: the user-facing form used in logs and guard failure reasons (``L['self'].fc.weight``,
  ``G['scale']``, ``C['k']``);
- ``expr()``: a Python expression valid inside the generated replacement function, whose
  parameters are the frame's argument slots, whose free variables are the original's and whose
  globals are the user function's globals (so ``G['w']`` is just ``w``);
- ``get(frame)``: the value itself, for the pure-Python guard checker and for tests;
- ``tree_node(tree)``: the matching accessor node of the C guard tree (``pyjit._C.GuardTree``).

Module children/parameters/buffers have their own sources so the generated code reads the
``_modules``/``_parameters``/``_buffers`` dicts directly instead of going through the slow
``nn.Module.__getattr__``, while still printing like plain attribute access.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class FrameValues:
    """What a source can read from: the frame's argument slots by name, globals, closure cells."""

    locals: dict[str, Any]
    globals: dict[str, Any]
    closure: dict[str, Any]  # freevar name -> cell contents


class Source:
    """Base class; subclasses are frozen dataclasses (hashable, usable as dict keys)."""

    def name(self) -> str:
        raise NotImplementedError

    def expr(self) -> str:
        raise NotImplementedError

    def get(self, frame: FrameValues) -> Any:
        raise NotImplementedError

    def tree_node(self, tree: Any) -> Any:
        raise NotImplementedError

    def root(self) -> "Source":
        return self

    def __str__(self) -> str:
        return self.name()


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    """An argument slot of the frame (``slot`` is its index in the flat argument tuple)."""

    local_name: str
    slot: int

    def name(self) -> str:
        return f"L[{self.local_name!r}]"

    def expr(self) -> str:
        return self.local_name

    def get(self, frame: FrameValues) -> Any:
        return frame.locals[self.local_name]

    def tree_node(self, tree: Any) -> Any:
        return tree.arg(self.slot)


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    """A name in the function's module globals (or builtins when ``builtin`` is true)."""

    global_name: str
    builtin: bool = False

    def name(self) -> str:
        return f"G[{self.global_name!r}]"

    def expr(self) -> str:
        return self.global_name

    def get(self, frame: FrameValues) -> Any:
        if self.builtin:
            import builtins

            return getattr(builtins, self.global_name)
        return frame.globals[self.global_name]

    def tree_node(self, tree: Any) -> Any:
        return tree.builtin(self.global_name) if self.builtin else tree.global_(self.global_name)


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of the frame function's closure cell ``index`` (free variable ``var``)."""

    var: str
    index: int

    def name(self) -> str:
        return f"C[{self.var!r}]"

    def expr(self) -> str:
        return self.var

    def get(self, frame: FrameValues) -> Any:
        return frame.closure[self.var]

    def tree_node(self, tree: Any) -> Any:
        return tree.closure(self.index)


@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.attr}"

    def expr(self) -> str:
        if self.attr.isidentifier():
            return f"{self.base.expr()}.{self.attr}"
        return f"getattr({self.base.expr()}, {self.attr!r})"

    def get(self, frame: FrameValues) -> Any:
        return getattr(self.base.get(frame), self.attr)

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).attr(self.attr)

    def root(self) -> Source:
        return self.base.root()


@dataclasses.dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    key: Any  # int, str or another hashable constant with a faithful repr

    def name(self) -> str:
        return f"{self.base.name()}[{self.key!r}]"

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key!r}]"

    def get(self, frame: FrameValues) -> Any:
        return self.base.get(frame)[self.key]

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).item(self.key)

    def root(self) -> Source:
        return self.base.root()


@dataclasses.dataclass(frozen=True)
class ModuleDictSource(Source):
    """An entry of an nn.Module's ``_modules``/``_parameters``/``_buffers`` dict; prints as ``.name``."""

    base: Source
    dict_name: str  # "_modules" | "_parameters" | "_buffers"
    key: str

    def name(self) -> str:
        if self.key.isidentifier():
            return f"{self.base.name()}.{self.key}"
        return f"{self.base.name()}[{self.key}]"  # nn.Sequential children: L['self'].layers[0]

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.dict_name}[{self.key!r}]"

    def get(self, frame: FrameValues) -> Any:
        return getattr(self.base.get(frame), self.dict_name)[self.key]

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).attr(self.dict_name).item(self.key)

    def root(self) -> Source:
        return self.base.root()


@dataclasses.dataclass(frozen=True)
class FuncAttrSource(Source):
    """``__defaults__``/``__kwdefaults__`` and similar read off a function object."""

    base: Source
    attr: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.attr}"

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.attr}"

    def get(self, frame: FrameValues) -> Any:
        return getattr(self.base.get(frame), self.attr)

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).attr(self.attr)

    def root(self) -> Source:
        return self.base.root()


def _module_dict(module_name: str) -> dict[str, Any]:
    import sys

    return sys.modules[module_name].__dict__


@dataclasses.dataclass(frozen=True)
class ModuleGlobalSource(Source):
    """A global of another module (the globals of an inlined function defined elsewhere)."""

    module: str
    global_name: str

    def name(self) -> str:
        return f"sys.modules[{self.module!r}].{self.global_name}"

    def expr(self) -> str:
        return f"__import__('sys').modules[{self.module!r}].__dict__[{self.global_name!r}]"

    def get(self, frame: FrameValues) -> Any:
        return _module_dict(self.module)[self.global_name]

    def tree_node(self, tree: Any) -> Any:
        import functools

        getter = _dict_getters.get(self.module)
        if getter is None:  # one callable per module: the tree shares the accessor node
            getter = _dict_getters[self.module] = functools.partial(_module_dict, self.module)
        return tree.call(getter).item(self.global_name)


_dict_getters: dict[str, Any] = {}
