"""``--format github``: escaping, spans, the per-step limit (golden files checked by hand), the
automatic choice inside Actions and the step summary."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from mbmem_lint.diagnostics import Diagnostic, Fix, Location
from mbmem_lint.report import default_format, render
from mbmem_lint.report.github import (
    annotation,
    annotation_lines,
    escape_data,
    escape_property,
    write_step_summary,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MBMEM_UPDATE_GOLDEN") == "1"


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(actual, encoding="utf-8", newline="")
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{name} differs (MBMEM_UPDATE_GOLDEN=1 rewrites it; then review the diff)"


def diag(
    code: str = "MBM201",
    severity: str = "error",
    message: str = "msg",
    path: str = "recipes/a.py",
    line: int = 1,
    column: int = 1,
    end_line: int | None = None,
    end_column: int | None = None,
    **kw: object,
) -> Diagnostic:
    return Diagnostic(
        code,
        kw.pop("name", "some-rule"),  # type: ignore[arg-type]
        severity,  # type: ignore[arg-type]
        message,
        Location(path, line, column, end_line, end_column),
        **kw,  # type: ignore[arg-type]
    )


def test_escape_data_and_property() -> None:
    assert escape_data("100% a\r\nb: c, d") == "100%25 a%0D%0Ab: c, d"
    assert escape_property("100% a\r\nb: c, d") == "100%25 a%0D%0Ab%3A c%2C d"
    # '%' first, so an already-escaped sequence is not mangled into a different character
    assert escape_data("%0A") == "%250A"


def test_single_line_span_has_columns_multi_line_has_none() -> None:
    one = annotation(diag(line=3, column=5, end_line=3, end_column=9))
    assert one.startswith("::error file=recipes/a.py,line=3,endLine=3,col=5,endColumn=9,title=")
    multi = annotation(diag(line=3, column=5, end_line=6, end_column=2))
    assert "col=" not in multi and "endColumn=" not in multi
    assert multi.startswith("::error file=recipes/a.py,line=3,endLine=6,title=")


def test_severity_commands() -> None:
    assert annotation(diag(severity="warning")).startswith("::warning ")
    assert annotation(diag(severity="info")).startswith("::notice ")


def test_library_location_is_job_level() -> None:
    d = diag(path="megatron/bridge/recipes/llama/llama3.py", line=40)
    d.location = Location(d.location.path, 40, 5, in_library=True)
    line = annotation(d)
    assert "file=" not in line and "line=" not in line
    assert "::megatron/bridge/recipes/llama/llama3.py%3A40" not in line  # data is not property-escaped
    assert line.split("::", 2)[2].startswith("megatron/bridge/recipes/llama/llama3.py:40:5: msg")


def test_golden_escaping() -> None:
    diags = [
        diag(
            "MBM301",
            "warning",
            "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:true' is lowercase: 100% ignored\r\n(see note)",
            path="recipes/odd, name: v2.py",
            line=7,
            column=9,
            end_line=7,
            end_column=60,
            name="allocator-conf-lowercase-true",
            function="llama3_8b_config",
            fields=["env_vars.PYTORCH_CUDA_ALLOC_CONF"],
            notes=["PyTorch parses 'True' only, so the setting is silently dropped, 50% of the time: never"],
            fix=Fix("write expandable_segments:True", "safe"),
        ),
        diag(
            "MBM104",
            "error",
            "a span over lines 12-14, with a comma",
            path="conf/override,1.yaml",
            line=12,
            column=3,
            end_line=14,
            end_column=8,
            name="pp-layout",
        ),
        diag("MBM602", "info", "key `~model.foo` does nothing: %s", path="conf/a.yaml", line=2, column=1),
    ]
    out = io.StringIO()
    render(diags, "github", sources={}, stream=out, env={})
    check_golden("github_escaping.txt", out.getvalue())


def _many(severity: str, n: int, code: str) -> list[Diagnostic]:
    return [
        diag(code, severity, f"{severity} finding {i}", path=f"recipes/f{i:02d}.py", line=i + 1, column=1)
        for i in range(n)
    ]


def test_golden_per_step_limit() -> None:
    # 12 errors, 11 warnings, 10 infos: 10 + 10 + 9 annotations and a final notice (the 10th notice)
    diags = _many("info", 10, "MBM305") + _many("warning", 11, "MBM212") + _many("error", 12, "MBM101")
    lines = annotation_lines(diags)
    assert [ln.split(" ", 1)[0] for ln in lines] == ["::error"] * 10 + ["::warning"] * 10 + ["::notice"] * 10
    assert "2 errors, 1 warning, 1 info not shown" in lines[-1]
    out = io.StringIO()
    render(diags, "github", sources={}, stream=out, env={})
    check_golden("github_limit.txt", out.getvalue())


def test_at_the_limit_nothing_is_hidden() -> None:
    diags = _many("error", 10, "MBM101") + _many("warning", 10, "MBM212") + _many("info", 10, "MBM305")
    lines = annotation_lines(diags)
    assert len(lines) == 30 and not any("not shown" in ln for ln in lines)


def test_errors_first_even_when_listed_last() -> None:
    diags = [diag(severity="info", line=1), diag(severity="warning", line=2), diag(severity="error", line=3)]
    assert [ln.split(" ", 1)[0] for ln in annotation_lines(diags)] == ["::error", "::warning", "::notice"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"GITHUB_ACTIONS": "true"}, "github"),
        ({"GITHUB_ACTIONS": "false"}, "text"),
        ({}, "text"),
    ],
)
def test_default_format(env: dict[str, str], expected: str) -> None:
    assert default_format(env) == expected


ESTIMATE = {
    "recipe": "recipes/llama.py::llama3_70b_config",
    "gpu": {"name": "H100 80GB", "capacity_bytes": 85_520_809_984, "usable_bytes": 76 * 1024**3},
    "world_size": 64,
    "parallelism": {"tp": 4, "pp": 2, "vpp": None, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "edp": 8},
    "stages": [
        {
            "pp_rank": 0,
            "components": [
                {"name": "weights", "bytes": 17 * 1024**3, "fields": ["model.num_layers"]},
                {"name": "optimizer states", "bytes": 13 * 1024**3, "fields": []},
                {"name": "activations", "bytes": 30 * 1024**3, "fields": ["train.micro_batch_size"]},
                {"name": "cuda context", "bytes": 1024**3 // 2, "fields": []},
            ],
            "total_bytes": 60 * 1024**3 + 1024**3 // 2,
        },
        {
            "pp_rank": 1,
            "components": [
                {"name": "weights", "bytes": 18 * 1024**3, "fields": []},
                {"name": "activations", "bytes": 60 * 1024**3, "fields": []},
                {"name": "logits | cross-entropy", "bytes": 8 * 1024**3, "fields": []},
            ],
            "total_bytes": 86 * 1024**3,
        },
    ],
    "peak_bytes": 86 * 1024**3,
    "peak_stage": 1,
    "fits": False,
    "headroom_bytes": -10 * 1024**3,
    "assumptions": ["flash attention (no s² scores)", "activations of 2 in-flight microbatches on stage 0"],
}


def test_step_summary_golden(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("previous step output\n", encoding="utf-8")
    diags = [
        diag(
            "MBM201",
            "error",
            "CPU offloading with PP=2 | raises <ValueError>",
            line=4,
            column=5,
            end_line=4,
            end_column=36,
            function="llama3_70b_config",
            name="cpu-offloading-with-pp",
        ),
        diag(
            "MBM701",
            "warning",
            "stage 1 does not fit",
            line=2,
            column=1,
            function="llama3_70b_config",
            name="memory-capacity",
            fields=["memory"],
            fix=Fix("raise PP to 4", "display-only"),
        ),
    ]
    out = io.StringIO()
    render(
        diags,
        "github",
        sources={},
        stream=out,
        estimates=[ESTIMATE],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("previous step output\n")  # appended, not overwritten
    check_golden("github_step_summary.md", text)


def test_step_summary_accepts_objects_with_to_json(tmp_path: Path) -> None:
    class FakeEstimate:
        def to_json(self) -> dict[str, object]:
            return ESTIMATE

    path = tmp_path / "s.md"
    write_step_summary(path, [], [FakeEstimate()])
    text = path.read_text(encoding="utf-8")
    assert "All checks passed." in text and "`recipes/llama.py::llama3_70b_config`" in text
    assert "PP 1 (peak)" in text


def test_step_summary_stays_under_one_mib(tmp_path: Path) -> None:
    diags = [diag(message="x" * 2000, line=i + 1, path=f"r{i}.py") for i in range(2000)]
    path = tmp_path / "s.md"
    write_step_summary(path, diags)
    size = path.stat().st_size
    assert size < 1024 * 1024
    assert "more (run `mbmem-lint check` for all of them)" in path.read_text(encoding="utf-8")
