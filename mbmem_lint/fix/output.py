"""What ``check --fix`` / ``--fix --diff`` / ``--apply`` / ``--patch`` print: the CLI stays thin.

The patch text is exact (``git apply`` reads it); every path and description in the lines around it
goes through :func:`mbmem_lint.report.escape.printable`, and the diff headers quote unusual file
names the way git does (:func:`mbmem_lint.fix.diff.unified_diff`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.fix.apply import EditConflict, apply_edits, plan_fixes, select_fixes
from mbmem_lint.fix.diff import format_saving, quote_block, repo_relative, unified_diff
from mbmem_lint.fix.write import apply_fixes_to_files, fixable_here, write_patch
from mbmem_lint.records import dataclass, field
from mbmem_lint.report.escape import printable
from mbmem_lint.sources import Sources

FixMode = Literal["diff", "fix", "apply"]


@dataclass
class Patch:
    """The selected fixes as one patch: its text (what ``--fix``/``--diff`` print), the fixes it holds and
    those left out."""

    text: str  # the whole patch (comments + applicable diffs + quoted display-only suggestions)
    applicable: list[Diagnostic] = field(default_factory=list)  # fixes in the applicable diffs
    display_only: list[Diagnostic] = field(default_factory=list)  # suggestions rendered
    dropped: list[tuple[Diagnostic, str]] = field(default_factory=list)
    hidden_unsafe: int = 0

    @property
    def n_fixes(self) -> int:
        return len(self.applicable) + len(self.display_only)


def _fix_line(d: Diagnostic) -> str:
    assert d.fix is not None
    saving = format_saving(d.fix.saving_bytes)
    extra = f", {saving}" if saving else ""
    return f"#   {d.code} [{d.fix.applicability}{extra}] {printable(d.fix.description)} (line {d.location.line})\n"


def build_patch(diagnostics: Iterable[Diagnostic], sources: Sources, *, unsafe: bool) -> Patch:
    """Applicable fixes (safe, + unsafe with ``unsafe``) as one diff per file, then every
    display-only suggestion as a quoted diff on top of them, each annotated."""
    diags = [d for d in diagnostics if fixable_here(d, sources)]
    applicable = select_fixes(diags, unsafe=unsafe)
    plan = plan_fixes(applicable)
    patch = Patch("", dropped=list(plan.dropped))
    patch.hidden_unsafe = 0 if unsafe else sum(1 for d in diags if d.fix and d.fix.applicability == "unsafe")
    out: list[str] = []
    fixed_texts: dict[str, str] = {}
    edits_by_path = plan.edits_by_path()
    for path, edits in edits_by_path.items():
        src = sources[path]
        new = apply_edits(src.text, edits)
        fixed_texts[path] = new
        rel = repo_relative(path)
        fixes = [d for d in plan.accepted if d.fix and any(e.path == path for e in d.fix.edits)]
        body = unified_diff(src.text, new, rel)
        if not body:
            continue
        n = len(fixes)
        out.append(f"# mbmem-lint: {printable(rel)}: {n} fix{'es' if n != 1 else ''}\n")
        out.extend(_fix_line(d) for d in fixes)
        out.append(body)
        patch.applicable.extend(d for d in fixes if d not in patch.applicable)
    for d, why in plan.dropped:
        out.append(
            f"# mbmem-lint: skipped {d.code} at {printable(d.location.path)}:{d.location.line} ({printable(why)}); "
            "run again after applying\n"
        )
    display = [d for d in diags if d.fix and d.fix.applicability == "display-only"]
    for d in display:
        assert d.fix is not None
        block: list[str] = []
        for path in sorted({e.path for e in d.fix.edits}):
            src = sources[path]
            base_edits = edits_by_path.get(path, [])
            mine = [e for e in d.fix.edits if e.path == path]
            try:
                base = fixed_texts.get(path, src.text)
                after = apply_edits(src.text, [*base_edits, *mine])
            except EditConflict:
                block = []
                break
            block.append(unified_diff(base, after, repo_relative(path)))
        body = "".join(block)
        if not body:
            continue
        saving = format_saving(d.fix.saving_bytes)
        head = f"display-only {d.code}" + (f" ({saving})" if saving else "")
        out.append("#\n")
        out.append(f"# mbmem-lint: {head}: {printable(d.fix.description)} "
                   f"[{printable(d.location.path)}:{d.location.line}]\n")
        out.append(quote_block(body))
        patch.display_only.append(d)
    if patch.hidden_unsafe:
        out.append(
            f"# mbmem-lint: {patch.hidden_unsafe} unsafe fix{'es' if patch.hidden_unsafe != 1 else ''}"
            " not shown (add --unsafe-fixes)\n"
        )
    patch.text = "".join(out)
    return patch


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('x') else 's'}"


def render_fix_output(
    diagnostics: Iterable[Diagnostic],
    sources: Sources,
    *,
    mode: FixMode,
    unsafe: bool,
    patch_file: str | None,
) -> tuple[str, int]:
    """Text for the CLI to print and the number of fixes.

    * ``diff``: the patch only (pipe it to ``git apply``); writes nothing (except ``patch_file``).
    * ``fix``: the patch and how to apply it; writes nothing (except ``patch_file``).
    * ``apply``: writes the selected fixes atomically and reports what changed / what was refused;
      the count is the number of fixes written.
    """
    diags = list(diagnostics)
    patch = build_patch(diags, sources, unsafe=unsafe)
    lines: list[str] = []
    if patch_file is not None:
        write_patch(patch_file, patch.text)
    if mode == "diff":
        text = patch.text
        if patch_file is not None:
            text += f"# mbmem-lint: wrote the patch to {printable(patch_file)}\n"
        return text, patch.n_fixes
    if mode == "fix":
        lines.append(patch.text)
        if patch.n_fixes:
            parts = [f"{len(patch.applicable)} applicable"]
            if patch.display_only:
                parts.append(f"{len(patch.display_only)} display-only")
            lines.append(
                f"# mbmem-lint: {_plural(patch.n_fixes, 'fix')} ({', '.join(parts)}); no file was changed.\n"
            )
            if patch.applicable:
                flag = " --unsafe-fixes" if unsafe else ""
                lines.append(f"# To apply: mbmem-lint check --apply{flag} PATHS\n")
                lines.append(f"#       or: mbmem-lint check --fix --diff{flag} PATHS | git apply\n")
            if patch.display_only:
                lines.append(
                    "# Display-only suggestions are never applied; to use one, take its block "
                    "without the leading '# | ' and git apply it.\n"
                )
        else:
            lines.append("# mbmem-lint: no fixes available.\n")
        if patch_file is not None:
            lines.append(f"# mbmem-lint: wrote the patch to {printable(patch_file)}\n")
        return "".join(lines), patch.n_fixes
    result = apply_fixes_to_files(diags, sources, unsafe)
    n_written = 0
    for ch in result.changes:
        if ch.status == "written":
            n_written += len(ch.fixes)
            lines.append(f"Fixed {printable(ch.path)} ({_plural(len(ch.fixes), 'fix')}):\n")
            lines.extend(
                f"  {d.code} {printable(d.fix.description)} (line {d.location.line})\n" for d in ch.fixes if d.fix
            )
        else:
            lines.append(
                f"Refused {printable(ch.path)}: {printable(ch.reason)}; nothing written to it. Re-run mbmem-lint.\n"
                if ch.status == "refused"
                else f"Failed {printable(ch.path)}: {printable(ch.reason)}\n"
            )
    for d, why in result.dropped:
        lines.append(f"Skipped {d.code} at {printable(d.location.path)}:{d.location.line}: {printable(why)}; "
                     "run again.\n")
    if patch.hidden_unsafe:
        lines.append(f"{_plural(patch.hidden_unsafe, 'unsafe fix')} not applied (add --unsafe-fixes).\n")
    if patch.display_only:
        lines.append(
            f"{_plural(len(patch.display_only), 'display-only suggestion')} not applied "
            "(see check --fix --diff).\n"
        )
    if patch_file is not None:
        lines.append(f"Wrote the patch to {printable(patch_file)}\n")
    if not lines:
        lines.append("No fixes to apply.\n")
    return "".join(lines), n_written
