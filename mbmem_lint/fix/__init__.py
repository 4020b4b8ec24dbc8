"""Fixes as text edits (libcst for Python, ruamel/text spans for YAML) → reviewable unified diffs.

* :mod:`mbmem_lint.fix.edits` — primitives rules call to build a :class:`~mbmem_lint.diagnostics.Fix`;
* :mod:`mbmem_lint.fix.apply` — deterministic combination of fixes and in-memory application;
* :mod:`mbmem_lint.fix.diff` — ``git apply``-able unified diffs, repo-relative paths;
* :mod:`mbmem_lint.fix.write` — atomic writes that refuse files changed since they were read;
* :mod:`mbmem_lint.fix.output` — :func:`render_fix_output` for the CLI.

Import the submodule you need: the package itself imports nothing, because rules import
:mod:`mbmem_lint.fix.placement` on every check and the diff/apply/write modules (difflib,
tempfile, shutil) are only for ``--fix``.
"""
