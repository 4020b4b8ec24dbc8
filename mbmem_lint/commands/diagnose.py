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
    split_target,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Diagnose a failed job from its logs (OOMs, NCCL, CUDA and Megatron errors).")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option("--recipe", "recipes", multiple=True, metavar="TARGET",
              help="The recipe the job ran, as `estimate` takes it: FILE::FUNCTION, a recipe file, or a YAML override "
                   "(paired by its first-line comment or [tool.mbmem-lint.recipes], or with a FILE::FUNCTION given "
                   "as another --recipe). Adds the per-stage comparison with the estimate and re-estimated fixes.")
@click.option("--gpu", metavar="NAME", help="GPU of the job (default: the recipe's target, else the OOM's capacity).")
@click.option("--world-size", type=click.IntRange(min=1), help="Number of GPUs of the job.")
@click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE", help="Overrides the job ran with (repeatable).")
@format_option(("text", "json", "markdown"), "text", "Output format.")
@click.option("--record", is_flag=True,
              help="Append the measured-vs-estimated rows to the measurements file (needs --recipe).")
@click.option("--measurements", "measurements_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Measurements file (default: [tool.mbmem-lint] measurements, .mbmem-lint/measurements.json).")
def diagnose(logs: tuple[str, ...], recipes: tuple[str, ...], gpu: str | None, world_size: int | None,
             set_items: tuple[str, ...], fmt: str, record: bool, measurements_file: str | None) -> int:
    """Read the logs of a failed job (plain or gzip, Slurm/torchrun rank prefixes, regular files only) and
    diagnose what ended it: OOMs (fragmentation, capacity, one-stage imbalance, oversized request, other
    processes' memory), NCCL timeouts and errors, CUDA errors, Megatron / Transformer Engine errors a rule
    catches before launch, and any other fatal end (unrecognised failure).

    Exit codes: 0 no failure found; 1 failures diagnosed; 2 usage or input error (an unreadable log, a FIFO
    or device, a bad --recipe, a bad measurements file with --record)."""
    from mbmem_lint.diagnose.logread import LogReadError
    from mbmem_lint.diagnose.report import render_markdown, render_text, run_diagnose
    from mbmem_lint.diagnose.scan import scan_logs

    if record and not recipes:
        fail("--record needs --recipe FILE::FUNCTION (the measurement is keyed by the recipe's configuration)")
    try:
        scan = scan_logs(list(logs))
    except LogReadError as exc:
        fail(str(exc))
    ctx = None
    extra: list[str] = []
    resolved: Any = None
    settings: Any = None
    if recipes:
        resolved, settings, ctx, extra = _recipe(recipes, scan, gpu, world_size, set_items)
    report = run_diagnose(scan, ctx)
    report.notes[:0] = extra
    if record:
        _record(report, resolved, settings, measurements_file, list(logs))
    if fmt == "json":
        from mbmem_lint.diagnose.measurements import dumps, finite

        echo(dumps(finite(report.to_json())))
    elif fmt == "markdown":
        echo(render_markdown(report), nl=False)
    else:
        echo(render_text(report), nl=False)
    return EXIT_FINDINGS if report.failed else EXIT_CLEAN


YAML_SUFFIXES = (".yaml", ".yml")


def _recipe(refs: tuple[str, ...], scan: Any, gpu: str | None, world_size: int | None,
            set_items: tuple[str, ...]) -> Any:
    """The one recipe the job ran, from the ``--recipe`` targets (the same targets ``estimate`` takes): one
    FILE::FUNCTION or recipe file, and any YAML overrides applied to it."""
    from mbmem_lint.commands.resolve import resolve_targets
    from mbmem_lint.diagnose.recipe import RecipeError, recipe_context
    from mbmem_lint.resolve.target import missing_function_message

    yaml = [r for r in refs if split_target(r)[0].lower().endswith(YAML_SUFFIXES)]
    python = [r for r in refs if r not in yaml]
    if len(python) > 1:
        fail(f"--recipe names one recipe (FILE::FUNCTION or a recipe file) and any YAML overrides; got {len(python)} "
             f"recipes: {', '.join(python)}")
    for ref in python:
        file_part, function = split_target(ref)
        if function is not None:
            missing = missing_function_message(file_part, function)
            if missing is not None:
                fail(missing)
    if yaml:
        paired = python[0] if python else None
        if paired is not None and split_target(paired)[1] is None:
            fail(f"YAML overrides apply to one recipe function: give --recipe FILE::FUNCTION, not {paired!r}")
        run, settings = resolve_targets(tuple(yaml), None, gpu, world_size, paired, set_items)
        what = ", ".join(yaml)
        if not run.recipes:
            why = "; ".join(d.message for d in run.diagnostics[:3])
            fail(f"{what}: names no recipe to apply to: give --recipe FILE::FUNCTION too, or declare it "
                 "(first line '# mbmem-lint: recipe=FILE::FUNCTION', or [tool.mbmem-lint.recipes])"
                 + (f" ({why})" if why else ""))
    else:
        run, settings = resolve_targets((python[0],), None, gpu, world_size, None, set_items)
        what = python[0]
        if not run.recipes:
            why = "; ".join(d.message for d in run.diagnostics[:3]) or "not found or not a recipe"
            fail(f"no recipe in {what}: {why}")
    if len(run.recipes) > 1:
        names = ", ".join(f"{r.path}::{r.function}" for r in run.recipes[:6])
        fail(f"{what} holds {len(run.recipes)} recipes; name the one the job ran: {names}"
             + (", ..." if len(run.recipes) > 6 else ""))
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
