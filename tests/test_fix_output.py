"""Diffs, patch rendering, CLI-facing output and atomic writes of fixes."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mbmem_lint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location
from mbmem_lint.fix import edits as E
from mbmem_lint.fix.apply import apply_edits, plan_fixes, select_fixes
from mbmem_lint.fix.diff import NO_NEWLINE, find_repo_root, format_saving, repo_relative, unified_diff
from mbmem_lint.fix.output import build_patch, render_fix_output
from mbmem_lint.fix.testing import recipe_from_source
from mbmem_lint.fix.write import apply_to_files, atomic_write, write_patch
from mbmem_lint.sources import SourceFile, Sources

ROOT = Path(__file__).resolve().parents[1]
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git not installed")

RECIPE = (ROOT / "fixtures" / "fix" / "llama_pretrain.py").read_text(encoding="utf-8")
GiB = 2**30


def _diag(code: str, path: str, line: int, fix: Fix) -> Diagnostic:
    return Diagnostic(code, "rule-" + code.lower(), "warning", "msg", Location(path, line, 5), fix=fix)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / "recipes").mkdir(parents=True)
    if GIT:
        subprocess.run([GIT, "init", "-q", str(root)], check=True)
    else:
        (root / ".git").mkdir()
    (root / "recipes" / "my.py").write_text(RECIPE, encoding="utf-8")
    monkeypatch.chdir(root / "recipes")
    return root


def _load(path: str) -> Sources:
    st_ = os.stat(path)
    with open(path, encoding="utf-8", newline="") as fh:
        return {path: SourceFile(path, fh.read(), "python", st_.st_mtime_ns)}


def _diagnostics(path: str, sources: Sources) -> list[Diagnostic]:
    r = recipe_from_source(path, sources[path].text)
    sp = next(w for w in r.writes if w.path == "model.sequence_parallel")
    return [
        _diag(
            "MBM301",
            path,
            17,
            Fix(
                "add expandable_segments:True",
                "safe",
                E.extend_alloc_conf(r, "expandable_segments:True", sources),
            ),
        ),
        _diag(
            "MBM302",
            path,
            15,
            Fix(
                "add NCCL_GRAPH_REGISTER=0",
                "safe",
                E.set_dict_key(r, "env_vars", "NCCL_GRAPH_REGISTER", "0", sources),
            ),
        ),
        _diag(
            "MBM110",
            path,
            11,
            Fix("drop sequence_parallel=True at TP=1", "unsafe", E.remove_assignment(sp, sources)),
        ),
        _diag(
            "MBM701",
            path,
            13,
            Fix(
                "lower micro_batch_size to 1",
                "display-only",
                E.set_field(r, "train.micro_batch_size", "1", sources),
                saving_bytes=int(3.2 * GiB),
            ),
        ),
        _diag(
            "MBM702",
            path,
            9,
            Fix(
                "enable selective recompute",
                "display-only",
                E.set_field(r, "model.recompute_granularity", '"selective"', sources),
                saving_bytes=512 * 2**20,
            ),
        ),
    ]


def _snapshot(path: str) -> tuple[int, str]:
    return os.stat(path).st_mtime_ns, Path(path).read_text(encoding="utf-8")


def _git_apply(root: Path, patch: str, *args: str) -> subprocess.CompletedProcess[str]:
    (root / ".." / "p.diff").write_text(patch, encoding="utf-8")
    return subprocess.run(
        [GIT or "git", "apply", *args, str((root / ".." / "p.diff").resolve())],
        cwd=root,
        capture_output=True,
        text=True,
    )


# -- diffs ----------------------------------------------------------------------------------------------


def test_unified_diff_missing_trailing_newline() -> None:
    d = unified_diff("a\nb", "a\nc", "x.py")
    assert d == (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n"
        f"{NO_NEWLINE}\n+c\n{NO_NEWLINE}\n"
    )
    d2 = unified_diff("a\nb", "a\nb\n", "x.py")
    assert d2.endswith(f"-b\n{NO_NEWLINE}\n+b\n")
    assert unified_diff("same", "same", "x.py") == ""


def test_repo_relative(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_repo_root("my.py") == repo
    assert repo_relative("my.py") == "recipes/my.py"
    assert repo_relative(str(repo / "recipes" / "my.py")) == "recipes/my.py"
    outside = tmp_path / "loose"
    outside.mkdir()
    (outside / "r.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    if find_repo_root(outside) is None:
        assert repo_relative(str(outside / "r.py")) == "loose/r.py"


def test_format_saving() -> None:
    assert format_saving(int(3.2 * GiB)) == "saves ~3.2 GiB/rank"
    assert format_saving(512 * 2**20) == "saves ~512 MiB/rank"
    assert format_saving(None) == ""


# -- selection and combination --------------------------------------------------------------------------


def test_select_fixes() -> None:
    e = [Edit("f", 0, 0, "x")]
    kinds: list[tuple[str, Applicability]] = [("A", "safe"), ("B", "unsafe"), ("C", "display-only")]
    ds = [_diag(c, "f", 1, Fix("d", a, list(e))) for c, a in kinds]
    ds.append(_diag("D", "f", 1, Fix("no edits", "safe", [])))
    assert [d.code for d in select_fixes(ds, unsafe=False, include_display_only=False)] == ["A"]
    assert [d.code for d in select_fixes(ds, unsafe=True, include_display_only=False)] == ["A", "B"]
    assert [d.code for d in select_fixes(ds, unsafe=True, include_display_only=True)] == ["A", "B", "C"]


def test_conflicting_fixes_drop_the_later_deterministically() -> None:
    a = _diag("MBM001", "f", 1, Fix("a", "safe", [Edit("f", 2, 5, "X")]))
    b = _diag("MBM002", "f", 1, Fix("b", "safe", [Edit("f", 4, 6, "Y")]))
    same = _diag("MBM003", "f", 1, Fix("c", "safe", [Edit("f", 2, 5, "X")]))  # identical edit: merges
    ins = _diag("MBM004", "f", 1, Fix("d", "safe", [Edit("f", 5, 5, "Z")]))  # touches: combines
    for order in ([a, b, same, ins], [ins, same, b, a]):
        plan = plan_fixes(order)
        assert [d.code for d in plan.accepted] == ["MBM001", "MBM003", "MBM004"]
        assert [d.code for d, _ in plan.dropped] == ["MBM002"]
        edits = [e for p in plan.edits_by_path().values() for e in p]
        assert apply_edits("0123456789", edits) == "01XZ56789"


# -- render_fix_output ----------------------------------------------------------------------------------


@needs_git
def test_diff_mode_writes_nothing_and_git_applies_the_safe_part(repo: Path) -> None:
    sources = _load("my.py")
    before = _snapshot("my.py")
    diags = _diagnostics("my.py", sources)
    text, n = render_fix_output(diags, sources, mode="diff", unsafe=False, patch_file=None)
    assert _snapshot("my.py") == before
    assert n == 4  # 2 safe + 2 display-only (the unsafe one is hidden)
    assert "diff --git a/recipes/my.py b/recipes/my.py" in text
    assert "# mbmem-lint: display-only MBM701 (saves ~3.2 GiB/rank): lower micro_batch_size to 1" in text
    assert "1 unsafe fix not shown (add --unsafe-fixes)" in text
    assert all(
        ln.startswith(("#", "diff ", "--- ", "+++ ", "@@ ", " ", "+", "-", "\\")) for ln in text.splitlines()
    )
    res = _git_apply(repo, text, "--check")
    assert res.returncode == 0, res.stderr
    assert _git_apply(repo, text).returncode == 0
    applied = (repo / "recipes" / "my.py").read_text(encoding="utf-8")
    assert '"max_split_size_mb:512,expandable_segments:True"' in applied
    assert '"NCCL_GRAPH_REGISTER": 0,' in applied
    assert "cfg.model.sequence_parallel = True" in applied  # unsafe: not applied
    assert "micro_batch_size = 2" in applied  # display-only: not applied
    # Each display-only block, unquoted, applies on top of the safe fixes.
    block = text.split("display-only MBM701", 1)[1].split("\n#\n", 1)[0]
    sub = "".join(ln[4:] + "\n" for ln in block.splitlines() if ln.startswith("# | "))
    res = _git_apply(repo, sub)
    assert res.returncode == 0, res.stderr + sub
    assert "micro_batch_size = 1" in (repo / "recipes" / "my.py").read_text(encoding="utf-8")


@needs_git
def test_fix_mode_prints_instructions_and_patch_file(repo: Path) -> None:
    sources = _load("my.py")
    before = _snapshot("my.py")
    patch = str(repo / "fixes.patch")
    text, n = render_fix_output(
        _diagnostics("my.py", sources), sources, mode="fix", unsafe=True, patch_file=patch
    )
    assert _snapshot("my.py") == before
    assert n == 5
    assert "no file was changed" in text
    assert "mbmem-lint check --apply --unsafe-fixes PATHS" in text
    assert f"wrote the patch to {patch}" in text
    saved = Path(patch).read_text(encoding="utf-8")
    assert "-    cfg.model.sequence_parallel = True" in saved  # unsafe included with unsafe=True
    res = _git_apply(repo, saved, "--check")
    assert res.returncode == 0, res.stderr


def test_no_fixes() -> None:
    text, n = render_fix_output([], {}, mode="diff", unsafe=False, patch_file=None)
    assert (text, n) == ("", 0)
    text, n = render_fix_output([], {}, mode="fix", unsafe=False, patch_file=None)
    assert n == 0 and "no fixes" in text


def test_fixes_outside_sources_are_ignored(repo: Path) -> None:
    sources = _load("my.py")
    lib = _diag("MBM301", "my.py", 1, Fix("lib", "safe", [Edit("site-packages/x.py", 0, 0, "x")]))
    patch = build_patch([lib], sources, unsafe=False)
    assert patch.n_fixes == 0 and patch.text == ""


# -- apply ----------------------------------------------------------------------------------------------


def test_apply_writes_safe_fixes_atomically_and_keeps_mode(repo: Path) -> None:
    os.chmod("my.py", 0o640)
    sources = _load("my.py")
    diags = _diagnostics("my.py", sources)
    text, n = render_fix_output(diags, sources, mode="apply", unsafe=False, patch_file=None)
    assert n == 2
    assert "Fixed my.py (2 fixes)" in text and "MBM301" in text and "MBM302" in text
    assert "1 unsafe fix not applied" in text and "2 display-only suggestions not applied" in text
    new = Path("my.py").read_text(encoding="utf-8")
    assert new == apply_edits(sources["my.py"].text, [e for d in diags[:2] for e in d.fix.edits])  # type: ignore[union-attr]
    assert stat.S_IMODE(os.stat("my.py").st_mode) == 0o640
    assert sorted(os.listdir(".")) == ["my.py"]  # no temp file left behind


def test_apply_unsafe(repo: Path) -> None:
    sources = _load("my.py")
    changes = apply_to_files(_diagnostics("my.py", sources), sources, unsafe=True)
    assert [(c.path, c.status, len(c.fixes)) for c in changes] == [("my.py", "written", 3)]
    assert "sequence_parallel" not in Path("my.py").read_text(encoding="utf-8")


def test_apply_refuses_changed_content(repo: Path) -> None:
    sources = _load("my.py")
    diags = _diagnostics("my.py", sources)
    Path("my.py").write_text(RECIPE + "# edited meanwhile\n", encoding="utf-8")
    changes = apply_to_files(diags, sources, unsafe=False)
    assert [(c.status, c.reason) for c in changes] == [("refused", "it changed since it was read")]
    assert Path("my.py").read_text(encoding="utf-8").endswith("# edited meanwhile\n")
    text, n = render_fix_output(diags, sources, mode="apply", unsafe=False, patch_file=None)
    assert n == 0 and text.startswith("Refused my.py")


def test_apply_refuses_changed_mtime(repo: Path) -> None:
    sources = _load("my.py")
    st_ = os.stat("my.py")
    os.utime("my.py", ns=(st_.st_atime_ns, st_.st_mtime_ns + 5_000_000_000))
    changes = apply_to_files(_diagnostics("my.py", sources), sources, unsafe=False)
    assert changes[0].status == "refused" and "modification time" in changes[0].reason
    assert Path("my.py").read_text(encoding="utf-8") == RECIPE


def test_apply_keeps_crlf_when_read_with_translation(tmp_path: Path) -> None:
    p = tmp_path / "w.py"
    p.write_bytes(b"def f():\r\n    cfg = base()\r\n    cfg.a.b = 1\r\n    return cfg\r\n")
    text = p.read_text(encoding="utf-8")  # universal newlines: "\n"
    sources = {str(p): SourceFile(str(p), text, "python", os.stat(p).st_mtime_ns)}
    r = recipe_from_source(str(p), text)
    d = _diag("MBM1", str(p), 3, Fix("x", "safe", E.set_field(r, "a.b", "2", sources)))
    [ch] = apply_to_files([d], sources, unsafe=False)
    assert ch.status == "written"
    assert p.read_bytes() == b"def f():\r\n    cfg = base()\r\n    cfg.a.b = 2\r\n    return cfg\r\n"


def test_write_patch_and_atomic_write(tmp_path: Path) -> None:
    target = tmp_path / "out.patch"
    write_patch(str(target), "# hello\n")
    assert target.read_text() == "# hello\n"
    atomic_write(str(target), "x\r\ny")
    assert target.read_bytes() == b"x\r\ny"
    assert sorted(os.listdir(tmp_path)) == ["out.patch"]
