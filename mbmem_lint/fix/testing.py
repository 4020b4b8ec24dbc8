"""A tiny ``ast``-based stand-in for the resolver, for fix tests only.

It records, in statement order, the writes of one recipe function the way the resolver's contract
describes them (value spans, statement spans, keyword-argument writes of constructor calls, string
keys of dict literals, subscript writes, ``config_var``, ``return_location``). It evaluates nothing
but literals; library values are passed in as ``library`` (path → value) and become library writes
placed before the function's own writes. Never executes analysed code.
"""

from __future__ import annotations

import ast
from typing import Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.resolve.resolved import UNKNOWN, ResolvedField, ResolvedRecipe, Target, Write

LIB_PATH = "megatron/bridge/recipes/common.py"


def _char_col(lines: list[str], lineno: int, byte_col: int) -> int:
    raw = lines[lineno - 1].encode("utf-8")[:byte_col]
    return len(raw.decode("utf-8", errors="ignore")) + 1


def _loc(path: str, lines: list[str], node: Any) -> Location:
    return Location(
        path,
        node.lineno,
        _char_col(lines, node.lineno, node.col_offset),
        node.end_lineno,
        _char_col(lines, node.end_lineno, node.end_col_offset),
    )


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        if isinstance(node, ast.Call):
            return {"_target_": ast.unparse(node.func)}
        return UNKNOWN


def recipe_from_source(
    path: str,
    text: str,
    function: str | None = None,
    *,
    library: dict[str, Any] | None = None,
) -> ResolvedRecipe:
    tree = ast.parse(text)
    lines = text.splitlines()
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    fn = next((f for f in funcs if function is None or f.name == function), None)
    if fn is None:
        raise ValueError(f"no function {function!r} in {path}")
    returns = [s for s in fn.body if isinstance(s, ast.Return)]
    ret = returns[-1] if returns else None
    config_var = ret.value.id if ret is not None and isinstance(ret.value, ast.Name) else None
    writes: list[Write] = []
    lib_loc = Location(LIB_PATH, 1, 1, in_library=True)
    def_loc = Location(path, fn.lineno, fn.col_offset + 1)
    for p, v in (library or {}).items():
        writes.append(Write(p, v, "library", lib_loc, def_loc, True, None, None, None, None))

    def record(path_: str, value_node: ast.expr, stmt: Any, target_text: str | None) -> None:
        loc = _loc(path, lines, value_node)
        writes.append(
            Write(
                path_,
                _value(value_node),
                "recipe",
                loc,
                loc,
                True,
                None,
                target_text,
                _loc(path, lines, stmt),
                fn.name,
            )
        )
        if isinstance(value_node, ast.Call):
            for kw in value_node.keywords:
                if kw.arg is not None:
                    record(f"{path_}.{kw.arg}", kw.value, kw, None)
        if isinstance(value_node, ast.Dict):
            for k, v in zip(value_node.keys, value_node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    kloc = _loc(path, lines, v)
                    writes.append(
                        Write(
                            f"{path_}.{k.value}",
                            _value(v),
                            "recipe",
                            kloc,
                            kloc,
                            True,
                            None,
                            None,
                            None,
                            fn.name,
                        )
                    )

    def visit(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.Assign):
                for tgt in st.targets:
                    seg = ast.get_source_segment(text, tgt)
                    if isinstance(tgt, ast.Subscript) and isinstance(tgt.slice, ast.Constant):
                        base = _dotted(tgt.value)
                        if base and base[0] == config_var:
                            record(".".join([*base[1:], str(tgt.slice.value)]), st.value, st, seg)
                        continue
                    parts = _dotted(tgt)
                    if not parts:
                        continue
                    if parts[0] == config_var and len(parts) > 1:
                        record(".".join(parts[1:]), st.value, st, seg)
            elif isinstance(st, (ast.If, ast.For, ast.With)):
                visit(st.body)
                visit(getattr(st, "orelse", []))

    visit(fn.body)
    fields: dict[str, ResolvedField] = {}
    for w in writes:
        fields[w.path] = ResolvedField(w.value, w.origin, w.location, w.anchor)
        for p in list(fields):
            if (
                p.startswith(w.path + ".")
                and fields[p].location != w.location
                and not _inside(w.location, fields[p].location)
            ):
                del fields[p]
    return ResolvedRecipe(
        path=path,
        function=fn.name,
        location=def_loc,
        fields=fields,
        writes=writes,
        rewrites=[],
        target=Target("h100-80gb", 8, "cli", "cli"),
        config_var=config_var,
        return_location=_loc(path, lines, ret) if ret is not None else None,
    )


def _inside(outer: Location, inner: Location) -> bool:
    if outer.path != inner.path or outer.end_line is None or outer.end_column is None:
        return False
    return (inner.line, inner.column) >= (outer.line, outer.column) and (
        inner.end_line or inner.line,
        inner.end_column or inner.column,
    ) <= (outer.end_line, outer.end_column)


def override_file_from_text(path: str, text: str) -> Any:
    """Flat :class:`OverrideEntry` list of a nested YAML override file (scalar/list leaves only),
    with key and value spans from ruamel round-trip positions. Test helper; the real loader lives
    in ``mbmem_lint.parse.yaml_overrides``."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    from mbmem_lint.parse.override_types import OverrideEntry, OverrideFile

    data = YAML(typ="rt").load(text)
    lines = text.splitlines()
    out = OverrideFile(path)

    def value_end(line0: int, col0: int) -> int:
        s = lines[line0]
        if s[col0 : col0 + 1] in ("'", '"'):
            q = s[col0]
            return s.index(q, col0 + 1) + 1
        rest = s[col0:]
        cut = rest.find(" #")
        rest = rest if cut < 0 else rest[:cut]
        return col0 + len(rest.rstrip())

    def walk(node: Any, prefix: list[str]) -> None:
        if not isinstance(node, CommentedMap):
            return
        for k in node:
            kl, kc = node.lc.key(k)
            key_loc = Location(path, kl + 1, kc + 1, kl + 1, kc + 1 + len(str(k)))
            v = node[k]
            if isinstance(v, CommentedMap):
                walk(v, [*prefix, str(k)])
                continue
            vl, vc = node.lc.value(k)
            if v is None and vl == kl and lines[vl][vc:].strip().startswith("#"):
                loc = key_loc
            else:
                loc = Location(path, vl + 1, vc + 1, vl + 1, value_end(vl, vc) + 1)
            out.entries.append(OverrideEntry(".".join([*prefix, str(k)]), v, "set", loc, key_loc))

    walk(data, [])
    return out
