"""Read files as they were at a git revision, without a checkout.

The revision's tree is listed with ``git ls-tree`` and the wanted blobs are streamed through one
``git cat-file --batch`` into a private temporary folder (the working tree, the index and HEAD are
never touched), so the resolver reads the base side's recipes and the files they import exactly as
it reads the working tree.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

MAX_BLOB_BYTES = 2_000_000  # the linter's own limit for a Python file; larger blobs are not written


class RevisionError(Exception):
    """Not a git repository, git missing, or an unknown revision (exit 2)."""


def _git(root: Path, *args: str, input_bytes: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], input=input_bytes, capture_output=True, check=False)
    except FileNotFoundError:
        raise RevisionError("git is not installed (needed for --base)") from None
    if proc.returncode != 0:
        raise RevisionError(proc.stderr.decode("utf-8", "replace").strip() or f"git {args[0]} failed")
    return proc.stdout


def repo_root(start: Path) -> Path:
    """The top folder of the git work tree holding ``start``."""
    folder = start if start.is_dir() else start.parent
    try:
        out = _git(folder, "rev-parse", "--show-toplevel")
    except RevisionError:
        raise RevisionError(f"{start} is not inside a git repository (--base reads recipes from git)") from None
    return Path(out.decode().strip())


def resolve_revision(root: Path, rev: str) -> str:
    """The commit id ``rev`` names; :class:`RevisionError` with a clear message when it names none."""
    if not rev or rev.startswith("-"):
        raise RevisionError(f"invalid revision {rev!r}")
    try:
        out = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"unknown revision {rev!r}: no such commit, branch or tag in {root} (in CI, fetch the "
                            "base branch: actions/checkout with fetch-depth: 0)") from None
    return out.decode().strip()


def changed_paths(root: Path, commit: str) -> set[str]:
    """Paths (relative to the repository root) whose content differs between ``commit`` and the working tree,
    plus untracked files."""
    out = _git(root, "diff", "--name-only", "-z", "--no-renames", commit, "--")
    paths = {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    paths.update(p for p in untracked.decode("utf-8", "surrogateescape").split("\0") if p)
    return paths


def materialize(root: Path, commit: str, dest: Path, want: Callable[[str], bool]) -> list[str]:
    """Write the blobs of ``commit`` whose repository-relative path ``want`` accepts under ``dest`` (same
    relative layout); returns the paths written."""
    listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: list[tuple[str, str]] = []
    for item in listing.decode("utf-8", "surrogateescape").split("\0"):
        if not item:
            continue
        meta, _, path = item.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob" and parts[0] != "120000" and want(path):
            entries.append((parts[2], path))
    if not entries:
        return []
    data = _git(root, "cat-file", "--batch", input_bytes="".join(f"{sha}\n" for sha, _ in entries).encode())
    written: list[str] = []
    pos = 0
    for _sha, path in entries:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        size = int(header[2]) if len(header) == 3 else 0
        body = data[end + 1:end + 1 + size]
        pos = end + 1 + size + 1  # the blob is followed by a newline
        if size > MAX_BLOB_BYTES or ".." in Path(path).parts:
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(body)
        written.append(path)
    return written


def relative_to_root(path: str | os.PathLike[str], root: Path) -> str | None:
    """``path`` relative to ``root`` (forward slashes), None when it is outside."""
    try:
        return Path(os.path.realpath(path)).relative_to(os.path.realpath(root)).as_posix()
    except ValueError:
        return None
