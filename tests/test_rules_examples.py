"""Every rule's VALID / INVALID examples, through the real pipeline (``lint_source``)."""

from __future__ import annotations

import pytest

from mbmem_lint.check.registry import all_rules
from mbmem_lint.check.rule import Example, Rule
from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.settings import parse_settings

pipeline = pytest.importorskip("mbmem_lint.pipeline")

# Examples that need resolver support not there yet (reported to the resolver owner).
KNOWN_RESOLVER_GAPS: dict[str, str] = {}

CASES_INVALID = [
    pytest.param(r, i, ex, id=f"{r.code}-invalid{i}",
                 marks=[pytest.mark.xfail(reason=KNOWN_RESOLVER_GAPS[f"{r.code}-invalid{i}"], strict=False)]
                 if f"{r.code}-invalid{i}" in KNOWN_RESOLVER_GAPS else [])
    for r in all_rules() for i, ex in enumerate(r.invalid)
]
CASES_VALID = [(r, i, ex) for r in all_rules() for i, ex in enumerate(r.valid)]


def _lint(ex: Example) -> list[Diagnostic]:
    settings = parse_settings(dict(ex.settings), None)
    return pipeline.lint_source(ex.code, filename="recipe.py", yaml=ex.yaml, settings=settings, base=ex.base)


def _expected(ex: Example) -> tuple[str, int]:
    loc = ex.expected_location()
    assert loc is not None
    kind, line = loc
    if kind == "yaml":
        assert ex.yaml is not None
        if "mbmem-lint: recipe=" not in ex.yaml:
            line += 1  # lint_source prepends the pairing comment
        return "override.yaml", line
    return "recipe.py", line


@pytest.mark.parametrize(("rule", "idx", "ex"), CASES_INVALID)
def test_invalid_example_fires(rule: Rule, idx: int, ex: Example) -> None:
    diags = _lint(ex)
    path, line = _expected(ex)
    hits = [d for d in diags if d.code == rule.code]
    assert hits, f"{rule.code} did not fire; got {[(d.code, d.location.line, d.message) for d in diags]}"
    assert any(d.location.path.endswith(path) and d.location.line == line for d in hits), (
        f"{rule.code} fired at {[(d.location.path, d.location.line) for d in hits]}, expected {path}:{line}"
    )
    assert not [d for d in diags if d.code == "MBM001"], [d.message for d in diags if d.code == "MBM001"]


@pytest.mark.parametrize(("rule", "idx", "ex"), CASES_VALID, ids=[f"{r.code}-valid{i}" for r, i, _ in CASES_VALID])
def test_valid_example_is_clean(rule: Rule, idx: int, ex: Example) -> None:
    diags = _lint(ex)
    hits = [d for d in diags if d.code == rule.code]
    assert not hits, [(d.location.line, d.message) for d in hits]
    assert not [d for d in diags if d.code == "MBM001"], [d.message for d in diags if d.code == "MBM001"]
