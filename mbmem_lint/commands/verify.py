"""``mbmem-lint verify``: build recipes for real and compare them with the static resolution.

The one command that executes the user's code (in a subprocess of ``--python``); see
:mod:`mbmem_lint.verify.run`.
"""

from __future__ import annotations

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_FINDINGS,
    bridge_notice,
    bridge_options,
    echo,
    fail,
    format_option,
    load_settings_for,
    resolve_options,
    split_target,
)


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Build recipes for real (EXECUTES them) and compare with the static view.")
@click.argument("paths", nargs=-1, required=True, metavar="FILE[::FUNCTION]...")
@click.option("--python", "python", metavar="PATH",
              help="Interpreter that has megatron-bridge, megatron-core and torch (default: this one).")
@click.option("--world-size", type=click.IntRange(min=1),
              help="Number of GPUs (data-parallel size of both model-state estimates).")
@click.option("--gpu", metavar="NAME", help="Target GPU of mbmem-lint's estimate.")
@click.option("--timeout", type=click.IntRange(min=1), default=120, show_default=True,
              help="Seconds one recipe function may take to build.")
@bridge_options
@format_option(("text", "json"), "text", "Output format.")
def verify(paths: tuple[str, ...], python: str | None, world_size: int | None, gpu: str | None, timeout: int,
           bridge_version: str | None, bridge_src: str | None, fmt: str) -> int:
    """Build each recipe of FILE[::FUNCTION] for real and print every field where mbmem-lint's static
    resolution differs from the real ConfigContainer, and mbmem-lint's model-state bytes beside Megatron
    Bridge's own estimate_training_memory.

    WARNING: this EXECUTES the recipe files (and whatever they import) in a subprocess of --python,
    with Transformer Engine and Hugging Face downloads replaced by test doubles (no GPU, no network).
    Run it only on code you trust. Linting (check, resolve, estimate) never executes code.

    The static side uses the data of the megatron-bridge installed for --python unless
    --megatron-bridge-version/--megatron-bridge-src say otherwise. Needs `pip install
    'mbmem-lint[verify]'` (or an existing Megatron Bridge environment as --python).

    Exit 0 when every compared field agrees, 1 when a field differs or a recipe failed to build,
    2 when Megatron Bridge cannot be imported or the input is bad."""
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.resolve.versions import VersionError
    from mbmem_lint.verify.run import VerifyError, render_text
    from mbmem_lint.verify.run import verify as run_verify

    targets = [split_target(p) for p in paths]
    settings = load_settings_for([file for file, _ in targets])
    options = resolve_options(gpu, world_size, None, (), bridge_version=bridge_version, bridge_src=bridge_src)
    try:
        report = run_verify(targets, settings, options, python=python, timeout=timeout)
    except MissingPathError as exc:
        fail(f"{exc}: no such file or directory")
    except (VerifyError, VersionError) as exc:
        fail(str(exc))

    if not report.recipes:
        fail(f"no recipe functions found in {', '.join(paths)}")

    bridge_notice(report)
    if fmt == "json":
        import json

        echo(json.dumps(report.to_json(), indent=2, default=str))
    else:
        echo(render_text(report), nl=False)
    bad = any(c.diffs or c.status in ("error", "static-only") for c in report.recipes)
    return EXIT_FINDINGS if bad else EXIT_CLEAN
