"""Fingerprint of the installed engine, for the on-disk caches.

A version number alone does not change when the code does (an editable install, a patched wheel), so the
caches also key on every file of the ``mbmem_lint`` package and of the rule catalog: path, size and
modification time. About a hundred ``stat`` calls, made only when a cache is enabled.
"""

from __future__ import annotations

import functools
import os

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
