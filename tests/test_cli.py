"""The command line itself (click): default command, ``--version``, usage errors (exit 2), option
forms, lazily imported commands, shell completion, and that importing it pulls in none of the
linter's heavy modules."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run_cli

from mbmem_lint import __version__

ROOT = Path(__file__).resolve().parents[1]
BAD = str(ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py")
GOOD = str(ROOT / "fixtures" / "recipes" / "good" / "qwen3_8b_lora.py")


def test_default_command_is_check() -> None:
    explicit = run_cli(["check", "--no-color", BAD])
    assert explicit.exit_code == 1 and explicit.stdout
    assert run_cli([BAD, "--no-color"]) == explicit
    assert run_cli(["--no-color", BAD]) == explicit


def test_no_arguments_prints_the_command_list() -> None:
    res = run_cli([])
    assert res.exit_code == 0 and res.stderr == ""
    assert res.stdout == run_cli(["--help"]).stdout
    assert res.stdout.startswith("Usage: mbmem-lint [OPTIONS] COMMAND [ARGS]...")


def test_check_help_lists_its_options() -> None:
    res = run_cli(["check", "-h"])
    assert res.exit_code == 0
    assert res.stdout.startswith("Usage: mbmem-lint check [OPTIONS] PATHS...")
    for option in ("--format", "--world-size", "--select", "--fix", "--diff", "--unsafe-fixes", "--no-color"):
        assert option in res.stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_lists_commands(flag: str) -> None:
    res = run_cli([flag])
    assert res.exit_code == 0
    for command in ("check", "resolve", "estimate", "rules", "rule", "dev"):
        assert f"\n  {command} " in res.stdout


def test_version() -> None:
    res = run_cli(["--version"])
    assert (res.exit_code, res.stdout, res.stderr) == (0, f"mbmem-lint, version {__version__}\n", "")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "--bogus", BAD], "--bogus"),
        (["--bogus", BAD], "--bogus"),  # through the default command
        (["check", "--form", "json", BAD], "--form"),  # no abbreviations
        (["check", "--world-size", "0", BAD], "--world-size"),
        (["check", "--world-size", "two", BAD], "--world-size"),
        (["check", "--format", "xml", BAD], "--format"),
        (["check"], "PATHS"),
        (["rule"], "CODE"),
        (["resolve"], "PATH"),
        (["estimate", "a.py", "b.py"], "unexpected extra argument"),
    ],
)
def test_usage_errors_exit_2(args: list[str], needle: str) -> None:
    res = run_cli(args)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert "\nError: " in res.stderr and needle in res.stderr
    assert res.stderr.startswith("Usage: mbmem-lint ")


def test_group_without_command_shows_its_help_and_exits_2() -> None:
    res = run_cli(["dev"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("Usage: mbmem-lint dev [OPTIONS] COMMAND")
    assert "regenerate" in res.stderr and "docs" in res.stderr


def test_patch_to_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    res = run_cli(["check", "--patch", str(tmp_path), BAD])
    assert res.exit_code == 2 and "--patch" in res.stderr and "is a directory" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_corpus_that_is_a_file_is_a_usage_error() -> None:
    res = run_cli(["dev", "regenerate", "--check", "--corpus", BAD])
    assert res.exit_code == 2 and "--corpus" in res.stderr and "is a file" in res.stderr


def test_unknown_rule_exit_2() -> None:
    res = run_cli(["rule", "NOPE"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == "mbmem-lint: error: unknown rule 'NOPE'; `mbmem-lint rules` lists them\n"


def test_color_flags() -> None:
    plain = run_cli(["check", "--no-color", BAD])
    coloured = run_cli(["check", "--color", BAD])
    assert plain.exit_code == coloured.exit_code == 1
    assert "\x1b[" not in plain.stdout and "\x1b[" in coloured.stdout


def test_options_between_paths_and_repeated_options() -> None:
    a = run_cli(["check", "--format", "json", "--select", "MBM1", "--select", "MBM2", GOOD, BAD])
    b = run_cli(["check", GOOD, "--select", "MBM1", "--format", "json", BAD, "--select", "MBM2"])
    assert a.exit_code == 1 and a == b


def test_gc_is_tuned_before_the_command_runs() -> None:
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        assert run_cli(["rule", "MBM101"]).exit_code == 0
        assert gc.get_threshold() == (20_000, 1_000, 1_000)
    finally:
        gc.set_threshold(*old)


@pytest.mark.slow
def test_python_m_exit_codes_and_no_heavy_imports() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert run("-m", "mbmem_lint", "rule", "NOPE").returncode == 2
    version = run("-m", "mbmem_lint", "--version")
    assert (version.returncode, version.stdout) == (0, f"mbmem-lint, version {__version__}\n")
    assert run("-m", "mbmem_lint", BAD).returncode == 1
    probe = run("-c", "import sys, mbmem_lint.cli; "
                      "print(sorted(m for m in sys.modules if m.startswith('mbmem_lint.')))")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "['mbmem_lint.cli', 'mbmem_lint.commands', 'mbmem_lint.commands.common']"
    # --version answers from the group: no command module is imported.
    probe = run("-c", "import sys, mbmem_lint.cli as c; c.main(['--version']); "
                      "print(sorted(m for m in sys.modules if m.startswith('mbmem_lint.commands.')))")
    assert probe.stdout.splitlines()[-1] == "['mbmem_lint.commands.common']"


@pytest.mark.slow
def test_shell_completion_completes_commands_and_options() -> None:
    def complete(words: str) -> list[str]:
        env = {**os.environ, "_MBMEM_LINT_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split(" ")) - 1)}
        proc = subprocess.run([sys.executable, "-m", "mbmem_lint"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return [line.split(",", 1)[1] for line in proc.stdout.splitlines()]

    assert complete("mbmem-lint es") == ["estimate"]
    assert set(complete("mbmem-lint check --form")) == {"--format"}
    assert complete("mbmem-lint check --format sa") == ["sarif"]


@pytest.mark.slow
def test_closed_stdout_exits_1_quietly() -> None:
    """``mbmem-lint ... | head``: the reader goes away; exit 1 without a traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "mbmem_lint", "resolve", BAD, "--format", "json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the output (~170 kB) cannot all fit in the pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert err == b""


@pytest.mark.slow
def test_console_entry_flushes_everything_before_its_hard_exit() -> None:
    """``entry`` leaves with ``os._exit`` (no interpreter teardown): buffered output must be
    written first, whatever its size, and the exit code kept."""
    listing = subprocess.run([sys.executable, "-m", "mbmem_lint", "rules", "--format", "json"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout) == json.loads(run_cli(["rules", "--format", "json"]).stdout)
    resolved = subprocess.run([sys.executable, "-m", "mbmem_lint", "resolve", BAD, "--format", "json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert len(resolved.stdout) > 100_000  # more than any pipe or stdio buffer holds
    assert json.loads(resolved.stdout) == json.loads(run_cli(["resolve", BAD, "--format", "json"]).stdout)
    check = subprocess.run([sys.executable, "-m", "mbmem_lint", BAD], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1
    assert check.stdout == run_cli([BAD]).stdout
