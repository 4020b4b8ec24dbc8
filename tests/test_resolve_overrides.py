"""YAML override files and --set dotlists applied to a resolved recipe (issue 2 "YAML overrides"):
pairing (first-line comment, --recipe, [tool.mbmem-lint.recipes]), null, ``???``, ``${...}``,
``_target_``, ``~key``, unknown keys, YAML 1.1 booleans, precedence recipe < YAML < --set."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from mbmem_lint.parse.yaml_overrides import parse_dotlist
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings, load_settings

RECIPE = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.training.config import ConfigContainer


def recipe_config() -> ConfigContainer:
    cfg = llama3_8b_pretrain_config()
    cfg.model.tensor_model_parallel_size = 2
    cfg.train.global_batch_size = 128
    cfg.dataset.seq_length = 8192
    return cfg
"""


def setup_tree(tmp_path: Path, yaml: str, *, name: str = "conf/override.yaml", pyproject: str | None = None) -> None:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    (tmp_path / "recipes" / "llama.py").write_text(RECIPE)
    y = tmp_path / name
    y.parent.mkdir(parents=True, exist_ok=True)
    y.write_text(textwrap.dedent(yaml))
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))


def run(tmp_path: Path, paths: list[str], *, settings: Settings | None = None, sets: list[str] | None = None,
        **opts):
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        if settings is None:
            settings = load_settings(Path(paths[0]))
        set_file = parse_dotlist(sets) if sets else None
        return resolve_paths(paths, settings, ResolveOptions(set_overrides=set_file, **opts))
    finally:
        os.chdir(old)


def with_overrides(result) -> ResolvedRecipe:
    rs = [r for r in result.recipes if r.overrides]
    assert len(rs) == 1, [(r.function, r.overrides) for r in result.recipes]
    return rs[0]


PAIRED = "# mbmem-lint: recipe=../recipes/llama.py::recipe_config\n"


def test_pairing_by_first_line_comment(tmp_path):
    setup_tree(tmp_path, PAIRED + "model:\n  tensor_model_parallel_size: 4\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    f = r.fields["model.tensor_model_parallel_size"]
    assert (f.value, f.origin, f.location.path, f.location.line) == (4, "yaml", "conf/override.yaml", 3)
    assert r.function == "recipe_config" and r.path == "recipes/llama.py"
    assert r.overrides == ["conf/override.yaml"]


def test_pairing_by_recipe_option(tmp_path):
    setup_tree(tmp_path, "train:\n  global_batch_size: 256\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"], recipe_ref="recipes/llama.py::recipe_config"))
    assert r.get("train.global_batch_size") == 256
    assert r.fields["train.global_batch_size"].origin == "yaml"


def test_pairing_by_pyproject_recipes_table(tmp_path):
    setup_tree(tmp_path, "train:\n  global_batch_size: 64\n", pyproject="""\
    [tool.mbmem-lint.recipes]
    "conf/override.yaml" = "recipes/llama.py::recipe_config"
    """)
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("train.global_batch_size") == 64


def test_unpaired_yaml_resolves_nothing(tmp_path):
    setup_tree(tmp_path, "train:\n  global_batch_size: 64\n")
    result = run(tmp_path, ["conf/override.yaml"])
    assert result.recipes == []


def test_recipe_file_and_yaml_together_keep_plain_recipe(tmp_path):
    setup_tree(tmp_path, PAIRED + "train:\n  global_batch_size: 64\n")
    result = run(tmp_path, ["recipes/llama.py", "conf/override.yaml"])
    plain = [r for r in result.recipes if not r.overrides]
    assert plain and plain[0].get("train.global_batch_size") == 128
    assert with_overrides(result).get("train.global_batch_size") == 64


def test_null_missing_and_delete(tmp_path):
    setup_tree(tmp_path, PAIRED + """\
    checkpoint:
      save_interval: null
    train:
      global_batch_size: ???
    ~model:
      tensor_model_parallel_size: 8
    """)
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("checkpoint.save_interval") is None
    assert r.fields["checkpoint.save_interval"].origin == "yaml"
    # ??? keeps the recipe value
    f = r.fields["train.global_batch_size"]
    assert (f.value, f.origin) == (128, "recipe")
    # ~key is a no-op on the dataclass
    assert r.get("model.tensor_model_parallel_size") == 2


def test_delete_single_key_is_noop(tmp_path):
    setup_tree(tmp_path, PAIRED + "model:\n  ~tensor_model_parallel_size: null\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("model.tensor_model_parallel_size") == 2


def test_interpolation(tmp_path):
    setup_tree(tmp_path, PAIRED + """\
    model:
      seq_length: 4096
    dataset:
      seq_length: ${model.seq_length}
    """)
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("dataset.seq_length") == 4096
    assert r.fields["dataset.seq_length"].origin == "yaml"
    assert r.get("model.seq_length") == 4096


def test_interpolation_sees_cli_override(tmp_path):
    setup_tree(tmp_path, PAIRED + "dataset:\n  seq_length: ${model.seq_length}\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"], sets=["model.seq_length=2048"]))
    assert r.get("dataset.seq_length") == 2048


def test_interpolation_forward_reference(tmp_path):
    setup_tree(tmp_path, PAIRED + """\
    dataset:
      seq_length: ${model.seq_length}
    model:
      seq_length: 4096
    """)
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("dataset.seq_length") == 4096


def test_unresolvable_interpolation_is_unknown(tmp_path):
    setup_tree(tmp_path, PAIRED + "train:\n  global_batch_size: ${oc.env:GBS}\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert not r.known("train.global_batch_size")


def test_target_dict_builds_object(tmp_path):
    setup_tree(tmp_path, PAIRED + """\
    peft:
      _target_: megatron.bridge.peft.lora.LoRA
      dim: 16
      alpha: 32
    """)
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.section_class("peft") == "megatron.bridge.peft.lora.LoRA"
    assert r.get("peft.dim") == 16
    assert r.fields["peft.dim"].origin == "yaml"


def test_unknown_key_skipped_and_recorded(tmp_path):
    setup_tree(tmp_path, PAIRED + "model:\n  tensor_model_paralel_size: 8\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("model.tensor_model_parallel_size") == 2
    # not applied: when listed at all, the dead key is unknown (never a value Bridge would use)
    assert not r.known("model.tensor_model_paralel_size")
    bad = [w for w in r.writes if w.path == "model.tensor_model_paralel_size"]
    assert bad and bad[0].valid_field is False and bad[0].origin == "yaml"


def test_unknown_section_skipped(tmp_path):
    setup_tree(tmp_path, PAIRED + "modle:\n  tensor_model_parallel_size: 8\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("model.tensor_model_parallel_size") == 2
    assert any(w.valid_field is False for w in r.writes if w.origin == "yaml")


@pytest.mark.parametrize("word,value", [("yes", True), ("No", False), ("on", True), ("OFF", False),
                                        ("true", True), ("y", "y")])
def test_yaml11_booleans(tmp_path, word, value):
    setup_tree(tmp_path, PAIRED + f"model:\n  sequence_parallel: {word}\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.fields["model.sequence_parallel"].origin in ("yaml", "runtime")
    pre = r.pre_runtime.get("model.sequence_parallel", r.get("model.sequence_parallel"))
    assert pre == value and type(pre) is type(value)


def test_precedence_cli_over_yaml_over_recipe(tmp_path):
    setup_tree(tmp_path, PAIRED + "model:\n  tensor_model_parallel_size: 4\ntrain:\n  global_batch_size: 256\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"], sets=["model.tensor_model_parallel_size=8"]))
    f = r.fields["model.tensor_model_parallel_size"]
    assert (f.value, f.origin) == (8, "cli")
    assert r.fields["train.global_batch_size"].origin == "yaml"
    assert r.fields["dataset.seq_length"].origin == "recipe"
    # the overwritten YAML write is kept in the history
    tp_writes = [w.origin for w in r.writes if w.path == "model.tensor_model_parallel_size"]
    assert tp_writes[-2:] == ["yaml", "cli"]


def test_set_only_without_yaml(tmp_path):
    setup_tree(tmp_path, "x: 1\n")
    result = run(tmp_path, ["recipes/llama.py"], sets=["train.global_batch_size=32", "model.seq_length=1024"])
    (r,) = result.recipes
    assert r.get("train.global_batch_size") == 32
    assert r.fields["train.global_batch_size"].origin == "cli"


def test_yaml_dtype_string_becomes_dtype(tmp_path):
    setup_tree(tmp_path, PAIRED + "mixed_precision: null\nmodel:\n  params_dtype: torch.float32\n")
    r = with_overrides(run(tmp_path, ["conf/override.yaml"]))
    assert r.get("model.params_dtype") == "torch.float32"
