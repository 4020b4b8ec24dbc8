"""Deep copies of abstract values (``copy.deepcopy`` in recipes; memoised call results).

``remap`` is ``(old anchor, new anchor)``: a memoised call result re-used at another call site points
its library-set values (those anchored at the first call site, the very same Location object) at the new
call site.

Every memoised library call (``_pretrain_common()``, ``llama3_8b_pretrain_config()``) is copied
on each use, a few hundred slots each, so the copy is written for speed: slots are never changed in
place (writers replace them), so a copy shares every slot that holds no nested object and needs no
anchor remap.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnostics import Location
from mbmem_lint.resolve.values import DictVal, Obj, Prov, Slot, WriteRec

Remap = tuple[Location, Location]


def clone(value: Any, memo: dict[int, Any] | None = None, remap: Remap | None = None,
          plans: dict[int, list[str]] | None = None) -> Any:
    """Deep copy of ``value``. ``plans`` (for a value that never changes, such as a memoised call
    result, copied again and again): per table, the names whose slots need more than sharing,
    found on the first copy and reused by the next ones."""
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
        o.slots = _clone_table(value.slots, memo, remap, plans)
        o.invalid = _clone_table(value.invalid, memo, remap, plans) if value.invalid else {}
        return o
    if isinstance(value, DictVal):
        d = DictVal(_prov(value.created, remap))
        memo[key] = d
        d.slots = _clone_table(value.slots, memo, remap, plans)
        return d
    if isinstance(value, list):
        lst: list[Any] = []
        memo[key] = lst
        lst.extend(clone(v, memo, remap, plans) for v in value)
        return lst
    if isinstance(value, tuple):
        t = tuple(clone(v, memo, remap, plans) for v in value)
        memo[key] = t
        return t
    return value


def _prov(p: Prov, remap: Remap | None) -> Prov:
    if remap is None or p.anchor is not remap[0]:
        return p
    return Prov(p.loc, remap[1], p.origin, p.seq, p.stmt, p.target_text, p.function, p.note)


# Values clone() copies; everything else (plain values, Unknown, Ext, functions) is immutable here.
_COPIED = frozenset({Obj, DictVal, list, tuple})


def _needs_work(table: dict[str, Slot], remap: Remap | None) -> list[str]:
    """Names of the slots a copy cannot share: nested values to copy, and (with a remap) slots
    whose provenance or history points at the old call site."""
    copied = _COPIED
    if remap is None:
        return [name for name, s in table.items() if type(s.value) in copied]
    old = remap[0]
    return [name for name, s in table.items()
            if type(s.value) in copied or s.prov.anchor is old or any(w.prov.anchor is old for w in s.history)]


def _clone_table(table: dict[str, Slot], memo: dict[int, Any], remap: Remap | None,
                 plans: dict[int, list[str]] | None) -> dict[str, Slot]:
    # Slots are never changed in place (writers put a new Slot in the table), so the copy shares every
    # slot whose value needs no copy and whose provenance needs no remap: a C-level dict copy, then
    # new slots only for nested config objects (and, with a remap, slots anchored at the old call site).
    out = table.copy()
    if plans is None:
        names = _needs_work(table, remap)
    else:
        names = plans.get(id(table))  # type: ignore[assignment]
        if names is None:
            names = plans[id(table)] = _needs_work(table, remap)
    copied = _COPIED
    if remap is None:
        for name in names:
            s = table[name]
            out[name] = Slot(clone(s.value, memo, None, plans), s.prov, s.history)
        return out
    old, new = remap
    for name in names:
        s = table[name]
        v = s.value
        value = clone(v, memo, remap, plans) if type(v) in copied else v
        history = s.history
        for w in history:
            if w.prov.anchor is old:
                history = tuple(WriteRec(r.value, _prov(r.prov, remap), r.valid) for r in history)
                break
        p = s.prov
        if p.anchor is old:
            p = Prov(p.loc, new, p.origin, p.seq, p.stmt, p.target_text, p.function, p.note)
        out[name] = Slot(value, p, history)
    return out
