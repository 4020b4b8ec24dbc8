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


def test_pyproject_settings_are_read_however_the_table_name_is_spelt(tmp_path: Path) -> None:
    from mbmem_lint.settings import load_settings

    # the quick "no mbmem here" pre-check must not hide a table whose name uses TOML escapes
    (tmp_path / "pyproject.toml").write_text('[tool."\\u006dbmem-lint"]\ngpu = "a100-40gb"\n', encoding="utf-8")
    assert load_settings(tmp_path).gpu == "a100-40gb"
    (tmp_path / "pyproject.toml").write_text("[tool.mbmem-lint]\ngpu = 'h200'\n", encoding="utf-8")
    settings = load_settings(tmp_path)
    assert settings.gpu == "h200" and settings.root == tmp_path


def test_a_pyproject_without_mbmem_settings_gives_the_defaults_and_the_root(tmp_path: Path) -> None:
    import pytest

    from mbmem_lint.settings import SettingsError, load_settings

    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    settings = load_settings(tmp_path / "sub")
    assert settings.root == tmp_path and settings.gpu == Settings().gpu
    # broken TOML is reported when it may hold our table ...
    (tmp_path / "pyproject.toml").write_text("[tool.mbmem-lint\ngpu = 1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path)
    # ... and not parsed at all when it cannot (other tools report their own broken tables)
    (tmp_path / "pyproject.toml").write_text("[tool.ruff\nline-length = 120\n", encoding="utf-8")
    assert load_settings(tmp_path).root == tmp_path


def test_which_pyproject_files_are_parsed_for_our_table() -> None:
    import tomllib

    from mbmem_lint.settings import may_hold_our_table

    holds = [
        "[tool.mbmem-lint]\ngpu = 'h100'\n",
        "[ tool . 'mbmem-lint' ]\ngpu = 'h100'\n",
        "[tool]\nmbmem-lint = { gpu = 'h100' }\n",
        "[tool]\n\"mbmem-lint\".gpu = 'h100'\n",
        "tool.mbmem-lint.gpu = 'h100'\n",
        "[[tool.mbmem-lint.x]]\na = 1\n",
        # an array spanning lines, whose inner lines start with "[", is not a header
        "[tool]\nx = [\n[1],\n]\nmbmem-lint = { gpu = 'h100' }\n",
        "[tool]\nx = '[project]'\nmbmem-lint.gpu = 'h100'\n",
        '[tool]\nx = """\n[project]\n"""\nmbmem-lint.gpu = "h100"\n',
        "[tool.\"\\u006dbmem-lint\"]\ngpu = 'h100'\n",
        "[project]\nx = 1\n[tool]  # comment\nmbmem-lint.gpu = 'h100'\n",
    ]
    for text in holds:
        # each really defines the table (so a False here would lose the user's settings) ...
        assert "mbmem-lint" in tomllib.loads(text).get("tool", {}), text
        # ... and the scan sends it to the parser
        assert may_hold_our_table(text), text
    cannot = [
        "[tool.ruff]\nline-length = 120\n",
        "[project]\nname = 'mbmem-lint'\ndependencies = [\n  'mbmem-lint>=0.1',\n]\n"
        "[project.scripts]\nmbmem-lint = 'mbmem_lint.cli:entry'\n[tool.mypy]\nfiles = ['mbmem_lint']\n",
        "[tool.setuptools.package-dir]\n'mbmem_lint.rules' = 'rules'\n",
    ]
    for text in cannot:
        assert "mbmem-lint" not in tomllib.loads(text).get("tool", {}), text
        assert not may_hold_our_table(text), text
