"""What an override is, apart from how it was read: the entries of a YAML override file or of the
``--set`` dotlists (:mod:`mbmem_lint.parse.yaml_overrides` parses both).

Kept apart from the parser so that a check of Python files only, which never reads YAML, does not
load it: the resolver, the rule engine and the fixes only need these types.
"""

from __future__ import annotations

from typing import Any, Literal

from mbmem_lint.diagnostics import Diagnostic, Location
from mbmem_lint.records import dataclass, field

__all__ = ["MISSING", "Interpolation", "Missing", "OverrideEntry", "OverrideFile", "OverrideOp"]


class Missing:
    """OmegaConf's ``???``: keeps the recipe value."""

    def __repr__(self) -> str:
        return "???"


MISSING = Missing()


@dataclass(frozen=True)
class Interpolation:
    """An OmegaConf ``${...}`` string, resolved by the resolver against the merged tree."""

    text: str


OverrideOp = Literal["set", "add", "force", "delete"]


@dataclass
class OverrideEntry:
    """One override of a config path from a YAML file or a ``--set`` item: value, operation and the
    spans of its key and value."""

    path: str  # dotted config path: "model.tensor_model_parallel_size", "env_vars.NCCL_NVLS_ENABLE"
    value: Any  # JSON-like value, MISSING, Interpolation, or a dict with "_target_"
    op: OverrideOp  # "set" (plain), "add" (+key), "force" (++key), "delete" (~key)
    location: Location  # the value's span (key span when there is no value)
    key_location: Location  # the key's span (for rename fixes)
    # [start, end) character offsets of the value / key in the file text (dotlists: in the item string).
    value_offsets: tuple[int, int] | None = None
    key_offsets: tuple[int, int] | None = None
    via_alias: bool = False  # the value came through a YAML alias or merge key (location = the anchor's node)


@dataclass
class OverrideFile:
    """A parsed YAML override file (or the ``--set`` dotlists): its entries, the recipe it names and
    its parse diagnostics."""

    path: str  # as given; "<--set>" for command-line dotlists
    entries: list[OverrideEntry] = field(default_factory=list)
    recipe_ref: str | None = None  # "FILE::FUNCTION" from "# mbmem-lint: recipe=..." on the first line
    diagnostics: list[Diagnostic] = field(default_factory=list)  # parse problems (MBM0xx)
