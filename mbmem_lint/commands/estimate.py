"""``mbmem-lint estimate``: per-rank memory of every pipeline stage against the GPU's capacity."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    echo,
    fail,
    format_option,
    target_options,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@click.command(context_settings={"help_option_names": ["-h", "--help"]},
               short_help="Estimate per-rank memory of every pipeline stage against the GPU.")
@click.argument("path", metavar="PATH[::FUNCTION]")
@target_options
@format_option(("text", "json", "markdown"), "text", "Output format.")
def estimate(path: str, gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
             fmt: str) -> int:
    """Per-rank memory estimate of PATH[::FUNCTION] for every pipeline stage.

    Exit 0 when every recipe fits, 1 when one does not, 2 when an estimate is unavailable."""
    import json

    from mbmem_lint.commands.resolve import resolve_targets
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.render import render_markdown, render_text
    from mbmem_lint.estimate.types import EstimateUnavailable

    run, _settings = resolve_targets((path,), None, gpu, world_size, recipe, set_items)
    if not run.recipes:
        for d in run.diagnostics:
            echo(f"{d.location.path}:{d.location.line}: {d.code} {d.message}", err=True)
        fail(f"no recipe function found in {path}")
    outputs: list[Any] = []
    status = EXIT_CLEAN
    for r in run.recipes:
        try:
            est = estimate_recipe(r, gpu=gpu, world_size=world_size)
        except EstimateUnavailable as exc:
            echo(f"{r.path}::{r.function}: estimate unavailable: {exc.reason}", err=True)
            status = EXIT_ERROR
            continue
        except UnknownGpuError as exc:
            fail(str(exc))
        if not est.fits:
            status = max(status, EXIT_FINDINGS)
        outputs.append(est)
    if fmt == "json":
        data = [e.to_json() for e in outputs]
        echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        render_fn = render_markdown if fmt == "markdown" else render_text
        echo("\n".join(render_fn(e) for e in outputs), nl=False)
    return status
