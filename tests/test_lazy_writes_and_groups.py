"""Speed-oriented views must say exactly what the plain ones say: per-path writes and non-field
writes equal the filtered full write list; parallel file groups keep related files together."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mbmem_lint.parallel import affinity_key, plan_groups
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.flatten import LazyWrites, collect_writes
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings, safe_resolve
from mbmem_lint.sources import SourceFile

ROOT = Path(__file__).resolve().parents[1]

TYPO_RECIPE = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config


def typo_8gpu_h100_config():
    cfg = llama3_8b_pretrain_config()
    cfg.model.tensor_model_paralel_size = 2
    cfg.env_vars = {"NCCL_DEBUG": "WARN"}
    cfg.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    cfg.train.micro_batch_size = 2
    cfg.train.micro_batch_size = 1
    return cfg
"""


def _recipes(paths: list[str]) -> list[ResolvedRecipe]:
    return resolve_paths(paths, Settings(), ResolveOptions()).recipes


def _assert_views_agree(recipe: ResolvedRecipe) -> None:
    lazy = recipe.writes
    assert isinstance(lazy, LazyWrites) and lazy._root is not None
    full = collect_writes(lazy._root)
    fresh = LazyWrites(lazy._root)  # the index answers before anything was collected
    for path in {w.path for w in full} | {"model.no_such_field", "env_vars.NOT_SET", "train"}:
        assert fresh.for_path(path) == [w for w in full if w.path == path], path
    assert fresh.invalid() == [w for w in full if not w.valid_field]
    assert [w.seq for w in full] == sorted(w.seq for w in full)
    # After the full list was collected, the same answers from it.
    assert list(lazy) == full
    for path in {w.path for w in full}:
        assert lazy.for_path(path) == [w for w in full if w.path == path]
    assert lazy.invalid() == [w for w in full if not w.valid_field]


def test_per_path_writes_equal_the_full_list(tmp_path: Path) -> None:
    (tmp_path / "typo.py").write_text(TYPO_RECIPE, encoding="utf-8")
    fixtures = sorted(str(p) for p in (ROOT / "fixtures" / "recipes").rglob("*.py"))
    recipes = _recipes([*fixtures, str(tmp_path / "typo.py")])
    assert len(recipes) >= 6
    typo = next(r for r in recipes if r.function == "typo_8gpu_h100_config")
    assert [w.path for w in typo.writes.invalid()] == ["model.tensor_model_paralel_size"]  # type: ignore[attr-defined]
    assert [w.value for w in typo.writes.for_path("train.micro_batch_size")][-2:] == [2, 1]  # type: ignore[attr-defined]
    assert typo.writes.for_path("env_vars.CUDA_DEVICE_MAX_CONNECTIONS")[-1].value == "1"  # type: ignore[attr-defined]
    for r in recipes:
        _assert_views_agree(r)


@pytest.mark.corpus
def test_per_path_writes_equal_the_full_list_on_corpus() -> None:
    from mbmem_lint.dev.corpus import ensure_corpus

    bridge = ensure_corpus() / "megatron" / "bridge"
    recipes = _recipes([str(bridge / "perf_recipes" / "deepseek"), str(bridge / "recipes" / "nemotronh")])
    assert len(recipes) > 40
    for r in recipes:
        _assert_views_agree(r)


def _src(path: str, size: int) -> SourceFile:
    return SourceFile(path, "x" * size, "python")


def test_affinity_key_puts_a_perf_recipe_with_the_library_family() -> None:
    assert affinity_key(("recipes", "llama", "llama3.py")) == "llama"
    assert affinity_key(("perf_recipes", "llama", "h100", "llama3.py")) == "llama"
    assert affinity_key(("recipes", "__init__.py")) == "recipes"
    assert affinity_key(("alone.py",)) == "alone.py"


def test_groups_largest_first_and_big_families_split() -> None:
    files = [_src("/r/recipes/llama/llama3.py", 400), _src("/r/perf_recipes/llama/h100/llama3.py", 300),
             _src("/r/recipes/qwen/qwen3.py", 100), _src("/r/recipes/qwen/qwen2.py", 100),
             _src("/r/recipes/__init__.py", 10)]
    groups = plan_groups(files, jobs=1)  # fair share = half the bytes: nothing is split
    assert groups[0] == ["/r/perf_recipes/llama/h100/llama3.py", "/r/recipes/llama/llama3.py"]
    assert groups[1] == ["/r/recipes/qwen/qwen2.py", "/r/recipes/qwen/qwen3.py"]
    assert groups[2] == ["/r/recipes/__init__.py"]
    split = plan_groups(files, jobs=4)  # fair share 114 bytes: the llama family is split in two
    assert sorted(p for g in split for p in g) == sorted(f.path for f in files)
    assert ["/r/perf_recipes/llama/h100/llama3.py"] in split and ["/r/recipes/llama/llama3.py"] in split


def test_safe_resolve_memo_follows_the_working_folder(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = os.getcwd()
    try:
        os.chdir(tmp_path / "a")
        in_a = safe_resolve("recipe.py")
        os.chdir(tmp_path / "b")
        in_b = safe_resolve("recipe.py")
    finally:
        os.chdir(old)
    assert in_a == (tmp_path / "a" / "recipe.py").resolve()
    assert in_b == (tmp_path / "b" / "recipe.py").resolve()


def test_import_only_package_init_is_not_executed(tmp_path: Path) -> None:
    """Resolving a re-exporting ``__init__`` (no recipe of its own) must not lower the package."""
    from mbmem_lint.discover.files import read_source
    from mbmem_lint.resolve.resolver import Resolver

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__all__ = ["big_config"]\nfrom .big import *\nimport os\n', encoding="utf-8")
    (pkg / "big.py").write_text(TYPO_RECIPE.replace("typo_8gpu_h100_config", "big_config"), encoding="utf-8")
    srcs = [read_source(str(pkg / "__init__.py"), "python"), read_source(str(pkg / "big.py"), "python")]
    assert all(isinstance(s, SourceFile) for s in srcs)
    resolver = Resolver(Settings())
    envs = resolver.register(srcs, own={str(pkg / "__init__.py")})  # type: ignore[arg-type]
    seen: list[tuple[str, int]] = []
    resolver.resolve_modules(envs, lambda path, recipes: seen.append((path, len(recipes))))
    assert seen == [(str(pkg / "__init__.py"), 0)]
    big = resolver._modules[str(pkg / "big.py")]
    assert not big.loaded  # never imported, never lowered
    # The package's own module still resolves when it is linted itself.
    resolver.resolve_modules([resolver.adopt(srcs[1])], lambda path, recipes: seen.append((path, len(recipes))))  # type: ignore[arg-type,list-item]
    assert seen[-1] == (str(pkg / "big.py"), 1)


def test_groups_accept_relative_and_absolute_paths_together(tmp_path: Path) -> None:
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        files = [_src("recipes/llama/llama3.py", 10), _src(str(tmp_path / "perf_recipes/llama/h100/llama3.py"), 10)]
        groups = plan_groups(files, jobs=2)
    finally:
        os.chdir(old)
    assert sorted(p for g in groups for p in g) == sorted(f.path for f in files)
