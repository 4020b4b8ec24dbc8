"""``mbmem-lint check``: lint recipe files and YAML overrides (the default command)."""

from __future__ import annotations

import sys

import click

from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_FINDINGS,
    bridge_notice,
    bridge_options,
    fail,
    format_option,
    load_settings_for,
    resolve_options,
    split_target,
    target_options,
)

FORMATS = ("text", "json", "github", "sarif", "markdown")


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="Lint recipe files and YAML overrides (the default command).")
@click.argument("paths", nargs=-1, required=True, metavar="PATHS... | FILE::FUNCTION")
@format_option(FORMATS, None, "Output format (default: text; github inside GitHub Actions).")
@target_options
@bridge_options
@click.option("--select", multiple=True, metavar="CODE", help="Only these rule codes or prefixes (repeatable).")
@click.option("--ignore", multiple=True, metavar="CODE", help="Skip these rule codes or prefixes (repeatable).")
@click.option("--fail-level", type=click.Choice(("error", "warning", "info")),
              help="Lowest severity that makes the exit code 1 (default: warning).")
@click.option("--fix", is_flag=True, help="Show fixes as a unified diff (writes nothing).")
@click.option("--diff", is_flag=True, help="Print only the diff of the fixes (writes nothing; exit 1 if any).")
@click.option("--apply", "apply_fixes", is_flag=True, help="Write safe fixes to the files.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix/--apply, include fixes that change behaviour.")
@click.option("--patch", "patch_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the diff to this file.")
@click.option("--color/--no-color", default=None, help="Colour the text output (default: when a TTY).")
@click.option("--base", "base_rev", metavar="REV",
              help="Also compare each recipe's estimated peak with git revision REV (read from git, no checkout): "
                   "MBM703 on the lines that grew it beyond regression-threshold.")
def check(paths: tuple[str, ...], fmt: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
          set_items: tuple[str, ...], bridge_version: str | None, bridge_src: str | None, select: tuple[str, ...],
          ignore: tuple[str, ...], fail_level: str | None, fix: bool, diff: bool, apply_fixes: bool,
          unsafe_fixes: bool, patch_file: str | None, color: bool | None, base_rev: str | None = None) -> int:
    """Lint recipe files and YAML overrides (files or folders).

    Exit 0 when clean, 1 with findings at or above the fail level (or fixes shown with --diff),
    2 for usage or input errors."""
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.pipeline import exit_code, run_check
    from mbmem_lint.report import default_format, render
    from mbmem_lint.resolve.versions import VersionError

    function = None
    if any("::" in p for p in paths):
        # FILE::FUNCTION: check that one recipe (what `plan` candidates are checked with).
        if len(paths) != 1:
            fail("FILE::FUNCTION checks one recipe: give it as the only path")
        file_part, function = split_target(paths[0])
        paths = (file_part,)
    settings = load_settings_for(list(paths))
    if select:
        settings.select = list(select)
    if ignore:
        settings.ignore = list(settings.ignore) + list(ignore)
    if fail_level:
        settings.fail_level = fail_level
    options = resolve_options(gpu, world_size, recipe, set_items, function, bridge_version=bridge_version,
                              bridge_src=bridge_src)
    if base_rev is not None:
        settings.cache = False  # cached findings know nothing of the base revision
        settings.base = _base_index(list(paths), settings, options, base_rev)
    fmt = fmt or default_format()
    fixing = fix or diff or apply_fixes or bool(patch_file)
    try:
        run = run_check(list(paths), settings, options, need_edits=fixing or fmt in ("json", "sarif"),
                        want_estimates=not fixing and fmt in ("github", "markdown"))
    except MissingPathError as exc:
        fail(f"{exc}: no such file or directory")
    except VersionError as exc:
        fail(str(exc))
    bridge_notice(run)
    code = exit_code(run.diagnostics, settings)
    if fixing:
        from mbmem_lint.commands.common import echo
        from mbmem_lint.fix.output import render_fix_output

        mode = "apply" if apply_fixes else ("diff" if diff else "fix")
        if mode != "diff":
            render(run.diagnostics, fmt, sources=run.sources, stream=sys.stdout, color=color, bridge=run.bridge)
        text, n_fixes = render_fix_output(run.diagnostics, run.sources, mode=mode,  # type: ignore[arg-type]
                                          unsafe=unsafe_fixes, patch_file=patch_file)
        if text:
            echo(text, nl=not text.endswith("\n"), raw=True)  # the patch: exact (its comments are escaped)
        if mode == "diff" and n_fixes:
            code = max(code, EXIT_FINDINGS)
        return code
    estimates = run.estimates if fmt in ("github", "markdown") else None
    regressions = None
    if settings.base is not None and estimates is not None:
        from mbmem_lint.regression import regression_rows

        regressions = regression_rows(settings.base, estimates)
    render(run.diagnostics, fmt, sources=run.sources, stream=sys.stdout, estimates=estimates, color=color,
           regressions=regressions, bridge=run.bridge)
    return code


def _base_index(paths: list[str], settings: object, options: object, rev: str) -> object:
    """The base revision's estimates (an unknown revision or no git repository is an input error)."""
    import os

    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.gitrev import RevisionError
    from mbmem_lint.regression import base_index_for_revision

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        fail(f"{MissingPathError(missing[0])}: no such file or directory")
    try:
        return base_index_for_revision(paths, settings, options, rev)  # type: ignore[arg-type]
    except RevisionError as exc:
        fail(f"--base: {exc}")
