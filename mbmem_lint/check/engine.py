"""The rule engine: run selected rules, isolate crashes, de-duplicate, apply suppressions and config.

Suppression comments (Python and YAML)::

    cfg.model.sequence_parallel = True  # mbmem: ignore[MBM108]
    def my_recipe():                     # mbmem: ignore            (whole recipe, every rule)
    # mbmem: ignore-file[MBM3]                                     (anywhere in the file; code prefixes allowed)

Codes in ``select``/``ignore``/``per-file-ignores``/suppressions are prefixes (``MBM3`` = the 3xx family)
or rule names (``env-var-bool-value``).
"""

from __future__ import annotations

import re

from mbmem_lint.check.registry import all_rules
from mbmem_lint.check.rule import Finding, Rule, RuleContext, applies_to_bridge
from mbmem_lint.diagnostics import APPLICABILITY_RANK, SEVERITY_RANK, Diagnostic, Location, Severity
from mbmem_lint.parse.override_types import OverrideFile
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.settings import Settings
from mbmem_lint.sources import SourceFile

_IGNORE_RE = re.compile(r"#\s*mbmem:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
ALL = "*"


@dataclass
class Suppressions:
    """Parsed ``# mbmem: ignore`` comments of one file: line → codes, plus file-wide codes."""

    lines: dict[int, set[str]] = field(default_factory=dict)
    file: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, text: str) -> Suppressions:
        s = cls()
        if "mbmem" not in text:  # most files: no comment to parse (one search instead of a loop over lines)
            return s
        for i, line in enumerate(text.splitlines(), start=1):
            if "mbmem" not in line:
                continue
            for m in _IGNORE_RE.finditer(line):
                codes = {c.strip() for c in (m.group("codes") or "").split(",") if c.strip()} or {ALL}
                if m.group("file"):
                    s.file |= codes
                else:
                    s.lines.setdefault(i, set()).update(codes)
        return s

    def suppresses(self, line: int, diag: Diagnostic) -> bool:
        return matches_any(diag, self.lines.get(line, set()))

    def suppresses_file(self, diag: Diagnostic) -> bool:
        return matches_any(diag, self.file)


def matches(diag_code: str, diag_name: str, selector: str) -> bool:
    sel = selector.strip()
    if sel == ALL or sel.upper() == "ALL":
        return True
    return diag_code.startswith(sel.upper()) or diag_name == sel.lower()


def matches_any(diag: Diagnostic, selectors: set[str] | list[str]) -> bool:
    return any(matches(diag.code, diag.name, s) for s in selectors)


def rule_selected(rule: Rule, settings: Settings) -> bool:
    if settings.select and not any(matches(rule.code, rule.name, s) for s in settings.select):
        return False
    return not any(matches(rule.code, rule.name, s) for s in settings.ignore)


def _to_diag(rule: Rule, f: Finding, default_loc: Location, function: str | None, settings: Settings) -> Diagnostic:
    severity: Severity = f.severity or rule.severity
    override = settings.severity.get(rule.code) or settings.severity.get(rule.name)
    if override in ("error", "warning", "info"):
        severity = override  # type: ignore[assignment]
    notes = list(f.notes)
    fix = f.fix
    if fix is not None and rule.fix_applicability is not None and (
            APPLICABILITY_RANK[fix.applicability] < APPLICABILITY_RANK[rule.fix_applicability]):
        fix.applicability = rule.fix_applicability  # a fix is never safer than its rule's class
    return Diagnostic(code=rule.code, name=rule.name, severity=severity, message=f.message,
                      location=f.location or default_loc, function=function, fields=list(f.fields),
                      fix=fix, notes=notes)


def _crash(rule: Rule, path: str, function: str | None, exc: BaseException, line: int = 1) -> Diagnostic:
    return Diagnostic(code="MBM001", name="rule-crashed", severity="warning",
                      message=f"rule {rule.code} ({rule.name}) crashed on {path}"
                              + (f"::{function}" if function else "") + f": {type(exc).__name__}: {exc}",
                      location=Location(path, line), function=function)


def _culprit(ctx: RuleContext, fields: list[str]) -> str:
    """Of the finding's fields, the one the recipe changed last (ties: the first listed)."""
    skip = ("runtime", "default", "model-table")
    best, best_i = fields[0], ctx.last_change(fields[0], skip_origins=skip)
    for p in fields[1:]:
        i = ctx.last_change(p, skip_origins=skip)
        if i > best_i:
            best, best_i = p, i
    return best


def run_rules(rules: list[Rule], recipes: list[ResolvedRecipe], overrides: list[OverrideFile], settings: Settings,
              sources: dict[str, SourceFile]) -> list[tuple[Diagnostic, ResolvedRecipe | None]]:
    """Raw diagnostics (before de-duplication and suppressions), each with its recipe."""
    out: list[tuple[Diagnostic, ResolvedRecipe | None]] = []
    for recipe in recipes:
        applied = [o for o in overrides if o.path in recipe.overrides] or overrides
        ctx = RuleContext(recipe, settings, sources, overrides=applied)
        for rule in rules:
            if rule.scope != "recipe":
                continue
            try:
                for f in rule.check(ctx):
                    default = ctx.pre_anchor(_culprit(ctx, f.fields)) if f.fields else recipe.location
                    out.append((_to_diag(rule, f, default, recipe.function or None, settings), recipe))
            except Exception as exc:  # a broken rule must not stop linting
                out.append((_crash(rule, recipe.path, recipe.function, exc, recipe.location.line), recipe))
    for of in overrides:
        ctx = RuleContext(None, settings, sources, overrides=[of], override_file=of)
        for rule in rules:
            if rule.scope != "overrides":
                continue
            try:
                for f in rule.check(ctx):
                    out.append((_to_diag(rule, f, Location(of.path, 1), None, settings), None))
            except Exception as exc:
                out.append((_crash(rule, of.path, None, exc), None))
    return out


def _dedupe(items: list[tuple[Diagnostic, ResolvedRecipe | None]]) -> list[tuple[Diagnostic, ResolvedRecipe | None]]:
    """One diagnostic per (code, location, fields, message): a helper called by many recipes reports
    once; recipes that meet the same line with different values (memory estimates) each report."""
    chosen: dict[tuple[object, ...], tuple[Diagnostic, ResolvedRecipe | None]] = {}
    for d, r in items:
        loc = d.location
        key = ((d.code, loc.path, loc.line, loc.column, tuple(d.fields), d.message) if loc.line > 0
               else (d.code, d.message))
        if d.code == "MBM001":
            key = (d.code, d.message)
        prev = chosen.get(key)
        # Keep the same one whatever the order recipes were checked in (parallel, cached runs).
        if prev is None or (d.function or "") < (prev[0].function or ""):
            chosen[key] = (d, r)
    return list(chosen.values())


class _SuppressionCache:
    def __init__(self, sources: dict[str, SourceFile]) -> None:
        self.sources = sources
        self.cache: dict[str, Suppressions] = {}

    def get(self, path: str) -> Suppressions:
        if path not in self.cache:
            src = self.sources.get(path)
            self.cache[path] = Suppressions.parse(src.text) if src else Suppressions()
        return self.cache[path]


def _suppressed(d: Diagnostic, recipe: ResolvedRecipe | None, sup: _SuppressionCache, settings: Settings) -> bool:
    loc = d.location
    s = sup.get(loc.path)
    if s.suppresses(loc.line, d) or s.suppresses_file(d):
        return True
    if loc.end_line and loc.end_line != loc.line and any(s.suppresses(ln, d) for ln in range(loc.line, loc.end_line + 1)):
        return True
    if recipe is not None:
        rs = sup.get(recipe.path)
        if rs.suppresses(recipe.location.line, d) or rs.suppresses_file(d):
            return True
    ignored = settings.ignored_codes_for(loc.path) if not loc.in_library else []
    return bool(ignored) and matches_any(d, ignored)


def run_checks(recipes: list[ResolvedRecipe], overrides: list[OverrideFile], settings: Settings,
               sources: dict[str, SourceFile], *, rules: list[Rule] | None = None) -> list[Diagnostic]:
    """Run every selected rule over ``recipes`` (and override-file rules over ``overrides``).

    Returns sorted diagnostics after de-duplication, suppression comments, ``select``/``ignore``,
    ``per-file-ignores`` and ``[severity]`` overrides. A rule whose ``bridge_since`` is newer than the
    Megatron Bridge in use does not run. Tool diagnostics (parse errors, MBM0xx other
    than MBM001) are the pipeline's: they are not produced here.
    """
    selected = [r for r in (rules if rules is not None else all_rules())
                if rule_selected(r, settings) and applies_to_bridge(r)]
    raw = _dedupe(run_rules(selected, recipes, overrides, settings, sources))
    sup = _SuppressionCache(sources)
    out: list[Diagnostic] = []
    for d, recipe in raw:
        if d.code != "MBM001" and not d.code.startswith("MBM0") and not any(r.code == d.code for r in selected):
            continue
        if d.code.startswith("MBM0") and settings.ignore and matches_any(d, settings.ignore):
            continue
        if _suppressed(d, recipe, sup, settings):
            continue
        out.append(d)
    return sorted(out, key=lambda d: d.sort_key())


def exit_code(diagnostics: list[Diagnostic], settings: Settings) -> int:
    """1 when any diagnostic is at or above ``fail-level``, else 0 (2 is for usage/config errors)."""
    threshold = SEVERITY_RANK.get(settings.fail_level, 1)
    return 1 if any(SEVERITY_RANK.get(d.severity, 0) >= threshold for d in diagnostics) else 0
