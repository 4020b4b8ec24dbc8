"""``dataclass`` for the tool's own data classes: the standard one, created for less.

A one-file check imports ~55 data classes before it reads a line, and ``dataclasses`` compiles
source text for each generated method: ``__init__``, ``__repr__`` and ``__eq__``, plus
``__setattr__``, ``__delattr__`` and ``__hash__`` for frozen classes (210 ``compile`` calls, the
largest single cost of the pre-commit hook's start-up after the interpreter's own, bench/speed.py).
Here the standard decorator generates ``__init__`` (and the frozen guards) only; ``__repr__``,
``__eq__`` and ``__hash__`` are shared functions that read per-class ``operator.attrgetter`` tuples,
with the standard semantics: fields with ``repr=False``/``compare=False``/``hash=False`` are left
out, ``__eq__`` compares instances of the same class only, a class body's own method wins, and an
unfrozen class with ``eq`` is unhashable.

Type checkers see ``dataclasses.dataclass`` itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from operator import attrgetter

__all__ = ["dataclass", "field"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    _repr_running: set[tuple[int, int]] = set()

    def _getter(names: tuple[str, ...]) -> object:
        """A function of an instance returning a tuple of the named attributes (C-level)."""
        if not names:
            return lambda obj: ()
        if len(names) == 1:
            one = attrgetter(names[0])
            return lambda obj: (one(obj),)
        return attrgetter(*names)

    def _repr(self: object) -> str:
        # The standard __repr__ is wrapped by reprlib-style recursion protection: do the same.
        key = (id(self), id(type(self)))
        if key in _repr_running:
            return "..."
        _repr_running.add(key)
        try:
            cls = type(self)
            values = cls.__record_repr__(self)
            parts = ", ".join(f"{name}={value!r}" for name, value in zip(cls.__record_repr_names__, values))
            return f"{cls.__qualname__}({parts})"
        finally:
            _repr_running.discard(key)

    def _eq(self: object, other: object) -> bool:
        if other.__class__ is self.__class__:
            compare = self.__class__.__record_compare__
            return bool(compare(self) == compare(other))
        return NotImplemented

    def _hash(self: object) -> int:
        return hash(self.__class__.__record_hash__(self))

    def _process(cls: type, repr: bool, eq: bool, frozen: bool, unsafe_hash: bool, kwargs: dict) -> type:
        own = cls.__dict__
        explicit_hash = "__hash__" in own and own["__hash__"] is not None
        body_eq = "__eq__" in own
        cls = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen, **kwargs)
        fields = dataclasses.fields(cls)
        if repr and "__repr__" not in own:
            names = tuple(f.name for f in fields if f.repr)
            cls.__record_repr__ = staticmethod(_getter(names))
            cls.__record_repr_names__ = names
            cls.__repr__ = _repr
        if eq and not body_eq:
            cls.__record_compare__ = staticmethod(_getter(tuple(f.name for f in fields if f.compare)))
            cls.__eq__ = _eq
        if eq and (frozen or unsafe_hash) and not explicit_hash:
            names = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            cls.__record_hash__ = staticmethod(_getter(names))
            cls.__hash__ = _hash
        elif eq and not frozen and not unsafe_hash and not explicit_hash and not body_eq:
            cls.__hash__ = None  # as the standard decorator: equal by value and mutable, so unhashable
        return cls

    def dataclass(cls: type | None = None, /, *, repr: bool = True, eq: bool = True, frozen: bool = False,
                  unsafe_hash: bool = False, **kwargs: object) -> object:
        """``dataclasses.dataclass`` with shared ``__repr__``/``__eq__``/``__hash__`` (module docstring)."""
        if cls is None:
            return lambda c: _process(c, repr, eq, frozen, unsafe_hash, kwargs)
        return _process(cls, repr, eq, frozen, unsafe_hash, kwargs)
