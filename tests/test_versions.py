"""Which Megatron Bridge a run lints against (issue 18): version parsing and ordering, the selection
order, installed-distribution metadata, nearest older release, per-release unknown fields, source trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mbmem_lint.pipeline import lint_source_run, run_check
from mbmem_lint.resolve import versions
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.resolve.versions import (
    SHIPPED,
    VersionError,
    installed_version,
    nearest_shipped,
    parse_version,
    select,
    shipped_versions,
)
from mbmem_lint.settings import Settings, SettingsError, parse_settings


def test_shipped_releases_match_the_table() -> None:
    assert shipped_versions() == ["0.4.2", "0.5.1", "0.6.2"] == list(SHIPPED)
    for v in shipped_versions():
        assert versions.shipped(v, "option").megatron_core == SHIPPED[v]
    assert SHIPPED == {"0.4.2": "0.17.1", "0.5.1": "0.18.2", "0.6.2": "0.19.2"}  # docs/versions.md


@pytest.mark.parametrize("older,newer", [
    ("0.5.1", "0.6.2"), ("0.6.2", "0.10.0"), ("0.7.0.dev0", "0.7.0rc1"), ("0.7.0rc1", "0.7.0"),
    ("0.7.0a1", "0.7.0b1"), ("0.7.0", "0.7.0.post1"), ("0.6", "0.6.1"), ("0.7.0rc0.dev5", "0.7.0rc0"),
])
def test_version_order(older: str, newer: str) -> None:
    assert parse_version(older) < parse_version(newer)


def test_version_equalities_and_garbage() -> None:
    assert parse_version("0.6.2+nv25.09") == parse_version("0.6.2") == parse_version("v0.6.2")
    assert parse_version("0.6") == parse_version("0.6.0")
    for bad in ("", "latest", "0.6.x", "1..2", "0.6.2; rm -rf /"):
        with pytest.raises(VersionError):
            parse_version(bad)


@pytest.mark.parametrize("asked,used", [
    ("0.6.2", "0.6.2"), ("0.5.1", "0.5.1"), ("0.4.2", "0.4.2"),
    ("0.5.3", "0.5.1"),  # a newer patch without data: the nearest older release
    ("0.6.0", "0.5.1"), ("0.6.2rc1", "0.5.1"),  # pre-releases come before their release
    ("0.7.0.dev0", "0.6.2"), ("1.0.0", "0.6.2"), ("0.6.2+nv25.09", "0.6.2"),
    ("0.3.0", "0.4.2"),  # older than every shipped release: the oldest
])
def test_nearest_shipped(asked: str, used: str) -> None:
    assert nearest_shipped(asked) == used


def test_notice_only_when_another_release_is_used() -> None:
    exact = versions.for_version("0.5.1", "settings")
    assert exact.notice() is None and exact.to_json() == {
        "version": "0.5.1", "megatron_core": "0.18.2", "source": "settings", "data": "shipped"}
    near = versions.for_version("0.5.3", "option")
    notice = near.notice()
    assert notice is not None and "0.5.3" in notice and "0.5.1" in notice and "nearest older" in notice
    assert near.to_json()["requested"] == "0.5.3" and near.to_json()["notice"] == notice
    oldest = versions.for_version("0.2.0", "installed")
    assert "oldest" in (oldest.notice() or "") and "installed" in (oldest.notice() or "")


def _fake_site(root: Path, version: str, *, folder_only: bool = False) -> Path:
    """A site-packages folder holding only a megatron-bridge distribution's metadata (no code)."""
    dist = root / f"megatron_bridge-{version}.dist-info"
    dist.mkdir(parents=True)
    if not folder_only:
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: megatron-bridge\nVersion: {version}\nSummary: x\n\nVersion: 9.9.9 (body)\n")
    return root


def test_installed_distribution_metadata_is_read(tmp_path: Path) -> None:
    site = _fake_site(tmp_path / "site", "0.5.1")
    assert installed_version([str(tmp_path / "nowhere"), str(site)]) == "0.5.1"
    assert installed_version([str(tmp_path / "nowhere")]) is None
    egg = tmp_path / "egg"
    (egg / "megatron_bridge-0.4.2-py3.12.egg-info").mkdir(parents=True)
    (egg / "megatron_bridge-0.4.2-py3.12.egg-info" / "PKG-INFO").write_text("Name: megatron-bridge\nVersion: 0.4.2\n")
    assert installed_version([str(egg), str(site)]) == "0.4.2"  # the first path entry wins, as for imports
    bare = _fake_site(tmp_path / "bare", "0.6.2", folder_only=True)
    assert installed_version([str(bare)]) == "0.6.2"  # METADATA unreadable: the folder name
    other = tmp_path / "other"
    (other / "megatron_core-0.19.2.dist-info").mkdir(parents=True)
    assert installed_version([str(other)]) is None


def test_a_fake_installed_distribution_selects_its_version(tmp_path: Path) -> None:
    site = [str(_fake_site(tmp_path / "site", "0.5.1"))]
    data = select(search_path=site)
    assert (data.version, data.source, data.megatron_core) == ("0.5.1", "installed", "0.18.2")
    data = select(search_path=[str(_fake_site(tmp_path / "site2", "0.4.9"))])
    assert (data.version, data.requested, data.source) == ("0.4.2", "0.4.9", "installed")
    assert data.notice() is not None and "installed megatron-bridge" in (data.notice() or "")
    garbage = tmp_path / "garbage"
    (garbage / "megatron_bridge-main.dist-info").mkdir(parents=True)
    assert select(search_path=[str(garbage)]).source == "default"  # not a version: ignored


def test_selection_order(tmp_path: Path) -> None:
    site = [str(_fake_site(tmp_path / "site", "0.5.1"))]
    # command line > settings > installed > newest shipped
    assert select("0.4.2", None, "0.6.2", search_path=site).version == "0.4.2"
    assert select("0.4.2", None, "0.6.2", search_path=site).source == "option"
    assert select(None, None, "0.6.2", search_path=site).source == "settings"
    assert select(None, None, "0.4.2", search_path=site).version == "0.4.2"
    assert select(search_path=site).source == "installed"
    newest = select(search_path=[str(tmp_path / "empty")])
    assert (newest.version, newest.source, newest.notice()) == ("0.6.2", "default", None)
    with pytest.raises(VersionError):
        select("not-a-version", search_path=site)


def test_settings_key_is_validated() -> None:
    s = parse_settings({"megatron-bridge-version": "0.5.1", "megatron-bridge-src": "../bridge"}, Path("/r"))
    assert s.megatron_bridge_version == "0.5.1" and s.megatron_bridge_src == "../bridge"
    for bad in ({"megatron-bridge-version": "five"}, {"megatron-bridge-version": 5}, {"megatron-bridge-src": ""}):
        with pytest.raises(SettingsError):
            parse_settings(bad, None)


NUM_EPOCHS = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config

def my_config():
    cfg = llama3_8b_pretrain_config()
    cfg.train.num_epochs = 2
    return cfg
"""
NESTEROV = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config

def my_config():
    cfg = llama3_8b_pretrain_config()
    cfg.optimizer.muon_use_nesterov = True
    return cfg
"""


def _unknown_fields(text: str, version: str) -> list[list[str]]:
    run = lint_source_run(text, settings=Settings(megatron_bridge_version=version))
    assert run.bridge is not None and run.bridge.version == version
    assert not [d for d in run.diagnostics if d.code.startswith("MBM0")], run.diagnostics
    return [d.fields for d in run.diagnostics if d.code == "MBM601"]


def test_a_field_added_in_0_6_is_unknown_under_0_5() -> None:
    """TrainingConfig.num_epochs appeared in Bridge 0.6 (training/config.py)."""
    assert _unknown_fields(NUM_EPOCHS, "0.5.1") == [["train.num_epochs"]]
    assert _unknown_fields(NUM_EPOCHS, "0.6.2") == []


def test_a_field_removed_later_is_fine_under_the_release_that_has_it() -> None:
    """OptimizerConfig.muon_use_nesterov is a field of MCore 0.17 (Bridge 0.4.2's), gone in 0.18."""
    assert _unknown_fields(NESTEROV, "0.4.2") == []
    assert _unknown_fields(NESTEROV, "0.5.1") == [["optimizer.muon_use_nesterov"]]
    assert _unknown_fields(NESTEROV, "0.6.2") == [["optimizer.muon_use_nesterov"]]


def test_option_wins_over_settings_in_a_run(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text(NUM_EPOCHS)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run = run_check(["r.py"], Settings(megatron_bridge_version="0.6.2"),
                        ResolveOptions(megatron_bridge_version="0.5.1"))
    finally:
        os.chdir(old)
    assert run.bridge is not None and (run.bridge.version, run.bridge.source) == ("0.5.1", "option")
    assert [d.fields for d in run.diagnostics if d.code == "MBM601"] == [["train.num_epochs"]]


def _tiny_tree(root: Path, version: tuple[int, int, int] = (0, 7, 0), extra: str = "") -> Path:
    """A Megatron-Bridge checkout layout (src/megatron/bridge + 3rdparty/Megatron-LM/megatron/core)."""
    bridge = root / "src" / "megatron" / "bridge"
    (bridge / "training").mkdir(parents=True)
    (bridge / "recipes").mkdir()
    (bridge / "__init__.py").write_text("")
    (bridge / "recipes" / "__init__.py").write_text("")
    (bridge / "package_info.py").write_text(
        f"MAJOR = {version[0]}\nMINOR = {version[1]}\nPATCH = {version[2]}\nPRE_RELEASE = 'rc0'\n")
    (bridge / "training" / "__init__.py").write_text("")
    (bridge / "training" / "config.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from megatron.core.transformer_config import TransformerConfig\n"
        "@dataclass\nclass TrainingConfig:\n    micro_batch_size: int = 1\n" + extra +
        "@dataclass\nclass ConfigContainer:\n"
        "    train: TrainingConfig = field(default_factory=TrainingConfig)\n"
        "    model: TransformerConfig = field(default_factory=TransformerConfig)\n")
    (bridge / "recipes" / "mine.py").write_text(
        "from megatron.bridge.training.config import ConfigContainer\n"
        "def mine_config() -> ConfigContainer:\n    cfg = ConfigContainer()\n    cfg.train.micro_batch_size = 2\n"
        "    return cfg\n")
    core = root / "3rdparty" / "Megatron-LM" / "megatron" / "core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "package_info.py").write_text("MAJOR = 0\nMINOR = 20\nPATCH = 0\n")
    (core / "transformer_config.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass TransformerConfig:\n    num_layers: int = 0\n"
        "    tensor_model_parallel_size: int = 1\n")
    return root


def test_source_tree_is_built_and_cached_by_content(tmp_path: Path) -> None:
    from mbmem_lint.resolve.bridge_src import build_from_source
    from mbmem_lint.resolve.schema import Schema

    tree = _tiny_tree(tmp_path / "checkout")
    cache = tmp_path / "cache"
    data = build_from_source(tree, "option-src", cache)
    assert (data.version, data.megatron_core, data.src, data.shipped) == ("0.7.0rc0", "0.20.0", str(tree), False)
    assert data.to_json()["data"] == "source-tree" and data.key.startswith("src:")
    assert data.at_least("0.7.0") and not data.at_least("0.7.1")
    with versions.using(data):
        schema = Schema.load()
        train = schema.section_class("train")
        assert train is not None and set(train.fields) == {"micro_batch_size"}
        model = schema.section_class("model")
        assert model is not None and model.qualname == "megatron.core.transformer_config.TransformerConfig"
    again = build_from_source(tree, "option-src", cache)
    assert again == data  # unchanged tree: the same data, not rebuilt
    built = sorted(p.name for p in cache.iterdir() if p.name != "stat-index")
    assert built == [data.key[4:]]
    config = tree / "src" / "megatron" / "bridge" / "training" / "config.py"
    config.write_text(config.read_text().replace("micro_batch_size: int = 1\n",
                                                 "micro_batch_size: int = 1\n    num_epochs: int = 0\n"))
    changed = build_from_source(tree, "option-src", cache)
    assert changed.key != data.key
    with versions.using(changed):
        train = Schema.load().section_class("train")
        assert train is not None and "num_epochs" in train.fields
    os.utime(config, ns=(1, 1))  # only the time changed: the content key is the same
    config.write_text(config.read_text())
    assert build_from_source(tree, "option-src", cache).key == changed.key


def test_source_tree_errors(tmp_path: Path) -> None:
    from mbmem_lint.resolve.bridge_src import build_from_source

    with pytest.raises(VersionError, match="no such folder"):
        build_from_source(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VersionError, match="no megatron/bridge"):
        build_from_source(tmp_path / "empty")


def test_source_tree_lint_run_uses_its_fields(tmp_path: Path) -> None:
    tree = _tiny_tree(tmp_path / "checkout")
    recipe = tmp_path / "proj" / "r.py"
    recipe.parent.mkdir()
    recipe.write_text("from megatron.bridge.recipes.mine import mine_config\n\ndef r_config():\n"
                      "    cfg = mine_config()\n    cfg.train.global_batch_size = 8\n    return cfg\n")
    settings = Settings(root=recipe.parent, megatron_bridge_src=str(tree))
    old = os.getcwd()
    os.chdir(recipe.parent)
    try:
        run = run_check(["r.py"], settings, ResolveOptions())
    finally:
        os.chdir(old)
    assert run.bridge is not None and run.bridge.source == "settings-src" and run.bridge.version == "0.7.0rc0"
    assert (recipe.parent / ".cache" / "mbmem-lint" / "bridge-src").is_dir()  # cached beside the project
    assert [d.fields for d in run.diagnostics if d.code == "MBM601"] == [["train.global_batch_size"]]


@pytest.mark.corpus
@pytest.mark.parametrize("version", ["0.5.1"])
def test_source_tree_of_an_unpacked_wheel_equals_the_shipped_data(version: str, tmp_path: Path) -> None:
    """--megatron-bridge-src on the unpacked 0.5.1 wheels builds exactly the shipped 0.5.1 section, and
    a lint of that release's recipes gives the same findings either way."""
    from mbmem_lint.data import data_file
    from mbmem_lint.data_pack import open_pack
    from mbmem_lint.dev.corpus import ensure_corpus, recipe_files
    from mbmem_lint.resolve.bridge_src import build_from_source

    corpus = ensure_corpus(version=version)
    built = build_from_source(corpus, "option-src", tmp_path / "cache")
    assert (built.version, built.megatron_core) == (version, SHIPPED[version])
    for name in ("schema.pack", "library.pack"):
        shipped = open_pack(data_file(name).read_bytes(), version)
        fresh = open_pack((Path(built.folder or "") / name).read_bytes())
        assert fresh.meta == shipped.meta and fresh.to_dict() == shipped.to_dict(), name
    files = [str(p) for p in recipe_files(corpus)][:12]
    by_src = run_check(files, Settings(), ResolveOptions(megatron_bridge_src=str(corpus)), need_edits=False)
    by_version = run_check(files, Settings(), ResolveOptions(megatron_bridge_version=version), need_edits=False)
    key = [(d.code, d.location.path, d.location.line, d.message) for d in by_src.diagnostics]
    assert key == [(d.code, d.location.path, d.location.line, d.message) for d in by_version.diagnostics]
    assert len(key) > 10


MAMBA_ENV = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.models.mamba.mamba_provider import MambaModelProvider

def my_config():
    cfg = llama3_8b_pretrain_config()
    cfg.model = MambaModelProvider(num_layers=8, hidden_size=256, num_attention_heads=4,
                                   pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
    cfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:true"}
    return cfg
"""


@pytest.mark.parametrize("version", ["0.4.2", "0.5.1", "0.6.2"])
def test_rules_follow_the_release(version: str) -> None:
    """cfg.env_vars is a ConfigContainer field from 0.6: before, assigning it is an unknown field and
    the allocator rules do not judge a value PyTorch never sees. The Mamba provider (the Hybrid
    provider's name before 0.6) rejects VPP in every release."""
    codes = {d.code: d for d in lint_source_run(MAMBA_ENV, settings=Settings(megatron_bridge_version=version)).diagnostics}
    assert "MBM104" in codes and "MambaModelProvider" in codes["MBM104"].message
    if version == "0.6.2":
        assert "MBM310" in codes and "MBM601" not in codes
    else:
        assert "MBM310" not in codes and codes["MBM601"].fields == ["env_vars"]


@pytest.mark.parametrize("version,impl", [("0.4.2", "local"), ("0.5.1", "full_iteration"), ("0.6.2", "full_iteration")])
def test_full_iteration_fix_follows_the_release(version: str, impl: str) -> None:
    """MCore 0.17 (Bridge 0.4) has no cuda_graph_impl='full_iteration': the MBM302 fix sets 'local'."""
    src = ("from megatron.bridge.recipes.llama import llama3_8b_pretrain_config\n\ndef my_config():\n"
           "    cfg = llama3_8b_pretrain_config()\n    cfg.model.cuda_graph_scope = ['full_iteration']\n    return cfg\n")
    hits = [d for d in lint_source_run(src, settings=Settings(megatron_bridge_version=version)).diagnostics
            if d.code == "MBM302"]
    assert len(hits) == 1 and hits[0].fix is not None
    assert hits[0].fix.description.startswith(f"set cuda_graph_impl={impl!r}")
    edits = hits[0].fix.edits
    assert edits and f'"{impl}"' in "".join(e.replacement for e in edits)


def test_core_pairing_import_resolution(tmp_path: Path) -> None:
    """Imports resolve through definitions, submodules, re-exports and ``import *`` chains; guarded
    imports are marked."""
    from mbmem_lint.dev.core_pairing import CoreIndex, core_imports, unresolved

    core = tmp_path / "core" / "megatron" / "core"
    (core / "models" / "hybrid").mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "models" / "__init__.py").write_text("")
    (core / "models" / "hybrid" / "__init__.py").write_text("")
    (core / "models" / "hybrid" / "specs.py").write_text("stack_spec = 1\nclass Layer: ...\n")
    (core / "models" / "mamba_specs.py").write_text("# moved\nfrom .hybrid.specs import *  # noqa\n")
    (core / "config.py").write_text("try:\n    import te\n    HAVE_TE = True\nexcept ImportError:\n    HAVE_TE = False\n"
                                    "def f(): ...\nX: int = 1\n")
    bridge = tmp_path / "bridge" / "megatron" / "bridge"
    bridge.mkdir(parents=True)
    (bridge / "a.py").write_text(
        "from megatron.core.models.mamba_specs import stack_spec, Layer\n"
        "from megatron.core.config import f, X, HAVE_TE, gone\n"
        "from megatron.core import models\n"
        "import megatron.core.config\n"
        "try:\n    from megatron.core.missing import thing\nexcept ImportError:\n    thing = None\n"
        "from os import path\n")
    imports = core_imports(tmp_path / "bridge")
    assert len(imports) == 9 and [i.guarded for i in imports].count(True) == 1
    miss = unresolved(imports, CoreIndex(tmp_path / "core"))
    assert [(i.module, i.name, i.guarded) for i in miss] == [
        ("megatron.core.config", "gone", False), ("megatron.core.missing", "thing", True)]


def test_results_cache_keys_on_the_data_in_use(tmp_path: Path) -> None:
    """Cached findings made against one release are not served to a run against another (the installed
    distribution can change between runs with the same settings and options)."""
    from mbmem_lint.results_cache import ResultsCache

    settings, options = Settings(root=tmp_path), ResolveOptions()
    with versions.using(versions.shipped("0.5.1", "installed")):
        old = ResultsCache.for_run(settings, options).context
    with versions.using(versions.shipped("0.6.2", "installed")):
        new = ResultsCache.for_run(settings, options).context
        assert ResultsCache.for_run(settings, options).context == new
    assert old != new
