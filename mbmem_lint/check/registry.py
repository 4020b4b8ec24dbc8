"""The rule registry: every rule of the catalog (``rules/``, installed as ``mbmem_lint.rules``)."""

from __future__ import annotations

import functools
import importlib

from mbmem_lint.check.rule import FAMILIES, Rule

RULE_MODULES = (
    "parallel",
    "recompute_offload",
    "cuda_graphs_env",
    "precision_optimizer",
    "peft",
    "schema_overrides",
    "memory",
)

# Tool/input diagnostics (0xx): emitted by the engine and the parsers, not by catalog rules.
TOOL_CODES: dict[str, tuple[str, str]] = {
    "MBM001": ("rule-crashed", "A rule raised an exception on this file; linting continued without it."),
    "MBM007": ("unpaired-override", "The recipe a YAML override file names was not found; the file is checked on "
                                    "its own values, as if it named none."),
    "MBM008": ("override-file-unpaired",
               "A YAML override file names no recipe (no `# mbmem-lint: recipe=FILE::FUNCTION` first line, no "
               "[tool.mbmem-lint.recipes] entry, no --recipe), so it is checked on its own values: a partial config "
               "in which everything the file does not set is unknown. Unknown keys (with did-you-mean), value types, "
               "`~key` deletions, `_target_` classes and combinations the file decides alone (cpu_offloading with "
               "pipeline_model_parallel_size: 4) are reported; checks that need the recipe (its values, the model "
               "shape, memory) run once the file is paired. Info, once per file."),
}


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Rule, ...]:
    """The catalog, sorted by code. Its consistency (:func:`validate_catalog`) is a test, not a start-up
    cost: every check loads the catalog."""
    rules: list[Rule] = []
    for mod in RULE_MODULES:
        module = importlib.import_module(f"mbmem_lint.rules.{mod}")
        rules.extend(module.RULES)
    return tuple(sorted(rules, key=lambda r: r.code))


def validate_catalog(rules: list[Rule] | tuple[Rule, ...]) -> None:
    """Each rule well formed (:meth:`Rule.validate`) and every code and name unique; raises ValueError."""
    codes: set[str] = set()
    names: set[str] = set()
    for r in rules:
        r.validate()
        if r.code in codes or r.name in names:
            raise ValueError(f"duplicate rule code or name: {r.code} {r.name}")
        codes.add(r.code)
        names.add(r.name)


def all_rules() -> list[Rule]:
    return list(_load())


def get_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    for r in _load():
        if r.code == key.upper() or r.name == key.lower():
            return r
    return None


FIX_CLASSES = ("Fix classes, as in ruff: *safe* leaves the training run exactly as it was (the code now says what "
               "happens); *unsafe* changes what the run does, even when it is what the recipe meant (applied with "
               "`--unsafe-fixes`); *display-only* is a suggestion, shown but never applied. A fix that edits a helper "
               "other recipes also call names them and is never safe.")


def _indent_code(text: str) -> str:
    """An example for the docs: the test marker ``# <-`` reads as what it means."""
    return text.rstrip("\n").replace("  # <-", "  # <- flagged here")


def rule_doc_markdown(rule: Rule) -> str:
    """The rule's documentation page (ruff-style sections), generated from the rule object."""
    lines = [f"# {rule.code} {rule.name}", ""]
    fix = "Fix available" if rule.fix_applicability else "No fix"
    lines += [f"**Family:** {rule.family} · **Default severity:** `{rule.severity}` · **{fix}**", ""]
    lines += ["## What it does", "", rule.summary, ""]
    lines += ["## Why is this bad?", "", rule.rationale, ""]
    lines += ["## Example", ""]
    for ex in rule.invalid[:2]:
        lines += ["Flagged" + (f" ({ex.note})" if ex.note else "") + ":", "", "```python", _indent_code(ex.code), "```", ""]
        if ex.yaml:
            lines += ["with the override:", "", "```yaml", ex.yaml.rstrip("\n"), "```", ""]
        if ex.settings:
            lines += ["with settings " + ", ".join(f"`{k} = {v!r}`" for k, v in ex.settings.items()), ""]
    for ex in rule.valid[:1]:
        lines += ["Not flagged" + (f" ({ex.note})" if ex.note else "") + ":", "", "```python", _indent_code(ex.code), "```", ""]
        if ex.yaml:
            lines += ["```yaml", ex.yaml.rstrip("\n"), "```", ""]
    lines += ["## Fix safety", ""]
    if rule.fix_applicability:
        lines += [f"**{rule.fix_applicability}**: {rule.fix_safety}", "", f"The fix: {rule.fix_description}", "",
                  FIX_CLASSES, ""]
    else:
        lines += ["No automatic fix.", ""]
    lines += ["## Source behaviour", ""]
    for s in rule.sources:
        lines += [f"- `{s.ref}` — **{s.behaviour}**: {s.what}"]
    lines += [""]
    if rule.versions or rule.bridge_since:
        lines += ["## Version applicability", ""]
        if rule.bridge_since:
            lines += [f"Applies to Megatron Bridge {rule.bridge_since} and later: {rule.bridge_note} "
                      "Against an older release (`--megatron-bridge-version`) the rule does not run.", ""]
        if rule.versions:
            lines += [rule.versions, ""]
    lines += ["## Configuration", ""]
    lines += [f"Config fields: {', '.join(f'`{f}`' for f in rule.fields)}", ""]
    lines += [
        f"Disable with `ignore = [\"{rule.code}\"]` in `[tool.mbmem-lint]`, change the severity with",
        f"`[tool.mbmem-lint.severity] {rule.code} = \"info\"`, or suppress one finding with",
        f"`# mbmem: ignore[{rule.code}]` on the reported line or on the recipe's `def` line.",
        "",
    ]
    if rule.references:
        lines += ["## References", ""] + [f"- {r}" for r in rule.references] + [""]
    return "\n".join(lines)


def list_rules_text(width: int = 100) -> str:
    """``mbmem-lint rules``: the catalog grouped by family; per rule its code, default severity,
    whether it has a fix, its name, and the summary wrapped underneath."""
    rules = _load()
    fixable = sum(1 for r in rules if r.fix_applicability)
    out: list[str] = [
        f"{len(rules)} rules ({fixable} with a fix). `mbmem-lint rule CODE` explains one; "
        "docs/rules/ has every page.",
        "",
    ]
    import textwrap  # listing rules only; not on the check path

    family = None
    for r in rules:
        if r.family != family:
            if family is not None:
                out.append("")
            family = r.family
            out.append(f"{r.code[:4]}xx  {family}")
        fix = f"fix:{r.fix_applicability}" if r.fix_applicability else ""
        out.append(f"  {r.code}  {r.severity:<7}  {fix:<12}  {r.name}")
        for line in textwrap.wrap(r.summary, max(40, width - 10)):
            out.append(f"          {line}")
    return "\n".join(out) + "\n"


def rule_json(rule: Rule) -> dict[str, object]:
    """One rule as JSON-able data (``mbmem-lint rules --format json``)."""
    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity,
        "fixable": rule.fix_applicability is not None,
        "fix_applicability": rule.fix_applicability,
        "fix_safety": rule.fix_safety or None,
        "family": rule.family,
        "summary": rule.summary,
        "fields": list(rule.fields),
        "source": [{"ref": s.ref, "behaviour": s.behaviour, "what": s.what} for s in rule.sources],
        "versions": rule.versions or None,
        "megatron_bridge_since": rule.bridge_since or None,
    }


def rules_json() -> list[dict[str, object]]:
    """``mbmem-lint rules --format json``: every rule, sorted by code, as
    ``{code, name, severity, fixable, summary, fields, source, ...}``."""
    return [rule_json(r) for r in _load()]


def explain_rule_text(code: str) -> str:
    """``mbmem-lint rule MBMxxx``: the rule's documentation. Raises KeyError for unknown codes."""
    if code.upper() in TOOL_CODES:
        name, text = TOOL_CODES[code.upper()]
        return f"# {code.upper()} {name}\n\n{text}\n"
    rule = get_rule(code)
    if rule is None:
        raise KeyError(code)
    return rule_doc_markdown(rule)


def family_titles() -> dict[str, str]:
    return dict(FAMILIES)


def wrap(text: str, width: int = 100) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
