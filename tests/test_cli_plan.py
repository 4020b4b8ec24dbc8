"""``mbmem-lint plan`` on the command line: formats, exit codes, --keep, and that every candidate's
``--set`` items make ``check FILE::FUNCTION`` report no error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli

ROOT = Path(__file__).resolve().parents[1]
LLAMA70 = str(ROOT / "fixtures/plan/llama3_70b_sft_no_expandable_segments.py")
FUNC70 = "llama3_70b_sft_32gpu_h100_fp8cs_no_es_config"
LLAMA8 = str(ROOT / "fixtures/plan/llama3_8b_2gpu.py")


@pytest.fixture(scope="module")
def plan70() -> dict[str, Any]:
    res = run_cli(["plan", f"{LLAMA70}::{FUNC70}", "--format", "json", "--top", "6"])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_json_contract(plan70: dict[str, Any]) -> None:
    assert set(plan70) >= {"recipe", "gpu", "world_size", "current", "candidates"}
    assert plan70["world_size"] == 32
    assert set(plan70["gpu"]) >= {"name", "capacity_bytes", "usable_bytes"}
    assert set(plan70["current"]) >= {"peak_bytes", "fits"}
    cands = plan70["candidates"]
    assert isinstance(cands, list) and 1 <= len(cands) <= 6
    for c in cands:
        assert set(c) >= {"rank", "changes", "peak_bytes", "allocated_peak_bytes", "fits", "cost", "diff"}
        assert set(c["cost"]) >= {"relative_step_time", "terms"}
    assert cands[0]["changes"] == {"env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_every_candidate_passes_check_with_its_set_items(plan70: dict[str, Any]) -> None:
    before = run_cli(["check", f"{LLAMA70}::{FUNC70}", "--format", "json"])
    assert any(d["code"] == "MBM702" for d in json.loads(before.stdout)["diagnostics"])
    for c in plan70["candidates"]:
        args = ["check", f"{LLAMA70}::{FUNC70}", "--format", "json"]
        for item in c["set_args"]:
            args += ["--set", item]
        res = run_cli(args)
        diags = json.loads(res.stdout)["diagnostics"]
        assert not [d for d in diags if d["severity"] == "error"], (c["title"], diags)
        assert not [d for d in diags if d["code"] in ("MBM701", "MBM702")], c["title"]


def test_text_and_markdown() -> None:
    text = run_cli(["plan", LLAMA70, "--top", "2"])
    assert text.exit_code == 0
    assert "#1  1.000x step time" in text.stdout and "expandable segments" in text.stdout
    assert "--set env_vars.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text.stdout
    assert "| +    cfg.env_vars[\"PYTORCH_CUDA_ALLOC_CONF\"]" in text.stdout
    assert "#3" not in text.stdout
    md = run_cli(["plan", LLAMA70, "--top", "2", "--format", "markdown", "--no-diff"])
    assert md.exit_code == 0
    assert "| 1 | expandable segments | 1.000x |" in md.stdout and "```diff" not in md.stdout


def test_keep_and_its_errors() -> None:
    res = run_cli(["plan", LLAMA70, "--keep", "tp,pp", "--keep", "expandable_segments", "--format", "json"])
    assert res.exit_code == 0
    for c in json.loads(res.stdout)["candidates"]:
        assert not set(c["changes"]) & {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
                                         "env_vars.PYTORCH_CUDA_ALLOC_CONF"}
    bad = run_cli(["plan", LLAMA70, "--keep", "tensor"])
    assert bad.exit_code == 2 and "unknown --keep knob 'tensor'" in bad.stderr


def test_exit_1_when_nothing_fits_and_2_for_input_errors() -> None:
    none = run_cli(["plan", LLAMA70, "--world-size", "1", "--gpu", "a100-40gb", "--no-diff"])
    assert none.exit_code == 1 and "no candidate:" in none.stdout
    assert run_cli(["plan", "missing.py"]).exit_code == 2
    assert run_cli(["plan", LLAMA70, "--gpu", "tpu"]).exit_code == 2
    assert run_cli(["plan", LLAMA70, "--set", "a=b,c"]).exit_code == 2


def test_user_set_is_the_current_recipe() -> None:
    """--set changes the recipe the plan starts from; candidates then never propose the value it already has."""
    plain = json.loads(run_cli(["plan", LLAMA8, "--format", "json", "--no-diff"]).stdout)
    res = run_cli(["plan", LLAMA8, "--set", "train.micro_batch_size=1", "--format", "json", "--no-diff"])
    data = json.loads(res.stdout)
    assert res.exit_code == 0
    assert data["current"]["peak_bytes"] < plain["current"]["peak_bytes"]
    assert any(c["changes"].get("train.micro_batch_size") == 1 for c in plain["candidates"])
    assert all("train.micro_batch_size" not in c["changes"] for c in data["candidates"])


def test_check_file_function_needs_a_single_path() -> None:
    res = run_cli(["check", f"{LLAMA70}::{FUNC70}", LLAMA8])
    assert res.exit_code == 2 and "FILE::FUNCTION checks one recipe" in res.stderr


def test_yaml_override_with_recipe(tmp_path: Path) -> None:
    """A YAML override file paired with --recipe is planned like estimate does: the override is the starting
    point, and a candidate's diff edits the YAML value it changes."""
    yaml = tmp_path / "mbs.yaml"
    yaml.write_text("train:\n  micro_batch_size: 2\n")
    ref = f"{LLAMA8}::llama3_8b_pretrain_2gpu_h100_bf16_config"
    res = run_cli(["plan", str(yaml), "--recipe", ref, "--format", "json", "--top", "10"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["recipe"].endswith("::llama3_8b_pretrain_2gpu_h100_bf16_config")
    smaller = [c for c in data["candidates"] if c["changes"].get("train.micro_batch_size") == 1]
    assert smaller and "-  micro_batch_size: 2" in smaller[0]["diff"] and "+  micro_batch_size: 1" in smaller[0]["diff"]


def test_parse_error_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n")
    res = run_cli(["plan", str(bad)])
    assert res.exit_code == 2
    assert "MBM002" in res.stderr and "no recipe function found" in res.stderr
