"""``check --apply`` on files that are more than a name: symlinks, hard links, another user's files,
read-only files, files with a byte-order mark. End to end: a real recipe with a safe fix, the CLI."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cli_run import run_cli

ROOT = Path(__file__).resolve().parents[1]
RECIPE = (ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py").read_text(encoding="utf-8")
DEAD_LINE = "    cfg.ddp.grad_reduce_in_fp32 = False  # dead: bf16_mixed sets it back to True at runtime\n"
FIXED = RECIPE.replace(DEAD_LINE, "")  # the one safe fix: MBM406 deletes the dead assignment
assert FIXED != RECIPE


def _apply(path: Path | str, cwd: Path) -> str:
    result = run_cli(["check", "--apply", "--no-color", str(path)], cwd=cwd)
    assert result.exit_code == 1, result.output  # the unsafe findings stay
    return result.output


def test_apply_writes_a_symlinks_target_and_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    target = tmp_path / "shared" / "recipe.py"
    target.write_text(RECIPE, encoding="utf-8")
    (tmp_path / "recipes").mkdir()
    link = tmp_path / "recipes" / "recipe.py"
    link.symlink_to(os.path.join("..", "shared", "recipe.py"))
    out = _apply("recipes/recipe.py", tmp_path)
    assert "Fixed recipes/recipe.py (1 fix)" in out
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "shared", "recipe.py")
    assert target.read_text(encoding="utf-8") == FIXED
    assert sorted(os.listdir(tmp_path / "recipes")) == ["recipe.py"]
    assert sorted(os.listdir(tmp_path / "shared")) == ["recipe.py"]  # no temp file left behind


def test_apply_keeps_mode_and_hard_links(tmp_path: Path) -> None:
    path = tmp_path / "recipe.py"
    path.write_text(RECIPE, encoding="utf-8")
    os.chmod(path, 0o640)
    other = tmp_path / "same_file.py"
    os.link(path, other)
    inode = os.stat(path).st_ino
    out = _apply("recipe.py", tmp_path)
    assert "Fixed recipe.py (1 fix)" in out
    assert os.stat(path).st_ino == inode == os.stat(other).st_ino  # still one file under two names
    assert other.read_text(encoding="utf-8") == FIXED
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_apply_without_other_links_replaces_atomically_with_the_same_mode(tmp_path: Path) -> None:
    path = tmp_path / "recipe.py"
    path.write_text(RECIPE, encoding="utf-8")
    os.chmod(path, 0o604)
    _apply("recipe.py", tmp_path)
    assert path.read_text(encoding="utf-8") == FIXED
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o604
    assert sorted(os.listdir(tmp_path)) == ["recipe.py"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_apply_as_another_user_keeps_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "recipe.py"
    path.write_text(RECIPE, encoding="utf-8")
    os.chown(path, 4242, 4243)
    _apply("recipe.py", tmp_path)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (4242, 4243)
    assert path.read_text(encoding="utf-8") == FIXED


def test_apply_writes_in_place_when_the_owner_cannot_be_kept(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who may write another user's file but not give a file away (no chown) writes in place:
    the file keeps its owner because it stays the same file."""
    path = tmp_path / "recipe.py"
    path.write_text(RECIPE, encoding="utf-8")
    inode = os.stat(path).st_ino
    real_fstat = os.fstat

    def fstat_as_another_owner(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        fields = list(st)
        fields[stat.ST_UID] = st.st_uid + 1  # the temp file looks like the writer's, not the owner's
        return os.stat_result(fields)

    def no_chown(fd: int, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fstat", fstat_as_another_owner)
    monkeypatch.setattr(os, "fchown", no_chown)
    _apply("recipe.py", tmp_path)
    assert os.stat(path).st_ino == inode
    assert path.read_text(encoding="utf-8") == FIXED
    assert sorted(os.listdir(tmp_path)) == ["recipe.py"]


def test_apply_refuses_a_read_only_file(tmp_path: Path) -> None:
    path = tmp_path / "recipe.py"
    path.write_text(RECIPE, encoding="utf-8")
    os.chmod(path, 0o444)
    out = _apply("recipe.py", tmp_path)
    assert "Refused recipe.py: it is read-only (mode 0444): make it writable" in out
    assert path.read_text(encoding="utf-8") == RECIPE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_apply_keeps_a_byte_order_mark(tmp_path: Path, newline: str) -> None:
    path = tmp_path / "recipe.py"
    path.write_bytes(b"\xef\xbb\xbf" + RECIPE.replace("\n", newline).encode("utf-8"))
    out = _apply("recipe.py", tmp_path)
    assert "Fixed recipe.py (1 fix)" in out, out
    assert path.read_bytes() == b"\xef\xbb\xbf" + FIXED.replace("\n", newline).encode("utf-8")
