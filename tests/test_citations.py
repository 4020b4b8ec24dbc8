"""Rule metadata, messages and docs cite public sources (Megatron Bridge / Core file:line, PR and issue
numbers, published measurements), never the team's private research notes (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The notes' names, spelled so that this file does not match itself.
PRIVATE = ("seed" + "-facts", "rules" + "-from-source", "appendix" + " rule", "recipe" + "-shapes")


def _shipped_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / ".pre-commit-hooks.yaml"]
    for folder, patterns in (("mbmem_lint", ("*.py", "*.json")), ("rules", ("*.py",)), ("docs", ("*.md", "*.json"))):
        for pattern in patterns:
            files += sorted((ROOT / folder).rglob(pattern))
    return [f for f in files if "__pycache__" not in f.parts]


@pytest.mark.parametrize("name", PRIVATE)
def test_no_private_notes_are_cited(name: str) -> None:
    hits = [f"{f.relative_to(ROOT)}:{i}" for f in _shipped_files()
            for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if name in line.lower()]
    assert hits == []


def test_every_rule_cites_its_source() -> None:
    from mbmem_lint.check.registry import all_rules

    for rule in all_rules():
        assert rule.sources, rule.code
        for ref in rule.references:
            assert any(k in ref for k in ("#", "megatron/", "PyTorch", "NVIDIA/", ".py", "docs/")), (rule.code, ref)
