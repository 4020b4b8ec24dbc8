"""A read-on-demand container for the shipped data (schema classes, library module bodies).

Every run reads a few dozen of the ~350 schema classes and ~300 library modules. A gzipped JSON
document must be inflated and parsed whole (~0.1 s of a one-file run); a pack parses a small index
and inflates one entry when it is first asked for.

Layout (all deterministic, so ``dev regenerate --check`` compares bytes)::

    b"MBMPACK1\\n" + b"<header length>\\n" + header JSON + entry blobs

The header is ``{"meta": ..., "index": {name: [offset, length]}}``; offsets count from the first
blob; each blob is one entry's compact, key-sorted JSON, zlib-compressed. A pack of many small
entries may add ``"zdict": [offset, length]``: a raw blob used as zlib's preset dictionary for
every entry (small entries compressed alone lose most of what they share with each other).

A *multi-pack* holds one pack per Megatron Bridge version in one file; an entry that is the same in
several versions is stored once (its blob is shared, found by its bytes)::

    b"MBMPACK2\\n" + b"<top length>\\n" + top JSON + version headers + entry blobs

The top is ``{"packs": {version: [offset, length]}, "blobs": <offset of the first blob>}``, maybe
``"labels": {version: <small JSON>}`` (what a caller must know of each version without opening it)
and ``"zdict": [offset, length]`` (one preset dictionary for every version, so an entry that did
not change still compresses to the same bytes); version offsets count from the end of the top; a
version header is a zlib-compressed MBMPACK1 header whose entry offsets count from the first blob.
Opening one version parses the top and that version's header only.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

MAGIC = b"MBMPACK1\n"
MAGIC_MULTI = b"MBMPACK2\n"


class PackError(ValueError):
    """The bytes are not a data pack (damaged or foreign file)."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


ZDICT_SIZE = 32_768  # zlib's window: a longer preset dictionary is not used


def _compress(data: bytes, zdict: bytes | None) -> bytes:
    if zdict is None:
        return zlib.compress(data, 9)
    packer = zlib.compressobj(9, zdict=zdict)
    return packer.compress(data) + packer.flush()


def dump_pack(meta: Any, entries: Mapping[str, Any], *, dictionary_sample: list[str] | None = None) -> bytes:
    """``dictionary_sample``: names of entries whose encodings, concatenated (the last 32 KiB), are
    the preset dictionary every entry is compressed against."""
    names = sorted(entries)
    encoded = {name: _dumps(entries[name]) for name in names}
    zdict = b"".join(encoded[n] for n in dictionary_sample)[-ZDICT_SIZE:] if dictionary_sample else None
    blobs: list[bytes] = [zdict] if zdict is not None else []
    offset = len(zdict) if zdict is not None else 0
    index: dict[str, list[int]] = {}
    for name in names:
        blob = _compress(encoded[name], zdict)
        index[name] = [offset, len(blob)]
        offset += len(blob)
        blobs.append(blob)
    head: dict[str, Any] = {"meta": meta, "index": index}
    if zdict is not None:
        head["zdict"] = [0, len(zdict)]
    header = _dumps(head)
    return MAGIC + str(len(header)).encode("ascii") + b"\n" + header + b"".join(blobs)


def dump_multi_pack(packs: Mapping[str, tuple[Any, Mapping[str, Any]]], *,
                    dictionary: tuple[str, list[str]] | None = None,
                    labels: Mapping[str, Any] | None = None) -> bytes:
    """One file holding ``{version: (meta, entries)}``; identical entries are stored once.
    ``dictionary``: (version, entry names) whose encodings make the preset dictionary of every entry
    of every version, as ``dump_pack``'s ``dictionary_sample``. ``labels``: a small JSON value per
    version kept in the top header (:func:`pack_labels` reads them without opening a version)."""
    zdict: bytes | None = None
    if dictionary is not None and dictionary[1]:
        version, names = dictionary
        zdict = b"".join(_dumps(packs[version][1][n]) for n in names)[-ZDICT_SIZE:]
    blobs: list[bytes] = [zdict] if zdict is not None else []
    offset = len(zdict) if zdict is not None else 0
    where: dict[bytes, list[int]] = {}
    headers: list[tuple[str, bytes]] = []
    for version in sorted(packs):
        meta, entries = packs[version]
        index: dict[str, list[int]] = {}
        for name in sorted(entries):
            blob = _compress(_dumps(entries[name]), zdict)
            loc = where.get(blob)
            if loc is None:
                loc = where[blob] = [offset, len(blob)]
                offset += len(blob)
                blobs.append(blob)
            index[name] = loc
        headers.append((version, zlib.compress(_dumps({"meta": meta, "index": index}), 9)))
    spans: dict[str, list[int]] = {}
    at = 0
    for version, header in headers:
        spans[version] = [at, len(header)]
        at += len(header)
    top: dict[str, Any] = {"packs": spans, "blobs": at}
    if labels:
        top["labels"] = {v: labels[v] for v in sorted(labels) if v in packs}
    if zdict is not None:
        top["zdict"] = [0, len(zdict)]
    head = _dumps(top)
    return (MAGIC_MULTI + str(len(head)).encode("ascii") + b"\n" + head
            + b"".join(h for _v, h in headers) + b"".join(blobs))


def map_file(path: Path) -> Any:
    """A pack file's bytes, memory-mapped read-only (slices are ``bytes``): a run reads the header and a
    few dozen entries of a 1.4 MB pack, and only those pages are loaded. A file that cannot be mapped
    (empty, or on a file system without mmap) is read whole."""
    import mmap

    with open(path, "rb") as fh:
        try:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return fh.read()


def _top(data: bytes, magic: bytes) -> tuple[Any, int]:
    """The first header of a pack file and the offset just after it."""
    nl = data.find(b"\n", len(magic))
    try:
        size = int(data[len(magic):nl])
        return json.loads(data[nl + 1:nl + 1 + size]), nl + 1 + size
    except ValueError as exc:
        raise PackError(f"damaged data pack header: {exc!r}") from exc


def pack_versions(data: bytes) -> list[str]:
    """The versions a multi-pack holds (``[]`` for a single pack)."""
    if data[:len(MAGIC_MULTI)] != MAGIC_MULTI:
        if data[:len(MAGIC)] == MAGIC:
            return []
        raise PackError("not an mbmem-lint data pack")
    top, _end = _top(data, MAGIC_MULTI)
    try:
        return sorted(top["packs"])
    except (KeyError, TypeError) as exc:
        raise PackError(f"damaged data pack header: {exc!r}") from exc


def pack_labels(data: bytes) -> dict[str, Any]:
    """Version → its label in a multi-pack (every version listed; ``None`` where it has no label)."""
    if data[:len(MAGIC_MULTI)] != MAGIC_MULTI:
        raise PackError("not an mbmem-lint multi-version data pack")
    top, _end = _top(data, MAGIC_MULTI)
    try:
        labels = top.get("labels") or {}
        return {v: labels.get(v) for v in top["packs"]}
    except (AttributeError, KeyError, TypeError) as exc:
        raise PackError(f"damaged data pack header: {exc!r}") from exc


def open_pack(data: bytes, version: str | None = None) -> Pack:
    """The pack of ``version`` in a multi-pack, or a single pack (``version`` is then not checked).
    ``KeyError`` when the multi-pack has no such version."""
    if data[:len(MAGIC_MULTI)] != MAGIC_MULTI:
        return Pack(data)
    top, end = _top(data, MAGIC_MULTI)
    try:
        spans = top["packs"]
        if version is None:
            raise PackError("a multi-version data pack needs a version")
        offset, length = spans[version]
        header = json.loads(zlib.decompress(data[end + offset:end + offset + length]))
        base = end + int(top["blobs"])
        zdict_at = top.get("zdict")
        zdict = data[base + zdict_at[0]:base + zdict_at[0] + zdict_at[1]] if zdict_at else None
    except (ValueError, TypeError, zlib.error) as exc:
        raise PackError(f"damaged data pack header: {exc!r}") from exc
    return Pack.from_header(data, header, base, zdict)


class Pack(Mapping[str, Any]):
    """Entries by name, each decoded on first access and kept."""

    def __init__(self, data: bytes) -> None:
        if data[:len(MAGIC)] != MAGIC:
            raise PackError("not an mbmem-lint data pack")
        header, base = _top(data, MAGIC)
        self._init(data, header, base)

    @classmethod
    def from_header(cls, data: bytes, header: Any, base: int, zdict: bytes | None = None) -> Pack:
        """One version of a multi-pack: its header, where its blobs start, the file's dictionary."""
        pack = cls.__new__(cls)
        pack._init(data, header, base, zdict)
        return pack

    def _init(self, data: bytes, header: Any, base: int, zdict: bytes | None = None) -> None:
        try:
            self.meta: Any = header["meta"]
            self._index: dict[str, list[int]] = dict(header["index"])
            zdict_at = header.get("zdict")
        except (KeyError, TypeError, ValueError) as exc:
            raise PackError(f"damaged data pack header: {exc!r}") from exc
        self._data = data
        self._base = base
        if zdict_at:
            zdict = data[base + zdict_at[0]:base + zdict_at[0] + zdict_at[1]]
        self._zdict = zdict
        self._decoded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        hit = self._decoded.get(name, self)
        if hit is not self:
            return hit
        offset, length = self._index[name]
        start = self._base + offset
        blob = self._data[start:start + length]
        if self._zdict is None:
            value = json.loads(zlib.decompress(blob))
        else:
            value = json.loads(zlib.decompressobj(zdict=self._zdict).decompress(blob))
        self._decoded[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def to_dict(self) -> dict[str, Any]:
        """Every entry decoded (tests and comparisons)."""
        return {name: self[name] for name in self._index}
