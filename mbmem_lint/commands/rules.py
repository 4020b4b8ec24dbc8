"""``mbmem-lint rules`` and ``mbmem-lint rule CODE``: the rule catalog."""

from __future__ import annotations

import click

from mbmem_lint.commands.common import CONTEXT_SETTINGS, EXIT_CLEAN, echo, fail, format_option


@click.command(context_settings=CONTEXT_SETTINGS,
               short_help="List every rule: code, name, severity, fixable, summary.")
@format_option(("text", "json"), "text", "Output format.")
def rules(fmt: str) -> int:
    """List every rule: code, name, default severity, fixable, summary."""
    from mbmem_lint.check import registry

    if fmt == "json":
        import json

        echo(json.dumps(registry.rules_json(), indent=2))
    else:
        echo(registry.list_rules_text(), nl=False)
    return EXIT_CLEAN


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("code", metavar="CODE")
def rule(code: str) -> int:
    """Explain one rule (MBM123 or its name)."""
    from mbmem_lint.check import registry

    try:
        text = registry.explain_rule_text(code)
    except KeyError:
        fail(f"unknown rule {code!r}; `mbmem-lint rules` lists them")
    echo(text, nl=False)
    return EXIT_CLEAN
