"""Sources: how a value is reached from a frame, printed as a Python expression.

A source names a value the tracer read from outside the traced code (an argument, a global,
a closure cell, an attribute or item of one of those). It has these renderings:

- ``name()``: the user-facing form used in logs and guard failure reasons (``L['self'].fc.weight``,
  ``G['scale']``, ``C['k']``);
- ``reconstruct(codegen)``: the instructions that push the value inside generated flat-signature
  code (:class:`pyjit.trace.pycodegen.PyCodegen`): argument slots by name (``LOAD_FAST``),
  closure cells with ``LOAD_DEREF``, globals with ``LOAD_GLOBAL`` (the code runs with the user
  function's globals), then ``LOAD_ATTR``/``BINARY_SUBSCR`` steps; a source pushes its base
  through ``codegen.load_source``, which loads a local instead where the generated code already
  holds that base (:func:`shared_prefixes`: bases several graph inputs share);
- ``expr()``: the placeholder name standing for the source in the expression text that variable
  trackers compose in their ``reconstruct`` (only while :func:`sources_as_tokens` is active;
  the output codegen compiles that text to instructions, see ``pyjit/trace/output_graph.py``);
- ``get(frame)``: the value itself, for guard failure reasons and tests;
- ``tree_node(tree)``: the matching accessor node of the C guard tree (``pyjit._C.GuardTree``).

Module children/parameters/buffers have their own sources so the generated code reads the
``_modules``/``_parameters``/``_buffers`` dicts directly instead of going through the slow
``nn.Module.__getattr__``, while still printing like plain attribute access.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from ..trace.pycodegen import PyCodegen

# While replacement code is generated: maps a source to the placeholder name that stands for it
# in expression text (see Source.expr). A context variable, not a parameter, because variable
# trackers call ``source.expr()`` without a codegen at hand.
_token_of: contextvars.ContextVar[Callable[["Source"], str] | None] = contextvars.ContextVar(
    "pyjit_source_tokens", default=None
)


@contextlib.contextmanager
def sources_as_tokens(token_of: Callable[["Source"], str]) -> Iterator[None]:
    """Within the block, ``source.expr()`` returns ``token_of(source)``."""
    reset = _token_of.set(token_of)
    try:
        yield
    finally:
        _token_of.reset(reset)


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
        """The placeholder name for this source in the expression being compiled (see module doc)."""
        token_of = _token_of.get()
        if token_of is None:
            raise AssertionError("Source.expr() is only available while replacement code is generated")
        return token_of(self)

    def reconstruct(self, codegen: "PyCodegen") -> None:
        """Append the instructions that push this value (see module docstring)."""
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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_frame_variable(self.local_name)

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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_global(self.global_name)  # finds builtins too, like the user's own code

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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_frame_variable(self.var)  # the replacement has the original's free variables

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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_attr(self.attr)

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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_item(self.key)

    def get(self, frame: FrameValues) -> Any:
        return self.base.get(frame)[self.key]

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).item(self.key)

    def root(self) -> Source:
        return self.base.root()


def _dict_keys_list(d: dict[Any, Any]) -> list[Any]:
    return list(dict.keys(d))


def _dict_values_list(d: dict[Any, Any]) -> list[Any]:
    return list(dict.values(d))


@dataclasses.dataclass(frozen=True)
class DictEntriesSource(Source):
    """A dict's keys or values as a list in storage order: keys that are not constants (tensors,
    parameters) and their values are reached by position, ``ItemSource(DictEntriesSource(d,
    "keys"), i)``, never by hashing the key."""

    base: Source
    part: str  # "keys" | "values"

    def name(self) -> str:
        return f"list({self.base.name()}.{self.part}())"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        fn = _dict_keys_list if self.part == "keys" else _dict_values_list
        codegen.call_const(fn, [lambda: codegen.load_source(self.base)])

    def get(self, frame: FrameValues) -> Any:
        d = self.base.get(frame)
        return _dict_keys_list(d) if self.part == "keys" else _dict_values_list(d)

    def tree_node(self, tree: Any) -> Any:
        node = self.base.tree_node(tree)
        return node.dict_keys() if self.part == "keys" else node.dict_values()

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

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.dict_source())  # the instructions of base, LOAD_ATTR dict_name
        codegen.load_item(self.key)

    def dict_source(self) -> "AttrSource":
        """The module's dict itself (``L['self']._modules``), which generated code may share."""
        return AttrSource(self.base, self.dict_name)

    def get(self, frame: FrameValues) -> Any:
        return getattr(self.base.get(frame), self.dict_name)[self.key]

    def tree_node(self, tree: Any) -> Any:
        return self.base.tree_node(tree).attr(self.dict_name).item(self.key)

    def root(self) -> Source:
        return self.base.root()


@dataclasses.dataclass(frozen=True)
class FuncAttrSource(AttrSource):
    """``__defaults__``/``__kwdefaults__``/``__code__`` read off a function object (an AttrSource
    kept as its own type so guards on function internals are easy to tell apart in logs/tests)."""


def _module_dict(module_name: str) -> dict[str, Any]:
    return sys.modules[module_name].__dict__


@dataclasses.dataclass(frozen=True)
class ModuleGlobalSource(Source):
    """A global of another module (the globals of an inlined function defined elsewhere)."""

    module: str
    global_name: str

    def name(self) -> str:
        return f"sys.modules[{self.module!r}].{self.global_name}"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        # Looked up through sys.modules on every call, like get() and the guards do.
        codegen.load_const(sys.modules)
        codegen.load_item(self.module)
        codegen.load_attr("__dict__")
        codegen.load_item(self.global_name)

    def get(self, frame: FrameValues) -> Any:
        return _module_dict(self.module)[self.global_name]

    def tree_node(self, tree: Any) -> Any:
        import functools

        getter = _dict_getters.get(self.module)
        if getter is None:  # one callable per module: the tree shares the accessor node
            getter = _dict_getters[self.module] = functools.partial(_module_dict, self.module)
        return tree.call(getter).item(self.global_name)


_dict_getters: dict[str, Any] = {}


# Sources whose ``reconstruct`` pushes their base through ``codegen.load_source``: a local of
# the generated code holding the base is then read instead of the base's own steps.
_READS_BASE_VIA_CODEGEN = (AttrSource, ItemSource, ModuleDictSource, DictEntriesSource)


def shared_prefixes(sources: "list[Source]") -> "list[Source]":
    """The proper prefixes (bases, bases of bases, ...) that two or more of ``sources`` read
    through, shortest first, for generated code to compute once into a local: the graph inputs
    ``L['self'].layers[i].weight`` all pass through ``L['self'].layers``. Roots (arguments,
    globals, cells) are single instructions and never listed; a prefix is left out when a
    longer listed one serves exactly the same sources (it would be read once anyway)."""
    users: dict[Source, set[int]] = {}
    depth: dict[Source, int] = {}
    for i, source in enumerate(sources):
        chain = []
        s = source
        while isinstance(s, _READS_BASE_VIA_CODEGEN):
            s = _base_of(s)
            chain.append(s)
        for d, prefix in enumerate(reversed(chain)):
            if isinstance(prefix, _READS_BASE_VIA_CODEGEN):
                users.setdefault(prefix, set()).add(i)
                depth[prefix] = d
    shared = {p for p, u in users.items() if len(u) >= 2}
    # longer[p]: the shared prefixes that extend p (p is one of their proper bases); one walk
    # down each prefix's bases, not a test of every pair (hundreds of module paths in a model).
    longer: dict[Source, list[Source]] = {p: [] for p in shared}
    for q in shared:
        s = q
        while isinstance(s, _READS_BASE_VIA_CODEGEN):
            s = _base_of(s)
            if s in longer:
                longer[s].append(q)
    kept = [p for p in shared if not any(users[q] == users[p] for q in longer[p])]
    return sorted(kept, key=lambda p: (depth[p], min(users[p])))


def _base_of(source: Source) -> Source:
    """What ``source.reconstruct`` loads through ``codegen.load_source``."""
    if isinstance(source, ModuleDictSource):
        return source.dict_source()
    return source.base  # type: ignore[attr-defined, no-any-return]
