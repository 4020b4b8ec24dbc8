"""Ranked memory-saving suggestions (savings re-estimated from the model) and capacity findings."""

from __future__ import annotations

from typing import Any

from mbmem_lint.estimate.api import estimate_recipe
from mbmem_lint.estimate.types import FRAGMENTATION_RESERVE, Component, Estimate, EstimateUnavailable
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import ResolvedRecipe

GIB = 1024**3


@dataclass
class Suggestion:
    """A setting change that saves memory: its re-estimated peak saving, throughput cost and the config
    paths and values to set."""

    title: str
    saving_bytes: int
    cost_note: str
    fields: list[str]
    setting: dict[str, Any]
    cost_rank: int = 0  # lower = cheaper in throughput (the order of NVIDIA/skills nemo-mbridge-perf-memory-tuning)


@dataclass
class CapacityFinding:
    """The capacity verdict on the peak pipeline stage (error: does not fit; warning: little headroom),
    with its largest components and ranked suggestions (MBM701/MBM702)."""

    severity: str  # "error" | "warning"
    stage: int
    message: str
    top_components: list[Component]
    suggestions: list[Suggestion] = field(default_factory=list)


def _get(recipe: ResolvedRecipe, path: str, default: Any = None) -> Any:
    from mbmem_lint.resolve.resolved import is_known

    v = recipe.get(path)
    return v if is_known(v) else default


def _candidates(recipe: ResolvedRecipe, est: Estimate) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(title, cost note, cost rank, setting) candidates applicable to this recipe."""
    out: list[tuple[str, str, int, dict[str, Any]]] = []
    alloc = _get(recipe, "env_vars.PYTORCH_CUDA_ALLOC_CONF", "") or ""
    if "expandable_segments:True" not in str(alloc):
        out.append(("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                     "about free (no throughput change on Llama3 70B, Megatron Bridge PR #3107); incompatible with nccl_ub on torch<2.11",
                     0, {"env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}))
    p = est.parallelism
    tp = p.get("tp") or 1
    peft = _get(recipe, "peft")
    if isinstance(peft, dict) and tp > 1 and _get(recipe, "model.sequence_parallel", False) is True \
            and _get(recipe, "peft.sequence_parallel_input_regather", False) is not True:
        out.append(("LoRA(sequence_parallel_input_regather=True)",
                    "-0.3% to -6.7% throughput (Megatron Bridge PR #4581)", 1,
                    {"peft.sequence_parallel_input_regather": True}))
    gran = _get(recipe, "model.recompute_granularity")
    if gran != "selective" and gran != "full":
        out.append(("selective recompute of core_attn", "small; recomputes attention internals only", 2,
                    {"model.recompute_granularity": "selective", "model.recompute_modules": ["core_attn"]}))
    if gran == "selective":
        mods = _get(recipe, "model.recompute_modules", ["core_attn"]) or ["core_attn"]
        if "mlp" not in mods and not _get(recipe, "model.num_moe_experts"):
            out.append(("add mlp to recompute_modules", "about -16% throughput on Llama3 70B (Megatron Bridge PR #3107)", 5,
                        {"model.recompute_modules": [*mods, "mlp"]}))
        if _get(recipe, "model.num_moe_experts") and "moe_act" not in mods:
            out.append(("add moe_act to recompute_modules", "small (recomputes the expert activation)", 3,
                        {"model.recompute_modules": [*mods, "moe_act"]}))
    if _get(recipe, "optimizer.use_distributed_optimizer", False) is not True and (p.get("dp") or 1) > 1:
        out.append(("use the distributed optimizer", "about 1-2% (NVIDIA/skills nemo-mbridge-perf-memory-tuning; not measured)", 3,
                    {"optimizer.use_distributed_optimizer": True, "ddp.use_distributed_optimizer": True}))
    pp = p.get("pp") or 1
    ws = est.world_size
    if ws and (p.get("dp") or 1) % 2 == 0:
        out.append((f"pipeline_model_parallel_size {pp} -> {pp * 2}",
                    "about -6% throughput when DP halves (Llama3 70B, Megatron Bridge PR #3107)", 4,
                    {"model.pipeline_model_parallel_size": pp * 2,
                     "model.virtual_pipeline_model_parallel_size": p.get("vpp")}))
    if _get(recipe, "optimizer.use_distributed_optimizer", False) is True and \
            _get(recipe, "optimizer.optimizer_cpu_offload", False) is not True:
        out.append(("optimizer CPU offload (optimizer_cpu_offload=True, fraction 1.0)",
                    "host<->device copies each step; no PP/recompute restriction", 6,
                    {"optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": 1.0}))
    if ws and (p.get("dp") or 1) % 2 == 0 and tp < 8:
        out.append((f"tensor_model_parallel_size {tp} -> {tp * 2} (last resort)",
                    "-28% throughput on Llama3 70B TP4->8 (Megatron Bridge PR #3107)", 9,
                    {"model.tensor_model_parallel_size": tp * 2}))
    return out


MIN_SAVING_FRACTION = 0.01


def suggestions(recipe: ResolvedRecipe, estimate: Estimate) -> list[Suggestion]:
    """Suggestions with savings from re-estimating the peak stage with each setting applied."""
    result: list[Suggestion] = []
    for title, cost, rank, setting in _candidates(recipe, estimate):
        try:
            new = estimate_recipe(recipe, gpu=estimate.gpu.name, world_size=estimate.world_size, overrides=setting)
        except EstimateUnavailable:
            continue
        saving = estimate.peak_bytes - new.peak_bytes
        # A change that frees less than 1% of the GPU is not worth its throughput cost or a line in
        # the message ("selective recompute ... saves 0.0 GiB" helps nobody).
        if saving < MIN_SAVING_FRACTION * estimate.gpu.usable_bytes:
            continue
        result.append(Suggestion(title, int(saving), cost, sorted(setting), setting, rank))
    # Cheapest first; among equal cost, biggest saving first.
    result.sort(key=lambda s: (s.cost_rank, -s.saving_bytes))
    return result


def capacity_findings(recipe: ResolvedRecipe, estimate: Estimate, margin: float = 0.05,
                      uncertainty: float | None = None) -> list[CapacityFinding]:
    """Error when the stage's allocations exceed usable memory by more than the estimator's
    ``uncertainty`` (default: the band measured on the validation table for this kind of model,
    ``Estimate.uncertainty``); a stage over capacity by less than that, or only through the fragmentation
    reserve, or under ``margin`` headroom, gets a warning. No false certainty: an error means the estimate is
    over capacity beyond its error band."""
    if uncertainty is None:
        uncertainty = estimate.uncertainty
    if estimate.has_headroom(margin):
        return []
    usable = estimate.gpu.usable_bytes
    peak = estimate.peak
    headroom = estimate.headroom_bytes
    # The fragmentation reserve is a risk allowance, not an allocation: Megatron Bridge PR #3107 shows a stage
    # that exceeds capacity only through fragmentation OOMing in 30-60% of runs, not in every run. So the error
    # needs the allocations themselves (state, activations, workspaces, CUDA context, NCCL) not to fit; when
    # only the reserve tips the stage over, it is a headroom warning (the cheapest fix is expandable segments).
    certain = max(s.total_bytes - sum(c.bytes for c in s.components if c.name == FRAGMENTATION_RESERVE)
                  for s in estimate.stages)
    severity = "error" if certain > usable * (1 + uncertainty) else "warning"
    # Without a world size the data-parallel sharding (distributed optimizer, FSDP) is an assumption
    # (DP=1): no error on an assumption.
    dp_assumed = estimate.world_size is None
    if dp_assumed:
        severity = "warning"
    top = sorted(peak.components, key=lambda c: -c.bytes)[:3]
    tops = "; ".join(f"{c.name} {c.bytes / GIB:.1f} GiB ({', '.join(c.fields[:3]) or 'runtime'})" for c in top)
    if severity == "error":
        head = (f"pipeline stage {peak.pp_rank} needs an estimated {peak.total_bytes / GIB:.1f} GiB, "
                f"{-headroom / GIB:.1f} GiB more than the {usable / GIB:.1f} GiB usable on {estimate.gpu.name}")
    elif certain > usable:
        head = (f"pipeline stage {peak.pp_rank} needs an estimated {peak.total_bytes / GIB:.1f} GiB, "
                f"{-headroom / GIB:.1f} GiB more than the {usable / GIB:.1f} GiB usable on {estimate.gpu.name}; "
                f"that is within the estimator's {uncertainty * 100:.0f}% uncertainty for {estimate.model_kind} "
                f"models, so it may not fit")
    elif headroom < 0:
        reserve = sum(c.bytes for c in peak.components if c.name == FRAGMENTATION_RESERVE)
        head = (f"pipeline stage {peak.pp_rank} needs an estimated {peak.total_bytes / GIB:.1f} GiB with a "
                f"{reserve / GIB:.1f} GiB allocator fragmentation reserve, {-headroom / GIB:.1f} GiB more than the "
                f"{usable / GIB:.1f} GiB usable on {estimate.gpu.name}; without the reserve it fits with "
                f"{(usable - certain) / GIB:.1f} GiB to spare, so it OOMs only if fragmentation exceeds that")
    else:
        head = (f"pipeline stage {peak.pp_rank} leaves only {headroom / GIB:.1f} GiB "
                f"({headroom / usable * 100:.1f}%) of {usable / GIB:.1f} GiB on {estimate.gpu.name} "
                f"(margin {margin * 100:.0f}%)")
    sugg = suggestions(recipe, estimate)
    msg = f"{head}. Top contributors: {tops}."
    if dp_assumed:
        msg += (" The world size is unknown, so this assumes DP=1 (no sharding of optimizer state over data "
                "parallelism); give --world-size or set world-size in [tool.mbmem-lint].")
    if sugg:
        s0 = sugg[0]
        msg += f" Cheapest fix: {s0.title} (saves {s0.saving_bytes / GIB:.1f} GiB; {s0.cost_note})."
    return [CapacityFinding(severity, peak.pp_rank, msg, top, sugg)]
