"""``--format json``: ``{"diagnostics": [...], "summary": {...}}``.

The shape is documented by ``docs/json-schema/diagnostics.schema.json`` (JSON Schema 2020-12);
other tools depend on it, so change both together. Values are exact: control characters are JSON
escapes, and so (:func:`mbmem_lint.report.escape.json_text`) are the characters JSON leaves raw
(C1 controls, line separators, bidirectional controls, the lone surrogates of an undecodable file
name), so the document is valid UTF-8 and safe to print.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.report.common import ordered, summarize
from mbmem_lint.report.escape import json_text


def build_json(diagnostics: Iterable[Diagnostic], bridge: Any = None) -> dict[str, Any]:
    """``bridge``: the Megatron Bridge data the run used (``BridgeData``), recorded as ``megatron_bridge``."""
    diags = ordered(diagnostics)
    out = {
        "diagnostics": [d.to_json() for d in diags],
        "summary": summarize(diags).to_json(),
    }
    if bridge is not None:
        out["megatron_bridge"] = bridge.to_json()
    return out


def render_json(diagnostics: Iterable[Diagnostic], stream: TextIO, bridge: Any = None) -> None:
    stream.write(json_text(json.dumps(build_json(diagnostics, bridge), indent=2, ensure_ascii=False)) + "\n")
