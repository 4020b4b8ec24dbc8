"""Fixes as text edits (libcst for Python, ruamel/text spans for YAML) → reviewable unified diffs.

* :mod:`mbmem_lint.fix.edits` — primitives rules call to build a :class:`~mbmem_lint.diagnostics.Fix`;
* :mod:`mbmem_lint.fix.apply` — deterministic combination of fixes and in-memory application;
* :mod:`mbmem_lint.fix.diff` — ``git apply``-able unified diffs, repo-relative paths;
* :mod:`mbmem_lint.fix.write` — atomic writes that refuse files changed since they were read;
* :mod:`mbmem_lint.fix.output` — :func:`render_fix_output` for the CLI.
"""

from mbmem_lint.fix.apply import apply_edits, plan_fixes, select_fixes
from mbmem_lint.fix.diff import repo_relative, unified_diff
from mbmem_lint.fix.output import build_patch, render_fix_output
from mbmem_lint.fix.write import AppliedChange, apply_to_files, write_patch

__all__ = [
    "AppliedChange",
    "apply_edits",
    "apply_to_files",
    "build_patch",
    "plan_fixes",
    "render_fix_output",
    "repo_relative",
    "select_fixes",
    "unified_diff",
    "write_patch",
]
