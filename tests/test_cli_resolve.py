"""``mbmem-lint resolve`` (issue 2 "resolve --format json contract"): exact keys, unknowns null and
listed, file paths as given, env vars as ``env_vars.<NAME>``; text output; exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from cli_run import run_cli

from mbmem_lint.resolve.resolved import ORIGINS

ROOT = Path(__file__).resolve().parents[1]
CONSTRUCTS = ROOT / "fixtures" / "resolve" / "constructs"

FIELD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["value", "file", "line", "origin"],
    "properties": {
        "value": {},
        "file": {"type": "string", "minLength": 1},
        "line": {"type": "integer", "minimum": 1},
        "origin": {"enum": list(ORIGINS)},
    },
}
RESOLVE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["recipes"],
    "properties": {
      # additive (issue 18): the Megatron Bridge data the run used, as in `check --format json`
      "megatron_bridge": json.loads((ROOT / "docs" / "json-schema" / "diagnostics.schema.json").read_text())[
          "$defs"]["megatron_bridge"],
      "recipes": {"type": "array", "items": {
        "type": "object",
        "additionalProperties": False,
        # "rewrites" is documented as additive to the contract (report_resolve.py)
        "required": ["file", "function", "line", "fields", "unknown"],
        "properties": {
            "file": {"type": "string"},
            "function": {"type": "string"},
            "line": {"type": "integer", "minimum": 1},
            "fields": {"type": "object", "additionalProperties": FIELD_SCHEMA,
                       "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[^.]+)*$"}},
            "unknown": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "rewrites": {"type": "array", "items": {
                "type": "object", "additionalProperties": False,
                "required": ["path", "old", "new", "reason"],
                "properties": {"path": {"type": "string"}, "old": {}, "new": {},
                               "reason": {"type": "string", "minLength": 1}}}},
            # additive too: where an AutoBridge model's architecture came from, or why it is unknown
            "architecture": {"oneOf": [
                {"type": "null"},
                {"type": "object", "additionalProperties": False,
                 "required": ["hf_id", "origin", "path", "source", "bridge", "provider", "confidence"],
                 "properties": {"hf_id": {"type": "string"},
                                "origin": {"enum": ["bundled", "cache", "pyproject"]},
                                "path": {"type": ["string", "null"]}, "source": {"type": "string"},
                                "bridge": {"type": ["string", "null"]}, "provider": {"type": "string"},
                                "confidence": {"enum": ["exact", "partial"]}}},
                {"type": "object", "additionalProperties": False, "required": ["hf_id", "origin", "reason"],
                 "properties": {"hf_id": {"type": "string"}, "origin": {"const": "unknown"},
                                "reason": {"type": "string"}}},
            ]},
        },
    }}},
}

RECIPE = """\
from megatron.bridge import AutoBridge
from megatron.bridge.recipes.common import _pretrain_common
from megatron.bridge.recipes.utils.environment_utils import COMMON_RECIPE_ENV_VARS
from megatron.bridge.training.config import ConfigContainer


def my_pretrain_8gpu_h100_bf16_config() -> ConfigContainer:
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("acme/unknown-model").to_megatron_provider(load_weights=False)
    cfg.model.tensor_model_parallel_size = 2
    cfg.mixed_precision = "bf16_mixed"
    cfg.ddp.grad_reduce_in_fp32 = False
    cfg.env_vars = {**COMMON_RECIPE_ENV_VARS, "NCCL_DEBUG": "WARN"}
    return cfg
"""


def invoke(args: list[str], cwd: Path):
    return run_cli(args, cwd=cwd)


@pytest.fixture()
def recipe_dir(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "my_recipe.py").write_text(RECIPE)
    return tmp_path


def test_json_contract(recipe_dir):
    res = invoke(["resolve", "sub/my_recipe.py", "--format", "json"], recipe_dir)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    jsonschema.validate(data, RESOLVE_SCHEMA)
    (rec,) = data["recipes"]
    assert set(rec) == {"file", "function", "line", "fields", "unknown", "rewrites", "architecture"}
    assert rec["architecture"]["hf_id"] == "acme/unknown-model" and rec["architecture"]["origin"] == "unknown"
    assert rec["file"] == "sub/my_recipe.py"  # as given, relative
    assert rec["function"] == "my_pretrain_8gpu_h100_bf16_config"
    assert rec["line"] == 7
    for path, f in rec["fields"].items():
        assert set(f) == {"value", "file", "line", "origin"}, path
    # unknown values are null and listed; listed ones are exactly the null-or-partially-unknown ones
    unknown = set(rec["unknown"])
    assert "model.num_layers" in unknown and rec["fields"]["model.num_layers"]["value"] is None
    assert rec["fields"]["model.num_layers"]["origin"] == "model-table"
    assert all(p in rec["fields"] for p in unknown)
    assert rec["unknown"] == sorted(rec["unknown"])
    # known values
    tp = rec["fields"]["model.tensor_model_parallel_size"]
    assert tp == {"value": 2, "file": "sub/my_recipe.py", "line": 10, "origin": "recipe"}
    assert rec["fields"]["ddp.grad_reduce_in_fp32"]["value"] is True
    assert rec["fields"]["ddp.grad_reduce_in_fp32"]["origin"] == "runtime"
    # env vars as env_vars.<NAME>
    assert rec["fields"]["env_vars.NCCL_DEBUG"] == {"value": "WARN", "file": "sub/my_recipe.py", "line": 13,
                                                    "origin": "recipe"}
    assert rec["fields"]["env_vars.PYTORCH_CUDA_ALLOC_CONF"]["origin"] == "library"
    # rewrites carry reasons
    assert any(w["path"] == "ddp.grad_reduce_in_fp32" and w["old"] is False and w["new"] is True
               for w in rec["rewrites"])


def test_json_null_values_are_exactly_unknown(recipe_dir):
    """A field whose value is a known JSON null (e.g. checkpoint.save = None) is not in ``unknown``."""
    data = json.loads(invoke(["resolve", "sub/my_recipe.py", "--format", "json"], recipe_dir).stdout)
    (rec,) = data["recipes"]
    assert rec["fields"]["checkpoint.save"]["value"] is None or "checkpoint.save" in rec["unknown"]
    nulls_known = [p for p, f in rec["fields"].items() if f["value"] is None and p not in rec["unknown"]]
    assert "model.num_layers" not in nulls_known


def test_json_function_selector_and_option(recipe_dir):
    a = invoke(["resolve", "sub/my_recipe.py::my_pretrain_8gpu_h100_bf16_config", "--format", "json"], recipe_dir)
    b = invoke(["resolve", "sub/my_recipe.py", "--function", "my_pretrain_8gpu_h100_bf16_config",
                "--format", "json"], recipe_dir)
    assert a.exit_code == b.exit_code == 0
    assert json.loads(a.stdout) == json.loads(b.stdout)


def test_json_with_set_override(recipe_dir):
    res = invoke(["resolve", "sub/my_recipe.py", "--format", "json", "--set", "train.global_batch_size=96"],
                 recipe_dir)
    (rec,) = json.loads(res.stdout)["recipes"]
    assert rec["fields"]["train.global_batch_size"]["value"] == 96
    assert rec["fields"]["train.global_batch_size"]["origin"] == "cli"


def test_json_fixture_tree_validates():
    res = invoke(["resolve", ".", "--format", "json"], CONSTRUCTS)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    jsonschema.validate(data, RESOLVE_SCHEMA)
    names = {r["function"] for r in data["recipes"]}
    assert {"cross_file_config", "<module>"} <= names
    rec = next(r for r in data["recipes"] if r["function"] == "cross_file_config")
    assert rec["fields"]["model.tensor_model_parallel_size"]["file"] == "myrecipes/helpers/parallel.py"


def test_text_output(recipe_dir):
    res = invoke(["resolve", "sub/my_recipe.py"], recipe_dir)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("sub/my_recipe.py:7 my_pretrain_8gpu_h100_bf16_config\n")
    assert "target: gpu=h100-80gb (recipe-name), world_size=8 (recipe-name)" in out
    assert "model.tensor_model_parallel_size = 2  [recipe sub/my_recipe.py:10]" in out
    assert "ddp.grad_reduce_in_fp32 = True  [runtime" in out and "mixed_precision" in out
    assert "<unknown:" in out
    assert "acme/unknown-model" in out  # the note says why the shape is unknown


def test_missing_path_exit_2(tmp_path):
    res = invoke(["resolve", "nope.py", "--format", "json"], tmp_path)
    assert res.exit_code == 2
    assert "no such file" in res.output


def test_no_recipe_exit_2(tmp_path):
    (tmp_path / "plain.py").write_text("X = 1\n")
    res = invoke(["resolve", "plain.py"], tmp_path)
    assert res.exit_code == 2


def test_bad_set_exit_2(recipe_dir):
    res = invoke(["resolve", "sub/my_recipe.py", "--set", "=oops"], recipe_dir)
    assert res.exit_code == 2


def test_unknown_gpu_exit_2(recipe_dir):
    res = invoke(["resolve", "sub/my_recipe.py", "--gpu", "tpu-v9"], recipe_dir)
    assert res.exit_code == 2


def test_resolve_takes_several_paths_like_check() -> None:
    """``resolve A B FILE::FUNCTION``: the recipes of every path, in the order given; a function
    filter applies to its own path only."""
    good = ROOT / "fixtures" / "recipes" / "good"
    bad = ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py"
    lora = good / "qwen3_8b_lora.py"
    one_lora = json.loads(run_cli(["resolve", str(lora), "--format", "json"]).stdout)["recipes"]
    assert len(one_lora) == 1
    res = run_cli(["resolve", str(good), str(bad), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    recipes = json.loads(res.stdout)["recipes"]
    files = [Path(r["file"]).name for r in recipes]
    assert sorted(set(files)) == sorted([p.name for p in good.glob("*.py")] + [bad.name])
    function = one_lora[0]["function"]
    both = run_cli(["resolve", str(bad), f"{lora}::{function}", "--format", "json"])
    assert both.exit_code == 0, both.stderr
    got = json.loads(both.stdout)["recipes"]
    assert [(Path(r["file"]).name, r["function"]) for r in got][-1] == (lora.name, function)
    assert [Path(r["file"]).name for r in got[:-1]] == [bad.name] * (len(got) - 1)
    assert got[-1]["fields"] == one_lora[0]["fields"]


def test_resolve_with_a_missing_path_among_several_exits_2(tmp_path: Path) -> None:
    res = run_cli(["resolve", str(ROOT / "fixtures" / "recipes" / "good"), str(tmp_path / "nope.py")])
    assert res.exit_code == 2 and "no such file or directory" in res.stderr
