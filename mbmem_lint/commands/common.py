"""What the commands share: the input-error exception, output, settings, the target options.

Everything here is imported by every command, so it stays light: the linter's modules load inside
the functions that need them.
"""

from __future__ import annotations

import sys

import click

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

PROG = "mbmem-lint"
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
HELP_OPTIONS = ("-h", "--help")
# Every command and group accepts -h as well as --help (also when a test invokes a command on its own).
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": list(HELP_OPTIONS)}


class Failure(click.ClickException):
    """An input error found while running a command (a missing path, bad configuration, an unknown
    GPU): printed as ``mbmem-lint: error: ...``, exit 2. Usage errors are click's own."""

    exit_code = EXIT_ERROR

    def show(self, file: Any = None) -> None:
        text = f"{PROG}: error: {self.format_message()}\n"
        if file is None:
            echo(text, err=True, nl=False)
        else:
            file.write(text)


def fail(message: str) -> NoReturn:
    raise Failure(message)


def echo(text: str, *, err: bool = False, nl: bool = True, raw: bool = False) -> None:
    """Write to the current ``sys.stdout``/``sys.stderr`` and flush (stdout and stderr stay in order
    when both go to one pipe). Not ``click.echo``: reports write to ``sys.stdout`` directly too.

    The text is made inert (:func:`mbmem_lint.report.escape.printable_lines`: no control character, no
    workflow command of an input) unless ``raw``: a patch, which ``git apply`` needs byte for byte."""
    if not raw:
        from mbmem_lint.report.escape import printable_lines

        text = printable_lines(text)
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n" if nl else text)
    stream.flush()


def load_settings_for(paths: list[str]) -> Any:
    """``[tool.mbmem-lint]`` of the pyproject nearest the first path (or the working folder)."""
    from pathlib import Path

    from mbmem_lint.settings import SettingsError, load_settings

    try:
        return load_settings(Path(paths[0]) if paths else None)
    except SettingsError as exc:
        fail(str(exc))


def resolve_options(gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
                    function: str | None = None, bridge_version: str | None = None,
                    bridge_src: str | None = None) -> Any:
    """The resolver's options from the target (and Megatron Bridge) options; a bad value is an input error."""
    from mbmem_lint.resolve.resolver import ResolveOptions

    if gpu:
        from mbmem_lint.estimate.gpus import UnknownGpuError, resolve_gpu

        try:
            resolve_gpu(gpu)
        except UnknownGpuError as exc:
            fail(str(exc))
    set_file = None
    if set_items:
        from mbmem_lint.parse.yaml_overrides import parse_dotlist

        set_file = parse_dotlist(list(set_items))
        bad = [d for d in set_file.diagnostics if d.severity == "error"]
        if bad:
            fail("; ".join(d.message for d in bad))
    if recipe is not None and "::" not in recipe:
        fail(f"--recipe must look like FILE::FUNCTION, got {recipe!r}")
    if bridge_version is not None:
        from mbmem_lint.resolve.versions import VersionError, parse_version

        try:
            parse_version(bridge_version)
        except VersionError as exc:
            fail(f"--megatron-bridge-version: {exc}")
    return ResolveOptions(gpu=gpu, world_size=world_size, function=function, recipe_ref=recipe,
                          set_overrides=set_file, megatron_bridge_version=bridge_version,
                          megatron_bridge_src=bridge_src)


def bridge_notice(run: Any) -> None:
    """Tell the user (on stderr) when the run lints against another release than the one asked for."""
    notice = run.bridge.notice() if run is not None and run.bridge is not None else None
    if notice:
        echo(f"{PROG}: notice: {notice}", err=True)


def split_target(path: str) -> tuple[str, str | None]:
    """``FILE::FUNCTION`` → (FILE, FUNCTION); a plain path → (path, None)."""
    if "::" in path:
        file_part, _, function = path.partition("::")
        return file_part, function or None
    return path, None


def target_options(func: F) -> F:
    """``--gpu``, ``--world-size``, ``--recipe``, ``--set``: what the run targets and overrides."""
    for option in reversed((
        click.option("--gpu", metavar="NAME", help="Target GPU (h100, h200, b200, gb200, a100-40gb, ...)."),
        click.option("--world-size", type=click.IntRange(min=1), help="Number of GPUs of the job."),
        click.option("--recipe", metavar="FILE::FUNCTION", help="Recipe the given YAML override files apply to."),
        click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE",
                     help="Hydra-style override (repeatable): model.tensor_model_parallel_size=4."),
    )):
        func = option(func)
    return func


def bridge_options(func: F) -> F:
    """``--megatron-bridge-version``, ``--megatron-bridge-src``: the Megatron Bridge the run lints against."""
    for option in reversed((
        click.option("--megatron-bridge-version", "bridge_version", metavar="X.Y.Z",
                     help="Lint against this Megatron Bridge release's data (default: the "
                          "megatron-bridge-version setting, else the installed megatron-bridge, else the "
                          "newest shipped; an unshipped release uses the nearest older one)."),
        click.option("--megatron-bridge-src", "bridge_src", type=click.Path(file_okay=False), metavar="PATH",
                     help="Lint against a Megatron Bridge source tree (a fork or main checkout): its schema "
                          "and recipe library are read from the sources, nothing is imported; cached by content."),
    )):
        func = option(func)
    return func


def format_option(choices: tuple[str, ...], default: str | None, help_text: str) -> Callable[[F], F]:
    return click.option("--format", "fmt", type=click.Choice(choices), default=default, show_default=default is not None,
                        help=help_text)
