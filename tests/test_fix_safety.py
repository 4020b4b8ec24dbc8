"""Fix applicability in ruff's sense, per fixable rule, checked on the run itself.

*safe*: the training run does exactly what it did before. Tested by resolving each INVALID example
before and after its fix (Bridge's runtime rewrites applied, as the run sees the config): every
effective field must be the same, except a field the table below names as one the run never reads
under the example's settings. *unsafe*: the effective config changes. *display-only*: shown, never
applied (its class is checked, its effect is not).

The table is written by hand from each rule's source behaviour; a new fixable rule fails
``test_every_fixable_rule_has_an_entry`` until it gets one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mbmem_lint.check.registry import all_rules, get_rule
from mbmem_lint.diagnostics import Edit
from mbmem_lint.fix.apply import apply_edits
from mbmem_lint.pipeline import lint_source_run, resolve_paths
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import parse_settings

CRASH = "the run stops before training today; after the fix it trains"
# code -> (class, fields the run provably does not read (safe only), why)
SAFETY: dict[str, tuple[str, frozenset[str], str]] = {
    "MBM104": ("unsafe", frozenset(), CRASH),
    "MBM108": ("safe", frozenset(), "Bridge sets sequence_parallel=False at TP=1 itself"),
    "MBM109": ("unsafe", frozenset(), "sequence parallelism changes communication and activation memory"),
    "MBM110": ("unsafe", frozenset(), CRASH),
    "MBM201": ("unsafe", frozenset(), CRASH),
    "MBM202": ("unsafe", frozenset(), CRASH),
    "MBM204": ("safe", frozenset({"model.recompute_method"}),
               "recompute_method is read only on the full-recompute path (transformer_block.py)"),
    "MBM205": ("unsafe", frozenset(), CRASH),
    "MBM208": ("unsafe", frozenset(), CRASH),
    "MBM210": ("unsafe", frozenset(), CRASH),
    "MBM301": ("unsafe", frozenset(), CRASH),
    "MBM302": ("unsafe", frozenset(), "turns full-iteration CUDA graphs on where none were captured"),
    "MBM303": ("unsafe", frozenset(), CRASH),
    "MBM304": ("unsafe", frozenset(), CRASH),
    "MBM306": ("unsafe", frozenset(), "changes NCCL's memory registration (and stops a TE-graph crash)"),
    "MBM309": ("unsafe", frozenset(), "the process sees '0'/'1' instead of 'False'/'True'"),
    "MBM310": ("unsafe", frozenset(), CRASH),
    "MBM314": ("unsafe", frozenset(), "expandable segments change the allocator"),
    "MBM401": ("unsafe", frozenset(), "the first step fails today; after the fix the all-gather is not overlapped"),
    "MBM402": ("unsafe", frozenset(), CRASH),
    "MBM403": ("unsafe", frozenset(), CRASH),
    "MBM404": ("safe", frozenset(), "Bridge turns both distributed-optimizer flags on when either is on"),
    "MBM405": ("safe", frozenset(), "Bridge turns both overlap_param_gather flags on when either is on"),
    "MBM406": ("safe", frozenset(), "cfg.mixed_precision overwrites the deleted assignment"),
    "MBM408": ("safe", frozenset(), "CommOverlapConfig.setup() overwrites the deleted assignment"),
    "MBM410": ("unsafe", frozenset(), CRASH),
    "MBM411": ("display-only", frozenset(), "sharding changes what every rank holds"),
    "MBM412": ("unsafe", frozenset(), "reusing the gradient buffer changes memory (and stops an assert)"),
    "MBM414": ("unsafe", frozenset(), CRASH),
    "MBM418": ("unsafe", frozenset(), CRASH),
    "MBM501": ("unsafe", frozenset(), "the input re-gather changes memory and communication"),
    "MBM601": ("unsafe", frozenset(), "the renamed key starts to take effect"),
    "MBM602": ("safe", frozenset(), "Bridge applies only present keys: the `~key` never did anything"),
    "MBM605": ("unsafe", frozenset(), "the field gets the number instead of the string"),
    "MBM701": ("display-only", frozenset(), "memory suggestions change the run"),
    "MBM702": ("display-only", frozenset(), "memory suggestions change the run"),
}


def test_every_fixable_rule_has_an_entry() -> None:
    fixable = {r.code for r in all_rules() if r.fix_applicability}
    assert fixable == set(SAFETY)


def _effective(code: str, yaml: str | None, settings: dict[str, Any], tmp: Path) -> dict[tuple[str, tuple[str, ...]], dict[str, Any]]:
    """Every recipe's effective fields (after Bridge's runtime rewrites), by (function, overrides)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "recipe.py").write_text(code, encoding="utf-8")
    paths = ["recipe.py"]
    if yaml is not None:
        (tmp / "override.yaml").write_text(yaml, encoding="utf-8")
        paths.append("override.yaml")
    old = os.getcwd()
    os.chdir(tmp)
    try:
        run = resolve_paths(paths, parse_settings(dict(settings), None), ResolveOptions())
    finally:
        os.chdir(old)
    return {(r.function, tuple(r.overrides)): {p: f.value for p, f in r.fields.items()} for r in run.recipes}


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (``False`` is not ``0``: an env var becomes 'False' or '0')."""
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def _diff(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {p for p in before.keys() | after.keys() if not _same(before.get(p, "<absent>"), after.get(p, "<absent>"))}


@pytest.mark.parametrize("code", sorted(SAFETY))
def test_fix_class_holds_on_the_run(code: str, tmp_path: Path) -> None:
    cls, unread, why = SAFETY[code]
    rule = get_rule(code)
    assert rule is not None
    assert rule.fix_applicability == cls, why
    assert rule.fix_safety, f"{code}: the docs must say why the fix is {cls}"
    if cls == "display-only":
        return
    checked = 0
    for i, ex in enumerate(rule.invalid):
        run = lint_source_run(ex.code, yaml=ex.yaml, settings=parse_settings(dict(ex.settings), None))
        fixes = [d.fix for d in run.diagnostics if d.code == code and d.fix is not None and d.fix.edits]
        if not fixes:
            continue
        assert all(f.applicability == cls for f in fixes), [f.applicability for f in fixes]
        texts = {p: s.text for p, s in run.sources.items()}
        by_path: dict[str, list[Edit]] = {}
        for fx in fixes:
            for e in fx.edits:
                by_path.setdefault(e.path, []).append(e)
        fixed = {p: apply_edits(t, by_path.get(p, [])) for p, t in texts.items()}
        yaml_name = next((p for p in texts if p.endswith((".yaml", ".yml"))), None)
        before = _effective(texts["recipe.py"], texts.get(yaml_name) if yaml_name else None, ex.settings,
                            tmp_path / f"before{i}")
        after = _effective(fixed["recipe.py"], fixed.get(yaml_name) if yaml_name else None, ex.settings,
                           tmp_path / f"after{i}")
        assert before.keys() == after.keys()
        changed = set().union(*(_diff(before[k], after[k]) for k in before))
        if cls == "safe":
            assert changed <= unread, f"{code}: a safe fix changed {sorted(changed - unread)} ({why})"
        else:
            # The change is in the effective config, or it is the crash itself: the config Bridge would
            # have trained with can be the same (MBM402: the flag sync comes after the assert).
            gone = not any(d.code == code for d in lint_source_run(
                fixed["recipe.py"], yaml=fixed.get(yaml_name) if yaml_name else None,
                settings=parse_settings(dict(ex.settings), None)).diagnostics)
            stops = any(s.behaviour in ("raise", "assert", "runtime-crash") for s in rule.sources)
            assert changed or (stops and gone), f"{code}: an unsafe fix left the run as it was; is it safe? ({why})"
        checked += 1
    assert checked, f"{code}: no INVALID example produced a fix to check"
