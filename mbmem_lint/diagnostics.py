"""Core data shared by every pipeline stage: source locations, findings and fixes.

These types are the contract between resolve → check → estimate → fix → report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from mbmem_lint.records import dataclass, field

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}
Applicability = Literal["safe", "unsafe", "display-only"]
# Ruff's fix classes, from the one that keeps the run as it is to a suggestion never applied.
APPLICABILITY_RANK: dict[str, int] = {"safe": 0, "unsafe": 1, "display-only": 2}


class Location:
    """A span in a file. Lines are 1-based, columns 1-based (as shown to users).

    ``path`` is the path as the user gave it on the command line (or as discovered
    under a path they gave); library locations use the package-relative path
    (``megatron/bridge/recipes/...``) and set ``in_library``.

    A value: compared, hashed and ordered by its fields, never changed after construction. Written
    by hand rather than as a frozen dataclass because the resolver makes tens of thousands per run
    and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field) cost ~3x as much.
    """

    __slots__ = ("path", "line", "column", "end_line", "end_column", "in_library")

    path: str
    line: int
    column: int
    end_line: int | None
    end_column: int | None
    in_library: bool

    def __init__(self, path: str, line: int, column: int = 1, end_line: int | None = None,
                 end_column: int | None = None, in_library: bool = False) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.end_line = end_line
        self.end_column = end_column
        self.in_library = in_library

    def _key(self) -> tuple[str, int, int, int | None, int | None, bool]:
        return (self.path, self.line, self.column, self.end_line, self.end_column, self.in_library)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Location) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Location) -> bool:
        return self._key() < other._key() if isinstance(other, Location) else NotImplemented

    def __le__(self, other: Location) -> bool:
        return self._key() <= other._key() if isinstance(other, Location) else NotImplemented

    def __gt__(self, other: Location) -> bool:
        return self._key() > other._key() if isinstance(other, Location) else NotImplemented

    def __ge__(self, other: Location) -> bool:
        return self._key() >= other._key() if isinstance(other, Location) else NotImplemented

    def __repr__(self) -> str:
        return (f"Location(path={self.path!r}, line={self.line!r}, column={self.column!r}, end_line={self.end_line!r}, "
                f"end_column={self.end_column!r}, in_library={self.in_library!r})")

    def with_path(self, path: str) -> Location:
        return Location(path, self.line, self.column, self.end_line, self.end_column, self.in_library)


@dataclass(frozen=True)
class Edit:
    """Replace ``[start, end)`` character offsets of a file's text with ``replacement``."""

    path: str
    start: int
    end: int
    replacement: str


class Fix:
    """A fix: text edits with an applicability (and, for memory fixes, the per-rank saving).

    ``build`` makes the edits lazily: computing them (libcst on the file) is only worth it when
    the edits are shown or applied, not for the terminal's one-line hint.
    """

    __slots__ = ("description", "applicability", "_edits", "_build", "saving_bytes")

    def __init__(
        self,
        description: str,
        applicability: Applicability,
        edits: list[Edit] | None = None,
        saving_bytes: int | None = None,
        *,
        build: Callable[[], list[Edit] | None] | None = None,
    ) -> None:
        self.description = description
        self.applicability = applicability
        self._edits = list(edits) if edits is not None else (None if build is not None else [])
        self._build = build
        self.saving_bytes = saving_bytes

    @property
    def edits(self) -> list[Edit]:
        if self._edits is None:
            try:
                built = self._build() if self._build is not None else None
            except Exception:  # a fix builder must never break linting: no edits, no fix
                built = None
            self._edits = list(built or [])
        return self._edits

    @edits.setter
    def edits(self, value: list[Edit]) -> None:
        self._edits = list(value)
        self._build = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fix):
            return NotImplemented
        return (self.description, self.applicability, self.edits, self.saving_bytes) == (
            other.description, other.applicability, other.edits, other.saving_bytes)

    def __repr__(self) -> str:
        return f"Fix({self.description!r}, {self.applicability!r}, saving_bytes={self.saving_bytes!r})"

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
    """A problem as reported: code, severity, message and location, with an optional fix and notes.
    The engine makes them from rules' findings; tool/input problems (``MBM0xx``) are made directly."""

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
