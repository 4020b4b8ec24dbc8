"""Paths on the command line → the recipe ``.py`` and YAML override files to lint, read once.

Folders are walked without following symlinks (no loops); hidden folders, virtual environments and
caches are skipped; ``include``/``exclude`` globs from ``[tool.mbmem-lint]`` apply relative to the
pyproject's folder. Files that are too large, binary, not UTF-8 or unreadable become a one-line
diagnostic instead of an error.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from mbmem_lint.diagnostics import Diagnostic, Location
from mbmem_lint.records import dataclass, field
from mbmem_lint.settings import Settings, path_matches, remember_resolved, safe_resolve
from mbmem_lint.sources import SourceFile, SourceKind

PYTHON_SUFFIXES = (".py",)
YAML_SUFFIXES = (".yaml", ".yml")
MAX_PYTHON_BYTES = 2_000_000
MAX_YAML_BYTES = 1_000_000
SKIP_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", "node_modules", "site-packages", "build", "dist", ".cache", ".eggs",
}


class MissingPathError(Exception):
    """A path given on the command line does not exist (exit code 2)."""


@dataclass
class Discovered:
    """The recipe ``.py`` and YAML override files found under the given paths (each read once), and a
    diagnostic for every file skipped."""

    python: list[SourceFile] = field(default_factory=list)
    yaml: list[SourceFile] = field(default_factory=list)
    explicit_yaml: set[str] = field(default_factory=set)  # YAML files named directly (always overrides)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @cached_property
    def sources(self) -> dict[str, SourceFile]:
        """Every discovered file by path (rules, fixes and reports look sources up by path)."""
        return {s.path: s for s in self.python + self.yaml}


def _kind(path: Path) -> SourceKind | None:
    return _kind_of(path.name)


def _kind_of(name: str) -> SourceKind | None:
    suffix = os.path.splitext(name)[1]
    if suffix in PYTHON_SUFFIXES:
        return "python"
    if suffix in YAML_SUFFIXES:
        return "yaml"
    return None


def _skipped(path: str, why: str) -> Diagnostic:
    return Diagnostic(code="MBM004", name="file-skipped", severity="warning",
                      message=f"skipped: {why}", location=Location(path, 1, 1))


def read_source(path: str, kind: SourceKind) -> SourceFile | Diagnostic:
    limit = MAX_PYTHON_BYTES if kind == "python" else MAX_YAML_BYTES
    try:
        st = os.stat(path)
        if st.st_size > limit:
            return _skipped(path, f"too large ({st.st_size:,} bytes; the limit is {limit:,})")
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        return _skipped(path, f"cannot read: {exc.strerror or exc}")
    if len(raw) > limit:
        return _skipped(path, f"too large (over {limit:,} bytes)")
    if b"\x00" in raw:
        return _skipped(path, "binary file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _skipped(path, f"not UTF-8 text (byte {exc.start})")
    return SourceFile(path, text, kind, st.st_mtime_ns)


def _excluded(path: Path, settings: Settings, *, walked: bool) -> bool:
    """Skipped by the ``exclude`` patterns, or (for a file found by walking a folder) not matched by
    the ``include`` patterns; a file named on the command line needs no ``include`` match."""
    check_include = walked and bool(settings.include)
    if not settings.exclude and not check_include:
        return False  # no pattern: no path resolution
    rel = settings.relative(path)
    if any(path_matches(rel, pat) for pat in settings.exclude):
        return True
    return check_include and not any(path_matches(rel, pat) for pat in settings.include)


def discover(paths: list[str], settings: Settings) -> Discovered:
    out = Discovered()
    seen: set[str] = set()
    files: list[tuple[str, SourceKind, bool]] = []
    for given in paths:
        p = Path(given)
        if not p.exists() and not p.is_symlink():
            raise MissingPathError(given)
        if p.is_dir():
            # Real paths without asking the file system per file: the walk does not enter symlinked
            # folders, so a folder's real path is its parent's plus its name, and a plain file's is
            # its folder's plus its name (only symlinked files are resolved one by one).
            top_abs = os.path.abspath(given)
            real_of = {given: str(safe_resolve(top_abs))}
            for root, dirs, names in os.walk(given, followlinks=False):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                real_root = real_of[root]
                for d in dirs:
                    real_of[os.path.join(root, d)] = os.path.join(real_root, d)
                abs_root = os.path.normpath(os.path.join(top_abs, os.path.relpath(root, given))) if root != given \
                    else top_abs
                for name in sorted(names):
                    kind = _kind_of(name)
                    if kind is None:
                        continue
                    full = os.path.join(root, name)
                    if os.path.islink(full):
                        if not os.path.exists(full):
                            continue  # a dangling link
                    else:
                        remember_resolved(os.path.join(abs_root, name), Path(real_root, name))
                    fp = Path(full)
                    if _excluded(fp, settings, walked=True):
                        continue
                    files.append((fp.as_posix() if given != "." else fp.as_posix().removeprefix("./"), kind, False))
        else:
            kind = _kind(p)
            if kind is None or _excluded(p, settings, walked=False):
                continue
            files.append((given, kind, True))
    for path, kind, explicit in files:
        key = str(safe_resolve(path))  # memoised: the resolver asks for the same paths again
        if key in seen:
            continue
        seen.add(key)
        src = read_source(path, kind)
        if isinstance(src, Diagnostic):
            out.diagnostics.append(src)
            continue
        if kind == "python":
            out.python.append(src)
        else:
            out.yaml.append(src)
            if explicit:
                out.explicit_yaml.add(path)
    return out
