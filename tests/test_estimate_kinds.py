"""One estimate per new layer kind, checked against a hand computation (the formulas are those documented in
mbmem_lint/estimate/kinds.py; the numbers below are worked out here from the shapes, not read back from the code)."""

from __future__ import annotations

from typing import Any

from mbmem_lint.estimate.activations import layer_terms
from mbmem_lint.estimate.api import estimate_values
from mbmem_lint.estimate.inputs import read_inputs
from mbmem_lint.estimate.kinds import param_counts, vision_activation_bytes, vision_params
from mbmem_lint.estimate.params import layer_params, layer_sublayers

BASE: dict[str, Any] = {
    "model.num_layers": 4, "model.hidden_size": 256, "model.num_attention_heads": 4, "model.num_query_groups": 2,
    "model.kv_channels": 64, "model.ffn_hidden_size": 512, "model.vocab_size": 1024, "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm", "model.add_bias_linear": False, "model.add_qkv_bias": False,
    "model.share_embeddings_and_output_weights": False, "model.position_embedding_type": "rope",
    "model.seq_length": 1024, "train.micro_batch_size": 1, "train.global_batch_size": 8,
    "model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.hidden_dropout": 0.0,
    "model.attention_dropout": 0.0, "model.params_dtype": "torch.bfloat16", "ddp.grad_reduce_in_fp32": True,
    "model.bias_activation_fusion": True,  # the fused SwiGLU (the unfused path saves more: activations.py)
}
T = 1024  # tokens per microbatch on a rank (seq 1024, MBS 1, CP 1)


def _inputs(**extra: Any) -> Any:
    vals = {**BASE, **{k if k.startswith(("model.", "train.", "dataset.")) else f"model.{k}": v for k, v in extra.items()}}
    return read_inputs(vals.get, 8)


def test_gated_delta_net_and_gated_attention() -> None:
    inp = _inputs(experimental_attention_variant="gated_delta_net", linear_attention_freq=2, attention_output_gate=True,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
                  linear_conv_kernel_dim=4)
    s = inp.shape
    assert layer_sublayers(s, 0) == ["gdn", "mlp"] and layer_sublayers(s, 1) == ["attn", "mlp"]  # freq 2: layer 2 full
    # GDN mixer: qk = 2·32 = 64, v = 4·32 = 128, Hv = 4, h = 256.
    in_proj = 256 * (2 * 64 + 2 * 128 + 2 * 4)  # 100352
    conv = (2 * 64 + 128) * 4  # 1024
    gdn = in_proj + conv + 2 * 4 + 128 * 256 + 256 + 32  # + dt_bias, A_log; out_proj; input norm; out_norm
    mlp = 3 * 256 * 512 + 256
    assert gdn == 134440 and layer_params(s, 0).total == gdn + mlp
    # Gated attention: q (4·64) + gate (4·64) + k, v (2·2·64) from h; o; input norm; q/k norms off.
    attn = 256 * (4 * 64 + 4 * 64 + 2 * 2 * 64) + 4 * 64 * 256 + 256
    assert layer_params(s, 1).total == attn + mlp
    # GDN activations, TP 2 with SP (r = 1/2), bf16:
    t = layer_terms(inp, 0)
    gdn_bytes = (2 * T * 256 / 2  # input-norm input
                 + 2 * T * 256 / 2  # in_proj GEMM input (norm output)
                 + 2 * T * (2 * 64 + 2 * 128 + 2 * 4) / 2  # in_proj output qkvzba
                 + 2 * T * (2 * 64 + 128) / 2  # conv output
                 + 2 * T * 2 * 4 * 32 / 2  # q, k repeated to the 4 value heads
                 + 6 * T * 4 / 2  # g (fp32) and beta
                 + 2 * T * 128 / 2  # rule output
                 + 2 * T * 128 / 2)  # out_proj input
    mlp_bytes = 2 * T * 256 / 2 + 2 * T * 256 / 2 + 2 * T * 512 * 2 / 2 + 2 * T * 512 / 2
    assert sum(t.values()) == gdn_bytes + mlp_bytes
    # The gated attention layer saves 6 bytes per gate element besides the plain attention terms.
    plain = _inputs()
    assert sum(layer_terms(inp, 1).values()) - sum(layer_terms(plain, 1).values()) == 6 * T * 4 * 64 / 2
    # "gdn_norm_out" recompute drops the out_proj input of GDN layers only.
    rec = estimate_values({**BASE, "model.experimental_attention_variant": "gated_delta_net",
                           "model.linear_attention_freq": 2, "model.linear_num_key_heads": 2,
                           "model.linear_num_value_heads": 4, "model.linear_key_head_dim": 32,
                           "model.linear_value_head_dim": 32, "model.recompute_granularity": "selective",
                           "model.recompute_modules": ["gdn_norm_out"]}, world_size=8)
    base = estimate_values({**BASE, "model.experimental_attention_variant": "gated_delta_net",
                            "model.linear_attention_freq": 2, "model.linear_num_key_heads": 2,
                            "model.linear_num_value_heads": 4, "model.linear_key_head_dim": 32,
                            "model.linear_value_head_dim": 32}, world_size=8)

    def act(e: Any) -> int:
        return sum(c.bytes for c in e.stages[0].components if c.name.startswith("activations"))
    # 2 GDN layers x 2 B x T x 128 / TP, one microbatch in flight (PP 1).
    assert act(base) - act(rec) == 2 * 2 * T * 128 // 2


def test_dsa_indexer_next_to_mla() -> None:
    inp = _inputs(multi_latent_attention=True, q_lora_rank=128, kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16,
                  v_head_dim=32, experimental_attention_variant="dsa", dsa_indexer_n_heads=4, dsa_indexer_head_dim=16,
                  dsa_indexer_topk=64)
    s = inp.shape
    assert layer_sublayers(s, 0) == ["mla", "dsa", "mlp"]
    mla_only = _inputs(multi_latent_attention=True, q_lora_rank=128, kv_lora_rank=64, qk_head_dim=32,
                       qk_pos_emb_head_dim=16, v_head_dim=32)
    # wq_b 128 -> 4·16, wk 256 -> 16, k_norm LayerNorm(16) weight + bias, weights_proj 256 -> 4.
    assert layer_params(s, 0).total - layer_params(mla_only.shape, 0).total == 128 * 64 + 256 * 16 + 32 + 256 * 4
    # Saved: x and the q latent (gathered: full T), q (4·16), k (16), weights (4), top-k indices (int64).
    extra = 2 * T * (256 + 128 + 64 + 16 + 4) + 8 * T * 64
    assert sum(layer_terms(inp, 0).values()) - sum(layer_terms(mla_only, 0).values()) == extra


def test_deepseek_v4_attention() -> None:
    inp = _inputs(experimental_attention_variant="dsv4_hybrid", multi_latent_attention=True, q_lora_rank=64,
                  v_head_dim=32, o_groups=2, o_lora_rank=16, csa_compress_ratios=[0, 4, 128, 0],
                  enable_hyper_connections=True, num_residual_streams=2, dsa_indexer_n_heads=4,
                  dsa_indexer_head_dim=8, dsa_indexer_topk=16, num_moe_experts=4, moe_router_topk=2,
                  moe_ffn_hidden_size=64)
    s = inp.shape
    assert [layer_sublayers(s, i)[0] for i in range(4)] == ["dsv4:0", "dsv4:4", "dsv4:128", "dsv4:0"]
    h, a, d = 256, 4, 32
    base = (h + h * 64 + 64  # input norm, wq_a, q_norm
            + h * d + d  # wkv, kv_norm
            + 64 * a * d  # wq_b
            + a * d * 16 // 2 + 2 * 16 * h  # wo_a (per group), wo_b
            + a  # attention sink
            + 2 * (2 * h * (2 + 2) * 2 + (2 + 2) * 2 + 3))  # hyper-connection mixers (n = 2)
    compressed = lambda r: 2 * h * d + r * d + d + 64 * 4 * 8 + h * 4 + 2 * h * 8 + r * 8 + 8  # noqa: E731
    moe = h + h * 4 + 4 * 3 * h * 64  # pre-MLP norm, router, 4 experts (GLU)
    assert layer_params(s, 0).total == base + moe
    assert layer_params(s, 1).total == base + compressed(4) + moe
    assert layer_params(s, 2).total == base + compressed(128) + moe
    # Activations of a ratio-4 layer's attention (TP 2, SP): streams 2·2·T·n·h·r, norm input, q latent & norm,
    # kv, q (a·d / TP) + kv, O (a·d / TP) + lse, o-LoRA latent, compressed KV (two halves / 4), indexer.
    r = 0.5
    attn = (2 * 2 * T * 2 * h * r + 2 * T * h * r + 2 * T * (2 * 64 + 2 * d) + 2 * T * (a * d / 2 + d)
            + 2 * T * a * d / 2 + 4 * T * a / 2 + 2 * T * 2 * 16 + 2 * T * d * 2 / 4
            + 2 * T * (4 * 8 + 4) + 8 * T * 16)
    terms = layer_terms(inp, 1)
    assert sum(v for k, v in terms.items() if not k.startswith(("mlp", "moe", "router", "expert", "shared"))) == attn


def test_hybrid_latent_moe_layer() -> None:
    """Nemotron-3 style: one mixer per layer (M, *, E); MoE experts computed in the latent width."""
    inp = _inputs(hybrid_layer_pattern="M*E", mamba_num_heads=8, mamba_head_dim=32, mamba_state_dim=16,
                  mamba_num_groups=2, num_moe_experts=8, moe_router_topk=2, moe_ffn_hidden_size=128,
                  moe_latent_size=64, moe_shared_expert_intermediate_size=256)
    s = inp.shape
    assert [layer_sublayers(s, i) for i in range(3)] == [["mamba"], ["attn"], ["moe"]]
    # Latent MoE: 8 experts of 3·64·128 (GLU, in the latent), the h -> latent -> h projections, the shared
    # expert 3·256·256, norm and router.
    assert layer_params(s, 2).total == 8 * 3 * 64 * 128 + 2 * 256 * 64 + 3 * 256 * 256 + 256 + 256 * 8
    total, active = param_counts(inp)
    routed = 8 * 3 * 64 * 128
    assert total - active == routed * (1 - 2 / 8)


def test_sliding_window_layers_cost_what_global_ones_cost() -> None:
    """gemma-3 / EXAONE-4 window layers: the window is a mask of the same attention (flash or the unfused
    b·np·sq·sk scores), so parameters and saved tensors equal a global layer's."""
    glob = _inputs()
    local = _inputs(window_size=128, window_attn_skip_freq=6)
    assert layer_params(local.shape, 0).total == layer_params(glob.shape, 0).total
    assert layer_terms(local, 0) == layer_terms(glob, 0)


def _qwen_vision(frozen: bool) -> Any:
    vc = {"model_type": "qwen3_vl", "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3, "out_hidden_size": 256,
          "num_position_embeddings": 16, "deepstack_visual_indexes": [1], "hidden_act": "gelu_pytorch_tanh"}
    return _inputs(vision_config=vc, freeze_vision_model=frozen, **{"dataset.image_size": [64, 32],
                                                                    "dataset.num_images": 2})


def test_vision_tower() -> None:
    inp = _qwen_vision(frozen=False)
    v = inp.shape.ext.vision
    assert v.tokens == 2 * (64 // 16) * (32 // 16)  # 16 patches per sample
    h, f, m = 64, 128, 64 * 4
    block = 2 * 2 * h + (h * 3 * h + 3 * h + h * h + h) + (2 * h * f + f + h)  # LayerNorms, attention, GELU MLP
    patch = 3 * 2 * 16 * 16 * h + h
    merger = 2 * h + m * m + m + m * 256 + 256
    deepstack = 2 * m + m * m + m + m * 256 + 256
    assert vision_params(v) == 2 * block + patch + 16 * h + merger + deepstack
    # Activations per patch token and block (TP 2, no SP in the tower): norm in/out x2, q/k/v, O, MLP in, fc1 out,
    # fc2 in (bf16) + lse; plus the merger inputs.
    per_tok = 2 * (h + h + 3 * h / 2 + h / 2 + h / 2 + h + h + f / 2 + f / 2) + 4 * 4 / 2
    assert vision_activation_bytes(inp) == 16 * (2 * per_tok + 2 * h * 2)
    assert vision_activation_bytes(_qwen_vision(frozen=True)) == 0.0  # nothing before a frozen tower needs grads


def test_vision_tower_on_the_first_stage_frozen_or_trained() -> None:
    def run(frozen: bool, pp: int = 2) -> Any:
        vc = {"model_type": "qwen3_vl", "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 256}
        return estimate_values({**BASE, "model.pipeline_model_parallel_size": pp, "model.vision_config": vc,
                                "model.freeze_vision_model": frozen, "dataset.image_size": [64, 64],
                                "dataset.num_images": 1}, world_size=8)

    def comp(e: Any, stage: int, name: str) -> int:
        return sum(c.bytes for c in e.stages[stage].components if c.name.startswith(name))
    trained, frozen = run(False), run(True)
    assert comp(trained, 0, "vision tower activations") > 0 and comp(frozen, 0, "vision tower activations") == 0
    assert comp(trained, 1, "vision") == 0  # the tower lives on the first stage only
    # Frozen: weights only (no grads / optimizer state for the tower).
    assert comp(trained, 0, "weights") == comp(frozen, 0, "weights")
    assert comp(trained, 0, "gradients") > comp(frozen, 0, "gradients")
    assert comp(trained, 1, "gradients") == comp(frozen, 1, "gradients")


def test_frozen_language_model_trains_only_the_projection() -> None:
    vc = {"model_type": "qwen3_vl", "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 256}
    vals = {**BASE, "model.vision_config": vc, "model.freeze_language_model": True, "model.freeze_vision_model": True,
            "model.freeze_vision_projection": False, "dataset.image_size": [64, 64], "dataset.num_images": 1,
            "ddp.grad_reduce_in_fp32": True}
    est = estimate_values(vals, world_size=8)
    grads = next(c.bytes for c in est.stages[0].components if c.name == "gradients")
    m = 64 * 4
    proj = 2 * 64 + m * m + m + m * 256 + 256  # merger only (no deepstack)
    assert grads == int(proj / 2 * 4)  # TP 2, fp32 gradients of the projection alone


def test_pixtral_vision_blocks_count_no_biases() -> None:
    """transformers modeling_pixtral.py: PixtralAttention q/k/v/o and PixtralMLP gate/up/down have no bias."""
    from mbmem_lint.estimate.kinds import Vision, vision_param_split

    def tower(family: str, bias: bool) -> float:
        v = Vision(family=family, depth=1, hidden=4, ffn=8, heads=1, patch=2, temporal_patch=1, in_channels=3,
                   merge=2, out_hidden=6, positions=0, glu=True, rmsnorm=True, deepstack=0, frozen=False,
                   proj_frozen=False, tokens=1.0, bias=bias)
        return vision_param_split(v)[0]

    # block: 2 RMSNorms 2*4, attention 4*12 + 4*4, SwiGLU 3*4*8 = 168; patch conv 3*2*2*4 = 48 and ln_pre 4
    assert tower("pixtral", False) == 168 + 48 + 4
    # with biases (a generic ViT): + qkv 12 + proj 4 + gate/up 16 + down 4; patch bias 4, no ln_pre
    assert tower("generic", True) == 168 + 36 + 48 + 4
