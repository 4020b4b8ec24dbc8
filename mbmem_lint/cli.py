"""The ``mbmem-lint`` command line. ``check`` is the default command: ``mbmem-lint recipes/``.

Exit codes: 0 clean, 1 findings at or above the fail level (or fixes shown with ``--diff``),
2 usage or input errors (missing paths, bad configuration, unknown GPU).

Built on :mod:`argparse`: with click, a one-file check ran ~6% more instructions and ``--version``
twice as many (callgrind). Command modules are imported inside the command functions, and only the
parser of the command that runs is built, so ``--version``/``--help`` stay cheap.
"""

from __future__ import annotations

import argparse
import os
import sys

from mbmem_lint import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only; typing costs ~10% of `mbmem-lint --version`
    from collections.abc import Callable
    from typing import Any, NoReturn

PROG = "mbmem-lint"
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ("text", "json", "github", "sarif", "markdown")


class _Failure(Exception):
    """An input error found while running a command: ``main`` prints it and exits 2."""


def _fail(message: str) -> NoReturn:
    raise _Failure(message)


def _echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Write to the current ``sys.stdout``/``sys.stderr`` and flush (stdout and stderr stay in order
    when both go to one pipe)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n" if nl else text)
    stream.flush()


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


def _tune_gc() -> None:
    """A lint run allocates millions of short-lived objects; CPython's default thresholds spent ~30%
    of a corpus run in collections of the older generations (bench/speed.py). Young collections stay
    frequent (cycles die young here); the older ones run rarely. The process is short-lived."""
    import gc

    gc.set_threshold(20_000, 1_000, 1_000)


def check(paths: tuple[str, ...], fmt: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
          set_items: tuple[str, ...], select: tuple[str, ...], ignore: tuple[str, ...], fail_level: str | None,
          fix: bool, diff: bool, apply_fixes: bool, unsafe_fixes: bool, patch_file: str | None,
          color: bool | None) -> int:
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
        run = run_check(list(paths), settings, options, need_edits=need_edits, want_estimates=want_estimates)
    except MissingPathError as exc:
        _fail(f"{exc}: no such file or directory")
    code = exit_code(run.diagnostics, settings)
    if fixing:
        from mbmem_lint.fix.output import render_fix_output

        mode = "apply" if apply_fixes else ("diff" if diff else "fix")
        if mode != "diff":
            render(run.diagnostics, fmt or default_format(), sources=run.sources, stream=sys.stdout, color=color)
        text, n_fixes = render_fix_output(run.diagnostics, run.sources, mode=mode,  # type: ignore[arg-type]
                                          unsafe=unsafe_fixes, patch_file=patch_file)
        if text:
            _echo(text, nl=not text.endswith("\n"))
        if mode == "diff" and n_fixes:
            code = max(code, EXIT_FINDINGS)
        return code
    estimates = run.estimates if (fmt or default_format()) in ("github", "markdown") else None
    render(run.diagnostics, fmt or default_format(), sources=run.sources, stream=sys.stdout,
           estimates=estimates, color=color)
    return code


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


def resolve(path: str, function: str | None, gpu: str | None, world_size: int | None, recipe: str | None,
            set_items: tuple[str, ...], fmt: str) -> int:
    """Print the effective config of each recipe in PATH, with where each value was set."""
    import json

    from mbmem_lint.report_resolve import render_resolve_json, render_resolve_text

    run, _settings_obj = _resolve_one(path, function, gpu, world_size, recipe, set_items)
    errors = [d for d in run.diagnostics if d.severity == "error"]
    for d in run.diagnostics:
        _echo(f"{d.location.path}:{d.location.line}:{d.location.column}: {d.code} {d.message}", err=True)
    if fmt == "json":
        _echo(json.dumps(render_resolve_json(run.recipes), indent=2, sort_keys=False))
    else:
        _echo(render_resolve_text(run.recipes), nl=False)
    if not run.recipes:
        _echo("mbmem-lint: no recipe functions found", err=True)
        return EXIT_ERROR if errors or not run.recipes else EXIT_CLEAN
    return EXIT_CLEAN


def estimate(path: str, gpu: str | None, world_size: int | None, recipe: str | None, set_items: tuple[str, ...],
             fmt: str) -> int:
    """Per-rank memory estimate of FILE[::FUNCTION] for every pipeline stage."""
    import json

    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.render import render_markdown, render_text
    from mbmem_lint.estimate.types import EstimateUnavailable

    run, _s = _resolve_one(path, None, gpu, world_size, recipe, set_items)
    if not run.recipes:
        for d in run.diagnostics:
            _echo(f"{d.location.path}:{d.location.line}: {d.code} {d.message}", err=True)
        _fail(f"no recipe function found in {path}")
    outputs: list[Any] = []
    status = EXIT_CLEAN
    for r in run.recipes:
        try:
            est = estimate_recipe(r, gpu=gpu, world_size=world_size)
        except EstimateUnavailable as exc:
            _echo(f"{r.path}::{r.function}: estimate unavailable: {exc.reason}", err=True)
            status = EXIT_ERROR
            continue
        except UnknownGpuError as exc:
            _fail(str(exc))
        if not est.fits:
            status = max(status, EXIT_FINDINGS)
        outputs.append(est)
    if fmt == "json":
        data = [e.to_json() for e in outputs]
        _echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        render_fn = render_markdown if fmt == "markdown" else render_text
        _echo("\n".join(render_fn(e) for e in outputs), nl=False)
    return status


def rules_cmd(fmt: str) -> int:
    """List every rule: code, name, default severity, fixable, summary."""
    from mbmem_lint.check import registry

    if fmt == "json":
        import json

        _echo(json.dumps(registry.rules_json(), indent=2))
    else:
        _echo(registry.list_rules_text(), nl=False)
    return EXIT_CLEAN


def rule_cmd(code: str) -> int:
    """Explain one rule (MBM123 or its name)."""
    from mbmem_lint.check import registry

    try:
        text = registry.explain_rule_text(code)
    except KeyError:
        _fail(f"unknown rule {code!r}; `mbmem-lint rules` lists them")
    _echo(text, nl=False)
    return EXIT_CLEAN


def dev_regenerate(check_only: bool, corpus: str | None) -> int:
    """Regenerate the schema, model table and library summary from megatron-bridge 0.6.2 / core 0.19.2."""
    from pathlib import Path

    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.dev.regenerate import check_stale, regenerate

    root = Path(corpus) if corpus else ensure_corpus()
    if check_only:
        stale = check_stale(root)
        for name in stale:
            _echo(f"stale: {name}")
        return EXIT_FINDINGS if stale else EXIT_CLEAN
    for p in regenerate(root, Path(__file__).parent / "data"):
        _echo(f"wrote {p}")
    return EXIT_CLEAN


def dev_docs() -> int:
    """Regenerate docs/rules from the rule catalog."""
    from pathlib import Path

    from mbmem_lint.check.docs import generate_docs

    out = Path(__file__).resolve().parents[1] / "docs" / "rules"
    for p in generate_docs(out):
        _echo(f"wrote {p}")
    return EXIT_CLEAN


# -- argument parsing ------------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    """``--world-size``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not in the range x>=1")
    return value


def _file_path(text: str) -> str:
    """``--patch``: a file to write; an existing folder is a usage error."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"file {text!r} is a directory")
    return text


def _dir_path(text: str) -> str:
    """``--corpus``: a folder; an existing file is a usage error."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"directory {text!r} is a file")
    return text


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", help="Target GPU (h100, h200, b200, gb200, a100-40gb, ...).")
    p.add_argument("--world-size", type=_positive_int, metavar="INTEGER", help="Number of GPUs of the job.")
    p.add_argument("--recipe", metavar="FILE::FUNCTION", help="Recipe the given YAML override files apply to.")
    p.add_argument("--set", dest="set_items", action="append", default=[], metavar="KEY=VALUE",
                   help="Hydra-style override (repeatable): model.tensor_model_parallel_size=4.")


def _terminal_width() -> int:
    """``shutil.get_terminal_size().columns`` without importing shutil (which loads bz2 and lzma)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """The stock formatter and width. argparse makes one for every option it adds (and, parsing
    options between positionals, for the usage line), so the stock one's shutil import would cost
    every run."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_terminal_width() - 2)


def _parser(prog: str, description: str, sub: Any = None, name: str = "") -> argparse.ArgumentParser:
    kwargs: dict[str, Any] = {"prog": prog, "description": description, "allow_abbrev": False,
                              "formatter_class": _Formatter}
    if sub is None:
        return argparse.ArgumentParser(**kwargs)
    parser: argparse.ArgumentParser = sub.add_parser(name, help=description, **kwargs)
    return parser


def _top_parser() -> argparse.ArgumentParser:
    """``mbmem-lint -h`` / ``--version``; lists the commands (their options live in ``_command_parser``)."""
    top = _parser(PROG, "Static linter and per-rank memory estimator for Megatron Bridge recipes. "
                        f"A first argument that is not a command runs `check`: `{PROG} recipes/`.")
    top.add_argument("--version", action="version", version=f"{PROG}, version {__version__}")
    sub = top.add_subparsers(title="commands", metavar="COMMAND")
    for name in NAMES:
        _parser(f"{PROG} {name}", _description(name), sub, name)
    return top


def _command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command; only the one that runs is built."""
    p = _parser(f"{PROG} {name}", _description(name))
    if name in COMMANDS:
        p.set_defaults(_func=COMMANDS[name])
    if name == "check":
        p.add_argument("paths", nargs="+", metavar="PATHS")
        p.add_argument("--format", dest="fmt", choices=FORMATS, default=None,
                       help="Output format (default: text; github inside GitHub Actions).")
        _add_target_options(p)
        p.add_argument("--select", action="append", default=[], metavar="CODE",
                       help="Only these rule codes or prefixes (repeatable).")
        p.add_argument("--ignore", action="append", default=[], metavar="CODE",
                       help="Skip these rule codes or prefixes (repeatable).")
        p.add_argument("--fail-level", choices=("error", "warning", "info"), default=None,
                       help="Lowest severity that makes the exit code 1 (default: warning).")
        p.add_argument("--fix", action="store_true", help="Show fixes as a unified diff (writes nothing).")
        p.add_argument("--diff", action="store_true",
                       help="Print only the diff of the fixes (writes nothing; exit 1 if any).")
        p.add_argument("--apply", dest="apply_fixes", action="store_true", help="Write safe fixes to the files.")
        p.add_argument("--unsafe-fixes", action="store_true",
                       help="With --fix/--apply, include fixes that change behaviour.")
        p.add_argument("--patch", dest="patch_file", type=_file_path, metavar="FILE",
                       help="Also write the diff to this file.")
        p.add_argument("--color", action=argparse.BooleanOptionalAction, default=None,
                       help="Colour the text output (default: when a TTY).")
    elif name == "resolve":
        p.add_argument("path", metavar="PATH")
        p.add_argument("--function", help="Only this recipe function (or use FILE::FUNCTION).")
        _add_target_options(p)
        p.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    elif name == "estimate":
        p.add_argument("path", metavar="PATH")
        _add_target_options(p)
        p.add_argument("--format", dest="fmt", choices=("text", "json", "markdown"), default="text")
    elif name == "rules":
        p.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    elif name == "rule":
        p.add_argument("code", metavar="CODE")
    elif name == "dev":
        sub = p.add_subparsers(title="commands", metavar="COMMAND", required=True)
        regen = _parser(f"{PROG} dev regenerate", dev_regenerate.__doc__ or "", sub, "regenerate")
        regen.set_defaults(_func=dev_regenerate)
        regen.add_argument("--check", dest="check_only", action="store_true",
                           help="Exit 1 if the shipped data is stale; write nothing.")
        regen.add_argument("--corpus", type=_dir_path, metavar="DIRECTORY",
                           help="Unpacked wheels (default: download).")
        docs = _parser(f"{PROG} dev docs", dev_docs.__doc__ or "", sub, "docs")
        docs.set_defaults(_func=dev_docs)
    return p


COMMANDS: dict[str, Callable[..., int]] = {
    "check": check, "resolve": resolve, "estimate": estimate, "rules": rules_cmd, "rule": rule_cmd,
}
DEV_HELP = "Maintainer commands: regenerate shipped data from the pinned wheels."
NAMES = (*COMMANDS, "dev")  # dev is a group: regenerate, docs


def _description(name: str) -> str:
    return DEV_HELP if name == "dev" else COMMANDS[name].__doc__ or ""


def _exit_status(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else (EXIT_CLEAN if exc.code is None else EXIT_ERROR)


def _run(args: list[str]) -> int:
    if not args:
        _command_parser("check").print_help()
        return EXIT_CLEAN
    if args[0] == "--version":  # whatever follows, as before
        _echo(f"{PROG}, version {__version__}")
        return EXIT_CLEAN
    if args[0] not in NAMES:
        if args[0] in ("-h", "--help"):
            try:
                _top_parser().parse_args(args)
            except SystemExit as exc:
                return _exit_status(exc)
        args = ["check", *args]
    parser = _command_parser(args[0])
    try:
        # The dev group parses its subcommand itself; the commands take options between positionals.
        ns = parser.parse_args(args[1:]) if args[0] == "dev" else parser.parse_intermixed_args(args[1:])
    except SystemExit as exc:
        return _exit_status(exc)
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(ns).items()}
    func = kwargs.pop("_func")
    _tune_gc()
    return int(func(**kwargs))


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except _Failure as exc:
        _echo(f"{PROG}: error: {exc}", err=True)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`mbmem-lint rules | head`): exit 1 quietly, as before; point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FINDINGS
    except (KeyboardInterrupt, EOFError):
        _echo("\nAborted!", err=True)
        return EXIT_FINDINGS


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
