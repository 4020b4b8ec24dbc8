"""``mbmem-lint dev ...``: maintainer commands (shipped data, rule docs)."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import EXIT_CLEAN, EXIT_FINDINGS, echo


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             short_help="Maintainer commands: shipped data, rule docs.")
def dev() -> None:
    """Maintainer commands: regenerate shipped data from the pinned wheels, rule docs."""


@dev.command(context_settings={"help_option_names": ["-h", "--help"]},
             short_help="Regenerate the shipped schema, model table and library summary.")
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if the shipped data is stale; write nothing.")
@click.option("--corpus", type=click.Path(file_okay=False), metavar="DIRECTORY",
              help="Unpacked wheels (default: download).")
def regenerate(check_only: bool, corpus: str | None) -> int:
    """Regenerate the schema, model table and library summary from megatron-bridge 0.6.2 / core 0.19.2."""
    from pathlib import Path

    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.dev.regenerate import check_stale
    from mbmem_lint.dev.regenerate import regenerate as write_data

    root = Path(corpus) if corpus else ensure_corpus()
    if check_only:
        stale = check_stale(root)
        for name in stale:
            echo(f"stale: {name}")
        return EXIT_FINDINGS if stale else EXIT_CLEAN
    for p in write_data(root, Path(__file__).resolve().parents[1] / "data"):
        echo(f"wrote {p}")
    return EXIT_CLEAN


@dev.command(context_settings={"help_option_names": ["-h", "--help"]})
def docs() -> int:
    """Regenerate docs/rules from the rule catalog."""
    from pathlib import Path

    from mbmem_lint.check.docs import generate_docs

    out = Path(__file__).resolve().parents[2] / "docs" / "rules"
    for p in generate_docs(out):
        echo(f"wrote {p}")
    return EXIT_CLEAN
