"""``mbmem-lint verify`` (issue 18): it refuses clearly without Megatron Bridge, and against a small fake
Megatron Bridge package (real subprocess, real recipe execution) it reports agreement, differences,
unknowns and recipes that fail to build."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from cli_run import run_cli

from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings
from mbmem_lint.verify.compare import classify, same, same_name
from mbmem_lint.verify.run import VerifyError, verify

FAKE_CONFIG = '''\
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class TrainingConfig:
    micro_batch_size: Optional[int] = None
    global_batch_size: Optional[int] = None
    manual_gc: bool = False
    train_iters: Optional[int] = 7  # the real default is None: a difference verify must report


@dataclass
class ConfigContainer:
    train: TrainingConfig = field(default_factory=TrainingConfig)
'''
AUTO_BRIDGE = "class AutoBridge:\n    pass\n"
RECIPE = '''\
from megatron.bridge.training.config import ConfigContainer, TrainingConfig


def good_config() -> ConfigContainer:
    cfg = ConfigContainer(train=TrainingConfig())
    cfg.train.micro_batch_size = 2
    cfg.train.global_batch_size = 16
    cfg.train.manual_gc = True
    return cfg


def broken_config() -> ConfigContainer:
    raise RuntimeError("boom")
'''


def _fake_bridge(site: Path, version: str = "0.6.2") -> Path:
    """A site folder with a tiny ``megatron.bridge`` and its distribution metadata."""
    pkg = site / "megatron" / "bridge"
    for sub in ("training", "models/conversion"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
    for init in ("megatron/bridge", "megatron/bridge/training", "megatron/bridge/models",
                 "megatron/bridge/models/conversion"):
        (site / init / "__init__.py").write_text("")
    (pkg / "training" / "config.py").write_text(FAKE_CONFIG)
    (pkg / "models" / "conversion" / "auto_bridge.py").write_text(AUTO_BRIDGE)
    dist = site / f"megatron_bridge-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: megatron-bridge\nVersion: {version}\n")
    return site


def test_exit_2_when_megatron_bridge_cannot_be_imported(tmp_path: Path) -> None:
    recipe = tmp_path / "r.py"
    recipe.write_text(RECIPE)
    res = run_cli(["verify", f"{recipe}::good_config", "--python", sys.executable])
    assert res.exit_code == 2
    assert "Megatron Bridge cannot be imported by" in res.stderr and "No module named 'megatron'" in res.stderr
    assert "--python" in res.stderr and "Traceback" not in res.output
    res = run_cli(["verify", str(recipe), "--python", str(tmp_path / "no-such-python")])
    assert res.exit_code == 2 and "no such executable" in res.stderr


def test_help_says_it_executes_code() -> None:
    res = run_cli(["verify", "--help"])
    assert res.exit_code == 0 and "EXECUTES the recipe files" in res.stdout
    assert "EXECUTES" in run_cli(["--help"]).stdout  # the command list says so too


def test_against_a_fake_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _fake_bridge(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", str(site))
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_recipes.py").write_text(RECIPE)
    monkeypatch.chdir(project)
    report = verify([("my_recipes.py", None)], Settings(), ResolveOptions(), python=sys.executable, timeout=30)
    assert report.versions["megatron-bridge"] == "0.6.2"
    assert report.bridge is not None and (report.bridge.version, report.bridge.source) == ("0.6.2", "python")
    by_name = {c.function: c for c in report.recipes}
    assert set(by_name) == {"good_config", "broken_config"}
    good = by_name["good_config"]
    assert good.status == "compared"
    # train (the object), micro/global batch, manual_gc agree; train_iters differs
    assert good.counts["agree"] == 4 and good.counts["disagree"] == 1 and good.counts["missing"] == 0
    assert [(d.path, d.real, d.static, d.origin) for d in good.diffs] == [("train.train_iters", 7, None, "default")]
    assert good.model_state["bridge_bytes"] is None and "estimate_training_memory" in good.model_state["bridge_note"]
    broken = by_name["broken_config"]
    assert broken.status == "error" and "RuntimeError: boom" in broken.message  # raises statically and for real
    assert report.agreement() == pytest.approx(4 / 5)

    res = run_cli(["verify", "my_recipes.py::good_config", "--python", sys.executable, "--format", "json"])
    assert res.exit_code == 1  # a field differs
    data = json.loads(res.stdout)
    assert data["megatron_bridge"]["source"] == "python" and data["totals"]["disagree"] == 1
    assert [r["function"] for r in data["recipes"]] == ["good_config"]
    text = run_cli(["verify", "my_recipes.py::good_config", "--python", sys.executable]).stdout
    assert "differs: train.train_iters: real 7, static null" in text


def test_unimportable_recipe_and_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _fake_bridge(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", str(site))
    (tmp_path / "bad.py").write_text(RECIPE.replace("def broken_config", "import no_such_module\n\ndef broken_config"))
    monkeypatch.chdir(tmp_path)
    report = verify([("bad.py", "good_config")], Settings(), ResolveOptions(), python=sys.executable, timeout=30)
    assert [c.status for c in report.recipes] == ["error"]
    assert "no_such_module" in report.recipes[0].message
    res = run_cli(["verify", "nope.py", "--python", sys.executable])
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_verify_error_for_a_broken_interpreter(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 7\n")
    fake.chmod(0o755)
    (tmp_path / "r.py").write_text(RECIPE)
    with pytest.raises(VerifyError, match="failed|cannot"):
        verify([(str(tmp_path / "r.py"), None)], Settings(), ResolveOptions(), python=str(fake), timeout=5)


def test_comparison_rules() -> None:
    assert same(1, 1.0) and not same(True, 1) and not same(1, True) and same([1, [2]], [1, [2]])
    assert not same([1, 2], [1, 2, 3]) and not same("1", 1)
    assert same({"a": [1, 2]}, {"a": [1, 2]}) and not same({"a": 1}, {"b": 1})
    assert same_name("signal.Signals.SIGTERM", "signal.SIGTERM")
    assert not same_name("torch.nn.functional.silu", "torch.nn.functional.gelu")

    class R:
        fields = {"model.x": type("F", (), {"value": 3})(), "model.y": type("F", (), {"value": (1, 2)})(),
                  "comm_overlap.cfg": type("F", (), {"value": {"_target_": "a.B", "_name_": "preset_x"}})()}
        pre_runtime = {"model.x": 2}

    r = cast(Any, R())
    assert classify("model.x", 2, r)[0] == "agree"  # compared before runtime rewrites
    assert classify("model.y", [1, 2], r)[0] == "agree"
    assert classify("model.z", 1, r)[0] == "missing"
    assert classify("model.x", "<opaque Foo>", r)[0] == "opaque"
    assert classify("model.x", 5, r)[:2] == ("disagree", 2)
    # a preset's module-level name is mbmem-lint's annotation: not compared with the real object
    assert classify("comm_overlap.cfg", {"_target_": "a.B"}, r)[0] == "agree"
    assert classify("comm_overlap.cfg", {"_target_": "a.C"}, r)[0] == "disagree"
