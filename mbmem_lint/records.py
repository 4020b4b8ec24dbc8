"""``dataclass`` for the tool's own data classes: the standard one, created for less.

A one-file check imports ~55 data classes before it reads a line, and ``dataclasses`` compiles
source text for each generated method: ``__init__``, ``__repr__`` and ``__eq__``, plus
``__setattr__``, ``__delattr__`` and ``__hash__`` for frozen classes. Those 210 ``compile`` calls
were the largest single cost of the pre-commit hook's start-up after the interpreter's own
(bench/speed.py; ~155 M of a 578 M-instruction one-file check). Here nothing is compiled when a
class is created:

- ``__repr__``, ``__eq__``, ``__hash__`` and the frozen guards are shared functions reading
  per-class ``operator.attrgetter`` tuples;
- ``__init__`` starts as a shared, interpreted one (argument binding in Python), and a class whose
  instances are created often gets the standard compiled ``__init__`` once it reached
  :data:`COMPILE_AFTER` instances. Most of the classes a run defines are created a handful of
  times (settings, options, per-recipe inputs) or never; the few hot ones (resolved fields,
  writes, estimate components) compile on their way to thousands of instances.

Semantics are the standard decorator's: fields with ``repr=False``/``compare=False``/``hash=False``
are left out, ``__eq__`` compares instances of the same class only, a class body's own method wins,
an unfrozen class with ``eq`` is unhashable, frozen instances reject assignment and deletion
(``FrozenInstanceError``), defaults and default factories, ``init=False`` fields and
``__post_init__`` behave the same. A class with ``InitVar`` or keyword-only fields is left to the
standard decorator entirely. Type checkers see ``dataclasses.dataclass`` itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import FrozenInstanceError, field
from operator import attrgetter

__all__ = ["dataclass", "field", "COMPILE_AFTER"]

# Instances created through the interpreted __init__ before the compiled one replaces it.
COMPILE_AFTER = 32

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    _MISSING = dataclasses.MISSING
    _repr_running: set[tuple[int, int]] = set()

    def _getter(names):
        """A function of an instance returning a tuple of the named attributes (C-level)."""
        if not names:
            return lambda obj: ()
        if len(names) == 1:
            one = attrgetter(names[0])
            return lambda obj: (one(obj),)
        return attrgetter(*names)

    def _repr(self):
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

    def _eq(self, other):
        if other.__class__ is self.__class__:
            compare = self.__class__.__record_compare__
            return compare(self) == compare(other)
        return NotImplemented

    def _hash(self):
        return hash(self.__class__.__record_hash__(self))

    def _frozen_setattr(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def _frozen_delattr(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    class _InitSpec:
        """What ``__init__`` does for one class: its parameters and how each field gets its value."""

        __slots__ = ("cls", "params", "param_set", "required", "defaults", "factories", "extra", "frozen",
                     "post_init", "created", "slots")

        def __init__(self, cls, fields, frozen, slots):
            self.cls = cls
            self.params = tuple(f.name for f in fields if f.init)
            self.param_set = frozenset(self.params)
            self.required = frozenset(f.name for f in fields
                                      if f.init and f.default is _MISSING and f.default_factory is _MISSING)
            self.defaults = {f.name: f.default for f in fields if f.init and f.default is not _MISSING}
            self.factories = {f.name: f.default_factory for f in fields
                              if f.init and f.default_factory is not _MISSING}
            # Fields outside __init__'s parameters that __init__ still sets (as the standard one).
            self.extra = tuple((f.name, f.default_factory, f.default) for f in fields if not f.init and (
                f.default_factory is not _MISSING or (slots and f.default is not _MISSING)))
            self.frozen = frozen
            self.slots = slots
            self.post_init = hasattr(cls, "__post_init__")
            self.created = 0

        def bind(self, args, kwargs):
            params = self.params
            if len(args) > len(params):
                raise TypeError(f"{self.cls.__qualname__}.__init__() takes {len(params) + 1} positional "
                                f"arguments but {len(args) + 1} were given")
            values = dict(zip(params, args))
            for name, value in kwargs.items():
                if name not in self.param_set:
                    raise TypeError(f"{self.cls.__qualname__}.__init__() got an unexpected keyword argument "
                                    f"{name!r}")
                if name in values:
                    raise TypeError(f"{self.cls.__qualname__}.__init__() got multiple values for argument "
                                    f"{name!r}")
                values[name] = value
            missing = [name for name in params if name not in values and name in self.required]
            if missing:
                raise TypeError(f"{self.cls.__qualname__}.__init__() missing {len(missing)} required "
                                f"argument(s): {', '.join(repr(m) for m in missing)}")
            for name, factory in self.factories.items():
                if name not in values:
                    values[name] = factory()
            for name, default in self.defaults.items():
                values.setdefault(name, default)
            return values

        def compile(self):
            """The standard ``__init__``: source text with one assignment per field, compiled."""
            names = set(self.params) | {name for name, _, _ in self.extra}
            self_name = "__dataclass_self__" if "self" in names else "self"
            env = {"__dataclass_builtins_object__": object, "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY}
            params, lines = [self_name], []

            def assign(name, value):
                if self.frozen:
                    lines.append(f"__dataclass_builtins_object__.__setattr__({self_name},{name!r},{value})")
                else:
                    lines.append(f"{self_name}.{name}={value}")

            for name in self.params:
                if name in self.factories:
                    env[f"_dflt_{name}"] = self.factories[name]
                    params.append(f"{name}=_HAS_DEFAULT_FACTORY")
                    assign(name, f"_dflt_{name}() if {name} is _HAS_DEFAULT_FACTORY else {name}")
                elif name in self.defaults:
                    env[f"_dflt_{name}"] = self.defaults[name]
                    params.append(f"{name}=_dflt_{name}")
                    assign(name, name)
                else:
                    params.append(name)
                    assign(name, name)
            for name, factory, default in self.extra:
                env[f"_dflt_{name}"] = factory if factory is not _MISSING else default
                assign(name, f"_dflt_{name}()" if factory is not _MISSING else f"_dflt_{name}")
            if self.post_init:
                lines.append(f"{self_name}.__post_init__()")
            source = "\n".join([f"def __create_fn__({', '.join(env)}):",
                                 f" def __init__({', '.join(params)}):",
                                 *(f"  {line}" for line in lines or ["pass"]),
                                 " return __init__"])
            namespace = {}
            exec(source, {}, namespace)  # our own generated text, as dataclasses does
            init = namespace["__create_fn__"](*env.values())
            init.__qualname__ = f"{self.cls.__qualname__}.__init__"
            return init

    class _HasDefaultFactory:
        def __repr__(self):
            return "<factory>"

    _HAS_DEFAULT_FACTORY = _HasDefaultFactory()

    def _interpreted_init(spec):
        def __init__(self, *args, **kwargs):
            values = spec.bind(args, kwargs)
            setter = object.__setattr__ if spec.frozen else setattr
            for name in spec.params:
                setter(self, name, values[name])
            for name, factory, default in spec.extra:
                setter(self, name, factory() if factory is not _MISSING else default)
            if spec.post_init:
                self.__post_init__()
            spec.created += 1
            if spec.created == COMPILE_AFTER:
                spec.cls.__init__ = spec.compile()

        __init__.__qualname__ = f"{spec.cls.__qualname__}.__init__"
        return __init__

    def _process(cls, init, repr, eq, frozen, unsafe_hash, kwargs):
        own = cls.__dict__
        explicit_hash = "__hash__" in own and own["__hash__"] is not None
        body_eq = "__eq__" in own
        declared = cls.__dict__.get("__annotations__", {})
        standard = kwargs.get("kw_only") or any("InitVar" in str(t) or "KW_ONLY" in str(t) for t in declared.values())
        if standard:  # left to the standard decorator (see the module docstring)
            return dataclasses.dataclass(cls, init=init, repr=repr, eq=eq, frozen=frozen, unsafe_hash=unsafe_hash,
                                         **kwargs)
        # The standard decorator inspects each string annotation (`from __future__ import annotations`)
        # for ClassVar / InitVar / KW_ONLY with a regex and module lookups, ~1/3 of its cost here. An
        # annotation that names none of them is shown to it as `object` and put back afterwards
        # (class __annotations__ and Field.type): nothing generated here reads the types.
        plain = {name: t for name, t in declared.items() if isinstance(t, str) and "ClassVar" not in t}
        if plain:
            cls.__annotations__ = {name: object if name in plain else t for name, t in declared.items()}
        try:
            cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, **kwargs)
        finally:
            if plain:
                cls.__annotations__ = declared  # the decorator may return a new class (slots=True)
        fields = dataclasses.fields(cls)
        for f in fields:
            if f.name in plain and f.type is object:
                f.type = plain[f.name]
        if any(f.kw_only for f in fields):  # inherited keyword-only fields
            raise TypeError(f"{cls.__qualname__}: keyword-only fields are not supported by records.dataclass")
        if init and "__init__" not in own:
            cls.__init__ = _interpreted_init(_InitSpec(cls, fields, frozen, bool(kwargs.get("slots"))))
        if frozen:
            cls.__setattr__ = _frozen_setattr
            cls.__delattr__ = _frozen_delattr
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

    def dataclass(cls=None, /, *, init=True, repr=True, eq=True, frozen=False, unsafe_hash=False, **kwargs):
        """``dataclasses.dataclass`` without compiling at class creation (module docstring)."""
        if cls is None:
            return lambda c: _process(c, init, repr, eq, frozen, unsafe_hash, kwargs)
        return _process(cls, init, repr, eq, frozen, unsafe_hash, kwargs)
