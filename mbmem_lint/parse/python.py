"""Python source → a small JSON-able IR the resolver interprets.

The IR keeps only what the abstract interpreter needs, as nested lists so the library summary
(the same IR for megatron-bridge's own recipes) ships as plain JSON. Reading uses the stdlib
``ast`` parser: it is ten times faster than libcst on the recipe corpus (docs/DESIGN.md) and
executes nothing.

Statements (``loc`` = ``[line, col, end_line, end_col]``, 1-based columns, end exclusive)::

    ["assign", [target...], expr, loc]        ["augassign", target, op, expr, loc]
    ["expr", expr, loc]                        ["return", expr | None, loc]
    ["if", test, body, orelse, loc]            ["for", target, iter, body, orelse, loc]
    ["while", test, body, orelse, loc]         ["with", body, loc]
    ["try", body, [handler bodies], orelse, finally, loc]
    ["def", name, params, body, loc, returns, decorators]
    ["class", name, loc] or, lowered with class_bodies, ["class", name, loc, bases, body, decorator calls]
    ["import", [[module, asname]], loc]
    ["from", module, level, [[name, asname]] | "*", loc]
    ["raise", loc]   ["break", loc]   ["continue", loc]   ["del", [target...], loc]
    ["opaque", [assigned names], loc]

Expressions::

    ["c", value]  ["n", id]  ["a", expr, attr, loc]  ["call", func, [arg], [[kw | None, expr]], loc]
    ["bin", op, l, r]  ["un", op, e]  ["bool", op, [e...]]  ["cmp", l, [op...], [e...]]
    ["list", [e]]  ["tuple", [e]]  ["set", [e]]  ["dict", [[key | None, value]], loc]
    ["sub", value, index]  ["slice", lo, hi, step]  ["ifx", test, body, orelse]
    ["fstr", [part...]]  ["star", e]  ["u", reason]
    ["comp", "list" | "set" | "gen" | "dict", elt, key | None, [[target, iter, [cond...]]...]]
    ["lambda", params, body expr, loc]

A class statement keeps its bases, body and decorator expressions only when asked (``class_bodies``: the
interpreter analyses classes only in Megatron Bridge's model bridges, :mod:`mbmem_lint.resolve.bridges`); a
decorator of a ``def`` is kept as its dotted name.

Expressions that carry a value a fix may replace are wrapped: ``["at", expr, loc]``.
"""

from __future__ import annotations

import ast
from typing import Any

IR = list[Any]

_BINOPS: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
    ast.MatMult: "@",
}
_UNOPS: dict[type, str] = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}
_CMPOPS: dict[type, str] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}


class PythonParseError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class _Columns:
    """Converts ast's UTF-8 byte offsets to 1-based character columns (only costs for non-ASCII lines)."""

    def __init__(self, text: str) -> None:
        self.ascii = text.isascii()
        self._lines = None if self.ascii else text.splitlines()
        # Only lines with non-ASCII characters need the byte → character conversion.
        self._wide = set() if self._lines is None else {i for i, ln in enumerate(self._lines, 1) if not ln.isascii()}

    def col(self, line: int, byte_offset: int) -> int:
        if line not in self._wide or self._lines is None:
            return byte_offset + 1
        raw = self._lines[line - 1].encode("utf-8")
        return len(raw[:byte_offset].decode("utf-8", errors="replace")) + 1


class _Lowerer:
    def __init__(self, text: str, class_bodies: bool = False) -> None:
        self.cols = _Columns(text)
        self.class_bodies = class_bodies

    def loc(self, node: ast.AST) -> list[int]:
        if self.cols.ascii:  # the common case: byte offsets are character offsets
            try:
                line, off, end_off = node.lineno, node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
                end_line = node.end_lineno or line  # type: ignore[attr-defined]
                return [line, off + 1, end_line, (end_off if end_off is not None else off) + 1]
            except AttributeError:
                pass
        line = getattr(node, "lineno", 1)
        end_line = getattr(node, "end_lineno", None) or line
        col = self.cols.col(line, getattr(node, "col_offset", 0))
        end_off = getattr(node, "end_col_offset", None)
        end_col = self.cols.col(end_line, end_off) if end_off is not None else col
        return [line, col, end_line, end_col]

    # -- statements ---------------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> list[IR]:
        out: list[IR] = []
        for s in stmts:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                continue  # docstrings and bare strings do nothing (and keep the shipped summary lean)
            out.append(self.stmt(s))
        return out

    def stmt(self, s: ast.stmt) -> IR:
        loc = self.loc(s)
        if isinstance(s, ast.Assign):
            return ["assign", [self.expr(t) for t in s.targets], self.at(s.value), loc]
        if isinstance(s, ast.AnnAssign):
            if s.value is None:
                return ["opaque", [], loc]
            return ["assign", [self.expr(s.target)], self.at(s.value), loc]
        if isinstance(s, ast.AugAssign):
            return ["augassign", self.expr(s.target), _BINOPS.get(type(s.op), "?"), self.at(s.value), loc]
        if isinstance(s, ast.Expr):
            return ["expr", self.expr(s.value), loc]
        if isinstance(s, ast.Return):
            return ["return", self.at(s.value) if s.value is not None else None, loc]
        if isinstance(s, ast.If):
            return ["if", self.expr(s.test), self.body(s.body), self.body(s.orelse), loc]
        if isinstance(s, ast.For):
            return ["for", self.expr(s.target), self.expr(s.iter), self.body(s.body), self.body(s.orelse), loc]
        if isinstance(s, ast.While):
            return ["while", self.expr(s.test), self.body(s.body), self.body(s.orelse), loc]
        if isinstance(s, ast.With):
            return ["with", self.body(s.body), loc]
        if isinstance(s, ast.Try) or (hasattr(ast, "TryStar") and isinstance(s, ast.TryStar)):
            t: Any = s
            return [
                "try",
                self.body(t.body),
                [self.body(h.body) for h in t.handlers],
                self.body(t.orelse),
                self.body(t.finalbody),
                loc,
            ]
        if isinstance(s, ast.FunctionDef):
            return self.funcdef(s, loc)
        if isinstance(s, ast.ClassDef):
            if not self.class_bodies:
                return ["class", s.name, loc]
            return ["class", s.name, loc, [self.expr(b) for b in s.bases], self.body(s.body),
                    [self.expr(d) for d in s.decorator_list]]
        if isinstance(s, ast.Import):
            return ["import", [[a.name, a.asname] for a in s.names], loc]
        if isinstance(s, ast.ImportFrom):
            names: Any = "*" if any(a.name == "*" for a in s.names) else [[a.name, a.asname] for a in s.names]
            return ["from", s.module or "", s.level, names, loc]
        if isinstance(s, ast.Raise):
            return ["raise", loc]
        if isinstance(s, ast.Delete):
            return ["del", [self.expr(t) for t in s.targets], loc]
        if isinstance(s, ast.Break):
            return ["break", loc]
        if isinstance(s, ast.Continue):
            return ["continue", loc]
        if isinstance(s, (ast.Pass, ast.Global, ast.Nonlocal, ast.Assert)):
            return ["opaque", [], loc]
        # async defs, match, async for/with, ...: names they bind become unknown.
        return ["opaque", sorted(_bound_names(s)), loc]

    def funcdef(self, s: ast.FunctionDef, loc: list[int]) -> IR:
        params = self.params(s.args)
        returns = ast.unparse(s.returns) if s.returns is not None else None
        decorators = [_dotted(d) or "?" for d in s.decorator_list]
        return ["def", s.name, params, self.body(s.body), loc, returns, decorators]

    def params(self, a: ast.arguments) -> list[IR]:
        params: list[IR] = []
        positional = list(a.posonlyargs) + list(a.args)
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        for arg, d in zip(positional, defaults):
            params.append([arg.arg, self.expr(d) if d is not None else None, "pos"])
        if a.vararg is not None:
            params.append([a.vararg.arg, None, "vararg"])
        for arg, kd in zip(a.kwonlyargs, a.kw_defaults):
            params.append([arg.arg, self.expr(kd) if kd is not None else None, "kwonly"])
        if a.kwarg is not None:
            params.append([a.kwarg.arg, None, "kwarg"])
        return params

    # -- expressions --------------------------------------------------------------------------
    def at(self, e: ast.expr) -> IR:
        return ["at", self.expr(e), self.loc(e)]

    def expr(self, e: ast.expr) -> IR:
        if isinstance(e, ast.Constant):
            v = e.value
            if v is None or isinstance(v, (bool, int, float, str)):
                if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                    return ["u", "non-finite float"]
                return ["c", v]
            if v is Ellipsis:
                return ["u", "ellipsis"]
            return ["u", f"{type(v).__name__} constant"]
        if isinstance(e, ast.Name):
            return ["n", e.id]
        if isinstance(e, ast.Attribute):
            return ["a", self.expr(e.value), e.attr, self.loc(e)]
        if isinstance(e, ast.Call):
            args = [["star", self.expr(x.value)] if isinstance(x, ast.Starred) else self.at(x) for x in e.args]
            kws = [[k.arg, self.at(k.value), self.loc(k)] for k in e.keywords]
            return ["call", self.expr(e.func), args, kws, self.loc(e)]
        if isinstance(e, ast.BinOp):
            return ["bin", _BINOPS.get(type(e.op), "?"), self.expr(e.left), self.expr(e.right)]
        if isinstance(e, ast.UnaryOp):
            return ["un", _UNOPS.get(type(e.op), "?"), self.expr(e.operand)]
        if isinstance(e, ast.BoolOp):
            return ["bool", "and" if isinstance(e.op, ast.And) else "or", [self.expr(v) for v in e.values]]
        if isinstance(e, ast.Compare):
            return ["cmp", self.expr(e.left), [_CMPOPS.get(type(o), "?") for o in e.ops],
                    [self.expr(c) for c in e.comparators]]
        if isinstance(e, ast.List):
            return ["list", [self.expr(x) for x in e.elts]]
        if isinstance(e, ast.Tuple):
            return ["tuple", [self.expr(x) for x in e.elts]]
        if isinstance(e, ast.Set):
            return ["set", [self.expr(x) for x in e.elts]]
        if isinstance(e, ast.Dict):
            items = [[self.expr(k) if k is not None else None, self.at(v)] for k, v in zip(e.keys, e.values)]
            return ["dict", items, self.loc(e)]
        if isinstance(e, ast.Subscript):
            return ["sub", self.expr(e.value), self.expr(e.slice)]
        if isinstance(e, ast.Slice):
            return ["slice", *(self.expr(x) if x is not None else ["c", None] for x in (e.lower, e.upper, e.step))]
        if isinstance(e, ast.IfExp):
            return ["ifx", self.expr(e.test), self.expr(e.body), self.expr(e.orelse)]
        if isinstance(e, ast.JoinedStr):
            parts: list[IR] = []
            for part in e.values:
                if isinstance(part, ast.Constant):
                    parts.append(["c", part.value])
                elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                    parts.append(self.expr(part.value))
                else:
                    parts.append(["u", "formatted value"])
            return ["fstr", parts]
        if isinstance(e, ast.Starred):
            return ["star", self.expr(e.value)]
        if isinstance(e, ast.NamedExpr):
            return ["u", "assignment expression"]
        if isinstance(e, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            gens = [[self.expr(g.target), self.expr(g.iter), [self.expr(c) for c in g.ifs]] for g in e.generators]
            if any(g.is_async for g in e.generators):
                return ["u", "async comprehension"]
            if isinstance(e, ast.DictComp):
                return ["comp", "dict", self.expr(e.value), self.expr(e.key), gens]
            kind = "list" if isinstance(e, ast.ListComp) else "set" if isinstance(e, ast.SetComp) else "gen"
            return ["comp", kind, self.expr(e.elt), None, gens]
        if isinstance(e, ast.Lambda):
            params = self.params(e.args)
            return ["lambda", params, self.expr(e.body), self.loc(e)]
        return ["u", type(e).__name__]


def _dotted(e: ast.expr) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        base = _dotted(e.value)
        return f"{base}.{e.attr}" if base else None
    if isinstance(e, ast.Call):
        return _dotted(e.func)
    return None


def _bound_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def parse_python(text: str, filename: str = "<recipe>") -> ast.Module:
    """``ast.parse`` with every failure mode turned into :class:`PythonParseError`."""
    try:
        return ast.parse(text, filename=filename, type_comments=False)
    except SyntaxError as exc:
        line = exc.lineno or 1
        col = exc.offset or 1
        return _raise(f"syntax error: {exc.msg}", line, col)
    except (RecursionError, MemoryError):
        return _raise("expression nesting too deep to parse", 1, 1)
    except ValueError as exc:  # e.g. source with NUL bytes
        return _raise(f"cannot parse: {exc}", 1, 1)


def _raise(message: str, line: int, col: int) -> ast.Module:
    raise PythonParseError(message, line, col)


def lower_module(text: str, filename: str = "<recipe>", *, class_bodies: bool = False) -> list[IR]:
    """Parse and lower a module's statements to IR. Raises :class:`PythonParseError`. ``class_bodies``: keep
    the bases, body and decorators of class statements (only the model-bridge summary needs them)."""
    tree = parse_python(text, filename)
    try:
        return _Lowerer(text, class_bodies).body(tree.body)
    except RecursionError:
        raise PythonParseError("expression nesting too deep to analyse", 1, 1) from None
