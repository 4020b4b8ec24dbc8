"""Run the ``mbmem-lint`` command line in-process, with stdout and stderr captured."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    output: str  # stdout and stderr interleaved, in the order they were written


class _Tee(io.StringIO):
    """One captured stream that also copies what it gets into the shared, interleaved one."""

    def __init__(self, mixed: io.StringIO) -> None:
        super().__init__()
        self._mixed = mixed

    def write(self, s: str) -> int:
        self._mixed.write(s)
        return super().write(s)


def run_cli(args: list[str], cwd: str | Path | None = None) -> CliResult:
    """``mbmem-lint ARGS`` (from ``cwd`` when given); exceptions other than exits propagate."""
    from mbmem_lint.cli import main

    mixed = io.StringIO()
    out, err = _Tee(mixed), _Tee(mixed)
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(old)
    return CliResult(code, out.getvalue(), err.getvalue(), mixed.getvalue())
