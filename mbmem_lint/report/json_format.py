"""``--format json``: ``{"diagnostics": [...], "summary": {...}}``.

The shape is documented by ``docs/json-schema/diagnostics.schema.json`` (JSON Schema 2020-12);
other tools depend on it, so change both together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.report.common import ordered, summarize


def build_json(diagnostics: Iterable[Diagnostic]) -> dict[str, Any]:
    diags = ordered(diagnostics)
    return {
        "diagnostics": [d.to_json() for d in diags],
        "summary": summarize(diags).to_json(),
    }


def render_json(diagnostics: Iterable[Diagnostic], stream: TextIO) -> None:
    json.dump(build_json(diagnostics), stream, indent=2, ensure_ascii=False)
    stream.write("\n")
