"""``mbmem-lint plan``: the ways to make a recipe fit, ranked by modelled step time (mbmem_lint/plan)."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
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


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Rank the ways to make a recipe fit (layouts and memory knobs) by modelled cost.")
@click.argument("path", metavar="PATH[::FUNCTION]")
@target_options
@click.option("--keep", multiple=True, metavar="KNOB,...",
              help="Knobs the plan must not change (repeatable, comma-separated): tp, sp, pp, vpp, uneven, cp, ep, "
                   "etp, mbs, recompute, distributed_optimizer, fsdp, cpu_offload, optimizer_offload, "
                   "expandable_segments, regather, or a config path they write.")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True, help="Candidates to show.")
@format_option(("text", "json", "markdown"), "text", "Output format.")
@click.option("--diff/--no-diff", "with_diff", default=True, show_default=True,
              help="Show each candidate's change as a display-only diff of the recipe.")
def plan(path: str, gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
         keep: tuple[str, ...], top: int, fmt: str, with_diff: bool) -> int:
    """Search TP (+SP), PP, VPP and uneven stages, CP, EP/ETP, micro-batch size (global batch fixed),
    distributed optimizer, Megatron-FSDP, recompute, activation and optimizer CPU offload, expandable
    segments and LoRA input re-gather over what the world size allows. Every candidate is re-resolved with
    its changes as --set items, passes the rules and fits within the headroom margin; candidates are ranked
    by a first-order step-time model (docs/plan.md) whose terms are shown.

    Exit 0 when every recipe fits or has a candidate, 1 when one has none, 2 for input errors."""
    import json

    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.plan import PlanError, PlanOptions, plan_path
    from mbmem_lint.plan.knobs import UnknownKnob, parse_keep
    from mbmem_lint.plan.render import render_markdown, render_text
    from mbmem_lint.resolve.versions import VersionError

    file_part, function = split_target(path)
    settings = load_settings_for([file_part])
    resolve_options(gpu, world_size, recipe, set_items, function)  # validates --gpu, --set and --recipe
    try:
        pinned = parse_keep(keep)
    except UnknownKnob as exc:
        fail(str(exc))
    options = PlanOptions(gpu=gpu, world_size=world_size, keep=pinned, top=top, set_items=set_items,
                          with_diff=with_diff)
    problems: list[Any] = []
    try:
        results = plan_path(file_part, settings, options, function=function, recipe_ref=recipe, diagnostics=problems)
    except MissingPathError as exc:
        fail(f"{exc}: no such file or directory")
    except VersionError as exc:  # megatron-bridge-src / -version of [tool.mbmem-lint]
        fail(str(exc))
    if not results:
        for d in problems:
            echo(f"{d.location.path}:{d.location.line}: {d.code} {d.message}", err=True)
        fail(f"no recipe function found in {path}")
    status = EXIT_CLEAN
    plans = []
    for r in results:
        if isinstance(r, PlanError):
            echo(f"{r.recipe}: {r.reason}", err=True)
            status = EXIT_ERROR
            continue
        if not r.candidates and not r.current_fits:
            status = max(status, EXIT_FINDINGS)
        plans.append(r)
    if fmt == "json":
        data = [p.to_json() for p in plans]
        echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    elif fmt == "markdown":
        echo("\n".join(render_markdown(p) for p in plans), nl=False)
    else:
        echo("\n".join(render_text(p) for p in plans), nl=False)
    return status
