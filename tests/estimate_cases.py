"""Shared validation cases for tests/test_estimate_validation.py and bench/estimate_validation.py.

Published multi-GPU measurements (peak allocated, as Megatron Bridge's memory report prints it, in 1e9 B):
- Llama3-70B SFT on 32x H100, FP8 current scaling: Megatron Bridge PR #3107 (perf experiment table, closed PR),
  quoted by the `nemo-mbridge-perf-memory-tuning` and activation-recompute skills (NVIDIA/skills).
- LoRA with sequence-parallel input re-gather on H100: Megatron Bridge PR #4581, same skill's results table.
Each row runs the Megatron Bridge 0.6.2 recipe the measurement names, with the values its sources state;
values they do not state (PR #4581: GPU count, MoE sequence length, LoRA rank and targets, MBS) are the
assumptions written next to LORA_COMMON. Model settings that Bridge's model bridges set (bias_activation_fusion,
cross-entropy fusion, RoPE fusion) are read from the 0.6.2 sources cited next to each value.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.estimate.api import estimate_values

LLAMA3_70B: dict[str, Any] = {
    "model.num_layers": 80,
    "model.hidden_size": 8192,
    "model.ffn_hidden_size": 28672,
    "model.num_attention_heads": 64,
    "model.num_query_groups": 8,
    "model.kv_channels": 128,
    "model.vocab_size": 128256,
    "model.should_pad_vocab": True,
    "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm",
    "model.add_bias_linear": False,
    "model.share_embeddings_and_output_weights": False,
    "model.position_embedding_type": "rope",
    "model.hidden_dropout": 0.0,
    "model.attention_dropout": 0.0,
}
# llama3_70b_sft_32gpu_h100_fp8cs_config (perf_recipes/llama/h100/llama3.py:338)
LLAMA_SFT = {
    **LLAMA3_70B,
    "model.seq_length": 4096,
    "train.micro_batch_size": 1,
    "train.global_batch_size": 32,
    "model.tensor_model_parallel_size": 4,
    "model.pipeline_model_parallel_size": 4,
    "model.virtual_pipeline_model_parallel_size": 5,
    "model.sequence_parallel": True,
    "optimizer.use_distributed_optimizer": True,
    "ddp.grad_reduce_in_fp32": False,
    "model.params_dtype": "torch.bfloat16",
    "model.fp8": "hybrid",
    "model.fp8_recipe": "tensorwise",
    "model.fp8_param": True,  # _perf_precision("fp8_cs") -> fp8_param_gather=True (resolved recipe)
    "ddp.fp8_param_gather": True,
    "model.disable_parameter_transpose_cache": True,
    "model.recompute_granularity": "selective",
    "model.recompute_modules": ["core_attn"],
    "model.cuda_graph_impl": "transformer_engine",
    "model.cuda_graph_scope": ["mlp"],
    "env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "env_vars.NCCL_NVLS_ENABLE": 0,
    # Resolved 0.6.2 recipe: llama_bridge.py L67 (bias_activation_fusion), _perf_precision / fp8 current
    # scaling preset (cross_entropy_fusion_impl="te", apply_rope_fusion), CommOverlapConfig(tp_comm_overlap=True,
    # defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22) at llama3.py:361-365.
    "model.bias_activation_fusion": True,
    "model.apply_rope_fusion": True,
    "model.cross_entropy_loss_fusion": True,
    "model.cross_entropy_fusion_impl": "te",
    "model.tp_comm_overlap": True,
    "model.defer_embedding_wgrad_compute": True,
    "model.wgrad_deferral_limit": 22,
}
QWEN3_8B: dict[str, Any] = {
    "model.num_layers": 36,
    "model.hidden_size": 4096,
    "model.ffn_hidden_size": 12288,
    "model.num_attention_heads": 32,
    "model.num_query_groups": 8,
    "model.kv_channels": 128,
    "model.vocab_size": 151936,
    "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm",
    "model.add_bias_linear": False,
    "model.qk_layernorm": True,
    "model.share_embeddings_and_output_weights": False,
    "model.position_embedding_type": "rope",
    "model.hidden_dropout": 0.0,
    "model.attention_dropout": 0.0,
    # qwen3_bridge.py / qwen3_moe_bridge.py do not set bias_activation_fusion: MCore's default False
    # (transformer_config.py L482), so the GLU runs unfused (mlp.py L320-331, experts.py L858-876).
    "model.bias_activation_fusion": False,
    "model.cross_entropy_loss_fusion": True,  # GPTModelProvider (gpt_provider.py L204), native implementation
}
QWEN3_30B_A3B = {
    **QWEN3_8B,
    "model.num_layers": 48,
    "model.hidden_size": 2048,
    "model.ffn_hidden_size": 6144,
    "model.num_query_groups": 4,
    "model.num_moe_experts": 128,
    "model.moe_router_topk": 8,
    "model.moe_ffn_hidden_size": 768,
}
GPT_OSS_120B = {
    "model.num_layers": 36,
    "model.hidden_size": 2880,
    "model.ffn_hidden_size": 2880,
    "model.num_attention_heads": 64,
    "model.num_query_groups": 8,
    "model.kv_channels": 64,
    "model.vocab_size": 201088,
    "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm",
    "model.add_bias_linear": True,
    "model.share_embeddings_and_output_weights": False,
    "model.position_embedding_type": "yarn",
    "model.hidden_dropout": 0.0,
    "model.attention_dropout": 0.0,
    "model.num_moe_experts": 128,
    "model.moe_router_topk": 4,
    "model.moe_ffn_hidden_size": 2880,
    "model.bias_activation_fusion": True,  # gpt_oss_bridge.py L73
    "model.cross_entropy_loss_fusion": True,
}
# LoRA runs (Megatron Bridge PR #4581): bf16, PEFT recipes disable the distributed optimizer, SP on,
# selective core_attn recompute, LoRA dim 32 on the default targets. Assumed: 1 node (8 GPUs), seq 8192, MBS 1.
LORA_COMMON: dict[str, Any] = {
    "model.seq_length": 8192,
    "train.micro_batch_size": 1,
    "train.global_batch_size": 8,
    "model.sequence_parallel": True,
    "model.params_dtype": "torch.bfloat16",
    "optimizer.use_distributed_optimizer": False,
    "ddp.grad_reduce_in_fp32": True,
    "model.recompute_granularity": "selective",
    "model.recompute_modules": ["core_attn"],
    "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"},
    "peft.dim": 32,
    "env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}


# Where Megatron Bridge 0.6.2 has a PEFT recipe for the same model at the same parallel layout, the values the
# measurement does not state come from it: qwen3_30b_a3b_peft_4gpu_h100_bf16_config (recipes/qwen/h100/
# qwen3_moe.py:685, TP4 EP4 SP, 4 GPUs) adapts attention only ("MoE LoRA uses smaller dim and specific target
# modules", L721-727: dim 8, alpha 16, linear_qkv + linear_proj) and sets no recompute. Its sequence length
# (2048) is not used: the measured re-gather saving, 2·2·T·h per layer and adapted column-parallel surface, fixes
# T = 8192 (1.611 GB predicted vs 1.569 measured; 0.40 GB at 2048). Qwen3-8B (0.6.2 recipe: TP1) and GPT-OSS-120B
# (0.6.2 recipe: TP1 EP8) have no recipe at the measured layout and keep the assumptions above.
QWEN3_30B_A3B_PEFT_RECIPE: dict[str, Any] = {
    "peft.target_modules": ["linear_qkv", "linear_proj"],
    "peft.dim": 8,
    "model.recompute_granularity": None,
    "model.recompute_modules": None,
}


def _lora(model: dict[str, Any], tp: int, ep: int, regather: bool, recipe: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    return {
        **model,
        **LORA_COMMON,
        **(recipe or {}),
        "model.tensor_model_parallel_size": tp,
        "model.expert_model_parallel_size": ep,
        "peft.sequence_parallel_input_regather": regather,
    }


# (name, values, world size, measured peak as printed in the source, "GB")
MEASURED: list[tuple[str, dict[str, Any], int, float]] = [
    ("llama3-70b sft TP4 PP4 VPP5 (baseline)", LLAMA_SFT, 32, 58.8),
    ("llama3-70b sft TP4 PP8 VPP5", {**LLAMA_SFT, "model.pipeline_model_parallel_size": 8}, 32, 53.2),
    ("llama3-70b sft TP8 PP4 VPP5", {**LLAMA_SFT, "model.tensor_model_parallel_size": 8}, 32, 50.2),
    (
        "llama3-70b sft TP4 PP4 VPP10",
        {**LLAMA_SFT, "model.virtual_pipeline_model_parallel_size": 10},
        32,
        60.2,
    ),
    ("llama3-70b sft recompute mlp", {**LLAMA_SFT, "model.recompute_modules": ["mlp"]}, 32, 55.6),
    (
        "llama3-70b sft recompute core_attn,layernorm",
        {**LLAMA_SFT, "model.recompute_modules": ["core_attn", "layernorm"]},
        32,
        59.6,
    ),
    ("qwen3-8b lora TP2 seq8192", _lora(QWEN3_8B, 2, 1, False), 8, 47.545),
    ("qwen3-8b lora TP2 seq8192 re-gather", _lora(QWEN3_8B, 2, 1, True), 8, 42.814),
    ("qwen3-30b-a3b lora TP4 EP4", _lora(QWEN3_30B_A3B, 4, 4, False, QWEN3_30B_A3B_PEFT_RECIPE), 4, 29.890),
    ("qwen3-30b-a3b lora TP4 EP4 re-gather", _lora(QWEN3_30B_A3B, 4, 4, True, QWEN3_30B_A3B_PEFT_RECIPE), 4, 28.321),
    ("gpt-oss-120b lora TP2 EP8", _lora(GPT_OSS_120B, 2, 8, False), 8, 52.185),
    ("gpt-oss-120b lora TP2 EP8 re-gather", _lora(GPT_OSS_120B, 2, 8, True), 8, 51.371),
]

# Where each measured row comes from, and the configuration it ran (docs/estimate.md prints these).
PR3107 = ("Megatron Bridge PR #3107 (H100 perf experiment table), as quoted by NVIDIA/skills "
          "nemo-mbridge-perf-memory-tuning and the activation-recompute skill")
PR4581 = ("Megatron Bridge PR #4581 (LoRA sequence-parallel input re-gather), as quoted by NVIDIA/skills "
          "nemo-mbridge-perf-memory-tuning")
SOURCES: dict[str, tuple[str, str]] = {
    "llama3-70b sft TP4 PP4 VPP5 (baseline)": (PR3107, "llama3_70b_sft_32gpu_h100_fp8cs_config: 32x H100, FP8-CS, "
                                               "TP4 PP4 VPP5 DP2, SP, MBS1 GBS32, seq 4096, core_attn recompute"),
    "llama3-70b sft TP4 PP8 VPP5": (PR3107, "same, TP4 PP8 VPP5 DP1"),
    "llama3-70b sft TP8 PP4 VPP5": (PR3107, "same, TP8 PP4 VPP5 DP1"),
    "llama3-70b sft TP4 PP4 VPP10": (PR3107, "same, TP4 PP4 VPP10 DP2"),
    "llama3-70b sft recompute mlp": (PR3107, "baseline with recompute_modules=[mlp]"),
    "llama3-70b sft recompute core_attn,layernorm": (PR3107, "baseline with recompute_modules=[core_attn, layernorm]"),
    "qwen3-8b lora TP2 seq8192": (PR4581, "Qwen3-8B LoRA, TP2, SP, seq 8192 (assumed: 8x H100, MBS1, dim 32, "
                                  "default targets, core_attn recompute)"),
    "qwen3-8b lora TP2 seq8192 re-gather": (PR4581, "same, sequence_parallel_input_regather=True"),
    "qwen3-30b-a3b lora TP4 EP4": (PR4581, "Qwen3-30B-A3B LoRA, TP4 EP4, SP; from the 0.6.2 recipe at this layout: "
                                   "4x H100, dim 8 on linear_qkv + linear_proj, no recompute; seq 8192 (from the "
                                   "measured re-gather saving), MBS1"),
    "qwen3-30b-a3b lora TP4 EP4 re-gather": (PR4581, "same, sequence_parallel_input_regather=True"),
    "gpt-oss-120b lora TP2 EP8": (PR4581, "GPT-OSS-120B LoRA, TP2 EP8, SP (assumed: 8x H100, seq 8192, MBS1, "
                                  "dim 32, default targets)"),
    "gpt-oss-120b lora TP2 EP8 re-gather": (PR4581, "same, sequence_parallel_input_regather=True"),
}

# Dense configs modelled the same way by both estimators: bf16 params, fp32 grads, Adam, LayerNorm, no biases.
_PARITY_BASE = {
    **LLAMA3_70B,
    "model.normalization": "LayerNorm",
    "model.should_pad_vocab": False,
    "model.params_dtype": "torch.bfloat16",
    "ddp.grad_reduce_in_fp32": True,
    "model.seq_length": 4096,
    "train.micro_batch_size": 1,
}
PARITY: list[tuple[str, dict[str, Any], int, int]] = [
    (
        "llama3-70b TP8 PP1 no dist-opt",
        {
            **_PARITY_BASE,
            "model.tensor_model_parallel_size": 8,
            "model.pipeline_model_parallel_size": 1,
            "optimizer.use_distributed_optimizer": False,
        },
        8,
        1,
    ),
    (
        "llama3-70b TP8 PP1 dist-opt DP4",
        {
            **_PARITY_BASE,
            "model.tensor_model_parallel_size": 8,
            "model.pipeline_model_parallel_size": 1,
            "optimizer.use_distributed_optimizer": True,
        },
        32,
        4,
    ),
    (
        "llama3-8b-like TP1 PP1 dist-opt DP8",
        {
            **_PARITY_BASE,
            "model.num_layers": 32,
            "model.hidden_size": 4096,
            "model.ffn_hidden_size": 14336,
            "model.num_attention_heads": 32,
            "model.tensor_model_parallel_size": 1,
            "model.pipeline_model_parallel_size": 1,
            "optimizer.use_distributed_optimizer": True,
        },
        8,
        8,
    ),
    (
        "llama3-70b TP4 PP4 dist-opt DP2 (first stage)",
        {
            **_PARITY_BASE,
            "model.tensor_model_parallel_size": 4,
            "model.pipeline_model_parallel_size": 4,
            "optimizer.use_distributed_optimizer": True,
            "model.share_embeddings_and_output_weights": True,
        },
        32,
        2,
    ),
]


def model_state_bytes(values: dict[str, Any], world_size: int) -> int:
    est = estimate_values(values, world_size=world_size)
    return max(sum(c.bytes for c in s.components if c.kind == "state") for s in est.stages)
