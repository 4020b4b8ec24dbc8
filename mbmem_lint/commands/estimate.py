"""``mbmem-lint estimate``: per-rank memory of every pipeline stage against the GPU's capacity."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    bridge_options,
    echo,
    fail,
    format_option,
    target_options,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Estimate per-rank memory of every pipeline stage against the GPU.")
@click.argument("path", metavar="PATH[::FUNCTION]")
@target_options
@bridge_options
@format_option(("text", "json", "markdown"), "text", "Output format.")
@click.option("--base", "base_rev", metavar="REV",
              help="Also estimate the recipe as it was at git revision REV (read from git, no checkout).")
@click.option("--measurements", "measurements_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Recorded measurements to show next to the estimate (default: [tool.mbmem-lint] measurements).")
def estimate(path: str, gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
             bridge_version: str | None, bridge_src: str | None, fmt: str, base_rev: str | None = None, measurements_file: str | None = None) -> int:
    """Per-rank memory estimate of PATH[::FUNCTION] for every pipeline stage, with a matching recorded
    measurement (`diagnose --record`) and, with --base, the estimate at a git revision.

    Exit 0 when every recipe fits, 1 when one does not, 2 when an estimate is unavailable."""
    import json

    from mbmem_lint.commands.resolve import resolve_targets
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.render import render_markdown, render_text
    from mbmem_lint.estimate.types import EstimateUnavailable
    from mbmem_lint.estimate.unchecked import memory_not_checked_message

    run, settings = resolve_targets((path,), None, gpu, world_size, recipe, set_items, bridge_version, bridge_src)
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
            # The text of MBM704 (memory-not-checked): an unknown model never reads as "fits".
            echo(f"{r.path}::{r.function}: {memory_not_checked_message(r, exc)}", err=True)
            status = EXIT_ERROR
            continue
        except UnknownGpuError as exc:
            fail(str(exc))
        if not est.fits:
            status = max(status, EXIT_FINDINGS)
        outputs.append((r, est))
    bases = _bases(path, settings, gpu, world_size, set_items, base_rev, outputs)
    measured = _measured(settings, measurements_file, outputs)
    if fmt == "json":
        data = [e.to_json() for _, e in outputs]
        for item, (r, _est) in zip(data, outputs):
            item["measurement"] = measured.get(id(r))
            if base_rev is not None:
                item["base"] = bases.get(id(r))
        if run.bridge is not None:  # each estimate records the Megatron Bridge data it was made with
            for item in data:
                item["megatron_bridge"] = run.bridge.to_json()
        echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        render_fn = render_markdown if fmt == "markdown" else render_text
        echo("\n".join(render_fn(e) + _extra_text(measured.get(id(r)), bases.get(id(r)), base_rev)
                       for r, e in outputs), nl=False)
    return status


def _bases(path: str, settings: Any, gpu: str | None, world_size: int | None, set_items: tuple[str, ...],
           rev: str | None, outputs: list[Any]) -> dict[int, Any]:
    if rev is None or not outputs:
        return {}
    from mbmem_lint.commands.common import resolve_options, split_target
    from mbmem_lint.gitrev import RevisionError
    from mbmem_lint.regression import base_estimates, base_index_for_revision

    file_part, function = split_target(path)
    options = resolve_options(gpu, world_size, None, set_items, function)
    try:
        index = base_index_for_revision([file_part], settings, options, rev, only_changed=False)
    except RevisionError as exc:
        fail(f"--base: {exc}")
    return base_estimates(index, outputs)


def _measured(settings: Any, explicit: str | None, outputs: list[Any]) -> dict[int, Any]:
    from mbmem_lint.diagnose import measurements as M

    path = M.file_for(settings, explicit)
    try:
        rows = M.load(path)
    except M.MeasurementsError as exc:
        echo(f"mbmem-lint: warning: {exc}", err=True)
        return {}
    if not rows:
        return {}
    return {id(r): M.latest_for(rows, M.recipe_key(settings, r, e.gpu.name, e.world_size)) for r, e in outputs}


def _extra_text(measured: Any, base: Any, rev: str | None) -> str:
    from mbmem_lint.diagnose.measurements import render_text as measured_text
    from mbmem_lint.regression import base_text

    lines = []
    if measured:
        lines.append(measured_text(measured))
    if rev is not None:
        lines.append(base_text(base, rev))
    return "".join(line + "\n" for line in lines)
