"""Combine fixes deterministically and apply their edits to text (in memory; no I/O)."""

from __future__ import annotations

from collections.abc import Iterable

from mbmem_lint.diagnostics import Diagnostic, Edit, Fix
from mbmem_lint.records import dataclass, field


class EditConflict(ValueError):
    """Edits of one text overlap in a way that has no deterministic combination."""


def _edit_key(e: Edit) -> tuple[int, int, str]:
    return (e.start, e.end, e.replacement)


def _conflicts(a: Edit, b: Edit) -> bool:
    """Two different edits of one file conflict when their ranges overlap, or when one inserts
    strictly inside the other's range. Insertions at the same point and touching ranges combine."""
    if a.path != b.path or a == b:
        return False
    if a.start < b.end and b.start < a.end:
        return True
    if a.start == a.end and b.start < a.start < b.end:
        return True
    return b.start == b.end and a.start < b.start < a.end


def normalize_edits(edits: Iterable[Edit]) -> list[Edit]:
    """Sorted by (start, end, replacement), identical duplicates merged; raises on conflicts."""
    out: list[Edit] = []
    for e in sorted(set(edits), key=_edit_key):
        if e.start > e.end:
            raise EditConflict(f"bad edit range {e.start}..{e.end}")
        for prev in out:
            if _conflicts(prev, e):
                raise EditConflict(f"edits {prev.start}..{prev.end} and {e.start}..{e.end} overlap")
        out.append(e)
    return out


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply the edits of one file. Insertions at the same offset go in sorted-replacement order;
    an insertion at the start of a replaced range goes before the replacement."""
    ordered = normalize_edits(edits)
    parts: list[str] = []
    pos = 0
    for e in ordered:
        if e.end > len(text):
            raise EditConflict(f"edit {e.start}..{e.end} past the end of the text ({len(text)})")
        parts.append(text[pos : e.start])
        parts.append(e.replacement)
        pos = max(pos, e.end)
    parts.append(text[pos:])
    return "".join(parts)


@dataclass
class FixPlan:
    """Fixes accepted for applying, in deterministic order, and those dropped for a conflict."""

    accepted: list[Diagnostic] = field(default_factory=list)
    dropped: list[tuple[Diagnostic, str]] = field(default_factory=list)

    def edits_by_path(self) -> dict[str, list[Edit]]:
        out: dict[str, list[Edit]] = {}
        for d in self.accepted:
            assert d.fix is not None
            for e in d.fix.edits:
                out.setdefault(e.path, []).append(e)
        return {p: normalize_edits(es) for p, es in sorted(out.items())}


def _fix_sort_key(d: Diagnostic) -> tuple[object, ...]:
    fx = d.fix
    first = min((_edit_key(e) for e in fx.edits), default=(0, 0, "")) if fx else (0, 0, "")
    path = min((e.path for e in fx.edits), default="") if fx else ""
    return (path, first, d.code, d.sort_key(), fx.description if fx else "")


def plan_fixes(diagnostics: Iterable[Diagnostic]) -> FixPlan:
    """Accept fixes in a deterministic order; a fix whose edits conflict with an already accepted
    fix is dropped whole (and reported). Identical edits from different fixes merge."""
    plan = FixPlan()
    taken: list[Edit] = []
    for d in sorted((d for d in diagnostics if d.fix and d.fix.edits), key=_fix_sort_key):
        assert d.fix is not None
        clash = next((t for t in taken for e in d.fix.edits if _conflicts(t, e)), None)
        if clash is None:
            try:
                normalize_edits(d.fix.edits)
            except EditConflict as exc:
                plan.dropped.append((d, f"its own edits conflict: {exc}"))
                continue
            plan.accepted.append(d)
            taken.extend(d.fix.edits)
        else:
            owner = next(a for a in plan.accepted if a.fix and clash in a.fix.edits)
            plan.dropped.append(
                (d, f"overlaps the fix of {owner.code} at {owner.location.path}:{owner.location.line}")
            )
    return plan


def fix_selected(fix: Fix, *, unsafe: bool, include_display_only: bool) -> bool:
    if fix.applicability == "safe":
        return True
    if fix.applicability == "unsafe":
        return unsafe
    return include_display_only


def select_fixes(
    diagnostics: Iterable[Diagnostic], unsafe: bool = False, include_display_only: bool = False
) -> list[Diagnostic]:
    """Diagnostics whose fix is selected: safe always, unsafe with ``unsafe``, display-only with
    ``include_display_only``. Fixes without edits are skipped."""
    return [
        d
        for d in diagnostics
        if d.fix is not None
        and d.fix.edits
        and fix_selected(d.fix, unsafe=unsafe, include_display_only=include_display_only)
    ]
