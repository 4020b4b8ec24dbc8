"""MBM1xx: parallel layout (world size, TP/PP/VPP/CP/EP divisibility, batch sizes, SP)."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef
from mbmem_lint.resolve.resolved import is_known

from ._common import fix_set, py

TP = "model.tensor_model_parallel_size"
PP = "model.pipeline_model_parallel_size"
CP = "model.context_parallel_size"
EP = "model.expert_model_parallel_size"
ETP = "model.expert_tensor_parallel_size"
VPP = "model.virtual_pipeline_model_parallel_size"
SP = "model.sequence_parallel"


def _etp(ctx: RuleContext) -> int | None:
    ep, tp = ctx.ep(), ctx.tp()
    v = ctx.get(ETP)
    if not is_known(v):
        return None
    if v is None:
        if ep is None or tp is None:
            return None
        return 1 if ep > 1 else tp  # Bridge sets ETP=1 when EP>1 (MB models/transformer_config.py:80-88)
    return v if isinstance(v, int) else None


# -- MBM101 ------------------------------------------------------------------------------------------


def _world_size(ctx: RuleContext) -> Iterator[Finding]:
    ws, tp, pp, cp, ep = ctx.world_size(), ctx.tp(), ctx.pp(), ctx.cp(), ctx.ep()
    if ws is None or None in (tp, pp, cp):
        return
    assert tp is not None and pp is not None and cp is not None
    if ws % (tp * pp * cp):
        yield Finding(
            f"world size {ws} is not divisible by TP·PP·CP = {tp}·{pp}·{cp} = {tp * pp * cp}",
            ctx.recent([TP, PP, CP]),
        )
        return
    etp = _etp(ctx)
    if ep is not None and etp is not None and ep > 1 and ws % (etp * ep * pp):
        yield Finding(
            f"world size {ws} is not divisible by ETP·EP·PP = {etp}·{ep}·{pp} = {etp * ep * pp}",
            ctx.recent([EP, ETP, PP]),
        )


MBM101 = Rule(
    code="MBM101",
    name="world-size-not-divisible",
    severity="error",
    summary="The world size is not divisible by TP·PP·CP (or by ETP·EP·PP).",
    fields=(TP, PP, CP, EP, ETP),
    rationale=(
        "Data parallelism is world / (TP·PP·CP). Bridge asserts divisibility while updating the runtime "
        "config and MCore raises again when it builds the process groups; the expert groups need "
        "world % (ETP·EP·PP) == 0. The job dies after the allocation was granted."
    ),
    sources=(
        SourceRef("megatron/bridge/training/config.py:1010-1026", "assert", "set_data_parallel_size asserts divisibility"),
        SourceRef("megatron/core/parallel_state.py:822-823", "raise", "RuntimeError: world size is not divisible"),
        SourceRef("megatron/core/parallel_state.py:878-884", "raise", "not divisible by expert_tensor_model_pipeline_parallel size"),
    ),
    check=_world_size,
    valid=(Example(py("cfg.model.context_parallel_size = 2", gpus=8)),),
    invalid=(Example(py("cfg.model.context_parallel_size = 4  # <-", gpus=6)),),
)


# -- MBM102 ------------------------------------------------------------------------------------------


def _tp_divisibility(ctx: RuleContext) -> Iterator[Finding]:
    tp = ctx.tp()
    if tp is None or tp <= 1:
        return
    heads = ctx.as_int("model.num_attention_heads")
    if heads and heads % tp:
        yield Finding(f"num_attention_heads ({heads}) must be a multiple of tensor_model_parallel_size ({tp})",
                      ctx.recent([TP, "model.num_attention_heads"]))
        return
    groups = ctx.as_int("model.num_query_groups")
    if groups and groups % tp and tp % groups:
        yield Finding(f"num_query_groups ({groups}) must be a multiple or a divisor of tensor_model_parallel_size ({tp})",
                      ctx.recent([TP, "model.num_query_groups"]))
        return
    ffn = ctx.as_int("model.ffn_hidden_size")
    if ffn and ffn % tp:
        yield Finding(f"ffn_hidden_size ({ffn}) is not divisible by tensor_model_parallel_size ({tp})",
                      ctx.recent([TP, "model.ffn_hidden_size"]))
        return
    if ctx.value_is("model.should_pad_vocab", False):
        vocab = ctx.as_int("model.vocab_size")
        if vocab and vocab % tp:
            yield Finding(
                f"vocab_size ({vocab}) is not divisible by tensor_model_parallel_size ({tp}) and should_pad_vocab is False",
                ctx.recent([TP, "model.vocab_size"]))
    etp = _etp(ctx)
    moe_ffn = ctx.as_int("model.moe_ffn_hidden_size")
    if etp and etp > 1 and moe_ffn and ctx.as_int("model.num_moe_experts") and moe_ffn % etp:
        yield Finding(f"moe_ffn_hidden_size ({moe_ffn}) is not divisible by expert_tensor_parallel_size ({etp})",
                      ctx.recent([ETP, "model.moe_ffn_hidden_size"]))


MBM102 = Rule(
    code="MBM102",
    name="tensor-parallel-divisibility",
    severity="error",
    summary="Attention heads, query groups, FFN width, vocabulary or expert FFN width do not split across TP/ETP.",
    fields=(TP, "model.num_attention_heads", "model.num_query_groups", "model.ffn_hidden_size",
            "model.vocab_size", "model.moe_ffn_hidden_size", ETP),
    rationale=(
        "Tensor parallelism splits heads, query groups and the FFN columns evenly over the TP ranks. MCore "
        "raises in TransformerConfig.__post_init__ for heads and groups; the linear layers assert in "
        "divide() while the model is built on the GPUs."
    ),
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:1323-1327", "raise", "num_attention_heads must be a multiple of TP"),
        SourceRef("megatron/core/transformer/transformer_config.py:1338-1345", "raise", "num_query_groups must be a multiple or divisor of TP"),
        SourceRef("megatron/core/tensor_parallel/layers.py:965", "assert", "divide(): '{} is not divisible by {}' at model build"),
        SourceRef("megatron/core/tensor_parallel/utils.py:118", "assert", "vocab-parallel embedding needs vocab % TP == 0"),
    ),
    check=_tp_divisibility,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True", gpus=8)),),
    invalid=(Example(py("cfg.model.tensor_model_parallel_size = 3  # <-", gpus=6)),),
)


# -- MBM103 ------------------------------------------------------------------------------------------


def _pipeline_layers(ctx: RuleContext) -> Iterator[Finding]:
    pp, layers = ctx.pp(), ctx.as_int("model.num_layers")
    if pp is None or layers is None or layers <= 0:
        return
    vpp_raw = ctx.get(VPP)
    if not is_known(vpp_raw):
        return
    vpp = vpp_raw if isinstance(vpp_raw, int) and vpp_raw > 1 else None
    first = ctx.get("model.num_layers_in_first_pipeline_stage")
    last = ctx.get("model.num_layers_in_last_pipeline_stage")
    layout = ctx.get("model.pipeline_model_parallel_layout")
    acc_e = ctx.get("model.account_for_embedding_in_pipeline_split")
    acc_l = ctx.get("model.account_for_loss_in_pipeline_split")
    if not all(is_known(v) for v in (first, last, layout, acc_e, acc_l)):
        return
    uneven = first is not None or last is not None
    if layout is not None:
        if uneven or acc_e or acc_l:
            yield Finding("pipeline_model_parallel_layout cannot be set with other pipeline layout arguments",
                          ["model.pipeline_model_parallel_layout"])
        return
    if uneven and (acc_e or acc_l):
        yield Finding("num_layers_in_first/last_pipeline_stage and account_for_*_in_pipeline_split cannot be set at the same time",
                      ctx.recent(["model.num_layers_in_first_pipeline_stage", "model.account_for_embedding_in_pipeline_split"]))
        return
    if pp <= 1:
        return
    if uneven:
        f = first if isinstance(first, int) else 0
        la = last if isinstance(last, int) else 0
        for name, v in (("first", first), ("last", last)):
            if v is not None and (not isinstance(v, int) or v <= 0):
                yield Finding(f"num_layers_in_{name}_pipeline_stage must be > 0 (got {v})",
                              [f"model.num_layers_in_{name}_pipeline_stage"])
                return
            if vpp and isinstance(v, int) and v % vpp:
                yield Finding(f"number of layers at the {name} stage ({v}) must be divisible by the virtual pipeline degree ({vpp})",
                              [f"model.num_layers_in_{name}_pipeline_stage", VPP])
                return
        middle_stages = pp - (first is not None) - (last is not None)
        middle = layers - f - la
        if middle_stages <= 0 and middle != 0 or middle < 0:
            yield Finding(f"{middle} layers are left for {max(middle_stages, 0)} middle pipeline stages",
                          ctx.recent(["model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage", PP]))
        elif middle_stages > 0 and middle % middle_stages:
            yield Finding(f"the {middle} middle layers are not divisible by the {middle_stages} middle pipeline stages",
                          ctx.recent(["model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage", PP]))
        elif middle_stages > 0 and vpp and (middle // middle_stages) % vpp:
            yield Finding(f"layers on each middle pipeline rank ({middle // middle_stages}) must be divisible by the virtual pipeline degree ({vpp})",
                          ctx.recent([VPP, PP]))
        return
    total = layers + (1 if acc_e else 0) + (1 if acc_l else 0)
    if total % pp:
        extra = f" (+{total - layers} for account_for_*)" if total != layers else ""
        yield Finding(f"num_layers={layers}{extra} is not divisible by pipeline_model_parallel_size={pp}",
                      ctx.recent([PP, "model.num_layers"]))
    elif vpp and (total // pp) % vpp:
        yield Finding(f"layers per pipeline rank ({total // pp}) are not divisible by virtual_pipeline_model_parallel_size={vpp}",
                      ctx.recent([VPP, PP, "model.num_layers"]))


MBM103 = Rule(
    code="MBM103",
    name="pipeline-layers-not-divisible",
    severity="error",
    summary="Layers do not split evenly over pipeline (and virtual pipeline) stages, or layout options conflict.",
    fields=(PP, VPP, "model.num_layers", "model.num_layers_in_first_pipeline_stage",
            "model.num_layers_in_last_pipeline_stage", "model.pipeline_model_parallel_layout",
            "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split"),
    rationale=(
        "Each pipeline stage (and each virtual chunk) must hold a whole number of layers. MCore raises in "
        "TransformerConfig.__post_init__ for uneven/layout settings and asserts in TransformerBlock while "
        "building the model on the GPUs otherwise."
    ),
    sources=(
        SourceRef("megatron/core/transformer/transformer_block.py:141-172", "assert", "num_layers should be divisible by pipeline_model_parallel_size / vp_size"),
        SourceRef("megatron/bridge/models/gpt_provider.py:239-254", "assert", "model chunks must be the same across pipeline stages"),
        SourceRef("megatron/core/transformer/transformer_config.py:1923-2063", "raise", "uneven first/last stage and layout conflicts"),
    ),
    check=_pipeline_layers,
    valid=(Example(py("cfg.model.context_parallel_size = 1\ncfg.model.pipeline_model_parallel_size = 4", gpus=8)),),
    invalid=(Example(py("cfg.model.pipeline_model_parallel_size = 3  # <-", gpus=6)),),
)


# -- MBM104 ------------------------------------------------------------------------------------------


def _vpp_without_pp(ctx: RuleContext) -> Iterator[Finding]:
    vpp, pp = ctx.vpp(), ctx.pp()
    if vpp is None or pp is None:
        return
    if pp <= 1:
        yield Finding(
            f"virtual_pipeline_model_parallel_size={vpp} needs pipeline_model_parallel_size > 1 (got {pp})",
            [VPP, PP],
            fix=fix_set(ctx, VPP, "None", "set virtual_pipeline_model_parallel_size to None"),
        )
        return
    cls = ctx.section_class("model") or ""
    # MambaModelProvider: the Hybrid provider's name before Megatron Bridge 0.6 (models/mamba), same assert.
    if cls.endswith(("HybridModelProvider", "MambaModelProvider", "T5ModelProvider")):
        yield Finding(f"virtual pipeline parallelism is not supported by {cls.rsplit('.', 1)[-1]}", [VPP],
                      fix=fix_set(ctx, VPP, "None", "set virtual_pipeline_model_parallel_size to None"))


MBM104 = Rule(
    code="MBM104",
    name="virtual-pipeline-without-pipeline",
    severity="error",
    summary="virtual_pipeline_model_parallel_size is set while PP is 1 (or on a Hybrid/T5 provider).",
    fields=(VPP, PP),
    rationale=(
        "The interleaved schedule needs at least two pipeline stages. MCore raises when it creates the "
        "parallel groups; Hybrid and T5 providers assert that VPP is unsupported."
    ),
    sources=(
        SourceRef("megatron/core/parallel_state.py:827-831", "raise", "pipeline-model-parallel size should be greater than 1 with interleaved schedule"),
        SourceRef("megatron/bridge/models/hybrid/hybrid_provider.py:295-298", "assert", "VPP unsupported in Hybrid models"),
    ),
    check=_vpp_without_pp,
    valid=(Example(py("cfg.model.pipeline_model_parallel_size = 2\ncfg.model.virtual_pipeline_model_parallel_size = 2", gpus=8)),),
    invalid=(Example(py("cfg.model.virtual_pipeline_model_parallel_size = 2  # <-", gpus=8)),),
    fix_applicability="unsafe",
    fix_description="Set virtual_pipeline_model_parallel_size to None (the run fails otherwise).",
    fix_safety='Today the run stops before training (MCore raises when it builds the pipeline groups); after the fix it trains: a different run, even where it is the one the recipe meant.',
)


# -- MBM105 ------------------------------------------------------------------------------------------


def _num_microbatches(ctx: RuleContext) -> int | None:
    gbs, mbs, dp = ctx.as_int("train.global_batch_size"), ctx.as_int("train.micro_batch_size", 1), ctx.dp()
    if not gbs or not mbs or not dp or gbs % (mbs * dp):
        return None
    return gbs // (mbs * dp)


def _vpp_microbatches(ctx: RuleContext) -> Iterator[Finding]:
    vpp, pp = ctx.vpp(), ctx.pp()
    if vpp is None or pp is None or pp <= 1:
        return
    m = _num_microbatches(ctx)
    group = ctx.as_int("model.microbatch_group_size_per_vp_stage", pp)
    if m is None or group is None:
        return
    fields = [*ctx.recent(["train.global_batch_size", "train.micro_batch_size"]), VPP, PP]
    if group > m or group < pp:
        yield Finding(f"with VPP the number of micro-batches ({m}) must be ≥ microbatch_group_size_per_vp_stage ({group}) ≥ PP ({pp})", fields)
    elif 0 < m % group < pp:
        yield Finding(f"with VPP, num_microbatches ({m}) % microbatch_group_size_per_vp_stage ({group}) must be 0 or ≥ PP ({pp})", fields)


MBM105 = Rule(
    code="MBM105",
    name="interleaved-pipeline-microbatches",
    severity="error",
    summary="With VPP, the number of micro-batches is below PP or leaves a remainder smaller than PP.",
    fields=("train.global_batch_size", "train.micro_batch_size", VPP, PP, "model.microbatch_group_size_per_vp_stage"),
    rationale=(
        "The interleaved 1F1B schedule groups micro-batches per virtual stage (default group = PP). "
        "num_microbatches = GBS / (MBS·DP) must be ≥ PP and its remainder 0 or ≥ PP, otherwise the first "
        "training step raises."
    ),
    sources=(
        SourceRef("megatron/core/pipeline_parallel/schedules.py:1133-1153", "raise", "micro-batches in a virtual pipeline stage should range in [PP, M]"),
    ),
    check=_vpp_microbatches,
    valid=(Example(py("""
        cfg.model.pipeline_model_parallel_size = 2
        cfg.model.virtual_pipeline_model_parallel_size = 2
        cfg.train.global_batch_size = 8
    """, gpus=8)),),
    invalid=(Example(py("""
        cfg.model.pipeline_model_parallel_size = 2
        cfg.model.virtual_pipeline_model_parallel_size = 2
        cfg.train.global_batch_size = 6  # <-
    """, gpus=8)),),
)


# -- MBM106 ------------------------------------------------------------------------------------------


def _global_batch(ctx: RuleContext) -> Iterator[Finding]:
    gbs, mbs, dp = ctx.as_int("train.global_batch_size"), ctx.as_int("train.micro_batch_size", 1), ctx.dp()
    if not gbs or not mbs or not dp:
        return
    fields = [*ctx.recent(["train.global_batch_size", "train.micro_batch_size"]), TP, PP, CP]
    if gbs < mbs * dp:
        yield Finding(f"global_batch_size ({gbs}) is smaller than micro_batch_size·DP ({mbs}·{dp}): no micro-batch per rank", fields)
        return
    if gbs % (mbs * dp):
        decrease = ctx.is_true("train.decrease_batch_size_if_needed")
        yield Finding(
            f"global_batch_size ({gbs}) is not divisible by micro_batch_size ({mbs}) × data_parallel_size ({dp})"
            + (": Bridge silently rounds it down" if decrease else ""),
            fields, severity="warning" if decrease else None)
        return
    egbs = ctx.as_int("validation.eval_global_batch_size", gbs)
    embs = ctx.as_int("validation.eval_micro_batch_size", mbs)
    if egbs and embs and egbs % (embs * dp):
        yield Finding(f"eval_global_batch_size ({egbs}) is not divisible by eval_micro_batch_size ({embs}) × DP ({dp})",
                      ctx.recent(["validation.eval_global_batch_size", "validation.eval_micro_batch_size"]))


MBM106 = Rule(
    code="MBM106",
    name="global-batch-not-divisible",
    severity="error",
    summary="global_batch_size is not divisible by micro_batch_size × data-parallel size (train or eval).",
    fields=("train.global_batch_size", "train.micro_batch_size", "train.decrease_batch_size_if_needed",
            "validation.eval_global_batch_size", "validation.eval_micro_batch_size"),
    rationale=(
        "Each step runs GBS / (MBS·DP) micro-batches per rank. MCore asserts divisibility when it builds "
        "the micro-batch calculator; with decrease_batch_size_if_needed the batch is silently shrunk "
        "instead (a warning here). The eval batch is checked by Bridge's validate()."
    ),
    sources=(
        SourceRef("megatron/core/num_microbatches_calculator.py:368-391", "assert", "global batch size is not divisible by micro batch size times data parallel size"),
        SourceRef("megatron/bridge/training/config.py:1293-1339", "assert", "eval_global_batch_size must be divisible"),
    ),
    check=_global_batch,
    valid=(Example(py("cfg.train.global_batch_size = 512", gpus=8)),),
    invalid=(Example(py("cfg.train.global_batch_size = 510  # <-", gpus=8)),),
)


# -- MBM107 ------------------------------------------------------------------------------------------


def _seq_length(ctx: RuleContext) -> Iterator[Finding]:
    seq, cp, tp = ctx.as_int("model.seq_length"), ctx.cp(), ctx.tp()
    if seq is None or cp is None or tp is None:
        return
    if cp > 1 and seq % (2 * cp):
        yield Finding(f"seq_length ({seq}) must be divisible by 2·context_parallel_size ({2 * cp})",
                      ctx.recent(["model.seq_length", CP]))
        return
    if ctx.is_true(SP) and tp > 1 and (seq // cp) % tp:
        yield Finding(f"with sequence parallelism, seq_length/CP ({seq // cp}) must be divisible by TP ({tp})",
                      ctx.recent(["model.seq_length", TP, CP]))
        return
    dseq = ctx.as_int("dataset.seq_length")
    if dseq is not None and dseq != seq and ctx.explicitly_set("dataset.seq_length"):
        yield Finding(f"model.seq_length ({seq}) and dataset.seq_length ({dseq}) differ",
                      ctx.recent(["model.seq_length", "dataset.seq_length"]))


MBM107 = Rule(
    code="MBM107",
    name="sequence-length-divisibility",
    severity="error",
    summary="seq_length does not split over CP (2·CP) or SP, or model and dataset sequence lengths differ.",
    fields=("model.seq_length", "dataset.seq_length", CP, TP, SP),
    rationale=(
        "Context parallelism splits every sequence in 2·CP chunks (load balancing), sequence parallelism "
        "scatters seq/CP over TP ranks. Bridge asserts the CP rule and the model/dataset match in "
        "validate(); the SP scatter asserts at the first forward pass."
    ),
    sources=(
        SourceRef("megatron/bridge/training/config.py:1435-1438", "assert", "Sequence length must be divisible by 2 * context parallel size"),
        SourceRef("megatron/bridge/training/config.py:1490-1509", "assert", "model and dataset sequence length must match"),
        SourceRef("megatron/core/tensor_parallel/mappings.py:72-74", "runtime-crash", "First dimension of the tensor should be divisible by tensor parallel size"),
    ),
    check=_seq_length,
    valid=(Example(py("cfg.model.seq_length = 4096\ncfg.dataset.seq_length = 4096", gpus=8)),),
    invalid=(Example(py("cfg.model.seq_length = 4094  # <-\ncfg.dataset.seq_length = 4094", gpus=8)),),
)


# -- MBM108 / MBM109 -----------------------------------------------------------------------------------


def _sp_without_tp(ctx: RuleContext) -> Iterator[Finding]:
    tp = ctx.tp()
    if tp == 1 and ctx.is_true(SP, pre=True) and ctx.explicitly_set(SP):
        yield Finding("sequence_parallel=True with tensor_model_parallel_size=1 is silently turned off by Bridge",
                      [SP, TP], fix=fix_set(ctx, SP, "False", "set sequence_parallel to False"))


MBM108 = Rule(
    code="MBM108",
    name="sequence-parallel-without-tensor-parallel",
    severity="warning",
    summary="sequence_parallel=True at TP=1 is silently dropped.",
    fields=(SP, TP),
    rationale=(
        "Sequence parallelism shards activations over the TP group; with TP=1 there is nothing to shard. "
        "Bridge sets sequence_parallel=False before MCore's check, so the setting is dead and the "
        "config reads as if activations were sharded."
    ),
    sources=(SourceRef("megatron/bridge/models/transformer_config.py:179-180", "silent-rewrite", "sequence_parallel set to False when TP ≤ 1"),),
    check=_sp_without_tp,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True", gpus=8)),),
    invalid=(Example(py("cfg.model.sequence_parallel = True  # <-", gpus=8)),),
    fix_applicability="safe",
    fix_description="Set sequence_parallel=False (what Bridge does anyway).",
    fix_safety='Bridge already sets sequence_parallel=False when TP is 1: the fix writes down the value the run uses.',
)


GIB = 1 << 30
SP_WARN_FRACTION = 0.05  # warning when SP would free at least this share of the GPU's usable memory
SP_WARN_BYTES = 4 * GIB  # ... or, with no known GPU, at least this much per rank


def sp_replicated_bytes(ctx: RuleContext, tp: int) -> int | None:
    """Per-rank activation bytes that sequence parallelism would shard, on the first pipeline stage.

    Korthikanti et al. 2022 (Megatron-LM SP paper), per layer and micro-batch, in bytes: without SP
    ``sbh(10 + 24/t + 5as/(ht))``, with SP ``sbh(34/t + 5as/(ht))``: SP saves ``10·s·b·h·(1 - 1/t)``
    (the LayerNorm inputs, dropout outputs and masks). Full recompute keeps only the layer input
    (``2·s·b·h``, also sharded by SP). Times the layers of a stage and the micro-batches in flight on
    the first 1F1B stage (``min(PP, number of micro-batches)``). ``s`` is the per-CP-rank length."""
    s, b, h, layers = (ctx.as_int("model.seq_length"), ctx.as_int("train.micro_batch_size"),
                       ctx.as_int("model.hidden_size"), ctx.as_int("model.num_layers"))
    pp, cp = ctx.pp(), ctx.cp()
    if not (s and b and h and layers and pp and cp):
        return None
    coeff = 10
    cls = ctx.section_class("model") or ""
    if "Hybrid" in cls or "Mamba" in cls:
        coeff = 5  # hybrid models count every mixer (Mamba, attention, MLP) as a layer: one norm + dropout each
    if ctx.value_is("model.recompute_granularity", "full"):
        coeff = 2
    per_layer = coeff * (s // cp) * b * h * (1 - 1 / tp)
    in_flight = pp
    gbs, dp = ctx.as_int("train.global_batch_size"), ctx.dp()
    if gbs and dp and gbs % (b * dp) == 0:
        in_flight = max(1, min(pp, gbs // (b * dp)))
    return int(per_layer * -(-layers // pp) * in_flight)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _tp_without_sp(ctx: RuleContext) -> Iterator[Finding]:
    tp = ctx.tp()
    if tp is None or tp <= 1 or not ctx.is_off(SP):
        return
    ep = ctx.ep()
    saved = sp_replicated_bytes(ctx, tp)
    usable = None
    if ctx.r.target.gpu:
        try:
            from mbmem_lint.estimate.gpus import resolve_gpu

            usable = resolve_gpu(ctx.r.target.gpu).usable_bytes
        except Exception:  # unknown GPU: fall back to the absolute threshold
            usable = None
    material = saved is not None and saved >= (SP_WARN_FRACTION * usable if usable else SP_WARN_BYTES)
    cost = f" (about {_gib(saved)} per rank on the first pipeline stage)" if saved is not None else ""
    if ep and ep > 1:
        msg = (f"tensor_model_parallel_size={tp} with expert parallelism but without sequence_parallel: MCore warns "
               f"'sequence parallelism must be used'; LayerNorm/dropout activations are replicated on all {tp} TP ranks{cost}")
        severity = None
    elif material:
        msg = (f"tensor_model_parallel_size={tp} without sequence_parallel: LayerNorm/dropout activations are "
               f"replicated on all {tp} TP ranks{cost}")
        severity = None
    else:
        msg = (f"tensor_model_parallel_size={tp} without sequence_parallel: sequence parallelism would shard the "
               f"LayerNorm/dropout activations" + (f"{cost}, small at this size" if saved is not None else ""))
        severity = "info"
    yield Finding(msg, [SP, TP], severity=severity,  # type: ignore[arg-type]
                  fix=fix_set(ctx, SP, "True", "enable sequence_parallel", "unsafe", saving_bytes=saved))


MBM109 = Rule(
    code="MBM109",
    name="tensor-parallel-without-sequence-parallel",
    severity="warning",
    summary="TP>1 without sequence parallelism keeps TP× more LayerNorm/dropout activation memory.",
    fields=(SP, TP),
    rationale=(
        "Without SP every TP rank stores the full-sequence LayerNorm and dropout activations; SP shards "
        "them for the same communication volume (all-gather/reduce-scatter instead of all-reduce). MCore "
        "warns only when EP>1. The message quantifies the cost (10·s·b·h·(1-1/TP) bytes per layer and "
        "in-flight micro-batch, Korthikanti et al. 2022). Warning when EP>1 (MCore's own warning) or when "
        "the replicated activations are at least 5% of the GPU's usable memory (4 GiB when the GPU is "
        "unknown); below that it is an info note: short sequences or small models lose little, and Bridge's "
        "small SFT/PEFT recipes use TP without SP on purpose."
    ),
    sources=(SourceRef("megatron/core/model_parallel_config.py:559-565", "warning", "sequence parallelism must be used with EP and TP"),),
    check=_tp_without_sp,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True", gpus=8)),),
    invalid=(Example(py("cfg.model.context_parallel_size = 1\ncfg.model.tensor_model_parallel_size = 2  # <-", gpus=8),
                     note="seq 8192, h 4096, 32 layers: 10·8192·4096·½·32 B = 5 GiB, 6% of an H100"),),
    fix_applicability="unsafe",
    fix_description="Enable sequence_parallel (changes the communication pattern).",
    fix_safety="Sequence parallelism changes the run's communication (reduce-scatter/all-gather instead of all-reduce) and its activation memory.",
)


# -- MBM110 ------------------------------------------------------------------------------------------


def _moe_ep(ctx: RuleContext) -> Iterator[Finding]:
    ep = ctx.ep()
    experts_raw = ctx.get("model.num_moe_experts")
    if ep is None or not is_known(experts_raw):
        return
    experts = experts_raw if isinstance(experts_raw, int) else None
    if ep > 1 and experts is None:
        yield Finding(f"expert_model_parallel_size={ep} but num_moe_experts is None", [EP, "model.num_moe_experts"])
        return
    if experts and ep > 1 and experts % ep:
        yield Finding(f"num_moe_experts ({experts}) is not divisible by expert_model_parallel_size ({ep})",
                      ctx.recent([EP, "model.num_moe_experts"]))
        return
    etp = _etp(ctx)
    if experts and ctx.is_true("model.add_bias_linear") and etp is not None and etp != 1:
        yield Finding(f"MoE with add_bias_linear=True needs expert_tensor_parallel_size=1 (got {etp})",
                      ctx.recent(["model.add_bias_linear", ETP, TP]),
                      fix=fix_set(ctx, ETP, "1", "set expert_tensor_parallel_size=1", "unsafe"))


MBM110 = Rule(
    code="MBM110",
    name="expert-parallel-layout",
    severity="error",
    summary="EP>1 without experts, experts not divisible by EP, or MoE biases with ETP≠1.",
    fields=(EP, ETP, "model.num_moe_experts", "model.add_bias_linear"),
    rationale=(
        "Expert parallelism distributes whole experts over EP ranks. MCore raises without experts, "
        "asserts (without a message) when they do not divide, and only supports MoE biases with ETP=1."
    ),
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:1468-1469", "raise", "num_moe_experts must be non None to use expert-parallel"),
        SourceRef("megatron/core/transformer/moe/moe_layer.py:185", "assert", "experts % EP (bare assert at build)"),
        SourceRef("megatron/core/transformer/transformer_config.py:2279-2283", "assert", "Bias in Moe is only supported when ETP==1"),
    ),
    check=_moe_ep,
    valid=(Example(py("cfg.model.expert_model_parallel_size = 1", gpus=8)),),
    invalid=(Example(py("cfg.model.expert_model_parallel_size = 2  # <-", gpus=8)),
             Example(py("cfg.model.num_moe_experts = 8\ncfg.model.expert_model_parallel_size = 2\n"
                        "cfg.model.add_bias_linear = True\ncfg.model.expert_tensor_parallel_size = 2  # <-", gpus=8))),
    fix_applicability="unsafe",
    fix_description="For MoE biases: set expert_tensor_parallel_size=1.",
    fix_safety="Today the run stops before training (MCore rejects the expert layout); after the fix it trains: a different run, even where it is the one the recipe meant. The expert tensor-parallel size also changes the expert layers' layout.",
)


# -- MBM111 ------------------------------------------------------------------------------------------


def _p2p(ctx: RuleContext) -> Iterator[Finding]:
    pp = ctx.pp()
    vraw = ctx.get(VPP)
    if pp is None or pp <= 1 or not is_known(vraw):
        return
    overlap, batch = ctx.get("model.overlap_p2p_comm"), ctx.get("model.batch_p2p_comm")
    if overlap is True and batch is True and vraw:
        yield Finding("overlap_p2p_comm and batch_p2p_comm cannot both be True with the interleaved schedule",
                      ctx.recent(["model.overlap_p2p_comm", "model.batch_p2p_comm"]))
    elif overlap is True and not vraw:
        yield Finding("overlap_p2p_comm=True needs virtual pipeline parallelism (non-interleaved PP does not support it)",
                      ["model.overlap_p2p_comm", VPP])


MBM111 = Rule(
    code="MBM111",
    name="pipeline-p2p-overlap-conflict",
    severity="error",
    summary="overlap_p2p_comm without VPP, or together with batch_p2p_comm under VPP.",
    fields=("model.overlap_p2p_comm", "model.batch_p2p_comm", VPP, PP),
    rationale="MCore's pipeline schedules reject these combinations at the first training step.",
    sources=(
        SourceRef("megatron/core/pipeline_parallel/schedules.py:1059-1060", "raise", "Can not use both overlap_p2p_comm and batch_p2p_comm"),
        SourceRef("megatron/core/pipeline_parallel/schedules.py:2154-2157", "raise", "Non-interleaved pipeline parallelism does not support overlapping p2p communication"),
    ),
    check=_p2p,
    valid=(Example(py("cfg.model.pipeline_model_parallel_size = 2\ncfg.model.overlap_p2p_comm = False", gpus=8)),),
    invalid=(Example(py("""
        cfg.model.pipeline_model_parallel_size = 2
        cfg.model.batch_p2p_comm = False
        cfg.model.overlap_p2p_comm = True  # <-
    """, gpus=8)),),
)


# -- MBM112 / MBM113 (rule H: parallelism raised as a memory fix) -------------------------------------


def _raised_over_library(ctx: RuleContext, path: str) -> tuple[int, int] | None:
    ws = ctx.writes(path)
    if not ws or ws[-1].origin not in ("recipe", "yaml", "cli"):
        return None
    lib = [w for w in ws[:-1] if w.origin == "library" and isinstance(w.value, int)]
    new = ws[-1].value
    if lib and isinstance(new, int) and not isinstance(new, bool) and new > lib[-1].value:
        return lib[-1].value, new
    return None


def _tp_raised(ctx: RuleContext) -> Iterator[Finding]:
    r = _raised_over_library(ctx, TP)
    if r:
        yield Finding(
            f"tensor_model_parallel_size raised from {r[0]} (library recipe) to {r[1]}: raising TP to save memory is "
            "a last resort (measured −28.4% throughput for TP4→8 on Llama3 70B, H100); try "
            "expandable_segments, selective recompute or the distributed optimizer first", [TP])


def _pp_raised(ctx: RuleContext) -> Iterator[Finding]:
    r = _raised_over_library(ctx, PP)
    if r:
        yield Finding(
            f"pipeline_model_parallel_size raised from {r[0]} (library recipe) to {r[1]}: at a fixed GPU count this "
            "halves DP and doubles gradient-accumulation steps (measured −5.9% for PP4→8 on Llama3 70B)", [PP])
        return
    v = _raised_over_library(ctx, VPP)
    if v:
        yield Finding(
            f"virtual_pipeline_model_parallel_size raised from {v[0]} to {v[1]}: VPP reduces the pipeline bubble but is "
            "not a memory knob (VPP 5→10 peaked higher: 60.2 GB vs 58.8 GB)", [VPP])


MBM112 = Rule(
    code="MBM112",
    name="tensor-parallel-raised-for-memory",
    severity="info",
    summary="TP raised above the library recipe's value: the most expensive memory fix.",
    fields=(TP,),
    rationale=(
        "Doubling TP doubles the NVLink all-reduce volume per layer. On Llama3 70B SFT (32×H100) TP4→8 "
        "saved 8.6 GB but cost 28.4% throughput; expandable segments fixed the same OOM at no cost."
    ),
    sources=(SourceRef("megatron/core/tensor_parallel/layers.py:965", "cost", "TP shards weights; every layer all-reduces/all-gathers over TP"),),
    check=_tp_raised,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 1", gpus=8)),),
    invalid=(Example(py("cfg.model.tensor_model_parallel_size = 2  # <-\ncfg.model.sequence_parallel = True", gpus=8)),),
    references=('Megatron Bridge PR #3107: Llama3 70B SFT on 32x H100 (FP8 current scaling), TP4 -> TP8 cost 28.4% throughput for 8.6 GB, where expandable segments fixed the OOM at no cost',)
)

MBM113 = Rule(
    code="MBM113",
    name="pipeline-raised-for-memory",
    severity="info",
    summary="PP (or VPP) raised above the library recipe's value: DP shrinks, VPP saves no memory.",
    fields=(PP, VPP),
    rationale=(
        "At a fixed GPU count, more PP means less DP and more gradient-accumulation steps (−5.9% measured "
        "on Llama3 70B PP4→8). VPP only shortens the bubble: the VPP 5→10 'OOM fix' peaked higher; the "
        "real fix was expandable segments."
    ),
    sources=(SourceRef("megatron/core/pipeline_parallel/schedules.py:1133-1153", "cost", "interleaved schedule: more in-flight micro-batches per stage"),),
    check=_pp_raised,
    valid=(Example(py("cfg.model.pipeline_model_parallel_size = 1", gpus=8)),),
    invalid=(Example(py("cfg.model.pipeline_model_parallel_size = 2  # <-", gpus=8)),),
    references=('Megatron Bridge PR #3107: Llama3 70B SFT on 32x H100, PP4 -> PP8 cost 5.9% throughput (DP halved); VPP 5 -> 10 peaked higher (60.2 GB vs 58.8 GB)',)
)

RULES = [MBM101, MBM102, MBM103, MBM104, MBM105, MBM106, MBM107, MBM108, MBM109, MBM110, MBM111, MBM112, MBM113]
