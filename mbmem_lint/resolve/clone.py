"""Deep copies of abstract values (``copy.deepcopy`` in recipes; memoised call results).

``remap`` maps ``id(anchor Location)`` → replacement: a memoised call result re-used at another
call site points its library-set values at the new call site.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.resolve.values import DictVal, Obj, Prov, Slot, WriteRec

Remap = dict[int, Location]


def clone(value: Any, memo: dict[int, Any] | None = None, remap: Remap | None = None) -> Any:
    memo = {} if memo is None else memo
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, Obj):
        o = Obj(value.cls, value.schema, _prov(value.created, remap))
        o.open = value.open
        o.havoc = value.havoc
        o.label = value.label
        memo[key] = o
        o.slots = {k: _clone_slot(s, memo, remap) for k, s in value.slots.items()}
        o.invalid = {k: _clone_slot(s, memo, remap) for k, s in value.invalid.items()}
        return o
    if isinstance(value, DictVal):
        d = DictVal(_prov(value.created, remap))
        memo[key] = d
        d.slots = {k: _clone_slot(s, memo, remap) for k, s in value.slots.items()}
        return d
    if isinstance(value, list):
        lst: list[Any] = []
        memo[key] = lst
        lst.extend(clone(v, memo, remap) for v in value)
        return lst
    if isinstance(value, tuple):
        t = tuple(clone(v, memo, remap) for v in value)
        memo[key] = t
        return t
    return value


def _prov(p: Prov, remap: Remap | None) -> Prov:
    if remap is None:
        return p
    new_anchor = remap.get(id(p.anchor))
    if new_anchor is None:
        return p
    return Prov(p.loc, new_anchor, p.origin, p.seq, p.stmt, p.target_text, p.function, p.note)


def _clone_slot(s: Slot, memo: dict[int, Any], remap: Remap | None) -> Slot:
    v = s.value
    value = v if v is None or isinstance(v, (bool, int, float, str)) else clone(v, memo, remap)
    if remap is None:
        # History records are immutable and only ever read: share them.
        return Slot(value, s.prov, s.history)
    history = s.history
    if any(id(w.prov.anchor) in remap for w in history):
        history = tuple(WriteRec(w.value, _prov(w.prov, remap), w.valid) for w in history)
    return Slot(value, _prov(s.prov, remap), history)
