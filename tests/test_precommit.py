"""The pre-commit hook with the real ``pre-commit`` client, end to end.

``pre-commit try-repo`` installs the hook from a git repository into a fresh virtualenv (pip
installs the project, so it must be buildable) and runs it in a temporary git repository. It only
sees *committed* content plus tracked changes, so the test first snapshots the working tree (every
file git does not ignore, tracked or not) into a temporary repository with one commit: the hook
under test is exactly the checkout's current state, committed or not.

Each try-repo builds its own environment (about 15 s here, pip needs the package index or its
cache); the ``git commit`` test uses an installed hook and a shared ``PRE_COMMIT_HOME``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]
CODE_RE = re.compile(r"\bMBM\d{3}\b")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

BAD_RECIPE = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.training.config import ConfigContainer


def bad_config() -> ConfigContainer:
    cfg = llama3_8b_pretrain_config()
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.cpu_offloading = True
    return cfg
"""

GOOD_RECIPE = """\
from megatron.bridge.recipes.llama import llama32_1b_pretrain_config
from megatron.bridge.training.config import ConfigContainer


def good_config() -> ConfigContainer:
    cfg = llama32_1b_pretrain_config()
    cfg.train.micro_batch_size = 1
    return cfg
"""

# Paired to the good recipe by its own first-line comment, not by arriving in the same batch.
BAD_OVERRIDE = """\
# mbmem-lint: recipe=recipes/good.py::good_config
model:
  pipeline_model_parallel_size: 2
  cpu_offloading: true
"""

PYPROJECT = """\
[tool.mbmem-lint]
gpu = "h100"
world-size = 8
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return proc.stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-commit snapshot of the checkout's working tree (tracked and untracked, not ignored)."""
    snap = tmp_path_factory.mktemp("mbmem-lint-src")
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            dst = snap / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    assert (snap / ".pre-commit-hooks.yaml").is_file()
    git(snap, "init", "-q")
    git(snap, "add", "-A")
    git(snap, "commit", "-q", "-m", "snapshot")
    return snap


@pytest.fixture()
def work(tmp_path: Path) -> Iterator[Path]:
    repo = tmp_path / "work"
    (repo / "recipes").mkdir(parents=True)
    (repo / "conf").mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (repo / "recipes" / "bad.py").write_text(BAD_RECIPE, encoding="utf-8")
    (repo / "recipes" / "good.py").write_text(GOOD_RECIPE, encoding="utf-8")
    (repo / "conf" / "override.yaml").write_text(BAD_OVERRIDE, encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    yield repo


def env_without_ci() -> dict[str, str]:
    # Outside Actions, so the hook prints its text format (in Actions it would print annotations).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.pop("PRE_COMMIT_HOME", None)
    return env


def try_repo(hook_repo: Path, work: Path, *files: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PRE_COMMIT, "try-repo", str(hook_repo), "mbmem-lint", "--files", *files],
        cwd=work,
        env=env_without_ci(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_failed_with_finding(proc: subprocess.CompletedProcess[str], path: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    assert "- exit code: 1" in out, out  # the hook itself exited 1 (findings), not 2 (usage error)
    assert CODE_RE.search(out), f"no MBMxxx diagnostic in the hook output:\n{out}"
    assert re.search(rf"{re.escape(path)}:\d+:\d+: MBM\d{{3}} \[(error|warning)\]", out), out
    assert "files were modified by this hook" not in out, out


def test_bad_recipe_fails_with_the_diagnostic(hook_repo: Path, work: Path) -> None:
    before = (work / "recipes" / "bad.py").read_bytes()
    proc = try_repo(hook_repo, work, "recipes/bad.py")
    assert_failed_with_finding(proc, "recipes/bad.py")
    assert (work / "recipes" / "bad.py").read_bytes() == before  # never modifies files


def test_good_recipe_passes(hook_repo: Path, work: Path) -> None:
    proc = try_repo(hook_repo, work, "recipes/good.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"mbmem-lint\.+Passed", out), out


def test_override_alone_is_paired_by_its_comment(hook_repo: Path, work: Path) -> None:
    """Only the YAML is staged (its recipe is in no batch): it is still checked against the recipe
    its first-line comment names, and the recipe's settings make the combination invalid."""
    proc = try_repo(hook_repo, work, "conf/override.yaml")
    assert_failed_with_finding(proc, "conf/override.yaml")


# Issue 20's example: an override file that names no recipe, checked on its own values.
LONE_OVERRIDE = """\
model:
  tensor_parallel_size: 4
  cpu_offloading: true
  pipeline_model_parallel_size: 4
"""
LONE_CLEAN = """\
train:
  micro_batch_size: 1
  global_batch_size: 256
"""


def test_folder_of_unpaired_overrides_is_checked_on_their_own_values(hook_repo: Path, work: Path) -> None:
    """pre-commit passes a folder's YAML files (no pairing anywhere): each is checked alone, with
    the info that says how to pair it; the bad one fails the hook with both of its problems."""
    lone = work / "conf" / "lone"
    lone.mkdir()
    (lone / "o.yaml").write_text(LONE_OVERRIDE, encoding="utf-8")
    (lone / "clean.yaml").write_text(LONE_CLEAN, encoding="utf-8")
    git(work, "add", "-A")
    proc = try_repo(hook_repo, work, "conf/lone/o.yaml", "conf/lone/clean.yaml")
    out = proc.stdout + proc.stderr
    assert_failed_with_finding(proc, "conf/lone/o.yaml")
    assert re.search(r"conf/lone/o\.yaml:2:3: MBM601 \[error\] .*did you mean 'tensor_model_parallel_size'", out), out
    assert re.search(r"conf/lone/o\.yaml:4:\d+: MBM205 \[error\] cpu_offloading=True with pipeline_model_parallel_size=4",
                     out), out
    for name in ("o.yaml", "clean.yaml"):
        assert re.search(rf"conf/lone/{re.escape(name)}:1:1: MBM008 \[info\] checked on its own values", out), out
    assert not re.search(r"conf/lone/clean\.yaml:\d+:\d+: MBM\d{3} \[(error|warning)\]", out), out


def test_git_commit_is_blocked_then_allowed(hook_repo: Path, work: Path, tmp_path: Path) -> None:
    """A real commit through ``pre-commit install``: the bad recipe blocks it, the good one not."""
    rev = git(hook_repo, "rev-parse", "HEAD").strip()
    (work / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_repo}\n    rev: {rev}\n    hooks:\n      - id: mbmem-lint\n",
        encoding="utf-8",
    )
    env = {**env_without_ci(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    subprocess.run([*PRE_COMMIT, "install"], cwd=work, env=env, check=True, capture_output=True)
    git(work, "rm", "-q", "--cached", "recipes/bad.py", "conf/override.yaml")
    git(work, "add", ".pre-commit-config.yaml")

    def commit(message: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-m", message],
            cwd=work,
            env={**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"},
            capture_output=True,
            text=True,
            timeout=600,
        )

    ok = commit("good recipe")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    git(work, "add", "recipes/bad.py")
    blocked = commit("bad recipe")
    assert_failed_with_finding(blocked, "recipes/bad.py")
    assert "bad.py" not in git(work, "ls-tree", "-r", "--name-only", "HEAD")
