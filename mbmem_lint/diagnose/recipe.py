"""What ``--recipe`` adds to a diagnosis: the recipe's estimate on the run's GPU and world size, its
ranked re-estimated suggestions, and the settings that change the advice (allocator, nccl_ub, CUDA
graphs, rank order)."""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnose.classify import RunContext, Suggestion
from mbmem_lint.diagnose.compare import layout_from_estimate
from mbmem_lint.diagnose.scan import ScanResult
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import ResolvedRecipe, is_known

GPU_MATCH_TOLERANCE = 0.0025  # an OOM's "total capacity" names a catalog GPU within 0.25% of its usable bytes


class RecipeError(Exception):
    """The recipe named by ``--recipe`` cannot be read or estimated (exit 2)."""


@dataclass
class RecipeContext:
    """The resolved recipe, its estimate on the run's target and the diagnosis context built from them."""

    recipe: ResolvedRecipe
    context: RunContext
    notes: list[str] = field(default_factory=list)


def gpu_from_capacity(capacity_bytes: int | None) -> str | None:
    """The catalog GPU whose usable memory is what an OOM message printed as total capacity (unique
    within :data:`GPU_MATCH_TOLERANCE`), else None."""
    if not capacity_bytes:
        return None
    from mbmem_lint.estimate.gpus import known_gpu_names, resolve_gpu

    hits = {spec.name for spec in (resolve_gpu(n) for n in known_gpu_names())
            if abs(spec.usable_bytes - capacity_bytes) <= GPU_MATCH_TOLERANCE * spec.usable_bytes}
    return hits.pop() if len(hits) == 1 else None


def _value(recipe: ResolvedRecipe, path: str) -> Any:
    v = recipe.get(path)
    return v if is_known(v) else None


def recipe_context(recipe: ResolvedRecipe, scan: ScanResult, gpu: str | None, world_size: int | None) -> RecipeContext:
    """Estimate ``recipe`` on the run's GPU (``--gpu``, the recipe's target, else the GPU whose capacity the
    OOM message printed) and world size (``--world-size``, the recipe's target, else the log's)."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.suggest import suggestions
    from mbmem_lint.estimate.types import EstimateUnavailable

    notes: list[str] = []
    if gpu is None and recipe.target.gpu is None:
        capacity = next((o.capacity_bytes for o in scan.ooms if o.capacity_bytes), None)
        gpu = gpu_from_capacity(capacity)
        if gpu is not None:
            notes.append(f"GPU {gpu}: from the total capacity in the OOM message")
    if world_size is None and recipe.target.world_size is None and scan.parallel.get("world_size"):
        world_size = scan.parallel["world_size"]
        notes.append(f"world size {world_size}: from the log")
    try:
        est = estimate_recipe(recipe, gpu=gpu, world_size=world_size)
    except EstimateUnavailable as exc:
        raise RecipeError(f"{recipe.path}::{recipe.function}: estimate unavailable: {exc.reason}") from None
    except UnknownGpuError as exc:
        raise RecipeError(str(exc)) from None
    ranked = [Suggestion(s.title, s.cost_note, int(s.saving_bytes), dict(s.setting)) for s in suggestions(recipe, est)]
    alloc = _value(recipe, "env_vars.PYTORCH_CUDA_ALLOC_CONF")
    graphs = _value(recipe, "model.cuda_graph_impl")
    layout = layout_from_estimate(est, _value(recipe, "dist.use_tp_pp_dp_mapping") is True)
    if not layout.known:
        notes.append("the world size is unknown (give --world-size): ranks cannot be mapped to pipeline stages")
    ctx = RunContext(
        layout=layout if layout.known else None,
        estimate=est,
        capacity_suggestions=ranked,
        expandable_segments=("expandable_segments:True" in str(alloc).split(",")) if alloc is not None else None,
        nccl_ub=_value(recipe, "ddp.nccl_ub") is True,
        cuda_graphs=graphs not in (None, "none") if is_known(recipe.get("model.cuda_graph_impl")) else None,
        recipe=f"{recipe.path}::{recipe.function}",
    )
    return RecipeContext(recipe, ctx, notes + list(est.assumptions[:1]))
