"""The ``mbmem-lint`` command line, on click. ``check`` is the default command: ``mbmem-lint recipes/``.

Exit codes: 0 clean, 1 findings at or above the fail level (or fixes shown with ``--diff``),
2 usage or input errors (missing paths, bad configuration, unknown GPU) and an output that cannot be
written (a full disk).

Each command lives in its own module under ``mbmem_lint/commands/`` and is imported only when it
runs (or when help or shell completion lists it), so ``--version`` and a one-file check load click
and that one command, not the whole tool. Shell completion is click's:
``eval "$(_MBMEM_LINT_COMPLETE=bash_source mbmem-lint)"`` (``zsh_source``, ``fish_source``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys

import click

from mbmem_lint import __version__
from mbmem_lint.commands.common import (
    CONTEXT_SETTINGS,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    HELP_OPTIONS,
    PROG,
    echo,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

# name -> (module, attribute): the commands, in the order help lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("mbmem_lint.commands.check", "check"),
    "resolve": ("mbmem_lint.commands.resolve", "resolve"),
    "estimate": ("mbmem_lint.commands.estimate", "estimate"),
    "diagnose": ("mbmem_lint.commands.diagnose", "diagnose"),
    "plan": ("mbmem_lint.commands.plan", "plan"),
    "verify": ("mbmem_lint.commands.verify", "verify"),
    "rules": ("mbmem_lint.commands.rules", "rules"),
    "rule": ("mbmem_lint.commands.rules", "rule"),
    "dev": ("mbmem_lint.commands.dev", "dev"),
}
DEFAULT_COMMAND = "check"


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, and whose first argument, when it is not a
    command or a group option, starts the default command (``mbmem-lint recipes/`` is ``check``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        import importlib

        command: click.Command = getattr(importlib.import_module(spec[0]), spec[1])
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in COMMANDS and args[0] not in (*HELP_OPTIONS, "--version"):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s, version %(version)s",
                      help="Show the version and exit.")
def cli() -> None:
    """Static linter and per-rank memory estimator for Megatron Bridge recipes.

    A first argument that is not a command runs `check`: `mbmem-lint recipes/`."""


def _tune_gc() -> None:
    """A lint run allocates millions of short-lived objects; CPython's default thresholds spent ~30%
    of a corpus run in collections of the older generations (bench/speed.py). Young collections stay
    frequent (cycles die young here); the older ones run rarely. The process is short-lived."""
    import gc

    gc.set_threshold(20_000, 1_000, 1_000)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    _tune_gc()
    try:
        result: Any = cli.main(args or ["--help"], prog_name=PROG, standalone_mode=False)
        sys.stdout.flush()  # a full disk or a gone reader shows here, not in the interpreter's exit
    except click.ClickException as exc:  # usage errors (exit 2) and the commands' input errors
        shown = io.StringIO()
        exc.show(file=shown)  # click's usage errors quote the arguments: escaped on the way out
        with contextlib.suppress(OSError):
            echo(shown.getvalue(), err=True, nl=False)
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`mbmem-lint rules | head`): exit 1 quietly; point stdout at /dev/null
        # so the interpreter's final flush does not fail again.
        _detach_stdout()
        return EXIT_FINDINGS
    except OSError as exc:
        # `mbmem-lint check . > /dev/full`, or a file that failed under us: say what failed, exit 2.
        if exc.filename is not None:
            what = f"{exc.filename}: "
        elif exc.errno in _OUTPUT_ERRNOS:
            what = "cannot write the output: "
        else:
            what = ""
        with contextlib.suppress(OSError):
            echo(f"{PROG}: error: {what}{exc.strerror or exc}", err=True)
        try:
            sys.stdout.flush()
        except OSError:  # what is left of the output cannot be written either
            _detach_stdout()
        return EXIT_ERROR
    except (click.Abort, KeyboardInterrupt, EOFError):
        with contextlib.suppress(OSError):
            echo("\nAborted!", err=True)
        return EXIT_FINDINGS
    return result if isinstance(result, int) else EXIT_CLEAN


# Errors of a write to a stream (no file name): full disk, quota, size limit, I/O error.
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _detach_stdout() -> None:
    """Point the standard output at the null device, so that the buffered rest of a failed output is
    dropped instead of failing once more at exit."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (captured by a test): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def entry() -> None:
    """The ``mbmem-lint`` console script: :func:`main`, then exit without the interpreter's teardown.

    Freeing a run's objects one by one at exit cost ~5% of a one-file run's instructions and more of
    its wall time (``bench/speed.py``); the OS reclaims the process at once. By then every file the
    run wrote is closed; the standard streams are flushed here."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader went away or the stream is closed
            code = code or EXIT_FINDINGS
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
