"""``include`` / ``exclude`` of ``[tool.mbmem-lint]`` decide which files a folder walk lints."""

from __future__ import annotations

from pathlib import Path

from mbmem_lint.discover.files import discover
from mbmem_lint.settings import Settings


def _tree(root: Path) -> None:
    for rel in ("recipes/a.py", "recipes/deep/b.py", "recipes/legacy/old.py", "conf/x.yaml", "tools/c.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n" if rel.endswith(".py") else "model: {}\n", encoding="utf-8")


def _found(root: Path, settings: Settings, paths: list[str] | None = None) -> list[str]:
    found = discover(paths or [str(root)], settings)
    return sorted(Path(s.path).relative_to(root).as_posix() for s in found.python + found.yaml)


def test_walk_without_patterns_takes_every_python_and_yaml_file(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert _found(tmp_path, Settings(root=tmp_path)) == [
        "conf/x.yaml", "recipes/a.py", "recipes/deep/b.py", "recipes/legacy/old.py", "tools/c.py"]


def test_include_and_exclude_patterns(tmp_path: Path) -> None:
    _tree(tmp_path)
    settings = Settings(root=tmp_path, include=["recipes/**/*.py", "conf/**/*.yaml", "recipes/*.py"],
                        exclude=["recipes/legacy/**"])
    assert _found(tmp_path, settings) == ["conf/x.yaml", "recipes/a.py", "recipes/deep/b.py"]
    only_excluded = Settings(root=tmp_path, exclude=["tools"])  # a bare name matches at any depth
    assert "tools/c.py" in _found(tmp_path, only_excluded)  # "tools" names the folder, not the file
    assert "tools/c.py" not in _found(tmp_path, Settings(root=tmp_path, exclude=["tools/**"]))


def test_an_excluded_file_named_on_the_command_line_is_skipped(tmp_path: Path) -> None:
    _tree(tmp_path)
    settings = Settings(root=tmp_path, exclude=["recipes/legacy/**"])
    assert _found(tmp_path, settings, [str(tmp_path / "recipes/legacy/old.py")]) == []
    assert _found(tmp_path, settings, [str(tmp_path / "recipes/a.py")]) == ["recipes/a.py"]


def test_double_star_spans_zero_or_more_folders() -> None:
    from mbmem_lint.settings import path_matches

    assert path_matches("recipes/a.py", "recipes/**/*.py")  # zero folders
    assert path_matches("recipes/x/y/a.py", "recipes/**/*.py")
    assert path_matches("a.py", "**/*.py") and path_matches("d/a.py", "**/*.py")
    assert path_matches("a/b/c.py", "a/**/b/**/c.py")
    assert not path_matches("other/a.py", "recipes/**/*.py")
    assert path_matches("recipes/legacy/x/old.py", "recipes/legacy/**")
    assert not path_matches("recipes/legacy_new.py", "recipes/legacy/**")
