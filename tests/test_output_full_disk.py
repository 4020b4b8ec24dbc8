"""Every command's output on a full disk (``> /dev/full``): a clean error and exit 2, never a traceback.

The console script runs in a subprocess with its standard output on ``/dev/full`` (every write fails
with ENOSPC), as ``mbmem-lint check x.py > /dev/full`` does in a shell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py"
LOG = ROOT / "fixtures" / "logs" / "llama3_70b_sft.out"
TARGET = f"{RECIPE}::llama3_70b_pretrain_64gpu_h100_bf16_config"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")]

COMMANDS = [
    *(["check", str(RECIPE), "--format", fmt] for fmt in ("text", "json", "github", "sarif", "markdown")),
    ["check", str(RECIPE), "--fix", "--diff"],
    ["check", str(RECIPE), "--fix"],
    ["resolve", str(RECIPE)],
    ["resolve", str(RECIPE), "--format", "json"],
    ["estimate", TARGET],
    ["plan", TARGET, "--gpu", "h100", "--world-size", "64"],
    ["diagnose", str(LOG)],
    ["rules"],
    ["rule", "MBM205"],
    ["verify", "--help"],
    ["--version"],
    ["--help"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_output_on_a_full_disk_is_a_clean_error(args: list[str], tmp_path: Path) -> None:
    console_script = Path(sys.executable).with_name("mbmem-lint")
    command = [str(console_script)] if console_script.exists() else [sys.executable, "-m", "mbmem_lint"]
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*command, *args], stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env=env, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "mbmem-lint: error: cannot write the output: No space left on device")

