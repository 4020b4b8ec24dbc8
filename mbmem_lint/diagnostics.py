"""Core data shared by every pipeline stage: source locations, findings and fixes.

These types are the contract between resolve → check → estimate → fix → report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}
Applicability = Literal["safe", "unsafe", "display-only"]


@dataclass(frozen=True, order=True)
class Location:
    """A span in a file. Lines are 1-based, columns 1-based (as shown to users).

    ``path`` is the path as the user gave it on the command line (or as discovered
    under a path they gave); library locations use the package-relative path
    (``megatron/bridge/recipes/...``) and set ``in_library``.
    """

    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None
    in_library: bool = False

    def with_path(self, path: str) -> Location:
        return Location(path, self.line, self.column, self.end_line, self.end_column, self.in_library)


@dataclass(frozen=True)
class Edit:
    """Replace ``[start, end)`` character offsets of a file's text with ``replacement``."""

    path: str
    start: int
    end: int
    replacement: str


@dataclass
class Fix:
    description: str
    applicability: Applicability
    edits: list[Edit] = field(default_factory=list)
    saving_bytes: int | None = None  # estimated per-rank saving, for memory fixes

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "applicability": self.applicability,
            "saving_bytes": self.saving_bytes,
            "edits": [
                {"path": e.path, "start": e.start, "end": e.end, "replacement": e.replacement}
                for e in self.edits
            ],
        }


@dataclass
class Diagnostic:
    code: str  # "MBM123"; "MBM000"-range codes are reserved for tool/input diagnostics
    name: str  # kebab-case rule name
    severity: Severity
    message: str
    location: Location
    function: str | None = None  # recipe function the finding belongs to
    fields: list[str] = field(default_factory=list)  # "<section>.<field>" paths (and "memory")
    fix: Fix | None = None
    notes: list[str] = field(default_factory=list)  # extra lines (source behaviour, suggestions)

    def sort_key(self) -> tuple[Any, ...]:
        loc = self.location
        return (loc.path, loc.line, loc.column, self.code, self.function or "", self.message)

    def to_json(self) -> dict[str, Any]:
        loc = self.location
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "message": self.message,
            "path": loc.path,
            "line": loc.line,
            "column": loc.column,
            "end_line": loc.end_line if loc.end_line is not None else loc.line,
            "end_column": loc.end_column if loc.end_column is not None else loc.column,
            "function": self.function,
            "fields": list(self.fields),
            "fix": self.fix.to_json() if self.fix else None,
        }
