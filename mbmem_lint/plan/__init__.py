"""``mbmem-lint plan``: the ways to make a recipe fit, each re-resolved and checked like a user's change,
ranked by a first-order step-time model.

    plan_recipe(recipe, settings, options) -> PlanResult     one resolved recipe (other tools call this)
    plan_path(path, settings, options, ...) -> list[...]     every recipe of FILE[::FUNCTION] (the CLI)

Modules: ``knobs`` (knob names, paths, a knob assignment as config values), ``constraints`` (what
Bridge/MCore reject, as cheap checks), ``cost`` (the step-time model), ``hardware`` (GPU compute and
interconnect figures, calibration), ``current`` (the recipe read as a knob assignment), ``session``
(re-resolving under --set), ``search``, ``render``, ``types``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mbmem_lint.plan.types import PlanCandidate, PlanOptions, PlanResult

if TYPE_CHECKING:
    from mbmem_lint.diagnostics import Diagnostic
    from mbmem_lint.plan.session import RecipeKey, RecipeSession
    from mbmem_lint.resolve.resolved import ResolvedRecipe
    from mbmem_lint.settings import Settings

__all__ = ["PlanCandidate", "PlanError", "PlanOptions", "PlanResult", "plan_path", "plan_recipe"]


class PlanError(Exception):
    """A recipe that cannot be planned (unknown model shape, no estimate); the message says why."""

    def __init__(self, recipe: str, reason: str) -> None:
        super().__init__(f"{recipe}: {reason}")
        self.recipe = recipe
        self.reason = reason


def plan_recipe(recipe: ResolvedRecipe, settings: Settings, options: PlanOptions) -> PlanResult:
    """Plan one resolved recipe: its file (and YAML override files) are resolved again, with every
    candidate's changes as ``--set`` items after ``options.set_items``."""
    from mbmem_lint.plan.session import SET_PATH, RecipeKey, RecipeSession

    yaml = [p for p in recipe.overrides if p != SET_PATH]
    session = RecipeSession([recipe.path, *yaml], settings, gpu=options.gpu, world_size=options.world_size,
                            function=recipe.function,
                            recipe_ref=f"{recipe.path}::{recipe.function}" if yaml else None)
    return _plan(session, RecipeKey.of(recipe), settings, options)


def plan_path(path: str, settings: Settings, options: PlanOptions, *, function: str | None = None,
              recipe_ref: str | None = None, diagnostics: list[Diagnostic] | None = None) -> list[PlanResult | PlanError]:
    """Plan every recipe of ``path`` (a recipe file, or YAML override files with ``recipe_ref``), or only
    ``function``; the files' own problems (parse errors, unpaired overrides) go to ``diagnostics``. Raises
    :class:`~mbmem_lint.discover.files.MissingPathError` for a missing path."""
    from mbmem_lint.plan.session import RecipeKey, RecipeSession

    session = RecipeSession([path], settings, gpu=options.gpu, world_size=options.world_size, function=function,
                            recipe_ref=recipe_ref)
    out: list[PlanResult | PlanError] = []
    recipes = session.resolve_all(options.set_items)
    if diagnostics is not None:
        diagnostics.extend(session.diagnostics)
    for r in recipes:
        out.append(_plan_or_error(session, RecipeKey.of(r), settings, options, f"{r.path}::{r.function}"))
    return out


def _plan_or_error(session: RecipeSession, key: RecipeKey, settings: Settings, options: PlanOptions,
                   name: str) -> PlanResult | PlanError:
    from mbmem_lint.estimate.types import EstimateUnavailable

    try:
        return _plan(session, key, settings, options)
    except EstimateUnavailable as exc:
        missing = f" ({', '.join(exc.missing_fields)})" if exc.missing_fields else ""
        return PlanError(name, f"estimate unavailable: {exc.reason}{missing}")


def _plan(session: RecipeSession, key: RecipeKey, settings: Settings, options: PlanOptions) -> PlanResult:
    from mbmem_lint.plan.search import Planner

    return Planner(session, key, settings, options).run()
