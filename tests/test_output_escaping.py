"""Output that a reader executes: hostile file names and recipe values in every output, end to end.

Real files with hostile names (a line break and a workflow command, ANSI/OSC escapes, a leading
``::``, the old ``##[`` command form, bytes that are not UTF-8) hold a recipe whose values carry the
same, and every format and command runs on them. Nothing of an input may reach a terminal as a
control character or a GitHub Actions runner as a workflow command, and every output stays valid
UTF-8 (JSON and SARIF: valid documents that read back to the exact values). The expected escaped
forms below are written by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from cli_run import CliResult, run_cli

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = (ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py").read_text(encoding="utf-8")

HOSTILE_RECIPE = '''\
from megatron.bridge.recipes.llama import llama3_70b_pretrain_config
from megatron.bridge.training.config import ConfigContainer


def evil_config() -> ConfigContainer:
    cfg = llama3_70b_pretrain_config()
    cfg.model.recompute_granularity = "full\\n::error file=x.py,line=1::pwned\\x1b]0;title\\x07\\x1b[31m"
    cfg.scheduler.max_lr = 3e-4  # raw ESC in a comment: \x1b[2J
    cfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:true\\n::error::env ##[error]v1 \\x9b2J"}
    return cfg
'''

# name -> how the text output writes it (by hand: Python-repr escapes, the command forms neutralised)
NAMES = {
    "evil\n::error file=z.py,line=1::pwned.py": "evil\\n::error file=z.py,line=1::pwned.py",
    "ansi\x1b]0;retitled\x07\x1b[2J.py": "ansi\\x1b]0;retitled\\x07\\x1b[2J.py",
    "::warning::colon.py": "\\u003a:warning::colon.py",
    "##[error]old-form.py": "##\\u005berror]old-form.py",
    os.fsdecode(b"bad\xff\xfe.py"): "bad\\xff\\xfe.py",
    "\u202eyp.exe.py": "\\u202eyp.exe.py",
}

# Raw characters no printed output may hold (tab and newline excepted).
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def assert_inert(text: str, *, what: str, github: bool = False) -> None:
    text.encode("utf-8")  # strict: no lone surrogate (an undecodable byte) reaches the stream
    raw = _RAW.search(text)
    assert raw is None, f"{what}: raw {raw.group()!r} in {text[max(raw.start() - 80, 0):raw.end() + 40]!r}"
    for line in text.split("\n"):
        if github:
            # Every line one annotation of ours, `::kind props::data` with no raw ':' in the props: the
            # runner parses it as that command (the old `##[` form is only tried on other lines).
            assert not line or re.fullmatch(r"::(error|warning|notice)( [^:]*)?::[^\r]*", line), (what, line)
        else:
            assert not line.lstrip().startswith("::"), (what, line)
            assert "##[" not in line, (what, line)


def _without_patch(text: str) -> str:
    """``text`` less the patch it holds (exact for ``git apply``: the recipe's own bytes)."""
    out, in_patch = [], False
    for line in text.split("\n"):
        in_patch = line.startswith("diff --git ") or (in_patch and line[:1] in ("+", "-", " ", "@", "\\"))
        if not in_patch:
            out.append(line)
    return "\n".join(out)


def _check(folder: Path, *args: str) -> CliResult:
    return run_cli(["check", ".", "--no-color", *args], cwd=folder)


@pytest.fixture()
def hostile(tmp_path: Path) -> Path:
    for name in NAMES:
        (tmp_path / name).write_text(HOSTILE_RECIPE, encoding="utf-8")
    return tmp_path


def test_escaping_functions_by_hand() -> None:
    from mbmem_lint.report.escape import json_text, printable, printable_lines

    assert printable("a\nb\r\tc\x1b[2J\x9b\u2028\udcff") == "a\\nb\\r\\tc\\x1b[2J\\x9b\\u2028\\xff"
    assert printable("  ::error::x") == "  \\u003a:error::x" and printable("a ::b") == "a ::b"
    assert printable("x ##[group]y") == "x ##\\u005bgroup]y"
    assert printable("\t::x", keep="\t") == "\t\\u003a:x"
    assert printable_lines("ok\n  ::warning::w\n\x1b[1mbold\ttab") == "ok\n  \\u003a:warning::w\n\\x1b[1mbold\ttab"
    assert printable("plain é 🔴 | `code`") == "plain é 🔴 | `code`"  # ordinary text is unchanged
    doc = json.dumps({"p": "bad\udcff", "m": "\x9b ##[x] \u2028"}, ensure_ascii=False)
    assert json_text(doc) == '{"p": "bad\\udcff", "m": "\\u009b ##\\u005bx] \\u2028"}'
    assert json.loads(json_text(doc)) == {"p": "bad\udcff", "m": "\x9b ##[x] \u2028"}  # exact values


def test_text_output(hostile: Path) -> None:
    result = _check(hostile)
    assert result.exit_code == 1, result.output
    assert_inert(result.output, what="check text")
    for shown in NAMES.values():
        assert f"\n{shown}:7:5: MBM203 [error] " in "\n" + result.stdout, shown
    # the source excerpt: the raw ESC of the comment is escaped, the carets still under the statement
    excerpt = "8 |     cfg.scheduler.max_lr = 3e-4  # raw ESC in a comment: \\x1b[2J\n  |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    assert excerpt in result.stdout
    # a value's line break: one line, escaped (MBM310 shows the value as PyTorch parses it: no spaces)
    assert "PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:true\\n::error::env##\\u005berror]v1\\x9b2J' must" in (
        result.stdout)


def test_text_output_on_a_real_utf8_stdout(hostile: Path) -> None:
    """The console script with a strict UTF-8 stdout (CI's locale): no UnicodeEncodeError for the name
    that is not UTF-8, in text and SARIF."""
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict", "NO_COLOR": "1"}
    env.pop("GITHUB_ACTIONS", None)
    for fmt in ("text", "sarif"):
        proc = subprocess.run([sys.executable, "-m", "mbmem_lint", "check", ".", "--format", fmt], cwd=hostile,
                              env=env, capture_output=True, timeout=300)
        assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
        assert_inert(proc.stdout.decode("utf-8"), what=fmt)


def test_github_annotations(hostile: Path) -> None:
    result = _check(hostile, "--format", "github", "--select", "MBM203")
    assert_inert(result.stdout, what="github", github=True)
    lines = result.stdout.splitlines()
    assert len(lines) == len(NAMES)  # one annotation per file: no line break of an input split one
    files = set()
    for line in lines:
        prop = re.search(r"file=([^,]*)", line)
        assert prop is not None
        files.add(prop.group(1).replace("%0A", "\n").replace("%0D", "\r").replace("%3A", ":")
                  .replace("%2C", ",").replace("%25", "%"))
    # GitHub decodes %0A, %3A, %2C: the annotation lands on the real file; names GitHub cannot be given
    # exactly (other control characters, undecodable bytes) are escaped instead.
    assert files == {"evil\n::error file=z.py,line=1::pwned.py", "ansi\\x1b]0;retitled\\x07\\x1b[2J.py",
                     "::warning::colon.py", "##[error]old-form.py", "bad\\xff\\xfe.py", "\\u202eyp.exe.py"}


def test_github_step_summary(hostile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = hostile.parent / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _check(hostile, "--format", "github")
    assert_inert(summary.read_bytes().decode("utf-8"), what="step summary")


def test_markdown(hostile: Path) -> None:
    result = _check(hostile, "--format", "markdown")
    assert_inert(result.stdout, what="markdown")
    n = len(json.loads(_check(hostile, "--format", "json").stdout)["diagnostics"])
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| Severity")
            and not ln.startswith("| Stage") and not ln.startswith("| PP ")]
    assert len(rows) == n  # every finding one table row: no input line break ends a row
    assert "`evil\\n::error file=z.py,line=1::pwned.py:7:5`" in result.stdout


def test_json_is_valid_and_exact(hostile: Path) -> None:
    result = _check(hostile, "--format", "json")
    assert_inert(result.stdout, what="json")
    data = json.loads(result.stdout.encode("utf-8"))
    paths = {d["path"] for d in data["diagnostics"]}
    assert paths == set(NAMES)  # exact, the undecodable name included (os.fsencode gives its bytes back)
    assert any("'expandable_segments:true\n::error::env##[error]v1\x9b2J'" in d["message"]
               for d in data["diagnostics"])


def test_sarif_is_valid_and_uris_name_the_files(hostile: Path) -> None:
    from test_sarif import schema_errors

    result = _check(hostile, "--format", "sarif")
    assert_inert(result.stdout, what="sarif")
    log = json.loads(result.stdout.encode("utf-8"))
    assert schema_errors(log) == []
    run = log["runs"][0]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert "bad%FF%FE.py" in uris and "evil%0A%3A%3Aerror%20file%3Dz.py%2Cline%3D1%3A%3Apwned.py" in uris
    assert {unquote(u, errors="surrogateescape") for u in uris} == set(NAMES)


def test_other_commands(hostile: Path) -> None:
    for args in (["resolve", "."], ["estimate", "."], ["estimate", ".", "--format", "markdown"],
                 ["check", "--fix", "--unsafe-fixes", "."], ["check", "--apply", "--unsafe-fixes", "."]):
        result = run_cli(args, cwd=hostile)
        assert_inert(_without_patch(result.output), what=" ".join(args))
        if args[0] != "check":
            assert "ansi\\x1b]0;retitled\\x07\\x1b[2J.py" in result.stdout, args
    assert "Fixed bad\\xff\\xfe.py (1 fix)" in result.stdout  # --apply's report
    for name in NAMES:
        if "::" not in name:  # FILE::FUNCTION: a name holding '::' cannot be named with its function
            result = run_cli(["plan", f"{name}::evil_config", "--gpu", "h100"], cwd=hostile)
            assert_inert(result.output, what=f"plan {name!r}")


def test_error_messages(tmp_path: Path) -> None:
    for args in (["rule", "MBM\x1b[2J\n::error::x"], ["check", "no\x1b]0;t\x07such\n::error::x.py"],
                 ["check", "--gpu", "h\n::error::x", "a.py"], ["check", "--fail-level", "\x1b[2J\n::error::x", "."],
                 ["diagnose", "missing\n::warning::log.out"]):
        result = run_cli(args, cwd=tmp_path)
        assert result.exit_code == 2, (args, result.output)
        assert_inert(result.output, what=repr(args))


def test_diagnose_log_with_escapes(tmp_path: Path) -> None:
    log = (ROOT / "fixtures" / "logs" / "llama3_70b_sft.out").read_text(encoding="utf-8")
    name = "run\x1b]0;t\x07\n::error::x.out"
    (tmp_path / name).write_text("\x1b]0;retitled\x07##[error]from the log\n" + log, encoding="utf-8")
    result = run_cli(["diagnose", name], cwd=tmp_path)
    assert result.exit_code == 1, result.output  # the log holds an OOM
    assert_inert(result.output, what="diagnose")
    # The name's control characters are escaped and its `::` cannot start a command; its line break is
    # still one (diagnose's report writes the name as it is, inert only line by line).
    assert "run\\x1b]0;t\\x07\n\\u003a:error::x.out:12: fragmentation [MBM314]" in result.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_fix_diff_quotes_names_and_applies(tmp_path: Path) -> None:
    """The patch stays exact for ``git apply``; its headers quote the names as git does."""
    names = ["evil\n::error file=z.py,line=1::pwned.py", os.fsdecode(b"bad\xff\xfe.py"), 'quote"d.py']
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for name in names:
        (tmp_path / name).write_text(FIXTURE, encoding="utf-8")
    result = _check(tmp_path, "--fix", "--diff")
    assert_inert(result.stderr, what="diff stderr")
    comments = "\n".join(ln for ln in result.stdout.split("\n") if ln.startswith("#"))
    assert_inert(comments, what="patch comments")
    assert 'diff --git "a/evil\\n::error file=z.py,line=1::pwned.py" "b/evil\\n::error file=z.py,line=1::pwned.py"' in (
        result.stdout)
    assert '--- "a/bad\\377\\376.py"' in result.stdout and '+++ "b/quote\\"d.py"' in result.stdout
    patch = tmp_path.parent / "fix.patch"
    patch.write_text(result.stdout, encoding="utf-8")
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    dead = "    cfg.ddp.grad_reduce_in_fp32 = False  # dead: bf16_mixed sets it back to True at runtime\n"
    for name in names:
        assert (tmp_path / name).read_text(encoding="utf-8") == FIXTURE.replace(dead, "")
