"""Fix primitives: each returns the :class:`Edit` list that makes one change, or ``[]``.

Rules build their :class:`~mbmem_lint.diagnostics.Fix` from these. Every primitive

* edits only the file that holds the construct (a linted source in ``sources``), never library code;
* touches only the bytes it must (a value expression, a keyword name, whole lines it adds/removes);
* is idempotent: when the file already says what the fix would write, it returns ``[]``;
* returns ``[]`` rather than guess when the shape is not one it understands.

Python constructs are located with ``ast`` positions of the top-level statement around the edit
(:mod:`._elements`); libcst, imported only then, handles the shapes whose token boundaries ``ast``
leaves unclear (``x=(1)``, ``a = 1; b = 2``, one-line compound statements). Tests check that both
paths give the same edits on the fixtures and corpus files. Where the change goes (the statement
that set the value, a helper, an override, or an assignment before ``return``) is decided by
:mod:`.placement`. YAML is edited with ruamel round-trip positions plus exact text spans (comments,
order, quoting survive). Either way, an edit replaces only the text span it changes.
"""

from __future__ import annotations

import ast
import json
from typing import TYPE_CHECKING, Any

from mbmem_lint.alloc_conf import merge_alloc_conf
from mbmem_lint.diagnostics import Edit, Location
from mbmem_lint.fix import _elements as _el
from mbmem_lint.fix._text import LineTable, PyIndex, Span, indentation, line_table, newline_of, py_index
from mbmem_lint.fix.placement import Placement, place
from mbmem_lint.literals import py_literal, yaml_literal
from mbmem_lint.parse.override_types import OverrideEntry, OverrideFile
from mbmem_lint.resolve.resolved import ResolvedRecipe, Write, is_known
from mbmem_lint.sources import SourceFile, Sources

if TYPE_CHECKING:  # imported where a fix needs libcst (most need ast alone)
    import libcst

__all__ = [
    "set_setting",
    "py_literal",
    "yaml_literal",
    "merge_alloc_conf",
    "replace_value",
    "set_field",
    "set_dict_key",
    "extend_alloc_conf",
    "rename_attribute",
    "remove_assignment",
    "insert_before_return",
    "yaml_set_value",
    "yaml_rename_key",
    "yaml_remove_entry",
    "yaml_add_entry",
]


# --------------------------------------------------------------------------- common helpers


def _source(sources: Sources, loc: Location | None, kind: str) -> SourceFile | None:
    if loc is None or loc.in_library:
        return None
    src = sources.get(loc.path)
    if src is None or src.kind != kind:
        return None
    return src


def _edit(src: SourceFile, start: int, end: int, replacement: str) -> list[Edit]:
    if src.text[start:end] == replacement:
        return []
    return [Edit(src.path, start, end, replacement)]


def _loc_span(src: SourceFile, idx: PyIndex | None, loc: Location) -> Span:
    return idx.loc_span(loc) if idx is not None else _text_span(src, loc)


def _text_span(src: SourceFile, loc: Location) -> Span:
    """The character span of ``loc`` in the file's text (empty at the start when it has no end)."""
    lines = line_table(src.text)
    s = lines.char_offset(loc.line, loc.column)
    if loc.end_line is None or loc.end_column is None:
        return Span(s, s)
    return Span(s, lines.char_offset(loc.end_line, loc.end_column))


def replace_value(location: Location, new_src: str, sources: Sources) -> list[Edit]:
    """Replace the expression at ``location`` (a value span, Python or YAML) with ``new_src``."""
    src = sources.get(location.path)
    if src is None or location.in_library or location.end_line is None or location.end_column is None:
        return []
    idx = py_index(src.text) if src.kind == "python" else None
    sp = _loc_span(src, idx, location)
    if sp.end < sp.start:
        return []
    return _edit(src, sp.start, sp.end, new_src)


def _chained_assign(idx: PyIndex, span: Span) -> ast.Assign | None:
    """The ``a = b = value`` statement whose value is exactly ``span`` (None for any other shape)."""
    line = idx.lines.line_of(span.start)
    chain = idx._chain(line)
    stmt = chain[-1][0] if chain else None
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) < 2:
        return None
    return stmt if _el.ast_span(idx, stmt.value) == span else None


def _split_chain(src: SourceFile, idx: PyIndex, stmt: ast.Assign, target_text: str | None,
                 value_src: str) -> list[Edit] | None:
    """``a = b = v`` → ``a = v`` and a new line ``b = <value_src>`` after it (the statement set two
    fields; only one changes). None when the written target is not one of the chain's."""
    if not target_text:
        return None
    spans = [_el.ast_span(idx, t) for t in stmt.targets]
    mine = next((i for i, sp in enumerate(spans) if _norm(src.text[sp.start:sp.end]) == _norm(target_text)), None)
    if mine is None:
        return None
    nxt = spans[mine + 1].start if mine + 1 < len(spans) else _el.ast_span(idx, stmt.value).start
    lines = idx.lines
    end = lines.line_end(stmt.end_lineno or stmt.lineno)
    indent = indentation(lines.line_text(stmt.lineno))
    nl = "" if src.text[:end].endswith(("\n", "\r")) else newline_of(src.text)
    return [Edit(src.path, spans[mine].start, nxt, ""),
            Edit(src.path, end, end, f"{nl}{indent}{target_text} = {value_src}{newline_of(src.text)}")]


def insert_before_return(recipe: ResolvedRecipe, statement_src: str, sources: Sources) -> list[Edit]:
    """Insert ``statement_src`` as a new line just before the recipe's final ``return``,
    indented like the ``return``. ``[]`` when the line is already there (idempotence)."""
    rl = recipe.return_location
    src = _source(sources, rl, "python")
    if rl is None or src is None:
        return []
    lines = line_table(src.text)
    ret_line = lines.line_text(rl.line)
    if not ret_line.lstrip().startswith("return"):
        return []
    indent = indentation(ret_line)
    # Idempotence: the same statement already among the lines right above the return.
    ln = rl.line - 1
    while ln >= 1 and lines.line_text(ln).strip() and not lines.line_text(ln).lstrip().startswith("def "):
        if lines.line_text(ln).strip() == statement_src.strip():
            return []
        ln -= 1
    off = lines.line_start(rl.line)
    return [Edit(src.path, off, off, f"{indent}{statement_src}{newline_of(src.text)}")]


def _target_text(recipe: ResolvedRecipe, path: str) -> str | None:
    if not recipe.config_var:
        return None
    return f"{recipe.config_var}.{path}"


# --------------------------------------------------------------------------- set_field


def set_field(recipe: ResolvedRecipe, path: str, value_src: str, sources: Sources,
              placement: Placement | None = None) -> list[Edit]:
    """Make ``path`` end up as ``value_src`` in the user's recipe (where: :func:`~.placement.place`).

    * ``edit``: replace the value of the statement that set it (``a = b = v``: split the chain);
    * ``extend``: add ``name=value`` to the constructor call that built the enclosing object;
    * ``override``: replace the YAML value (a ``--set`` override gets no fix);
    * ``append`` (or a shape none of these handle): ``<cfg>.<path> = <value>`` before ``return``.
    """
    p = placement or place(recipe, path, sources)
    w = p.write
    if p.how == "override" and w is not None:
        return _override_edit(w, value_src, sources)
    if p.how == "edit" and w is not None:
        src = _source(sources, w.location, "python")
        idx = py_index(src.text) if src else None
        if src is not None and idx is not None:
            sp = idx.loc_span(w.location)
            chained = _chained_assign(idx, sp)
            if chained is None:
                return _edit(src, sp.start, sp.end, value_src)
            split = _split_chain(src, idx, chained, w.target_text, value_src)
            if split is not None:
                return split
    elif p.how == "extend" and w is not None:
        rest = path[len(w.path) + 1 :]
        if rest.isidentifier():
            edits = add_keyword(w.location, rest, value_src, sources)
            if edits is not None:
                return edits
    target = _target_text(recipe, path)
    if target is None or not _attribute_path_ok(recipe, path):
        return []
    return insert_before_return(recipe, f"{target} = {value_src}", sources)


def _override_edit(w: Write, value_src: str, sources: Sources) -> list[Edit]:
    """The YAML value of override ``w`` replaced by ``value_src`` (a Python literal): an override wins
    over anything the recipe says. A ``--set`` item cannot be edited: no fix."""
    ysrc = _source(sources, w.location, "yaml")
    yaml_src = _python_to_yaml(value_src)
    if ysrc is None or yaml_src is None:
        return []
    sp = _yaml_span(ysrc, w.location)
    return _edit(ysrc, sp.start, sp.end, yaml_src)


def _attribute_path_ok(recipe: ResolvedRecipe, path: str) -> bool:
    """``cfg.a.b.c = v`` only works when ``a`` and ``a.b`` are config objects at that point: not a
    string (``mixed_precision = "bf16_mixed"``), ``None`` (``comm_overlap = None``) or a number."""
    parts = path.split(".")
    for i in range(1, len(parts)):
        f = recipe.fields.get(".".join(parts[:i]))
        if f is not None and is_known(f.value) and not isinstance(f.value, dict):
            return False
    return True


def _python_to_yaml(value_src: str) -> str | None:
    """YAML for a Python literal source (``True`` → ``true``); ``None`` when it is not a literal."""
    import ast

    try:
        value = ast.literal_eval(value_src)
    except (ValueError, SyntaxError):
        return None
    try:
        return yaml_literal(value)
    except TypeError:
        return None


def add_keyword(call_location: Location, name: str, value_src: str, sources: Sources) -> list[Edit] | None:
    """Add (or set) keyword ``name=value_src`` on the call expression at ``call_location``.
    ``None`` when there is no call there."""
    src = _source(sources, call_location, "python")
    idx = py_index(src.text) if src else None
    if src is None or idx is None:
        return None
    sp = idx.loc_span(call_location)
    found = _el.innermost(idx, sp, ast.Call)
    if found is None:
        return None
    call, csp = found
    if csp.start != sp.start and csp.end != sp.end:  # the call must be the value itself, not inside it
        return None
    parsed = _el.elements(idx, call, csp)  # type: ignore[arg-type]
    if parsed is None:
        return _add_keyword_libcst(src, idx, sp, name, value_src)
    elems, closer = parsed
    for el in elems:
        if el.key == name and not el.star:
            return _edit(src, el.value.start, el.value.end, value_src)
        if el.star:  # **kwargs could already carry it: do not guess
            return None
    new_arg = f"{name}={value_src}"
    if not elems:
        return [Edit(src.path, closer, closer, new_arg)]
    last = elems[-1]
    return _append_element(src, idx.lines, last.start, last.value.end, last.comma >= 0, closer, new_arg)


def _add_keyword_libcst(src: SourceFile, idx: PyIndex, sp: Span, name: str, value_src: str) -> list[Edit] | None:
    import libcst as cst


    call = idx.smallest(sp, (cst.Call,))
    if not isinstance(call, cst.Call):
        return None
    csp = idx.span(call)
    if csp.start != sp.start and csp.end != sp.end:
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            vs = idx.span(arg.value)
            return _edit(src, vs.start, vs.end, value_src)
        if arg.star:
            return None
    new_arg = f"{name}={value_src}"
    if not call.args:
        rpar = csp.end - 1
        return [Edit(src.path, rpar, rpar, new_arg)]
    last = call.args[-1]
    return _append_element(src, idx.lines, idx.span(last).start, idx.span(last.value).end,
                           isinstance(last.comma, cst.Comma), csp.end - 1, new_arg)


def _append_element(src: SourceFile, lines: LineTable, last_start: int, v_end: int, has_comma: bool,
                    closer: int, new_elem: str) -> list[Edit]:
    """Append ``new_elem`` after the last element (starting at ``last_start``, its value ending at
    ``v_end``, a comma after it or not) of a call/dict ending at ``closer`` (offset of ``)``/``}``),
    following the layout: one per line (with trailing comma) or inline."""
    text = src.text
    if lines.line_of(closer) == lines.line_of(v_end):
        # closer on the same line as the last element: inline append.
        if has_comma:
            after = v_end
            while after < closer and text[after] in " \t":
                after += 1
            comma_end = after + 1 if text[after : after + 1] == "," else v_end
            return [Edit(src.path, comma_end, comma_end, f" {new_elem},")]
        return [Edit(src.path, v_end, v_end, f", {new_elem}")]
    # Multi-line: a new line after the last element's line, indented like that element.
    elem_line = lines.line_of(last_start)
    line_txt = lines.line_text(elem_line)
    col = last_start - lines.line_start(elem_line)
    indent = indentation(line_txt) if line_txt[:col].strip() == "" else " " * col
    edits: list[Edit] = []
    if not has_comma:
        edits.append(Edit(src.path, v_end, v_end, ","))
    end_line = lines.line_of(v_end)
    comma_pos = text.find(",", v_end, lines.line_end(end_line))
    if has_comma and comma_pos >= 0:
        end_line = lines.line_of(comma_pos)
    ins = lines.line_end(end_line)
    nl = newline_of(text)
    if ins >= len(text) or ins > closer:
        return []
    edits.append(Edit(src.path, ins, ins, f"{indent}{new_elem},{nl}"))
    return edits


# --------------------------------------------------------------------------- env_vars dicts


def _dict_node(idx: PyIndex, loc: Location) -> tuple[ast.Dict, Span] | None:
    """The dict literal that is the value at ``loc`` (possibly parenthesised), not one inside it."""
    sp = idx.loc_span(loc)
    found = _el.innermost(idx, sp, ast.Dict)
    if found is None:
        return None
    node, dsp = found
    if sp.start < dsp.start or idx.text[dsp.start : sp.start].strip("( \t\r\n"):
        return None
    return node, dsp  # type: ignore[return-value]


def _dict_literal_edits(src: SourceFile, idx: PyIndex, loc: Location, key: str, value_src: str) -> list[Edit] | None:
    """Set ``key`` in the dict literal at ``loc``: its entry's value, or a new entry appended with the
    quote style and layout of the others. None when there is no dict literal there."""
    found = _dict_node(idx, loc)
    if found is None:
        return None
    d, dsp = found
    parsed = _el.elements(idx, d, dsp)
    if parsed is None:
        return _dict_literal_edits_libcst(src, idx, loc, key, value_src)
    elems, closer = parsed
    for el in elems:
        if el.key == key:
            return _edit(src, el.value.start, el.value.end, value_src)
    q = _el.first_key_quote(idx, d)
    new_elem = f"{q}{key}{q}: {value_src}"
    if not elems:
        return [Edit(src.path, dsp.start, closer + 1, "{" + new_elem + "}")]
    last = elems[-1]
    return _append_element(src, idx.lines, last.start, last.value.end, last.comma >= 0, closer, new_elem)


def _dict_literal_edits_libcst(src: SourceFile, idx: PyIndex, loc: Location, key: str,
                               value_src: str) -> list[Edit] | None:
    import libcst as cst


    sp = idx.loc_span(loc)
    d = idx.smallest(sp, (cst.Dict,))
    if not isinstance(d, cst.Dict):
        return None
    dsp = idx.span(d)
    if sp.start < dsp.start or idx.text[dsp.start : sp.start].strip("( \t\r\n"):
        return None

    def string_key(el: libcst.BaseDictElement) -> str | None:
        if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
            val = el.key.evaluated_value
            return val if isinstance(val, str) else None
        return None

    q = '"'
    for el in d.elements:
        if string_key(el) == key and isinstance(el, cst.DictElement):
            vs = idx.span(el.value)
            return _edit(src, vs.start, vs.end, value_src)
    for el in d.elements:
        if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
            q = el.key.quote[-1] if el.key.quote else '"'
            break
    new_elem = f"{q}{key}{q}: {value_src}"
    closer = src.text.rfind("}", dsp.start, dsp.end)
    if not d.elements:
        return [Edit(src.path, dsp.start, closer + 1, "{" + new_elem + "}")]
    last = d.elements[-1]
    return _append_element(src, idx.lines, idx.span(last).start, idx.span(last.value).end,
                           isinstance(last.comma, cst.Comma), closer, new_elem)


def set_dict_key(
    recipe: ResolvedRecipe, dict_path: str, key: str, value_src: str, sources: Sources,
    placement: Placement | None = None,
) -> list[Edit]:
    """Add or replace ``key`` in the dict at ``dict_path`` (``env_vars``).

    * the statement that set the key (``cfg.env_vars["K"] = v``, a dict entry, a keyword) → its value;
    * the dict literal that built the dict (``cfg.env_vars = {**COMMON_..., ...}``) → the entry is
      added or replaced in place (quote style, layout and trailing comma kept);
    * a YAML override of the key → the YAML value;
    * otherwise → ``cfg.env_vars["K"] = v`` before ``return``.
    """
    p = placement or place(recipe, f"{dict_path}.{key}", sources)
    w = p.write
    if p.how == "override" and w is not None:
        return _override_edit(w, value_src, sources)
    if p.how in ("edit", "extend") and w is not None:
        src = _source(sources, w.location, "python")
        idx = py_index(src.text) if src else None
        if src is not None and idx is not None:
            if p.how == "edit":
                sp = idx.loc_span(w.location)
                return _edit(src, sp.start, sp.end, value_src)
            edits = _dict_literal_edits(src, idx, w.location, key, value_src) if w.path == dict_path else None
            if edits is not None:
                return edits
    if not recipe.config_var:
        return []
    return insert_before_return(
        recipe, f"{recipe.config_var}.{dict_path}[{json.dumps(key)}] = {value_src}", sources
    )


def extend_alloc_conf(
    recipe: ResolvedRecipe,
    option: str,
    sources: Sources,
    *,
    var: str = "PYTORCH_CUDA_ALLOC_CONF",
    dict_path: str = "env_vars",
) -> list[Edit]:
    """Set allocator option ``option`` (``expandable_segments:True``) in ``env_vars[var]``, keeping
    the other options: edits the string literal in place where the recipe wrote it (its own statement
    or its entry in the dict literal), else sets the key to the merged effective value."""
    path = f"{dict_path}.{var}"
    p = place(recipe, path, sources)
    w = p.write
    if p.how in ("edit", "extend") and w is not None:
        src = _source(sources, w.location, "python")
        idx = py_index(src.text) if src else None
        lit: _el.StringLiteral | None = None
        if src is not None and idx is not None:
            at: Span | None = None
            if p.how == "edit":
                at = idx.loc_span(w.location)
            elif w.path == dict_path and (found := _dict_node(idx, w.location)) is not None:
                parsed = _el.elements(idx, found[0], found[1])
                el = next((e for e in parsed[0] if e.key == var), None) if parsed else None
                at = el.value if el is not None else None
            lit = _el.string_literal(idx, at) if at is not None else None
        if src is not None and lit is not None:
            merged = merge_alloc_conf(lit.value, option)
            return _edit(src, lit.span.start, lit.span.end, f"{lit.prefix}{lit.quote}{merged}{lit.quote}")
    f = recipe.fields.get(path)
    current = f.value if (f is not None and is_known(f.value) and isinstance(f.value, str)) else None
    merged = merge_alloc_conf(current, option)
    if current is not None and merged == current:
        return []
    return set_dict_key(recipe, dict_path, var, json.dumps(merged), sources, placement=p)


def set_setting(recipe: ResolvedRecipe, path: str, value: Any, sources: Sources) -> list[Edit]:
    """Make config ``path`` end up as ``value``, whatever kind of setting it is: an allocator option is
    merged into ``PYTORCH_CUDA_ALLOC_CONF`` (the recipe's other options kept), another ``env_vars`` key is set
    in the dict, any other field with :func:`set_field`. ``[]`` when there is nothing to edit."""
    if path == "env_vars.PYTORCH_CUDA_ALLOC_CONF" and isinstance(value, str):
        out: list[Edit] = []
        for option in (o.strip() for o in value.split(",")):
            if option:
                out.extend(extend_alloc_conf(recipe, option, sources))
        return out
    if path.startswith("env_vars."):
        return set_dict_key(recipe, "env_vars", path.split(".", 1)[1], py_literal(value), sources)
    return set_field(recipe, path, py_literal(value), sources)


# --------------------------------------------------------------------------- rename / remove


def _last_segment(write: Write) -> str:
    if write.target_text:
        return write.target_text.rsplit(".", 1)[-1].strip()
    return write.path.rsplit(".", 1)[-1]


def _norm(s: str) -> str:
    return "".join(s.split())


def _assignment_node(idx: PyIndex, write: Write) -> libcst.CSTNode | None:
    import libcst as cst

    loc = write.statement or write.location
    sp = idx.loc_span(loc)
    if write.statement is not None:
        for types in ((cst.Arg,), (cst.Assign, cst.AnnAssign)):
            node = idx.smallest(sp, types)
            if node is not None and idx.span(node).start == sp.start:
                return node
    node = idx.smallest(idx.loc_span(write.location), (cst.Arg, cst.Assign, cst.AnnAssign))
    if isinstance(node, cst.Arg) and node.keyword is None:
        return idx.smallest(idx.span(node), (cst.Assign, cst.AnnAssign))
    return node


def _statement_of(idx: PyIndex, write: Write) -> tuple[Span, list[tuple[ast.stmt, list[ast.stmt]]]] | None:
    """The span of the write's statement (an assignment, or a ``name=value`` keyword) and the ``ast``
    statements around it, outermost first; None without a statement span."""
    if write.statement is None:
        return None
    sp = idx.loc_span(write.statement)
    chain = idx._chain(idx.lines.line_of(sp.start))
    return (sp, chain) if chain else None


def _ast_assignment(idx: PyIndex, write: Write) -> ast.keyword | ast.Assign | ast.AnnAssign | None:
    """The ``name=value`` keyword or the assignment statement that made ``write``, from ``ast``
    (its statement span names it); None when there is no statement span to go by."""
    found = _statement_of(idx, write)
    if found is None:
        return None
    sp, chain = found
    nodes = list(ast.walk(chain[-1][0]))
    for node in nodes:
        if isinstance(node, ast.keyword) and _el.ast_span(idx, node).start == sp.start:
            return node
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _el.ast_span(idx, node).start == sp.start:
            return node
    return None


def rename_attribute(write: Write, new_name: str, sources: Sources) -> list[Edit]:
    """Rename the written attribute (``cfg.model.recompute_granulariy`` → ``recompute_granularity``)
    or keyword (``LoRA(dimm=8)`` → ``dim=8``). Only the name token changes."""
    src = _source(sources, write.statement or write.location, "python")
    idx = py_index(src.text) if src else None
    if src is None or idx is None:
        return []
    node = _ast_assignment(idx, write)
    if node is None:
        return _rename_attribute_libcst(src, idx, write, new_name)
    if isinstance(node, ast.keyword):
        if node.arg is None:
            return []
        start = _el.ast_span(idx, node).start
        return _edit(src, start, start + len(node.arg), new_name)
    old = _last_segment(write)
    chosen: tuple[ast.Attribute, Span] | None = None
    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
        if not isinstance(t, ast.Attribute):
            continue
        ts = _el.ast_span(idx, t)
        if write.target_text and _norm(src.text[ts.start : ts.end]) == _norm(write.target_text):
            chosen = (t, ts)
            break
        if chosen is None and t.attr in (old, new_name):
            chosen = (t, ts)
    if chosen is None:
        return []
    t, ts = chosen
    if src.text[ts.end - len(t.attr) : ts.end] != t.attr:
        return _rename_attribute_libcst(src, idx, write, new_name)
    return _edit(src, ts.end - len(t.attr), ts.end, new_name)


def _rename_attribute_libcst(src: SourceFile, idx: PyIndex, write: Write, new_name: str) -> list[Edit]:
    import libcst as cst


    node = _assignment_node(idx, write)
    old = _last_segment(write)
    if isinstance(node, cst.Arg):
        if node.keyword is None:
            return []
        ks = idx.span(node.keyword)
        return _edit(src, ks.start, ks.end, new_name)
    targets: list[libcst.BaseExpression] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, cst.AnnAssign):
        targets = [node.target]
    chosen: libcst.Attribute | None = None
    for t in targets:
        if not isinstance(t, cst.Attribute):
            continue
        if write.target_text and _norm(idx.code(t)) == _norm(write.target_text):
            chosen = t
            break
        if chosen is None and t.attr.value in (old, new_name):
            chosen = t
    if chosen is None:
        return []
    ns = idx.span(chosen.attr)
    return _edit(src, ns.start, ns.end, new_name)


def _remove_plain_statement(src: SourceFile, idx: PyIndex, write: Write) -> list[Edit] | None:
    """:func:`remove_assignment` for the common shape, found with ``ast`` alone (no libcst): an
    assignment statement on lines of its own (a trailing comment allowed). None for any other
    shape (``a = 1; b = 2``, ``if x: a = 1``, a keyword argument), which libcst handles."""
    found = _statement_of(idx, write)
    if found is None:
        return None
    sp, chain = found
    lines = idx.lines
    first = lines.line_of(sp.start)
    stmt, body = chain[-1]
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or _el.ast_span(idx, stmt) != sp:
        return None
    last = stmt.end_lineno or stmt.lineno
    if any(s is not stmt and s.lineno <= last and (s.end_lineno or s.lineno) >= first for s in body):
        return None
    end = lines.line_end(last, keep_newline=False)
    after = src.text[sp.end:end].strip()
    if src.text[lines.line_start(first):sp.start].strip() or (after and not after.startswith("#")):
        return None
    if len(chain) > 1 and len(body) == 1:  # alone in its block: the block still needs a statement
        return [Edit(src.path, sp.start, end, "pass")]
    return [Edit(src.path, lines.line_start(first), lines.line_end(last), "")]


def remove_assignment(write: Write, sources: Sources) -> list[Edit]:
    """Delete the statement (whole line, with its trailing comment) or the ``name=value`` keyword
    argument that made ``write``. A statement alone in its block becomes ``pass``."""
    src = _source(sources, write.statement or write.location, "python")
    idx = py_index(src.text) if src else None
    if src is None or idx is None:
        return []
    plain = _remove_plain_statement(src, idx, write)
    if plain is None:
        plain = _remove_keyword_plain(src, idx, write)
    return plain if plain is not None else _remove_with_libcst(src, idx, write)


def _remove_with_libcst(src: SourceFile, idx: PyIndex, write: Write) -> list[Edit]:
    import libcst as cst

    node = _assignment_node(idx, write)
    if isinstance(node, cst.Arg):
        return _remove_arg(src, idx, node)
    if not isinstance(node, (cst.Assign, cst.AnnAssign)):
        return []
    line_node = idx.ancestor(node, (cst.SimpleStatementLine,))
    if not isinstance(line_node, cst.SimpleStatementLine):
        return []
    lines = idx.lines
    text = src.text
    if len(line_node.body) > 1:
        pos = [i for i, s in enumerate(line_node.body) if s is node]
        if not pos:
            return []
        i = pos[0]
        ssp = idx.span(node)
        if i + 1 < len(line_node.body):
            nxt = idx.span(line_node.body[i + 1]).start
            return [Edit(src.path, ssp.start, nxt, "")]
        start = ssp.start
        while start > 0 and text[start - 1] in " \t;":
            start -= 1
        end = ssp.end
        while end < len(text) and text[end] in " \t;":
            end += 1
        return [Edit(src.path, start, end, "")]
    lsp = idx.span(line_node)
    first, last = lines.line_of(lsp.start), lines.line_of(max(lsp.end - 1, lsp.start))
    alone = idx.alone_in_block(line_node)
    if alone is None:
        return []
    if alone:
        end = lines.line_end(last, keep_newline=False)
        return [Edit(src.path, lsp.start, end, "pass")]
    return [Edit(src.path, lines.line_start(first), lines.line_end(last), "")]


def _remove_arg(src: SourceFile, idx: PyIndex, arg: libcst.Arg) -> list[Edit]:
    import libcst as cst

    call = idx.parent(arg)
    if not isinstance(call, cst.Call):
        return []
    args = list(call.args)
    i = next((k for k, a in enumerate(args) if a is arg), -1)
    if i < 0:
        return []
    v_end = idx.span(arg.value).end
    comma = src.text.find(",", v_end, idx.span(call).end - 1) if isinstance(arg.comma, cst.Comma) else -1
    prev_end = idx.span(args[i - 1].value).end if i > 0 else None
    return _remove_arg_span(src, idx.lines, idx.span(arg.keyword or arg.value).start, v_end, comma,
                            idx.span(call).end, prev_end)


def _remove_arg_span(src: SourceFile, lines: LineTable, start: int, v_end: int, comma: int, call_end: int,
                     prev_end: int | None) -> list[Edit]:
    """Delete the argument ``[start, v_end)`` (its comma at ``comma``, -1 when none) of the call ending
    at ``call_end``: its whole lines when it has them to itself, else the text up to the next
    argument (or back to the previous one, ending at ``prev_end``)."""
    text = src.text
    end = comma + 1 if comma >= 0 else v_end
    first, last = lines.line_of(start), lines.line_of(end)
    own_line = lines.line_text(first)[: start - lines.line_start(first)].strip() == ""
    rest = text[end : lines.line_end(last, keep_newline=False)].strip()
    if own_line and (rest == "" or rest.startswith("#")) and call_end > lines.line_end(last):
        return [Edit(src.path, lines.line_start(first), lines.line_end(last), "")]
    if comma >= 0:
        while end < len(text) and text[end] in " \t":
            end += 1
        return [Edit(src.path, start, end, "")]
    if prev_end is not None:
        return [Edit(src.path, prev_end, v_end, "")]
    return [Edit(src.path, start, v_end, "")]


def _remove_keyword_plain(src: SourceFile, idx: PyIndex, write: Write) -> list[Edit] | None:
    """:func:`_remove_arg` for a ``name=value`` keyword found with ``ast`` alone (no libcst). None when
    a parenthesised value or an unusual layout leaves the token boundaries unclear (libcst decides)."""
    found = _statement_of(idx, write)
    if found is None:
        return None
    sp, chain = found
    for call in ast.walk(chain[-1][0]):
        if not isinstance(call, ast.Call):
            continue
        for kw in call.keywords:
            if kw.arg is None or _el.ast_span(idx, kw) != sp:
                continue
            text = src.text
            call_end = _el.ast_span(idx, call).end
            if not text[:call_end].endswith(")"):
                return None
            items: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
            items.sort(key=lambda n: (n.lineno, n.col_offset))
            i = next(k for k, n in enumerate(items) if n is kw)
            v_end = _el.ast_span(idx, kw.value).end
            nxt = _el.next_token(text, v_end, call_end)
            if text[nxt:nxt + 1] == ",":
                comma = nxt
            elif nxt == call_end - 1:
                comma = -1
            else:
                return None  # ``name=(value)``: the value's parentheses are not in ast's span
            prev_end = None
            if i > 0:
                prev = items[i - 1]
                prev_end = _el.ast_span(idx, prev.value if isinstance(prev, ast.keyword) else prev).end
                if text[_el.next_token(text, prev_end, call_end):][:1] != ",":
                    return None
            return _remove_arg_span(src, idx.lines, sp.start, v_end, comma, call_end, prev_end)
    return None


# --------------------------------------------------------------------------- YAML


def _yaml_source(sources: Sources, loc: Location) -> SourceFile | None:
    return _source(sources, loc, "yaml")


def _yaml_span(src: SourceFile, loc: Location, offsets: tuple[int, int] | None = None) -> Span:
    if offsets is not None and 0 <= offsets[0] <= offsets[1] <= len(src.text):
        return Span(offsets[0], offsets[1])
    return _text_span(src, loc)


def yaml_set_value(entry: OverrideEntry, new_src: str, sources: Sources) -> list[Edit]:
    """Replace the value of a YAML override entry (only the scalar's text; comment after it kept)."""
    src = _yaml_source(sources, entry.location)
    if src is None:
        return []
    if entry.location == entry.key_location:  # ``key:`` without a value
        ks = _yaml_span(src, entry.key_location, entry.key_offsets)
        colon = src.text.find(":", ks.end)
        if colon < 0:
            return []
        return [Edit(src.path, colon + 1, colon + 1, f" {new_src}")]
    sp = _yaml_span(src, entry.location, entry.value_offsets)
    return _edit(src, sp.start, sp.end, new_src)


def yaml_rename_key(entry: OverrideEntry, new_key: str, sources: Sources) -> list[Edit]:
    """Rename the last segment of a YAML key (quoting and ``+``/``~`` prefixes kept). ``new_key`` is
    the new last segment, or the full new dotted path when it keeps the entry's parent path."""
    src = _yaml_source(sources, entry.key_location)
    if src is None:
        return []
    parent = entry.path.rsplit(".", 1)[0] if "." in entry.path else ""
    if "." in new_key:
        if not parent or not new_key.startswith(parent + ".") or "." in new_key[len(parent) + 1 :]:
            return []  # a move to another section, not a rename
        new_key = new_key[len(parent) + 1 :]
    sp = _yaml_span(src, entry.key_location, entry.key_offsets)
    key_text = src.text[sp.start : sp.end]
    old = entry.path.rsplit(".", 1)[-1]
    pos = key_text.rfind(old)
    if pos < 0:
        return []
    return _edit(src, sp.start + pos, sp.start + pos + len(old), new_key)


def _yaml_load(text: str) -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    try:
        return yaml.load(text)
    except Exception:  # noqa: BLE001 - any YAML error: no structural fix
        return None


def _block_last_line(lines: LineTable, key_line: int) -> int:
    """Last line (1-based) of the block that starts with the key on ``key_line``: following lines
    indented deeper, ignoring trailing blank and comment lines."""
    base = len(indentation(lines.line_text(key_line)))
    last = key_line
    ln = key_line + 1
    while ln <= lines.n_lines:
        t = lines.line_text(ln)
        s = t.strip()
        if s and not s.startswith("#"):
            if len(indentation(t)) <= base or s.startswith("---") or s.startswith("..."):
                break
            last = ln
        ln += 1
    return last


def _yaml_map_path(data: Any, segs: list[str]) -> list[Any]:
    """Maps along ``segs`` from the root (``[root, root[s0], ...]``) while they are mappings."""
    from ruamel.yaml.comments import CommentedMap

    chain = [data]
    node = data
    for seg in segs:
        if isinstance(node, CommentedMap) and seg in node and isinstance(node[seg], CommentedMap):
            node = node[seg]
            chain.append(node)
        else:
            break
    return chain


def yaml_remove_entry(entry: OverrideEntry, sources: Sources) -> list[Edit]:
    """Delete a YAML entry's lines (a block value with it). When that empties its parent mapping,
    the parent goes too (an empty ``model:`` would set the section to ``None``)."""
    from ruamel.yaml.comments import CommentedMap

    src = _yaml_source(sources, entry.key_location)
    if src is None:
        return []
    lines = line_table(src.text)
    key_line = entry.key_location.line
    segs = entry.path.split(".")
    data = _yaml_load(src.text)
    if isinstance(data, CommentedMap):
        chain = _yaml_map_path(data, segs[:-1])
        # Walk up while the map would become empty.
        depth = len(chain) - 1
        if depth == len(segs) - 1:
            while depth >= 1 and len(chain[depth]) == 1:
                parent = chain[depth - 1]
                seg = segs[depth - 1]
                try:
                    key_line = parent.lc.key(seg)[0] + 1
                except (KeyError, AttributeError, TypeError):
                    break
                depth -= 1
    if "{" in lines.line_text(key_line).split("#", 1)[0].split(":", 1)[0]:
        return []
    last = max(_block_last_line(lines, key_line), entry.location.end_line or key_line)
    if key_line != entry.key_location.line:
        last = _block_last_line(lines, key_line)
    start_line_text = lines.line_text(key_line)
    if start_line_text.lstrip().startswith("- "):
        return []
    return [Edit(src.path, lines.line_start(key_line), lines.line_end(last), "")]


def yaml_add_entry(override_file: OverrideFile, path: str, value_src: str, sources: Sources) -> list[Edit]:
    """Add ``path: value`` to a YAML override file, nested under the existing mappings
    (``model:`` → ``  recompute_granularity: selective``), at the end of the deepest existing block,
    with the file's indentation. An existing entry is set instead."""
    from ruamel.yaml.comments import CommentedMap

    src = sources.get(override_file.path)
    if src is None or src.kind != "yaml":
        return []
    for e in override_file.entries:
        if e.path == path and e.op != "delete":
            return yaml_set_value(e, value_src, sources)
    text = src.text
    lines = line_table(text)
    nl = newline_of(text)
    segs = path.split(".")
    data = _yaml_load(text) if text.strip() else CommentedMap()
    if data is None and text.strip():
        return []
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        return []
    chain = _yaml_map_path(data, segs[:-1])
    depth = len(chain) - 1
    parent = chain[-1]
    if segs[depth] in parent and depth == len(segs) - 1:
        return []  # exists but the loader did not report it: do not guess
    if segs[depth] in parent:
        return []  # a scalar/null where a mapping is needed
    unit = _yaml_indent_unit(lines)
    remaining = segs[depth:]
    if depth == 0:
        base_col = 0
        ins = len(text)
        prefix = "" if (text == "" or text.endswith("\n")) else nl
    else:
        if parent.fa.flow_style() or not len(parent):
            return []
        first_key = next(iter(parent))
        try:
            k_line, k_col = parent.lc.key(first_key)
            pk_line, _ = chain[-2].lc.key(segs[depth - 1])
        except (KeyError, AttributeError, TypeError):
            return []
        base_col = k_col
        last = _block_last_line(lines, pk_line + 1)
        ins = lines.line_end(last)
        prefix = "" if text[:ins].endswith("\n") else nl
        del k_line
    out: list[str] = []
    for j, seg in enumerate(remaining):
        pad = " " * (base_col + j * unit)
        if j == len(remaining) - 1:
            out.append(f"{pad}{seg}: {value_src}{nl}")
        else:
            out.append(f"{pad}{seg}:{nl}")
    return [Edit(src.path, ins, ins, prefix + "".join(out))]


def _yaml_indent_unit(lines: LineTable) -> int:
    widths = set()
    for ln in range(1, lines.n_lines + 1):
        t = lines.line_text(ln)
        s = t.strip()
        if s and not s.startswith("#") and not s.startswith("- "):
            w = len(indentation(t))
            if w:
                widths.add(w)
    return min(widths) if widths else 2
