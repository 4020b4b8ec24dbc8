"""Text helpers shared by the fix primitives: line tables, location → offset, libcst index.

Offsets are character offsets into ``SourceFile.text`` (what :class:`~mbmem_lint.diagnostics.Edit`
uses). Locations are 1-based lines and 1-based columns in characters; a resolver that passes
``ast`` byte columns through is tolerated (see :meth:`PyIndex.offset`).
"""

from __future__ import annotations

import ast
import bisect
import re
from typing import TYPE_CHECKING

from mbmem_lint.diagnostics import Location

if TYPE_CHECKING:  # libcst is imported only when a fix needs it (~0.1 s): most fixes need ast alone
    import libcst
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


_CACHE_MAX = 32  # files whose line table / index is kept
_LINES: dict[str, LineTable] = {}


def line_table(text: str) -> LineTable:
    """The :class:`LineTable` of a file's text, built once (fixes of one file share it)."""
    table = _LINES.get(text)
    if table is None:
        if len(_LINES) >= _CACHE_MAX:
            _LINES.pop(next(iter(_LINES)))
        table = _LINES[text] = LineTable(text)
    return table


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
    """libcst nodes of a few whole lines of a file (the statement a fix touches, with whatever shares
    its lines), with spans shifted to whole-file offsets. Indented lines are parsed under an ``if 1:``
    header, so they are taken exactly as they are; the header's nodes are left out."""

    def __init__(self, text: str, base: int, indented: bool) -> None:
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider

        prefix = "if 1:\n" if indented else ""
        module = cst.parse_module(prefix + text)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        lines = LineTable(prefix + text)
        shift = base - len(prefix)
        outside: set[libcst.CSTNode] = {wrapper.module}
        if indented:  # the ``if 1:`` statement, its test and its block
            header = wrapper.module.body[0]
            outside.update((header, header.test, header.body) if isinstance(header, cst.If) else ())
        self.spans: dict[libcst.CSTNode, Span] = {}
        self.starts: dict[int, list[libcst.CSTNode]] = {}
        for node, rng in positions.items():
            start = shift + lines.line_start(rng.start.line) + rng.start.column
            if node in outside or start < base:
                continue
            sp = Span(start, shift + lines.line_start(rng.end.line) + rng.end.column)
            self.spans[node] = sp
            self.starts.setdefault(sp.start, []).append(node)
        # Parents from one walk over ``children`` (ParentNodeProvider costs ~40% of the metadata
        # time). The region's top statements have none: their block is outside the region
        # (PyIndex.alone_in_block answers for it).
        self.parents: dict[libcst.CSTNode, libcst.CSTNode] = {}
        stack: list[libcst.CSTNode] = [wrapper.module]
        while stack:
            node = stack.pop()
            for child in node.children:
                if node in self.spans:
                    self.parents[child] = node
                stack.append(child)


def _first_line(stmt: ast.stmt) -> int:
    return min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])


def _last_line(stmt: ast.stmt) -> int:
    return stmt.end_lineno or stmt.lineno


def _first_column(stmt: ast.stmt) -> int:
    """UTF-8 byte column where the statement's first line starts (its first decorator's ``@``)."""
    decorators = getattr(stmt, "decorator_list", [])
    if decorators and decorators[0].lineno == _first_line(stmt):
        return max(decorators[0].col_offset - 1, 0)
    return stmt.col_offset


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists directly inside a compound statement."""
    out: list[list[ast.stmt]] = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            out.append(block)
    for clause in [*(getattr(stmt, "handlers", None) or []), *(getattr(stmt, "cases", None) or [])]:
        out.append(clause.body)
    return out


def _holds(stmt: ast.stmt, line: int) -> bool:
    return _first_line(stmt) <= line <= _last_line(stmt)


# Where top-level statements start: column 0 (a closing bracket there ends a multi-line signature).
_TOP_RE = re.compile(r"^(?:@|class\b|(?:async\s+)?def\b|[A-Za-z_])", re.M)


class PyIndex:
    """libcst view of one file with character spans for nodes, built on demand for the few lines a
    fix touches: the innermost statement at an offset (found with ``ast``) and the statements that
    share its lines. Parsing each touched recipe function with position metadata instead cost
    ~40 ms per function: on the corpus, more than the whole check."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = line_table(text)
        self._regions: dict[tuple[int, int], _Region] = {}
        self._owner: dict[libcst.CSTNode, _Region] = {}
        self._tops: list[int] | None = None
        self._trees: dict[int, ast.Module | None] = {}
        self._whole: ast.Module | None = None

    # -- ast, one top-level statement at a time ---------------------------------------------
    def _top_starts(self) -> list[int]:
        """Lines where a top-level statement starts (a decorated definition starts at its first
        decorator). Column-0 text inside a string can add false starts: a piece that does not
        parse falls back to the whole file."""
        if self._tops is None:
            starts: list[int] = []
            decorated = False
            for m in _TOP_RE.finditer(self.text):
                if not decorated:
                    starts.append(self.lines.line_of(m.start()))
                decorated = m.group(0) == "@"
            self._tops = starts or [1]
        return self._tops

    def _module_at(self, line: int) -> ast.Module:
        """``ast`` of the top-level statement holding ``line`` (line numbers as in the file); the whole
        file when that piece does not parse on its own. SyntaxError when the file does not parse."""
        if self._whole is not None:
            return self._whole
        starts = self._top_starts()
        i = max(bisect.bisect_right(starts, line) - 1, 0)
        first = starts[i]
        if first not in self._trees:
            last = starts[i + 1] - 1 if i + 1 < len(starts) else self.lines.n_lines
            # Blank lines in front give the file's line numbers (ast.increment_lineno walks every node).
            piece = "\n" * (first - 1) + self.text[self.lines.line_start(first) : self.lines.line_end(last)]
            try:
                tree: ast.Module | None = ast.parse(piece)
            except SyntaxError:
                tree = None
            self._trees[first] = tree
        tree = self._trees[first]
        if tree is None:
            self._whole = tree = ast.parse(self.text)
        return tree

    # -- regions ------------------------------------------------------------------------------
    def _chain(self, line: int) -> list[tuple[ast.stmt, list[ast.stmt]]]:
        """The statements that contain ``line``, outermost first, each with the list holding it
        (the outermost list is the top-level statement's piece of the module)."""
        chain: list[tuple[ast.stmt, list[ast.stmt]]] = []
        try:
            body: list[ast.stmt] | None = self._module_at(line).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return chain
        while body is not None:
            hit = next((s for s in body if _holds(s, line)), None)
            if hit is None:
                break
            chain.append((hit, body))
            body = next((b for b in _bodies(hit) if any(_holds(s, line) for s in b)), None)
        return chain

    def _lines_at(self, line: int) -> tuple[int, int] | None:
        """Whole lines around ``line`` that parse on their own: the innermost statement, widened to
        the statements that share its lines (``a = 1; b = 2``) and to the header of a one-line
        compound statement (``if x: a = 1``)."""
        chain = self._chain(line)
        if not chain:
            return None
        level = len(chain) - 1
        stmt, body = chain[level]
        first, last = _first_line(stmt), _last_line(stmt)
        while True:
            widened = True
            while widened:
                widened = False
                for s in body:
                    if _first_line(s) <= last and _last_line(s) >= first and (
                            _first_line(s) < first or _last_line(s) > last):
                        first, last, widened = min(first, _first_line(s)), max(last, _last_line(s)), True
            lead = min((_first_column(s) for s in body if _first_line(s) == first), default=0)
            if level == 0 or not self.lines.line_text(first).encode("utf-8")[:lead].strip():
                return first, last
            level -= 1  # the line starts with the header of the enclosing compound statement
            stmt, body = chain[level]
            first, last = min(first, _first_line(stmt)), max(last, _last_line(stmt))

    def _region_at(self, offset: int) -> _Region | None:
        bounds = self._lines_at(self.lines.line_of(offset))
        if bounds is None:
            return None
        region = self._regions.get(bounds)
        if region is None:
            first, last = bounds
            start, end = self.lines.line_start(first), self.lines.line_end(last)
            region = _Region(self.text[start:end], start, self.text[start:start + 1] in (" ", "\t"))
            self._regions[bounds] = region
            for node in region.spans:
                self._owner[node] = region
        return region

    def alone_in_block(self, node: libcst.CSTNode) -> bool | None:
        """For a statement line starting a region: True when it is the only statement of an indented
        block (deleting it needs a ``pass``), False when it has siblings or sits at module level,
        None when no statement starts there."""
        start = self.span(node).start
        line = self.lines.line_of(start)
        column = len(self.text[self.lines.line_start(line):start].encode("utf-8"))
        chain = self._chain(line)
        for depth, (stmt, body) in enumerate(chain):
            if stmt.lineno == line and stmt.col_offset == column:
                return depth > 0 and len(body) == 1
        return None

    def span(self, node: libcst.CSTNode) -> Span:
        return self._owner[node].spans[node]

    def code(self, node: libcst.CSTNode) -> str:
        sp = self.span(node)
        return self.text[sp.start : sp.end]

    def parent(self, node: libcst.CSTNode) -> libcst.CSTNode | None:
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

    def smallest(self, span: Span, types: tuple[type[libcst.CSTNode], ...]) -> libcst.CSTNode | None:
        """Smallest node of one of ``types`` whose span contains ``span``."""
        region = self._region_at(span.start)
        if region is None:
            return None
        best: libcst.CSTNode | None = None
        best_len = -1
        for node, sp in region.spans.items():
            if isinstance(node, types) and sp.start <= span.start and span.end <= sp.end:
                ln = sp.end - sp.start
                if best is None or ln < best_len:
                    best, best_len = node, ln
        return best

    def ancestor(self, node: libcst.CSTNode, types: tuple[type[libcst.CSTNode], ...]) -> libcst.CSTNode | None:
        cur = self.parent(node)
        while cur is not None and not isinstance(cur, types):
            cur = self.parent(cur)
        return cur


_CACHE: dict[str, PyIndex] = {}


def py_index(text: str) -> PyIndex | None:
    """libcst index of ``text`` (cached by content); ``None`` when libcst cannot parse it."""
    idx = _CACHE.get(text)
    if idx is None:
        try:
            idx = PyIndex(text)
        except (SyntaxError, RecursionError, ValueError, MemoryError):
            return None
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[text] = idx
    return idx
