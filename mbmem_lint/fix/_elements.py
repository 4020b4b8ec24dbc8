"""Calls, dict literals and string literals read from ``ast`` positions, for fixes that add, replace
or rename one element without libcst (its import and position metadata cost more than the whole
fix). Anything whose token boundaries ``ast`` leaves unclear (a parenthesised value: ``x=(1)``,
implicitly concatenated strings) gives None, and the caller uses libcst instead.

Offsets are character offsets into the file text, as in :class:`~mbmem_lint.diagnostics.Edit`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from mbmem_lint.fix._text import PyIndex, Span
from mbmem_lint.records import dataclass


@dataclass
class Element:
    """One argument of a call or entry of a dict literal."""

    start: int  # its first character (keyword name, dict key, ``*`` / ``**``)
    value: Span  # the value expression
    key: str | None  # keyword name, or the dict entry's string key
    star: bool  # ``*args`` / ``**kwargs`` / ``**mapping``
    comma: int  # offset of the comma after it, -1 when none


def ast_span(idx: PyIndex, node: ast.AST) -> Span:
    lines = idx.lines
    return Span(lines.byte_column_offset(node.lineno, node.col_offset + 1),  # type: ignore[attr-defined]
                lines.byte_column_offset(node.end_lineno or node.lineno,  # type: ignore[attr-defined]
                                         (node.end_col_offset or 0) + 1))  # type: ignore[attr-defined]


def next_token(text: str, pos: int, limit: int) -> int:
    """Offset of the first character at or after ``pos`` that is not whitespace or a comment."""
    while pos < limit:
        ch = text[pos]
        if ch == "#":
            nl = text.find("\n", pos, limit)
            pos = limit if nl < 0 else nl
        elif ch in " \t\r\n\\":
            pos += 1
        else:
            return pos
    return limit


def innermost(idx: PyIndex, span: Span, kind: type[ast.expr]) -> tuple[ast.expr, Span] | None:
    """The smallest ``kind`` node (in the statement around ``span``) whose span contains it."""
    chain = idx._chain(idx.lines.line_of(span.start))
    if not chain:
        return None
    best: tuple[ast.expr, Span] | None = None
    for node in ast.walk(chain[-1][0]):
        if isinstance(node, kind):
            sp = ast_span(idx, node)
            if sp.start <= span.start and span.end <= sp.end and (
                    best is None or sp.end - sp.start < best[1].end - best[1].start):
                best = (node, sp)
    return best


def elements(idx: PyIndex, node: ast.Call | ast.Dict, span: Span) -> tuple[list[Element], int] | None:
    """The elements of a call (``span`` is its span) in source order, and the offset of its closing
    bracket; None when a boundary is unclear."""
    text = idx.text
    closer = span.end - 1
    if text[closer : closer + 1] != (")" if isinstance(node, ast.Call) else "}"):
        return None
    raw: list[tuple[int, Span, str | None, bool]] = []
    if isinstance(node, ast.Call):
        for a in node.args:
            star = isinstance(a, ast.Starred)
            sp = ast_span(idx, a)
            raw.append((sp.start, sp, None, star))
        for kw in node.keywords:
            sp = ast_span(idx, kw)
            raw.append((sp.start, ast_span(idx, kw.value), kw.arg, kw.arg is None))
    else:
        for k, v in zip(node.keys, node.values):
            vs = ast_span(idx, v)
            if k is None:
                star_at = text.rfind("**", span.start, vs.start)
                if star_at < 0:
                    return None
                raw.append((star_at, vs, None, True))
            else:
                ks = ast_span(idx, k)
                key = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                raw.append((ks.start, vs, key, False))
    raw.sort(key=lambda r: r[0])
    out: list[Element] = []
    for i, (start, value, key, star) in enumerate(raw):
        nxt = next_token(text, value.end, closer)
        if text[nxt : nxt + 1] == ",":
            comma = nxt
        elif nxt == closer and i == len(raw) - 1:
            comma = -1
        else:
            return None  # ``x=(1)``: the value's own brackets are not in ast's span
        out.append(Element(start, value, key, star, comma))
    return out, closer


_STRING_HEAD = re.compile(r"([rRbBuU]*)('''|\"\"\"|'|\")")


@dataclass
class StringLiteral:
    """A plain string literal: ``r"..."`` → prefix ``r``, quote ``"``."""

    span: Span
    prefix: str
    quote: str
    value: str


def string_literal(idx: PyIndex, span: Span) -> StringLiteral | None:
    """The single string literal starting at ``span.start`` that is a whole expression node; None for
    anything else (f-strings, implicit concatenations, escapes)."""
    found = innermost(idx, Span(span.start, span.start), ast.Constant)
    if found is None:
        return None
    node, sp = found
    if sp.start != span.start or not isinstance(node.value, str):  # type: ignore[attr-defined]
        return None
    text = idx.text[sp.start : sp.end]
    m = _STRING_HEAD.match(text)
    if m is None or "\\" in text or not text.endswith(m.group(2)):
        return None
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError):
        return None
    if len(tokens) != 1:
        return None
    return StringLiteral(sp, m.group(1), m.group(2), node.value)  # type: ignore[attr-defined]


def first_key_quote(idx: PyIndex, node: ast.Dict) -> str:
    """The quote character of the dict's first string key (``"`` when there is none)."""
    for k in node.keys:
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            text = idx.text[ast_span(idx, k).start :]
            m = _STRING_HEAD.match(text)
            if m:
                return m.group(2)[-1]
    return '"'
