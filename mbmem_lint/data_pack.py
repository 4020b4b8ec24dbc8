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
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

MAGIC = b"MBMPACK1\n"


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


class Pack(Mapping[str, Any]):
    """Entries by name, each decoded on first access and kept."""

    def __init__(self, data: bytes) -> None:
        if not data.startswith(MAGIC):
            raise PackError("not an mbmem-lint data pack")
        nl = data.find(b"\n", len(MAGIC))
        try:
            size = int(data[len(MAGIC):nl])
            header = json.loads(data[nl + 1:nl + 1 + size])
            self.meta: Any = header["meta"]
            self._index: dict[str, list[int]] = dict(header["index"])
            zdict_at = header.get("zdict")
        except (ValueError, KeyError, TypeError) as exc:
            raise PackError(f"damaged data pack header: {exc!r}") from exc
        self._data = data
        self._base = nl + 1 + size
        self._zdict = data[self._base + zdict_at[0]:self._base + zdict_at[0] + zdict_at[1]] if zdict_at else None
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
