"""Target GPU and world size precedence (issue 2 "Target"): --gpu/--world-size > [tool.mbmem-lint]
per-path ``targets`` > ``gpu``/``world-size`` > recipe name ``_<N>gpu_<gpu>_``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import load_settings

RECIPE = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.training.config import ConfigContainer


def llama3_70b_pretrain_32gpu_h100_bf16_config() -> ConfigContainer:
    return llama3_8b_pretrain_config()


def custom_config() -> ConfigContainer:
    return llama3_8b_pretrain_config()
"""

PYPROJECT_GLOBAL = """\
[tool.mbmem-lint]
gpu = "b200"
world-size = 16
"""

PYPROJECT_PER_PATH = PYPROJECT_GLOBAL + """
[tool.mbmem-lint.targets]
"recipes/gb200/**" = { gpu = "gb200", world-size = 256 }
"""


def targets(tmp_path: Path, *, pyproject: str | None = None, sub: str = "recipes", **opts):
    d = tmp_path / sub
    d.mkdir(parents=True, exist_ok=True)
    (d / "recipe.py").write_text(RECIPE)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        path = f"{sub}/recipe.py"
        run = resolve_paths([path], load_settings(Path(path)), ResolveOptions(**opts))
    finally:
        os.chdir(old)
    return {r.function: r.target for r in run.recipes}


NAMED = "llama3_70b_pretrain_32gpu_h100_bf16_config"



def test_target_from_recipe_name(tmp_path):
    t = targets(tmp_path)
    assert (t[NAMED].gpu, t[NAMED].world_size) == ("h100-80gb", 32)
    assert (t[NAMED].gpu_source, t[NAMED].world_size_source) == ("recipe-name", "recipe-name")
    assert (t["custom_config"].gpu, t["custom_config"].world_size) == (None, None)
    assert t["custom_config"].gpu_source == "default"


def test_pyproject_beats_recipe_name(tmp_path):
    t = targets(tmp_path, pyproject=PYPROJECT_GLOBAL)
    assert (t[NAMED].gpu, t[NAMED].world_size, t[NAMED].gpu_source) == ("b200", 16, "pyproject")
    assert (t["custom_config"].gpu, t["custom_config"].world_size) == ("b200", 16)


def test_per_path_target_beats_global(tmp_path):
    t = targets(tmp_path, pyproject=PYPROJECT_PER_PATH, sub="recipes/gb200")
    assert (t[NAMED].gpu, t[NAMED].world_size) == ("gb200", 256)
    # a path outside the per-path glob falls back to the global keys
    t2 = targets(tmp_path, pyproject=PYPROJECT_PER_PATH, sub="recipes/other")
    assert (t2[NAMED].gpu, t2[NAMED].world_size) == ("b200", 16)


def test_cli_beats_everything(tmp_path):
    t = targets(tmp_path, pyproject=PYPROJECT_PER_PATH, sub="recipes/gb200", gpu="h200", world_size=8)
    assert t[NAMED].gpu.startswith("h200") and t[NAMED].world_size == 8
    assert (t[NAMED].gpu_source, t[NAMED].world_size_source) == ("cli", "cli")


def test_cli_gpu_only_keeps_world_size_from_name(tmp_path):
    t = targets(tmp_path, gpu="a100-40gb")
    assert t[NAMED].gpu == "a100-40gb" and t[NAMED].gpu_source == "cli"
    assert (t[NAMED].world_size, t[NAMED].world_size_source) == (32, "recipe-name")


@pytest.mark.parametrize("name,expected", [
    ("deepseek_v3_pretrain_256gpu_gb200_fp8mx_config", (256, "gb200")),
    ("qwen3_8b_sft_8gpu_b300_bf16_config", (8, "b300")),
    ("llama3_8b_pretrain_config", None),
])
def test_recipe_name_regex(name, expected):
    from mbmem_lint.resolve.target import RECIPE_NAME_RE

    m = RECIPE_NAME_RE.search(name)
    assert (None if m is None else (int(m.group(1)), m.group(2))) == expected


def test_world_size_drives_data_parallel_rewrites(tmp_path):
    """The name's world size is used by the runtime (comm-overlap DP overlap needs DP)."""
    (tmp_path / "r.py").write_text(textwrap.dedent("""\
        from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
        from megatron.bridge.training.comm_overlap import CommOverlapConfig
        from megatron.bridge.training.config import ConfigContainer


        def x_pretrain_8gpu_h100_bf16_config() -> ConfigContainer:
            cfg = llama3_8b_pretrain_config()
            cfg.model.tensor_model_parallel_size = 2
            cfg.model.pipeline_model_parallel_size = 1
            cfg.model.context_parallel_size = 1
            cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
            return cfg
        """))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run = resolve_paths(["r.py"], load_settings(Path("r.py")), ResolveOptions())
    finally:
        os.chdir(old)
    (r,) = run.recipes
    assert r.target.world_size == 8
    assert r.get("ddp.bucket_size") == 128 * 1024 * 1024  # DP = 4 > 1
