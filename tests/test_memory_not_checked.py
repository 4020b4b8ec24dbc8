"""MBM704 memory-not-checked: a recipe whose model architecture is unknown is reported (text, JSON, GitHub
annotations and step summary, SARIF), ``estimate`` exits 2 with the same text, and each of the three ways to
supply the architecture makes the memory checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run_cli

UNKNOWN_ID = "my-org/unpublished-model"
RECIPE = f'''\
from megatron.bridge import AutoBridge
from megatron.bridge.recipes.llama import llama32_1b_pretrain_config


def my_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.model = AutoBridge.from_hf_pretrained("{UNKNOWN_ID}").to_megatron_provider(load_weights=False)
    cfg.model.tensor_model_parallel_size = 1
    return cfg
'''
TINY = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tiny-llama-config.json"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "recipe.py").write_text(RECIPE)
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # an empty cache: the id is found nowhere
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return tmp_path


def _expected_parts(message: str) -> None:
    assert message.startswith("memory not checked: the architecture of 'my-org/unpublished-model' is not known")
    assert "not in the Hugging Face cache" in message
    assert f'[tool.mbmem-lint.models] "{UNKNOWN_ID}" = "path/to/config.json"' in message
    assert f"huggingface-cli download {UNKNOWN_ID} config.json" in message
    assert "model.num_layers, model.hidden_size, model.num_attention_heads" in message


def test_text_and_json(project: Path) -> None:
    res = run_cli(["check", "recipe.py"], cwd=project)
    assert "recipe.py:7:" in res.stdout and "MBM704" in res.stdout and "memory not checked" in res.stdout
    res = run_cli(["check", "recipe.py", "--format", "json"], cwd=project)
    diags = [d for d in json.loads(res.stdout)["diagnostics"] if d["code"] == "MBM704"]
    assert len(diags) == 1
    d = diags[0]
    assert (d["name"], d["severity"], d["line"], d["function"]) == (
        "memory-not-checked", "info", 7, "my_pretrain_8gpu_h100_bf16_config")
    _expected_parts(d["message"])
    assert "model.hf_model_id" in d["fields"] and "model.num_layers" in d["fields"]
    assert not any(x["code"] in ("MBM701", "MBM702") for x in json.loads(res.stdout)["diagnostics"])


def test_github_annotation_and_summary(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = project / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = run_cli(["check", "recipe.py", "--format", "github"], cwd=project)
    notice = [ln for ln in res.stdout.splitlines() if "MBM704" in ln]
    assert len(notice) == 1 and notice[0].startswith("::notice file=recipe.py,line=7,")
    assert "memory not checked" in notice[0]
    text = summary.read_text()
    assert "### Memory not checked" in text and "1 recipe got no memory verdict" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `my_pretrain_8gpu_h100_bf16_config`"))
    assert "`recipe.py:7`" in row and "my-org/unpublished-model" in row
    assert "Memory estimate per pipeline stage" not in text  # nothing reads as "fits"


def test_sarif(project: Path) -> None:
    res = run_cli(["check", "recipe.py", "--format", "sarif"], cwd=project)
    run = json.loads(res.stdout)["runs"][0]
    results = [r for r in run["results"] if r["ruleId"] == "MBM704"]
    assert len(results) == 1 and results[0]["level"] == "note"
    _expected_parts(results[0]["message"]["text"])
    assert results[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 7
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "MBM704" in rule_ids


def test_estimate_exits_2_with_the_same_text(project: Path) -> None:
    res = run_cli(["estimate", "recipe.py"], cwd=project)
    assert res.exit_code == 2
    check = json.loads(run_cli(["check", "recipe.py", "--format", "json"], cwd=project).stdout)
    message = next(d["message"] for d in check["diagnostics"] if d["code"] == "MBM704")
    assert res.stderr.strip() == f"recipe.py::my_pretrain_8gpu_h100_bf16_config: {message}"


@pytest.mark.parametrize("way", ["pyproject-file", "pyproject-folder", "hf-cache", "recipe"])
def test_each_way_to_supply_it(project: Path, way: str) -> None:
    if way == "pyproject-file":
        (project / "pyproject.toml").write_text(f'[tool.mbmem-lint.models]\n"{UNKNOWN_ID}" = "{TINY}"\n')
    elif way == "pyproject-folder":
        (project / "ckpt").mkdir()
        (project / "ckpt" / "config.json").write_text(TINY.read_text())
        (project / "pyproject.toml").write_text(f'[tool.mbmem-lint.models]\n"{UNKNOWN_ID}" = "ckpt"\n')
    elif way == "hf-cache":
        snap = project / "hf-cache" / "models--my-org--unpublished-model" / "snapshots" / "0123abcd"
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(TINY.read_text())
        (project / "hf-cache" / "models--my-org--unpublished-model" / "refs").mkdir()
        (project / "hf-cache" / "models--my-org--unpublished-model" / "refs" / "main").write_text("0123abcd")
    else:
        (project / "recipe.py").write_text(RECIPE.replace(
            "    cfg.model.tensor_model_parallel_size = 1\n",
            "    cfg.model.tensor_model_parallel_size = 1\n    cfg.model.num_layers = 12\n"
            "    cfg.model.hidden_size = 1024\n    cfg.model.num_attention_heads = 16\n"))
    res = run_cli(["check", "recipe.py", "--format", "json"], cwd=project)
    assert not [d for d in json.loads(res.stdout)["diagnostics"] if d["code"] == "MBM704"]
    est = run_cli(["estimate", "recipe.py", "--format", "json"], cwd=project)
    assert est.exit_code == 0, est.stderr
    assert json.loads(est.stdout)["fits"] is True
    if way != "recipe":
        resolved = json.loads(run_cli(["resolve", "recipe.py", "--format", "json"], cwd=project).stdout)
        arch = resolved["recipes"][0]["architecture"]
        assert arch["hf_id"] == UNKNOWN_ID
        assert arch["origin"] == ("hf-cache" if way == "hf-cache" else "pyproject").replace("hf-", "")
        assert arch["path"].endswith("config.json") and arch["bridge"].endswith("LlamaBridge")
