"""MBM7xx: per-rank memory capacity (wraps :mod:`mbmem_lint.estimate`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef
from mbmem_lint.diagnostics import Edit

from ._common import py

SMALL = "llama32_1b_pretrain_config"  # MB recipes/llama/h100/llama3.py:44

GIB = 1024**3


def _capacity(ctx: RuleContext, severity: str) -> Iterator[Finding]:
    try:
        from mbmem_lint.estimate.api import estimate_recipe
        from mbmem_lint.estimate.gpus import UnknownGpuError
        from mbmem_lint.estimate.types import EstimateUnavailable
    except ImportError:  # estimator not installed
        return
    try:
        est = estimate_recipe(ctx.r)
    except (EstimateUnavailable, UnknownGpuError):  # no shape, or a GPU the catalog lacks: no capacity verdict
        return
    margin, uncertainty = ctx.settings.headroom_margin, ctx.settings.memory_uncertainty
    if est.has_headroom(margin):
        return  # fits with the margin: no finding (and no need to load the suggestions)
    from mbmem_lint.estimate.suggest import capacity_findings

    # MBM701 and MBM702 read the same findings (one per severity): compute them, and their
    # re-estimated suggestions, once per recipe.
    memo: dict[tuple[float, float | None], Any] = ctx.r.__dict__.setdefault("_capacity_findings", {})
    if (margin, uncertainty) not in memo:
        memo[margin, uncertainty] = capacity_findings(ctx.r, est, margin, uncertainty)
    for cf in memo[margin, uncertainty]:
        if cf.severity != severity:
            continue
        fields = ["memory"]
        for c in cf.top_components:
            fields.extend(f for f in getattr(c, "fields", []) if f not in fields)
        notes = [f"{s.title}: saves {s.saving_bytes / GIB:.1f} GiB ({s.cost_note})" for s in cf.suggestions]
        fix = None
        if cf.suggestions:
            s0 = cf.suggestions[0]
            fix = _suggestion_fix(ctx, s0)
        loc = ctx.anchor("train.micro_batch_size") if "train.micro_batch_size" in ctx.r.fields else ctx.r.location
        yield Finding(cf.message, fields, location=loc, fix=fix, notes=notes)


def _suggestion_fix(ctx: RuleContext, s: Any) -> Any:
    def build() -> list[Edit]:
        from mbmem_lint.fix import edits

        out: list[Edit] = []
        for path, value in s.setting.items():
            out.extend(edits.set_setting(ctx.r, path, value, ctx.sources))
        return out

    return ctx.fix(f"{s.title} (saves {s.saving_bytes / GIB:.1f} GiB per rank)", "display-only", build, int(s.saving_bytes))


MBM701 = Rule(
    code="MBM701", name="memory-capacity-exceeded", severity="error",
    summary="The estimated peak memory of a pipeline stage exceeds the GPU's usable memory.",
    fields=("memory",),
    rationale=("The per-rank estimate (weights, grads, optimizer state, activations with the recipe's recompute/offload, "
               "CUDA-graph and NCCL overheads) of the most-loaded pipeline stage does not fit the target GPU: the job OOMs "
               "after the allocation was granted. The error needs the allocations themselves to exceed usable memory by "
               "more than the estimator's uncertainty (`memory-uncertainty`; by default the error band measured on "
               "the published validation runs for the recipe's kind of model, dense or MoE, which `mbmem-lint "
               "estimate` prints); a stage over capacity by less, or only through the allocator "
               "fragmentation reserve, is reported by MBM702 instead (fragmentation OOMs are intermittent: 30-60% of "
               "runs in the Llama3 70B case)."),
    sources=(SourceRef("megatron/bridge/training/utils/theoretical_memory_utils.py:123-222", "oom",
                       "Bridge's own estimator reports the most-loaded shard only at the first memory report, on the GPUs"),),
    check=lambda ctx: _capacity(ctx, "error"),
    valid=(Example(py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8)),),
    invalid=(Example(py("cfg.train.micro_batch_size = 64  # <-", base=SMALL, gpus=8)),),
    fix_applicability="display-only", fix_description="Cheapest memory fix first (allocator, recompute, MBS, PP), annotated with the saving.",
    fix_safety="A memory suggestion changes the run's layout, batch, recompute or allocator: shown as a quoted diff to review, never applied.",
    references=("GPU capacity as PyTorch / nvidia-smi report it, per GPU with its source in mbmem_lint/data/gpus.json (H100 80GB: 79.1 GiB, 'total capacity of 79.10 GiB', vLLM #27508)", 'Megatron Bridge PR #3910 (estimate_training_memory)',)
)

MBM702 = Rule(
    code="MBM702", name="memory-headroom-low", severity="warning",
    summary="The estimated peak memory leaves less than the configured headroom margin (default 5%).",
    fields=("memory",),
    rationale=("Fragmentation, CUDA-graph pools (more with PP>1), NVLS/NCCL buffers and kernel workspaces are only "
               "partly modelled; a stage within a few percent of capacity OOMs intermittently (the Llama3 70B case "
               "OOMed in 30-60% of runs at 58.8 GB). Also reported when the stage fits only if fragmentation stays "
               "below the reserve the estimate allows (20% of allocations without expandable segments)."),
    sources=(SourceRef("megatron/bridge/training/utils/theoretical_memory_utils.py:713-738", "oom",
                       "Bridge's estimate excludes allocator, workspace and CUDA-graph buffers"),),
    check=lambda ctx: _capacity(ctx, "warning"),
    valid=(Example(py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8)),),
    invalid=(Example(py("cfg.train.micro_batch_size = 1  # <-", base=SMALL, gpus=8), settings={"headroom-margin": 0.95}),),
    fix_applicability="display-only", fix_description="Cheapest memory fix first, annotated with the saving.",
    fix_safety="A memory suggestion changes the run's layout, batch, recompute or allocator: shown as a quoted diff to review, never applied.",
    references=('Megatron Bridge PR #3107 (Llama3 70B SFT on 32x H100: a 58.8 GB peak OOMed in 30-60% of runs without expandable segments)', 'Megatron Bridge docs/performance-guide.md (CUDA graphs take a few GB, over 10 GB with PP>1)',)
)

def _regression(ctx: RuleContext) -> Iterator[Finding]:
    base_index = ctx.settings.base
    if base_index is None:
        return  # only `check --base REV` compares revisions
    from mbmem_lint.regression import find_regression, regression_message

    base = base_index.lookup(ctx.r)
    if base is None:
        return  # a new recipe, or one the change cannot affect
    reg = find_regression(ctx.r, base, ctx.settings.regression_threshold)
    if reg is None:
        return
    by_line: dict[tuple[str, int], list[Any]] = {}
    anchors: dict[tuple[str, int], Any] = {}
    for cause in reg.causes:
        loc = ctx.pre_anchor(cause[0])
        if loc.in_library or not ctx.explicitly_set(cause[0]):
            loc = ctx.r.location  # the recipe no longer sets it (a deleted line): report on the recipe
        key = (loc.path, loc.line)
        by_line.setdefault(key, []).append(cause)
        anchors.setdefault(key, loc)
    threshold = ctx.settings.regression_threshold
    if not by_line:  # no changed value accounts for it alone: report on the recipe
        yield Finding(regression_message(reg, base_index.label, threshold, []), ["memory", *reg.changed[:8]],
                      location=ctx.r.location)
        return
    for key, causes in by_line.items():
        yield Finding(regression_message(reg, base_index.label, threshold, causes),
                      ["memory", *[c[0] for c in causes]], location=anchors[key])


MBM703 = Rule(
    code="MBM703", name="memory-regression", severity="warning",
    summary="The estimated peak memory of the recipe grew by more than regression-threshold since the base revision.",
    fields=("memory",),
    rationale=("A commit that raises the micro-batch size, drops recompute or changes the parallel layout can push "
               "a recipe that ran into an OOM weeks later, on many GPUs. `check --base REV` estimates each "
               "recipe at the base revision (read from git, no checkout) and in the working tree; when the "
               "peak pipeline stage grew by more than `regression-threshold` (default 5%), the finding sits on "
               "each line whose change accounts for the growth (re-estimated with that value put back), with "
               "the components that grew. Without `--base` the rule does nothing."),
    sources=(SourceRef("megatron/core/pipeline_parallel/schedules.py:2243-2244", "oom",
                       "1F1B keeps up to PP microbatches of activations on the first stage: batch and recompute "
                       "changes move the peak stage's memory"),),
    check=_regression,
    valid=(Example(py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8),
                   base=py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8)),),
    invalid=(Example(py("cfg.train.micro_batch_size = 4  # <-", base=SMALL, gpus=8),
                     base=py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8)),),
    references=('NVIDIA/skills nemo-mbridge-perf-memory-tuning card.yaml: a 5% regression threshold for the Llama3 70B perf case (Megatron Bridge PR #3107)',)
)


def _not_checked(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.r.partial:  # an override file on its own: MBM008 already says memory needs its recipe
        return
    try:
        from mbmem_lint.estimate.api import estimate_recipe
        from mbmem_lint.estimate.gpus import UnknownGpuError
        from mbmem_lint.estimate.types import EstimateUnavailable
        from mbmem_lint.estimate.unchecked import SHAPE_PATHS, memory_not_checked_message
    except ImportError:  # estimator not installed
        return
    try:
        estimate_recipe(ctx.r)
    except EstimateUnavailable as exc:
        fields = [p for p in exc.missing_fields] or list(SHAPE_PATHS)
        if ctx.r.architecture is not None:
            fields.insert(0, "model.hf_model_id")
        yield Finding(memory_not_checked_message(ctx.r, exc), fields, location=ctx.anchor(exc.missing_fields[0]
                      if exc.missing_fields else "model"))
    except UnknownGpuError:
        return


MBM704 = Rule(
    code="MBM704", name="memory-not-checked", severity="info",
    summary="The recipe's memory cannot be checked: the model architecture (or shape) is not known.",
    fields=("model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.hf_model_id"),
    rationale=("Without the model's shape there is no per-rank estimate, so MBM701/MBM702 stay silent: such a recipe "
               "must not read as if it fits. `AutoBridge.from_hf_pretrained(id)` reads the architecture from the "
               "model's config.json at run time; mbmem-lint never downloads it, so it needs the config from its "
               "bundled table (published config.json files), a `[tool.mbmem-lint.models]` entry (a config.json or a "
               "checkpoint folder), or the Hugging Face cache. The message names the model id and why it is unknown "
               "(not bundled and not in the cache, a cache file that is not valid JSON, an architecture Bridge "
               "registers no model bridge for, ...). `mbmem-lint estimate` exits 2 with the same text."),
    sources=(SourceRef("megatron/bridge/models/conversion/auto_bridge.py:1638-1714", "no-effect",
                       "to_megatron_provider() builds the provider from the downloaded config.json: the shape is "
                       "only known once the job runs"),
             SourceRef("megatron/bridge/models/conversion/model_bridge.py:437-480", "no-effect",
                       "CONFIG_MAPPING: num_hidden_layers, hidden_size, num_attention_heads ... come from config.json")),
    check=_not_checked,
    valid=(Example(py("cfg.train.micro_batch_size = 1", base=SMALL, gpus=8)),),
    invalid=(Example(py(
        'cfg.model = AutoBridge.from_hf_pretrained("my-org/unpublished-model").to_megatron_provider(  # <-\n'
        '    load_weights=False)', base=SMALL, gpus=8, imports="from megatron.bridge import AutoBridge")),),
)

RULES = [MBM701, MBM702, MBM703, MBM704]
