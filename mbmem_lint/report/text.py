"""Terminal output, ruff-like::

    recipes/llama.py:12:5: MBM201 [error] CPU offloading does not support pipeline parallelism
       |
    12 |     cfg.model.cpu_offloading = True
       |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
       = note: Megatron Core raises ValueError in TransformerConfig.__post_init__
       = help: set cfg.model.cpu_offloading = False (unsafe fix)

    Found 1 error in 1 file.

Colour (ANSI) only when the stream is a TTY, ``NO_COLOR`` is unset, or ``color=True`` forces it.
Every value and source line is printed through :mod:`mbmem_lint.report.escape` (no control character
of an input reaches the terminal, no input starts a workflow command); the source excerpt keeps its
tabs, and its carets follow the escaped text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.report.common import ordered, summarize, summary_sentence
from mbmem_lint.report.escape import printable
from mbmem_lint.sources import Sources

MAX_EXCERPT_LINES = 4

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_BLUE = "\x1b[34m"
_SEVERITY_COLOR = {"error": "\x1b[31m", "warning": "\x1b[33m", "info": "\x1b[36m"}


def use_color(stream: TextIO, color: bool | None = None, env: Mapping[str, str] | None = None) -> bool:
    """``color`` wins when given (``--color/--no-color``); then ``NO_COLOR`` (any non-empty value
    disables), ``FORCE_COLOR`` (non-empty enables); otherwise colour only on a TTY."""
    if color is not None:
        return color
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed or detached stream
        return False


class _Style:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes or not text:
            return text
        return "".join(codes) + text + _RESET


def _underline_prefix(line: str, column: int) -> str:
    """Whitespace up to ``column`` (1-based) keeping tabs, so carets line up under tabs too."""
    return "".join("\t" if ch == "\t" else " " for ch in line[: max(column - 1, 0)])


def _excerpt(d: Diagnostic, sources: Sources, style: _Style) -> list[str]:
    loc = d.location
    src = sources.get(loc.path)
    if src is None:
        return []
    lines = src.lines()
    if not 1 <= loc.line <= len(lines):
        return []
    end_line = loc.end_line if loc.end_line is not None and loc.end_line >= loc.line else loc.line
    end_line = min(end_line, len(lines))
    shown_end = min(end_line, loc.line + MAX_EXCERPT_LINES - 1)
    width = len(str(shown_end))
    gutter = style(" " * width + " |", _BLUE, _BOLD)
    sev = _SEVERITY_COLOR.get(d.severity, "")
    out = [gutter]
    for n in range(loc.line, shown_end + 1):
        text = lines[n - 1]
        shown = printable(text, keep="\t")
        out.append(style(f"{n:>{width}} |", _BLUE, _BOLD) + (" " + shown if shown else ""))
        stripped = len(text) - len(text.lstrip())
        start = loc.column if n == loc.line else stripped + 1
        if n == end_line and loc.end_column is not None:
            stop = loc.end_column
        else:  # no end column, or a line before the last: to the end of the line
            stop = len(text.rstrip()) + 1
        # Columns of the escaped line: an escaped control character shows as several.
        before = printable(text[: max(start - 1, 0)], keep="\t")
        marked = text[max(start - 1, 0) : max(stop - 1, 0)]
        count = max(stop - start + len(printable(marked, keep="\t")) - len(marked), 1)
        out.append(gutter + " " + _underline_prefix(before, len(before) + 1) + style("^" * count, sev, _BOLD))
    if shown_end < end_line:
        out.append(style(" " * width + " |", _BLUE, _BOLD) + f" ... ({end_line - shown_end} more lines)")
    return out


def format_diagnostic(d: Diagnostic, sources: Sources, *, color: bool = False) -> str:
    style = _Style(color)
    loc = d.location
    sev = _SEVERITY_COLOR.get(d.severity, "")
    head = (
        style(f"{printable(loc.path)}:{loc.line}:{loc.column}:", _BOLD)
        + " "
        + style(d.code, sev, _BOLD)
        + " "
        + style(f"[{d.severity}]", sev)
        + " "
        + printable(d.message)
    )
    lines = [head]
    lines.extend(_excerpt(d, sources, style))
    if d.function:
        lines.append(style("   = ", _BLUE, _BOLD) + f"in recipe: {printable(d.function)}")
    for note in d.notes:
        first, *rest = note.splitlines() or [""]
        lines.append(style("   = ", _BLUE, _BOLD) + style("note:", _BOLD) + " " + printable(first))
        lines.extend("         " + printable(r) for r in rest)
    if d.fix is not None:
        saving = ""
        if d.fix.saving_bytes:
            saving = f", saves ~{d.fix.saving_bytes / 1024**3:.1f} GiB per rank"
        lines.append(
            style("   = ", _BLUE, _BOLD)
            + style("help:", _BOLD)
            + f" {printable(d.fix.description)} ({d.fix.applicability} fix{saving})"
        )
    return "\n".join(lines)


def render_text(
    diagnostics: Iterable[Diagnostic],
    stream: TextIO,
    *,
    sources: Sources,
    color: bool | None = None,
    env: Mapping[str, str] | None = None,
    bridge: Any = None,
) -> None:
    """``bridge``: the Megatron Bridge data the run used; named on the line after the summary."""
    diags = ordered(diagnostics)
    enabled = use_color(stream, color, env)
    for d in diags:
        stream.write(format_diagnostic(d, sources, color=enabled) + "\n\n")
    summary = summary_sentence(summarize(diags))
    style = _Style(enabled)
    stream.write(style(summary, _BOLD) + "\n")
    if bridge is not None:
        stream.write(f"Linted against {printable(bridge.describe())}\n")
