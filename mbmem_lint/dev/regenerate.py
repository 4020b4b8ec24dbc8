"""Regenerate the shipped data files (``schema.json.gz``, ``models.json``, ``library.json.gz``) from the wheels.

``regenerate(corpus, out_dir)`` writes them; ``check_stale(corpus)`` says which shipped files differ
from a fresh regeneration (used by ``mbmem-lint dev regenerate --check`` and a corpus test).
The bytes are deterministic: sorted keys, compact separators, gzip with ``mtime=0``.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
GZIP_THRESHOLD = 1_500_000  # bytes of JSON above which the schema ships gzipped
SCHEMA_NAMES = ("schema.json", "schema.json.gz")
MODELS_NAME = "models.json"


def dumps(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def gzip_bytes(raw: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    return buf.getvalue()


def render(corpus: Path) -> dict[str, bytes]:
    """File name → bytes of every generated data file."""
    from mbmem_lint.resolve.hf_models import generate_models
    from mbmem_lint.resolve.schema import Schema
    from mbmem_lint.resolve.schema_gen import generate_schema

    schema = generate_schema(corpus)
    schema_raw = dumps(schema)
    out: dict[str, bytes] = {}
    if len(schema_raw) > GZIP_THRESHOLD:
        out["schema.json.gz"] = gzip_bytes(schema_raw)
    else:
        out["schema.json"] = schema_raw
    # The HF mapping filters kwargs by provider field names: use the fresh schema, not the shipped one.
    out[MODELS_NAME] = dumps(generate_models(Schema(schema))) + b"\n"
    from mbmem_lint.resolve.library import LIBRARY_FILE, dump_library, generate_library

    out[LIBRARY_FILE] = dump_library(generate_library(corpus))
    return out


def regenerate(corpus: Path, out_dir: Path | None = None) -> list[Path]:
    """Write the data files into ``out_dir`` (default: the package's data folder); return their paths."""
    target = out_dir or DATA_DIR
    target.mkdir(parents=True, exist_ok=True)
    files = render(corpus)
    written: list[Path] = []
    for name in SCHEMA_NAMES:
        if name not in files and (target / name).exists():
            (target / name).unlink()  # the other encoding of the schema is now obsolete
    for name, data in sorted(files.items()):
        path = target / name
        path.write_bytes(data)
        written.append(path)
    return written


def _payload(name: str, data: bytes) -> bytes:
    return gzip.decompress(data) if name.endswith(".gz") else data


def check_stale(corpus: Path, data_dir: Path | None = None) -> list[str]:
    """Names of shipped data files that are missing or differ from a fresh regeneration."""
    src = data_dir or DATA_DIR
    stale: list[str] = []
    for name, fresh in sorted(render(corpus).items()):
        path = src / name
        if not path.is_file() or _payload(name, path.read_bytes()) != _payload(name, fresh):
            stale.append(name)
    return stale
