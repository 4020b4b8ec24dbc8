"""Where a fix that sets a config path makes its change, decided from the recipe's writes alone (no
libcst), so a fix can say it in its description before its edits are built.

A careful engineer edits the statement that set the value rather than adding a contradicting one:

* ``edit``: the statement that set the value last is in a linted Python file: its value is replaced;
* ``extend``: the object (or dict) holding the field was built last by a call / dict literal in a
  linted file: the keyword (or key) is added there;
* ``override``: a YAML override sets it last, and wins over the recipe: the YAML value is replaced;
* ``append``: the value comes from elsewhere (Megatron Bridge code, a default, the model table): an
  assignment is added before the recipe's ``return``, and the description says why.

Bridge's runtime rewrites are not statements anyone can edit: the statement before them is the one
edited. A statement inside a helper function of the user's project is edited too, and the fix names
the other recipes that run the helper (their runs change with it).
"""

from __future__ import annotations

import re
from typing import Literal

from mbmem_lint.diagnostics import Location
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.flatten import path_writes, write_order
from mbmem_lint.resolve.resolved import ResolvedRecipe, Write
from mbmem_lint.sources import Sources

MAX_NAMED = 4  # other recipes named in a description ("and more" after that)
MORE = "..."  # in Placement.also: more recipes than those named call the helper


def enclosing_writes(recipe: ResolvedRecipe, path: str) -> list[Write]:
    """The recipe's own writes (runtime rewrites left out) of the objects and dicts that hold ``path``."""
    parts = path.split(".")
    return [w for k in range(1, len(parts)) for w in path_writes(recipe, ".".join(parts[:k])) if w.origin != "runtime"]


def contains(outer: Location, inner: Location) -> bool:
    if outer.path != inner.path or outer.end_line is None or outer.end_column is None:
        return False
    s_ok = (inner.line, inner.column) >= (outer.line, outer.column)
    e_in = (inner.end_line or inner.line, inner.end_column or inner.column)
    return s_ok and e_in <= (outer.end_line, outer.end_column)


def current_write(recipe: ResolvedRecipe, path: str) -> tuple[Write | None, Write | None]:
    """(last statement that set ``path`` and is still in effect, or None; the last write of an
    enclosing object or dict after it, when that is what holds the value now). Runtime rewrites
    are skipped: they are Bridge's, not statements of the recipe."""
    own = [w for w in path_writes(recipe, path) if w.origin != "runtime"]
    current = own[-1] if own else None
    enclosing: Write | None = None
    for w in enclosing_writes(recipe, path):
        if enclosing is None or write_order(recipe, w) > write_order(recipe, enclosing):
            enclosing = w
    if enclosing is not None and (current is None or write_order(recipe, enclosing) > write_order(recipe, current)):
        # A keyword argument of the call that built the enclosing object is the current statement.
        if current is not None and contains(enclosing.location, current.location):
            return current, None
        return None, enclosing
    return current, None


def in_linted_python(w: Write, sources: Sources) -> bool:
    if w.origin != "recipe" or w.location.in_library:
        return False
    src = sources.get(w.location.path)
    return src is not None and src.kind == "python"


@dataclass(frozen=True)
class Placement:
    """Where a fix sets a path (see the module docstring). ``write`` is the statement edited (or, for
    ``append``, the write the value comes from; None for a default); ``helper`` the user function
    holding an edited statement when it is not the recipe's own; ``also`` the other recipes that run
    that helper."""

    how: Literal["edit", "extend", "override", "append"]
    write: Write | None = None
    helper: str | None = None
    also: tuple[str, ...] = ()
    opaque: bool = False  # append: the linted statement assigns an object built elsewhere (``cfg.peft = p``)

    @property
    def changes_other_recipes(self) -> bool:
        return bool(self.also)

    def note(self) -> str:
        """What the fix description adds about where the change is made ('' for the recipe's own line)."""
        w = self.write
        if self.how in ("edit", "extend") and self.helper and w is not None:
            where = f"in {self.helper}() ({w.location.path}:{w.location.line})"
            if not self.also:
                return f" {where}, which only this recipe calls"
            names = [name.rsplit("::", 1)[-1] for name in self.also if name != MORE]
            if MORE in self.also:
                return f" {where}; this also changes other recipes that call it: {', '.join(names)} and more"
            that = "other recipes that call it" if len(names) != 1 else "other recipe that calls it"
            return f" {where}; this also changes {len(names)} {that}: {', '.join(names)}"
        if self.how == "append" and self.opaque and w is not None:
            return (f"; added before `return`: {w.location.path}:{w.location.line} assigns an object built "
                    "elsewhere")
        if self.how == "append":
            return f"; added before `return`: the value comes from {_origin_text(w)}"
        return ""


def _origin_text(w: Write | None) -> str:
    if w is None or w.origin == "default":
        return "the field's default"
    loc = w.location
    if w.origin == "library":
        return f"Megatron Bridge ({loc.path}:{loc.line})"
    if w.origin == "model-table":
        return "the model's architecture table"
    if w.origin == "cli":
        return "a --set override"
    if w.origin == "recipe":
        return f"{loc.path}:{loc.line}, which is not among the linted files"
    return f"{loc.path}:{loc.line}"


def place(recipe: ResolvedRecipe, path: str, sources: Sources) -> Placement:
    """Where a fix that sets ``path`` in ``recipe`` makes its change."""
    current, enclosing = current_write(recipe, path)
    if current is not None and current.origin in ("yaml", "cli"):
        return Placement("override", current)
    target, how = (current, "edit") if current is not None else (enclosing, "extend")
    if target is None or not in_linted_python(target, sources):
        return Placement("append", current or enclosing)
    if how == "extend" and not _extensible(target, sources):
        return Placement("append", enclosing, opaque=True)  # ``cfg.peft = peft_cfg``: no call to extend
    helper = target.function if target.function not in (None, recipe.function) else None
    return Placement(how, target, helper, other_recipes(recipe, target, sources) if helper else ())  # type: ignore[arg-type]


def _extensible(w: Write, sources: Sources) -> bool:
    """The value of ``w`` is a dict literal, or a call without ``**`` unpacking (which could already
    carry the keyword): a key or keyword can be added to it."""
    loc = w.location
    src = sources.get(loc.path)
    if src is None or loc.end_line is None or loc.end_column is None:
        return False
    lines = src.lines()
    if not (1 <= loc.line <= loc.end_line <= len(lines)):
        return False
    if loc.line == loc.end_line:
        text = lines[loc.line - 1][loc.column - 1 : loc.end_column - 1]
    else:
        text = "\n".join([lines[loc.line - 1][loc.column - 1 :], *lines[loc.line : loc.end_line - 1],
                          lines[loc.end_line - 1][: loc.end_column - 1]])
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        return True  # a key added last wins over ``**BASE`` unpacked before it
    return bool(re.match(r"[A-Za-z_][\w.]*\s*\(", text)) and text.endswith(")") and "**" not in text


def other_recipes(recipe: ResolvedRecipe, w: Write, sources: Sources) -> tuple[str, ...]:
    """Recipes other than ``recipe`` that run the helper function holding ``w``: up to
    :data:`MAX_NAMED`, then :data:`MORE` when there are others (the search stops there)."""
    from mbmem_lint.fix.callers import recipes_running

    if not w.function:
        return ()
    found, complete = recipes_running(sources, w.location.path, w.function, limit=MAX_NAMED + 2)
    others = [fn if path == recipe.path else f"{path}::{fn}" for path, fn in found
              if not (path == recipe.path and fn == recipe.function)]
    if len(others) > MAX_NAMED or not complete:
        return (*others[:MAX_NAMED], MORE)
    return tuple(others)
