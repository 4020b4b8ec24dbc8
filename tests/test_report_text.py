"""Terminal output: ruff-like head line, source excerpt with carets, notes, summary, colour."""

from __future__ import annotations

import io

from mbmem_lint.diagnostics import Diagnostic, Edit, Fix, Location
from mbmem_lint.report import render, use_color
from mbmem_lint.report.text import format_diagnostic
from mbmem_lint.sources import SourceFile

RECIPE = (
    "def bad_config():\n"
    "    cfg = llama3_8b_pretrain_config()\n"
    "    cfg.model.pipeline_model_parallel_size = 2\n"
    "    cfg.model.cpu_offloading = True\n"
    "    cfg.train.global_batch_size = (\n"
    "        128\n"
    "    )\n"
    "\tcfg.model.x = 1\n"
    "    return cfg\n"
)
SOURCES = {"recipes/bad.py": SourceFile("recipes/bad.py", RECIPE, "python")}


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def offload() -> Diagnostic:
    return Diagnostic(
        "MBM201",
        "cpu-offloading-with-pp",
        "error",
        "CPU offloading does not work with pipeline parallelism (PP=2)",
        Location("recipes/bad.py", 4, 5, 4, 36),
        function="bad_config",
        fields=["model.cpu_offloading", "model.pipeline_model_parallel_size"],
        fix=Fix("set cfg.model.cpu_offloading = False", "unsafe", [Edit("recipes/bad.py", 0, 0, "")]),
        notes=["Megatron Core raises ValueError in TransformerConfig.__post_init__"],
    )


def test_head_line_excerpt_and_notes() -> None:
    text = format_diagnostic(offload(), SOURCES)
    assert text.splitlines() == [
        "recipes/bad.py:4:5: MBM201 [error] CPU offloading does not work with pipeline parallelism (PP=2)",
        "  |",
        "4 |     cfg.model.cpu_offloading = True",
        "  |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "   = in recipe: bad_config",
        "   = note: Megatron Core raises ValueError in TransformerConfig.__post_init__",
        "   = help: set cfg.model.cpu_offloading = False (unsafe fix)",
    ]


def test_multi_line_span_and_tabs() -> None:
    d = Diagnostic("MBM104", "x-y", "warning", "m", Location("recipes/bad.py", 5, 5, 7, 6))
    lines = format_diagnostic(d, SOURCES).splitlines()
    assert lines[2:8] == [
        "5 |     cfg.train.global_batch_size = (",
        "  |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "6 |         128",
        "  |         ^^^",
        "7 |     )",
        "  |     ^",
    ]
    tab = Diagnostic("MBM104", "x-y", "warning", "m", Location("recipes/bad.py", 8, 2, 8, 13))
    assert format_diagnostic(tab, SOURCES).splitlines()[3] == "  | \t^^^^^^^^^^^"


def test_no_excerpt_without_source_or_end() -> None:
    d = Diagnostic("MBM601", "unknown-key", "info", "unknown key", Location("conf/o.yaml", 3, 1))
    assert format_diagnostic(d, SOURCES) == "conf/o.yaml:3:1: MBM601 [info] unknown key"
    no_end = Diagnostic("MBM601", "unknown-key", "info", "m", Location("recipes/bad.py", 3, 5))
    assert format_diagnostic(no_end, SOURCES).splitlines()[3] == "  |     " + "^" * 42


def test_summary_lines() -> None:
    out = io.StringIO()
    render([], "text", sources={}, stream=out, env={})
    assert out.getvalue() == "All checks passed.\n"
    diags = [
        offload(),
        Diagnostic("MBM101", "a-b", "error", "m", Location("recipes/bad.py", 3, 5)),
        Diagnostic("MBM102", "a-b", "error", "m", Location("recipes/other.py", 1, 1)),
        Diagnostic("MBM301", "a-b", "warning", "m", Location("recipes/other.py", 2, 1)),
    ]
    out = io.StringIO()
    render(diags, "text", sources=SOURCES, stream=out, env={})
    assert out.getvalue().endswith("\nFound 3 errors, 1 warning in 2 files (1 fixable with --fix).\n")
    # file order: recipes/bad.py line 3 before line 4, then recipes/other.py
    heads = [ln for ln in out.getvalue().splitlines() if ln.startswith("recipes/")]
    assert [h.split(": ", 1)[0] for h in heads] == [
        "recipes/bad.py:3:5",
        "recipes/bad.py:4:5",
        "recipes/other.py:1:1",
        "recipes/other.py:2:1",
    ]


def test_display_only_fixes_are_not_counted_as_fixable() -> None:
    d = offload()
    d.fix = Fix("lower MBS", "display-only", [Edit("recipes/bad.py", 0, 0, "")], saving_bytes=3 * 1024**3)
    out = io.StringIO()
    render([d], "text", sources=SOURCES, stream=out, env={})
    assert "Found 1 error in 1 file.\n" in out.getvalue()
    assert "help: lower MBS (display-only fix, saves ~3.0 GiB per rank)" in out.getvalue()


def test_colour_only_on_tty_and_without_no_color() -> None:
    assert use_color(io.StringIO(), env={}) is False
    assert use_color(TTY(), env={}) is True
    assert use_color(TTY(), env={"NO_COLOR": "1"}) is False
    assert use_color(io.StringIO(), env={"FORCE_COLOR": "1"}) is True
    assert use_color(TTY(), True, env={"NO_COLOR": "1"}) is True  # --color wins
    assert use_color(TTY(), False, env={}) is False

    plain, tty = io.StringIO(), TTY()
    render([offload()], "text", sources=SOURCES, stream=plain, env={})
    render([offload()], "text", sources=SOURCES, stream=tty, env={})
    assert "\x1b[" not in plain.getvalue()
    assert "\x1b[31m" in tty.getvalue()
    # colour does not change the text
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue()) == plain.getvalue()
