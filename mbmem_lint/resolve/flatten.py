"""Abstract config objects → the flat, JSON-like view in :class:`ResolvedRecipe`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mbmem_lint.resolve.resolved import PLAIN_TYPES, ResolvedField, Unknown, Write
from mbmem_lint.resolve.values import (
    BoundMethod,
    DictVal,
    Ext,
    Func,
    HFModel,
    LocalClass,
    ModuleRef,
    Obj,
    Prov,
    Slot,
)

MAX_DEPTH = 6
_MISSING = object()


def to_json(value: Any, depth: int = 0) -> Any:
    """Plain JSON-like value for an abstract one (objects become ``{"_target_": cls}``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Unknown):
        return value
    if isinstance(value, Ext):
        return value.qualname
    if isinstance(value, Obj):
        # A named module-level preset also says which one (``_name_``), for rules that read names.
        return {"_target_": value.cls, "_name_": value.label} if value.label else {"_target_": value.cls}
    if depth > MAX_DEPTH:
        return Unknown("value nested too deeply")
    if isinstance(value, (list, tuple)):
        return [to_json(v, depth + 1) for v in value]
    if isinstance(value, DictVal):
        return {str(k): to_json(s.value, depth + 1) for k, s in value.slots.items()}
    if isinstance(value, Func):
        return value.qualname
    if isinstance(value, (HFModel, ModuleRef, BoundMethod, LocalClass)):
        return Unknown("not a config value")
    if isinstance(value, slice):
        return Unknown("slice")
    return Unknown(f"unsupported value {type(value).__name__}")


def _field(value: Any, prov: Prov) -> ResolvedField:
    if type(value) in PLAIN_TYPES:  # most fields: to_json returns them as they are
        return ResolvedField(value, prov.origin, prov.loc, prov.anchor, prov.note)
    note = prov.note
    if isinstance(value, Unknown) and not note:
        note = value.reason
    return ResolvedField(to_json(value), prov.origin, prov.loc, prov.anchor, note)


class FieldMap(Mapping[str, ResolvedField]):
    """Fields of a resolved config, computed on demand from the object tree.

    Rules read a few dozen paths of ~1000 per recipe, so a lookup walks the tree along the path
    instead of flattening everything. Iterating (JSON output) flattens once and caches.
    """

    def __init__(self, root: Obj) -> None:
        self.root = root
        self._cache: dict[str, ResolvedField | None] = {}
        self._holders: dict[str, tuple[Any, list[str] | None]] = {}
        self._explicit: dict[str, ResolvedField] | None = None
        self._objects: dict[str, Obj] | None = None

    # -- lookups ------------------------------------------------------------------------------
    def _holder(self, prefix: str) -> tuple[Any, list[str] | None]:
        """(value at ``prefix``, None) — or (object, remaining parts) when an attribute on the way
        was never set (its default factory may still know the field) — or (None, None); memoised:
        rules read many fields of the same few sections."""
        hit = self._holders.get(prefix)
        if hit is not None:
            return hit
        cur: Any = self.root
        parts = prefix.split(".")
        found: tuple[Any, list[str] | None] = (None, None)
        for i, part in enumerate(parts):
            if isinstance(cur, Obj):
                slot = cur.slots.get(part) or cur.invalid.get(part)
                if slot is None:
                    found = (cur, parts[i:])
                    break
            elif isinstance(cur, DictVal):
                slot = cur.slots.get(part)
                if slot is None:
                    break
            else:
                break
            cur = slot.value
        else:
            found = (cur, None)
        self._holders[prefix] = found
        return found

    def _lookup(self, path: str) -> ResolvedField | None:
        prefix, _, name = path.rpartition(".")
        if prefix:
            cur, rest = self._holders.get(prefix) or self._holder(prefix)
            if rest is not None:
                return self._default_chain(cur, [*rest, name])
        else:
            cur = self.root
        if isinstance(cur, Obj):
            slot = cur.slots.get(name) or cur.invalid.get(name)
            if slot is None:
                return _default_field(cur, name)
        elif isinstance(cur, DictVal):
            slot = cur.slots.get(name)
            if slot is None:
                return None
        else:
            return None
        return _field(slot.value, slot.prov)

    def _default_chain(self, obj: Obj, rest: list[str]) -> ResolvedField | None:
        """A path through a default factory that nothing materialised (``dataset.x.y``)."""
        schema = obj.schema
        for part in rest[:-1]:
            if schema is None or part not in schema.fields:
                return None
            q = schema.fields[part].default.get("factory")
            if not isinstance(q, str):
                return None
            from mbmem_lint.resolve.schema import Schema

            schema = Schema.load().get(q)
        if schema is None or rest[-1] not in schema.fields:
            return None
        value = _default_value(schema.fields[rest[-1]].default, rest[-1])
        p = obj.created
        return ResolvedField(value, "default", p.loc, p.anchor, value.reason if isinstance(value, Unknown) else "")

    def get_field(self, path: str) -> ResolvedField | None:
        f = self._cache.get(path, _MISSING)
        if f is not _MISSING:
            return f  # type: ignore[return-value]
        f = self._lookup(path)
        self._cache[path] = f
        return f

    def __getitem__(self, path: str) -> ResolvedField:
        f = self.get_field(path)
        if f is None:
            raise KeyError(path)
        return f

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.get_field(path) is not None

    def get(self, path: str, default: Any = None) -> Any:  # Mapping.get goes through a KeyError
        # get_field, inlined: rules and the estimator ask ~200k times per corpus run, mostly cached paths.
        f = self._cache.get(path, _MISSING)
        if f is _MISSING:
            f = self._cache[path] = self._lookup(path)
        return default if f is None else f

    # -- full views ---------------------------------------------------------------------------
    def _walk_all(self) -> None:
        if self._explicit is not None:
            return
        explicit: dict[str, ResolvedField] = {}
        objects: dict[str, Obj] = {}
        seen: set[int] = set()

        def walk(obj: Obj, prefix: str, depth: int) -> None:
            if id(obj) in seen or depth > MAX_DEPTH:
                return
            seen.add(id(obj))
            objects[prefix] = obj
            # Attributes that are not fields (typos Bridge skips) are left out of the listing: they
            # are not part of the config (rules see them as writes with valid_field=False).
            for name, slot in obj.slots.items():
                path = f"{prefix}.{name}" if prefix else name
                explicit[path] = _field(slot.value, slot.prov)
                v = slot.value
                if isinstance(v, Obj):
                    walk(v, path, depth + 1)
                elif isinstance(v, DictVal):
                    for key, ks in v.slots.items():
                        explicit[f"{path}.{key}"] = _field(ks.value, ks.prov)

        walk(self.root, "", 0)
        self._explicit, self._objects = explicit, objects

    @property
    def explicit(self) -> dict[str, ResolvedField]:
        """Every field something set (recipe, library, model table, runtime, overrides)."""
        self._walk_all()
        assert self._explicit is not None
        return self._explicit

    def __iter__(self) -> Iterator[str]:
        self._walk_all()
        assert self._explicit is not None and self._objects is not None
        yield from self._explicit
        for prefix, obj in self._objects.items():
            if obj.schema is None:
                continue
            for name in obj.schema.fields:
                path = f"{prefix}.{name}" if prefix else name
                if path not in self._explicit:
                    yield path

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _default_value(d: dict[str, Any], name: str) -> Any:
    if "value" in d:
        return d["value"]
    if "symbol" in d:
        return d["symbol"]
    if "factory" in d:
        from mbmem_lint.resolve.schema import Schema

        if Schema.load().get(str(d["factory"])) is None:  # a function computes it at runtime
            return Unknown(f"default of {name} is computed by {d['factory']}()")
        return {"_target_": d["factory"]}
    if d.get("required"):
        return Unknown(f"required field {name} not set")
    return Unknown(f"default of {name} is computed at runtime")


def _default_field(obj: Obj, name: str) -> ResolvedField | None:
    if obj.schema is None or name not in obj.schema.fields:
        return None
    value = obj.havoc if obj.havoc is not None else _default_value(obj.schema.fields[name].default, name)
    p = obj.created
    return ResolvedField(value, "default", p.loc, p.anchor, value.reason if isinstance(value, Unknown) else "")


_NOT_WRITTEN = frozenset({"default", "model-table"})


def _writes_of(path: str, owner: Obj | None, history: Any, out: list[Write]) -> None:
    cls = owner.cls if owner is not None else None
    for rec in history:
        p = rec.prov
        if p.origin in _NOT_WRITTEN:
            continue  # not assignments anyone wrote: the fields map keeps their values
        v = rec.value
        # to_json returns plain values as they are: skip the call.
        out.append(Write(path, v if type(v) in PLAIN_TYPES else to_json(v), p.origin, p.loc, p.anchor, rec.valid,
                         cls, p.target_text, p.stmt, p.function, p.seq))


def _walk_tables(root: Obj, visit: Any) -> None:
    """``visit(path, owner, slot)`` for every recorded slot under ``root`` (each object once)."""
    seen: set[int] = set()

    def walk(obj: Obj, prefix: str, depth: int) -> None:
        if id(obj) in seen or depth > MAX_DEPTH:
            return
        seen.add(id(obj))
        for table in (obj.slots, obj.invalid):
            for name, slot in table.items():
                v = slot.value
                is_obj = isinstance(v, Obj)
                is_dict = not is_obj and isinstance(v, DictVal)
                if not (is_obj or is_dict or slot.history):
                    continue  # most slots: a plain value nobody asked for (no path string built)
                path = f"{prefix}.{name}" if prefix else name
                if slot.history:
                    visit(path, obj, slot)
                if is_obj:
                    walk(v, path, depth + 1)
                elif is_dict:
                    for key, ks in v.slots.items():
                        if ks.history:
                            visit(f"{path}.{key}", None, ks)

    walk(root, "", 0)


def _walk_invalid(root: Obj, visit: Any) -> None:
    """:func:`_walk_tables` over the non-field tables only (MBM601 asks for every recipe): in the field
    tables only the objects held by attributes need looking at."""
    seen: set[int] = set()

    def walk(obj: Obj, prefix: str, depth: int) -> None:
        if id(obj) in seen or depth > MAX_DEPTH:
            return
        seen.add(id(obj))
        for name, v in [(name, s.value) for name, s in obj.slots.items() if type(s.value) is Obj]:
            walk(v, f"{prefix}.{name}" if prefix else name, depth + 1)
        for name, slot in obj.invalid.items():
            path = f"{prefix}.{name}" if prefix else name
            if slot.history:
                visit(path, obj, slot)
            if isinstance(slot.value, Obj):
                walk(slot.value, path, depth + 1)

    walk(root, "", 0)


def collect_writes(root: Obj) -> list[Write]:
    """Every recorded assignment under ``root``, in execution order."""
    writes: list[Write] = []
    _walk_tables(root, lambda path, owner, slot: _writes_of(path, owner, slot.history, writes))
    writes.sort(key=lambda w: w.seq)
    return writes


def _container_at(root: Obj, parts: list[str]) -> Any:
    """The value at ``parts`` below ``root`` through object attributes (None when there is none)."""
    cur: Any = root
    for depth, part in enumerate(parts):
        if not isinstance(cur, Obj) or depth > MAX_DEPTH:
            return None
        slot = cur.slots.get(part) or cur.invalid.get(part)
        if slot is None:
            return None
        cur = slot.value
    return cur


class LazyWrites(list):
    """``ResolvedRecipe.writes``, collected on first use (``resolve`` never needs them)."""

    def __init__(self, root: Obj) -> None:
        super().__init__()
        self._root: Obj | None = root
        self._by_path: dict[str, list[Write]] = {}
        self._holders: dict[str, Any] = {}  # object path -> the object there

    def for_path(self, path: str) -> list[Write]:
        """The writes of one path, in order, without collecting every write of the recipe (rules
        ask for a few paths; the full list costs ~190 writes per recipe)."""
        hit = self._by_path.get(path)
        if hit is None:
            if self._root is None:
                hit = [w for w in super().__iter__() if w.path == path]
            else:
                hit = []
                for owner, slot in self._slots_at(path):
                    _writes_of(path, owner, slot.history, hit)
                hit.sort(key=lambda w: w.seq)
            self._by_path[path] = hit
        return hit

    def _slots_at(self, path: str) -> list[tuple[Obj | None, Slot]]:
        """The recorded slot(s) of ``path`` as :func:`collect_writes` names them: attributes of
        objects (field and non-field tables) and keys of a dict held directly by an attribute."""
        assert self._root is not None
        prefix, _, name = path.rpartition(".")
        if prefix in self._holders:
            obj = self._holders[prefix]
        else:
            obj = self._holders[prefix] = _container_at(self._root, prefix.split(".") if prefix else [])
        if isinstance(obj, Obj) and prefix.count(".") + (1 if prefix else 0) <= MAX_DEPTH:
            return [(obj, s) for s in (obj.slots.get(name), obj.invalid.get(name)) if s is not None and s.history]
        if isinstance(obj, DictVal) and prefix:
            # Only a dict's own keys are recorded (``env_vars.NAME``), and only when an object's
            # attribute holds the dict.
            parent = _container_at(self._root, prefix.split(".")[:-1])
            ks = obj.slots.get(name)
            if isinstance(parent, Obj) and ks is not None and ks.history:
                return [(None, ks)]
        return []

    def invalid(self) -> list[Write]:
        """Writes to attributes that are not fields of their class, in order."""
        if self._root is None:
            return [w for w in super().__iter__() if not w.valid_field]
        out: list[Write] = []
        _walk_invalid(self._root, lambda path, owner, slot: _writes_of(path, owner, slot.history, out))
        out = [w for w in out if not w.valid_field]
        out.sort(key=lambda w: w.seq)
        return out

    def _fill(self) -> None:
        if self._root is not None:
            root, self._root = self._root, None
            super().extend(collect_writes(root))

    def __iter__(self) -> Iterator[Write]:
        self._fill()
        return super().__iter__()

    def __len__(self) -> int:
        self._fill()
        return super().__len__()

    def __getitem__(self, i: Any) -> Any:
        self._fill()
        return super().__getitem__(i)

    def __reversed__(self) -> Iterator[Write]:
        self._fill()
        return super().__reversed__()

    def __contains__(self, x: object) -> bool:
        self._fill()
        return super().__contains__(x)

    def __bool__(self) -> bool:
        self._fill()
        return super().__len__() > 0

    def __eq__(self, other: object) -> bool:
        self._fill()
        return super().__eq__(other)

    def __reduce__(self) -> Any:  # pickles as a plain list
        self._fill()
        return (list, (list(super().__iter__()),))


def flatten(root: Obj) -> tuple[FieldMap, list[Write]]:
    return FieldMap(root), LazyWrites(root)


def path_writes(recipe: Any, path: str) -> list[Write]:
    """Writes of exactly ``path`` in execution order: the lazy per-path index of a resolved recipe; a plain
    list of writes (tests, recipes made from flat values) is filtered, so a test may change it in place."""
    writes = recipe.writes
    if isinstance(writes, LazyWrites):
        return writes.for_path(path)
    return [w for w in writes if w.path == path]


def write_order(recipe: Any, w: Write) -> int:
    """Execution order of a write: its sequence number, else its place in a plain list (tests)."""
    if w.seq >= 0:
        return w.seq
    try:
        return int(recipe.writes.index(w))
    except ValueError:
        return -1
