"""MBM2xx: activation recompute, CPU offloading, fine-grained activation offloading."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef

from ._common import ENV_VARS_NOTE, ENV_VARS_SINCE, cuda_graph_impl, fix_env, fix_set, fix_set_many, py

GRAN = "model.recompute_granularity"
METHOD = "model.recompute_method"
NUM = "model.recompute_num_layers"
MODS = "model.recompute_modules"
OFF = "model.cpu_offloading"
FGAO = "model.fine_grained_activation_offloading"
PP = "model.pipeline_model_parallel_size"
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
OFFLOAD_MODULES = ("core_attn", "attn_proj", "expert_fc1", "fused_group_mlp", "moe_act", "attn_norm", "mlp_norm", "qkv_linear")


def _full_incomplete(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.value_is(GRAN, "full"):
        return
    missing = [p for p in (METHOD, NUM) if ctx.known(p) and ctx.get(p) is None]
    if missing:
        items = [(p, '"uniform"' if p == METHOD else "1") for p in missing]
        yield Finding(
            "recompute_granularity='full' needs "
            + " and ".join(f"{p.split('.')[-1]}" for p in missing)
            + " (recompute_method 'uniform'|'block', recompute_num_layers 1..layers per PP stage)",
            [GRAN, *missing],
            fix=fix_set_many(ctx, items, "add recompute_method='uniform' / recompute_num_layers=1", "unsafe"))


MBM201 = Rule(
    code="MBM201", name="full-recompute-incomplete", severity="error",
    summary="Full recompute without recompute_method or recompute_num_layers.",
    fields=(GRAN, METHOD, NUM),
    rationale="MCore needs to know which layers to checkpoint; TransformerConfig.__post_init__ raises otherwise.",
    sources=(SourceRef("megatron/core/transformer/transformer_config.py:1736-1748", "raise", "recompute_method must be block or uniform / recompute_num_layers must be set"),),
    check=_full_incomplete,
    valid=(Example(py('cfg.model.recompute_granularity = "full"\ncfg.model.recompute_method = "uniform"\ncfg.model.recompute_num_layers = 1')),),
    invalid=(Example(py('cfg.model.recompute_granularity = "full"  # <-')),),
    fix_applicability="unsafe", fix_description="Add recompute_method='uniform' and recompute_num_layers=1 (review the layer count).",
    fix_safety='Today the run stops before training (TransformerConfig raises); after the fix it trains: a different run, even where it is the one the recipe meant. The method and layer count it picks decide memory and speed: review them.',
)


def _selective_num_layers(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.value_is(GRAN, "selective") and ctx.known(NUM) and ctx.get(NUM) is not None:
        yield Finding("recompute_num_layers must be None with recompute_granularity='selective'", [NUM, GRAN],
                      fix=fix_set(ctx, NUM, "None", "set recompute_num_layers=None"))


MBM202 = Rule(
    code="MBM202", name="selective-recompute-with-num-layers", severity="error",
    summary="Selective recompute with recompute_num_layers set.",
    fields=(GRAN, NUM),
    rationale="recompute_num_layers only applies to full recompute; MCore raises for selective.",
    sources=(SourceRef("megatron/core/transformer/transformer_config.py:1749-1755", "raise", "recompute_num_layers must be None"),),
    check=_selective_num_layers,
    valid=(Example(py('cfg.model.recompute_granularity = "selective"')),),
    invalid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.recompute_num_layers = 2  # <-')),),
    fix_applicability="unsafe", fix_description="Set recompute_num_layers=None.",
    fix_safety='Today the run stops before training (TransformerConfig raises for selective recompute with a layer count); after the fix it trains: a different run, even where it is the one the recipe meant.',
)


def _recompute_values(ctx: RuleContext) -> Iterator[Finding]:
    gran = ctx.get(GRAN)
    if ctx.known(GRAN) and gran not in (None, "full", "selective"):
        yield Finding(f"recompute_granularity must be 'full', 'selective' or None (got {gran!r})", [GRAN])
        return
    method = ctx.get(METHOD)
    if ctx.known(METHOD) and method not in (None, "uniform", "block"):
        yield Finding(f"recompute_method must be 'uniform', 'block' or None (got {method!r})", [METHOD])
        return
    if gran != "selective":
        return
    mods = ctx.as_list(MODS)
    if not mods:
        return
    bad = [m for m in mods if m not in RECOMPUTE_MODULES]
    if bad:
        yield Finding(f"invalid recompute_modules {bad}; allowed: {', '.join(RECOMPUTE_MODULES)}", [MODS])
    elif "moe_act" in mods and ctx.is_off("model.moe_grouped_gemm") and ctx.explicitly_set("model.moe_grouped_gemm"):
        yield Finding("recompute_modules 'moe_act' needs moe_grouped_gemm=True", [MODS, "model.moe_grouped_gemm"])
    elif "mla_up_proj" in mods and ctx.is_off("model.multi_latent_attention"):
        yield Finding("recompute_modules 'mla_up_proj' needs multi-latent attention", [MODS])


MBM203 = Rule(
    code="MBM203", name="invalid-recompute-settings", severity="error",
    summary="Invalid recompute granularity/method, unknown recompute_modules, or modules the model lacks.",
    fields=(GRAN, METHOD, MODS),
    rationale="MCore validates the recompute settings in TransformerConfig.__post_init__ and raises/asserts.",
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:1724-1735", "raise", "invalid recompute_granularity / recompute_method"),
        SourceRef("megatron/core/transformer/transformer_config.py:1766-1802", "assert", "Invalid choices for recompute_modules; moe_act needs grouped gemm"),
    ),
    check=_recompute_values,
    valid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.recompute_modules = ["core_attn", "mlp"]')),),
    invalid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.recompute_modules = ["core_attention"]  # <-')),),
)


def _method_ignored(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.value_is(GRAN, "selective") and ctx.known(METHOD) and ctx.get(METHOD) is not None:
        yield Finding(f"recompute_method={ctx.get(METHOD)!r} is ignored with selective recompute", [METHOD, GRAN],
                      fix=fix_set(ctx, METHOD, "None", "set recompute_method=None"))


MBM204 = Rule(
    code="MBM204", name="recompute-method-ignored", severity="info",
    summary="recompute_method is set with selective recompute, where it has no effect.",
    fields=(METHOD, GRAN),
    rationale="The method selects which layers are fully checkpointed; the selective path never reads it.",
    sources=(SourceRef("megatron/core/transformer/transformer_block.py:624", "no-effect", "recompute_method only used on the full-recompute path"),),
    check=_method_ignored,
    valid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.recompute_method = None')),),
    invalid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.recompute_method = "uniform"  # <-')),),
    fix_applicability="safe", fix_description="Remove the ignored recompute_method.",
    fix_safety='The selective-recompute path never reads recompute_method: setting it to None changes nothing the run does.',
)


def _offload_pp(ctx: RuleContext) -> Iterator[Finding]:
    pp = ctx.pp()
    if ctx.is_true(OFF) and pp is not None and pp > 1:
        yield Finding(f"cpu_offloading=True with pipeline_model_parallel_size={pp}: MCore has no CPU offloading with PP",
                      [OFF, PP], fix=fix_set(ctx, OFF, "False", "turn cpu_offloading off", "unsafe"),
                      notes=["Megatron Bridge PR #3107: offloading 2, 4 or 6 layers of Llama3 70B at PP4 all failed with this ValueError."])


MBM205 = Rule(
    code="MBM205", name="cpu-offloading-with-pipeline-parallel", severity="error",
    summary="CPU activation offloading with PP>1.",
    fields=(OFF, PP, "model.cpu_offloading_num_layers"),
    rationale="MCore raises 'Currently there is no support for Pipeline parallelism with CPU offloading'.",
    sources=(SourceRef("megatron/core/transformer/transformer_config.py:1714-1717", "raise", "no support for Pipeline parallelism with CPU offloading"),),
    check=_offload_pp,
    valid=(Example(py("cfg.model.cpu_offloading = True\ncfg.model.cpu_offloading_num_layers = 4")),),
    invalid=(Example(py("cfg.model.pipeline_model_parallel_size = 2\ncfg.model.cpu_offloading = True  # <-\ncfg.model.cpu_offloading_num_layers = 4")),),
    fix_applicability="unsafe", fix_description="Turn cpu_offloading off (changes memory behaviour).",
    fix_safety='Today the run stops before training (MCore raises for CPU offloading with PP>1); after the fix it trains: a different run, even where it is the one the recipe meant. Turning offloading off also changes activation memory.',
    references=('Megatron Bridge issue #2992 / PR #3144 (offloading enabled by a layer count of 0, then this error at PP>1)', 'Megatron Bridge PR #3107 (Llama3 70B at PP4: offloading 2, 4 or 6 layers all failed with this error)',)
)


def _offload_conflicts(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true(OFF):
        return
    gran = ctx.get(GRAN)
    if ctx.known(GRAN) and gran is not None:
        yield Finding(f"cpu_offloading does not work with activation recompute (recompute_granularity={gran!r})", [OFF, GRAN])
        return
    impl = cuda_graph_impl(ctx)
    if impl not in (None, "none", "full_iteration"):
        yield Finding(f"CUDA graphs (cuda_graph_impl={impl!r}) are not supported with CPU offloading", [OFF, "model.cuda_graph_impl"])
        return
    if ctx.is_true(FGAO):
        yield Finding("fine_grained_activation_offloading cannot be enabled with cpu_offloading", [OFF, FGAO])
        return
    n, layers = ctx.as_int("model.cpu_offloading_num_layers", 0), ctx.as_int("model.num_layers")
    if n is not None and layers and not 0 <= n < layers:
        yield Finding(f"cpu_offloading_num_layers ({n}) must be in [0, num_layers={layers})", ["model.cpu_offloading_num_layers", OFF])
        return
    if ctx.is_off("model.cpu_offloading_activations") and ctx.is_off("model.cpu_offloading_weights"):
        yield Finding("cpu_offloading=True but neither activations nor weights are offloaded", [OFF, "model.cpu_offloading_activations"])


MBM206 = Rule(
    code="MBM206", name="cpu-offloading-conflict", severity="error",
    summary="CPU offloading with recompute, per-layer CUDA graphs, fine-grained offloading, a bad layer count or nothing to offload.",
    fields=(OFF, GRAN, "model.cuda_graph_impl", FGAO, "model.cpu_offloading_num_layers",
            "model.cpu_offloading_activations", "model.cpu_offloading_weights"),
    rationale="MCore rejects each of these combinations in TransformerConfig.__post_init__.",
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:1707-1722", "raise", "layers < num_layers; no recompute with CPU offloading"),
        SourceRef("megatron/core/transformer/transformer_config.py:2465-2468", "raise", "CUDA graphs not supported with CPU offloading"),
        SourceRef("megatron/core/transformer/transformer_config.py:1848-1851", "assert", "fine_grained_activation_offloading cannot be enabled with cpu_offloading"),
    ),
    check=_offload_conflicts,
    valid=(Example(py("cfg.model.cpu_offloading = True\ncfg.model.cpu_offloading_num_layers = 4")),),
    invalid=(Example(py('cfg.model.recompute_granularity = "selective"\ncfg.model.cpu_offloading = True  # <-')),),
    references=('Megatron Bridge issue #2684 (CPU offloading enabled with nothing to offload)',)
)


def _offload_layers_ignored(ctx: RuleContext) -> Iterator[Finding]:
    n = ctx.as_int("model.cpu_offloading_num_layers", 0)
    if n and n > 0 and ctx.is_off(OFF):
        yield Finding(f"cpu_offloading_num_layers={n} has no effect in Bridge while cpu_offloading is False",
                      ["model.cpu_offloading_num_layers", OFF])


MBM207 = Rule(
    code="MBM207", name="cpu-offloading-layers-without-offloading", severity="warning",
    summary="cpu_offloading_num_layers > 0 while cpu_offloading is False: nothing is offloaded.",
    fields=("model.cpu_offloading_num_layers", OFF),
    rationale=("Megatron-LM's CLI turns cpu_offloading on when a layer count is given; Bridge has no such step, "
               "so the count alone does nothing."),
    sources=(SourceRef("megatron/training/arguments.py:1869-1870", "no-effect", "only the MLM CLI auto-enables cpu_offloading"),),
    check=_offload_layers_ignored,
    valid=(Example(py("cfg.model.cpu_offloading = True\ncfg.model.cpu_offloading_num_layers = 4")),),
    invalid=(Example(py("cfg.model.cpu_offloading_num_layers = 4  # <-")),),
    references=('Megatron Bridge issue #2992 / PR #3144 (cpu_offloading_num_layers and cpu_offloading)',)
)


def _fgao_env(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true(FGAO) or not ctx.env_known():
        return
    v = ctx.env_str("NVTE_CPU_OFFLOAD_V1")
    if v is None or (isinstance(v, str) and v != "1"):
        got = "is not set" if v is None else f"is {v!r}"
        yield Finding(f"fine_grained_activation_offloading needs env NVTE_CPU_OFFLOAD_V1='1' (TE ≥ 2.10); it {got}",
                      [FGAO, "env_vars.NVTE_CPU_OFFLOAD_V1"],
                      fix=fix_env(ctx, "NVTE_CPU_OFFLOAD_V1", "1", "add NVTE_CPU_OFFLOAD_V1=1 to cfg.env_vars"))


MBM208 = Rule(
    code="MBM208", name="fine-grained-offloading-env", severity="error",
    summary="Fine-grained activation offloading without env NVTE_CPU_OFFLOAD_V1=1.",
    fields=(FGAO, "env_vars.NVTE_CPU_OFFLOAD_V1"),
    rationale=("With Transformer Engine ≥ 2.10 the new offload path would also offload weights; Bridge refuses "
               "to start unless NVTE_CPU_OFFLOAD_V1 is exactly '1' (a bool True becomes 'True')."),
    sources=(SourceRef("megatron/bridge/training/config.py:2052-2059", "raise", "NVTE_CPU_OFFLOAD_V1 environment variable should be set to 1"),),
    check=_fgao_env,
    valid=(Example(py('cfg.model.fine_grained_activation_offloading = True\ncfg.model.offload_modules = ["core_attn"]\ncfg.env_vars["NVTE_CPU_OFFLOAD_V1"] = 1')),),
    invalid=(Example(py('cfg.model.fine_grained_activation_offloading = True  # <-\ncfg.model.offload_modules = ["core_attn"]')),),
    versions="Transformer Engine ≥ 2.10 (assumed; the TE version is not configurable)",
    fix_applicability="unsafe", fix_description="Add NVTE_CPU_OFFLOAD_V1=1 to cfg.env_vars.",
    fix_safety="Today the run stops before training (Bridge raises without NVTE_CPU_OFFLOAD_V1=1); after the fix it trains: a different run, even where it is the one the recipe meant. The variable also selects Transformer Engine's offload implementation.",
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _fgao_config(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true(FGAO):
        return
    impl = ctx.as_str("model.transformer_impl")
    if impl is not None and impl != "transformer_engine":
        yield Finding(f"fine_grained_activation_offloading needs transformer_impl='transformer_engine' (got {impl!r})",
                      [FGAO, "model.transformer_impl"])
        return
    mods = ctx.as_list("model.offload_modules")
    if mods is None:
        return
    if not mods:
        yield Finding("fine_grained_activation_offloading with empty offload_modules", ["model.offload_modules", FGAO])
        return
    bad = [m for m in mods if m not in OFFLOAD_MODULES]
    if bad:
        yield Finding(f"invalid offload_modules {bad}; allowed: {', '.join(OFFLOAD_MODULES)}", ["model.offload_modules"])
    elif "attn_proj" in mods and "core_attn" not in mods:
        yield Finding("offload_modules 'attn_proj' cannot be set without 'core_attn'", ["model.offload_modules"])
    elif (ctx.value_is(GRAN, "selective") and "moe" in (ctx.as_list(MODS) or [])
          and {"moe_act", "expert_fc1", "fused_group_mlp"} & set(mods)):
        yield Finding("cannot offload MoE activations while recomputing the entire MoE layer ('moe' in recompute_modules)",
                      ["model.offload_modules", MODS])


MBM209 = Rule(
    code="MBM209", name="fine-grained-offloading-config", severity="error",
    summary="Fine-grained activation offloading without TE, with empty/invalid offload_modules, or conflicting with MoE recompute.",
    fields=(FGAO, "model.offload_modules", "model.transformer_impl", MODS),
    rationale="Bridge and MCore validate the fine-grained offload settings before training and raise/assert.",
    sources=(
        SourceRef("megatron/bridge/training/config.py:2045-2050", "raise", "only supported with transformer_engine implementation"),
        SourceRef("megatron/core/transformer/transformer_config.py:1852-1884", "assert", "offload_modules empty/invalid; attn_proj without core_attn; moe recompute conflict"),
    ),
    check=_fgao_config,
    valid=(Example(py('cfg.model.fine_grained_activation_offloading = True\ncfg.model.offload_modules = ["core_attn", "attn_proj"]\ncfg.env_vars["NVTE_CPU_OFFLOAD_V1"] = 1')),),
    invalid=(Example(py('cfg.model.fine_grained_activation_offloading = True\ncfg.model.offload_modules = ["attn_proj"]  # <-\ncfg.env_vars["NVTE_CPU_OFFLOAD_V1"] = 1')),),
)


def _distribute_saved(ctx: RuleContext) -> Iterator[Finding]:
    if (ctx.is_true("model.distribute_saved_activations") and ctx.is_true("model.sequence_parallel")
            and ctx.known(GRAN) and ctx.get(GRAN) is not None):
        yield Finding("distribute_saved_activations must be False when sequence parallelism is enabled",
                      ["model.distribute_saved_activations", "model.sequence_parallel"],
                      fix=fix_set(ctx, "model.distribute_saved_activations", "False", "set distribute_saved_activations=False"))


MBM210 = Rule(
    code="MBM210", name="distributed-saved-activations-with-sequence-parallel", severity="error",
    summary="distribute_saved_activations together with sequence parallelism.",
    fields=("model.distribute_saved_activations", "model.sequence_parallel", GRAN),
    rationale="SP already shards the saved activations over TP; MCore raises for the combination.",
    sources=(SourceRef("megatron/core/transformer/transformer_config.py:1757-1761", "raise", "distribute_saved_activations must be false when sequence parallel is enabled"),),
    check=_distribute_saved,
    valid=(Example(py('cfg.model.recompute_granularity = "full"\ncfg.model.recompute_method = "uniform"\ncfg.model.recompute_num_layers = 1\ncfg.model.distribute_saved_activations = True')),),
    invalid=(Example(py('cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.model.recompute_granularity = "full"\ncfg.model.recompute_method = "uniform"\ncfg.model.recompute_num_layers = 1\ncfg.model.distribute_saved_activations = True  # <-')),),
    fix_applicability="unsafe", fix_description="Set distribute_saved_activations=False.",
    fix_safety='Today the run stops before training (MCore raises for the combination); after the fix it trains: a different run, even where it is the one the recipe meant. Saved activations are then no longer distributed over TP ranks by this option.',
)


def _optimizer_offload(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("optimizer.optimizer_cpu_offload"):
        return
    if ctx.is_off("optimizer.decoupled_weight_decay"):
        yield Finding("optimizer_cpu_offload needs decoupled_weight_decay=True (AdamW mode)",
                      ctx.recent(["optimizer.optimizer_cpu_offload", "optimizer.decoupled_weight_decay"]))
        return
    frac = ctx.get("optimizer.optimizer_offload_fraction")
    if isinstance(frac, (int, float)) and not isinstance(frac, bool) and not 0 <= frac <= 1:
        yield Finding(f"optimizer_offload_fraction must be in [0, 1] (got {frac})", ["optimizer.optimizer_offload_fraction"])


MBM211 = Rule(
    code="MBM211", name="optimizer-cpu-offload-config", severity="error",
    summary="Optimizer CPU offload without decoupled weight decay, or an offload fraction outside [0, 1].",
    fields=("optimizer.optimizer_cpu_offload", "optimizer.decoupled_weight_decay", "optimizer.optimizer_offload_fraction"),
    rationale="The hybrid CPU optimizer implements AdamW only; MCore asserts when the optimizer is built on the GPUs.",
    sources=(SourceRef("megatron/core/optimizer/__init__.py:502-510", "assert", "CPU offloading only supported with decoupled_weight_decay enabled"),),
    check=_optimizer_offload,
    valid=(Example(py("cfg.optimizer.optimizer_cpu_offload = True\ncfg.optimizer.optimizer_offload_fraction = 0.5")),),
    invalid=(Example(py("cfg.optimizer.optimizer_cpu_offload = True\ncfg.optimizer.decoupled_weight_decay = False  # <-")),),
)

RULES = [MBM201, MBM202, MBM203, MBM204, MBM205, MBM206, MBM207, MBM208, MBM209, MBM210, MBM211]
