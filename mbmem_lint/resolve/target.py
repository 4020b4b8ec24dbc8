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
