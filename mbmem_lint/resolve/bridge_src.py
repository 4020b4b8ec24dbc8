"""Schema and library summary built on the fly from a Megatron Bridge source tree (a fork, a main checkout).

``--megatron-bridge-src PATH`` (or ``megatron-bridge-src`` in ``[tool.mbmem-lint]``) names a folder
holding ``megatron/bridge`` (unpacked wheel, site-packages) or ``src/megatron/bridge`` (a
Megatron-Bridge checkout). Megatron Core is taken from the first of: the same folder
(``megatron/core``), the checkout's ``3rdparty/Megatron-LM`` submodule, a ``megatron/core`` on
``sys.path``. The sources are read with :mod:`ast` by the same generators as the shipped data
(nothing is imported or executed) into ``<cache>/<key>/{schema,library}.pack``, where ``key`` hashes
the content of every ``.py`` file of those trees and the engine's fingerprint: an edit to the tree
builds new data, an unchanged tree reuses it. Hashing is skipped when no file's size or
modification time changed since the last run (a small index from those to the content key).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from mbmem_lint.resolve.versions import LIBRARY_FILE, SCHEMA_FILE, BridgeData, VersionError

BUILD_FORMAT = 1


def bridge_root(src: Path) -> Path:
    """The folder holding ``megatron/bridge`` for a source tree ``src``."""
    for root in (src, src / "src"):
        if (root / "megatron" / "bridge" / "__init__.py").is_file():
            return root
    if src.name == "bridge" and src.parent.name == "megatron" and (src / "__init__.py").is_file():
        return src.parent.parent
    raise VersionError(f"--megatron-bridge-src {src}: no megatron/bridge package there (expected "
                       "PATH/megatron/bridge or a Megatron-Bridge checkout with src/megatron/bridge)")


def core_root(src: Path, bridge: Path) -> Path:
    """The folder holding the ``megatron/core`` that goes with the Bridge tree at ``src``."""
    candidates = [bridge, src, src / "3rdparty" / "Megatron-LM"]
    candidates += [Path(p or ".") for p in sys.path]
    for root in candidates:
        if (root / "megatron" / "core" / "__init__.py").is_file():
            return root
    raise VersionError(f"--megatron-bridge-src {src}: no Megatron Core sources found (looked for megatron/core "
                       "beside megatron/bridge, in 3rdparty/Megatron-LM and on sys.path)")


def _tree_files(roots: list[tuple[Path, str]]) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for root, pkg in roots:
        base = root / "megatron" / pkg
        for folder, subdirs, names in os.walk(base):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    path = Path(folder) / name
                    files.append((f"{pkg}/{path.relative_to(base).as_posix()}", path))
    return files


def _stat_line(path: Path) -> bytes:
    st = path.stat()
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()


def _digest(files: list[tuple[str, Path]], read: Callable[[Path], bytes]) -> str:
    """40 hex digits over the engine, then each file's relative name and ``read(path)`` (unreadable: skipped)."""
    from mbmem_lint.fingerprint import engine_fingerprint

    h = hashlib.sha256(f"{BUILD_FORMAT}\0{engine_fingerprint()}\0".encode())
    for rel, path in files:
        try:
            data = read(path)
        except OSError:
            continue
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:40]


def content_key(roots: list[tuple[Path, str]], index_folder: Path | None = None) -> str:
    """A hash of every ``.py`` file (relative name and bytes) of the packages ``roots`` names, plus
    the engine's fingerprint. With ``index_folder``, a tree whose files' sizes and modification times
    are unchanged is not read again."""
    files = _tree_files(roots)
    index = None
    if index_folder is not None:
        index = index_folder / "stat-index" / _digest(files, _stat_line)
        with contextlib.suppress(OSError, UnicodeDecodeError):
            known = index.read_text(encoding="utf-8").strip()
            if len(known) == 40:
                return known
    key = _digest(files, Path.read_bytes)
    if index is not None:
        from mbmem_lint.settings import write_cache_file

        with contextlib.suppress(OSError):
            write_cache_file(index, key + "\n")
    return key


def build_from_source(src: Path, source: str = "option-src", cache_folder: Path | None = None) -> BridgeData:
    """The data of the source tree ``src``, built (or found built) under ``cache_folder`` (default: a
    folder in the system's temporary directory)."""
    from mbmem_lint.resolve.schema_gen import package_version

    src = Path(os.path.abspath(src))
    if not src.is_dir():
        raise VersionError(f"--megatron-bridge-src {src}: no such folder")
    bridge = bridge_root(src)
    core = core_root(src, bridge)
    roots = [(bridge, "bridge"), (core, "core")]
    if (core / "megatron" / "training").is_dir():
        roots.append((core, "training"))
    cache = cache_folder or Path(tempfile.gettempdir()) / "mbmem-lint-bridge-src"
    key = content_key(roots, cache)
    folder = cache / key
    if not ((folder / SCHEMA_FILE).is_file() and (folder / LIBRARY_FILE).is_file()):
        folder = _build(bridge, core, folder)
    return BridgeData(version=package_version(bridge, "bridge"), megatron_core=package_version(core, "core"),
                      source=source, src=str(src), folder=str(folder), key=f"src:{key}")


def _build(bridge: Path, core: Path, folder: Path) -> Path:
    """Generate the packs into ``folder`` (atomically: a half-written folder is never used). Falls back
    to a fresh temporary folder when the cache cannot be written."""
    from mbmem_lint.resolve.library import dump_library, generate_library
    from mbmem_lint.resolve.schema import schema_pack
    from mbmem_lint.resolve.schema_gen import generate_compact_schema

    schema = schema_pack(generate_compact_schema([bridge, core]))
    library = dump_library(generate_library(bridge))
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError:
        tmp = Path(tempfile.mkdtemp(prefix="mbmem-lint-bridge-src-"))
        folder = tmp
    (tmp / SCHEMA_FILE).write_bytes(schema)
    (tmp / LIBRARY_FILE).write_bytes(library)
    if tmp != folder:
        try:
            os.replace(tmp, folder)
        except OSError:  # another run built it first (the folder exists and is not empty)
            if (folder / SCHEMA_FILE).is_file() and (folder / LIBRARY_FILE).is_file():
                shutil.rmtree(tmp, ignore_errors=True)
            else:  # a damaged entry: use this build where it lies
                return tmp
    return folder
