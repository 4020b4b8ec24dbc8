"""Memory regressions between a base revision and the working tree (``check --base``, ``estimate --base``).

The base side's recipes are resolved from the files as they were at the revision (:mod:`mbmem_lint.gitrev`
writes them to a temporary folder) and estimated on the same target; the head side is the ordinary
run. Rule MBM703 (``rules/memory.py``) compares a head recipe with its base twin: when the peak stage
grew by more than ``regression-threshold``, each changed value the estimate reads is put back to its
base value in a re-estimate, and the lines whose change accounts for the growth get the finding.

Only recipes the change can affect are resolved at the base: those in changed files, or all of them
when a changed Python file is not itself a linted recipe file (a helper they may import) or a
``pyproject.toml`` changed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mbmem_lint.estimate.types import Estimate
from mbmem_lint.records import dataclass, field
from mbmem_lint.report.common import fmt_gib
from mbmem_lint.resolve.resolved import ResolvedRecipe, is_known
from mbmem_lint.settings import Settings

GIB = 1024**3
RecipeKey = tuple[str, str, tuple[str, ...]]  # (path relative to the repository, function, override files)


@dataclass
class BaseRecipe:
    """A recipe as it was at the base revision: its estimate and the values the estimate read."""

    key: RecipeKey
    estimate: Estimate | None
    inputs: dict[str, Any] = field(default_factory=dict)
    unavailable: str | None = None


@dataclass
class BaseIndex:
    """The base side of a comparison: the revision and its estimated recipes, by repository path."""

    label: str  # "origin/main (1a2b3c4)"
    repo: Path  # repository root of the working tree (head recipes are keyed relative to it)
    threshold: float
    recipes: dict[RecipeKey, BaseRecipe] = field(default_factory=dict)

    def key_for(self, recipe: ResolvedRecipe) -> RecipeKey | None:
        return _recipe_key(recipe, self.repo)

    def lookup(self, recipe: ResolvedRecipe) -> BaseRecipe | None:
        key = self.key_for(recipe)
        return self.recipes.get(key) if key is not None else None


def _recipe_key(recipe: ResolvedRecipe, root: Path) -> RecipeKey | None:
    """(file, function, override files) relative to ``root``; None for a recipe outside it."""
    from mbmem_lint.gitrev import relative_to_root

    rel = relative_to_root(recipe.path, root)
    if rel is None:
        return None
    return rel, recipe.function, tuple(relative_to_root(o, root) or o for o in recipe.overrides)


def _component_key(name: str) -> str:
    """A component's name without the figures in it ("activations (32 layers x 4 microbatches)")."""
    return name.split(" (")[0].strip()


def _bytes_by_component(est: Estimate) -> dict[str, int]:
    """The peak stage's bytes per component name (figures dropped, so head and base names match)."""
    out: dict[str, int] = {}
    for c in est.peak.components:
        out[_component_key(c.name)] = out.get(_component_key(c.name), 0) + c.bytes
    return out


def grown_components(before: Estimate, after: Estimate) -> list[tuple[str, int]]:
    """(component, growth) of the peak stage, largest first (components only on the head side count whole)."""
    old, new = _bytes_by_component(before), _bytes_by_component(after)
    out = [(k, v - old.get(k, 0)) for k, v in new.items() if v - old.get(k, 0) > 0]
    return sorted(out, key=lambda kv: -kv[1])


def build_base_index(tree: Path, repo: Path, rel_paths: list[str], head_settings: Settings, options: Any,
                     label: str) -> BaseIndex:
    """Resolve and estimate the recipes under ``rel_paths`` (relative to the repository) in ``tree`` (the
    revision's files), with the revision's own ``[tool.mbmem-lint]`` and the run's target options."""
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.types import EstimateUnavailable
    from mbmem_lint.fingerprint import estimate_inputs
    from mbmem_lint.pipeline import resolve_paths
    from mbmem_lint.settings import SettingsError, load_settings

    index = BaseIndex(label, repo, head_settings.regression_threshold)
    paths = [str(tree / p) for p in rel_paths if (tree / p).exists()]
    if not paths:
        return index
    try:
        settings = load_settings(Path(paths[0]))
    except SettingsError:
        settings = Settings()
    settings.cache = False
    try:
        run = resolve_paths(paths, settings, options)
    except MissingPathError:
        return index
    for r in run.recipes:
        key = _recipe_key(r, tree)
        if key is None:
            continue
        try:
            est = estimate_recipe(r, gpu=options.gpu, world_size=options.world_size)
            inputs = estimate_inputs(r, options.world_size)
            index.recipes[key] = BaseRecipe(key, est, inputs)
        except (EstimateUnavailable, UnknownGpuError) as exc:
            index.recipes[key] = BaseRecipe(key, None, unavailable=str(exc))
    return index


def base_index_for_revision(paths: list[str], settings: Settings, options: Any, rev: str, *,
                            only_changed: bool = True) -> BaseIndex:
    """The :class:`BaseIndex` of ``rev`` for a run over ``paths`` (``RevisionError`` for a bad revision).
    ``only_changed``: estimate only the recipes the change can affect (``check``); else all of them."""
    from mbmem_lint.gitrev import changed_paths, materialize, relative_to_root, repo_root, resolve_revision

    repo = repo_root(Path(paths[0]).resolve() if paths else Path.cwd())
    commit = resolve_revision(repo, rev)
    label = f"{rev} ({commit[:7]})"
    rel_paths = []
    for p in paths:
        rel = relative_to_root(p, repo)
        if rel is not None:
            rel_paths.append(rel if rel else ".")
    changed = changed_paths(repo, commit) if only_changed else set()
    interesting = {c for c in changed if c.endswith((".py", ".yaml", ".yml", "pyproject.toml"))}
    if only_changed and not interesting:
        return BaseIndex(label, repo, settings.regression_threshold)

    def under(path: str) -> bool:
        return any(r in (".", "") or path == r or path.startswith(r.rstrip("/") + "/") for r in rel_paths)

    helpers_changed = any(c.endswith(".py") and not under(c) for c in interesting) or any(
        c.endswith("pyproject.toml") for c in interesting)
    targets = rel_paths if helpers_changed or not only_changed else sorted(c for c in interesting if under(c))
    with tempfile.TemporaryDirectory(prefix="mbmem-base-") as tmp:
        tree = Path(tmp)
        materialize(repo, commit, tree, lambda p: p.endswith((".py", ".yaml", ".yml", "pyproject.toml")))
        index = build_base_index(tree, repo, targets, settings, options, label)
    return index


def _show(value: Any) -> str:
    text = repr(value) if is_known(value) else "unknown"
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class Regression:
    """A recipe whose peak stage grew beyond the threshold, and the changed values that explain it."""

    before: Estimate
    after: Estimate
    growth: float
    components: list[tuple[str, int]]
    causes: list[tuple[str, Any, Any, int]]  # (path, base value, head value, peak bytes it accounts for)
    changed: list[str]  # every changed value the estimate reads


def find_regression(recipe: ResolvedRecipe, base: BaseRecipe, threshold: float) -> Regression | None:
    """The regression of ``recipe`` against its base twin, None when the peak grew by ``threshold`` or less."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.types import EstimateUnavailable
    from mbmem_lint.fingerprint import _canonical, estimate_inputs

    if base.estimate is None:
        return None
    try:
        after = estimate_recipe(recipe)
    except EstimateUnavailable:
        return None
    before = base.estimate
    if before.peak_bytes <= 0:
        return None
    growth = (after.peak_bytes - before.peak_bytes) / before.peak_bytes
    if growth <= threshold:
        return None
    head_inputs = estimate_inputs(recipe)
    changed = sorted(p for p in set(head_inputs) | set(base.inputs)
                     if _canonical(head_inputs.get(p)) != _canonical(base.inputs.get(p)))
    causes: list[tuple[str, Any, Any, int]] = []
    for path in changed:
        old = base.inputs.get(path)
        if not is_known(old):
            continue
        try:
            reverted = estimate_recipe(recipe, overrides={path: old})
        except EstimateUnavailable:
            continue
        saved = after.peak_bytes - reverted.peak_bytes
        if saved > 0:
            causes.append((path, old, head_inputs.get(path), saved))
    causes.sort(key=lambda c: -c[3])
    return Regression(before, after, growth, grown_components(before, after), causes, changed)


def regression_message(reg: Regression, label: str, threshold: float, line_causes: list[tuple[str, Any, Any, int]]) -> str:
    before, after = reg.before, reg.after
    head = (f"memory regression: the peak stage needs {fmt_gib(after.peak_bytes)} per rank on {after.gpu.name} (stage "
            f"{after.peak_stage}), {fmt_gib(before.peak_bytes)} at {label} (stage {before.peak_stage}): "
            f"+{reg.growth * 100:.1f}%, above the {threshold * 100:g}% threshold")
    if line_causes:
        head += "; changed here: " + ", ".join(
            f"{p} {_show(old)} -> {_show(new)} (+{fmt_gib(saved)} of the peak)" for p, old, new, saved in line_causes)
    elif reg.changed:
        head += "; no single changed value explains it alone (changed: " + ", ".join(reg.changed[:6]) + ")"
    if reg.components:
        head += "; grew: " + ", ".join(f"{name} +{fmt_gib(b)}" for name, b in reg.components[:3])
    return head


def regression_rows(index: BaseIndex, estimates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Before/after rows of the compared recipes for the job summary (head estimates as JSON dicts)."""
    from mbmem_lint.gitrev import relative_to_root

    rows: list[dict[str, Any]] = []
    for est in estimates:
        path, _, function = str(est.get("recipe", "")).rpartition("::")
        rel = relative_to_root(path, index.repo) if path else None
        if rel is None:
            continue
        base = next((b for k, b in index.recipes.items() if k[0] == rel and k[1] == function), None)
        if base is None or base.estimate is None:
            continue
        before, after = base.estimate.peak_bytes, int(est.get("peak_bytes") or 0)
        rows.append({"recipe": f"{rel}::{function}", "gpu": est.get("gpu", {}).get("name"), "before_bytes": before,
                     "after_bytes": after, "growth": (after - before) / before if before else None,
                     "regression": before > 0 and (after - before) / before > index.threshold})
    return rows


def base_estimates(index: BaseIndex, estimated: list[tuple[ResolvedRecipe, Estimate]]
                   ) -> dict[int, dict[str, Any] | None]:
    """``estimate --base``: for each head recipe (by ``id``) and its estimate, the base estimate as JSON with
    the revision and the peak's growth; None when the recipe did not exist (or could not be estimated) at
    the revision."""
    out: dict[int, dict[str, Any] | None] = {}
    for r, head in estimated:
        b = index.lookup(r)
        if b is None or b.estimate is None:
            out[id(r)] = None
            continue
        after = head.peak_bytes
        before = b.estimate.peak_bytes
        out[id(r)] = {"revision": index.label, **b.estimate.to_json(),
                      "growth": (after - before) / before if before else None}
    return out


def base_text(base: dict[str, Any] | None, label: str) -> str:
    if base is None:
        return f"base revision {label}: the recipe did not exist there (or could not be estimated)"
    growth = base.get("growth")
    change = f" ({growth * 100:+.1f}%)" if growth is not None else ""
    return (f"base revision {base['revision']}: peak stage {base['peak_stage']}, {base['peak_bytes'] / GIB:.2f} GiB"
            f"{change} now")
