"""The GitHub Action (``action.yml``): its ``run:`` steps executed the way the runner executes them.

A composite action's ``run`` step is written to a file and run as ``bash --noprofile --norc -eo
pipefail FILE`` with the step's ``env:`` (its ``${{ }}`` expressions evaluated first) on top of the
job's environment (``GITHUB_*``). Here the ``uses:`` step (actions/setup-python) is the test's own
interpreter; the install step runs for real into a fresh virtual environment (offline: no index, the
build backend and dependencies from this environment); the check step runs in a temporary git
repository holding a pull request: a base commit, and a head commit that raises the micro-batch size
and adds a broken recipe, checked out shallow as actions/checkout does (the step fetches the base).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

RECIPE = '''from megatron.bridge.recipes.llama import llama32_1b_pretrain_config


def small_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.train.micro_batch_size = {mbs}
    return cfg
'''
BROKEN = (ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py").read_text(encoding="utf-8")
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def _action() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load((ROOT / "action.yml").read_text(encoding="utf-8"))
    return data


def _evaluate(value: str, context: dict[str, str]) -> str:
    """The ``${{ a.b.c }}`` expressions of a step's ``env`` (property paths only; a missing one is '')."""
    return EXPRESSION.sub(lambda m: context.get(m.group(1), ""), value)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _run_step(step: dict[str, Any], context: dict[str, str], env: dict[str, str], cwd: Path,
              tmp: Path) -> subprocess.CompletedProcess[str]:
    assert step["shell"] == "bash"
    script = tmp / f"step-{abs(hash(step['name']))}.sh"
    script.write_text(step["run"], encoding="utf-8")
    step_env = {**env, **{k: _evaluate(str(v), context) for k, v in (step.get("env") or {}).items()}}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd,
                          env=step_env, capture_output=True, text=True, timeout=600)


def test_action_metadata() -> None:
    action = _action()
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    assert steps[0]["uses"].startswith("actions/setup-python@")
    assert steps[0]["with"]["python-version"] == "${{ inputs.python-version }}"
    assert set(action["inputs"]) == {"paths", "args", "python-version", "megatron-bridge-version", "base"}
    for step in steps:
        if "run" in step:  # inputs reach the scripts as environment variables only (no script injection)
            assert "${{" not in step["run"], step["name"]


def test_action_steps_run_as_the_runner_runs_them(tmp_path: Path) -> None:
    action = _action()
    steps = [s for s in action["runs"]["steps"] if "run" in s]
    install, check = steps
    # The action's checkout at its ref: the project's files (not the working tree's build leftovers).
    action_path = tmp_path / "action"
    action_path.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "action.yml"):
        shutil.copy2(ROOT / name, action_path / name)
    for folder in ("mbmem_lint", "rules"):
        shutil.copytree(ROOT / folder, action_path / folder, ignore=shutil.ignore_patterns("__pycache__"))

    # The pull request: a base commit, then a head commit that grows memory and adds a broken recipe.
    origin = tmp_path / "origin"
    (origin / "recipes").mkdir(parents=True)
    _git(origin, "init", "-q")
    (origin / "recipes" / "small.py").write_text(RECIPE.format(mbs=1))
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "base")
    base = _git(origin, "rev-parse", "HEAD")
    (origin / "recipes" / "small.py").write_text(RECIPE.format(mbs=8))
    (origin / "recipes" / "broken.py").write_text(BROKEN)
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "head")
    workspace = tmp_path / "workspace"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{origin}", str(workspace)], check=True)
    assert subprocess.run(["git", "-C", str(workspace), "cat-file", "-e", f"{base}^{{commit}}"],
                          capture_output=True).returncode != 0  # shallow: the base is not there yet

    # setup-python: a fresh environment on PATH. Its pip and the build backend come from this
    # environment (a path entry, so the editable install of the checkout is not seen as installed).
    env_dir = tmp_path / "python"
    venv.create(env_dir, with_pip=False)
    bindir = env_dir / "bin"
    site = subprocess.run([str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))

    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB", "PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", GITHUB_ACTIONS="true", CI="true",
               GITHUB_WORKSPACE=str(workspace), GITHUB_ACTION_PATH=str(action_path), GITHUB_EVENT_NAME="pull_request",
               GITHUB_STEP_SUMMARY=str(summary), RUNNER_TEMP=str(tmp_path), NO_COLOR="1", HOME=str(tmp_path),
               # offline: no index, no config file; "0" here means --no-build-isolation (pip reads the
               # variables of its --no-* options that way), so the build backend is this environment's
               PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", PIP_CONFIG_FILE=os.devnull)
    context = {"github.action_path": str(action_path), "github.event.pull_request.base.sha": base}
    context.update({f"inputs.{name}": str(spec.get("default", "")) for name, spec in action["inputs"].items()})
    context["inputs.args"] = "--gpu h100 --world-size 8"

    done = _run_step(install, context, env, workspace, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mbmem-lint, version" in done.stdout
    installed = subprocess.run([str(bindir / "python"), "-c", "import mbmem_lint; print(mbmem_lint.__file__)"],
                               check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert Path(installed).is_relative_to(env_dir)  # installed from the action's path, not the checkout

    done = _run_step(check, context, env, workspace, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # findings: the step fails the job
    lines = done.stdout.splitlines()
    assert lines and all(ln.startswith(("::error ", "::warning ", "::notice ")) for ln in lines), done.stdout
    assert any(ln.startswith("::error file=recipes/broken.py,line=10,") and "MBM205" in ln for ln in lines)
    regression = [ln for ln in lines if "MBM703" in ln]
    assert regression and regression[0].startswith("::") and "file=recipes/small.py,line=6," in regression[0]
    assert base[:7] in regression[0]  # compared with the pull request's base, fetched into the shallow clone
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### mbmem-lint\n") and "| `MBM205` " in text
    assert "### Peak memory against the base revision" in text and "small_pretrain_8gpu_h100_bf16_config" in text

    # Inputs that hold shell syntax stay data; a push (no pull request) runs without --base.
    context.update({"inputs.paths": "recipes/small.py 'no such; $(touch pwned)'", "inputs.args": "--select MBM2",
                    "github.event.pull_request.base.sha": ""})
    done = _run_step(check, context, env, workspace, tmp_path)
    assert done.returncode == 2 and "no such; $(touch pwned)" in done.stderr, done.stdout + done.stderr
    assert not (workspace / "pwned").exists()
