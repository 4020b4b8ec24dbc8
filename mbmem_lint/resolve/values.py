"""Abstract values the interpreter computes with.

Plain Python ``int``/``float``/``str``/``bool``/``None``, ``list`` and ``tuple`` stand for
themselves. Everything else is one of the classes below, or :class:`Unknown`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.resolved import Unknown

if TYPE_CHECKING:
    from mbmem_lint.resolve.interpreter import Interpreter
    from mbmem_lint.resolve.project import ModuleEnv
    from mbmem_lint.resolve.schema import ClassSchema


class Prov:
    """Where a value was written: the value's span, the user-facing anchor, origin and order."""

    __slots__ = ("loc", "anchor", "origin", "seq", "stmt", "target_text", "function", "note")

    def __init__(
        self,
        loc: Location,
        anchor: Location,
        origin: str,
        seq: int,
        stmt: Location | None = None,
        target_text: str | None = None,
        function: str | None = None,
        note: str = "",
    ) -> None:
        self.loc = loc
        self.anchor = anchor
        self.origin = origin
        self.seq = seq
        self.stmt = stmt
        self.target_text = target_text
        self.function = function
        self.note = note


class WriteRec:
    __slots__ = ("value", "prov", "valid")

    def __init__(self, value: Any, prov: Prov, valid: bool) -> None:
        self.value = value
        self.prov = prov
        self.valid = valid


class Slot:
    """One field of a config object: current value, its provenance and every write to it.

    Never changed in place: a write puts a new Slot in its table, so deep copies share slots (and
    their immutable ``history`` tuples) instead of copying them (clone.py)."""

    __slots__ = ("value", "prov", "history")

    def __init__(self, value: Any, prov: Prov, history: tuple[WriteRec, ...] = ()) -> None:
        self.value = value
        self.prov = prov
        self.history = history


class Obj:
    """An instance of a config dataclass (or of an unknown class, ``schema`` None)."""

    __slots__ = ("cls", "schema", "slots", "invalid", "created", "open", "havoc", "label", "default_prov")

    def __init__(self, cls: str, schema: ClassSchema | None, created: Prov) -> None:
        self.label: str | None = None  # module-level name it was bound to (userbuffers presets)
        self.open = False  # accept any model-provider field (real provider class is family-specific)
        self.havoc: Unknown | None = None  # set when unseen code may have changed it: defaults unknown
        self.cls = cls
        self.schema = schema
        self.slots: dict[str, Slot] = {}
        self.invalid: dict[str, Slot] = {}  # attributes set that are not fields of the class
        self.created = created
        self.default_prov: Prov | None = None  # provenance of the schema defaults read (made once)

    def __repr__(self) -> str:
        return f"Obj({self.cls})"


class DictVal:
    """A dict with per-key provenance (``env_vars`` keys each point at the line that set them)."""

    __slots__ = ("slots", "created")

    def __init__(self, created: Prov) -> None:
        self.slots: dict[Any, Slot] = {}
        self.created = created


@dataclass(frozen=True)
class Ext:
    """A name from outside the analysed code (``torch.bfloat16``, a schema class, a Bridge function)."""

    qualname: str


@dataclass
class Func:
    """A function defined in analysed code (its body in the interpreter's statement form), called by
    interpreting it."""

    name: str
    params: list[Any]
    body: list[Any]  # a str until first called, for library functions (library.FUNCTION_BODY_MARK)
    module: Any  # ModuleEnv
    loc: list[int]
    returns: str | None
    qualname: str
    closure: list[dict[str, Any]] | None = None  # enclosing functions' locals, innermost first (nested def, lambda)
    owner: Any = None  # the PyClass whose body defined it (zero-argument super())
    kind: str = "function"  # "function" | "staticmethod" | "classmethod" | "property"


class PyClass:
    """A class statement of analysed library code (a Megatron Bridge model bridge): its bases and the names
    its body bound. Only built where the project analyses classes (:mod:`mbmem_lint.resolve.bridges`)."""

    __slots__ = ("name", "qualname", "bases", "attrs")

    def __init__(self, name: str, qualname: str, bases: list[Any], attrs: dict[str, Any]) -> None:
        self.name = name
        self.qualname = qualname
        self.bases = bases  # PyClass, Ext (a class outside the analysed code) or Unknown
        self.attrs = attrs

    def mro(self) -> list[PyClass]:
        """Depth-first, left-to-right linearisation without repeats (equal to C3 for the single-inheritance
        chains of the bridges)."""
        out: list[PyClass] = []
        todo: list[PyClass] = [self]
        while todo:
            c = todo.pop(0)
            if c not in out:
                out.append(c)
                todo[:0] = [b for b in c.bases if isinstance(b, PyClass)]
        return out

    def lookup(self, name: str) -> tuple[bool, Any, PyClass | None]:
        for c in self.mro():
            if name in c.attrs:
                return True, c.attrs[name], c
        return False, None, None

    def __repr__(self) -> str:
        return f"PyClass({self.qualname})"


class PyInstance:
    """An instance of a :class:`PyClass` (its own attributes; the rest is looked up on the class)."""

    __slots__ = ("cls", "attrs")

    def __init__(self, cls: PyClass) -> None:
        self.cls = cls
        self.attrs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"PyInstance({self.cls.qualname})"


@dataclass
class BoundFunc:
    """A method of an analysed class bound to its instance (or class, for a classmethod)."""

    func: Func
    self_value: Any


@dataclass
class SuperProxy:
    """``super()`` inside a method of ``cls``: attribute lookup starts after ``cls`` in the MRO of ``obj``."""

    cls: PyClass
    obj: Any  # PyInstance or PyClass


class HFConfig:
    """A Hugging Face ``PretrainedConfig`` built from a ``config.json`` object.

    ``attrs`` holds the file's keys (nested ``*_config`` objects become HFConfig, other dicts DictVal).
    A key the file lacks is, for a complete file (``partial`` False), missing (``getattr`` defaults apply,
    ``hasattr`` is False) unless ``defaults`` gives the config class's default; for a partial file it is
    unknown."""

    __slots__ = ("attrs", "partial", "defaults", "label")

    def __init__(self, attrs: dict[str, Any], partial: bool, defaults: dict[str, Any], label: str) -> None:
        self.attrs = attrs
        self.partial = partial
        self.defaults = defaults
        self.label = label

    def __repr__(self) -> str:
        return f"HFConfig({self.label})"


@dataclass
class BoundMethod:
    """``target.name`` taken as a method of a config object or a plain value (str, list, dict, HF model
    handle); calling it is interpreted."""

    target: Any
    name: str


@dataclass(frozen=True)
class ModuleRef:
    """A module of the analysed code or the shipped library (``import x`` / ``from pkg import module``)."""

    name: str


@dataclass(frozen=True)
class LocalClass:
    """A class statement's class that the schema does not know: opaque (its instances are unknown)."""

    qualname: str


@dataclass(frozen=True)
class HFModel:
    """Result of ``AutoBridge.from_hf_pretrained(id)`` before ``.to_megatron_provider()``."""

    hf_id: Any  # str or Unknown
    revision: Any = None


def is_unknown(v: Any) -> bool:
    return isinstance(v, Unknown)


_KNOWN_EXTERNAL_ROOTS = frozenset({
    "megatron", "torch", "transformers", "nemo", "nemo_run", "modelopt", "transformer_engine", "omegaconf",
    "hydra", "huggingface_hub", "numpy", "typing_extensions",
}) | frozenset(getattr(sys, "stdlib_module_names", ()))


def is_known_external(module: str) -> bool:
    """Packages whose names stand for themselves (Bridge classes, torch dtypes, stdlib); any other
    unresolvable import is the user's own code that was not linted, so its names are unknown."""
    return module.split(".", 1)[0] in _KNOWN_EXTERNAL_ROOTS


class Deferred:
    """A library module's top-level ``NAME = ConfigClass(...)`` whose evaluation waits until NAME is read.

    Megatron Bridge modules define presets their users rarely touch (``training/comm_overlap.py`` builds 19
    ``TransformerLayerTPOverlapCfg`` objects at import, ~4 ms of a one-file check when a recipe only
    imports ``CommOverlapConfig``). Only statements whose result cannot depend on when they run are
    deferred (:meth:`Project.deferrable`): constructions of schema config classes from constants, the
    classes bound once in the module and the name assigned once. The value is computed once, by the
    statement itself in its module's frame, and the globals table keeps this object (a branch merge
    compares the same object whether or not a path read it)."""

    __slots__ = ("env", "stmt", "state", "value")

    def __init__(self, env: ModuleEnv, stmt: list[Any]) -> None:
        self.env = env
        self.stmt = stmt
        self.state = "new"  # new → running → done
        self.value: Any = None

    def get(self, interp: Interpreter) -> Any:
        if self.state == "done":
            return self.value
        if self.state == "running":
            return Unknown("a module-level value that refers to itself")
        from mbmem_lint.resolve.interpreter import Frame

        self.state = "running"
        frame = Frame(self.env, None, None)
        frame.cur = self.stmt[-1]
        may_total, interp.may_total = interp.may_total, 0  # the statement runs unconditionally, as at import
        interp.stack.append(frame)
        try:
            value = interp.eval(self.stmt[2])
            if isinstance(value, Obj) and value.label is None:
                value.label = self.stmt[1][0][1]  # as Interpreter.assign labels a module-level preset
        finally:
            interp.stack.pop()
            interp.may_total = may_total
        self.value, self.state = value, "done"
        return value


def realized(value: Any, interp: Interpreter) -> Any:
    """A globals-table value as the module's code sees it (a :class:`Deferred` is evaluated)."""
    return value.get(interp) if type(value) is Deferred else value
