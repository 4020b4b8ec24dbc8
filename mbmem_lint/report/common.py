"""Helpers shared by the report formats: ordering, counting, estimate access."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mbmem_lint.diagnostics import SEVERITY_RANK, Diagnostic
from mbmem_lint.records import dataclass
from mbmem_lint.settings import safe_resolve


@dataclass(frozen=True)
class Summary:
    """Counts over a list of diagnostics (the ``summary`` object of ``--format json``).

    ``files`` and ``recipes`` count the files and the recipe functions (``path`` + ``function``)
    with at least one diagnostic; ``fixable`` counts diagnostics whose fix is ``safe`` or
    ``unsafe`` (``display-only`` suggestions are not counted: ``--apply`` never applies them).
    """

    errors: int
    warnings: int
    infos: int
    files: int
    recipes: int
    fixable: int

    @property
    def total(self) -> int:
        return self.errors + self.warnings + self.infos

    def to_json(self) -> dict[str, int]:
        return {
            "errors": self.errors,
            "warnings": self.warnings,
            "infos": self.infos,
            "files": self.files,
            "recipes": self.recipes,
            "fixable": self.fixable,
        }


def is_fixable(d: Diagnostic) -> bool:
    # Does not force lazily-built edits: the count is of fixes offered, computed when applied.
    return d.fix is not None and d.fix.applicability != "display-only"


def summarize(diagnostics: Iterable[Diagnostic]) -> Summary:
    diags = list(diagnostics)
    return Summary(
        errors=sum(1 for d in diags if d.severity == "error"),
        warnings=sum(1 for d in diags if d.severity == "warning"),
        infos=sum(1 for d in diags if d.severity == "info"),
        files=len({d.location.path for d in diags}),
        recipes=len({(d.location.path, d.function) for d in diags if d.function}),
        fixable=sum(1 for d in diags if is_fixable(d)),
    )


def ordered(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """File order: path, line, column, code (the order text/json/sarif/markdown print)."""
    return sorted(diagnostics, key=lambda d: d.sort_key())


def by_severity(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Errors first, then warnings, then infos; file order within a severity."""
    return sorted(diagnostics, key=lambda d: (-SEVERITY_RANK.get(d.severity, 0), d.sort_key()))


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary_sentence(s: Summary, *, fix_hint: str = "with --fix") -> str:
    """``Found 3 errors, 1 warning in 2 files (1 fixable with --fix).`` / ``All checks passed.``"""
    if s.total == 0:
        return "All checks passed."
    parts = []
    if s.errors:
        parts.append(plural(s.errors, "error"))
    if s.warnings:
        parts.append(plural(s.warnings, "warning"))
    if s.infos:
        parts.append(plural(s.infos, "info"))
    text = f"Found {', '.join(parts)} in {plural(s.files, 'file')}"
    if s.fixable:
        text += f" ({s.fixable} fixable {fix_hint})"
    return text + "."


def estimate_dicts(estimates: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Estimates as their JSON dicts (accepts dicts or objects with ``to_json()``)."""
    out: list[dict[str, Any]] = []
    for e in estimates or ():
        if isinstance(e, Mapping):
            out.append(dict(e))
        elif hasattr(e, "to_json"):
            out.append(dict(e.to_json()))
        else:
            raise TypeError(f"not an estimate: {type(e).__name__}")
    return out


GIB = 1024**3


def fmt_gib(n: float | int | None, digits: int = 1) -> str:
    if n is None:
        return "?"
    return f"{n / GIB:.{digits}f} GiB"


def repo_path(path: str, root: str | Path | None = None) -> str:
    """``path`` with forward slashes, relative to ``root`` (default: the working directory) when it
    is an absolute path under it; GitHub matches annotation and SARIF paths against the checkout."""
    p = Path(path)
    if p.is_absolute():
        base = Path(root) if root is not None else Path(os.getcwd())
        try:
            return safe_resolve(p).relative_to(safe_resolve(base)).as_posix()
        except ValueError:
            return p.as_posix()
    posix = PurePosixPath(path.replace("\\", "/")).as_posix()
    while posix.startswith("./"):
        posix = posix[2:]
    return posix
