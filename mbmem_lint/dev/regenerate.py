"""Regenerate the shipped data files from the wheels of one Megatron Bridge release.

Two kinds of data file:

* **per release** (:data:`VERSIONED`): multi-version packs (``schema.pack``, ``library.pack``) with
  one section per shipped release; ``regenerate(corpus, version)`` rewrites that release's section
  and keeps the others (entries identical across releases are stored once, :mod:`mbmem_lint.data_pack`);
* **shared** (:data:`SHARED`): files built once, from the newest shipped release (``bridges.pack``:
  Bridge's HF-config conversion code, and ``models.pack``: the bundled configs converted by it), written
  only when that release is regenerated. (The conversion code could become per release by moving its
  generator to :data:`VERSIONED` and opening the active section where it is loaded.)

A new generated file registers its generator in one of the two tables. ``check_stale(corpus,
version)`` names the files a regeneration of ``version`` would change (``mbmem-lint dev regenerate
--check`` and a corpus test per release). The bytes are deterministic: sorted keys, compact
separators, fixed zlib level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
OBSOLETE_NAMES = ("schema.json", "schema.json.gz", "library.json.gz", "models.json")  # earlier encodings
MODELS_NAME = "models.pack"

Part = tuple[Any, Mapping[str, Any]]  # (pack header meta, entries) of one release


def _schema_part(corpus: Path, parts: dict[str, Any]) -> Part:
    from mbmem_lint.resolve.schema import schema_entries
    from mbmem_lint.resolve.schema_gen import generate_compact_schema

    compact = generate_compact_schema(corpus)
    parts["schema"] = compact  # the shared generators read it
    return schema_entries(compact)


def _library_part(corpus: Path, parts: dict[str, Any]) -> Part:
    from mbmem_lint.resolve.library import generate_library, library_entries

    return library_entries(generate_library(corpus))


def _library_sample(entries: Mapping[str, Any]) -> list[str]:
    from mbmem_lint.resolve.library import library_dictionary_sample

    return library_dictionary_sample(entries)


def _bridges(corpus: Path, parts: dict[str, Any]) -> bytes:
    from mbmem_lint.data_pack import Pack
    from mbmem_lint.resolve.bridges import dump_bridges, generate_bridges
    from mbmem_lint.resolve.library import LibrarySummary

    data = dump_bridges(generate_bridges(corpus))
    pack = Pack(data)
    parts["bridges"] = LibrarySummary.from_pack(pack, "unknown")  # the generator always records the release
    return data


def _models(corpus: Path, parts: dict[str, Any]) -> bytes:
    from mbmem_lint.resolve.hf_models import dump_models, generate_models
    from mbmem_lint.resolve.schema import Schema

    # The conversion runs the fresh bridge summary against the fresh schema, not the shipped ones.
    return dump_models(generate_models(Schema(parts["schema"]), parts["bridges"]))


# File name → (generator of one release's section, names of the newest release's entries that make
# the file's zlib dictionary or None). Generators run in this order; a later one may read what an
# earlier one left in ``parts``. A section whose meta has a ``generator`` (the versions it was built
# from) gets it as its label in the file's top header (read when choosing a release).
VERSIONED: dict[str, tuple[Callable[[Path, dict[str, Any]], Part],
                           Callable[[Mapping[str, Any]], list[str]] | None]] = {
    "schema.pack": (_schema_part, None),
    "library.pack": (_library_part, _library_sample),
}
# File name → generator of a file built from the newest shipped release only (in this order).
SHARED: dict[str, Callable[[Path, dict[str, Any]], bytes]] = {
    "bridges.pack": _bridges,
    MODELS_NAME: _models,
}


def corpus_version(corpus: Path) -> str:
    from mbmem_lint.resolve.schema_gen import package_version

    return package_version(corpus, "bridge")


def _newest(version: str) -> bool:
    from mbmem_lint.resolve.versions import SHIPPED, parse_version

    return all(parse_version(version) >= parse_version(v) for v in SHIPPED)


def pack_file(packs: dict[str, Part], sample: Callable[[Mapping[str, Any]], list[str]] | None) -> bytes:
    """The bytes of a multi-version data file (the dictionary, if any, sampled from the newest release)."""
    from mbmem_lint.data_pack import dump_multi_pack
    from mbmem_lint.resolve.versions import parse_version

    dictionary = None
    if sample is not None and packs:
        newest = max(packs, key=parse_version)
        dictionary = (newest, sample(packs[newest][1]))
    labels = {v: meta["generator"] for v, (meta, _e) in packs.items()
              if isinstance(meta, dict) and isinstance(meta.get("generator"), dict)}
    return dump_multi_pack(packs, dictionary=dictionary, labels=labels)


def _stored_parts(path: Path) -> dict[str, Part]:
    """Every release's (meta, entries) in an existing multi-pack (nothing if it is missing or older)."""
    from mbmem_lint.data_pack import PackError, open_pack, pack_versions

    if not path.is_file():
        return {}
    raw = path.read_bytes()
    try:
        return {v: (p.meta, p.to_dict()) for v in pack_versions(raw) for p in (open_pack(raw, v),)}
    except PackError:
        return {}


def render(corpus: Path, version: str | None = None, data_dir: Path | None = None) -> dict[str, bytes]:
    """File name → bytes of every data file a regeneration of ``version`` (default: the corpus's
    own release) writes, the other releases' sections taken from ``data_dir``."""
    found = corpus_version(corpus)
    version = version or found
    if found != version:
        raise ValueError(f"{corpus} holds megatron-bridge {found}, not {version}")
    src = data_dir or DATA_DIR
    parts: dict[str, Any] = {}
    out: dict[str, bytes] = {}
    for name, (generate, sample) in VERSIONED.items():
        packs = _stored_parts(src / name)
        packs[version] = generate(corpus, parts)
        out[name] = pack_file(packs, sample)
    if _newest(version):
        for name, make in SHARED.items():
            out[name] = make(corpus, parts)
    return out


def regenerate(corpus: Path, out_dir: Path | None = None, version: str | None = None) -> list[Path]:
    """Write the data files of ``version`` (default: the corpus's release) into ``out_dir`` (default:
    the package's data folder); return their paths."""
    target = out_dir or DATA_DIR
    target.mkdir(parents=True, exist_ok=True)
    files = render(corpus, version, target)
    written: list[Path] = []
    for name in OBSOLETE_NAMES:
        if (target / name).exists():
            (target / name).unlink()
    for name, data in sorted(files.items()):
        path = target / name
        path.write_bytes(data)
        written.append(path)
    return written


def check_stale(corpus: Path, data_dir: Path | None = None, version: str | None = None) -> list[str]:
    """Names of shipped data files that are missing or that a regeneration of ``version`` would change."""
    src = data_dir or DATA_DIR
    stale: list[str] = []
    for name, fresh in sorted(render(corpus, version, src).items()):
        path = src / name
        if not path.is_file() or path.read_bytes() != fresh:
            stale.append(name)
    return stale
