"""YAML override files and ``--set`` dotlists → flat override entries.

Semantics follow what Megatron Bridge actually runs (``OmegaConf.load`` = PyYAML ``SafeLoader``, YAML 1.1,
plus OmegaConf's float resolver and no timestamps; Hydra's override grammar for dotlists). Verified
against omegaconf 2.3.1 / PyYAML 6.0 / hydra-core 1.3.2:

* plain scalars: ``yes/no/on/off/true/false`` (PyYAML's case forms) → bool, but ``y``/``n`` stay strings;
  ``1e-4`` → float; ``0x1F``/``017``/``0b101``/``1_000``/``1:30`` → int; ``2024-01-01`` stays a string;
  ``~``/``null``/empty → None; ``???`` (quoted or not) → :data:`MISSING`; any string containing ``${`` →
  :class:`Interpolation`.
* duplicate keys: PyYAML keeps the last value, but ``OmegaConf.load`` refuses the file ("found duplicate
  key"); we keep the last and report ``MBM003``.
* unknown tags (``!!python/object``, ``!foo``): ``OmegaConf.load`` refuses them; we never construct anything,
  drop the value and report ``MBM005``.
* more than one YAML document: ``OmegaConf.load`` refuses ("expected a single document") → ``MBM002``.

Nothing here constructs Python objects from tags, imports or evaluates anything. The YAML text is
tokenised by ruamel's event parser and composed by a small iterative composer in this module (so alias
expansion, nesting depth and time are bounded), and never raises for bad input: every problem becomes a
diagnostic on :attr:`OverrideFile.diagnostics`.

Location conventions (for both files and dotlists): ``line``/``column`` are 1-based, columns count
characters (code points), and ``end_line``/``end_column`` point one past the last character of the span
(exclusive end). ``value_offsets``/``key_offsets`` are the same spans as ``[start, end)`` character offsets
into the text (for dotlists: into the item string), ready for :class:`~mbmem_lint.diagnostics.Edit`.
Multi-line values span the whole node (a block scalar's span ends at the start of the line after it).
"""

from __future__ import annotations

import io
import math
import re
import time
import warnings
from collections.abc import Iterator
from typing import Any

from mbmem_lint.diagnostics import Diagnostic, Location, Severity
from mbmem_lint.parse.override_types import (
    MISSING,
    Interpolation,
    OverrideEntry,
    OverrideFile,
    OverrideOp,
)
from mbmem_lint.records import dataclass

# ----------------------------------------------------------------------------------------------------------
# Limits and diagnostic codes

MAX_YAML_CHARS = 262_144  # real override files are a few KB; ruamel's pure-Python parser is slow (~50-100 KB/s)
MAX_ALIAS_NODES = 100_000  # nodes visited through aliases / merge keys ("billion laughs")
MAX_DEPTH = 100  # nesting of mappings/sequences (YAML) or lists/dicts (dotlist values)
TIME_BUDGET_S = 5.0  # per file

PARSE_ERROR = ("MBM002", "parse-error")
DUPLICATE_KEY = ("MBM003", "duplicate-key")
FILE_SKIPPED = ("MBM004", "file-skipped")
UNSUPPORTED_TAG = ("MBM005", "unsupported-yaml-tag")
BAD_OVERRIDE = ("MBM006", "bad-override")

# OmegaConf.load fails on a duplicate key, so the run cannot start: this is an error, not a style issue.
DUPLICATE_KEY_SEVERITY: Severity = "error"

DOTLIST_PATH = "<--set>"

_RECIPE_REF_RE = re.compile(r"^\s*#\s*mbmem-lint\s*:\s*recipe\s*=\s*(\S+)")


def _diag(code_name: tuple[str, str], severity: Severity, message: str, loc: Location) -> Diagnostic:
    return Diagnostic(code=code_name[0], name=code_name[1], severity=severity, message=message, location=loc)


def find_recipe_ref(text: str) -> str | None:
    """``FILE::FUNCTION`` from a ``# mbmem-lint: recipe=...`` comment among the leading comment lines."""
    for line in text.splitlines()[:200]:
        stripped = line.strip().lstrip("\ufeff")
        if not stripped:
            continue
        if not stripped.startswith("#"):
            return None
        m = _RECIPE_REF_RE.match(stripped)
        if m:
            return m.group(1)
    return None


# ----------------------------------------------------------------------------------------------------------
# YAML 1.1 scalar resolution as PyYAML's SafeLoader + OmegaConf's loader do it

_BOOL_RE = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT_RE = re.compile(
    r"""^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+
    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
    re.X,
)
# OmegaConf's float resolver (omegaconf/_utils.py get_yaml_loader): a superset of PyYAML's.
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_TRUE_WORDS = {"yes", "true", "on"}


def plain_scalar(text: str) -> tuple[bool, Any]:
    """(True, value) for an unquoted, untagged scalar that YAML 1.1 reads as a bool, float, int or null
    (PyYAML's implicit resolvers); (False, None) for one that stays a string."""
    if text[:1] in "yYnNtTfFoO" and _BOOL_RE.match(text):
        return True, text.lower() in _TRUE_WORDS
    if _FLOAT_RE.match(text):
        return True, _yaml_float(text)
    if _INT_RE.match(text):
        return True, _yaml_int(text)
    if _NULL_RE.match(text):
        return True, None
    return False, None


def _yaml_int(text: str) -> int:
    value = text.replace("_", "")
    sign = 1
    if value[:1] == "-":
        sign = -1
    if value[:1] in "+-":
        value = value[1:]
    if value == "0":
        return 0
    if value.startswith("0b"):
        return sign * int(value[2:], 2)
    if value.startswith("0x"):
        return sign * int(value[2:], 16)
    if ":" in value:
        digits = [int(part) for part in value.split(":")]
        digits.reverse()
        base, result = 1, 0
        for digit in digits:
            result += digit * base
            base *= 60
        return sign * result
    if value.startswith("0"):
        return sign * int(value, 8)
    return sign * int(value)


def _yaml_float(text: str) -> float:
    value = text.replace("_", "").lower()
    sign = 1.0
    if value[:1] == "-":
        sign = -1.0
    if value[:1] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * math.inf
    if value == ".nan":
        return math.nan
    if ":" in value:
        parts = [float(part) for part in value.split(":")]
        parts.reverse()
        base, result = 1.0, 0.0
        for part in parts:
            result += part * base
            base *= 60
        return sign * result
    return sign * float(value)


def _string_value(text: str) -> Any:
    if text == "???":
        return MISSING
    if "${" in text:
        return Interpolation(text)
    return text


class _Unsupported:
    """Marker for a value that cannot be used (unsupported tag); the entry is dropped."""


_UNSUPPORTED = _Unsupported()

_STD = "tag:yaml.org,2002:"
# Tags PyYAML's SafeLoader constructs but that make no sense in an override (dropped with a warning).
_SAFE_BUT_UNSUPPORTED = {_STD + t for t in ("binary", "omap", "pairs", "set", "timestamp")}


# ----------------------------------------------------------------------------------------------------------
# A small composer over ruamel's event stream (no construction, bounded)


class _Node:
    __slots__ = ("kind", "tag", "style", "flow", "value", "children", "start", "end", "raw_start")

    def __init__(self, kind: str, tag: str | None, start: tuple[int, int, int]) -> None:
        self.kind = kind  # "scalar" | "map" | "seq" | "alias"
        self.tag = tag  # explicit tag (None when implicit)
        self.style: str | None = None  # scalar quoting style (None = plain)
        self.flow = False
        self.value = ""  # scalar text
        self.children: list[_Node] = []  # map: k, v, k, v...; seq: items; alias: [target]
        self.start = start  # (line0, col0, index) of the content
        self.raw_start = start  # including an &anchor / !tag before it
        self.end = start


class _Abort(Exception):
    """Stop processing this file; the diagnostic has been recorded."""


def _mark(m: Any) -> tuple[int, int, int]:
    return (int(m.line), int(m.column), int(m.index))


class _Loader:
    def __init__(self, path: str, text: str, deadline: float) -> None:
        self.path = path
        self.text = text
        self.deadline = deadline
        self.result = OverrideFile(path=path)
        self.alias_budget = MAX_ALIAS_NODES
        self.alias_depth = 0
        self.ticks = 0
        self.seen: set[tuple[str, int, int, str]] = set()

    # -- diagnostics ------------------------------------------------------------------------------------

    def loc(self, start: tuple[int, int, int], end: tuple[int, int, int] | None = None) -> Location:
        end = end or start
        return Location(self.path, start[0] + 1, start[1] + 1, end[0] + 1, end[1] + 1)

    def add(self, code: tuple[str, str], severity: Severity, message: str, loc: Location) -> None:
        key = (code[0], loc.line, loc.column, message)
        if key in self.seen:
            return
        self.seen.add(key)
        self.result.diagnostics.append(_diag(code, severity, message, loc))

    def skip(self, message: str, start: tuple[int, int, int] = (0, 0, 0)) -> _Abort:
        self.add(FILE_SKIPPED, "warning", message, self.loc(start))
        return _Abort()

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks & 255 == 0 and time.monotonic() > self.deadline:
            raise self.skip(f"skipped: YAML processing took longer than {TIME_BUDGET_S:g} s")

    # -- composing --------------------------------------------------------------------------------------

    def compose(self) -> _Node | None:
        from ruamel.yaml import YAML

        yaml = YAML(typ="rt", pure=True)
        anchors: dict[str, _Node] = {}
        stack: list[_Node] = []
        root: _Node | None = None
        documents = 0

        def attach(node: _Node) -> None:
            nonlocal root
            if stack:
                stack[-1].children.append(node)
            else:
                root = node

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for event in yaml.parse(io.StringIO(self.text)):
                self.tick()
                name = type(event).__name__
                if name == "DocumentStartEvent":
                    documents += 1
                    if documents > 1:
                        start = _mark(event.start_mark)
                        self.add(
                            PARSE_ERROR,
                            "error",
                            "more than one YAML document: OmegaConf.load reads exactly one "
                            "('expected a single document in the stream')",
                            self.loc(start),
                        )
                        raise _Abort()
                    continue
                if name in ("StreamStartEvent", "StreamEndEvent", "DocumentEndEvent"):
                    continue
                if name == "AliasEvent":
                    start = _mark(event.start_mark)
                    target = anchors.get(event.anchor)
                    if target is None:
                        self.add(
                            PARSE_ERROR, "error", f"found undefined alias '{event.anchor}'", self.loc(start)
                        )
                        raise _Abort()
                    if any(open_node is target for open_node in stack):
                        self.add(
                            PARSE_ERROR,
                            "error",
                            f"recursive alias '*{event.anchor}' refers to a node that contains it",
                            self.loc(start),
                        )
                        raise _Abort()
                    node = _Node("alias", None, start)
                    node.end = _mark(event.end_mark)
                    node.children.append(target)
                    attach(node)
                    continue
                tag = getattr(event, "tag", None)  # None unless the node has an explicit tag
                if tag == "!":  # non-specific tag on a quoted scalar / collection: plain resolution
                    tag = None
                start = _mark(event.start_mark)
                if tag is not None or getattr(event, "anchor", None):
                    start = self.skip_properties(start)
                if name == "ScalarEvent":
                    node = _Node("scalar", tag, start)
                    node.raw_start = _mark(event.start_mark)
                    node.end = _mark(event.end_mark)
                    node.value = event.value
                    node.style = event.style
                    if event.anchor:
                        anchors[event.anchor] = node
                    attach(node)
                    self.check_tag(node)
                elif name in ("MappingStartEvent", "SequenceStartEvent"):
                    node = _Node("map" if name == "MappingStartEvent" else "seq", tag, start)
                    node.raw_start = _mark(event.start_mark)
                    node.flow = bool(event.flow_style)
                    if event.anchor:
                        anchors[event.anchor] = node
                    attach(node)
                    stack.append(node)
                    if len(stack) > MAX_DEPTH:
                        raise self.skip(f"skipped: YAML nesting deeper than {MAX_DEPTH} levels", node.start)
                elif name in ("MappingEndEvent", "SequenceEndEvent"):
                    node = stack.pop()
                    if node.flow or not node.children:
                        node.end = _mark(event.end_mark)
                    else:
                        node.end = node.children[-1].end
                    if node.end[2] < node.start[2]:
                        node.end = node.start
                    self.check_tag(node)
        return root

    def skip_properties(self, start: tuple[int, int, int]) -> tuple[int, int, int]:
        """Move a node's start past its ``&anchor`` / ``!tag`` so the span is just the content."""
        text = self.text
        line, col, index = start
        while index < len(text) and text[index] in "&!":
            while index < len(text) and text[index] not in " \t\r\n":
                index += 1
                col += 1
            while index < len(text) and text[index] in " \t\r\n":
                if text[index] == "\n":
                    line, col = line + 1, 0
                else:
                    col += 1
                index += 1
        return (line, col, index)

    def check_tag(self, node: _Node) -> None:
        """Report unknown tags wherever they are (even in values later dropped as duplicates)."""
        if node.tag is None:
            return
        if node.kind == "scalar":
            known = {_STD + t for t in ("str", "int", "float", "bool", "null")}
        else:
            known = {_STD + "map", _STD + "seq"}
        if node.tag not in known:
            self.bad_tag(node)

    # -- values -----------------------------------------------------------------------------------------

    def count_alias(self, node: _Node) -> None:
        if self.alias_depth:
            self.alias_budget -= 1
            if self.alias_budget < 0:
                raise self.skip(
                    f"skipped: YAML aliases expand to more than {MAX_ALIAS_NODES} nodes "
                    "(an alias bomb / 'billion laughs'?)",
                    node.start,
                )

    def scalar(self, node: _Node) -> Any:
        text = node.value
        tag = node.tag
        if tag is None:
            if node.style is not None:  # quoted or block scalar: always a string
                return _string_value(text)
            resolved, value = plain_scalar(text)
            if resolved:
                return value
            if text in ("=", "<<"):
                self.add(
                    PARSE_ERROR,
                    "error",
                    f"plain scalar '{text}' has YAML tag !!{'value' if text == '=' else 'merge'}, "
                    "which OmegaConf.load cannot construct: quote it",
                    self.loc(node.start, node.end),
                )
                return _UNSUPPORTED
            return _string_value(text)
        if tag == _STD + "str":
            return _string_value(text)
        if tag == _STD + "null":
            return None
        if tag == _STD + "bool":
            if _BOOL_RE.match(text):
                return text.lower() in _TRUE_WORDS
        elif tag == _STD + "int":
            if _INT_RE.match(text):
                return _yaml_int(text)
        elif tag == _STD + "float":
            if _FLOAT_RE.match(text):
                return _yaml_float(text)
            if _INT_RE.match(text):
                return float(_yaml_int(text))
        else:
            return self.bad_tag(node)
        self.add(
            PARSE_ERROR,
            "error",
            f"'{text}' is not a valid {tag.rsplit(':', 1)[-1]} for its explicit tag",
            self.loc(node.start, node.end),
        )
        return _UNSUPPORTED

    def bad_tag(self, node: _Node) -> _Unsupported:
        tag = node.tag or ""
        shown = "!!" + tag[len(_STD) :] if tag.startswith(_STD) else tag
        if tag in _SAFE_BUT_UNSUPPORTED:
            self.add(
                UNSUPPORTED_TAG,
                "warning",
                f"YAML tag {shown} is not supported in override files; the value is ignored",
                self.loc(node.raw_start, node.end),
            )
        else:
            self.add(
                UNSUPPORTED_TAG,
                "error",
                f"unknown YAML tag {shown}: OmegaConf.load refuses it ('could not determine a constructor'); "
                "mbmem-lint never constructs tagged objects and ignores the value",
                self.loc(node.raw_start, node.end),
            )
        return _UNSUPPORTED

    def value(self, node: _Node, depth: int = 0) -> Any:
        """Convert a node to a plain value (lists, dicts, scalars, MISSING, Interpolation)."""
        self.tick()
        self.count_alias(node)
        if depth > MAX_DEPTH:
            raise self.skip(f"skipped: YAML nesting deeper than {MAX_DEPTH} levels", node.start)
        if node.kind == "alias":
            self.alias_depth += 1
            try:
                return self.value(node.children[0], depth + 1)
            finally:
                self.alias_depth -= 1
        if node.kind == "scalar":
            return self.scalar(node)
        if node.tag is not None and node.tag not in (_STD + "map", _STD + "seq"):
            return self.bad_tag(node)
        if node.kind == "seq":
            items = []
            for child in node.children:
                item = self.value(child, depth + 1)
                if item is _UNSUPPORTED:
                    return _UNSUPPORTED
                items.append(item)
            return items
        result: dict[Any, Any] = {}
        for key_node, value_node, _ in self.pairs(node, "", report=self.alias_depth == 0):
            key = self.key_text(key_node)
            if key is None:
                continue
            item = self.value(value_node, depth + 1)
            if item is _UNSUPPORTED:
                return _UNSUPPORTED
            result[key] = item
        return result

    def key_text(self, node: _Node) -> str | None:
        target = node
        while target.kind == "alias":
            target = target.children[0]
        if target.kind != "scalar":
            self.add(
                PARSE_ERROR,
                "error",
                "a mapping or sequence used as a key is not supported",
                self.loc(node.start, node.end),
            )
            return None
        if target.tag is not None and target.tag not in (_STD + "str", _STD + "int", _STD + "bool"):
            self.bad_tag(target)
            return None
        return target.value

    def pairs(self, node: _Node, path: str, report: bool = True) -> Iterator[tuple[_Node, _Node, bool]]:
        """(key, value, via_merge) of a mapping: merge keys expanded, duplicates resolved (last wins)."""
        kids = node.children
        merged: list[tuple[_Node, _Node, bool]] = []
        explicit: dict[str, tuple[_Node, _Node, bool]] = {}
        first_seen: dict[str, _Node] = {}
        for i in range(0, len(kids) - 1, 2):
            key_node, value_node = kids[i], kids[i + 1]
            if (
                key_node.kind == "scalar"
                and key_node.tag is None
                and key_node.style is None
                and (key_node.value == "<<")
            ):
                merged.extend(self.merge_sources(value_node))
                continue
            key = self.key_text(key_node)
            if key is None:
                continue
            if key in explicit:
                if report:
                    first = first_seen[key]
                    dotted = f"{path}.{key}" if path else key
                    dotted = dotted.lstrip("+~")
                    self.add(
                        DUPLICATE_KEY,
                        DUPLICATE_KEY_SEVERITY,
                        f"duplicate key '{dotted}' (first at line {first.start[0] + 1}): PyYAML keeps the last "
                        "value, but OmegaConf.load (used by Megatron Bridge for override files) refuses the "
                        "file ('found duplicate key')",
                        self.loc(key_node.start, key_node.end),
                    )
                del explicit[key]  # keep the last one, in its own position
            else:
                first_seen[key] = key_node
            explicit[key] = (key_node, value_node, False)
        if not merged:
            yield from explicit.values()
            return
        by_key: dict[str, tuple[_Node, _Node, bool]] = {}
        for key_node, value_node, _ in merged:
            key = self.key_text(key_node)
            if key is not None and key not in explicit and key not in by_key:
                by_key[key] = (key_node, value_node, True)
        yield from by_key.values()
        yield from explicit.values()

    def merge_sources(self, value_node: _Node) -> list[tuple[_Node, _Node, bool]]:
        """Pairs contributed by ``<<: *a`` / ``<<: [*a, *b]`` (earlier sources win, as in PyYAML)."""
        sources: list[_Node] = []
        target = value_node
        if target.kind == "seq" and target.tag is None:
            sources = list(target.children)
        else:
            sources = [target]
        result: list[tuple[_Node, _Node, bool]] = []
        for source in sources:
            src = source
            while src.kind == "alias":
                self.alias_budget -= 1
                src = src.children[0]
            if src.kind != "map":
                self.add(
                    PARSE_ERROR,
                    "error",
                    "a merge key '<<' needs a mapping or a list of mappings",
                    self.loc(source.start, source.end),
                )
                continue
            self.alias_budget -= len(src.children)
            if self.alias_budget < 0:
                raise self.skip(
                    f"skipped: YAML aliases expand to more than {MAX_ALIAS_NODES} nodes", source.start
                )
            result.extend(self.pairs(src, "", report=False))
        return result

    # -- flattening -------------------------------------------------------------------------------------

    def flatten(self, node: _Node, segments: list[str], op: OverrideOp, key_node: _Node, alias: bool) -> None:
        self.tick()
        if len(segments) > MAX_DEPTH:
            raise self.skip(f"skipped: YAML nesting deeper than {MAX_DEPTH} levels", node.start)
        alias = alias or node.kind == "alias"
        if alias:
            self.alias_depth += 1
        try:
            self.count_alias(node)
            if node.kind == "alias":
                self.flatten(node.children[0], segments, op, key_node, True)
                return
            if node.kind == "map" and node.tag in (None, _STD + "map") and op != "delete":
                pairs = list(self.pairs(node, ".".join(segments), report=not alias))
                if pairs and "_target_" not in [self.key_text(k) for k, _, _ in pairs]:
                    for child_key, child_value, via_merge in pairs:
                        self.entry_for_key(child_key, child_value, segments, op, alias or via_merge)
                    return
            value = self.value(node)
        finally:
            if alias:
                self.alias_depth -= 1
        if value is _UNSUPPORTED:
            return
        self.result.entries.append(
            OverrideEntry(
                path=".".join(segments),
                value=value,
                op=op,
                location=self.loc(node.start, node.end),
                key_location=self.loc(key_node.start, key_node.end),
                value_offsets=(node.start[2], node.end[2]),
                key_offsets=(key_node.start[2], key_node.end[2]),
                via_alias=alias,
            )
        )

    def entry_for_key(
        self, key_node: _Node, value_node: _Node, segments: list[str], op: OverrideOp, alias: bool
    ) -> None:
        key = self.key_text(key_node)
        if key is None:
            return
        key_op: OverrideOp = op
        if key.startswith("++"):
            key, key_op = key[2:], "force"
        elif key.startswith("+"):
            key, key_op = key[1:], "add"
        elif key.startswith("~"):
            key, key_op = key[1:], "delete"
        if not key:
            self.add(PARSE_ERROR, "error", "empty key", self.loc(key_node.start, key_node.end))
            return
        self.flatten(value_node, [*segments, key], key_op, key_node, alias)

    def run(self) -> None:
        root = self.compose()
        if root is None:
            return  # empty document: OmegaConf.load gives {}
        target = root
        while target.kind == "alias":
            target = target.children[0]
        if (
            target.kind == "scalar"
            and target.tag is None
            and target.style is None
            and _NULL_RE.match(target.value)
        ):
            return  # "null" / "~" document: OmegaConf.load gives {}
        if target.kind != "map" or target.tag not in (None, _STD + "map"):
            what = {"scalar": "a scalar", "seq": "a list", "map": "a tagged mapping"}[target.kind]
            self.add(
                PARSE_ERROR,
                "error",
                f"an override file must be a mapping of config sections at the top level, not {what}",
                self.loc(target.start, target.end),
            )
            return
        for key_node, value_node, via_merge in self.pairs(target, ""):
            self.entry_for_key(key_node, value_node, [], "set", via_merge)


def load_override_file(path: str, text: str) -> OverrideFile:
    """Parse one YAML override file. Never raises; problems are in ``diagnostics``."""
    result = OverrideFile(path=path)
    try:
        result.recipe_ref = find_recipe_ref(text)
    except Exception:  # pragma: no cover - defensive
        result.recipe_ref = None
    if len(text) > MAX_YAML_CHARS:
        result.diagnostics.append(
            _diag(
                FILE_SKIPPED,
                "warning",
                f"skipped: file too large ({len(text)} characters; the limit for YAML override files is "
                f"{MAX_YAML_CHARS})",
                Location(path, 1, 1),
            )
        )
        return result
    if "\x00" in text:
        result.diagnostics.append(
            _diag(FILE_SKIPPED, "warning", "skipped: binary file (contains NUL bytes)", Location(path, 1, 1))
        )
        return result
    from ruamel.yaml.error import YAMLError  # imported here: runs without YAML files never load ruamel

    loader = _Loader(path, text, time.monotonic() + TIME_BUDGET_S)
    loader.result.recipe_ref = result.recipe_ref
    try:
        loader.run()
    except _Abort:
        loader.result.entries = []
    except RecursionError:
        loader.result.entries = []
        loader.add(FILE_SKIPPED, "warning", "skipped: YAML too deeply nested", Location(path, 1, 1))
    except YAMLError as exc:
        loader.result.entries = []
        loader.add(PARSE_ERROR, "error", _yaml_error_message(exc), _yaml_error_location(path, exc))
    except Exception as exc:  # a bug here must not stop the lint: report it on the file, one line
        loader.result.entries = []
        loader.add(
            PARSE_ERROR,
            "error",
            f"internal error while reading YAML ({type(exc).__name__}: {exc}); the file is not checked",
            Location(path, 1, 1),
        )
    loader.result.diagnostics.sort(key=lambda d: (d.location.line, d.location.column, d.code))
    return loader.result


def load_override_bytes(path: str, data: bytes) -> OverrideFile:
    """Decode (UTF-8, optional BOM) and parse; undecodable / binary / too large → ``MBM004``."""
    if len(data) > MAX_YAML_CHARS * 4:
        return OverrideFile(
            path=path,
            diagnostics=[
                _diag(
                    FILE_SKIPPED,
                    "warning",
                    f"skipped: file too large ({len(data)} bytes; the limit for YAML override files is "
                    f"{MAX_YAML_CHARS} characters)",
                    Location(path, 1, 1),
                )
            ],
        )
    if b"\x00" in data:
        return OverrideFile(
            path=path,
            diagnostics=[
                _diag(
                    FILE_SKIPPED, "warning", "skipped: binary file (contains NUL bytes)", Location(path, 1, 1)
                )
            ],
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start]
        line = prefix.count(b"\n") + 1
        column = exc.start - (prefix.rfind(b"\n") + 1) + 1
        return OverrideFile(
            path=path,
            diagnostics=[
                _diag(
                    FILE_SKIPPED,
                    "warning",
                    f"skipped: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                    "OmegaConf.load reads override files as UTF-8",
                    Location(path, line, column),
                )
            ],
        )
    return load_override_file(path, text)


def _yaml_error_message(exc: BaseException) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"{context}: {problem}" if context else str(problem)
    else:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"YAML syntax error: {message}"


def _yaml_error_location(path: str, exc: BaseException) -> Location:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        try:
            return Location(path, int(mark.line) + 1, int(mark.column) + 1)
        except Exception:  # pragma: no cover - defensive
            pass
    return Location(path, 1, 1)


# ----------------------------------------------------------------------------------------------------------
# Hydra dotlists (--set KEY=VALUE)

_KEY_SEGMENT = r"(?:[A-Za-z_][A-Za-z0-9_\-]*|[0-9]+)"
_KEY_RE = re.compile(rf"^{_KEY_SEGMENT}(?:\.{_KEY_SEGMENT})*$")
_H_NULL = re.compile(r"^[Nn][Uu][Ll][Ll]$")
_H_BOOL = re.compile(r"^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$")
_H_INT = re.compile(r"^[+-]?(?:0|[1-9](?:_?[0-9])*)$")
_H_DIGITS = r"[0-9](?:_?[0-9])*"
_H_POINT = rf"(?:(?:{_H_DIGITS})?\.{_H_DIGITS}|{_H_DIGITS}\.)"
_H_FLOAT = re.compile(
    rf"^[+-]?(?:{_H_POINT}|(?:{_H_DIGITS}|{_H_POINT})[eE][+-]?{_H_DIGITS}|[Ii][Nn][Ff]|[Nn][Aa][Nn])$"
)
_ESCAPABLE = set("\\()[]{}:=, \t")
_FORBIDDEN = set("=()[]{},'\"<>~!&#;^`")


class _DotlistError(Exception):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


@dataclass
class _PVal:
    """A parsed dotlist value and its ``[start, end)`` span in the item string (dicts: each key's too)."""

    value: Any
    start: int
    end: int
    items: list[tuple[str, int, int, _PVal]] | None = None  # dicts: (key, key_start, key_end, value)


class _DotlistValueParser:
    """Hydra's override value grammar (primitive, quoted, [list], {dict}) over one item string."""

    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos

    def error(self, message: str, position: int | None = None) -> _DotlistError:
        return _DotlistError(message, self.pos if position is None else position)

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def parse_top(self) -> _PVal:
        self.ws()
        if self.pos >= len(self.text):
            return _PVal("", self.pos, self.pos)
        value = self.element(0, top=True)
        self.ws()
        if self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == ",":
                raise self.error(
                    "comma-separated values are a Hydra sweep, which Megatron Bridge does not run; "
                    "use [a,b] for a list or escape the comma (\\,)"
                )
            raise self.error(f"unexpected {ch!r}")
        return value

    def element(self, depth: int, top: bool = False) -> _PVal:
        if depth > MAX_DEPTH:
            raise self.error(f"value nested deeper than {MAX_DEPTH} levels")
        self.ws()
        if self.pos >= len(self.text):
            raise self.error("missing value")
        ch = self.text[self.pos]
        if ch == "[":
            return self.container(depth, "[", "]")
        if ch == "{":
            return self.container(depth, "{", "}")
        if ch in "'\"":
            return self.quoted()
        return self.primitive(top)

    def container(self, depth: int, open_ch: str, close_ch: str) -> _PVal:
        start = self.pos
        self.pos += 1
        values: list[Any] = []
        items: list[tuple[str, int, int, _PVal]] = []
        self.ws()
        if self.pos < len(self.text) and self.text[self.pos] == close_ch:
            self.pos += 1
            return _PVal([] if open_ch == "[" else {}, start, self.pos, None if open_ch == "[" else [])
        while True:
            if open_ch == "{":
                key, key_start, key_end = self.dict_key()
                item = self.element(depth + 1)
                items.append((key, key_start, key_end, item))
            else:
                values.append(self.element(depth + 1).value)
            self.ws()
            if self.pos >= len(self.text):
                raise self.error(f"missing {close_ch!r}", start)
            ch = self.text[self.pos]
            if ch == close_ch:
                self.pos += 1
                break
            if ch != ",":
                raise self.error(f"expected ',' or {close_ch!r}, found {ch!r}")
            self.pos += 1
            self.ws()
            if self.pos < len(self.text) and self.text[self.pos] == close_ch:
                raise self.error(f"trailing ',' before {close_ch!r}")
        if open_ch == "[":
            return _PVal(values, start, self.pos)
        return _PVal({k: v.value for k, _, _, v in items}, start, self.pos, items)

    def dict_key(self) -> tuple[str, int, int]:
        self.ws()
        start = self.pos
        chars: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in _ESCAPABLE:
                chars.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if ch == ":":
                break
            if ch in _FORBIDDEN:
                raise self.error(f"unexpected {ch!r} in a dict key")
            chars.append(ch)
            self.pos += 1
        if self.pos >= len(self.text):
            raise self.error("expected ':' after a dict key")
        key = "".join(chars).strip()
        if not key:
            raise self.error("empty dict key")
        raw = self.text[start : self.pos]
        key_start = start + (len(raw) - len(raw.lstrip(" \t")))
        key_end = start + len(raw.rstrip(" \t"))
        self.pos += 1  # ':'
        return key, key_start, key_end

    def quoted(self) -> _PVal:
        start = self.pos
        quote = self.text[self.pos]
        self.pos += 1
        chars: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in (quote, "\\"):
                chars.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if ch == quote:
                self.pos += 1
                return _PVal(_string_value("".join(chars)), start, self.pos)
            chars.append(ch)
            self.pos += 1
        raise self.error(f"unterminated {quote}-quoted string", start)

    def interpolation(self, chars: list[str]) -> None:
        start = self.pos
        depth = 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            chars.append(ch)
            self.pos += 1
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return
        raise self.error("unterminated ${...} interpolation", start)

    def primitive(self, top: bool) -> _PVal:
        start = self.pos
        chars: list[str] = []
        typed = True  # a single unescaped token may be an int/float/bool/null
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "$" and self.text.startswith("${", self.pos):
                typed = False
                self.interpolation(chars)
                continue
            if ch == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in _ESCAPABLE:
                typed = False
                chars.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if ch in ",]}" and not top:
                break
            if ch == ",":
                break
            if ch == "(":
                raise self.error(
                    "function-call values (choice(), range(), ...) are Hydra sweeps, which Megatron Bridge "
                    "does not run; quote the value if it is a string"
                )
            if ch in _FORBIDDEN:
                raise self.error(f"unexpected {ch!r}; quote the value if it is a string")
            chars.append(ch)
            self.pos += 1
        raw = "".join(chars)
        text = raw.strip(" \t")
        end = self.pos
        while end > start and self.text[end - 1] in " \t":
            end -= 1
        if not text:
            raise self.error("missing value")
        return _PVal(_hydra_primitive(text, typed), start, end)


def _hydra_primitive(text: str, typed: bool) -> Any:
    if typed:
        if _H_NULL.match(text):
            return None
        if _H_BOOL.match(text):
            return text.lower() == "true"
        if _H_INT.match(text):
            return int(text.replace("_", ""))
        if _H_FLOAT.match(text):
            return float(text.replace("_", ""))
    return _string_value(text)


def _short(item: str) -> str:
    return repr(item if len(item) <= 80 else item[:77] + "...")


def _dot_loc(line: int, start: int, end: int) -> Location:
    return Location(DOTLIST_PATH, line, start + 1, line, end + 1)


def parse_dotlist(items: list[str]) -> OverrideFile:
    """Hydra-style ``--set`` items (``a.b=1``, ``+a.b=1``, ``++a.b=1``, ``~a.b``). Never raises.

    ``line`` of every location is the 1-based index of the item; columns are 1-based within the item.
    Dict values (``++env_vars={A:1,B:0}``) are flattened into leaf entries like YAML mappings (Hydra merges
    them into the existing node); a dict with ``_target_`` and ``{}`` stay whole; lists stay whole.
    """
    result = OverrideFile(path=DOTLIST_PATH)
    for line, item in enumerate(items, 1):
        try:
            _parse_item(result, line, item)
        except _DotlistError as exc:
            result.diagnostics.append(
                _diag(
                    BAD_OVERRIDE,
                    "error",
                    f"bad override {_short(item)}: {exc}",
                    _dot_loc(line, exc.position, max(exc.position, len(item))),
                )
            )
        except RecursionError:
            result.diagnostics.append(
                _diag(
                    BAD_OVERRIDE,
                    "error",
                    f"bad override {_short(item)}: nested too deeply",
                    _dot_loc(line, 0, len(item)),
                )
            )
    return result


def _parse_item(result: OverrideFile, line: int, item: str) -> None:
    op: OverrideOp = "set"
    pos = 0
    if item.startswith("~"):
        op, pos = "delete", 1
    elif item.startswith("++"):
        op, pos = "force", 2
    elif item.startswith("+"):
        op, pos = "add", 1
    eq = item.find("=", pos)
    key_raw = item[pos:] if eq < 0 else item[pos:eq]
    key = key_raw.strip(" \t")
    key_start = pos + (len(key_raw) - len(key_raw.lstrip(" \t")))
    key_end = key_start + len(key)
    if eq < 0 and op != "delete":
        raise _DotlistError(
            "expected KEY=VALUE (only a deletion ~KEY may omit the value)", len(item) if item else 0
        )
    if not key:
        raise _DotlistError("missing key before '='", pos)
    if not _KEY_RE.match(key):
        if "/" in key or "@" in key:
            raise _DotlistError(
                "config groups and packages (a/b, @pkg) do not exist in Megatron Bridge configs", key_start
            )
        raise _DotlistError(
            "a key is a dotted path of identifiers (model.tensor_model_parallel_size)", key_start
        )
    key_loc = _dot_loc(line, key_start, key_end)
    if eq < 0:
        result.entries.append(OverrideEntry(key, None, op, key_loc, key_loc, None, (key_start, key_end)))
        return
    parsed = _DotlistValueParser(item, eq + 1).parse_top()
    _emit_dotlist(result, line, key, (key_start, key_end), parsed, op)


def _emit_dotlist(
    result: OverrideFile, line: int, path: str, key_span: tuple[int, int], parsed: _PVal, op: OverrideOp
) -> None:
    if parsed.items and op != "delete" and "_target_" not in parsed.value:
        for sub_key, sub_start, sub_end, sub_value in parsed.items:
            _emit_dotlist(result, line, f"{path}.{sub_key}", (sub_start, sub_end), sub_value, op)
        return
    result.entries.append(
        OverrideEntry(
            path=path,
            value=parsed.value,
            op=op,
            location=_dot_loc(line, parsed.start, parsed.end),
            key_location=_dot_loc(line, *key_span),
            value_offsets=(parsed.start, parsed.end),
            key_offsets=key_span,
        )
    )
