"""Optional on-disk cache of findings per linted file (``cache = true`` in ``[tool.mbmem-lint]``).

An entry holds the findings of one file's recipes and the content hash of every linted file those
recipes depend on (the file and everything it imports, transitively). It is used only when all of
them are unchanged and the engine (version, installed code and data: :mod:`mbmem_lint.fingerprint`),
the Megatron Bridge data in use (:mod:`mbmem_lint.resolve.versions`), settings and options are the same, so it is never stale; deleting ``.cache/mbmem-lint`` is always safe. Runs that show or apply fixes (``--fix``, the JSON and
SARIF formats) store the fix edits too; an entry stored without them is a miss for such a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from mbmem_lint.diagnostics import Diagnostic, Edit, Fix, Location
from mbmem_lint.settings import Settings, cache_root, safe_resolve, write_cache_file

FORMAT = 1


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _loc_json(loc: Location) -> list[Any]:
    return [loc.path, loc.line, loc.column, loc.end_line, loc.end_column, loc.in_library]


def diag_to_json(d: Diagnostic, with_edits: bool) -> dict[str, Any]:
    fix = None
    if d.fix is not None:
        edits = [[e.path, e.start, e.end, e.replacement] for e in d.fix.edits] if with_edits else None
        fix = [d.fix.description, d.fix.applicability, d.fix.saving_bytes, edits]
    return {"c": d.code, "n": d.name, "s": d.severity, "m": d.message, "l": _loc_json(d.location),
            "f": d.function, "p": d.fields, "x": fix, "o": d.notes}


def diag_from_json(j: dict[str, Any]) -> Diagnostic:
    loc = Location(*j["l"])
    fix = None
    if j["x"] is not None:
        edits = [Edit(*e) for e in j["x"][3]] if j["x"][3] is not None else []
        fix = Fix(j["x"][0], j["x"][1], edits, j["x"][2])
    return Diagnostic(code=j["c"], name=j["n"], severity=j["s"], message=j["m"], location=loc,
                      function=j["f"], fields=list(j["p"]), fix=fix, notes=list(j["o"]))


class ResultsCache:
    def __init__(self, folder: Path, context: str) -> None:
        self.folder = folder
        self.context = context

    @classmethod
    def for_run(cls, settings: Settings, options: Any) -> ResultsCache:
        base = cache_root(settings)
        from mbmem_lint.fingerprint import engine_fingerprint
        from mbmem_lint.resolve.versions import active

        # The Megatron Bridge data in use (a release, or a source tree's content hash): the installed
        # distribution can change between runs with the same settings and options.
        context = f"{engine_fingerprint()}|{FORMAT}|{settings!r}|{options!r}|{active().cache_key}"
        return cls(base / f"results-v{FORMAT}", hashlib.sha256(context.encode()).hexdigest())

    def _entry_path(self, path: str) -> Path:
        key = hashlib.sha256(f"{self.context}|{safe_resolve(path)}".encode()).hexdigest()
        return self.folder / key[:2] / f"{key}.json"

    def lookup(self, path: str, texts: dict[str, str], *, need_edits: bool = False) -> list[Diagnostic] | None:
        """Cached findings of ``path`` when it and all its dependencies are unchanged.

        ``texts``: current content of the files being linted, by resolved path; other
        dependencies are read from disk."""
        try:
            entry = json.loads(self._entry_path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        deps = entry.get("deps")
        if not isinstance(deps, dict) or (need_edits and not entry.get("edits")):
            return None
        for dep, digest in deps.items():
            text = texts.get(dep)
            if text is None:
                try:
                    text = Path(dep).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    return None
            if text_hash(text) != digest:
                return None
        try:
            return [diag_from_json(j) for j in entry["diagnostics"]]
        except (KeyError, TypeError, IndexError):
            return None

    def store(self, path: str, deps: dict[str, str], diagnostics: list[Diagnostic], *, with_edits: bool) -> None:
        """``deps``: resolved path → content of every linted file the findings depend on.
        ``with_edits``: also store the fixes' edits (computed now; JSON/SARIF/--fix need them)."""
        entry = {"deps": {p: text_hash(t) for p, t in sorted(deps.items())}, "edits": with_edits,
                 "diagnostics": [diag_to_json(d, with_edits) for d in diagnostics]}
        # An unwritable cache only costs speed. dumps, not dump: dump streams through the Python encoder.
        with contextlib.suppress(OSError):
            write_cache_file(self._entry_path(path), json.dumps(entry, separators=(",", ":")))
