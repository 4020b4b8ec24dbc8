"""Optional on-disk cache of lowered Python files (``cache = true`` in ``[tool.mbmem-lint]``).

Keyed by the file's content, the IR format and the engine's fingerprint (version and the installed
code and data, :mod:`mbmem_lint.fingerprint`), so it is never stale; safe to delete. Entries are JSON
(data only: nothing in the cache is ever executed).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from mbmem_lint.fingerprint import engine_fingerprint
from mbmem_lint.settings import Settings, cache_root, write_cache_file

IR_FORMAT = 1


class IRCache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def for_settings(cls, settings: Settings) -> IRCache:
        return cls(cache_root(settings) / f"ir-v{IR_FORMAT}")

    @staticmethod
    def key(text: str) -> str:
        import hashlib  # the cache is optional: not on the default start-up path

        h = hashlib.sha256()
        h.update(f"mbmem-lint {engine_fingerprint()} ir {IR_FORMAT}\0".encode())
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    def get(self, text: str) -> list[Any] | None:
        key = self.key(text)
        path = self.folder / key[:2] / f"{key}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, list) else None

    def put(self, text: str, body: list[Any]) -> None:
        key = self.key(text)
        # A cache that cannot be written is just a slower run. dumps, not dump: dump streams through
        # the pure-Python encoder (3x slower here).
        with contextlib.suppress(OSError):
            write_cache_file(self.folder / key[:2] / f"{key}.json", json.dumps(body, separators=(",", ":")))
