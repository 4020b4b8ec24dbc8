"""Regenerate the shipped data files (``schema.pack``, ``models.json``, ``library.pack``, ``bridges.pack``) from
the wheels.

``regenerate(corpus, out_dir)`` writes them; ``check_stale(corpus)`` says which shipped files differ
from a fresh regeneration (used by ``mbmem-lint dev regenerate --check`` and a corpus test).
The bytes are deterministic: sorted keys, compact separators, fixed zlib level (:mod:`mbmem_lint.data_pack`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
OBSOLETE_NAMES = ("schema.json", "schema.json.gz", "library.json.gz")  # earlier encodings
MODELS_NAME = "models.json"


def dumps(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def render(corpus: Path) -> dict[str, bytes]:
    """File name → bytes of every generated data file."""
    from mbmem_lint.resolve.hf_models import generate_models
    from mbmem_lint.resolve.schema import SCHEMA_FILE, Schema, schema_pack
    from mbmem_lint.resolve.schema_gen import generate_schema

    schema = generate_schema(corpus)
    out: dict[str, bytes] = {SCHEMA_FILE: schema_pack(schema)}
    from mbmem_lint.data_pack import Pack
    from mbmem_lint.resolve.bridges import BRIDGES_FILE, dump_bridges, generate_bridges
    from mbmem_lint.resolve.library import LIBRARY_FILE, LibrarySummary, dump_library, generate_library

    out[BRIDGES_FILE] = dump_bridges(generate_bridges(corpus))
    pack = Pack(out[BRIDGES_FILE])
    bridges = LibrarySummary(pack.meta["modules"], pack, pack.meta["megatron_bridge"])
    # The conversion runs the fresh bridge summary against the fresh schema, not the shipped ones.
    out[MODELS_NAME] = dumps(generate_models(Schema(schema), bridges)) + b"\n"
    out[LIBRARY_FILE] = dump_library(generate_library(corpus))
    return out


def regenerate(corpus: Path, out_dir: Path | None = None) -> list[Path]:
    """Write the data files into ``out_dir`` (default: the package's data folder); return their paths."""
    target = out_dir or DATA_DIR
    target.mkdir(parents=True, exist_ok=True)
    files = render(corpus)
    written: list[Path] = []
    for name in OBSOLETE_NAMES:
        if (target / name).exists():
            (target / name).unlink()
    for name, data in sorted(files.items()):
        path = target / name
        path.write_bytes(data)
        written.append(path)
    return written


def check_stale(corpus: Path, data_dir: Path | None = None) -> list[str]:
    """Names of shipped data files that are missing or differ from a fresh regeneration."""
    src = data_dir or DATA_DIR
    stale: list[str] = []
    for name, fresh in sorted(render(corpus).items()):
        path = src / name
        if not path.is_file() or path.read_bytes() != fresh:
            stale.append(name)
    return stale
