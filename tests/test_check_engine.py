"""Engine: suppressions, select/ignore, per-file-ignores, severity overrides, fail-level, crash isolation, dedupe."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mbmem_lint.check.docs import rendered_docs
from mbmem_lint.check.engine import Suppressions, exit_code, run_checks
from mbmem_lint.check.registry import (
    all_rules,
    explain_rule_text,
    get_rule,
    list_rules_text,
    validate_catalog,
)
from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef
from mbmem_lint.diagnostics import Diagnostic, Location
from mbmem_lint.resolve.resolved import ResolvedRecipe, recipe_from_values
from mbmem_lint.settings import Settings, parse_settings
from mbmem_lint.sources import SourceFile

REPO = Path(__file__).resolve().parents[1]


def _src(lines: list[str], path: str = "recipe.py") -> dict[str, SourceFile]:
    return {path: SourceFile(path, "\n".join(lines) + "\n", "python")}


def _sp_recipe(path: str = "recipe.py") -> ResolvedRecipe:
    # line 2: TP, line 3: SP (recipe_from_values puts field i at line i+2)
    r = recipe_from_values({"model.tensor_model_parallel_size": 1, "model.sequence_parallel": True}, path=path, world_size=8)
    r.pre_runtime = {"model.sequence_parallel": True}
    return r


SP_LINES = ["def recipe_config():", "    cfg.model.tensor_model_parallel_size = 1", "    cfg.model.sequence_parallel = True"]


def _codes(diags: list[Diagnostic]) -> list[str]:
    return [d.code for d in diags]


def test_rule_fires_on_hand_built_recipe() -> None:
    diags = run_checks([_sp_recipe()], [], Settings(), _src(SP_LINES))
    assert "MBM108" in _codes(diags)
    d = next(d for d in diags if d.code == "MBM108")
    assert d.location.line == 3 and d.severity == "warning" and "model.sequence_parallel" in d.fields


def test_line_suppression_specific_and_bare() -> None:
    lines = [*SP_LINES[:2], SP_LINES[2] + "  # mbmem: ignore[MBM108]"]
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], Settings(), _src(lines)))
    lines = [*SP_LINES[:2], SP_LINES[2] + "  # mbmem: ignore"]
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], Settings(), _src(lines)))
    lines = [*SP_LINES[:2], SP_LINES[2] + "  # mbmem: ignore[MBM999]"]
    assert "MBM108" in _codes(run_checks([_sp_recipe()], [], Settings(), _src(lines)))


def test_def_line_and_file_suppression() -> None:
    lines = [SP_LINES[0] + "  # mbmem: ignore[MBM1]", *SP_LINES[1:]]
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], Settings(), _src(lines)))
    lines = ["# mbmem: ignore-file[sequence-parallel-without-tensor-parallel]", *SP_LINES]
    r = _sp_recipe()
    r.location = Location("recipe.py", 2)
    for f in r.fields.values():
        f.anchor = Location("recipe.py", f.anchor.line + 1)
    assert "MBM108" not in _codes(run_checks([r], [], Settings(), _src(lines)))


def test_yaml_suppression_comment_parses() -> None:
    s = Suppressions.parse("model:\n  ~seq_length: null  # mbmem: ignore[MBM602]\n# mbmem: ignore-file[MBM6]\n")
    assert s.lines[2] == {"MBM602"} and s.file == {"MBM6"}


def test_select_ignore_per_file_and_severity() -> None:
    src = _src(SP_LINES)
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], Settings(ignore=["MBM108"]), src))
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], Settings(select=["MBM3"]), src))
    assert "MBM108" in _codes(run_checks([_sp_recipe()], [], Settings(select=["MBM1"]), src))
    s = parse_settings({"per-file-ignores": {"recipe.py": ["MBM1"]}}, None)
    assert "MBM108" not in _codes(run_checks([_sp_recipe()], [], s, src))
    s = parse_settings({"severity": {"MBM108": "error"}}, None)
    d = next(d for d in run_checks([_sp_recipe()], [], s, src) if d.code == "MBM108")
    assert d.severity == "error"


def test_fail_level() -> None:
    d = Diagnostic("MBM108", "x", "warning", "m", Location("a.py", 1))
    assert exit_code([d], Settings(fail_level="warning")) == 1
    assert exit_code([d], Settings(fail_level="error")) == 0
    assert exit_code([], Settings()) == 0
    i = Diagnostic("MBM314", "x", "info", "m", Location("a.py", 1))
    assert exit_code([i], Settings(fail_level="info")) == 1


def _boom(ctx: RuleContext) -> Iterator[Finding]:
    raise RuntimeError("kaput")
    yield  # pragma: no cover


BOOM = Rule(code="MBM999", name="boom", severity="error", summary="s", fields=("x",), rationale="r",
            sources=(SourceRef("megatron/x.py:1", "raise", "w"),), check=_boom,
            valid=(Example("x = 1\n"),), invalid=(Example("x = 1  # <-\n"),))


def test_rule_crash_is_isolated() -> None:
    rules = [BOOM, get_rule("MBM108")]
    diags = run_checks([_sp_recipe()], [], Settings(), _src(SP_LINES), rules=[r for r in rules if r])
    crash = [d for d in diags if d.code == "MBM001"]
    assert len(crash) == 1 and "MBM999" in crash[0].message and "recipe.py" in crash[0].message
    assert "MBM108" in _codes(diags)


def test_dedupe_across_recipes_sharing_a_location() -> None:
    a, b = _sp_recipe(), _sp_recipe()
    b.function = "other_recipe"
    diags = [d for d in run_checks([a, b], [], Settings(), _src(SP_LINES)) if d.code == "MBM108"]
    assert len(diags) == 1


def test_registry_and_texts() -> None:
    rules = all_rules()
    assert len(rules) >= 45
    assert len({r.code for r in rules}) == len(rules)
    assert get_rule("MBM108") is get_rule("sequence-parallel-without-tensor-parallel")
    assert "MBM101" in list_rules_text()
    text = explain_rule_text("MBM307")
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Fix safety", "## Source behaviour", "## Configuration"):
        assert section in text
    assert "MBM001" in explain_rule_text("MBM001")


def test_the_catalog_is_well_formed() -> None:
    """Codes, kebab-case names, sources, VALID/INVALID examples with their marker, fix-safety reasons,
    unique codes and names: checked here, not at every start-up."""
    validate_catalog(all_rules())
    rule = all_rules()[0]
    broken = dataclasses.replace(rule, name="Not Kebab")
    with pytest.raises(ValueError, match="kebab-case"):
        validate_catalog([broken])
    with pytest.raises(ValueError, match="duplicate"):
        validate_catalog([rule, dataclasses.replace(rule, code="MBM999")])
    unmarked = dataclasses.replace(rule, invalid=(dataclasses.replace(rule.invalid[0], code="x = 1\n"),))
    with pytest.raises(ValueError, match="marker"):
        validate_catalog([unmarked])


def test_every_rule_cites_source_and_examples() -> None:
    for r in all_rules():
        assert r.sources and all(s.ref.startswith("megatron/") and ":" in s.ref for s in r.sources), r.code
        assert r.valid and r.invalid, r.code


def test_generated_docs_are_current() -> None:
    out = REPO / "docs" / "rules"
    pages = rendered_docs()
    stale = [n for n, text in pages.items() if not (out / n).is_file() or (out / n).read_text(encoding="utf-8") != text]
    extra = [p.name for p in out.glob("MBM*.md") if p.name not in pages]
    assert not stale and not extra, f"docs/rules is stale ({stale[:5]}, {extra[:5]}): run mbmem-lint dev docs"


def test_rules_json_lists_every_rule() -> None:
    from mbmem_lint.check.registry import rules_json

    data = rules_json()
    rules = all_rules()
    assert [d["code"] for d in data] == [r.code for r in rules]
    for d, r in zip(data, rules):
        assert {"code", "name", "severity", "fixable", "summary", "fields", "source"} <= set(d)
        assert d["name"] == r.name and d["severity"] == r.severity and d["summary"] == r.summary
        assert d["fixable"] is (r.fix_applicability is not None)
        assert d["fields"] == list(r.fields) and d["fields"]
        sources = d["source"]
        assert isinstance(sources, list) and sources
        assert all({"ref", "behaviour", "what"} <= set(s) for s in sources)
    json.dumps(data)  # JSON-able as it is


def test_cli_rules_json_and_text() -> None:
    from cli_run import run_cli

    res = run_cli(["rules", "--format", "json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert len(data) == len(all_rules()) and data[0]["code"] == "MBM101"
    text = run_cli(["rules"]).stdout
    assert text.startswith(f"{len(all_rules())} rules")
    assert "MBM406  warning  fix:safe" in text
