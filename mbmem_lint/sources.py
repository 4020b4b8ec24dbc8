"""Source files as read once from disk: text, kind and the path as the user gave it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SourceKind = Literal["python", "yaml"]


@dataclass
class SourceFile:
    path: str  # as given on the command line / discovered under a given folder
    text: str
    kind: SourceKind
    mtime_ns: int = 0  # when read; --apply refuses files changed since

    def line_text(self, line: int) -> str:
        lines = self.text.splitlines()
        return lines[line - 1] if 1 <= line <= len(lines) else ""


# Sources keyed by path (as given). Passed to rules (suppression comments), fixes and reports.
Sources = dict[str, SourceFile]
