"""``--format sarif``: SARIF 2.1.0 for GitHub code scanning (``github/codeql-action/upload-sarif``).

* ``tool.driver``: name, version, informationUri and every rule of the catalog (id, name, short
  and full description, help with the rule doc as text and Markdown, default level).
* results: ruleId/ruleIndex/level/message, one physical location (URI relative to ``%SRCROOT%``
  with forward slashes, 1-based region; columns in Unicode code points, ``columnKind`` says so) and
  ``partialFingerprints["mbmemFingerprint/v1"]``: a hash of the rule, the file, the recipe
  function and the fields, so an alert survives lines moving around it.
* fixes (safe and unsafe ones) as ``artifactChanges`` with character-offset replacements.
* ``originalUriBaseIds``: ``%SRCROOT%`` is the folder the relative URIs are relative to (``root``,
  default the working folder), as a ``file://`` URI: code scanning maps it onto the checkout.
* the log is written with :func:`mbmem_lint.report.escape.json_text`: valid UTF-8 whatever the file
  names (an undecodable byte of a name is ``%XX`` in its URI).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import mbmem_lint
from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.records import dataclass
from mbmem_lint.report.common import ordered, repo_path
from mbmem_lint.report.escape import json_text
from mbmem_lint.sources import Sources

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "mbmem-lint"
INFORMATION_URI = "https://pypi.org/project/mbmem-lint/"
FINGERPRINT_KEY = "mbmemFingerprint/v1"
SRCROOT = "%SRCROOT%"  # the URI base of every relative artifact location
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_PROBLEM_SEVERITY = {"error": "error", "warning": "warning", "info": "recommendation"}
_MAX_DESCRIPTION = 1024  # GitHub: shortDescription/fullDescription text


@dataclass(frozen=True)
class RuleInfo:
    """What SARIF needs of a rule (built from the catalog's rule objects or a diagnostic)."""

    code: str
    name: str
    severity: str
    short: str
    full: str
    help_markdown: str
    tags: tuple[str, ...] = ()


def _clip(text: str, limit: int = _MAX_DESCRIPTION) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_paragraph(markdown: str) -> str:
    for block in markdown.split("\n\n"):
        block = block.strip()
        if block and not block.startswith("#"):
            return block
    return ""


def rule_info(rule: Any, doc_markdown: str | None = None) -> RuleInfo:
    """Adapt a catalog rule (``code``, ``name``, ``severity``, ``summary``, ``rationale``, …)."""
    code = str(rule.code)
    name = str(rule.name)
    short = str(getattr(rule, "summary", "") or name)
    full = str(getattr(rule, "rationale", "") or "") or (_first_paragraph(doc_markdown or "") or short)
    doc = doc_markdown or f"**{code} {name}**\n\n{short}\n\n{full}"
    tags = ["mbmem-lint"]
    family = getattr(rule, "family", None)
    if isinstance(family, str) and family:
        tags.append(family)
    return RuleInfo(code, name, str(rule.severity), _clip(short), _clip(full), doc, tuple(tags))


def catalog_rules() -> list[RuleInfo]:
    """All rules of the catalog (``mbmem_lint.check.registry``); empty when it is unavailable."""
    try:
        registry = importlib.import_module("mbmem_lint.check.registry")
    except ImportError:
        return []
    all_rules: Callable[[], Iterable[Any]] | None = getattr(registry, "all_rules", None)
    doc_fn: Callable[[Any], str] | None = getattr(registry, "rule_doc_markdown", None)
    if all_rules is None:
        return []
    return [rule_info(r, doc_fn(r) if doc_fn else None) for r in all_rules()]


def _rule_from_diagnostic(d: Diagnostic) -> RuleInfo:
    short = d.name.replace("-", " ").capitalize()
    return RuleInfo(
        d.code, d.name, d.severity, short, short, f"**{d.code} {d.name}**\n\n{short}.", ("mbmem-lint",)
    )


def _reporting_descriptor(r: RuleInfo) -> dict[str, Any]:
    level = _LEVEL.get(r.severity, "warning")
    return {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": r.short},
        "fullDescription": {"text": r.full},
        "help": {"text": r.help_markdown, "markdown": r.help_markdown},
        "defaultConfiguration": {"level": level},
        "properties": {
            "tags": list(r.tags),
            "precision": "high",
            "problem.severity": _PROBLEM_SEVERITY.get(r.severity, "warning"),
        },
    }


def artifact_uri(path: str, root: str | Path | None = None) -> str:
    """Repository-relative URI with forward slashes (absolute paths under ``root``, default the
    working directory, are made relative; others become ``file://`` URIs). Characters URIs do not
    allow are %-encoded."""
    rel = repo_path(path, root)
    if Path(rel).is_absolute():
        return Path(rel).as_uri()
    return quote(rel, safe="/-._~", errors="surrogateescape")  # a name's undecodable bytes as %XX


def artifact_location(path: str, root: str | Path | None = None) -> dict[str, str]:
    """``{"uri", "uriBaseId"}``: relative to ``%SRCROOT%`` (the run's ``originalUriBaseIds`` says where
    that is), or an absolute ``file://`` URI alone for a file outside it (SARIF 2.1.0 §3.4.4: no base
    for an absolute URI)."""
    uri = artifact_uri(path, root)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": SRCROOT}


def fingerprint(d: Diagnostic) -> str:
    """Stable across line moves: rule, file, recipe function, fields (message only when there is
    neither a function nor a field to tell findings apart)."""
    parts = [d.code, d.location.path.replace("\\", "/"), d.function or "", ",".join(sorted(d.fields))]
    if not d.function and not d.fields:
        parts.append(d.message)
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _region(d: Diagnostic, sources: Sources | None) -> dict[str, int]:
    loc = d.location
    end_line = loc.end_line if loc.end_line is not None and loc.end_line >= loc.line else loc.line
    end_col = loc.end_column
    if end_col is None:
        src = (sources or {}).get(loc.path)
        # No end: to the end of the line when the text is known, else an empty region.
        end_col = len(src.line_text(end_line).rstrip()) + 1 if src is not None else loc.column
    if end_line == loc.line:
        end_col = max(end_col, loc.column)
    return {
        "startLine": loc.line,
        "startColumn": loc.column,
        "endLine": end_line,
        "endColumn": max(end_col, 1),
    }


def _fix(d: Diagnostic, root: str | Path | None) -> list[dict[str, Any]]:
    if d.fix is None or d.fix.applicability == "display-only" or not d.fix.edits:
        return []
    changes: dict[str, list[dict[str, Any]]] = {}
    for e in sorted(d.fix.edits, key=lambda e: (e.path, e.start)):
        changes.setdefault(e.path, []).append(
            {
                "deletedRegion": {"charOffset": e.start, "charLength": e.end - e.start},
                "insertedContent": {"text": e.replacement},
            }
        )
    return [
        {
            "description": {"text": f"{d.fix.description} ({d.fix.applicability})"},
            "artifactChanges": [
                {
                    "artifactLocation": artifact_location(p, root),
                    "replacements": reps,
                }
                for p, reps in changes.items()
            ],
        }
    ]


def _message(d: Diagnostic) -> str:
    lines = [d.message]
    lines += [f"Note: {n}" for n in d.notes]
    if d.fix is not None:
        lines.append(f"Fix ({d.fix.applicability}): {d.fix.description}")
    return "\n".join(lines)


def build_sarif(
    diagnostics: Iterable[Diagnostic],
    *,
    rules: Sequence[Any] | None = None,
    sources: Sources | None = None,
    root: str | Path | None = None,
    bridge: Any = None,
) -> dict[str, Any]:
    """The SARIF log as a dict. ``rules``: catalog rule objects (default: the registry's).
    ``bridge``: the Megatron Bridge data the run used, recorded in the run's property bag."""
    diags = ordered(diagnostics)
    infos = (
        [rule_info(r) if not isinstance(r, RuleInfo) else r for r in rules]
        if rules is not None
        else catalog_rules()
    )
    by_code: dict[str, RuleInfo] = {}
    for r in infos:
        by_code.setdefault(r.code, r)
    for d in diags:  # tool diagnostics (MBM0xx) or rules missing from the catalog
        if d.code not in by_code:
            by_code[d.code] = _rule_from_diagnostic(d)
    codes = sorted(by_code)
    index = {c: i for i, c in enumerate(codes)}

    results: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for d in diags:
        fp = fingerprint(d)
        n = seen.get(fp, 0)
        seen[fp] = n + 1
        result: dict[str, Any] = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": _LEVEL.get(d.severity, "warning"),
            "message": {"text": _message(d)},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": artifact_location(d.location.path, root),
                        "region": _region(d, sources),
                    },
                    **(
                        {"logicalLocations": [{"name": d.function, "kind": "function"}]} if d.function else {}
                    ),
                }
            ],
            "partialFingerprints": {FINGERPRINT_KEY: fp if n == 0 else f"{fp}:{n}"},
            "properties": {"fields": list(d.fields), **({"function": d.function} if d.function else {})},
        }
        fixes = _fix(d, root)
        if fixes:
            result["fixes"] = fixes
        results.append(result)

    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": TOOL_NAME,
                "version": mbmem_lint.__version__,
                "semanticVersion": mbmem_lint.__version__,
                "informationUri": INFORMATION_URI,
                "rules": [_reporting_descriptor(by_code[c]) for c in codes],
            }
        },
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    if bridge is not None:
        run["properties"] = {"megatron_bridge": bridge.to_json()}
    # What the relative URIs are relative to, so that code scanning finds the files from any folder
    # of any checkout (`mbmem-lint check .` run in a subfolder of the repository included).
    base = Path(root) if root is not None else Path(os.getcwd())
    run["originalUriBaseIds"] = {SRCROOT: {"uri": base.resolve().as_uri() + "/"}}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif(
    diagnostics: Iterable[Diagnostic],
    stream: TextIO,
    *,
    rules: Sequence[Any] | None = None,
    sources: Sources | None = None,
    root: str | Path | None = None,
    bridge: Any = None,
) -> None:
    log = build_sarif(diagnostics, rules=rules, sources=sources, root=root, bridge=bridge)
    stream.write(json_text(json.dumps(log, indent=2, ensure_ascii=False)) + "\n")
