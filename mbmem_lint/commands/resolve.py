"""``mbmem-lint resolve``: the effective config of each recipe, with where each value was set."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_ERROR,
    bridge_notice,
    bridge_options,
    echo,
    fail,
    format_option,
    load_settings_for,
    resolve_options,
    split_target,
    target_options,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def resolve_targets(paths: tuple[str, ...], function: str | None, gpu: str | None, world_size: int | None,
                    recipe: str | None, set_items: tuple[str, ...], bridge_version: str | None = None,
                    bridge_src: str | None = None) -> tuple[Any, Any]:
    """Resolve PATH[::FUNCTION]... (files or folders): the paths without a function in one pass (they
    share the resolver's memo), each ``FILE::FUNCTION`` on its own. Returns (CheckRun, Settings)."""
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.pipeline import resolve_paths
    from mbmem_lint.resolve.versions import VersionError

    targets = [split_target(p) for p in paths]
    settings = load_settings_for([file for file, _ in targets])
    plain = [file for file, fn in targets if fn is None]
    groups: list[tuple[list[str], str | None]] = [(plain, function)] if plain else []
    groups += [([file], fn) for file, fn in targets if fn is not None]
    run = None
    try:
        for files, fn in groups:
            part = resolve_paths(files, settings, resolve_options(gpu, world_size, recipe, set_items, fn,
                                                                  bridge_version, bridge_src))
            if run is None:
                run = part
            else:
                run.recipes.extend(part.recipes)
                run.diagnostics.extend(part.diagnostics)
                run.sources.update(part.sources)
    except MissingPathError as exc:
        fail(f"{exc}: no such file or directory")
    except VersionError as exc:
        fail(str(exc))
    bridge_notice(run)
    return run, settings


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Show the effective config of each recipe, with where each value was set.")
@click.argument("paths", nargs=-1, required=True, metavar="PATH[::FUNCTION]...")
@click.option("--function", help="Only this recipe function (or use FILE::FUNCTION).")
@target_options
@bridge_options
@format_option(("text", "json"), "text", "Output format.")
def resolve(paths: tuple[str, ...], function: str | None, gpu: str | None, world_size: int | None,
            recipe: str | None, set_items: tuple[str, ...], bridge_version: str | None, bridge_src: str | None,
            fmt: str) -> int:
    """Print the effective config of each recipe in PATHS, with where each value was set."""
    import json

    from mbmem_lint.report_resolve import render_resolve_json, render_resolve_text

    run, _settings = resolve_targets(paths, function, gpu, world_size, recipe, set_items, bridge_version, bridge_src)
    for d in run.diagnostics:
        echo(f"{d.location.path}:{d.location.line}:{d.location.column}: {d.code} {d.message}", err=True)
    if fmt == "json":
        echo(json.dumps(render_resolve_json(run.recipes, run.bridge), indent=2, sort_keys=False))
    else:
        echo(render_resolve_text(run.recipes), nl=False)
    if not run.recipes:
        echo("mbmem-lint: no recipe functions found", err=True)
        return EXIT_ERROR
    return EXIT_CLEAN
