"""Which Megatron Bridge a run lints against: shipped data of a release, or a source tree built on the fly.

The shipped data (``schema.pack``, ``library.pack``) holds one schema + library summary per release
line, the latest patch of each minor from 0.4 on, each generated from that wheel and the
megatron-core release it was built against (``SHIPPED``; how each pairing was decided:
docs/versions.md). The version of a run is, first that applies:

1. ``--megatron-bridge-src PATH`` / ``--megatron-bridge-version X`` on the command line (a source
   tree wins over a version given at the same level);
2. ``megatron-bridge-src`` / ``megatron-bridge-version`` in ``[tool.mbmem-lint]``;
3. the ``megatron-bridge`` distribution installed in the environment running mbmem-lint (its
   metadata is read from ``sys.path``; nothing is imported);
4. the newest shipped release.

A version without shipped data gets the nearest older shipped release (the oldest one when it is
older than all of them) and a notice saying so. The choice is process-wide state (:func:`activate`):
``Schema.load()`` and ``LibrarySummary.load()`` serve the active data, and forked workers inherit it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mbmem_lint.data import data_file

# Release → the megatron-core release its data was generated with (docs/versions.md says why).
SHIPPED: dict[str, str] = {"0.4.2": "0.17.1", "0.5.1": "0.18.2", "0.6.2": "0.19.2"}
SCHEMA_FILE = "schema.pack"
LIBRARY_FILE = "library.pack"

_VERSION_RE_TEXT = (
    r"^\s*v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)[-_.]?(\d*))?"
    r"(?:[-_.]?(post|rev|r)[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+[a-z0-9.]+)?\s*$")
_VERSION_RE: list[re.Pattern[str]] = []  # compiled on the first version that is not plain numbers


class VersionError(ValueError):
    """A malformed version or an unusable source tree (a usage error: exit code 2)."""


@functools.lru_cache(maxsize=256)
def parse_version(text: str) -> tuple[Any, ...]:
    """A sort key for a PEP 440 version: release numbers, then pre-releases and dev builds before the
    release and post-releases after it (``0.7.0.dev0 < 0.7.0rc1 < 0.7.0 < 0.7.0.post1``). Local labels
    (``+nv25.09``) compare equal to their release. ``VersionError`` when it is not a version."""
    parts = text.split(".")
    if all(p.isdigit() and p.isascii() for p in parts):  # the common case: 0.6.2
        plain = tuple(int(p) for p in parts)
        return (plain + (0,) * (3 - len(plain)), (0, 0, 0), 0, 0, 0)
    if not _VERSION_RE:
        _VERSION_RE.append(re.compile(_VERSION_RE_TEXT, re.I))
    m = _VERSION_RE[0].match(text)
    if m is None:
        raise VersionError(f"{text!r} is not a version (expected e.g. 0.6.2)")
    release = tuple(int(x) for x in m.group(1).split("."))
    release = release + (0,) * (3 - len(release)) if len(release) < 3 else release
    pre, post, dev = m.group(2), m.group(4), m.group(6)
    if pre is not None and pre.lower() == "dev":  # 0.7.0dev1 written without a dot
        pre, dev = None, m.group(3) or "0"
    if pre is not None:
        phase = (-2, {"a": 0, "alpha": 0, "b": 1, "beta": 1}.get(pre.lower(), 2), int(m.group(3) or 0))
    elif dev is not None and post is None:
        phase = (-3, 0, 0)
    else:
        phase = (0, 0, 0)
    post_n = int(m.group(5) or 0) + 1 if post is not None else 0
    return (release, phase, post_n, -1 if dev is not None else 0, int(dev or 0))


class BridgeData:
    """The Megatron Bridge data a run uses and why (a value: never changed once made).

    ``version``: release of the shipped data, or the source tree's own version; ``requested``: the
    version asked for or found installed, when it differs from ``version``; ``source``: ``option``,
    ``settings``, ``installed``, ``default`` (newest shipped), ``python`` (``verify``: the
    megatron-bridge of its ``--python``) or, for a source tree, ``option-src`` / ``settings-src``;
    ``folder``: where data built from a source tree lies (None: shipped data); ``key``: what
    identifies the data in cache keys (the release, or the tree's content hash).

    A hand-written slotted class, not a dataclass: it is defined on every run's start-up path, where
    generating a dataclass's methods cost ~4.5 M instructions (callgrind, one-file check), as much as
    the rest of the version selection."""

    __slots__ = ("version", "megatron_core", "source", "requested", "src", "folder", "key")

    def __init__(self, version: str, megatron_core: str, source: str, requested: str | None = None,
                 src: str | None = None, folder: str | None = None, key: str = "") -> None:
        self.version = version
        self.megatron_core = megatron_core
        self.source = source
        self.requested = requested
        self.src = src
        self.folder = folder
        self.key = key

    def _fields(self) -> tuple[Any, ...]:
        return (self.version, self.megatron_core, self.source, self.requested, self.src, self.folder, self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BridgeData) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "BridgeData(" + ", ".join(f"{n}={v!r}" for n, v in zip(self.__slots__, self._fields())) + ")"

    @property
    def shipped(self) -> bool:
        return self.folder is None

    def schema_path(self) -> Path:
        return Path(self.folder) / SCHEMA_FILE if self.folder else data_file(SCHEMA_FILE)

    def library_path(self) -> Path:
        return Path(self.folder) / LIBRARY_FILE if self.folder else data_file(LIBRARY_FILE)

    def pack_version(self) -> str | None:
        """The version's name inside the shipped multi-version packs (None for a source-tree build)."""
        return self.version if self.folder is None else None

    @property
    def cache_key(self) -> str:
        return self.key or f"shipped:{self.version}"

    def version_tuple(self) -> tuple[int, ...]:
        """Release numbers, for version-aware rules (``(0, 6, 2)``)."""
        try:
            return tuple(parse_version(self.version)[0])
        except VersionError:
            return (0,)

    def at_least(self, version: str) -> bool:
        """The data's Megatron Bridge is ``version`` or newer (a source tree's pre-release of X counts as X)."""
        return self.version_tuple() >= tuple(parse_version(version)[0])

    def notice(self) -> str | None:
        """What the user must know about the choice (no shipped data for the version asked for)."""
        if self.requested is None or self.requested == self.version:
            return None
        where = {"option": "--megatron-bridge-version", "settings": "[tool.mbmem-lint] megatron-bridge-version",
                 "installed": "the installed megatron-bridge distribution",
                 "python": "the megatron-bridge of --python"}.get(self.source, self.source)
        older = parse_version(self.requested) > parse_version(self.version)
        return (f"no shipped data for megatron-bridge {self.requested} (from {where}); linting against "
                f"{self.version}, the {'nearest older' if older else 'oldest'} release with data "
                f"(shipped: {', '.join(shipped_versions())}); --megatron-bridge-src PATH lints against a source tree")

    def describe(self) -> str:
        """One line for the text summary: ``megatron-bridge 0.6.2 (megatron-core 0.19.2, newest shipped)``."""
        why = {"option": "--megatron-bridge-version", "settings": "pyproject.toml", "installed": "installed",
               "python": "installed for --python", "default": "newest shipped", "option-src": f"source tree {self.src}",
               "settings-src": f"source tree {self.src}"}.get(self.source, self.source)
        asked = f", asked for {self.requested}" if self.requested and self.requested != self.version else ""
        return f"megatron-bridge {self.version} (megatron-core {self.megatron_core}, {why}{asked})"

    def to_json(self) -> dict[str, Any]:
        """The ``megatron_bridge`` object of JSON and SARIF outputs."""
        out: dict[str, Any] = {"version": self.version, "megatron_core": self.megatron_core,
                               "source": self.source, "data": "shipped" if self.shipped else "source-tree"}
        if self.requested is not None and self.requested != self.version:
            out["requested"] = self.requested
        if self.src is not None:
            out["src"] = self.src
            out["key"] = self.key
        notice = self.notice()
        if notice:
            out["notice"] = notice
        return out


_SHIPPED_CACHE: list[tuple[str, dict[str, Any]]] = []


def _shipped_meta() -> dict[str, dict[str, Any]]:
    """Shipped version → its schema generator versions (read once from the pack headers)."""
    if not _SHIPPED_CACHE:
        from mbmem_lint.data_pack import PackError, pack_labels

        path = data_file(SCHEMA_FILE)
        if not path.is_file():
            return {}
        with open(path, "rb") as fh:  # the top header is in the first few hundred bytes
            head = fh.read(4096)
        try:
            labels = pack_labels(head)
        except PackError:  # a longer top header (or a damaged file: then the whole file says so)
            labels = pack_labels(path.read_bytes())
        for v, label in labels.items():
            _SHIPPED_CACHE.append((v, dict(label or {})))
    return dict(_SHIPPED_CACHE)


def shipped_versions() -> list[str]:
    """The releases with shipped data, oldest first."""
    return sorted(_shipped_meta(), key=parse_version)


def shipped(version: str, source: str, requested: str | None = None) -> BridgeData:
    meta = _shipped_meta().get(version, {})
    return BridgeData(version=version, megatron_core=str(meta.get("megatron_core", SHIPPED.get(version, "?"))),
                      source=source, requested=requested, key=f"shipped:{version}")


def nearest_shipped(version: str) -> str:
    """The shipped release for ``version``: itself, else the newest older one, else the oldest."""
    have = shipped_versions()
    if not have:
        raise VersionError("no shipped Megatron Bridge data: run `mbmem-lint dev regenerate`")
    want = parse_version(version)
    exact = [v for v in have if parse_version(v) == want]
    if exact:
        return exact[0]
    older = [v for v in have if parse_version(v) < want]
    return older[-1] if older else have[0]


def for_version(version: str, source: str) -> BridgeData:
    """The data for a requested version (``source`` says who asked)."""
    chosen = nearest_shipped(version)
    return shipped(chosen, source, requested=version)


def installed_version(search_path: Sequence[str] | None = None) -> str | None:
    """The version of the ``megatron-bridge`` distribution installed on ``search_path`` (default
    ``sys.path``), read from its ``*.dist-info/METADATA`` (or ``*.egg-info/PKG-INFO``) the way
    ``importlib.metadata`` finds it: the first path entry that has one wins. Nothing is imported."""
    for entry in sys.path if search_path is None else search_path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except OSError:  # a zip file, a missing folder
            continue
        for name in sorted(names):
            low = name.lower()
            if not low.startswith(("megatron_bridge-", "megatron-bridge-", "megatron.bridge-")):
                continue
            meta = "METADATA" if low.endswith(".dist-info") else "PKG-INFO" if low.endswith(".egg-info") else None
            if meta is None:
                continue
            version = _metadata_version(os.path.join(folder, name, meta))
            if version is None:  # the folder name carries the version too: megatron_bridge-0.6.2.dist-info
                version = name.rsplit(".", 1)[0].split("-", 1)[1] if "-" in name else None
            if version:
                return version
    return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break  # end of the headers
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def select(option_version: str | None = None, option_src: str | None = None,
           settings_version: str | None = None, settings_src: str | None = None,
           settings_root: Path | None = None, cache_folder: Path | None = None,
           search_path: Sequence[str] | None = None, option_source: str = "option") -> BridgeData:
    """The data for a run, in the order of the module docstring. ``VersionError`` for a malformed
    version or a source tree that cannot be used. ``option_source``: who chose ``option_version``
    (``python``: ``verify`` asked the megatron-bridge of its ``--python``)."""
    if option_src:
        return _from_src(Path(option_src), "option-src", cache_folder)
    if option_version:
        return for_version(_checked(option_version, "--megatron-bridge-version"), option_source)
    if settings_src:
        src = Path(settings_src)
        if not src.is_absolute() and settings_root is not None:
            src = settings_root / src
        return _from_src(src, "settings-src", cache_folder)
    if settings_version:
        return for_version(_checked(settings_version, "[tool.mbmem-lint] megatron-bridge-version"), "settings")
    found = installed_version(search_path)
    if found is not None:
        try:
            parse_version(found)
        except VersionError:
            found = None
    if found is not None:
        return for_version(found, "installed")
    have = shipped_versions()
    if not have:
        raise VersionError("no shipped Megatron Bridge data: run `mbmem-lint dev regenerate`")
    return shipped(have[-1], "default")


def _checked(version: str, where: str) -> str:
    try:
        parse_version(version)
    except VersionError as exc:
        raise VersionError(f"{where}: {exc}") from None
    return version.strip()


def _from_src(src: Path, source: str, cache_folder: Path | None) -> BridgeData:
    from mbmem_lint.resolve.bridge_src import build_from_source

    return build_from_source(src, source, cache_folder)


_ACTIVE: list[BridgeData] = []


def activate(data: BridgeData) -> None:
    """Make ``data`` the data every later ``Schema.load()`` / ``LibrarySummary.load()`` serves."""
    _ACTIVE[:] = [data]


def active() -> BridgeData:
    """The active data (the newest shipped release until something else is activated)."""
    if not _ACTIVE:
        have = shipped_versions()
        _ACTIVE.append(shipped(have[-1], "default") if have else
                       BridgeData(version="unknown", megatron_core="unknown", source="default"))
    return _ACTIVE[0]


@contextmanager
def using(data: BridgeData) -> Iterator[BridgeData]:
    """Activate ``data`` for a block (tests, ``verify``), then restore what was active."""
    before = list(_ACTIVE)
    activate(data)
    try:
        yield data
    finally:
        _ACTIVE[:] = before
