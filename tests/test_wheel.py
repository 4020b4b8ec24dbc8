"""The built wheel, installed (not editable) into a fresh virtual environment, runs every command.

The editable install the other tests use reads the modules from the checkout, so a package missing
from the wheel (``mbmem_lint.verify`` once was) goes unnoticed there. Here the wheel is built from a
copy of the project's files (no stale ``build/`` folder of the checkout can fill a gap), installed with
``--no-deps`` into a new environment whose only other path is this environment's site-packages (the
dependencies: click, libcst, ruamel.yaml; no network), and each command is run once as a user would,
from a folder outside the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

RECIPE = ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py"
RECIPE_FUNCTION = "llama3_70b_pretrain_64gpu_h100_bf16_config"
LOG = ROOT / "fixtures" / "logs" / "llama3_70b_sft.out"


def _bin(env_dir: Path, name: str) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / name


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """(the fresh environment, the environment variables to run its ``mbmem-lint`` with)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    for folder in ("mbmem_lint", "rules"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(dist)], check=True, capture_output=True, text=True)
    [wheel] = dist.glob("mbmem_lint-*.whl")

    env_dir = tmp / "env"
    venv.create(env_dir, with_pip=False)
    python = _bin(env_dir, "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "-q", str(wheel)], check=True, capture_output=True, text=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The dependencies from this environment: a plain path entry (its .pth files, among them the
    # editable install of the checkout, are not processed for a path added this way).
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GITHUB", "MBMEM_CACHE"))}
    env.update(PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1",
               MBMEM_CACHE_DIR=str(tmp / "cache"), XDG_CACHE_HOME=str(tmp / "xdg"))
    yield env_dir, env


def _run(installed: tuple[Path, dict[str, str]], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env_dir, env = installed
    return subprocess.run([str(_bin(env_dir, "mbmem-lint")), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_wheel_is_what_runs(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    env_dir, env = installed
    out = subprocess.run([str(_bin(env_dir, "python")), "-c",
                          "import mbmem_lint, mbmem_lint.rules, mbmem_lint.verify.run; "
                          "print(mbmem_lint.__file__); print(mbmem_lint.rules.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    for path in out:
        assert Path(path).resolve().is_relative_to(env_dir.resolve()), path


def test_every_command_runs_from_the_wheel(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    recipe = tmp_path / RECIPE.name
    shutil.copy2(RECIPE, recipe)
    shutil.copy2(LOG, tmp_path / LOG.name)
    target = f"{recipe.name}::{RECIPE_FUNCTION}"
    # (args, expected exit code, text the output must hold)
    cases: list[tuple[list[str], int, str]] = [
        (["--version"], 0, "mbmem-lint, version"),
        (["check", recipe.name], 1, "MBM205"),
        (["check", recipe.name, "--format", "sarif"], 1, '"ruleId": "MBM205"'),
        (["resolve", target], 0, "model.pipeline_model_parallel_size = 4"),
        (["estimate", target, "--gpu", "h100", "--world-size", "64"], 0, "stage pp_rank=0"),
        (["plan", target, "--gpu", "h100", "--world-size", "64"], 0, RECIPE_FUNCTION),
        (["diagnose", LOG.name], 1, "MBM314"),  # exit 1: the log has an OOM
        (["rules"], 0, "MBM205"),
        (["rule", "MBM205"], 0, "MBM205"),
        (["verify", "--help"], 0, "EXECUTES"),
        (["dev", "--help"], 0, "regenerate"),
        # The interpreter has no Megatron Bridge: verify says so (exit 2) after loading mbmem_lint.verify.
        (["verify", target, "--python", str(_bin(installed[0], "python"))], 2, "Megatron Bridge"),
    ]
    for args, code, expected in cases:
        proc = _run(installed, *args, cwd=tmp_path)
        output = proc.stdout + proc.stderr
        assert "Traceback" not in output, (args, output[-3000:])
        assert proc.returncode == code, (args, proc.returncode, output[-3000:])
        assert expected in output, (args, output[-3000:])
