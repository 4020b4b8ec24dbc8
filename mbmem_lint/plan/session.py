"""Re-resolve one recipe as if the user had written a candidate's changes: the real resolver with the
changes as ``--set`` items (after the user's own ``--set``), Bridge's runtime rewrites, then the rules.

Resolving a file is the expensive part (tens of milliseconds); re-resolving its recipe under new ``--set``
items reuses the loaded modules and the memoised library calls (well under a millisecond per candidate).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.discover.files import discover
from mbmem_lint.parse.override_types import OverrideFile
from mbmem_lint.parse.yaml_overrides import parse_dotlist
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions, Resolver, ResolveResult
from mbmem_lint.settings import Settings

SET_PATH = "<--set>"


class BadSetItem(ValueError):
    """A --set item the dotlist parser rejects."""


def set_item(path: str, value: Any) -> str:
    """``path=value`` in the form ``--set`` parses back to ``value`` (YAML 1.1 scalars, flow lists; strings
    quoted when they would read as something else or hold ``,``/``:``/brackets)."""
    return f"{path}={set_value(value)}"


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./:+-]*")


def set_value(value: Any) -> str:
    """The ``--set`` source of one value (the inverse of the dotlist parser for plain values): scalars as
    YAML writes them, flow lists without spaces (one shell word), strings plain when they read back as
    themselves, else single-quoted with backslash escapes."""
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and _round_trips(value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(set_value(v) for v in value) + "]"
    from mbmem_lint.literals import yaml_literal

    return yaml_literal(value)


@lru_cache(maxsize=4096)  # asked for every string value of every candidate; the answer depends on the text only
def _round_trips(value: str) -> bool:
    """``value`` written plainly reads back as the same string (``expandable_segments:True`` does)."""
    entries = parse_dotlist([f"x={value}"]).entries
    return len(entries) == 1 and entries[0].value == value


@dataclass(frozen=True)
class RecipeKey:
    """Which recipe of a session: its function and the YAML override files applied to it."""

    function: str
    yaml: tuple[str, ...] = ()

    @staticmethod
    def of(recipe: ResolvedRecipe) -> RecipeKey:
        return RecipeKey(recipe.function, tuple(p for p in recipe.overrides if p != SET_PATH))

    def matches(self, recipe: ResolvedRecipe) -> bool:
        return RecipeKey.of(recipe) == self


class RecipeSession:
    """The files of one plan run, registered once; :meth:`resolve` re-resolves a recipe under ``--set``."""

    def __init__(self, paths: list[str], settings: Settings, *, gpu: str | None = None,
                 world_size: int | None = None, function: str | None = None, recipe_ref: str | None = None) -> None:
        self.settings = settings
        found = discover(paths, settings)
        from mbmem_lint.pipeline import load_overrides

        self.overrides, diags = load_overrides(found)
        self.sources = dict(found.sources)
        self.diagnostics: list[Diagnostic] = [*found.diagnostics, *diags]
        self.function = function
        options = ResolveOptions(gpu=gpu, world_size=world_size, function=function, recipe_ref=recipe_ref)
        from mbmem_lint.pipeline import select_bridge_data

        self.bridge = select_bridge_data(settings, options)  # the Megatron Bridge data of this run
        self.resolver = Resolver(settings, options)
        self.envs = self.resolver.register(found.python)
        self.paired = self.resolver.pair_overrides(self.overrides)
        self.diagnostics.extend(self.resolver.result.diagnostics)

    def resolve_all(self, set_items: list[str] | tuple[str, ...] = ()) -> list[ResolvedRecipe]:
        """Every recipe of the session's files (and of the recipes its YAML files name)."""
        res = self._run(set_items, self.function, modules=True, paired=True)
        self.diagnostics.extend(d for d in res.diagnostics if d not in self.diagnostics)
        return res.recipes

    def resolve(self, key: RecipeKey, set_items: list[str] | tuple[str, ...]) -> ResolvedRecipe | None:
        """The recipe ``key`` with ``set_items`` applied (None when it no longer resolves)."""
        res = self._run(set_items, key.function, modules=not key.yaml, paired=bool(key.yaml))
        return next((r for r in res.recipes if key.matches(r)), None)

    def _run(self, set_items: list[str] | tuple[str, ...], function: str | None, *, modules: bool,
             paired: bool) -> ResolveResult:
        set_file: OverrideFile | None = None
        if set_items:
            set_file = parse_dotlist(list(set_items))
            bad = [d.message for d in set_file.diagnostics if d.severity == "error"]
            if bad:
                raise BadSetItem("; ".join(bad))
        opts = self.resolver.options
        opts.set_overrides = set_file
        opts.function = function
        self.resolver.result = ResolveResult()
        if modules:
            self.resolver.resolve_modules(self.envs)
        if paired:
            self.resolver.resolve_paired(self.paired)
        return self.resolver.result
