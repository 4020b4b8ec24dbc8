"""The resolver's output: the effective config of one recipe, with provenance.

Rules and the estimator read only this module's types; they never see the
interpreter's internals. Values are plain JSON-like Python values:

* ``int``, ``float``, ``str``, ``bool``, ``None``, ``list``, ``dict``;
* torch dtypes and enum members as dotted strings (``"torch.bfloat16"``);
* config objects are flattened: the object's own path holds
  ``{"_target_": "<qualified class name>"}`` and each of its fields has a path
  of its own (``"peft"`` → ``{"_target_": "megatron.bridge.peft.lora.LoRA"}``,
  ``"peft.dim"`` → ``32``); an object bound to a module-level name (a userbuffers preset) also
  carries that name as ``"_name_"``;
* :data:`UNKNOWN` (an :class:`Unknown` instance) where the value cannot be
  resolved statically. Rules must not fire on unknowns.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.records import dataclass, field

# Where a value came from, as written in ``resolve --format json``.
ORIGINS = (
    "recipe",  # set in a linted (user) file
    "library",  # set by Megatron Bridge library code (from the shipped summary)
    "default",  # dataclass field default from the schema
    "model-table",  # architecture from the bundled/user HF model table
    "runtime",  # rewritten by Bridge at runtime (see ``note``)
    "yaml",  # YAML override file
    "cli",  # --set dotlist override
)


class Unknown:
    """A value that cannot be known statically. Carries the reason for messages."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = "not statically resolvable") -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"UNKNOWN({self.reason})"

    def __bool__(self) -> bool:  # never let an unknown silently act as a truth value
        raise TypeError("UNKNOWN has no truth value; check is_known() first")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unknown)

    def __hash__(self) -> int:
        return hash(Unknown)


UNKNOWN = Unknown()


# Types of plain JSON scalars: known, immutable, copied and converted as they are.
PLAIN_TYPES = frozenset({bool, int, float, str, type(None)})


def is_known(value: Any) -> bool:
    """True when ``value`` (and everything inside a list/dict) is known."""
    if type(value) in PLAIN_TYPES:  # the common case, without the isinstance chain
        return True
    if isinstance(value, Unknown):
        return False
    if isinstance(value, (list, tuple)):
        return all(is_known(v) for v in value)
    if isinstance(value, dict):
        return all(is_known(v) for v in value.values())
    return True


@dataclass(slots=True)
class ResolvedField:
    """The effective value of one config path: where it came from, where it was set and where to point
    the user."""

    value: Any
    origin: str  # one of ORIGINS
    location: Location  # where the value was set (innermost: may be library code)
    anchor: Location  # where to point a user: a line in a linted file (the call into the library, ...)
    note: str = ""  # for runtime rewrites: why; for unknowns: the reason


@dataclass(slots=True)
class Write:
    """One assignment to a config path, in execution order (including overwritten ones)."""

    path: str
    value: Any
    origin: str
    location: Location  # span of the value expression (assignment RHS, keyword-argument value, YAML value)
    anchor: Location  # user-facing line in a linted file (the call into the library when set there)
    valid_field: bool  # False when the object's class has no such field (typo, removed field)
    owner_class: str | None  # qualified class of the object written to, when known
    # Text of the assignment's target as written (``cfg.model.tensor_model_parallel_size``) for fixes.
    target_text: str | None = None
    # Span of the whole statement (``cfg.a.b = 1``) or of the ``name=value`` keyword argument.
    statement: Location | None = None
    function: str | None = None  # enclosing function of the write, when in a function
    seq: int = -1  # execution order across the recipe (-1: not recorded, e.g. synthetic writes)


@dataclass
class Rewrite:
    """A runtime rewrite Bridge applies before training (resolve/runtime.py lists them, with their source)."""

    path: str
    old: Any
    new: Any
    reason: str
    cause_paths: list[str] = field(default_factory=list)  # fields whose values triggered it


@dataclass
class Target:
    """The GPU and world size a recipe is checked against, and where each came from."""

    gpu: str | None  # canonical GPU catalog name, e.g. "h100-80gb"
    world_size: int | None
    gpu_source: str  # "cli" | "pyproject" | "recipe-name" | "default"
    world_size_source: str


@dataclass
class ResolvedRecipe:
    """The effective config of one recipe function, by path, with every write and runtime rewrite:
    what rules and the estimator read."""

    path: str  # file as given on the command line
    function: str  # recipe function name ("<module>" for module-level scripts)
    location: Location  # the ``def`` line (or first statement for scripts)
    fields: dict[str, ResolvedField]
    writes: list[Write]
    rewrites: list[Rewrite]
    target: Target
    # Values as the recipe (and overrides) left them, for every path a runtime rewrite changed;
    # other paths are unchanged by the runtime (read them from ``fields``).
    pre_runtime: dict[str, Any] = field(default_factory=dict)
    # Paths of overrides that were applied (YAML files, --set), for reporting.
    overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # resolver remarks (e.g. unknown HF model id)
    # Name of the local holding the ConfigContainer in the recipe (``cfg``, ``config``) and the span
    # of the recipe's final ``return`` statement: fixes insert new assignments before it.
    config_var: str | None = None
    return_location: Location | None = None
    # A YAML override file checked on its own (resolve/partial.py): only what it sets is known; the
    # recipe's values, defaults included, are unknown. ``path`` is the YAML file, ``function`` "".
    partial: bool = False
    # Where the model architecture came from, for AutoBridge providers: {"hf_id", "origin" (bundled / cache /
    # pyproject / unknown), "path", "source", "bridge", "provider", "confidence"} or {"hf_id", "origin":
    # "unknown", "reason"}; None when the recipe builds its provider itself.
    architecture: dict[str, Any] | None = None

    # -- convenience accessors used by rules and the estimator --------------------------
    def get(self, path: str, default: Any = UNKNOWN) -> Any:
        """Effective value of ``path`` or ``default`` (UNKNOWN) when absent."""
        f = self.fields.get(path)
        return default if f is None else f.value

    def known(self, path: str) -> bool:
        f = self.fields.get(path)
        return f is not None and is_known(f.value)

    def anchor(self, path: str) -> Location:
        """Best user-facing location for ``path``: where it was set, else the recipe ``def``."""
        f = self.fields.get(path)
        return f.anchor if f is not None else self.location

    def section_class(self, section: str) -> str | None:
        v = self.get(section)
        if isinstance(v, dict) and isinstance(v.get("_target_"), str):
            return str(v["_target_"])
        return None

    def unknown_paths(self) -> list[str]:
        return sorted(p for p, f in self.fields.items() if not is_known(f.value))


def recipe_from_values(
    values: dict[str, Any],
    *,
    path: str = "recipe.py",
    function: str = "recipe_config",
    gpu: str | None = "h100-80gb",
    world_size: int | None = None,
) -> ResolvedRecipe:
    """Build a :class:`ResolvedRecipe` from ``{"model.hidden_size": 4096, ...}``.

    For tests of rules and the estimator that do not need the resolver. Every field
    gets origin ``recipe`` at a line of its own (in insertion order, from line 2).
    """
    def_loc = Location(path, 1, 1)
    fields: dict[str, ResolvedField] = {}
    writes: list[Write] = []
    for i, (p, v) in enumerate(values.items(), start=2):
        loc = Location(path, i, 5)
        fields[p] = ResolvedField(v, "recipe", loc, loc)
        writes.append(Write(p, v, "recipe", loc, loc, True, None, f"cfg.{p}"))
    return ResolvedRecipe(
        path=path,
        function=function,
        location=def_loc,
        fields=fields,
        writes=writes,
        rewrites=[],
        target=Target(gpu, world_size, "cli", "cli"),
    )
