"""``mbmem-lint dev ...``: maintainer commands (shipped data, rule docs)."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import CONTEXT_SETTINGS, EXIT_CLEAN, EXIT_FINDINGS, echo


@click.group(context_settings=CONTEXT_SETTINGS,
             short_help="Maintainer commands: shipped data, rule docs.")
def dev() -> None:
    """Maintainer commands: regenerate shipped data from the pinned wheels, rule docs."""


@dev.command(context_settings=CONTEXT_SETTINGS,
             short_help="Regenerate the shipped schema, model table and library summary of a release.")
@click.option("--version", "version", metavar="X.Y.Z", default=None,
              help="Megatron Bridge release to regenerate (a shipped one; default: the newest).")
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if the shipped data is stale; write nothing.")
@click.option("--corpus", type=click.Path(file_okay=False), metavar="DIRECTORY",
              help="Unpacked wheels of that release and its megatron-core (default: download).")
def regenerate(version: str | None, check_only: bool, corpus: str | None) -> int:
    """Regenerate one release's section of the shipped data from its megatron-bridge wheel and the
    megatron-core wheel it was built against (0.4.2/0.17.1, 0.5.1/0.18.2, 0.6.2/0.19.2; see
    docs/versions.md). The model table is rebuilt with the newest release."""
    from pathlib import Path

    from mbmem_lint.commands.common import fail
    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.dev.regenerate import check_stale, corpus_version
    from mbmem_lint.dev.regenerate import regenerate as write_data
    from mbmem_lint.resolve.versions import SHIPPED, parse_version

    version = version or max(SHIPPED, key=parse_version)
    if version not in SHIPPED:
        fail(f"--version {version}: not a shipped release ({', '.join(SHIPPED)}); add it to "
             "mbmem_lint/resolve/versions.py SHIPPED with its megatron-core first")
    root = Path(corpus) if corpus else ensure_corpus(version=version)
    found = corpus_version(root)
    if found != version:
        fail(f"--corpus {root} holds megatron-bridge {found}, not {version}")
    if check_only:
        stale = check_stale(root, version=version)
        for name in stale:
            echo(f"stale: {name}")
        return EXIT_FINDINGS if stale else EXIT_CLEAN
    for p in write_data(root, Path(__file__).resolve().parents[1] / "data", version=version):
        echo(f"wrote {p}")
    return EXIT_CLEAN


@dev.command(context_settings=CONTEXT_SETTINGS)
def docs() -> int:
    """Regenerate docs/rules from the rule catalog."""
    from pathlib import Path

    from mbmem_lint.check.docs import generate_docs

    out = Path(__file__).resolve().parents[2] / "docs" / "rules"
    for p in generate_docs(out):
        echo(f"wrote {p}")
    return EXIT_CLEAN
