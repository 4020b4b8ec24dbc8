"""The read-on-demand data pack: round trip, laziness, damage, and the shipped packs' derived header."""

from __future__ import annotations

from typing import Any

import pytest

from mbmem_lint.data_pack import (
    MAGIC,
    MAGIC_MULTI,
    Pack,
    PackError,
    dump_multi_pack,
    dump_pack,
    open_pack,
    pack_versions,
)


def test_round_trip_and_entries_decoded_on_demand() -> None:
    entries = {"b": {"x": [1, 2, {"y": None}]}, "a": "text with \"quotes\" and é", "c": 3.5}
    data = dump_pack({"version": "1"}, entries)
    pack = Pack(data)
    assert pack.meta == {"version": "1"}
    assert sorted(pack) == ["a", "b", "c"] and len(pack) == 3 and "b" in pack and "z" not in pack
    assert pack._decoded == {}  # nothing decoded by opening it
    assert pack["b"] == entries["b"]
    assert list(pack._decoded) == ["b"]
    assert pack.to_dict() == entries
    assert pack["a"] is pack["a"]  # decoded once, kept
    with pytest.raises(KeyError):
        pack["z"]


def test_bytes_are_deterministic() -> None:
    a = dump_pack({"m": 1}, {"x": {"k2": 1, "k1": 2}, "y": [3]})
    b = dump_pack({"m": 1}, {"y": [3], "x": {"k1": 2, "k2": 1}})
    assert a == b  # sorted names and keys, fixed compression level


def test_shared_dictionary_round_trip_and_smaller_for_alike_entries() -> None:
    entries = {f"e{i}": [["assign", f"cfg.model.field_{j}", ["const", i * j], [i, j]] for j in range(6)]
               for i in range(40)}
    alone = dump_pack({}, entries)
    shared = dump_pack({}, entries, dictionary_sample=sorted(entries)[::7])
    assert Pack(shared).to_dict() == Pack(alone).to_dict() == entries
    assert len(shared) < len(alone)
    assert dump_pack({}, entries, dictionary_sample=sorted(entries)[::7]) == shared  # deterministic


def test_library_functions_are_decoded_on_their_first_call() -> None:
    """The shipped summary keeps each top-level function body in its own entry: running a module
    decodes its body only; calling a function decodes that function's body."""
    from mbmem_lint.resolve.library import FUNCTION_BODY_MARK, LibrarySummary, split_function_bodies

    body: list[list[Any]] = [["import", [["os", None]], [1, 1]],
            ["def", "f", [], [["return", ["const", 1], [3, 5]]], [2, 1], None, []],
            ["def", "g", [], [["return", ["const", 2], [5, 5]]], [4, 1], None, []]]
    entries: dict[str, list[object]] = {"@0": []}
    out = split_function_bodies(body, entries)
    assert out[0] == body[0] and [s[3] for s in out[1:]] == ["@1", "@2"]
    assert entries["@1"] == body[1][3] and entries["@2"] == body[2][3]
    assert [s[:3] + s[4:] for s in out[1:]] == [s[:3] + s[4:] for s in body[1:]]
    summary = LibrarySummary.load()
    module = "megatron.bridge.recipes.llama.h100.llama3"  # 2980 lines of recipe functions
    defs = [s for s in summary.module_body(module) or [] if s[0] == "def"]
    assert defs and all(isinstance(s[3], str) and s[3].startswith(FUNCTION_BODY_MARK) for s in defs)
    assert isinstance(summary.function_body(defs[0][3]), list)


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04 not a pack", MAGIC + b"12\n{not json}", MAGIC + b"x\n{}",
                                  MAGIC + b"2\n{}", MAGIC + b"9\n[1, 2, 3]"])
def test_damaged_pack_is_rejected(data: bytes) -> None:
    with pytest.raises(PackError):
        Pack(data)


def test_multi_pack_shares_identical_entries_and_opens_one_version() -> None:
    big = {"fields": [f"field_{i}" for i in range(400)]}  # compresses to a few hundred bytes
    packs: dict[str, tuple[Any, dict[str, Any]]] = {
        "0.5.1": ({"v": "0.5.1"}, {"shared": big, "only_old": [1], "changed": {"x": 1}}),
        "0.6.2": ({"v": "0.6.2"}, {"shared": big, "changed": {"x": 2}, "new": "n"}),
    }
    data = dump_multi_pack(packs)
    assert data.startswith(MAGIC_MULTI) and pack_versions(data) == ["0.5.1", "0.6.2"]
    old, new = open_pack(data, "0.5.1"), open_pack(data, "0.6.2")
    assert old.meta == {"v": "0.5.1"} and new.meta == {"v": "0.6.2"}
    assert old.to_dict() == packs["0.5.1"][1] and new.to_dict() == packs["0.6.2"][1]
    assert old._index["shared"] == new._index["shared"]  # one blob for both versions
    assert old._index["changed"] != new._index["changed"]
    alone = dump_multi_pack({"0.6.2": packs["0.6.2"]})
    assert len(data) - len(alone) < len(dump_pack({}, {"shared": big})) - 50  # the shared blob is not stored twice
    assert dump_multi_pack(dict(reversed(list(packs.items())))) == data  # deterministic
    with pytest.raises(KeyError):
        open_pack(data, "0.4.2")
    with pytest.raises(PackError):
        open_pack(data)  # a multi-pack needs a version
    single = dump_pack({"m": 1}, {"a": 1})
    assert pack_versions(single) == [] and open_pack(single, "whatever")["a"] == 1


@pytest.mark.parametrize("data", [MAGIC_MULTI + b"5\n{nope", MAGIC_MULTI + b"30\n" + b'{"packs":{"1":[0,4]},"blobs":4}xxxx',
                                  MAGIC_MULTI + b"12\n[1, 2, 3, 4]"])
def test_damaged_multi_pack_is_rejected(data: bytes) -> None:
    with pytest.raises(PackError):
        open_pack(data, "1")


def test_shipped_schema_header_matches_a_fresh_computation() -> None:
    from mbmem_lint.resolve.schema import Schema

    shipped = Schema.load()
    names = shipped.model_field_names()
    assert {"tensor_model_parallel_size", "num_layers", "hidden_size"} <= names
    assert "micro_batch_size" not in names  # a TrainingConfig field, not a provider's
    # Without the shipped header the names are computed from the classes: the same set.
    classes = {q: _spec(shipped, q) for q in shipped.classes}
    assert Schema({"generator": shipped.generator, "classes": classes}).model_field_names() == names


def _spec(schema: object, qual: str) -> dict[str, object]:
    from mbmem_lint.resolve.schema import Schema

    assert isinstance(schema, Schema)
    cls = schema.classes[qual]
    return {"bases": cls.bases, "fields": {n: {"type": f.type, "default": f.default} for n, f in cls.fields.items()}}
