"""``--format json`` matches the documented JSON Schema (docs/json-schema/diagnostics.schema.json).

The schema is checked against hand-built diagnostics here and against the real CLI output when the
pipeline (``mbmem-lint check``) can run on the bundled fixtures.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mbmem_lint.diagnostics import Diagnostic, Edit, Fix, Location
from mbmem_lint.report import render

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "docs" / "json-schema" / "diagnostics.schema.json"


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return data


def validate(instance: Any) -> None:
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    jsonschema.Draft202012Validator(s, format_checker=jsonschema.FormatChecker()).validate(instance)


def sample() -> list[Diagnostic]:
    return [
        Diagnostic(
            "MBM201",
            "cpu-offloading-with-pp",
            "error",
            "CPU offloading with PP=2",
            Location("recipes/bad.py", 4, 5, 4, 36),
            function="bad_config",
            fields=["model.cpu_offloading", "model.pipeline_model_parallel_size"],
            fix=Fix("set cpu_offloading False", "unsafe", [Edit("recipes/bad.py", 90, 94, "False")]),
        ),
        Diagnostic(
            "MBM701",
            "memory-capacity",
            "warning",
            "stage 1 needs 86 GiB",
            Location("recipes/bad.py", 2, 5),
            function="bad_config",
            fields=["memory", "train.micro_batch_size"],
            fix=Fix("lower MBS", "display-only", [], saving_bytes=3 * 1024**3),
        ),
        Diagnostic("MBM601", "unknown-key", "info", "unknown key", Location("conf/o.yaml", 3, 1)),
    ]


def render_json(diags: list[Diagnostic]) -> dict[str, Any]:
    out = io.StringIO()
    render(diags, "json", sources={}, stream=out, env={})
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def test_output_shape_and_summary() -> None:
    data = render_json(sample())
    validate(data)
    assert list(data) == ["diagnostics", "summary"]
    assert data["summary"] == {"errors": 1, "warnings": 1, "infos": 1, "files": 2, "recipes": 1, "fixable": 1}
    assert [d["code"] for d in data["diagnostics"]] == ["MBM601", "MBM701", "MBM201"]  # path, line order
    assert data["diagnostics"][2] == sample()[0].to_json()


def test_empty_output_is_valid() -> None:
    data = render_json([])
    validate(data)
    assert data == {
        "diagnostics": [],
        "summary": {"errors": 0, "warnings": 0, "infos": 0, "files": 0, "recipes": 0, "fixable": 0},
    }


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["diagnostics"][0].pop("fields"),
        lambda d: d["diagnostics"][0].update(severity="fatal"),
        lambda d: d["diagnostics"][0].update(code="E501"),
        lambda d: d["diagnostics"][0].update(line=0),
        lambda d: d["summary"].pop("fixable"),
        lambda d: d.update(extra=1),
        lambda d: d["diagnostics"][2]["fix"].update(applicability="maybe"),
    ],
)
def test_schema_rejects_malformed_output(mutate: Any) -> None:
    data = render_json(sample())
    mutate(data)
    with pytest.raises(jsonschema.ValidationError):
        validate(data)


FIXTURES = ROOT / "fixtures"


@pytest.mark.slow
def test_real_cli_output_matches_schema(tmp_path: Path) -> None:
    """Real ``mbmem-lint check --format json`` output, over the bundled fixtures and a bad recipe."""
    if importlib.util.find_spec("mbmem_lint.cli") is None:
        pytest.skip("the CLI (mbmem_lint/cli.py) has not landed yet")
    bad = tmp_path / "bad_recipe.py"
    bad.write_text(
        "from megatron.bridge.recipes.llama import llama3_8b_pretrain_config\n"
        "from megatron.bridge.training.config import ConfigContainer\n\n\n"
        "def bad_config() -> ConfigContainer:\n"
        "    cfg = llama3_8b_pretrain_config()\n"
        "    cfg.model.pipeline_model_parallel_size = 2\n"
        "    cfg.model.cpu_offloading = True\n"
        "    return cfg\n",
        encoding="utf-8",
    )
    targets = [str(bad)] + ([str(FIXTURES)] if FIXTURES.is_dir() and any(FIXTURES.iterdir()) else [])
    proc = subprocess.run(
        [sys.executable, "-m", "mbmem_lint", "check", "--format", "json", *targets],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stderr}"
    data = json.loads(proc.stdout)
    validate(data)
    assert data["summary"]["errors"] >= 1, "the bad recipe (cpu_offloading with PP=2) must be an error"
    assert any(d["path"].endswith("bad_recipe.py") for d in data["diagnostics"])
