"""Writing fixes to disk: atomic, mode-preserving, refusing files that changed since they were read.

Nothing here prints; callers report the returned :class:`AppliedChange` list.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from typing import Literal

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.fix.apply import EditConflict, apply_edits, plan_fixes, select_fixes
from mbmem_lint.records import dataclass, field
from mbmem_lint.sources import Sources

ChangeStatus = Literal["written", "refused", "failed"]


@dataclass
class AppliedChange:
    """The outcome of writing fixes to one file: written, refused (changed since read, or unreadable)
    or failed."""

    path: str  # as given (the SourceFile path)
    status: ChangeStatus
    fixes: list[Diagnostic] = field(default_factory=list)  # fixes applied (or that would have been)
    reason: str = ""  # for refused / failed
    old_text: str = ""
    new_text: str = ""


@dataclass
class ApplyResult:
    """What ``--apply`` did: one change per touched file, and the conflicting fixes it left out."""

    changes: list[AppliedChange] = field(default_factory=list)
    dropped: list[tuple[Diagnostic, str]] = field(default_factory=list)  # conflicting fixes left out


def fixable_here(d: Diagnostic, sources: Sources) -> bool:
    """A fix whose edits all target linted files we hold (never library code)."""
    return d.fix is not None and bool(d.fix.edits) and all(e.path in sources for e in d.fix.edits)


def atomic_write(path: str, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8, newlines untouched) via a temp file in the same folder + ``os.replace``.
    Keeps the existing file's permission bits (or sets ``mode``)."""
    folder = os.path.dirname(os.path.abspath(path))
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=".mbmem-lint-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_disk(path: str) -> str:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def apply_fixes_to_files(diagnostics: Iterable[Diagnostic], sources: Sources, unsafe: bool) -> ApplyResult:
    """Apply the selected fixes (safe; unsafe too with ``unsafe``; never display-only)."""
    selected = [d for d in select_fixes(diagnostics, unsafe=unsafe) if fixable_here(d, sources)]
    plan = plan_fixes(selected)
    result = ApplyResult(dropped=list(plan.dropped))
    by_path = plan.edits_by_path()
    for path, edits in by_path.items():
        src = sources[path]
        fixes = [d for d in plan.accepted if d.fix and any(e.path == path for e in d.fix.edits)]
        change = AppliedChange(path, "written", fixes, old_text=src.text)
        result.changes.append(change)
        try:
            new_text = apply_edits(src.text, edits)
        except EditConflict as exc:
            change.status, change.reason = "failed", str(exc)
            continue
        change.new_text = new_text
        try:
            st = os.stat(path)
            disk = _read_disk(path)
        except (OSError, UnicodeDecodeError) as exc:
            change.status, change.reason = "refused", f"cannot read it again: {exc}"
            continue
        crlf = False
        if disk != src.text:
            if "\r\n" in disk and disk.replace("\r\n", "\n") == src.text:
                crlf = True  # read with newline translation: keep the file's CRLF endings
            else:
                change.status, change.reason = "refused", "it changed since it was read"
                continue
        if src.mtime_ns and st.st_mtime_ns != src.mtime_ns:
            change.status, change.reason = "refused", "its modification time changed since it was read"
            continue
        try:
            atomic_write(path, new_text.replace("\n", "\r\n") if crlf else new_text)
        except OSError as exc:
            change.status, change.reason = "failed", str(exc)
    return result


def apply_to_files(diagnostics: Iterable[Diagnostic], sources: Sources, unsafe: bool) -> list[AppliedChange]:
    """Write the selected fixes; one :class:`AppliedChange` per touched file."""
    return apply_fixes_to_files(diagnostics, sources, unsafe).changes


def write_patch(path: str, diff_text: str) -> None:
    """Write a patch file for review (atomically)."""
    atomic_write(path, diff_text)
