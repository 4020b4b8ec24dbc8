"""Markdown for PR comments and the GitHub step summary: a findings table and memory-estimate
tables (one per recipe, a bar of each pipeline stage against the GPU's usable memory).

Every value goes through :func:`cell` or :func:`_code`, which escape control characters
(:mod:`mbmem_lint.report.escape`): ``--format markdown`` is printed, and the step summary is a file.
A value's own line breaks are escaped; the tool's (a message, then its notes) become ``<br>``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.report.common import (
    estimate_dicts,
    fmt_gib,
    ordered,
    summarize,
    summary_sentence,
)
from mbmem_lint.report.escape import printable

BAR_WIDTH = 20
_SEVERITY_LABEL = {"error": "🔴 error", "warning": "🟡 warning", "info": "🔵 info"}


def cell(text: str) -> str:
    """Text safe inside a table cell: no raw HTML, no pipes, no line breaks, no control characters."""
    segments = printable(text, keep="\n").split("`")
    if len(segments) % 2 == 0:  # unbalanced backtick: treat it literally
        segments = [text.replace("`", "\\`")]
    for i in range(0, len(segments), 2):  # outside code spans (entities are literal inside them)
        segments[i] = segments[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = "`".join(segments).replace("|", "\\|")
    return "<br>".join(part.strip() for part in text.splitlines()) if "\n" in text else text


def _code(text: str) -> str:
    """An inline code span (double backticks when the text holds one)."""
    text = printable(text).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def findings_table(diagnostics: Iterable[Diagnostic], *, max_rows: int | None = None) -> str:
    """The findings as a Markdown table (file order). Beyond ``max_rows``, a line says how many
    were left out."""
    diags = ordered(diagnostics)
    if not diags:
        return "No findings.\n"
    lines = [
        "| Severity | Code | Location | Recipe | Message | Fix |",
        "|---|---|---|---|---|---|",
    ]
    shown = diags if max_rows is None else diags[:max_rows]
    for d in shown:
        loc = d.location
        fix = "—"
        if d.fix is not None:
            fix = f"{d.fix.applicability}: {cell(printable(d.fix.description))}"
        message = "\n".join(printable(part) for part in (d.message, *d.notes))
        lines.append(
            f"| {_SEVERITY_LABEL.get(d.severity, d.severity)} | {_code(d.code)} {cell(d.name)}"
            f" | {_code(f'{loc.path}:{loc.line}:{loc.column}')}"
            f" | {_code(d.function) if d.function else '—'} | {cell(message)} | {fix} |"
        )
    if len(shown) < len(diags):
        lines.append("")
        lines.append(f"… and {len(diags) - len(shown)} more (run `mbmem-lint check` for all of them).")
    return "\n".join(lines) + "\n"


def bar(used: float, capacity: float, *, width: int = BAR_WIDTH) -> str:
    """``█████████████░░░░░░░ 65%``; a full bar with ``▲`` past 100%."""
    if capacity <= 0:
        return "?"
    frac = used / capacity
    filled = min(width, max(0, round(frac * width)))
    text = "█" * filled + "░" * (width - filled)
    return f"`{text}{'▲' if frac > 1 else ''}` {frac:.0%}"


def _parallelism(p: dict[str, Any]) -> str:
    keys = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp")
    parts = [f"{k.upper()} {p[k]}" for k in keys if p.get(k) is not None]
    return " · ".join(parts)


def estimate_table(estimate: dict[str, Any], *, top_components: int = 3) -> str:
    """One recipe's estimate (the estimator's JSON dict) as a heading, a verdict line and a table
    with one row per pipeline stage: total, a bar against usable memory, largest components."""
    gpu = estimate.get("gpu") or {}
    usable = gpu.get("usable_bytes") or gpu.get("capacity_bytes") or 0
    peak_stage = estimate.get("peak_stage")
    fits = estimate.get("fits")
    headroom = estimate.get("headroom_bytes")
    verdict = "✅ fits" if fits else "❌ does not fit" if fits is not None else "❔ unknown"
    if headroom is not None:
        verdict += f" (headroom {fmt_gib(headroom)})" if headroom >= 0 else f" (over by {fmt_gib(-headroom)})"
    lines = [
        f"#### {_code(str(estimate.get('recipe', '?')))}",
        "",
        f"**{verdict}** on {cell(str(gpu.get('name', '?')))} "
        f"({fmt_gib(gpu.get('capacity_bytes'))}, usable {fmt_gib(gpu.get('usable_bytes'))})"
        f" · world size {estimate.get('world_size', '?')}"
        + (f" · {_parallelism(estimate['parallelism'])}" if estimate.get("parallelism") else ""),
        "",
        "| Stage | Per-rank peak | Of usable memory | Largest components |",
        "|---|---:|---|---|",
    ]
    for stage in estimate.get("stages", []):
        rank = stage.get("pp_rank")
        total = stage.get("total_bytes") or 0
        comps = sorted(stage.get("components", []), key=lambda c: -(c.get("bytes") or 0))
        top = ", ".join(
            f"{cell(str(c.get('name')))} {fmt_gib(c.get('bytes'))}" for c in comps[:top_components]
        )
        label = f"PP {rank}" + (" (peak)" if rank == peak_stage else "")
        lines.append(f"| {label} | {fmt_gib(total)} | {bar(total, usable)} | {top or '—'} |")
    assumptions = estimate.get("assumptions") or []
    if assumptions:
        lines += ["", "<details><summary>Assumptions</summary>", ""]
        lines += [f"- {cell(str(a))}" for a in assumptions]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def regression_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """Before/after peak of each recipe ``check --base`` compared (rows of ``regression_rows``)."""
    lines = ["| Recipe | GPU | Base peak | Peak | Change |", "|---|---|---:|---:|---|"]
    for r in rows:
        growth = r.get("growth")
        change = "—" if growth is None else f"{growth * 100:+.1f}%"
        if r.get("regression"):
            change = f"🔺 {change}"
        lines.append(f"| {_code(str(r.get('recipe', '?')))} | {cell(str(r.get('gpu') or '?'))} | "
                     f"{fmt_gib(r.get('before_bytes'))} | {fmt_gib(r.get('after_bytes'))} | {change} |")
    return "\n".join(lines) + "\n"


NOT_CHECKED = "MBM704"  # memory-not-checked (rules/memory.py)


def not_checked_table(diagnostics: Iterable[Diagnostic]) -> str:
    """The recipes whose memory was not checked (MBM704), with why and how to supply the architecture: listed
    apart so an unknown model never passes for "fits" in a summary that shows the estimates."""
    rows = [d for d in diagnostics if d.code == NOT_CHECKED]
    if not rows:
        return ""
    lines = ["### Memory not checked", "",
             f"{len(rows)} recipe{'s' if len(rows) != 1 else ''} got no memory verdict: the model architecture is "
             "not known.", "", "| Recipe | Location | Why and how to supply it |", "|---|---|---|"]
    for d in rows:
        loc = d.location
        why = d.message.removeprefix("memory not checked: ")
        lines.append(f"| {_code(d.function) if d.function else '—'} | {_code(f'{loc.path}:{loc.line}')} | {cell(why)} |")
    return "\n".join(lines) + "\n"


def summary_markdown(
    diagnostics: Iterable[Diagnostic],
    estimates: Iterable[Any] | None = None,
    *,
    max_rows: int | None = 500,
    title: str = "mbmem-lint",
    regressions: Iterable[Mapping[str, Any]] | None = None,
) -> str:
    diags = ordered(diagnostics)
    parts = [f"### {title}", "", summary_sentence(summarize(diags)), ""]
    if diags:
        parts += [findings_table(diags, max_rows=max_rows)]
    regs = list(regressions or ())
    if regs:
        parts += ["### Peak memory against the base revision", "", regression_table(regs)]
    unchecked = not_checked_table(diags)
    if unchecked:
        parts += [unchecked]
    ests = estimate_dicts(estimates)
    if ests:
        parts += ["### Memory estimate per pipeline stage", ""]
        for est in ests:
            parts += [estimate_table(est)]
    return "\n".join(parts).rstrip("\n") + "\n"


def render_markdown(
    diagnostics: Iterable[Diagnostic], stream: TextIO, *, estimates: Iterable[Any] | None = None,
    regressions: Iterable[Mapping[str, Any]] | None = None,
) -> None:
    stream.write(summary_markdown(diagnostics, estimates, max_rows=None, regressions=regressions))
