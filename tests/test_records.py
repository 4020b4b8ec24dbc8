"""``mbmem_lint.records.dataclass`` behaves as ``dataclasses.dataclass`` for what the tool uses:
the same ``repr``, equality, hashing and frozen guards, field options honoured, a class body's own
methods kept. Each case builds the same class with both decorators and compares them."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar  # noqa: F401 - the test classes' 'ClassVar[...]' resolves here

import pytest

from mbmem_lint import records


def _both(body: dict[str, Any], annotations: dict[str, str], **options: Any) -> tuple[type, type]:
    def make(decorator: Any) -> type:
        ns = {"__annotations__": dict(annotations), "__module__": __name__, "__doc__": "A test class.",
              **{k: (v() if callable(v) and getattr(v, "_fresh", False) else v) for k, v in body.items()}}
        return decorator(type("Point", (), ns), **options) if options else decorator(type("Point", (), ns))
    return make(dataclasses.dataclass), make(records.dataclass)


def _fresh_field(**kwargs: Any) -> Any:
    def build() -> Any:
        return dataclasses.field(**kwargs)
    build._fresh = True  # type: ignore[attr-defined]
    return build


ANN = {"x": "int", "y": "int", "tag": "str"}


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"slots": True}, {"eq": False}, {"repr": False}])
def test_same_repr_eq_and_hashability_as_the_standard_decorator(options: dict[str, Any]) -> None:
    std, ours = _both({"tag": "a"}, ANN, **options)
    a, b, c = (ours(1, 2), ours(1, 2), ours(1, 3))
    sa, sb, sc = (std(1, 2), std(1, 2), std(1, 3))
    if options.get("repr", True):
        assert repr(a) == repr(sa) == "Point(x=1, y=2, tag='a')"
    assert (a == b, a == c, a != b) == (sa == sb, sa == sc, sa != sb)
    assert (ours.__hash__ is None) == (std.__hash__ is None)
    if ours.__hash__ is not None and options.get("eq", True):
        assert hash(a) == hash(sa) == hash(b) and {a, b} == {a}
    assert (a == (1, 2, "a")) is False  # other types are never equal
    assert [f.name for f in dataclasses.fields(ours)] == ["x", "y", "tag"]


def test_frozen_instances_reject_assignment_and_deletion() -> None:
    _, ours = _both({"tag": "a"}, ANN, frozen=True)
    p = ours(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    assert dataclasses.replace(p, x=5) == ours(5, 2)


def test_field_options_repr_compare_hash() -> None:
    body = {"tag": _fresh_field(default="a", repr=False, compare=False),
            "y": _fresh_field(default=0, hash=False)}
    std, ours = _both(body, ANN, frozen=True)
    assert repr(ours(1, 2, "b")) == repr(std(1, 2, "b")) == "Point(x=1, y=2)"
    assert ours(1, 2, "b") == ours(1, 2, "c")  # tag is not compared
    assert hash(ours(1, 2)) == hash(std(1, 2)) == hash(ours(1, 3))  # y is not hashed
    assert ours(1, 2) != ours(1, 3)


def test_default_factory_and_subclass_equality() -> None:
    body = {"tag": _fresh_field(default_factory=list)}
    _, ours = _both(body, {"x": "int", "tag": "list[int]"})
    a, b = ours(1), ours(1)
    assert a.tag == [] and a.tag is not b.tag and a == b

    class Sub(ours):  # type: ignore[valid-type, misc]
        pass

    assert Sub(1) != ours(1) and ours(1) != Sub(1)  # equal only within one class, as the standard one


def test_the_class_body_methods_win() -> None:
    def __eq__(self: Any, other: Any) -> bool:
        return True

    def __repr__(self: Any) -> str:
        return "mine"

    def __hash__(self: Any) -> int:
        return 7

    std, ours = _both({"__eq__": __eq__, "__repr__": __repr__, "__hash__": __hash__}, ANN, frozen=True)
    for cls in (std, ours):
        p = cls(1, 2, "t")
        assert (repr(p), p == 3, hash(p)) == ("mine", True, 7)


def test_recursive_repr_is_cut_like_the_standard_one() -> None:
    std, ours = _both({}, {"child": "object"})
    s, o = std(None), ours(None)
    s.child, o.child = s, o
    assert repr(o) == repr(s) == "Point(child=...)"


def _rich_classes() -> tuple[type, type]:
    """The same class under both decorators: a default, a default factory, an ``init=False`` field
    with a factory, and ``__post_init__``."""

    def post(self: Any) -> None:
        self.total = self.x + len(self.items)

    body = {"y": 5, "items": _fresh_field(default_factory=list),
            "log": _fresh_field(default_factory=lambda: ["made"], init=False),
            "total": _fresh_field(default=0, init=False), "__post_init__": post}
    return _both(body, {"x": "int", "y": "int", "items": "list[int]", "log": "list[str]", "total": "int"})


def _state(obj: Any) -> tuple[Any, ...]:
    return (obj.x, obj.y, obj.items, obj.log, obj.total)


def test_init_before_and_after_it_is_compiled_matches_the_standard_one() -> None:
    std, ours = _rich_classes()
    init_of: Any = vars(ours)["__init__"]
    assert init_of.__qualname__ == "Point.__init__"
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}), ((1, 2), {}), ((1,), {"items": [7, 8]}), ((), {"x": 3, "y": 4, "items": [1]})]
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1, 2, [], 9), {}), ((), {"y": 1}), ((1,), {"x": 2}), ((1,), {"nope": 0})]
    for round_ in range(records.COMPILE_AFTER // len(calls) + 2):
        for args, kwargs in calls:
            a, b = std(*args, **kwargs), ours(*args, **kwargs)
            assert _state(a) == _state(b), (round_, args, kwargs)
        for args, kwargs in bad:
            with pytest.raises(TypeError):
                std(*args, **kwargs)
            with pytest.raises(TypeError):
                ours(*args, **kwargs)
    compiled: Any = vars(ours)["__init__"]
    assert compiled is not init_of  # compiled once COMPILE_AFTER instances were made
    assert compiled.__qualname__ == "Point.__init__"
    first, second = ours(1), ours(1)
    assert first.items is not second.items and first.log is not second.log  # fresh factory values


@pytest.mark.parametrize("count", [1, records.COMPILE_AFTER + 1])
def test_frozen_and_slots_instances_before_and_after_compiling(count: int) -> None:
    _, frozen = _both({"tag": "a"}, ANN, frozen=True)
    _, slotted = _both({"tag": "a"}, ANN, slots=True)
    for _ in range(count):
        p, s = frozen(1, 2), slotted(1, 2)
    assert (p.x, p.y, p.tag) == (s.x, s.y, s.tag) == (1, 2, "a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tag = "b"
    assert not hasattr(s, "__dict__")
    s.tag = "b"
    assert s == slotted(1, 2, "b")


def test_initvar_classes_are_left_to_the_standard_decorator() -> None:
    @records.dataclass
    class WithInitVar:
        """A class with an InitVar."""

        x: int
        scale: dataclasses.InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            self.x *= scale

    assert WithInitVar(2, 3).x == 6 and WithInitVar(2).x == 2


def test_field_types_and_annotations_are_the_declared_ones() -> None:
    std, ours = _both({"limit": 3}, {"x": "int", "tags": "list[str] | None", "limit": "ClassVar[int]"})
    assert [(f.name, f.type) for f in dataclasses.fields(ours)] == [(f.name, f.type) for f in dataclasses.fields(std)]
    assert [f.type for f in dataclasses.fields(ours)] == ["int", "list[str] | None"]  # ClassVar is no field
    assert ours.__annotations__ == std.__annotations__ == {"x": "int", "tags": "list[str] | None",
                                                           "limit": "ClassVar[int]"}
    assert ours(1, None).limit == 3
