"""``--format github``: GitHub Actions workflow-command annotations, and the step summary.

    ::error file=recipes/llama.py,line=12,endLine=12,col=5,endColumn=36,title=MBM201 (…)::message

* Escaping follows actions/toolkit ``command.ts``: data ``%``→``%25``, ``\\r``→``%0D``,
  ``\\n``→``%0A``; property values additionally ``:``→``%3A`` and ``,``→``%2C``. GitHub decodes
  these, so a line break stays one (inside the annotation) and a file name stays exact. Every other
  control character is escaped first (:func:`mbmem_lint.report.escape.escape_controls`): GitHub does
  not decode those, and the runner's log shows them to a terminal-like viewer.
* ``col``/``endColumn`` are only sent for single-line spans (GitHub rejects them otherwise).
* GitHub shows at most 10 error, 10 warning and 10 notice annotations per step and silently drops
  the rest in print order. So errors go first, at most 10 of each severity are printed, and when
  anything was held back a final ``::notice`` says how many (counted against the notice limit,
  so at most 9 info notices are printed in that case). The full list goes to the step summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.report.common import by_severity, plural, repo_path
from mbmem_lint.report.escape import escape_controls
from mbmem_lint.report.markdown import summary_markdown

PER_STEP_LIMIT = 10  # per severity (GitHub: "10 error and 10 warning annotations per step")
STEP_SUMMARY_MAX_BYTES = 1024 * 1024  # GitHub: 1 MiB per step summary
_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return escape_controls(text, keep="\n\r").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, properties: list[tuple[str, str | int]], message: str) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties)
    return f"::{kind}{' ' + props if props else ''}::{escape_data(message)}"


def _message(d: Diagnostic) -> str:
    lines = [d.message]
    if d.function:
        lines.append(f"in recipe: {d.function}")
    lines.extend(f"note: {n}" for n in d.notes)
    if d.fix is not None:
        lines.append(f"help: {d.fix.description} ({d.fix.applicability} fix)")
    return "\n".join(lines)


def annotation(d: Diagnostic) -> str:
    """One workflow command for one diagnostic."""
    loc = d.location
    title = f"{d.code} ({d.name})"
    props: list[tuple[str, str | int]] = []
    message = _message(d)
    if loc.in_library:
        # Not a file of the repository: a job-level annotation naming the place instead.
        message = f"{loc.path}:{loc.line}:{loc.column}: {message}"
    else:
        end_line = loc.end_line if loc.end_line is not None and loc.end_line >= loc.line else loc.line
        props += [("file", repo_path(loc.path)), ("line", loc.line), ("endLine", end_line)]
        if end_line == loc.line:
            props.append(("col", loc.column))
            end_col = loc.end_column if loc.end_column is not None else loc.column
            props.append(("endColumn", max(end_col, loc.column)))
    props.append(("title", title))
    return _command(_COMMAND.get(d.severity, "notice"), props, message)


def annotation_lines(diagnostics: Iterable[Diagnostic], *, limit: int = PER_STEP_LIMIT) -> list[str]:
    """The annotation lines to print: errors, warnings, infos (each capped at ``limit``) and, when
    any were held back, a final notice with the counts."""
    diags = by_severity(diagnostics)
    groups: dict[str, list[Diagnostic]] = {"error": [], "warning": [], "info": []}
    for d in diags:
        groups.setdefault(d.severity, []).append(d)
    overflow = len(groups["error"]) > limit or len(groups["warning"]) > limit or len(groups["info"]) > limit
    caps = {"error": limit, "warning": limit, "info": limit - 1 if overflow else limit}
    lines: list[str] = []
    hidden: dict[str, int] = {}
    for severity in ("error", "warning", "info"):
        group = groups[severity]
        lines += [annotation(d) for d in group[: caps[severity]]]
        if len(group) > caps[severity]:
            hidden[severity] = len(group) - caps[severity]
    if hidden:
        counts = ", ".join(plural(n, sev) for sev, n in hidden.items())
        total = sum(len(g) for g in groups.values())
        lines.append(
            _command(
                "notice",
                [("title", "mbmem-lint: more findings")],
                f"{counts} not shown as annotations (GitHub shows at most {limit} of each kind per step); "
                f"{total} findings in all: see the job summary or run `mbmem-lint check` locally.",
            )
        )
    return lines


def render_github(diagnostics: Iterable[Diagnostic], stream: TextIO, *, limit: int = PER_STEP_LIMIT) -> None:
    for line in annotation_lines(diagnostics, limit=limit):
        stream.write(line + "\n")


def write_step_summary(
    path: str | Path,
    diagnostics: Iterable[Diagnostic],
    estimates: Iterable[Any] | None = None,
    *,
    regressions: Iterable[Mapping[str, Any]] | None = None,
) -> None:
    """Append the Markdown summary (findings table, memory change against the base revision, per-recipe
    memory estimates) to
    ``$GITHUB_STEP_SUMMARY``. Rows are dropped (with a line saying so) to stay under 1 MiB."""
    diags = list(diagnostics)
    ests = list(estimates or ())
    path = Path(path)
    try:
        used = path.stat().st_size
    except OSError:
        used = 0
    budget = STEP_SUMMARY_MAX_BYTES - used - 1024
    max_rows: int | None = 500
    regs = list(regressions or ())
    text = summary_markdown(diags, ests, max_rows=max_rows, regressions=regs)
    while len(text.encode("utf-8")) > budget and max_rows:
        max_rows //= 2
        text = summary_markdown(diags, ests, max_rows=max_rows, regressions=regs[:max_rows])
    if len(text.encode("utf-8")) > budget:
        text = summary_markdown(diags, None, max_rows=0)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(("\n" if used else "") + text + "\n")


def step_summary_path(env: Mapping[str, str]) -> str | None:
    return env.get("GITHUB_STEP_SUMMARY") or None
