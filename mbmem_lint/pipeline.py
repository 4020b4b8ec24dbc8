"""discover → parse → resolve → check → (estimate inside the capacity rules) → fix → report.

The CLI is a thin layer over :func:`run_check`; tests use :func:`lint_source`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mbmem_lint.diagnostics import SEVERITY_RANK, Diagnostic
from mbmem_lint.discover.files import Discovered, discover
from mbmem_lint.parse.override_types import OverrideFile
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions, Resolver
from mbmem_lint.resolve.versions import BridgeData
from mbmem_lint.settings import Settings
from mbmem_lint.sources import SourceFile, Sources


@dataclass
class CheckRun:
    """A check run's outcome: findings, the sources they point into, and (when kept) the recipes."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    recipes: list[ResolvedRecipe] = field(default_factory=list)
    sources: Sources = field(default_factory=dict)
    overrides: list[OverrideFile] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    functions_seen: int = 0
    # Per-recipe memory estimates as JSON dicts (``want_estimates``), in a stable order.
    estimates: list[dict[str, Any]] = field(default_factory=list)
    # The Megatron Bridge data the run linted against (reports record it).
    bridge: BridgeData | None = None


EstimateRow = tuple[tuple[str, str, list[str]], dict[str, Any]]  # (sort key, estimate JSON)
PerFile = dict[str, tuple[list[Diagnostic], set[str]]]  # recipe file -> (its findings, its dependencies)


def recipe_estimates(recipes: list[ResolvedRecipe]) -> list[EstimateRow]:
    """The memory estimate of each recipe whose shape and GPU are known, as JSON, with a sort key
    (recipe path, function, applied override files) that orders them the same in every kind of run."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.types import EstimateUnavailable

    out: list[EstimateRow] = []
    for r in recipes:
        try:
            out.append(((r.path, r.function, list(r.overrides)), estimate_recipe(r).to_json()))
        except (EstimateUnavailable, UnknownGpuError):
            continue
    return out


def sorted_estimates(rows: list[EstimateRow]) -> list[dict[str, Any]]:
    return [est for _key, est in sorted(rows, key=lambda row: row[0])]


def _looks_like_override(f: OverrideFile) -> bool:
    """A YAML file found by walking a folder is an override file only when it pairs with a recipe
    or its top-level keys are ConfigContainer sections (not a CI workflow or a model card)."""
    if f.recipe_ref:
        return True
    from mbmem_lint.resolve.schema import section_keys

    hits = section_keys(e.path for e in f.entries)
    return hits is not None and bool(hits) and all(hits)


PARALLEL_MIN_FILES = 48  # below this, process start-up costs more than it saves


def _jobs(n_files: int) -> int:
    env = os.environ.get("MBMEM_LINT_JOBS")
    if not hasattr(os, "fork"):
        return 1  # workers are forked (mbmem_lint/parallel.py)
    if env is not None:
        try:
            return max(1, int(env))
        except ValueError:
            return 1
    if n_files < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def select_bridge_data(settings: Settings, options: ResolveOptions) -> BridgeData:
    """Choose the Megatron Bridge data of a run (:mod:`mbmem_lint.resolve.versions`) and make it the
    active data of this process; ``VersionError`` for a bad version or source tree."""
    from mbmem_lint.resolve import versions
    from mbmem_lint.settings import cache_root

    data = versions.select(options.megatron_bridge_version, options.megatron_bridge_src,
                           settings.megatron_bridge_version, settings.megatron_bridge_src,
                           settings.root, cache_root(settings) / "bridge-src",
                           option_source=options.megatron_bridge_source)
    versions.activate(data)
    return data


def resolve_paths(paths: list[str], settings: Settings, options: ResolveOptions) -> CheckRun:
    """discover → parse → resolve (no rules): the recipes with their effective configs."""
    bridge = select_bridge_data(settings, options)
    run = _resolve_found(discover(paths, settings), settings, options)
    run.bridge = bridge
    return run


def filter_tool_diagnostics(diags: list[Diagnostic], settings: Settings) -> list[Diagnostic]:
    """select/ignore/per-file-ignores/severity for tool diagnostics (MBM0xx) produced outside the rule
    engine, with the engine's selector matching (code, prefix or name)."""
    from mbmem_lint.check.engine import matches_any

    out = []
    for d in diags:
        if settings.select and not matches_any(d, settings.select):
            continue
        if matches_any(d, list(settings.ignore) + settings.ignored_codes_for(d.location.path)):
            continue
        sev = settings.severity.get(d.code) or settings.severity.get(d.name)
        if sev in SEVERITY_RANK:
            d.severity = sev  # type: ignore[assignment]
        out.append(d)
    return out


def run_check(paths: list[str], settings: Settings, options: ResolveOptions, *,
              need_edits: bool = True, want_estimates: bool = False) -> CheckRun:
    """``need_edits``: fix edits will be shown or applied (JSON/SARIF output, --fix); otherwise a
    parallel run does not compute them in its workers (the terminal shows only the fix's hint).
    ``want_estimates``: also estimate every recipe (``CheckRun.estimates``, for the GitHub and
    Markdown summaries), file by file as its recipes are checked, in the workers of a parallel run."""
    bridge = select_bridge_data(settings, options)
    run = _run_check(paths, settings, options, need_edits, want_estimates)
    run.bridge = bridge
    return run


def _run_check(paths: list[str], settings: Settings, options: ResolveOptions, need_edits: bool,
               want_estimates: bool) -> CheckRun:
    import dataclasses

    from mbmem_lint.check.engine import run_checks

    options = dataclasses.replace(options, lone_overrides=True)  # an unpaired YAML file is checked alone
    found = discover(paths, settings)
    if settings.cache and not want_estimates:  # the results cache holds findings, not estimates
        return _run_check_cached(found, settings, options, need_edits)
    jobs = _jobs(len(found.python))
    if jobs > 1:
        return _run_check_parallel(found, settings, options, jobs, need_edits, want_estimates)
    streamed: list[Diagnostic] = []
    rows: list[EstimateRow] = []
    run = _resolve_found(found, settings, options,
                         on_file=file_checker(settings, found, streamed, rows if want_estimates else None))
    findings = streamed + run_checks(run.recipes, run.overrides, settings, run.sources)
    if want_estimates:
        rows += recipe_estimates(run.recipes)  # recipes paired with override files
        run.estimates = sorted_estimates(rows)
    tool = filter_tool_diagnostics(run.diagnostics, settings)
    run.diagnostics = merge_findings(tool + findings)
    return run


def file_checker(settings: Settings, found: Discovered, out: list[Diagnostic],
                 estimates: list[EstimateRow] | None = None) -> Any:
    """An ``on_file`` callback for the resolver: check each file's recipes as soon as they are
    resolved, into ``out`` (and estimate them into ``estimates``), then let them go (a sequential
    run and each parallel task use it)."""
    from mbmem_lint.check.engine import run_checks

    def on_file(path: str, recipes: list[ResolvedRecipe]) -> None:
        out.extend(run_checks(recipes, [], settings, found.sources))
        if estimates is not None:
            estimates.extend(recipe_estimates(recipes))

    return on_file


def file_recorder(settings: Settings, found: Discovered, dependencies: Callable[[str], set[str]],
                  out: PerFile) -> Any:
    """An ``on_file`` callback for results-cache runs (one process, or each parallel task): each
    file's findings and the linted files they depend on, into ``out``."""
    from mbmem_lint.check.engine import run_checks

    def on_file(path: str, recipes: list[ResolvedRecipe]) -> None:
        # Imports run while the file's recipes resolve, so its dependencies are complete here.
        deps = dependencies(path)
        out[path] = (run_checks(recipes, [], settings, found.sources), deps)

    return on_file


def _run_check_cached(found: Discovered, settings: Settings, options: ResolveOptions,
                      need_edits: bool) -> CheckRun:
    """Check with the results cache: files whose findings (and dependencies) are cached are not
    resolved again; the others are, with every file still importable."""
    from mbmem_lint.results_cache import ResultsCache
    from mbmem_lint.settings import safe_resolve

    cache = ResultsCache.for_run(settings, options)
    texts = {str(safe_resolve(s.path)): s.text for s in found.python}
    cached: list[Diagnostic] = []
    stale: set[str] = set()
    for src in found.python:
        hit = cache.lookup(src.path, texts, need_edits=need_edits)
        if hit is None:
            stale.add(src.path)
        else:
            cached.extend(hit)
    jobs = _jobs(len(stale))
    if jobs > 1:
        run, per_file, tool, paired = _check_stale_parallel(found, settings, options, jobs, need_edits, stale)
    else:
        run, per_file, tool, paired = _check_stale(found, settings, options, stale)
    fresh: list[Diagnostic] = []
    for path in sorted(stale):
        diags, deps = per_file.get(path, ([], {path}))
        diags = diags + [d for d in tool if d.location.path == path]
        texts_now = {str(safe_resolve(p)): run.sources[p].text if p in run.sources else "" for p in deps}
        cache.store(path, texts_now, diags, with_edits=need_edits)
        fresh.extend(diags)
    fresh += paired
    fresh += [d for d in tool if d.location.path not in stale]
    run.diagnostics = merge_findings(cached + fresh)
    return run


def _check_stale(found: Discovered, settings: Settings, options: ResolveOptions,
                 stale: set[str]) -> tuple[CheckRun, PerFile, list[Diagnostic], list[Diagnostic]]:
    """One process: (run, findings by file, tool diagnostics, YAML-paired findings) for ``stale``."""
    from mbmem_lint.check.engine import run_checks

    resolver_holder: list[Resolver] = []
    per_file: PerFile = {}
    on_file = file_recorder(settings, found, lambda path: resolver_holder[0].project.dependencies(path), per_file)
    run = _resolve_found(found, settings, options, own=stale, resolver_out=resolver_holder, on_file=on_file)
    paired = run_checks(run.recipes, run.overrides, settings, run.sources)
    return run, per_file, filter_tool_diagnostics(run.diagnostics, settings), paired


def _check_stale_parallel(found: Discovered, settings: Settings, options: ResolveOptions, jobs: int,
                          need_edits: bool, stale: set[str]
                          ) -> tuple[CheckRun, PerFile, list[Diagnostic], list[Diagnostic]]:
    """:func:`_check_stale` on forked workers (a cold cache, or many changed files)."""
    from mbmem_lint.parallel import run_parallel

    run = CheckRun(sources=dict(found.sources))
    per_file: PerFile = {}
    tool = filter_tool_diagnostics(list(found.diagnostics), settings)
    paired: list[Diagnostic] = []
    for part in run_parallel(found, settings, options, jobs, need_edits, only=stale):
        run.failed.extend(part.failed)
        run.functions_seen += part.functions_seen
        per_file.update(part.per_file)
        tool.extend(part.diagnostics)
        paired.extend(part.paired)
    # A module both workers imported reports its parse problems twice.
    return run, per_file, merge_findings(tool), paired


def merge_findings(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Findings from several workers or cache entries: one per (code, location, message), the same
    one whichever run produced it (the smallest recipe name), sorted."""
    chosen: dict[tuple[object, ...], Diagnostic] = {}
    for d in diagnostics:
        key = (d.code, d.location.path, d.location.line, d.location.column, d.message)
        prev = chosen.get(key)
        if prev is None or (d.function or "") < (prev.function or ""):
            chosen[key] = d
    return sorted(chosen.values(), key=lambda d: d.sort_key())


def load_overrides(found: Discovered) -> tuple[list[OverrideFile], list[Diagnostic]]:
    """The discovered YAML files that are override files, and their parse diagnostics."""
    overrides: list[OverrideFile] = []
    diags: list[Diagnostic] = []
    if found.yaml:  # the YAML parser (and ruamel) load only for runs that have YAML files
        from mbmem_lint.parse.yaml_overrides import load_override_file
    for src in found.yaml:
        f = load_override_file(src.path, src.text)
        if src.path in found.explicit_yaml or _looks_like_override(f):
            overrides.append(f)
            diags.extend(f.diagnostics)
    return overrides, diags


def _run_check_parallel(found: Discovered, settings: Settings, options: ResolveOptions, jobs: int,
                        need_edits: bool, want_estimates: bool) -> CheckRun:
    """Check on ``jobs`` forked workers (:mod:`mbmem_lint.parallel`); findings come back, de-duplicated."""
    from mbmem_lint.parallel import run_parallel

    run = CheckRun(sources=dict(found.sources))
    everything = filter_tool_diagnostics(list(found.diagnostics), settings)
    rows: list[EstimateRow] = []
    for part in run_parallel(found, settings, options, jobs, need_edits, want_estimates):
        run.failed.extend(part.failed)
        run.functions_seen += part.functions_seen
        everything.extend(part.diagnostics)
        rows.extend(part.estimates)
    run.diagnostics = merge_findings(everything)
    run.estimates = sorted_estimates(rows)
    return run


def _resolve_found(found: Discovered, settings: Settings, options: ResolveOptions,
                   own: set[str] | None = None,
                   resolver_out: list[Resolver] | None = None,
                   on_file: Any = None) -> CheckRun:
    run = CheckRun(sources=dict(found.sources))
    run.diagnostics.extend(found.diagnostics)
    overrides, diags = load_overrides(found)
    run.diagnostics.extend(diags)
    resolver = Resolver(settings, options)
    if resolver_out is not None:
        resolver_out.append(resolver)
    result = resolver.resolve_all(found.python, overrides, own=own, on_file=on_file)
    run.diagnostics.extend(result.diagnostics)
    run.recipes = result.recipes
    run.overrides = overrides
    run.failed = result.failed
    run.functions_seen = result.functions_seen
    return run


def exit_code(diagnostics: list[Diagnostic], settings: Settings) -> int:
    threshold = SEVERITY_RANK[settings.fail_level]
    return 1 if any(SEVERITY_RANK[d.severity] >= threshold for d in diagnostics) else 0


def lint_source(
    source_text: str,
    *,
    filename: str = "recipe.py",
    yaml: str | None = None,
    settings: Settings | None = None,
    gpu: str | None = None,
    world_size: int | None = None,
    base: str | None = None,
) -> list[Diagnostic]:
    """Lint one recipe snippet (and optionally a YAML override paired with every recipe in it).

    Files are written to a temporary folder so the run is the real one; paths in the diagnostics
    are the bare file names. ``base``: the same file at a base revision (``check --base``).
    """
    return lint_source_run(source_text, filename=filename, yaml=yaml, settings=settings, gpu=gpu,
                           world_size=world_size, base=base).diagnostics


def lint_source_run(
    source_text: str,
    *,
    filename: str = "recipe.py",
    yaml: str | None = None,
    settings: Settings | None = None,
    gpu: str | None = None,
    world_size: int | None = None,
    base: str | None = None,
) -> CheckRun:
    settings = settings or Settings()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mbmem-") as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            Path(filename).write_text(source_text, encoding="utf-8")
            paths = [filename]
            if yaml is not None:
                yaml_text = yaml
                if "mbmem-lint: recipe=" not in yaml_text:
                    yaml_text = f"# mbmem-lint: recipe={filename}::*\n" + yaml_text
                Path("override.yaml").write_text(yaml_text, encoding="utf-8")
                paths.append("override.yaml")
            options = ResolveOptions(gpu=gpu, world_size=world_size)
            if base is not None:
                from mbmem_lint.regression import build_base_index

                with tempfile.TemporaryDirectory(prefix="mbmem-base-") as base_dir:
                    Path(base_dir, filename).write_text(base, encoding="utf-8")
                    settings.base = build_base_index(Path(base_dir), Path(tmp), [filename], settings, options, "base")
            return run_check(paths, settings, options)
        finally:
            os.chdir(old)


__all__ = ["CheckRun", "SourceFile", "exit_code", "lint_source", "lint_source_run", "resolve_paths", "run_check"]
