"""Constraints Bridge and Megatron Core enforce on a layout and on the memory knobs, as cheap checks.

They keep the search away from combinations the rules would reject, so that the (more expensive) real
re-resolve + rules + estimate runs only on plausible candidates. The rules stay authoritative: every
candidate a plan reports is re-resolved and passes the full rule set; these checks only prune. Each
check names the rule that enforces the same behaviour (and through it the Megatron source).
"""

from __future__ import annotations

from mbmem_lint.estimate.inputs import Getter, Runtime, regather_eligible_targets
from mbmem_lint.plan.knobs import Layout, Spec
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.resolved import is_known


def _int(get: Getter, path: str, default: int | None = None) -> int | None:
    v = get(path)
    if isinstance(v, bool) or not is_known(v) or not isinstance(v, int):
        return default
    return v


def known_str(get: Getter, path: str) -> str | None:
    v = get(path)
    return v if isinstance(v, str) and is_known(v) else None


@dataclass(frozen=True)
class ModelFacts:
    """What the constraints read from the current recipe (resolved values; None when unknown)."""

    world_size: int | None
    num_layers: int
    heads: int
    groups: int | None
    ffn: int | None
    vocab: int | None
    pad_vocab: bool
    experts: int
    moe_ffn: int | None
    moe_bias: bool
    seq: int
    gbs: int | None
    microbatch_group: int | None
    vpp_supported: bool  # Hybrid and T5 providers assert VPP is unsupported
    layout_string: bool  # pipeline_model_parallel_layout set: PP/VPP/uneven stages are pinned
    account_extra: int  # account_for_embedding/loss_in_pipeline_split: virtual layers added to the split
    graph_impl: str
    full_iteration_graph: bool
    peft_kind: str | None  # lora | dora | canonical_lora
    lora_eligible_targets: bool  # a non-expert linear_qkv/linear_fc1 target (re-gather can apply)
    moe_grouped_gemm: bool
    mla: bool
    decoupled_wd: bool
    nccl_ub: bool
    fine_grained_offload: bool
    torch_fsdp2: bool
    dense_mlp_layers: bool  # some layer has a dense MLP (mlp recompute is a no-op on MoE layers)
    # Finetuning without per-token loss: CP>1 would need calculate_per_token_loss=True (MBM414), which changes
    # how the loss is normalised; a plan only changes how the same computation is laid out, so CP stays 1.
    sft_cp_blocked: bool = False

    @staticmethod
    def read(get: Getter, world_size: int | None, *, runtime: Runtime, num_layers: int, heads: int, seq: int,
             peft_kind: str | None, lora_targets: list[str] | None, dense_mlp_layers: bool,
             model_class: str | None, sft_cp_blocked: bool = False) -> ModelFacts:
        """``runtime``: the estimate's reading of the CUDA-graph settings (and the rest of the runtime)."""
        cls = model_class or ""
        impl = runtime.graph_impl
        targets = lora_targets or []
        eligible = bool(regather_eligible_targets(targets))
        return ModelFacts(
            world_size=world_size, num_layers=num_layers, heads=heads,
            groups=_int(get, "model.num_query_groups"), ffn=_int(get, "model.ffn_hidden_size"),
            vocab=_int(get, "model.vocab_size"), pad_vocab=get("model.should_pad_vocab") is not False,
            experts=_int(get, "model.num_moe_experts", 0) or 0, moe_ffn=_int(get, "model.moe_ffn_hidden_size"),
            moe_bias=get("model.add_bias_linear") is True,
            seq=seq, gbs=_int(get, "train.global_batch_size"),
            microbatch_group=_int(get, "model.microbatch_group_size_per_vp_stage"),
            vpp_supported=not cls.endswith(("HybridModelProvider", "T5ModelProvider", "MambaModelProvider")),
            layout_string=get("model.pipeline_model_parallel_layout") is not None,
            account_extra=(get("model.account_for_embedding_in_pipeline_split") is True)
            + (get("model.account_for_loss_in_pipeline_split") is True),
            graph_impl=impl, full_iteration_graph=impl == "full_iteration" or "full_iteration" in runtime.graph_scope,
            peft_kind=peft_kind, lora_eligible_targets=eligible,
            moe_grouped_gemm=get("model.moe_grouped_gemm") is True,
            mla=get("model.multi_latent_attention") is True,
            decoupled_wd=get("optimizer.decoupled_weight_decay") is not False,
            nccl_ub=get("ddp.nccl_ub") is True,
            fine_grained_offload=get("model.fine_grained_activation_offloading") is True,
            torch_fsdp2=get("dist.use_torch_fsdp2") is True,
            dense_mlp_layers=dense_mlp_layers, sft_cp_blocked=sft_cp_blocked,
        )

    @property
    def cuda_graphs(self) -> bool:
        return self.graph_impl not in ("none", "")


def stage_split_ok(f: ModelFacts, pp: int, vpp: int | None, first: int | None, last: int | None) -> str | None:
    """MBM103/MBM104: whole layers per pipeline stage and per virtual chunk."""
    n = f.num_layers
    if f.layout_string:
        return None  # pipeline_model_parallel_layout places the layers (PP, VPP and the split stay pinned)
    if vpp is not None and (pp <= 1 or not f.vpp_supported):
        return "VPP needs PP>1 and a provider that supports it (MBM104)"
    if pp <= 1:
        return None if first is None and last is None else "uneven stages need PP>1 (MBM103)"
    if first is None and last is None:
        total = n + f.account_extra
        if total % pp:
            return f"{n} layers do not split over PP{pp} (MBM103)"
        if vpp and (total // pp) % vpp:
            return f"{total // pp} layers per stage do not split over VPP{vpp} (MBM103)"
        return None
    if f.account_extra:
        return "uneven stages conflict with account_for_*_in_pipeline_split (MBM103)"
    fl, ll = first or 0, last or 0
    middle_stages = pp - (first is not None) - (last is not None)
    middle = n - fl - ll
    if fl < 0 or ll < 0 or middle < 0 or (middle_stages <= 0 and middle) or (middle_stages and middle % middle_stages):
        return "uneven stages leave a fractional middle stage (MBM103)"
    if vpp and (fl % vpp or ll % vpp or (middle_stages and (middle // middle_stages) % vpp)):
        return "uneven stages do not split over VPP (MBM103)"
    return None


def layout_ok(f: ModelFacts, lay: Layout) -> str | None:
    """The layout alone: world-size divisibility (MBM101), TP splits (MBM102), SP with TP (MBM108),
    sequence splits (MBM107), EP (MBM110), pipeline splits (MBM103/104). None when it passes."""
    ws = f.world_size
    if ws is None:
        return "world size unknown"
    if ws % (lay.tp * lay.pp * lay.cp):
        return f"world size {ws} not divisible by TP·PP·CP (MBM101)"
    if lay.tp > 1:
        if f.heads % lay.tp:
            return f"{f.heads} heads do not split over TP{lay.tp} (MBM102)"
        if f.groups and f.groups % lay.tp and lay.tp % f.groups:
            return "query groups do not split over TP (MBM102)"
        if f.ffn and f.ffn % lay.tp:
            return "FFN width does not split over TP (MBM102)"
        if not f.pad_vocab and f.vocab and f.vocab % lay.tp:
            return "vocabulary does not split over TP (MBM102)"
    if lay.sp and lay.tp <= 1:
        return "sequence parallelism needs TP>1 (MBM108)"
    if lay.cp > 1 and f.sft_cp_blocked:
        return "CP>1 when finetuning needs per-token loss, a different loss normalisation (MBM414)"
    if lay.cp > 1 and f.seq % (2 * lay.cp):
        return f"seq {f.seq} not divisible by 2·CP (MBM107)"
    if lay.sp and (f.seq // lay.cp) % lay.tp:
        return "seq/CP not divisible by TP under SP (MBM107)"
    if f.experts:
        if f.experts % lay.ep:
            return f"{f.experts} experts do not split over EP{lay.ep} (MBM110)"
        if ws % (lay.etp * lay.ep * lay.pp):
            return "world size not divisible by ETP·EP·PP (MBM101)"
        if lay.etp > 1 and f.moe_ffn and f.moe_ffn % lay.etp:
            return "expert FFN width does not split over ETP (MBM102)"
        if lay.etp != 1 and f.moe_bias:
            return "MoE biases need ETP=1 (MBM110)"
    elif lay.ep > 1:
        return "EP>1 without experts (MBM110)"
    return stage_split_ok(f, lay.pp, lay.vpp, lay.first, lay.last)


def batch_ok(f: ModelFacts, lay: Layout, mbs: int) -> str | None:
    """MBM106 (GBS divisible by MBS·DP) and MBM105 (enough micro-batches for the interleaved schedule)."""
    if f.world_size is None or f.gbs is None:
        return None
    dp = f.world_size // (lay.tp * lay.pp * lay.cp)
    if dp < 1:
        return f"world size {f.world_size} is below TP·PP·CP (MBM101)"
    if f.gbs % (mbs * dp):
        return f"global batch {f.gbs} not divisible by MBS·DP = {mbs}·{dp} (MBM106)"
    m = f.gbs // (mbs * dp)
    if lay.vpp and lay.pp > 1:
        group = f.microbatch_group or lay.pp
        if group > m or group < lay.pp or 0 < m % group < lay.pp:
            return f"{m} micro-batches do not fill the interleaved schedule of PP{lay.pp} (MBM105)"
    return None


def setting_ok(f: ModelFacts, spec: Spec) -> str | None:
    """The memory knobs against the layout and the model (MBM203/205/206/211/305/307/410/502/503)."""
    lay, st = spec.layout, spec.setting
    rc = st.recompute
    if rc.granularity == "full" and f.cuda_graphs and not f.full_iteration_graph:
        return "full recompute with per-layer CUDA graphs (MBM305)"
    mods = set(rc.modules or ()) if rc.granularity == "selective" else set()
    if "moe_act" in mods and not f.moe_grouped_gemm:
        return "moe_act recompute needs moe_grouped_gemm (MBM203)"
    if "mla_up_proj" in mods and not f.mla:
        return "mla_up_proj recompute needs MLA (MBM203)"
    if st.act_offload:
        if lay.pp > 1:
            return "CPU offloading needs PP=1 (MBM205)"
        if rc.granularity is not None:
            return "CPU offloading does not work with recompute (MBM206)"
        if f.cuda_graphs and not f.full_iteration_graph:
            return "CPU offloading with CUDA graphs (MBM206)"
        if f.fine_grained_offload or not 0 < st.act_offload < f.num_layers:
            return "CPU offloading conflicts with fine-grained offloading or its layer count (MBM206)"
    if st.opt_offload:
        if not st.dist_opt or st.fsdp is not None:
            return "optimizer CPU offload needs the distributed optimizer, not searched with FSDP (MCore HybridDeviceOptimizer)"
        if not f.decoupled_wd:
            return "optimizer CPU offload needs decoupled weight decay (MBM211)"
    if st.fsdp is not None and (lay.pp > 1 or f.torch_fsdp2):
        return "Megatron-FSDP is searched with PP=1 and without torch FSDP2 (Bridge's FSDP recipes; MBM410)"
    if st.es and f.nccl_ub:
        return "expandable segments with nccl_ub (MBM307)"
    if st.regather:
        if f.peft_kind != "lora":
            return "re-gather needs LoRA (MBM503)"
        if lay.tp <= 1 or not lay.sp or f.cuda_graphs or rc.granularity == "full" or st.act_offload \
                or not f.lora_eligible_targets:
            return "re-gather would never apply (MBM502)"
    return None
