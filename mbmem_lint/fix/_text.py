"""Text helpers shared by the fix primitives: line tables, location → offset, libcst index.

Offsets are character offsets into ``SourceFile.text`` (what :class:`~mbmem_lint.diagnostics.Edit`
uses). Locations are 1-based lines and 1-based columns in characters; a resolver that passes
``ast`` byte columns through is tolerated (see :meth:`PyIndex.offset`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mbmem_lint.diagnostics import Location
from mbmem_lint.records import dataclass


class LineTable:
    """Start offset of every line of a text (``splitlines(keepends=True)`` semantics for ``\\n``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        starts = [0]
        i = text.find("\n")
        while i != -1:
            starts.append(i + 1)
            i = text.find("\n", i + 1)
        self.starts = starts

    @property
    def n_lines(self) -> int:
        return len(self.starts)

    def line_start(self, line: int) -> int:
        """Offset of the first character of 1-based ``line`` (``len(text)`` past the end)."""
        if line < 1:
            return 0
        if line > len(self.starts):
            return len(self.text)
        return self.starts[line - 1]

    def line_end(self, line: int, *, keep_newline: bool = True) -> int:
        """Offset just past the end of ``line`` (after its newline when ``keep_newline``)."""
        if line >= len(self.starts):
            return len(self.text)
        end = self.starts[line]
        if not keep_newline:
            end -= 1
            if end > 0 and self.text[end - 1] == "\r":
                end -= 1
        return end

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def line_text(self, line: int) -> str:
        return self.text[self.line_start(line) : self.line_end(line, keep_newline=False)]

    def char_offset(self, line: int, column: int) -> int:
        return min(self.line_start(line) + max(column - 1, 0), self.line_end(line, keep_newline=False))

    def byte_column_offset(self, line: int, column: int) -> int:
        """Offset for a 1-based *UTF-8 byte* column (what ``ast`` reports)."""
        raw = self.line_text(line).encode("utf-8")[: max(column - 1, 0)]
        return self.line_start(line) + len(raw.decode("utf-8", errors="ignore"))


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def indentation(line_text: str) -> str:
    return line_text[: len(line_text) - len(line_text.lstrip(" \t"))]


@dataclass
class Span:
    """``[start, end)`` character offsets into a file's text."""

    start: int
    end: int


class _Region:
    """libcst nodes of one top-level region (a ``def``/``class`` with its decorators, or a run of
    module-level statements), with spans shifted to whole-file offsets."""

    def __init__(self, text: str, base: int) -> None:
        module = cst.parse_module(text)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        # Parents from one walk over ``children`` (ParentNodeProvider costs ~40% of the metadata time).
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        stack: list[cst.CSTNode] = [wrapper.module]
        while stack:
            node = stack.pop()
            for child in node.children:
                self.parents[child] = node
                stack.append(child)
        lines = LineTable(text)
        self.spans: dict[cst.CSTNode, Span] = {}
        self.starts: dict[int, list[cst.CSTNode]] = {}
        for node, rng in positions.items():
            sp = Span(base + lines.line_start(rng.start.line) + rng.start.column,
                      base + lines.line_start(rng.end.line) + rng.end.column)
            self.spans[node] = sp
            self.starts.setdefault(sp.start, []).append(node)


class PyIndex:
    """libcst view of one file with character spans for nodes, built per top-level region on
    demand: a fix touches one recipe function, so only that function is parsed with libcst
    (whole-file position metadata costs ~1 s on a large recipe file)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = LineTable(text)
        tree = ast.parse(text)  # SyntaxError: no index (the caller gets None)
        bounds: list[tuple[int, int]] = []
        run: list[int] | None = None
        for stmt in tree.body:
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            last = stmt.end_lineno or stmt.lineno
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if run is not None:
                    bounds.append((run[0], run[1]))
                    run = None
                bounds.append((first, last))
            elif run is None:
                run = [first, last]
            else:
                run[1] = last
        if run is not None:
            bounds.append((run[0], run[1]))
        self._bounds = bounds
        self._regions: dict[int, _Region] = {}
        self._owner: dict[cst.CSTNode, _Region] = {}

    # -- regions ------------------------------------------------------------------------------
    def _region_at(self, offset: int) -> _Region | None:
        line = self.lines.line_of(offset)
        for i, (first, last) in enumerate(self._bounds):
            if first <= line <= last:
                region = self._regions.get(i)
                if region is None:
                    start = self.lines.line_start(first)
                    end = self.lines.line_end(last)
                    region = _Region(self.text[start:end], start)
                    self._regions[i] = region
                    for node in region.spans:
                        self._owner[node] = region
                return region
        return None

    def span(self, node: cst.CSTNode) -> Span:
        return self._owner[node].spans[node]

    def code(self, node: cst.CSTNode) -> str:
        sp = self.span(node)
        return self.text[sp.start : sp.end]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        region = self._owner.get(node)
        return region.parents.get(node) if region is not None else None

    def _char_span(self, loc: Location) -> Span:
        s = self.lines.char_offset(loc.line, loc.column)
        if loc.end_line is None or loc.end_column is None:
            return Span(s, s)
        return Span(s, self.lines.char_offset(loc.end_line, loc.end_column))

    def _byte_span(self, loc: Location) -> Span:
        s = self.lines.byte_column_offset(loc.line, loc.column)
        if loc.end_line is None or loc.end_column is None:
            return Span(s, s)
        return Span(s, self.lines.byte_column_offset(loc.end_line, loc.end_column))

    def loc_span(self, loc: Location) -> Span:
        """Offsets of a location. Columns are characters by contract; on lines with non-ASCII text,
        when only the UTF-8 *byte* reading (what ``ast`` reports) matches a node exactly, use that."""
        sp = self._char_span(loc)
        end_line = loc.end_line if loc.end_line is not None else loc.line
        if self.lines.line_text(loc.line).isascii() and self.lines.line_text(end_line).isascii():
            return sp
        region = self._region_at(sp.start)
        if region is None:
            return sp
        exact = {(v.start, v.end) for v in region.spans.values() if v.end > v.start}
        if (sp.start, sp.end) in exact:
            return sp
        alt = self._byte_span(loc)
        if (alt.start, alt.end) in exact or (alt.start == alt.end and alt.start in region.starts):
            return alt
        return sp

    def smallest(self, span: Span, types: tuple[type[cst.CSTNode], ...]) -> cst.CSTNode | None:
        """Smallest node of one of ``types`` whose span contains ``span``."""
        region = self._region_at(span.start)
        if region is None:
            return None
        best: cst.CSTNode | None = None
        best_len = -1
        for node, sp in region.spans.items():
            if isinstance(node, types) and sp.start <= span.start and span.end <= sp.end:
                ln = sp.end - sp.start
                if best is None or ln < best_len:
                    best, best_len = node, ln
        return best

    def ancestor(self, node: cst.CSTNode, types: tuple[type[cst.CSTNode], ...]) -> cst.CSTNode | None:
        cur = self.parent(node)
        while cur is not None and not isinstance(cur, types):
            cur = self.parent(cur)
        return cur


_CACHE: dict[str, PyIndex] = {}
_CACHE_MAX = 32


def py_index(text: str) -> PyIndex | None:
    """libcst index of ``text`` (cached by content); ``None`` when libcst cannot parse it."""
    idx = _CACHE.get(text)
    if idx is None:
        try:
            idx = PyIndex(text)
        except (cst.ParserSyntaxError, SyntaxError, RecursionError, ValueError, MemoryError):
            return None
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[text] = idx
    return idx


def first_of(nodes: Sequence[cst.CSTNode]) -> cst.CSTNode | None:
    return nodes[0] if nodes else None
