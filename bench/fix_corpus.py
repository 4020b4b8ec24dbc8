"""Fixes on the megatron-bridge 0.6.2 corpus: how each one makes its change, whether any adds an
assignment to a field its function already assigns, and whether the safe ones really fix.

    .venv/bin/python bench/fix_corpus.py [--apply-safe] [--show append]

* every fix's edits are classified: ``edit`` (a value, keyword or entry replaced or added in
  place), ``delete`` (a statement or YAML entry removed), ``append`` (an assignment added before the
  recipe's ``return``);
* an ``append`` to a target the same function already assigns (``cfg.a.b = ...``, or the key of an
  ``env_vars`` dict literal / subscript) is a violation: the fix should have edited that statement;
* ``--apply-safe``: on a copy of the corpus, ``mbmem-lint check --fix --diff | git apply`` (safe fixes
  only), then ``check`` again: a finding that had a safe fix must be gone (same rule, file, function
  and fields).
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mbmem_lint.dev.corpus import corpus_cwd, ensure_corpus
from mbmem_lint.diagnostics import Diagnostic, Edit
from mbmem_lint.pipeline import CheckRun, run_check
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings
from mbmem_lint.sources import Sources

_ASSIGN_RE = re.compile(r"^\s*(?P<target>[A-Za-z_][\w.]*(?:\[[^\]]+\])?)\s*=[^=]")


def check_corpus(paths: list[str]) -> CheckRun:
    return run_check(paths, Settings(), ResolveOptions(), need_edits=True)


def _norm(s: str) -> str:
    return "".join(s.split()).replace("'", '"')


def edit_kind(e: Edit, sources: Sources) -> str:
    text = sources[e.path].text
    if e.start == e.end and e.replacement.endswith("\n") and _ASSIGN_RE.match(e.replacement):
        rest = text[e.start : text.find("\n", e.start) if "\n" in text[e.start :] else len(text)]
        if rest.lstrip().startswith("return"):
            return "append"
    if not e.replacement and e.end > e.start:
        return "delete"
    return "edit"


def fix_kind(d: Diagnostic, sources: Sources) -> str:
    assert d.fix is not None
    kinds = {edit_kind(e, sources) for e in d.fix.edits}
    for k in ("append", "delete", "edit"):
        if k in kinds:
            return k
    return "none"


def _segment(lines: list[str], node: ast.AST) -> str:
    """The source of ``node`` (``ast.get_source_segment`` re-splits the whole file on every call)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1  # type: ignore[attr-defined]
    start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if first == last:
        return lines[first].encode()[start:end].decode()
    return "\n".join([lines[first].encode()[start:].decode(), *lines[first + 1 : last],
                      lines[last].encode()[:end].decode()])


def _functions(text: str) -> list[tuple[int, int, set[str]]]:
    """(first line, last line, targets it assigns) of every function of a file. Targets:
    ``cfg.a.b``, ``cfg.env_vars["K"]``, and the keys of a dict literal assigned to an attribute
    (``cfg.env_vars = {"K": ...}`` counts as ``cfg.env_vars["K"]``)."""
    lines = text.splitlines()
    out = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        targets: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    seg = _segment(lines, t)
                    targets.add(_norm(seg))
                    if isinstance(node.value, ast.Dict):
                        targets.update(_norm(f'{seg}["{k.value}"]') for k in node.value.keys
                                       if isinstance(k, ast.Constant) and isinstance(k.value, str))
        out.append((fn.lineno, fn.end_lineno or fn.lineno, targets))
    return out


def append_violations(diags: Iterable[Diagnostic], sources: Sources) -> list[tuple[Diagnostic, str]]:
    """Appends whose target the enclosing function (the innermost) already assigns."""
    out = []
    functions: dict[str, list[tuple[int, int, set[str]]]] = {}
    for d in diags:
        if d.fix is None:
            continue
        for e in d.fix.edits:
            m = _ASSIGN_RE.match(e.replacement)
            if edit_kind(e, sources) != "append" or m is None:
                continue
            text = sources[e.path].text
            if e.path not in functions:
                functions[e.path] = _functions(text)
            line = text.count("\n", 0, e.start) + 1
            around = [f for f in functions[e.path] if f[0] <= line <= f[1]]
            if around and _norm(m.group("target")) in max(around, key=lambda f: f[0])[2]:
                out.append((d, e.replacement.strip()))
    return out


def _key(d: Diagnostic) -> tuple[Any, ...]:
    return (d.code, d.location.path, d.function, tuple(d.fields))


def apply_safe_and_recheck(corpus: Path, tmp: Path) -> tuple[CheckRun, list[Diagnostic], list[Diagnostic], str]:
    """On a copy of the corpus under ``tmp``: (the check run before, the findings that had a safe fix,
    those of them still reported after ``git apply`` of ``check --fix --diff``, git's stderr)."""
    bridge = tmp / "megatron" / "bridge"
    for sub in ("recipes", "perf_recipes"):
        shutil.copytree(corpus / "megatron" / "bridge" / sub, bridge / sub)
    subprocess.run(["git", "init", "-q", str(bridge)], check=True)
    paths = ["recipes", "perf_recipes"]
    with _chdir(bridge):
        run = check_corpus(paths)
        before = run.diagnostics
        patch = subprocess.run([sys.executable, "-m", "mbmem_lint", "check", "--fix", "--diff", "--no-color", *paths],
                               capture_output=True, text=True).stdout
        applied = subprocess.run(["git", "apply", "-"], input=patch, capture_output=True, text=True)
        after = check_corpus(paths).diagnostics
    safe = [d for d in before if d.fix is not None and d.fix.applicability == "safe" and d.fix.edits]
    still = {_key(d) for d in after}
    return run, safe, [d for d in safe if _key(d) in still], applied.stderr


class _chdir:
    def __init__(self, path: Path) -> None:
        self.path, self.old = path, Path.cwd()

    def __enter__(self) -> None:
        import os

        os.chdir(self.path)

    def __exit__(self, *exc: object) -> None:
        import os

        os.chdir(self.old)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--apply-safe", action="store_true", help="git apply the safe fixes on a copy and check again")
    ap.add_argument("--show", default="", help="print the fixes of these kinds (edit,delete,append)")
    args = ap.parse_args(argv)
    corpus = ensure_corpus()
    with corpus_cwd(corpus) as rel:
        run = check_corpus(rel)
    fixed = [d for d in run.diagnostics if d.fix is not None and d.fix.edits]
    kinds = collections.Counter((d.code, fix_kind(d, run.sources)) for d in fixed)
    by_kind = collections.Counter(fix_kind(d, run.sources) for d in fixed)
    print(f"{len(fixed)} fixes with edits on {len(rel)} files: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    for (code, kind), n in sorted(kinds.items()):
        print(f"  {code} {kind:<7} {n}")
    show = {s for s in args.show.split(",") if s}
    for d in fixed:
        if fix_kind(d, run.sources) in show:
            assert d.fix is not None
            print(f"{d.location.path}:{d.location.line} {d.code} [{d.fix.applicability}] {d.fix.description}")
    bad = append_violations(fixed, run.sources)
    print(f"appends to a target the same function already assigns: {len(bad)}")
    for d, stmt in bad:
        print(f"  {d.location.path}:{d.location.line} {d.code}: {stmt}")
    rc = 1 if bad else 0
    if args.apply_safe:
        with tempfile.TemporaryDirectory() as tmp:
            _, safe, remaining, err = apply_safe_and_recheck(corpus, Path(tmp))
        print(f"safe fixes applied with git apply: {len(safe)}; their findings still reported after: {len(remaining)}"
              + (f" (git apply: {err.strip()})" if err.strip() else ""))
        for d in remaining:
            print(f"  {d.location.path}:{d.location.line} {d.code} {d.function}: {d.message}")
        rc |= 1 if remaining or err.strip() else 0
    return rc


if __name__ == "__main__":
    sys.exit(main())
