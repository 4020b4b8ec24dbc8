"""A YAML override file on its own (issue 20): checked as a partial config in which everything the
file does not set is unknown, through the CLI and the JSON contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli

ISSUE_EXAMPLE = "model:\n  tensor_parallel_size: 4\n  cpu_offloading: true\n  pipeline_model_parallel_size: 4\n"


def _check(tmp: Path, files: dict[str, str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    for name, text in files.items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    res = run_cli(["check", "--format", "json", *args, *files], cwd=tmp)
    return res.exit_code, list(json.loads(res.stdout)["diagnostics"])


def _codes(diags: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((d["code"], d["line"]) for d in diags)


def test_the_issues_example_fails_with_the_unknown_key_and_the_offloading_combination(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"o.yaml": ISSUE_EXAMPLE})
    assert code == 1
    assert _codes(diags) == [("MBM008", 1), ("MBM205", 4), ("MBM601", 2)]
    by = {d["code"]: d for d in diags}
    assert "did you mean 'tensor_model_parallel_size'" in by["MBM601"]["message"]
    assert "any model provider" in by["MBM601"]["message"]
    fix = by["MBM601"]["fix"]
    assert fix["applicability"] == "unsafe"
    text = ISSUE_EXAMPLE
    (edit,) = fix["edits"]
    assert text[: edit["start"]] + edit["replacement"] + text[edit["end"] :] == ISSUE_EXAMPLE.replace(
        "tensor_parallel_size", "tensor_model_parallel_size")
    assert by["MBM205"]["message"].startswith("cpu_offloading=True with pipeline_model_parallel_size=4")
    assert by["MBM008"]["severity"] == "info" and "# mbmem-lint: recipe=FILE::FUNCTION" in by["MBM008"]["message"]
    assert all(d["function"] is None for d in diags)


def test_what_the_file_does_not_set_is_unknown(tmp_path: Path) -> None:
    """No rule fires on the recipe's values: CUDA graphs + expandable segments set here, but
    NCCL_GRAPH_REGISTER may come from the recipe's env_vars (MBM306 must not fire); TP alone decides
    nothing about SP; defaults of untouched fields are not assumed."""
    code, diags = _check(tmp_path, {"ok.yaml": (
        "model:\n  tensor_model_parallel_size: 4\n  cuda_graph_impl: transformer_engine\n"
        "env_vars:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n"
        "train:\n  micro_batch_size: 1\n")})
    assert code == 0
    assert _codes(diags) == [("MBM008", 1)]


def test_combinations_the_file_decides_alone(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"c.yaml": (
        "model:\n  tensor_model_parallel_size: 1\n  sequence_parallel: true\n"
        "  recompute_granularity: selective\n  recompute_num_layers: 2\n"
        "optimizer:\n  use_distributed_optimizer: false\nddp:\n  use_distributed_optimizer: true\n"
        "env_vars:\n  NCCL_GRAPH_REGISTER: false\n")})
    assert code == 1
    assert _codes(diags) == [("MBM008", 1), ("MBM108", 3), ("MBM202", 5), ("MBM309", 11), ("MBM404", 7)]


def test_value_types_target_classes_and_deletions(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"t.yaml": (
        'model:\n  tensor_model_parallel_size: "4"\n  ~seq_length: null\n'
        "optimizer:\n  _target_: megatron.bridge.peft.lora.LoRA\n  dim: 8\n"
        "mixed_precision:\n  _target_: megatron.bridge.training.mixed_precision.bf16_mixd\n")})
    assert code == 1
    assert _codes(diags) == [("MBM008", 1), ("MBM602", 3), ("MBM605", 2), ("MBM606", 5), ("MBM606", 8)]
    by = {(d["code"], d["line"]): d for d in diags}
    assert by[("MBM605", 2)]["fix"]["edits"][0]["replacement"] == "4"
    assert "did you mean" in by[("MBM606", 8)]["message"] and "bf16_mixed" in by[("MBM606", 8)]["message"]
    assert "LoRA" in by[("MBM606", 5)]["message"] and "OptimizerConfig" in by[("MBM606", 5)]["message"]


def test_union_sections_accept_any_subclass_key(tmp_path: Path) -> None:
    """peft and dataset hold a subclass the recipe picks (LoRA.dim, an SFT dataset's key): not flagged."""
    code, diags = _check(tmp_path, {"p.yaml": "peft:\n  dim: 16\n  alpha: 32\ndataset:\n  dataset_root: /data\n"})
    assert code == 0 and _codes(diags) == [("MBM008", 1)]


def test_a_yaml_file_that_is_not_an_override_is_left_alone(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"ci.yaml": "jobs:\n  build:\n    runs-on: ubuntu-latest\n"})
    assert code == 0 and diags == []


def test_a_named_recipe_that_is_missing_still_checks_the_values(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"m.yaml": "# mbmem-lint: recipe=nowhere.py::f\n" + ISSUE_EXAMPLE})
    assert code == 1
    assert _codes(diags) == [("MBM007", 1), ("MBM205", 5), ("MBM601", 3)]


def test_a_paired_file_is_checked_with_its_recipe_not_alone(tmp_path: Path) -> None:
    recipe = ("from megatron.bridge.recipes.llama import llama3_8b_pretrain_config\n\n\n"
              "def my_8gpu_h100_bf16_config():\n    cfg = llama3_8b_pretrain_config()\n    return cfg\n")
    code, diags = _check(tmp_path, {"r.py": recipe, "o.yaml": "# mbmem-lint: recipe=r.py::*\n" + ISSUE_EXAMPLE})
    assert code == 1
    codes = {d["code"] for d in diags if d["path"] == "o.yaml"}
    assert "MBM008" not in codes and {"MBM601", "MBM205"} <= codes
    assert {d["function"] for d in diags if d["path"] == "o.yaml" and d["code"] == "MBM205"} == {
        "my_8gpu_h100_bf16_config"}


@pytest.mark.parametrize("mode", ["parallel", "cache"])
def test_parallel_and_cached_runs_check_lone_files_too(tmp_path: Path, mode: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "parallel":
        monkeypatch.setenv("MBMEM_LINT_JOBS", "2")
    else:
        (tmp_path / "pyproject.toml").write_text("[tool.mbmem-lint]\ncache = true\n", encoding="utf-8")
        monkeypatch.setenv("MBMEM_LINT_CACHE_DIR", str(tmp_path / ".cache"))
    files = {f"r{i}.py": f"def f{i}():\n    return None\n" for i in range(3)}
    files["conf/o.yaml"] = ISSUE_EXAMPLE
    for _ in range(2):  # the cache: cold, then warm
        code, diags = _check(tmp_path, files)
        assert code == 1
        assert _codes([d for d in diags if d["path"] == "conf/o.yaml"]) == [("MBM008", 1), ("MBM205", 4), ("MBM601", 2)]


def test_open_sections_table_matches_the_schema() -> None:
    from mbmem_lint.resolve.partial import OPEN_SECTIONS, open_sections
    from mbmem_lint.resolve.schema import Schema

    assert open_sections(Schema.load()) == OPEN_SECTIONS


def test_field_types_decide_only_what_the_annotation_says() -> None:
    from mbmem_lint.resolve.field_types import accepts

    assert accepts("int", "4") is False and accepts("int", 4) is True and accepts("int", 4096.5) is False
    assert accepts("int", 10000.0) is None  # an integral float: Bridge's own recipes write rotary_base = 10000.0
    assert accepts("bool", 5) is True and accepts("bool", "yes") is False
    assert accepts("Optional[Literal['full', 'selective']]", 1) is False
    assert accepts("Optional[Literal['full', 'selective']]", "full") is True
    assert accepts("Optional[Literal['full', 'selective']]", None) is True
    assert accepts("str", None) is None  # not Optional, but recipes set None there
    assert accepts("Union[int, List[int]]", [1, 2]) is True and accepts("Union[int, List[int]]", "x") is False
    assert accepts("Optional[Tuple[int, int]]", 512) is None
    assert accepts("torch.dtype", "bf16") is True and accepts("Optional[Callable]", 3) is None


def test_target_names_include_the_first_statement_and_star_imports(tmp_path: Path) -> None:
    # megatron/bridge/perf_recipes/deepseek/__init__.py binds this name in its first statement, and
    # recipes/deepseek/h100/__init__.py gets its recipe names by star-imports: neither lacks the name.
    code, diags = _check(tmp_path, {"t.yaml": (
        "optimizer:\n  _target_: megatron.bridge.perf_recipes.deepseek.deepseek_v3_pretrain_256gpu_b200_bf16_config\n"
        "scheduler:\n  _target_: megatron.bridge.recipes.deepseek.h100.deepseek_v2_lite_pretrain_8gpu_h100_bf16_config\n"
        "mixed_precision:\n  _target_: megatron.bridge.perf_recipes.deepseek.no_such_name\n")})
    assert [(d["code"], d["line"]) for d in diags if d["code"] == "MBM606"] == [("MBM606", 6)]


def test_a_quoted_number_gets_an_unquoting_fix_only_when_yaml_reads_it_as_that_number(tmp_path: Path) -> None:
    code, diags = _check(tmp_path, {"n.yaml": (
        'model:\n  tensor_model_parallel_size: "010"\n  pipeline_model_parallel_size: "1_0"\n'
        '  context_parallel_size: "08"\n')})
    by = {d["line"]: d for d in diags if d["code"] == "MBM605"}
    assert sorted(by) == [2, 3, 4]
    assert by[2]["fix"] is None  # unquoted, YAML 1.1 reads 010 as octal 8, not 10
    assert by[4]["fix"] is None  # unquoted, 08 stays a string in YAML 1.1
    assert by[3]["fix"]["edits"][0]["replacement"] == "1_0"  # YAML and Python both read 10
