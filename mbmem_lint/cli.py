"""The ``mbmem-lint`` command line. ``check`` is the default command: ``mbmem-lint recipes/``.

Exit codes: 0 clean, 1 findings at or above the fail level (or fixes shown with ``--diff``),
2 usage or input errors (missing paths, bad configuration, unknown GPU).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from mbmem_lint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ("text", "json", "github", "sarif", "markdown")


class DefaultGroup(click.Group):
    """A group whose first argument, when not a command name, is passed to ``check``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["check", *args]
        elif not args:
            args = ["check", "--help"]
        return super().parse_args(ctx, args)


def _fail(message: str) -> None:
    click.echo(f"mbmem-lint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _settings(paths: list[str]) -> Any:
    from pathlib import Path

    from mbmem_lint.settings import SettingsError, load_settings

    try:
        return load_settings(Path(paths[0]) if paths else None)
    except SettingsError as exc:
        _fail(str(exc))


def _options(gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
             function: str | None = None) -> Any:
    from mbmem_lint.parse.yaml_overrides import parse_dotlist
    from mbmem_lint.resolve.resolver import ResolveOptions

    if gpu:
        from mbmem_lint.estimate.gpus import UnknownGpuError, resolve_gpu

        try:
            resolve_gpu(gpu)
        except UnknownGpuError as exc:
            _fail(str(exc))
    set_file = None
    if set_items:
        set_file = parse_dotlist(list(set_items))
        bad = [d for d in set_file.diagnostics if d.severity == "error"]
        if bad:
            _fail("; ".join(d.message for d in bad))
    if recipe is not None and "::" not in recipe:
        _fail(f"--recipe must look like FILE::FUNCTION, got {recipe!r}")
    return ResolveOptions(gpu=gpu, world_size=world_size, function=function, recipe_ref=recipe,
                          set_overrides=set_file)


def _split_target(path: str) -> tuple[str, str | None]:
    if "::" in path:
        file_part, _, function = path.partition("::")
        return file_part, function or None
    return path, None


_common_target = [
    click.option("--gpu", help="Target GPU (h100, h200, b200, gb200, a100-40gb, ...)."),
    click.option("--world-size", type=click.IntRange(min=1), help="Number of GPUs of the job."),
    click.option("--recipe", metavar="FILE::FUNCTION", help="Recipe the given YAML override files apply to."),
    click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE",
                 help="Hydra-style override (repeatable): model.tensor_model_parallel_size=4."),
]


def target_options(f: Any) -> Any:
    for opt in reversed(_common_target):
        f = opt(f)
    return f


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="mbmem-lint")
def main() -> None:
    """Static linter and per-rank memory estimator for Megatron Bridge recipes."""
    _tune_gc()


def _tune_gc() -> None:
    """A lint run allocates millions of short-lived objects; CPython's default thresholds spent ~30%
    of a corpus run in collections of the older generations (bench/speed.py). Young collections stay
    frequent (cycles die young here); the older ones run rarely. The process is short-lived."""
    import gc

    gc.set_threshold(20_000, 1_000, 1_000)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format (default: text; github inside GitHub Actions).")
@target_options
@click.option("--select", multiple=True, help="Only these rule codes or prefixes (repeatable).")
@click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes (repeatable).")
@click.option("--fail-level", type=click.Choice(["error", "warning", "info"]), default=None,
              help="Lowest severity that makes the exit code 1 (default: warning).")
@click.option("--fix", is_flag=True, help="Show fixes as a unified diff (writes nothing).")
@click.option("--diff", is_flag=True, help="Print only the diff of the fixes (writes nothing; exit 1 if any).")
@click.option("--apply", "apply_fixes", is_flag=True, help="Write safe fixes to the files.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix/--apply, include fixes that change behaviour.")
@click.option("--patch", "patch_file", type=click.Path(dir_okay=False), help="Also write the diff to this file.")
@click.option("--color/--no-color", default=None, help="Colour the text output (default: when a TTY).")
def check(paths: tuple[str, ...], fmt: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
          set_items: tuple[str, ...], select: tuple[str, ...], ignore: tuple[str, ...], fail_level: str | None,
          fix: bool, diff: bool, apply_fixes: bool, unsafe_fixes: bool, patch_file: str | None,
          color: bool | None) -> None:
    """Lint recipe files and YAML overrides (files or folders)."""
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.pipeline import exit_code, run_check
    from mbmem_lint.report import default_format, render

    settings = _settings(list(paths))
    if select:
        settings.select = list(select)
    if ignore:
        settings.ignore = list(settings.ignore) + list(ignore)
    if fail_level:
        settings.fail_level = fail_level
    options = _options(gpu, world_size, recipe, set_items)
    fixing = fix or diff or apply_fixes or bool(patch_file)
    need_edits = fixing or (fmt or default_format()) in ("json", "sarif")
    try:
        want_estimates = not fixing and (fmt or default_format()) in ("github", "markdown")
        run = run_check(list(paths), settings, options, need_edits=need_edits, keep_recipes=want_estimates)
    except MissingPathError as exc:
        _fail(f"{exc}: no such file or directory")
        return
    code = exit_code(run.diagnostics, settings)
    if fixing:
        from mbmem_lint.fix.output import render_fix_output

        mode = "apply" if apply_fixes else ("diff" if diff else "fix")
        if mode != "diff":
            render(run.diagnostics, fmt or default_format(), sources=run.sources, stream=sys.stdout, color=color)
        text, n_fixes = render_fix_output(run.diagnostics, run.sources, mode=mode,  # type: ignore[arg-type]
                                          unsafe=unsafe_fixes, patch_file=patch_file)
        if text:
            click.echo(text, nl=not text.endswith("\n"))
        if mode == "diff" and n_fixes:
            code = max(code, EXIT_FINDINGS)
        sys.exit(code)
    estimates = None
    if (fmt or default_format()) in ("github", "markdown"):
        estimates = _estimates_json(run.recipes)
    render(run.diagnostics, fmt or default_format(), sources=run.sources, stream=sys.stdout,
           estimates=estimates, color=color)
    sys.exit(code)


def _estimates_json(recipes: list[Any]) -> list[dict[str, Any]]:
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.types import EstimateUnavailable

    out = []
    for r in recipes:
        try:
            out.append(estimate_recipe(r).to_json())
        except (EstimateUnavailable, UnknownGpuError):
            continue
    return out


def _resolve_one(path: str, function: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
                 set_items: tuple[str, ...]) -> Any:
    from mbmem_lint.discover.files import MissingPathError
    from mbmem_lint.pipeline import resolve_paths

    file_part, fn = _split_target(path)
    settings = _settings([file_part])
    options = _options(gpu, world_size, recipe, set_items, function or fn)
    try:
        return resolve_paths([file_part], settings, options), settings
    except MissingPathError as exc:
        _fail(f"{exc}: no such file or directory")


@main.command()
@click.argument("path")
@click.option("--function", help="Only this recipe function (or use FILE::FUNCTION).")
@target_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def resolve(path: str, function: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
            set_items: tuple[str, ...], fmt: str) -> None:
    """Print the effective config of each recipe in PATH, with where each value was set."""
    from mbmem_lint.report_resolve import render_resolve_json, render_resolve_text

    run, _settings_obj = _resolve_one(path, function, gpu, world_size, recipe, set_items)
    errors = [d for d in run.diagnostics if d.severity == "error"]
    for d in run.diagnostics:
        click.echo(f"{d.location.path}:{d.location.line}:{d.location.column}: {d.code} {d.message}", err=True)
    if fmt == "json":
        click.echo(json.dumps(render_resolve_json(run.recipes), indent=2, sort_keys=False))
    else:
        click.echo(render_resolve_text(run.recipes), nl=False)
    if not run.recipes:
        click.echo("mbmem-lint: no recipe functions found", err=True)
        sys.exit(EXIT_ERROR if errors or not run.recipes else EXIT_CLEAN)
    sys.exit(EXIT_CLEAN)


@main.command()
@click.argument("path")
@target_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text")
def estimate(path: str, gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
             fmt: str) -> None:
    """Per-rank memory estimate of FILE[::FUNCTION] for every pipeline stage."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.render import render_markdown, render_text
    from mbmem_lint.estimate.types import EstimateUnavailable

    run, _s = _resolve_one(path, None, gpu, world_size, recipe, set_items)
    if not run.recipes:
        for d in run.diagnostics:
            click.echo(f"{d.location.path}:{d.location.line}: {d.code} {d.message}", err=True)
        _fail(f"no recipe function found in {path}")
    outputs: list[Any] = []
    status = EXIT_CLEAN
    for r in run.recipes:
        try:
            est = estimate_recipe(r, gpu=gpu, world_size=world_size)
        except EstimateUnavailable as exc:
            click.echo(f"{r.path}::{r.function}: estimate unavailable: {exc.reason}", err=True)
            status = EXIT_ERROR
            continue
        except UnknownGpuError as exc:
            _fail(str(exc))
            return
        if not est.fits:
            status = max(status, EXIT_FINDINGS)
        outputs.append(est)
    if fmt == "json":
        data = [e.to_json() for e in outputs]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        render_fn = render_markdown if fmt == "markdown" else render_text
        click.echo("\n".join(render_fn(e) for e in outputs), nl=False)
    sys.exit(status)


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rules_cmd(fmt: str) -> None:
    """List every rule: code, name, default severity, fixable, summary."""
    from mbmem_lint.check import registry

    if fmt == "json":
        click.echo(json.dumps(registry.rules_json(), indent=2))
    else:
        click.echo(registry.list_rules_text(), nl=False)


@main.command("rule")
@click.argument("code")
def rule_cmd(code: str) -> None:
    """Explain one rule (MBM123 or its name)."""
    from mbmem_lint.check import registry

    try:
        click.echo(registry.explain_rule_text(code), nl=False)
    except KeyError:
        _fail(f"unknown rule {code!r}; `mbmem-lint rules` lists them")


@main.group()
def dev() -> None:
    """Maintainer commands: regenerate shipped data from the pinned wheels."""


@dev.command("regenerate")
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if the shipped data is stale; write nothing.")
@click.option("--corpus", type=click.Path(file_okay=False), help="Unpacked wheels (default: download).")
def dev_regenerate(check_only: bool, corpus: str | None) -> None:
    """Regenerate the schema, model table and library summary from megatron-bridge 0.6.2 / core 0.19.2."""
    from pathlib import Path

    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.dev.regenerate import check_stale, regenerate

    root = Path(corpus) if corpus else ensure_corpus()
    if check_only:
        stale = check_stale(root)
        for name in stale:
            click.echo(f"stale: {name}")
        sys.exit(EXIT_FINDINGS if stale else EXIT_CLEAN)
    for p in regenerate(root, Path(__file__).parent / "data"):
        click.echo(f"wrote {p}")


@dev.command("docs")
def dev_docs() -> None:
    """Regenerate docs/rules from the rule catalog."""
    from pathlib import Path

    from mbmem_lint.check.docs import generate_docs

    out = Path(__file__).resolve().parents[1] / "docs" / "rules"
    for p in generate_docs(out):
        click.echo(f"wrote {p}")


if __name__ == "__main__":  # pragma: no cover
    main()
