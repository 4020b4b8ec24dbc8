"""Report formats: ``text`` (terminal), ``json``, ``github`` (workflow annotations), ``sarif``
(code scanning) and ``markdown`` (PR summaries). One module per format; :func:`render` dispatches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.sources import Sources

# Format modules load on first use: a pre-commit run renders one format (import cost is start-up).
_LAZY = {
    "Summary": "common", "summarize": "common", "summary_sentence": "common",
    "write_step_summary": "github", "build_json": "json_format", "summary_markdown": "markdown",
    "build_sarif": "sarif", "use_color": "text",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


FORMATS: tuple[str, ...] = ("text", "json", "github", "sarif", "markdown")

__all__ = [
    "FORMATS",
    "Summary",
    "build_json",
    "build_sarif",
    "default_format",
    "render",
    "summarize",
    "summary_markdown",
    "summary_sentence",
    "use_color",
    "write_step_summary",
]


def default_format(env: Mapping[str, str] | None = None) -> str:
    """``github`` inside GitHub Actions (``GITHUB_ACTIONS=true``), else ``text``. Only used when
    no ``--format`` is given."""
    env = os.environ if env is None else env
    return "github" if env.get("GITHUB_ACTIONS") == "true" else "text"


def render(
    diagnostics: Iterable[Diagnostic],
    fmt: str,
    *,
    sources: Sources,
    stream: TextIO,
    estimates: Iterable[Any] | None = None,
    color: bool | None = None,
    rules: Sequence[Any] | None = None,
    root: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    regressions: Sequence[Mapping[str, Any]] | None = None,
    bridge: Any = None,
) -> None:
    """Write ``diagnostics`` to ``stream`` in format ``fmt``.

    ``estimates``: memory estimates (``Estimate`` objects or their JSON dicts) for the Markdown
    output and the GitHub step summary. ``color``: force colour on/off for ``text`` (None: TTY and
    ``NO_COLOR``). ``rules``: catalog rules for SARIF (default: the registry). ``root``: folder
    SARIF URIs are relative to (default: paths as given). ``env``: environment (default
    ``os.environ``) for ``NO_COLOR`` and ``GITHUB_STEP_SUMMARY``. ``regressions``: before/after rows of
    ``check --base`` (:func:`mbmem_lint.regression.regression_rows`) for the Markdown outputs.
    ``bridge``: the Megatron Bridge data the run linted against (``BridgeData``): named under the text
    summary, recorded in JSON and SARIF.

    With ``github``, when ``GITHUB_STEP_SUMMARY`` is set, a Markdown summary is appended to it.
    """
    diags = list(diagnostics)
    env = os.environ if env is None else env
    if fmt == "text":
        from mbmem_lint.report.text import render_text

        render_text(diags, stream, sources=sources, color=color, env=env, bridge=bridge)
    elif fmt == "json":
        from mbmem_lint.report.json_format import render_json

        render_json(diags, stream, bridge)
    elif fmt == "github":
        from mbmem_lint.report.github import render_github, write_step_summary

        render_github(diags, stream)
        summary_path = env.get("GITHUB_STEP_SUMMARY")
        if summary_path:
            write_step_summary(summary_path, diags, estimates, regressions=regressions)
    elif fmt == "sarif":
        from mbmem_lint.report.sarif import render_sarif

        render_sarif(diags, stream, rules=rules, sources=sources, root=root, bridge=bridge)
    elif fmt == "markdown":
        from mbmem_lint.report.markdown import render_markdown

        render_markdown(diags, stream, estimates=estimates, regressions=regressions)
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
