"""Writing fixes to disk: atomic where it can be, keeping links, mode and owner, refusing files that changed
since they were read or are read-only.

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
from mbmem_lint.sources import SourceFile, Sources

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
    Keeps the existing file's permission bits (or sets ``mode``). For a new file (a patch); an existing
    file the user's project holds is written with :func:`write_preserving`."""
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


def write_preserving(path: str, data: bytes) -> None:
    """Replace the content of the existing file at ``path`` with ``data``, keeping what the file is.

    Through a symbolic link its target is written (the link stays a link). The file keeps its inode
    properties: permission bits, owner and group, and its hard links. The new content goes to a temp
    file in the target's folder (created exclusively, 0600), synced, given the file's mode (and owner,
    when that is not the writer) and renamed over the target, so a crash leaves the old or the new
    file, never half of one. A file with other hard links, or one whose owner the writer cannot give
    the temp file (another user's file in a shared folder), or in a folder the writer cannot create
    files in, is written in place instead: renaming would detach the other links or change the owner.
    """
    target = os.path.realpath(path)
    st = os.stat(target)
    if st.st_nlink > 1 or not _replace_keeping_inode_properties(target, data, st):
        _write_in_place(target, data)


def _replace_keeping_inode_properties(target: str, data: bytes, st: os.stat_result) -> bool:
    """Rename a synced copy over ``target``; False (nothing changed) when the copy cannot have the
    file's owner or cannot be created."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mbmem-lint-", suffix=".tmp", dir=os.path.dirname(target))
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            mine = os.fstat(fh.fileno())
            if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
                try:
                    os.fchown(fh.fileno(), st.st_uid, st.st_gid)
                except OSError:  # not permitted: the rename would hand the file to the writer
                    os.unlink(tmp)
                    return False
        os.chmod(tmp, stat.S_IMODE(st.st_mode))  # after the chown, which may clear set-id bits
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return True


def _write_in_place(target: str, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())


def _read_disk(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


_BOM = "\ufeff"


def _refusal(path: str, st: os.stat_result, disk: str, src: SourceFile) -> str | None:
    """Why ``path`` (read as ``src``, now ``disk`` with status ``st``) must not be written, or None."""
    if disk != src.text:
        return "it changed since it was read"
    if src.mtime_ns and st.st_mtime_ns != src.mtime_ns:
        return "its modification time changed since it was read"
    mode = stat.S_IMODE(st.st_mode)
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return f"it is read-only (mode {mode:04o}): make it writable (chmod u+w) to apply fixes to it"
    if not os.access(path, os.W_OK):
        return f"you cannot write it (mode {mode:04o}, owner uid {st.st_uid})"
    return None


def apply_fixes_to_files(diagnostics: Iterable[Diagnostic], sources: Sources, unsafe: bool) -> ApplyResult:
    """Apply the selected fixes (safe; unsafe too with ``unsafe``; never display-only).

    A file is written only when its content and modification time are still those it was read with,
    and when it is writable; its byte-order mark and line endings stay as they were."""
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
            disk = _read_disk(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            change.status, change.reason = "refused", f"cannot read it again: {exc}"
            continue
        bom = disk.startswith(_BOM) and not src.text.startswith(_BOM)  # read without it (utf-8-sig)
        if bom:
            disk = disk[len(_BOM):]
        crlf = "\r\n" in disk and disk != src.text and disk.replace("\r\n", "\n") == src.text
        if crlf:  # read with newline translation: keep the file's CRLF endings
            disk = src.text
        why = _refusal(path, st, disk, src)
        if why is not None:
            change.status, change.reason = "refused", why
            continue
        out = new_text.replace("\n", "\r\n") if crlf else new_text
        try:
            write_preserving(path, ((_BOM if bom else "") + out).encode("utf-8"))
        except OSError as exc:
            change.status, change.reason = "failed", str(exc)
    return result


def apply_to_files(diagnostics: Iterable[Diagnostic], sources: Sources, unsafe: bool) -> list[AppliedChange]:
    """Write the selected fixes; one :class:`AppliedChange` per touched file."""
    return apply_fixes_to_files(diagnostics, sources, unsafe).changes


def write_patch(path: str, diff_text: str) -> None:
    """Write a patch file for review (atomically)."""
    atomic_write(path, diff_text)
