"""``check --base`` / ``estimate --base`` in a real temporary git repository (no mocks of git)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

RECIPE = '''from megatron.bridge.recipes.llama import llama32_1b_pretrain_config


def small_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.train.micro_batch_size = {mbs}
    cfg.model.recompute_granularity = {gran}
    cfg.model.recompute_method = {method}
    cfg.model.recompute_num_layers = {layers}
    return cfg


def other_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.train.micro_batch_size = 1
    return cfg
'''
FULL = {"mbs": 2, "gran": '"full"', "method": '"uniform"', "layers": 1}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "recipes").mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "pyproject.toml").write_text("[tool.mbmem-lint]\nselect = ['MBM703']\n")
    (root / "recipes" / "small.py").write_text(RECIPE.format(**FULL))
    (root / "README.md").write_text("docs\n")
    _commit(root, "base")
    return root


def _regressions(out: str) -> list[dict[str, Any]]:
    return [d for d in json.loads(out)["diagnostics"] if "memory-regression" in d["name"]]


def test_raising_mbs_is_reported_on_its_line(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**{**FULL, "mbs": 8}))
    _commit(repo, "raise MBS")
    res = run_cli(["check", "recipes", "--base", base, "--format", "json"], cwd=repo)
    code, out, err = res.exit_code, res.stdout, res.stderr
    assert code == 1, err
    regs = _regressions(out)
    assert len(regs) == 1, regs
    d = regs[0]
    assert d["function"] == "small_pretrain_8gpu_h100_bf16_config"
    assert d["line"] == 6 and d["path"].endswith("recipes/small.py")  # cfg.train.micro_batch_size = 8
    assert "memory" in d["fields"] and "train.micro_batch_size" in d["fields"]
    # Both peaks are named, and the base revision.
    assert d["message"].count(" GiB per rank") == 1 and d["message"].count(" GiB at ") == 1
    assert base[:7] in d["message"] and "2 -> 8" in d["message"]


def test_dropping_recompute_is_reported_on_the_recipe(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    text = RECIPE.format(**FULL).replace(
        '    cfg.model.recompute_granularity = "full"\n    cfg.model.recompute_method = "uniform"\n'
        "    cfg.model.recompute_num_layers = 1\n", "")
    (repo / "recipes" / "small.py").write_text(text)
    _commit(repo, "drop recompute")
    res = run_cli(["check", "recipes", "--base", base, "--format", "json"], cwd=repo)
    code, out, err = res.exit_code, res.stdout, res.stderr
    assert code == 1, err
    regs = _regressions(out)
    assert [d["function"] for d in regs] == ["small_pretrain_8gpu_h100_bf16_config"]
    # The lines are gone: the finding sits where the value now comes from (the library recipe call).
    assert regs[0]["line"] == 5
    assert "model.recompute_granularity" in regs[0]["message"] and "'full' -> None" in regs[0]["message"]


def test_unrelated_commit_reports_nothing(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("more docs\n")
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**FULL).replace("    return cfg\n", "    # tidy\n    return cfg\n", 1))
    _commit(repo, "unrelated")
    res = run_cli(["check", "recipes", "--base", base, "--format", "json"], cwd=repo)
    code, out, err = res.exit_code, res.stdout, res.stderr
    assert code == 0, (out, err)
    assert _regressions(out) == []


def test_working_tree_change_against_head(repo: Path) -> None:
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**{**FULL, "mbs": 8}))  # not committed
    res = run_cli(["check", "recipes", "--base", "HEAD", "--format", "json"], cwd=repo)
    code, out = res.exit_code, res.stdout
    assert code == 1 and len(_regressions(out)) == 1
    assert _git(repo, "status", "--porcelain").strip() == "M recipes/small.py"  # nothing else touched


def test_missing_revision_exits_2(repo: Path) -> None:
    res = run_cli(["check", "recipes", "--base", "no-such-branch"], cwd=repo)
    code, err = res.exit_code, res.stderr
    assert code == 2
    assert "unknown revision 'no-such-branch'" in err and "Traceback" not in err


def test_not_a_repository_exits_2(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text(RECIPE.format(**FULL))
    res = run_cli(["check", "r.py", "--base", "HEAD"], cwd=tmp_path)
    code, err = res.exit_code, res.stderr
    assert code == 2 and "not inside a git repository" in err


def test_summary_has_before_after_table(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**{**FULL, "mbs": 8}))
    _commit(repo, "raise MBS")
    res = run_cli(["check", "recipes", "--base", base, "--format", "markdown"], cwd=repo)
    code, out = res.exit_code, res.stdout
    assert code == 1
    assert "### Peak memory against the base revision" in out
    row = next(line for line in out.splitlines() if line.startswith("| `recipes/small.py::small_pretrain"))
    assert "🔺 +" in row
    other = next(line for line in out.splitlines() if line.startswith("| `recipes/small.py::other_pretrain"))
    assert other.endswith("| +0.0% |")


def test_estimate_base_shows_both(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**{**FULL, "mbs": 8}))
    _commit(repo, "raise MBS")
    target = "recipes/small.py::small_pretrain_8gpu_h100_bf16_config"
    res = run_cli(["estimate", target, "--base", base, "--format", "json"], cwd=repo)
    code, out, err = res.exit_code, res.stdout, res.stderr
    assert code in (0, 1), err
    data = json.loads(out)
    assert data["base"]["revision"].startswith(base)
    assert data["base"]["peak_bytes"] < data["peak_bytes"]
    assert data["base"]["growth"] == pytest.approx((data["peak_bytes"] - data["base"]["peak_bytes"])
                                                   / data["base"]["peak_bytes"], rel=1e-6)
    res = run_cli(["estimate", target, "--base", base], cwd=repo)
    code, out = res.exit_code, res.stdout
    assert f"at {base}" in out or "base revision" in out


def test_github_step_summary_gets_the_table(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "recipes" / "small.py").write_text(RECIPE.format(**{**FULL, "mbs": 8}))
    _commit(repo, "raise MBS")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = run_cli(["check", "recipes", "--base", base, "--format", "github"], cwd=repo)
    assert res.exit_code == 1
    assert "::warning file=recipes/small.py,line=6" in res.stdout and "title=MBM703 (memory-regression)" in res.stdout
    text = summary.read_text()
    assert "### Peak memory against the base revision" in text and "| `recipes/small.py::small_pretrain" in text
