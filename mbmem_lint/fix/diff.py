"""Unified diffs for fixes, in the form ``git apply`` accepts.

Layout of a rendered patch (every line that is not patch text starts with ``#``, which
``git apply`` skips between file patches, so the whole output can be piped to ``git apply``)::

    # mbmem-lint: recipes/my_recipe.py: 2 fixes
    #   MBM301 [safe] add expandable_segments:True to PYTORCH_CUDA_ALLOC_CONF (line 12)
    #   MBM410 [unsafe] drop sequence_parallel=True at TP=1 (line 8)
    diff --git a/recipes/my_recipe.py b/recipes/my_recipe.py
    --- a/recipes/my_recipe.py
    +++ b/recipes/my_recipe.py
    @@ ...

    # mbmem-lint: display-only MBM702 (saves ~3.2 GiB/rank): enable selective recompute
    # | diff --git a/recipes/my_recipe.py b/recipes/my_recipe.py
    # | ...

Display-only suggestions are alternatives for a human to weigh (cheapest first), so their diffs are
quoted with ``# | `` and never applied by ``git apply`` on the whole output; each is computed on top
of the applicable fixes, so ``sed -n 's/^# | //p'`` over one block yields a patch that applies after
them.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from mbmem_lint.report.escape import has_control

NO_NEWLINE = "\\ No newline at end of file"


def find_repo_root(path: str | os.PathLike[str]) -> Path | None:
    """The nearest folder at or above ``path`` holding ``.git`` (a folder, or a file for worktrees)."""
    p = Path(os.path.abspath(path))
    cur = p if p.is_dir() else p.parent
    for d in (cur, *cur.parents):
        if (d / ".git").exists():
            return d
    return None


def repo_relative(path: str) -> str:
    """``path`` relative to its git repository root (``/``-separated); relative to the current
    directory when it is not in a repository or lies outside it."""
    absolute = Path(os.path.abspath(path))
    root = find_repo_root(absolute)
    base = root if root is not None else Path.cwd()
    try:
        rel = absolute.relative_to(base)
    except ValueError:
        rel = Path(os.path.relpath(absolute, Path.cwd()))
    return rel.as_posix()


_GIT_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
                0x22: '\\"', 0x5C: "\\\\"}


def git_path(path: str) -> str:
    """``path`` as git writes it in a patch header: as it is, or C-quoted (``"a/evil\\n.py"``, bytes
    outside ASCII as octal) when it holds a quote, a backslash, a control character or a byte that is
    not UTF-8. ``git apply`` reads both; a raw line break would end the header line early."""
    if '"' not in path and "\\" not in path and not has_control(path):
        return path
    out = []
    for byte in path.encode("utf-8", "surrogateescape"):
        escaped = _GIT_ESCAPES.get(byte)
        if escaped is not None:
            out.append(escaped)
        elif byte < 0x20 or byte >= 0x7F:
            out.append(f"\\{byte:03o}")
        else:
            out.append(chr(byte))
    return '"' + "".join(out) + '"'


def _with_eol_markers(lines: list[str]) -> list[str]:
    out: list[str] = []
    for ln in lines:
        if ln.endswith("\n"):
            out.append(ln)
        else:
            out.append(ln + "\n")
            out.append(NO_NEWLINE + "\n")
    return out


def unified_diff(old: str, new: str, rel_path: str, *, context: int = 3) -> str:
    """A git-style unified diff of one file (``a/``/``b/`` prefixes); ``""`` when unchanged.

    Texts are split on ``\\n`` only (a ``\\r`` stays part of its line, as ``git apply`` expects).
    """
    if old == new:
        return ""
    a = old.split("\n")
    b = new.split("\n")
    a_lines = [x + "\n" for x in a[:-1]] + ([a[-1]] if a[-1] else [])
    b_lines = [x + "\n" for x in b[:-1]] + ([b[-1]] if b[-1] else [])
    old_name, new_name = git_path(f"a/{rel_path}"), git_path(f"b/{rel_path}")
    body = list(difflib.unified_diff(a_lines, b_lines, old_name, new_name, n=context, lineterm="\n"))
    if not body:
        return ""
    out = [f"diff --git {old_name} {new_name}\n"]
    # difflib writes the headers as "--- a/x\n"; hunks lines may lack "\n" at EOF.
    out.extend(body[:2])
    out.extend(_with_eol_markers(body[2:]))
    return "".join(out)


def quote_block(text: str, prefix: str = "# | ") -> str:
    """Quote every line of ``text`` (a display-only diff) so ``git apply`` skips it."""
    return "".join(prefix + ln + "\n" for ln in text.splitlines())


def format_saving(saving_bytes: int | None) -> str:
    if not saving_bytes or saving_bytes <= 0:
        return ""
    gib = saving_bytes / 2**30
    if gib >= 1:
        return f"saves ~{gib:.1f} GiB/rank"
    return f"saves ~{saving_bytes / 2**20:.0f} MiB/rank"
