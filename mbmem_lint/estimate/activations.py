"""Activation bytes saved for backward, per layer and microbatch (Korthikanti et al. 2022, with the real
architecture): each sublayer returns named terms so recompute and offload can drop exactly what they drop.

Symbols: T = seq·mbs/CP tokens on this rank, t = TP, ``r`` = 1/t under SP (sequence-sharded
replicated tensors) else 1. 16-bit activations (2 B); GEMM inputs TE stores in FP8 are 1 B.
"""

from __future__ import annotations

from mbmem_lint.estimate.inputs import Inputs
from mbmem_lint.estimate.params import layer_sublayers

# Selective-recompute module -> activation terms it frees (MCore TransformerConfig.recompute_modules,
# transformer_layer.py TransformerLayer.__init__/_forward_mlp in Core 0.19.2):
# - "core_attn": the attention is checkpointed with q, k, v as inputs, so only its output and softmax
#   stats (and the s^2 internals of unfused attention) are dropped; the output survives when the
#   projection GEMM saves it (bf16).
# - "layernorm": only norms that are separate modules (``not isinstance(input_layernorm, IdentityOp)``).
#   The TE spec fuses the attention and dense-MLP norms into TELayerNormColumnParallelLinear (the norm
#   modules are IdentityOp), so it is a no-op there; it applies to the MoE pre-MLP TENorm and MLA's input norm.
# - "mlp": the whole dense MLP runs under (te_)checkpoint with its input kept: everything inside goes,
#   including fc1's saved norm output; a no-op on MoE layers.
RECOMPUTE_DROPS: dict[str, tuple[str, ...]] = {
    "core_attn": ("core_attn_out", "core_attn_internal"),
    "layernorm": ("moe_norm_out", "mla_norm_out"),
    "mlp": ("mlp_fc1_in", "mlp_fc1_out", "mlp_act_out", "mlp_glu_unfused", "lora_fc1", "lora_fc1_ln_out",
            "lora_fc2"),
    "moe_act": ("moe_act", "moe_glu_unfused", "shared_act", "shared_glu_unfused"),
    "moe": ("router", "expert_fc1_in", "expert_fc1_out", "moe_act", "moe_glu_unfused", "moe_probs",
            "shared_fc1_out", "shared_act", "shared_glu_unfused"),
    "shared_experts": ("shared_fc1_out", "shared_act", "shared_glu_unfused"),
    "mla_up_proj": ("mla_qkv",),
    "gdn_norm_out": ("gdn_norm_out",),  # ssm/gated_delta_net/common.py L262-265 (CheckpointWithoutOutput)
}
# Fine-grained activation offloading module -> terms moved to host memory (MCore offload_modules).
OFFLOAD_TERMS: dict[str, tuple[str, ...]] = {
    "attn_norm": ("attn_norm",),
    "qkv_linear": ("qkv_linear", "mla_norm_out"),
    "core_attn": ("core_attn", "mla_qkv", "core_attn_out"),
    "attn_proj": ("attn_proj",),
    "mlp_norm": ("mlp_norm", "moe_norm_out"),
    "expert_fc1": ("expert_fc1_in",),
    "moe_act": ("moe_act",),
}


def tokens(inp: Inputs) -> float:
    return inp.train.seq * inp.train.mbs / inp.par.cp


def lora_regather_active(inp: Inputs, surface: str) -> bool:
    """Bridge ParallelLinearAdapter._sequence_parallel_input_regather_eligibility (peft/utils.py): SP, TP > 1,
    no CUDA graphs, no full recompute, no selective ``mlp`` recompute over fc1, no CPU activation offload."""
    lora, p = inp.peft, inp.par
    if lora is None or not lora.regather or not p.sp or p.tp <= 1:
        return False
    if inp.rt.graph_impl not in ("none", "") or inp.rec.granularity == "full":
        return False
    if inp.off.cpu_offloading and inp.off.cpu_activations:
        return False
    return not (surface == "fc1" and inp.rec.granularity == "selective" and "mlp" in inp.rec.modules)


def _score_dims(inp: Inputs) -> tuple[float, float]:
    """(b·np, s) of one layer's attention scores on this rank: the batch times the heads TP keeps, and the
    sequence CP keeps (sq = sk)."""
    return inp.train.mbs * inp.shape.heads / inp.par.tp, inp.train.seq / inp.par.cp


def attention_scores(inp: Inputs) -> float:
    """Elements of one layer's attention-score matrix on this rank, b·np·sq·sk (CP splits the sequence)."""
    attn_batches, sl = _score_dims(inp)
    return attn_batches * sl * sl


def core_attn_checkpointed(inp: Inputs) -> bool:
    return inp.rec.granularity == "selective" and "core_attn" in inp.rec.modules


def fused_softmax_applies(inp: Inputs) -> bool:
    """MCore FusedScaleMaskSoftmax.is_kernel_available (fusions/fused_softmax.py L238-268, Core 0.19.2): the
    fused kernel needs masked_softmax_fusion, 16 < sk <= 4096, sq and sk multiples of 4 and b·np a multiple of
    4 (the causal kernel's batch_per_block is 4 for sk > 128). Otherwise the torch fallback runs."""
    attn_batches, sl = _score_dims(inp)
    return (inp.rt.softmax_fusion and 16 < sl <= 4096 and sl % 4 == 0
            and attn_batches == int(attn_batches) and int(attn_batches) % 4 == 0)


def unfused_attention_internal(inp: Inputs, kind: str) -> float:
    """Bytes the unfused (local) DotProductAttention saves beyond q, k, v and its output, per layer and microbatch
    (dot_product_attention.py L160-240, fused_softmax.py forward_torch_softmax L299-336):
    - the softmax output over b·np·sq·sk: 2 B when the fused kernel runs (it saves its bf16 result, which the
      probs·V bmm saves too) or when the softmax runs in bf16; with the torch fallback in fp32 (the default,
      attention_softmax_in_fp32) the fp32 softmax output (4 B, saved by softmax) *and* its bf16 cast (2 B,
      saved by the bmm) — measured on H200: 3410 MiB saved per layer vs 1320 MiB under the 2 B model (case F);
    - attention dropout: its 1 B mask and its 2 B output (saved by the bmm instead of the probs);
    - under GQA, K and V repeat_interleave'd to all heads (saved by the two bmms instead of q/k/v's groups).
    """
    s, p = inp.shape, inp.par
    T, t = tokens(inp), p.tp
    probs = attention_scores(inp)
    dropout = s.attention_dropout > 0
    if fused_softmax_applies(inp) or not inp.rt.softmax_fp32:
        per = 2 + (3 if dropout else 0)
    else:
        per = 6 + (1 if dropout else 0)
    out = probs * per
    if kind == "attn" and s.heads > s.groups:
        out += 2 * 2 * T * (s.heads - s.groups) * s.kv_channels / t
    return out


def unfused_glu_bytes(elems: float, weighted: bool) -> float:
    """Bytes the unfused GLU saves beyond its input, for ``elems`` output elements (tokens x ffn on this rank).

    Without bias_activation_fusion (MCore TransformerConfig default False, transformer_config.py L482) the MLP runs
    ``glu`` in eager PyTorch (mlp.py L320-331; experts.py L858-876 for routed experts): ``torch.chunk`` gives views
    of the fc1 output (kept alive by the activation's saved input, counted as the fc1 output), then
    ``activation_func(x_glu) * (x_linear + glu_linear_offset)`` saves both factors of the product: the activation
    output and the offset sum (a new tensor even for offset 0.0), 2 B each. Routed experts then multiply by the
    fp32 permuted probs (``intermediate_parallel * permuted_probs``), which saves the product too. The fused
    kernels (bias_swiglu / weighted_bias_swiglu) save only their input.
    """
    return 2 * elems * (3 if weighted else 2)


def qk_norm_input_bytes(inp: Inputs) -> float:
    """q/k LayerNorm (qk_layernorm): attention.py get_query_key_value_tensors L1921-1924 normalises the split query
    and key; TE's norm saves a contiguous copy of its input (ops/basic/rmsnorm.py L189, L209 in TE 2.20), so the
    pre-norm q and k, 2·T·(a+g)·d/TP bytes, stay besides the normalised (and RoPE'd) q and k attention saves."""
    s = inp.shape
    return 2 * tokens(inp) * (s.heads + s.groups) * s.kv_channels / inp.par.tp


def mla_value_dim(inp: Inputs) -> int:
    """Head dim of the value MLA's core attention sees: with packed sequences (THD) MCore pads v to the query head
    dim (qk + rope) before attention and trims the output after (multi_latent_attention.py
    _prepare_mla_core_attention_value L85-99, _trim_mla_core_attention_output L102-108)."""
    s = inp.shape
    if inp.train.packed_thd and s.qk_head_dim + s.qk_pos_dim != s.v_head_dim:
        return s.qk_head_dim + s.qk_pos_dim
    return s.v_head_dim


def layer_terms(inp: Inputs, index: int) -> dict[str, float]:
    """Named activation terms (bytes) of one layer for one microbatch, before recompute/offload.

    TE saves a GEMM's input only when the weight needs a gradient (``weight.requires_grad``), so under PEFT
    the frozen base GEMMs save nothing and the LoRA-A adapters save their own inputs instead.
    """
    s, p = inp.shape, inp.par
    T, t = tokens(inp), p.tp
    r = 1.0 / t if p.sp else 1.0
    g8 = 1.0 if inp.prec.fp8 else 2.0  # GEMM-input bytes
    h = s.hidden
    drop = s.hidden_dropout > 0
    lora = inp.peft
    ext = s.ext
    # PEFT, or a VL model with its language model frozen (freeze_language_model): the base GEMMs save no inputs.
    frozen = lora is not None or (ext is not None and ext.freeze_lm)
    targets = set(lora.targets) if lora is not None else set()
    out: dict[str, float] = {}

    def add(k: str, v: float) -> None:
        out[k] = out.get(k, 0.0) + v

    for kind in layer_sublayers(s, index):
        if kind == "gdn" or kind == "dsa" or kind.startswith("dsv4:"):
            from mbmem_lint.estimate import kinds

            if kind == "gdn":
                kinds.gdn_terms(inp, add, frozen)
            elif kind == "dsa":
                kinds.dsa_terms(inp, add)
            else:
                kinds.dsv4_terms(inp, add, int(kind[5:]))
            continue
        if kind in ("attn", "mla"):
            add("attn_norm", 2 * T * h * r)  # norm input, for the norm's backward
            if kind == "attn":
                if not frozen:
                    add("qkv_linear", g8 * T * h * r)  # fused norm output, for the qkv wgrad
                a, g, d = s.heads, s.groups, s.kv_channels
                add("core_attn", 2 * T * (a + 2 * g) * d / t)  # q, k, v
                if s.qk_layernorm:
                    add("qk_norm_in", qk_norm_input_bytes(inp))
                if core_attn_checkpointed(inp) and not inp.rt.fused_qkv_rope and (s.rotary or s.qk_layernorm):
                    # The checkpoint saves its inputs q, k, v. v is a torch.split view of the fused QKV output
                    # (attention.py get_query_key_value_tensors L1903), so that whole output stays alive; q and
                    # k are new tensors once RoPE or the q/k norms ran. Measured on H200: +20 MiB per layer at
                    # Llama-3.2-1B shape, seq 4096 (bench/gpu_calibration case E).
                    add("core_attn_ckpt_qkv", 2 * T * (a + g) * d / t)
                o_elems = o_att = T * a * d / t
                if ext is not None and ext.attn_gate:
                    # x * sigmoid(gate.float()) (attention.py L1605-1628): the fp32 sigmoid output, and the gated
                    # result as the projection's input besides O.
                    add("attn_gate", 6 * o_elems)
            else:
                # MLA (multi_latent_attention.py get_query_key_value_tensors, Core 0.19.2): the input norm's
                # output feeds the replicated down-projection(s); the latents q_compressed / kv_compressed are
                # sequence-sharded (SP) and saved by the (fused) latent norm + column-parallel up-projections
                # (input and norm output). The up-projection outputs are not saved: RoPE (fused or not) and
                # torch.cat save no activations, so what survives is query/key/value, saved by the fused
                # attention. "mla_up_proj" recompute runs qkv_up_proj_and_rope_apply under
                # CheckpointWithoutOutput and frees query/key/value after core attention (L972-975, L454-456);
                # the checkpoint inputs (latents, k_pos_emb) are kept.
                add("mla_norm_out", 2 * T * h * r)
                a, qk, pe, v = s.heads, s.qk_head_dim, s.qk_pos_dim, s.v_head_dim
                add("mla_down", 2 * 2 * T * r * ((s.q_lora_rank or 0) + s.kv_lora_rank) + 2 * T * pe)
                v_att = mla_value_dim(inp)
                add("mla_qkv", 2 * T * a * (2 * (qk + pe) + v_att) / t)  # query, key (qk+pe each), value
                o_elems = T * a * v / t
                o_att = T * a * v_att / t
            lse = 4 * T * s.heads / t
            # The attention output O (bf16) is saved by flash attention and, as the same tensor, by the
            # projection GEMM when it runs in bf16 and needs it; FP8 saves its own 1-byte copy. Under MLA with
            # a padded value (THD), attention saves the padded O and the projection a trimmed copy.
            proj_saves_o = (not frozen and not inp.prec.fp8) or (frozen and "linear_proj" in targets)
            if proj_saves_o and o_att == o_elems:
                add("attn_proj", 2 * o_elems)
                add("core_attn_out", lse)
            else:
                add("core_attn_out", 2 * o_att + lse)
                if proj_saves_o:
                    add("attn_proj", 2 * o_elems)
                elif inp.prec.fp8 and not frozen:
                    add("attn_proj", o_elems)
            if not inp.rt.flash:
                add("core_attn_internal", unfused_attention_internal(inp, kind))
            if drop:
                add("attn_dropout", T * h * r)
            if lora is not None:
                n = sum(1 for x in targets if x in ("linear_qkv", "linear_q", "linear_k", "linear_v"))
                if n and kind == "attn":
                    regather = lora_regather_active(inp, "qkv")
                    share = 1.0 / t if regather else 1.0
                    add("lora_qkv", 2 * T * h * share * (1 if lora.kind != "canonical_lora" else n))
                    if p.sp and not regather:
                        # Bridge makes the adapted TE LayerNormLinear return its norm output (peft/utils.py L600),
                        # so TE keeps its local shard although the weight is frozen (layernorm_linear.py L427-429,
                        # L526-535); the LoRA-A saves the gathered copy. With re-gather they are one tensor.
                        add("lora_qkv_ln_out", g8 * T * h * r)
        elif kind in ("mlp", "moe"):
            add("mlp_norm", 2 * T * h * r)
            glu = 2 if s.glu else 1
            if kind == "mlp":
                if not frozen:
                    add("mlp_fc1_in", g8 * T * h * r)
                add("mlp_fc1_out", 2 * T * s.ffn * glu / t)  # activation-function input
                if s.glu and not s.glu_fused:
                    add("mlp_glu_unfused", unfused_glu_bytes(T * s.ffn / t, weighted=False))
                if not frozen:
                    add("mlp_act_out", g8 * T * s.ffn / t)  # fc2 input
                elif "linear_fc2" in targets:
                    add("lora_fc2", 2 * T * s.ffn / t)
                if lora is not None and any(x.startswith("linear_fc1") for x in targets):
                    regather = lora_regather_active(inp, "fc1")
                    share = 1.0 / t if regather else 1.0
                    add("lora_fc1", 2 * T * h * share)
                    if p.sp and not regather:
                        add("lora_fc1_ln_out", g8 * T * h * r)  # as lora_qkv_ln_out
            else:
                # Routed experts, alltoall or flex dispatcher (moe/token_dispatcher.py, experts.py, Core 0.19.2).
                # Tokens on this rank: T·r (SP); each goes to topk experts, so with balanced routing every
                # EP rank receives T·r·topk copies, all-gathered over ETP (dispatch_postprocess L744).
                # Saved for backward, per copy: the grouped fc1 GEMM input (TEGroupedMLP.forward L791),
                # the fc1 output (saved by the weighted SwiGLU, L830), the activation output (fc2 input;
                # freed by "moe_act" recompute, CheckpointWithoutOutput L882-893) and the fp32 permuted prob.
                # permute/unpermute (fused or index_select/scatter_add) and all_to_all save only indices;
                # unpermute runs without probs (probs are applied in the activation), so the combine side
                # saves nothing (combine_postprocess L884).
                # Under PEFT the frozen grouped GEMMs save no input; an adapter on the expert linear saves the
                # same tensor (ParallelLinearAdapter input), so the input is kept iff the linear is adapted.
                local = T * r
                routed = local * s.topk * p.etp
                keep_fc1 = not frozen or any(x.startswith("linear_fc1") for x in targets)
                keep_fc2 = not frozen or "linear_fc2" in targets
                add("moe_norm_out", 2 * T * h * r)  # separate pre-MLP TENorm output (router + dispatch input)
                add("router", 8 * local * s.num_experts)  # fp32 logits and scores
                if keep_fc1:
                    add("expert_fc1_in", g8 * routed * s.moe_latent if s.moe_latent else g8 * routed * h)
                add("expert_fc1_out", 2 * routed * s.moe_ffn * glu / p.etp)
                if s.glu and not s.glu_fused:
                    add("moe_glu_unfused", unfused_glu_bytes(routed * s.moe_ffn / p.etp, weighted=True))
                if keep_fc2:
                    add("moe_act", g8 * routed * s.moe_ffn / p.etp)
                add("moe_probs", 4 * routed)
                if s.shared_ffn:
                    add("shared_fc1_out", 2 * T * s.shared_ffn * glu / t)
                    if s.glu and not s.glu_fused:
                        add("shared_glu_unfused", unfused_glu_bytes(T * s.shared_ffn / t, weighted=False))
                    if keep_fc2:
                        add("shared_act", g8 * T * s.shared_ffn / t)
            if drop:
                add("mlp_dropout", T * h * r)
        elif kind == "mamba":
            di = s.mamba_heads * s.mamba_head_dim
            gs = s.mamba_groups * s.mamba_state
            add("attn_norm", 2 * T * h * r)
            if not frozen:
                add("mamba_in", g8 * T * h * r)
            # MambaMixer training path (ssm/mamba_mixer.py _ssm_training L727-781, Core 0.19.2) calls mamba_ssm's
            # memory-efficient mamba_split_conv1d_scan_combined, which saves the in_proj output zxBCdt
            # (2·d_inner + 2·groups·state + heads per token) and the pre-gate SSM output out_x (d_inner), and
            # recomputes conv/chunk states in backward; MCore's separate gated RMSNorm then saves its input y
            # (d_inner) and out_proj saves the norm output (d_inner, GEMM-input bytes). All TP-sharded.
            add("mamba_internal", 2 * T * (2 * di + 2 * gs + s.mamba_heads + di + di) / t)
            add("mamba_out_proj_in", g8 * T * di / t)
            if drop:
                add("mlp_dropout", T * h * r)
    return out


def layer_input_bytes(inp: Inputs) -> float:
    """What full recompute keeps per checkpoint: the layer (group) input."""
    r = 1.0 / inp.par.tp if inp.par.sp else 1.0
    return 2 * tokens(inp) * inp.shape.hidden * r


def selective_drops(inp: Inputs) -> set[str]:
    if inp.rec.granularity != "selective":
        return set()
    dropped: set[str] = set()
    for m in inp.rec.modules:
        dropped.update(RECOMPUTE_DROPS.get(m, ()))
    return dropped


def offloaded_terms(inp: Inputs) -> set[str]:
    if not inp.off.fine_grained:
        return set()
    out: set[str] = set()
    for m in inp.off.modules:
        out.update(OFFLOAD_TERMS.get(m, ()))
    return out


def embedding_activation(inp: Inputs) -> float:
    """First stage, per microbatch: token ids/positions (int64) + embedding dropout mask."""
    T = tokens(inp)
    r = 1.0 / inp.par.tp if inp.par.sp else 1.0
    return 8 * T + (T * inp.shape.hidden * r if inp.shape.hidden_dropout > 0 else 0)


def output_activation(inp: Inputs) -> float:
    """Last stage, one microbatch: final-norm input and output-layer input (2·2T·h·r) and the loss's peak over the
    logits. MCore's cross entropies (fused or not, tensor_parallel/cross_entropy.py L25, L62) cast the bf16 logits
    to fp32 and keep that as the softmax: 2 + 4 bytes per logit while both exist (6·T·V/t). TE's
    parallel_cross_entropy (cross_entropy_fusion_impl="te") keeps a bf16 copy of the logits for backward (TE 2.20
    triton/cross_entropy.py L40-44): 2 + 2 bytes per logit (4·T·V/t)."""
    T, t = tokens(inp), inp.par.tp
    r = 1.0 / t if inp.par.sp else 1.0
    heads = 1 + inp.shape.mtp_layers
    per_logit = 4 if inp.rt.ce_impl == "te" else 6
    return 4 * T * inp.shape.hidden * r * heads + per_logit * T * inp.shape.vocab / t


def deferred_wgrad_bytes(inp: Inputs) -> float:
    """Last stage under ``defer_embedding_wgrad_compute``: the output layer appends its input (SP shard, 2·T·h·r)
    to ``embedding_activation_buffer`` in forward and its bf16 logit gradient (2·T·V/t) to ``grad_output_buffer`` in
    backward, for up to ``wgrad_deferral_limit`` microbatches (0: all), and computes the weight gradient only in
    the pipeline flush (tensor_parallel/layers.py L1149-1154, L604-607; schedules.py
    finish_embedding_wgrad_compute L886-898). The buffers fill while the stage still holds its in-flight
    activations."""
    if not inp.rt.defer_embedding_wgrad:
        return 0.0
    T, t = tokens(inp), inp.par.tp
    r = 1.0 / t if inp.par.sp else 1.0
    nmb = inp.train.num_microbatches
    limit = inp.rt.wgrad_deferral_limit
    if nmb is None:
        count = float(limit) if limit else 1.0
    else:
        count = float(min(limit, nmb) if limit else nmb)
    return count * (2 * T * inp.shape.hidden * r + 2 * T * inp.shape.vocab / t)
