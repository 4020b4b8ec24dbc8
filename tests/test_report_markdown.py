"""``--format markdown``: findings table for PR summaries, safe cell escaping, estimate tables."""

from __future__ import annotations

import io

from mbmem_lint.diagnostics import Diagnostic, Location
from mbmem_lint.report import render
from mbmem_lint.report.markdown import bar, cell, findings_table


def test_cell_escaping_keeps_code_spans() -> None:
    assert cell("a | b") == "a \\| b"
    assert cell("x < y & <script>") == "x &lt; y &amp; &lt;script&gt;"
    assert cell("set `cfg.model.x = <n>` now") == "set `cfg.model.x = <n>` now"  # literal in code spans
    assert cell("line1\nline2") == "line1<br>line2"
    assert cell("odd ` tick") == "odd \\` tick"


def test_bar() -> None:
    assert bar(0, 10) == "`░░░░░░░░░░░░░░░░░░░░` 0%"
    assert bar(5, 10) == "`██████████░░░░░░░░░░` 50%"
    assert bar(12, 10) == "`████████████████████▲` 120%"
    assert bar(1, 0) == "?"


def test_findings_table_and_row_cap() -> None:
    diags = [
        Diagnostic("MBM101", "a-b", "error", f"m{i}", Location("r.py", i + 1, 1), function="f")
        for i in range(5)
    ]
    table = findings_table(diags, max_rows=3)
    lines = table.splitlines()
    assert lines[0] == "| Severity | Code | Location | Recipe | Message | Fix |"
    assert len([ln for ln in lines if ln.startswith("| 🔴")]) == 3
    assert lines[-1] == "… and 2 more (run `mbmem-lint check` for all of them)."


def test_render_markdown() -> None:
    out = io.StringIO()
    render([], "markdown", sources={}, stream=out, env={})
    assert out.getvalue() == "### mbmem-lint\n\nAll checks passed.\n"
