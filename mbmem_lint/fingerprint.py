"""Fingerprints: of the installed engine (for the on-disk caches) and of a resolved recipe's memory-relevant
configuration (for recorded measurements).

The engine:

A version number alone does not change when the code does (an editable install, a patched wheel), so the
caches also key on every file of the ``mbmem_lint`` package and of the rule catalog: path, size and
modification time. About a hundred ``stat`` calls, made only when a cache is enabled.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from mbmem_lint import __version__


def _package_dirs() -> list[str]:
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    spec = importlib.util.find_spec("mbmem_lint.rules")
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        loc = os.path.abspath(loc)
        if not loc.startswith(here + os.sep):
            dirs.append(loc)
    return dirs


@functools.lru_cache(maxsize=1)
def engine_fingerprint() -> str:
    import hashlib

    h = hashlib.sha256(f"mbmem-lint {__version__}\0".encode())
    for top in _package_dirs():
        for folder, subdirs, files in os.walk(top):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith((".py", ".json", ".pack")):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(path, top)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def estimate_inputs(recipe: Any, world_size: int | None = None) -> dict[str, Any]:
    """The resolved values the memory estimate of ``recipe`` reads (path → value), found by reading the
    estimate's inputs with a getter that records what it is asked for (every read happens there: the rest
    of the estimate works from the inputs and the GPU). Raises ``EstimateUnavailable`` for an unknown shape."""
    from mbmem_lint.estimate.api import recipe_getter
    from mbmem_lint.estimate.inputs import read_inputs

    get = recipe_getter(recipe)
    seen: dict[str, Any] = {}

    def recording(path: str) -> Any:
        value = seen[path] = get(path)
        return value

    read_inputs(recording, world_size if world_size is not None else recipe.target.world_size)
    return seen


def _canonical(value: Any) -> Any:
    """A JSON-able stand-in for a resolved value that is stable between runs (no object addresses)."""
    import re

    from mbmem_lint.resolve.resolved import is_known

    if not is_known(value):
        return "<unknown>"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return re.sub(r" at 0x[0-9a-f]+", "", f"{type(value).__name__}:{value!r}")


def config_fingerprint(recipe: Any, world_size: int | None = None) -> str:
    """Fingerprint of a resolved recipe for memory purposes: a hash of every value its estimate reads and
    the target world size. Two recipes with the same fingerprint get the same estimate; a change to a
    field the estimate does not read (logging, checkpoint paths) keeps it."""
    import hashlib
    import json

    values = estimate_inputs(recipe, world_size)
    ws = world_size if world_size is not None else recipe.target.world_size
    payload = json.dumps({"world_size": ws, "values": {k: _canonical(v) for k, v in sorted(values.items())}},
                         sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()[:32]
