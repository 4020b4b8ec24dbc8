"""The rule model: metadata, source behaviour, examples and the check/fix callables.

A rule (in the spirit of Fixit's ``LintRule`` and ruff's ``Violation``) is one object holding
everything a human reviews: a stable code (``MBM`` + 3 digits, grouped by family), a kebab-case
name, default severity, message, the config paths it is about, the rationale, the Megatron source
behaviour it mirrors (file:line and what happens), version applicability, the fix safety and
VALID / INVALID examples that run as tests. ``check`` yields :class:`Finding` objects from a
:class:`RuleContext`; the engine turns them into :class:`~mbmem_lint.diagnostics.Diagnostic`.

Families: 0xx tool/input, 1xx parallel layout, 2xx recompute & offload, 3xx CUDA graphs /
allocator / env vars, 4xx precision / optimizer / DDP / FSDP, 5xx PEFT, 6xx schema & overrides,
7xx memory capacity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from mbmem_lint.diagnostics import Applicability, Edit, Fix, Location, Severity
from mbmem_lint.parse.override_types import OverrideEntry, OverrideFile
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.flatten import LazyWrites, path_writes, write_order
from mbmem_lint.resolve.resolved import UNKNOWN, ResolvedRecipe, Write, is_known
from mbmem_lint.resolve.schema import CONFIG_CONTAINER, Schema
from mbmem_lint.settings import Settings
from mbmem_lint.sources import SourceFile

FAMILIES: dict[str, str] = {
    "0": "Tool and input diagnostics",
    "1": "Parallel layout",
    "2": "Recompute and offload",
    "3": "CUDA graphs, allocator and environment variables",
    "4": "Precision, optimizer, DDP and FSDP",
    "5": "PEFT",
    "6": "Schema and overrides",
    "7": "Memory capacity",
}

Behaviour = Literal[
    "raise",  # ValueError/TypeError/RuntimeError raised by Bridge or MCore
    "assert",  # AssertionError
    "silent-rewrite",  # the value is changed without an error (maybe a log line)
    "runtime-crash",  # fails after the GPUs are allocated (build/train)
    "oom",  # out of memory
    "no-effect",  # the setting silently does nothing
    "warning",  # a logged warning only
    "cost",  # accepted, but costs memory or throughput
]

CODE_PATTERN = r"^MBM\d{3}$"  # checked by Rule.validate (a test), so compiled there, not at start-up
NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
EXPECT_MARKER = "# <-"  # marks the expected line of an INVALID example


@dataclass(frozen=True)
class SourceRef:
    """The Megatron behaviour a rule mirrors: ``megatron/<pkg>/<file>.py:<lines>`` and what happens."""

    ref: str
    behaviour: Behaviour
    what: str


@dataclass(frozen=True)
class Example:
    """A recipe snippet (Megatron Bridge style), optionally with a YAML override.

    In an INVALID example the line the diagnostic must point at carries the marker ``# <-``
    (in the Python code, or in the YAML when the finding is on an override key).
    ``settings`` are ``[tool.mbmem-lint]`` keys (``{"torch-version": "2.10"}``). ``base`` is the
    same file at the base revision, for rules that compare two revisions (``check --base``).
    """

    code: str
    yaml: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    base: str | None = None  # the recipe as it was at the base revision (cross-revision rules: MBM703)

    def expected_location(self) -> tuple[str, int] | None:
        """(``"python"`` | ``"yaml"``, 1-based line) of the ``# <-`` marker."""
        for kind, text in (("python", self.code), ("yaml", self.yaml or "")):
            for i, line in enumerate(text.splitlines(), start=1):
                if EXPECT_MARKER in line:
                    return kind, i
        return None


@dataclass
class Finding:
    """One problem a rule found. ``location`` defaults to the anchor of ``fields[0]``."""

    message: str
    fields: list[str]
    location: Location | None = None
    severity: Severity | None = None  # overrides the rule default (e.g. a downgrade)
    fix: Fix | None = None
    notes: list[str] = field(default_factory=list)


class RuleContext:
    """What a rule sees: one resolved recipe (or one override file), settings and sources."""

    def __init__(
        self,
        recipe: ResolvedRecipe | None,
        settings: Settings,
        sources: dict[str, SourceFile],
        overrides: list[OverrideFile] | None = None,
        override_file: OverrideFile | None = None,
    ) -> None:
        self.recipe = recipe
        self.settings = settings
        self.sources = sources
        self.overrides = overrides or []
        self.override_file = override_file
        if recipe is not None:
            # The recipe of a recipe-scope rule (rules read it a few hundred times per recipe: a
            # plain attribute, not a property). Override-file rules have none.
            self.r: ResolvedRecipe = recipe

    # -- values ---------------------------------------------------------------------------
    def get(self, path: str) -> Any:
        """Effective value (after runtime rewrites); UNKNOWN when unresolvable. A field the resolver
        did not list falls back to its dataclass default from the schema (when the section is known)."""
        f = self.r.fields.get(path)
        if f is not None:
            return f.value
        if self.r.partial:
            return UNKNOWN  # an override file on its own: the recipe's values, defaults included, are unknown
        return _schema_default(self.r, path)

    def pre(self, path: str) -> Any:
        """Value as the recipe left it, before runtime rewrites."""
        if path in self.r.pre_runtime:
            return self.r.pre_runtime[path]
        return self.r.get(path)

    def known(self, path: str) -> bool:
        return is_known(self.get(path))

    def is_true(self, path: str, *, pre: bool = False) -> bool:
        v = self.pre(path) if pre else self.get(path)
        return is_known(v) and v is True

    def is_off(self, path: str, *, pre: bool = False) -> bool:
        """Known and falsy (False, None, 0, empty)."""
        v = self.pre(path) if pre else self.get(path)
        return is_known(v) and not v

    def as_int(self, path: str, default: int | None = None, *, pre: bool = False) -> int | None:
        """Known int value; ``default`` when the value is known to be None; None when unknown."""
        v = self.pre(path) if pre else self.get(path)
        if not is_known(v):
            return None
        if v is None:
            return default
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return None

    def as_str(self, path: str, *, pre: bool = False) -> str | None:
        v = self.pre(path) if pre else self.get(path)
        return v if is_known(v) and isinstance(v, str) else None

    def value_is(self, path: str, *values: Any, pre: bool = False) -> bool:
        v = self.pre(path) if pre else self.get(path)
        return is_known(v) and any(v == x for x in values)

    def section_class(self, section: str) -> str | None:
        return self.r.section_class(section)

    def as_list(self, path: str, *, pre: bool = False) -> list[Any] | None:
        v = self.pre(path) if pre else self.get(path)
        if not is_known(v):
            return None
        if v is None:
            return []
        if isinstance(v, (list, tuple)):
            return list(v)
        if isinstance(v, str):
            return [v]
        return None

    # -- parallel sizes -----------------------------------------------------------------------
    def tp(self) -> int | None:
        return self.as_int("model.tensor_model_parallel_size", 1)

    def pp(self) -> int | None:
        return self.as_int("model.pipeline_model_parallel_size", 1)

    def cp(self) -> int | None:
        return self.as_int("model.context_parallel_size", 1)

    def ep(self) -> int | None:
        return self.as_int("model.expert_model_parallel_size", 1)

    def vpp(self) -> int | None:
        """VPP (None when unset *or* unknown; check ``known`` first when it matters)."""
        return self.as_int("model.virtual_pipeline_model_parallel_size", None)

    def world_size(self) -> int | None:
        return self.r.target.world_size

    def dp(self) -> int | None:
        ws, tp, pp, cp = self.world_size(), self.tp(), self.pp(), self.cp()
        if ws is None or tp is None or pp is None or cp is None or tp * pp * cp == 0:
            return None
        if ws % (tp * pp * cp):
            return None
        return ws // (tp * pp * cp)

    # -- environment ----------------------------------------------------------------------------
    def env(self, name: str) -> Any:
        """``cfg.env_vars[name]`` as the recipe declares it: the raw Python value, None when the
        recipe does not set it, UNKNOWN when that cannot be known. (The launcher's environment
        wins over ``cfg.env_vars``; rules say so in their notes.) UNKNOWN for every name when the
        Megatron Bridge in use has no ``ConfigContainer.env_vars`` (before 0.6): the process
        environment then comes from the launcher alone."""
        if not _env_vars_field():
            return UNKNOWN
        key = f"env_vars.{name}"
        if key in self.r.fields:
            return self.pre(key)  # before runtime rewrites (e.g. nccl_ub forcing NCCL_NVLS_ENABLE=1)
        whole = self.pre("env_vars")
        if isinstance(whole, dict):
            if name in whole:
                return whole[name]
            return UNKNOWN if self.r.partial else None  # a lone override file: the recipe's env is unknown
        if "env_vars" in self.r.fields and not is_known(whole):
            return UNKNOWN
        return None

    def env_str(self, name: str) -> str | None | Any:
        """The string ``os.environ`` gets (``str(value)``), None when unset, UNKNOWN when unknown."""
        v = self.env(name)
        if v is None or not is_known(v):
            return v
        return str(v)

    def env_names(self) -> list[str]:
        # The effective dict (with keys runtime rewrites add) plus the recipe's own: no scan of
        # every field (there are ~1000 per recipe).
        effective = self.r.get("env_vars")
        names = {str(k) for k in effective if k != "_target_"} if isinstance(effective, dict) else set()
        whole = self.pre("env_vars")
        if isinstance(whole, dict):
            names.update(str(k) for k in whole if k != "_target_")
        return sorted(names)

    def env_anchor(self, name: str) -> Location:
        key = f"env_vars.{name}"
        if key in self.r.fields:
            return self.pre_anchor(key)
        return self.pre_anchor("env_vars")

    def env_known(self) -> bool:
        """False when ``cfg.env_vars`` as a whole cannot be known (e.g. ``{**unknown()}``), or when the
        Megatron Bridge in use has no such field."""
        if not _env_vars_field():
            return False
        if "env_vars" in self.r.fields:
            v = self.r.get("env_vars")
            return is_known(v) or isinstance(v, dict)
        return True

    # -- writes -------------------------------------------------------------------------------------
    def _path_writes(self, path: str) -> list[Write]:
        return path_writes(self.r, path)

    def write_position(self, w: Write) -> int:
        """Execution order of a write: its sequence number, else its place in a plain list."""
        return write_order(self.r, w)

    def writes(self, path: str) -> list[Write]:
        return list(self._path_writes(path))

    def invalid_writes(self) -> list[Write]:
        """Writes to attributes that are not fields of their class (typos, removed fields), in order."""
        writes = self.r.writes
        if isinstance(writes, LazyWrites):
            return writes.invalid()
        return [w for w in writes if not w.valid_field]

    def last_write(self, path: str) -> Write | None:
        ws = self._path_writes(path)
        return ws[-1] if ws else None

    def user_write(self, path: str) -> Write | None:
        """The last write before runtime rewrites (what the recipe, library or overrides set)."""
        for w in reversed(self._path_writes(path)):
            if w.origin != "runtime":
                return w
        return None

    def last_change(self, path: str, *, skip_origins: tuple[str, ...] = ()) -> int:
        """Position of the last write of ``path`` (ignoring ``skip_origins``), -1 when none."""
        for w in reversed(self._path_writes(path)):
            if w.origin not in skip_origins:
                return self.write_position(w)
        return -1

    def explicitly_set(self, path: str) -> bool:
        w = self.user_write(path)
        if w is not None:
            return w.origin not in ("default", "model-table")
        f = self.r.fields.get(path)
        return f is not None and f.origin not in ("default", "model-table", "runtime")

    def pre_anchor(self, path: str) -> Location:
        """Where the value as the recipe left it was set (not where a runtime rewrite happened)."""
        w = self.user_write(path)
        if w is not None and w.origin not in ("default", "model-table"):
            return w.anchor
        return self.r.anchor(path)

    def anchor(self, path: str) -> Location:
        return self.r.anchor(path)

    def recent(self, paths: list[str]) -> list[str]:
        """``paths`` with the most recently written first: findings point at the latest change."""
        return sorted(paths, key=lambda p: -self.last_change(p))

    # -- fixes ----------------------------------------------------------------------------------------
    def fix(
        self,
        description: str,
        applicability: Applicability,
        build: Callable[[], list[Edit] | None],
        saving_bytes: int | None = None,
    ) -> Fix | None:
        """A :class:`Fix` from ``build()`` (which calls :mod:`mbmem_lint.fix.edits`), or None when the
        edit primitives are unavailable or cannot express the change (a fix is always optional)."""
        # Built lazily (see Fix): the edits are computed only when shown or applied.
        return Fix(description, applicability, saving_bytes=saving_bytes, build=build)


def _load_schema() -> Any:
    """The schema of the Megatron Bridge data in use (None without shipped data: no defaults)."""
    try:
        return Schema.load()
    except Exception:
        return None


_ENV_FIELD: list[Any] = [None, True]  # (schema, its ConfigContainer has env_vars)


def _env_vars_field() -> bool:
    """The Megatron Bridge in use applies ``cfg.env_vars`` (a ConfigContainer field since 0.6)."""
    schema = _load_schema()
    if schema is not _ENV_FIELD[0]:
        container = schema.get(CONFIG_CONTAINER) if schema is not None else None
        _ENV_FIELD[:] = [schema, container is None or "env_vars" in container.fields]
    return bool(_ENV_FIELD[1])


_APPLIES: dict[tuple[str, str], bool] = {}  # (data key, bridge_since) → applies


def applies_to_bridge(rule: Rule) -> bool:
    """The rule describes the Megatron Bridge in use (its ``bridge_since`` or newer)."""
    if not rule.bridge_since:
        return True
    from mbmem_lint.resolve.versions import active

    data = active()
    key = (data.cache_key, rule.bridge_since)
    hit = _APPLIES.get(key)
    if hit is None:
        hit = _APPLIES[key] = data.at_least(rule.bridge_since)
    return hit


def _schema_default(recipe: ResolvedRecipe, path: str) -> Any:
    parts = path.split(".")
    if len(parts) != 2 or parts[0] == "env_vars":
        return UNKNOWN
    section, name = parts
    sec_val = recipe.get(section)
    if section in recipe.fields and (not is_known(sec_val) or sec_val is None):
        return UNKNOWN
    schema = _load_schema()
    if schema is None:
        return UNKNOWN
    qual = recipe.section_class(section)
    cls = schema.get(qual) if qual else schema.section_class(section)
    if cls is None:
        return UNKNOWN
    fs = None
    for q in schema.mro(cls.qualname) or [cls.qualname]:
        c = schema.get(q)
        if c is not None and name in c.fields:
            fs = c.fields[name]
            break
    if fs is None:
        return UNKNOWN
    d = fs.default
    if "value" in d:
        return d["value"]
    if "symbol" in d:
        return d["symbol"]
    return UNKNOWN


CheckFn = Callable[[RuleContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """One lint rule (``MBM123``, declared in ``rules/``): metadata, the Megatron behaviour it mirrors,
    VALID/INVALID examples and the ``check`` that yields :class:`Finding` objects."""

    code: str
    name: str
    severity: Severity
    summary: str  # one line: what the rule flags (the message template's gist)
    fields: tuple[str, ...]  # config paths involved
    rationale: str  # "Why is this bad"
    sources: tuple[SourceRef, ...]
    check: CheckFn
    valid: tuple[Example, ...]
    invalid: tuple[Example, ...]
    # The class of the rule's fixes in ruff's sense (None: no fix): safe = the run does exactly what
    # it did before, unsafe = the run changes, display-only = a suggestion. The engine never lets one
    # of the rule's fixes claim a safer class; a fix may be less safe (e.g. it edits a shared helper).
    fix_applicability: Applicability | None = None
    fix_description: str = ""
    fix_safety: str = ""  # why the fix is in its class (the docs' "Fix safety" section)
    versions: str = ""  # version applicability (torch / megatron-core), empty when none
    # The first Megatron Bridge release whose behaviour the rule describes ("0.6.0"; empty: every
    # shipped release). Against older data the rule does not run; ``bridge_note`` says why.
    bridge_since: str = ""
    bridge_note: str = ""
    scope: Literal["recipe", "overrides"] = "recipe"
    references: tuple[str, ...] = ()  # public issues, PRs and measurements behind the rule

    @property
    def family(self) -> str:
        return FAMILIES.get(self.code[3], "Other")

    def validate(self) -> None:
        if not re.match(CODE_PATTERN, self.code):
            raise ValueError(f"bad rule code {self.code!r}")
        if not re.match(NAME_PATTERN, self.name):
            raise ValueError(f"{self.code}: rule name must be kebab-case: {self.name!r}")
        if not self.sources:
            raise ValueError(f"{self.code}: a rule must cite the Megatron source behaviour")
        if not self.valid or not self.invalid:
            raise ValueError(f"{self.code}: a rule needs VALID and INVALID examples")
        if self.fix_applicability is not None and not self.fix_safety:
            raise ValueError(f"{self.code}: a fixable rule must say why its fix is {self.fix_applicability}")
        for ex in self.invalid:
            if ex.expected_location() is None:
                raise ValueError(f"{self.code}: INVALID example without a '{EXPECT_MARKER}' marker")


def findings(gen: Callable[[RuleContext], Iterator[Finding]]) -> CheckFn:
    """Identity decorator that documents a generator check function."""
    return gen


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``"2.10.0a0+git"`` → ``(2, 10, 0)``; None when absent or unparsable."""
    if not text:
        return None
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", text)
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split("."))


def override_entries(ctx: RuleContext) -> list[OverrideEntry]:
    return list(ctx.override_file.entries) if ctx.override_file else []


def entry_for(ctx: RuleContext, w: Write) -> OverrideEntry | None:
    """The YAML override entry that made the write ``w`` (by its value's or its key's location)."""
    for of in ctx.overrides:
        for e in of.entries:
            if e.location == w.location or e.key_location == w.location:
                return e
    return None
