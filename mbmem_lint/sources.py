"""Source files as read once from disk: text, kind and the path as the user gave it."""

from __future__ import annotations

from typing import Literal

from mbmem_lint.records import dataclass

SourceKind = Literal["python", "yaml"]


@dataclass
class SourceFile:
    """A linted file as read once: its path as the user gave it, text, kind and modification time."""

    path: str  # as given on the command line / discovered under a given folder
    text: str
    kind: SourceKind
    mtime_ns: int = 0  # when read; --apply refuses files changed since

    def lines(self) -> list[str]:
        """``text.splitlines()``, split once (reports and fixes ask for lines of the same file often)."""
        cached: tuple[str, list[str]] | None = self.__dict__.get("_lines")
        if cached is None or cached[0] is not self.text:
            cached = self.__dict__["_lines"] = (self.text, self.text.splitlines())
        return cached[1]

    def line_text(self, line: int) -> str:
        lines = self.lines()
        return lines[line - 1] if 1 <= line <= len(lines) else ""


# Sources keyed by path (as given). Passed to rules (suppression comments), fixes and reports.
Sources = dict[str, SourceFile]
