"""``mbmem-lint diagnose``: why a job ran out of memory, from its logs (a thin layer over
:mod:`mbmem_lint.diagnose`)."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_FINDINGS,
    echo,
    fail,
    format_option,
    load_settings_for,
    resolve_options,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Diagnose OOMs and known failures from training logs.")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option("--recipe", metavar="FILE::FUNCTION",
              help="The recipe the job ran: per-stage comparison with the estimate and re-estimated fixes.")
@click.option("--gpu", metavar="NAME", help="GPU of the job (default: the recipe's target, else the OOM's capacity).")
@click.option("--world-size", type=click.IntRange(min=1), help="Number of GPUs of the job.")
@click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE", help="Overrides the job ran with (repeatable).")
@format_option(("text", "json", "markdown"), "text", "Output format.")
@click.option("--record", is_flag=True,
              help="Append the measured-vs-estimated rows to the measurements file (needs --recipe).")
@click.option("--measurements", "measurements_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Measurements file (default: [tool.mbmem-lint] measurements, .mbmem-lint/measurements.json).")
def diagnose(logs: tuple[str, ...], recipe: str | None, gpu: str | None, world_size: int | None,
             set_items: tuple[str, ...], fmt: str, record: bool, measurements_file: str | None) -> int:
    """Read training logs (plain or gzip, Slurm/torchrun rank prefixes) and diagnose every OOM
    (fragmentation, capacity, one-stage imbalance, unknown) and known Megatron failure.

    Exit 1 when an OOM or a known failure was found, 0 when the logs hold none, 2 for unreadable
    input."""
    import json

    from mbmem_lint.diagnose.logread import LogReadError
    from mbmem_lint.diagnose.report import render_markdown, render_text, run_diagnose
    from mbmem_lint.diagnose.scan import scan_logs

    if record and recipe is None:
        fail("--record needs --recipe FILE::FUNCTION (the measurement is keyed by the recipe's configuration)")
    try:
        scan = scan_logs(list(logs))
    except LogReadError as exc:
        fail(str(exc))
    ctx = None
    extra: list[str] = []
    resolved: Any = None
    settings: Any = None
    if recipe is not None:
        resolved, settings, ctx, extra = _recipe(recipe, scan, gpu, world_size, set_items)
    report = run_diagnose(scan, ctx)
    report.notes[:0] = extra
    if record:
        _record(report, resolved, settings, measurements_file, list(logs))
    if fmt == "json":
        echo(json.dumps(report.to_json(), indent=2))
    elif fmt == "markdown":
        echo(render_markdown(report), nl=False)
    else:
        echo(render_text(report), nl=False)
    return EXIT_FINDINGS if report.failed else EXIT_CLEAN


def _recipe(ref: str, scan: Any, gpu: str | None, world_size: int | None, set_items: tuple[str, ...]) -> Any:
    from mbmem_lint.commands.common import split_target
    from mbmem_lint.diagnose.recipe import RecipeError, recipe_context
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.pipeline import resolve_paths

    file_part, function = split_target(ref)
    if function is None:
        fail(f"--recipe must look like FILE::FUNCTION, got {ref!r}")
    settings = load_settings_for([file_part])
    options = resolve_options(gpu, world_size, None, set_items, function)
    try:
        run = resolve_paths([file_part], settings, options)
    except MissingPathError as exc:
        fail(f"{exc}: no such file or directory")
    if not run.recipes:
        why = "; ".join(d.message for d in run.diagnostics[:3]) or "not found or not a recipe"
        fail(f"no recipe {function!r} in {file_part}: {why}")
    try:
        rc = recipe_context(run.recipes[0], scan, gpu, world_size)
    except RecipeError as exc:
        fail(str(exc))
    return rc.recipe, settings, rc.context, rc.notes


def _record(report: Any, recipe: Any, settings: Any, path: str | None, logs: list[str]) -> None:
    from datetime import datetime, timezone
    from pathlib import Path

    from mbmem_lint import __version__
    from mbmem_lint.diagnose import measurements as M

    est = report.context.estimate
    if not report.comparison or not any(c.measured_max_allocated_bytes for c in report.comparison):
        fail("nothing to record: no Megatron memory report in the logs could be mapped to a pipeline stage")
    target = M.file_for(settings, path)
    reports = report.scan.peak_reports()
    iteration = max((r.where.iteration or 0 for r in reports.values()), default=None) or None
    key = M.recipe_key(settings, recipe, est.gpu.name, est.world_size)
    row = M.row(
        recipe=key.recipe,
        overrides=[settings.relative(o) for o in recipe.overrides],
        gpu=est.gpu.name, world_size=est.world_size,
        fingerprint=key.fingerprint,
        logs=[Path(p).name for p in logs], stages=[c.to_json() for c in report.comparison],
        iteration=iteration, oom=bool(report.scan.ooms),
        throughput=report.scan.last_throughput.to_json() if report.scan.last_throughput else None,
        tool_version=__version__, recorded=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    try:
        M.append(target, [row])
    except (M.MeasurementsError, OSError) as exc:
        fail(str(exc))
    report.notes.append(f"recorded {len(report.comparison)} stage(s) in {target}")
