"""Target GPU and world size: ``--gpu``/``--world-size``, then ``[tool.mbmem-lint]`` (per-path
tables first), then the recipe-name convention ``_<N>gpu_<gpu>_`` (``..._32gpu_h100_bf16_config``)."""

from __future__ import annotations

import re

from mbmem_lint.resolve.resolved import Target
from mbmem_lint.settings import Settings

RECIPE_NAME_RE = re.compile(r"_(\d+)gpu_([a-z0-9]+)_")


def canonical_gpu(name: str) -> str:
    """Catalog name for a GPU alias (``h100`` → ``h100-80gb``); unchanged when not in the catalog."""
    from mbmem_lint.estimate.gpus import UnknownGpuError, resolve_gpu

    try:
        return resolve_gpu(name).name
    except UnknownGpuError:
        return name


def resolve_target(
    function: str, path: str, settings: Settings, cli_gpu: str | None, cli_world_size: int | None
) -> Target:
    per_path = settings.target_for(path)
    m = RECIPE_NAME_RE.search(function)
    gpu, gpu_src = None, "default"
    for value, src in ((cli_gpu, "cli"), (per_path.gpu, "pyproject"), (settings.gpu, "pyproject"),
                       (m.group(2) if m else None, "recipe-name")):
        if value:
            gpu, gpu_src = value, src
            break
    world, world_src = None, "default"
    for wvalue, src in ((cli_world_size, "cli"), (per_path.world_size, "pyproject"),
                        (settings.world_size, "pyproject"), (int(m.group(1)) if m else None, "recipe-name")):
        if wvalue:
            world, world_src = wvalue, src
            break
    return Target(canonical_gpu(gpu) if gpu else None, world, gpu_src, world_src)


MAX_TARGET_FILE_BYTES = 16 * 2**20  # a recipe file; a larger one is not read for suggestions


def file_functions(path: str) -> list[str] | None:
    """The names of the top-level functions of the Python file ``path`` (read with ``ast``, never run), None
    when it cannot be read or parsed."""
    import ast
    import os

    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_TARGET_FILE_BYTES:
            return None
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _bound_elsewhere(path: str, name: str) -> bool:
    """``name`` is bound at the top level of ``path`` otherwise than by ``def`` (imported, assigned, or a star
    import that may bring it): a target naming it is not a typo."""
    import ast

    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name).split(".")[0] == name:
                    return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def closest_functions(path: str, name: str, limit: int = 3) -> list[str]:
    """The top-level functions of ``path`` whose names are closest to ``name`` (a ``FILE::FUNCTION`` that names no
    function: did you mean ...), best first; all of them (up to ``limit``) when none is close."""
    from difflib import get_close_matches  # only on a typo: keeps start-up lean

    names = file_functions(path) or []
    public = [n for n in names if not n.startswith("_")] or names
    close = get_close_matches(name, public, n=limit, cutoff=0.5)
    return close or sorted(public)[:limit]


def missing_function_message(path: str, name: str) -> str | None:
    """"FILE has no function NAME; did you mean: a, b?" when ``path`` (a readable Python file) defines no
    top-level ``name``; None when it does, or when the file cannot be read (the caller reports that)."""
    names = file_functions(path)
    if names is None or name in names or _bound_elsewhere(path, name):
        return None
    hits = closest_functions(path, name)
    if not hits:
        return f"{path} has no function {name!r} (it defines no top-level function)"
    return f"{path} has no function {name!r}; did you mean: {', '.join(f'{path}::{h}' for h in hits)}?"
