"""Our own table of HF ``config.json`` contents for the model ids the Bridge 0.6.2 recipes reference.

``models.pack`` is generated from this module through
:func:`mbmem_lint.resolve.hf_models.provider_fields_from_hf_config`, the same mapping user files go
through. Each entry holds the architecture keys of the published ``config.json`` (only keys the
mapping reads; keys we could not confirm are left out rather than guessed) and a citation.

Citations: "[T]" = Megatron Bridge HEAD unit tests embedding the real HF dict, "[P31]" = the v0.3.1
per-size provider classes (``megatron/bridge/models/*/*_provider.py``), "HF" = the model's published
``config.json`` on the Hugging Face Hub.

Ids deliberately *not* listed (numbers not known exactly here, or not AutoBridge/GPT-shaped): the
Qwen2 (v1) sizes, Qwen2.5-1.5B, Qwen3.5, the VL/omni/audio models, DeepSeek-V4, Kimi-K2.5, gemma-3
4b/12b/27b-it (VL), gemma-4, the Nemotron-H / Nemotron-3 family (hybrid; the recipes use inline
providers), GLM-4.5V / GLM-5.x, Ministral-3, EXAONE, MiniMax, Step, FLUX. The resolver reports them as
unknown models unless the user maps them to a config.json.
"""

from __future__ import annotations

from typing import Any

_LLAMA3_ROPE_32 = {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
_LLAMA31_ROPE_8 = {**_LLAMA3_ROPE_32, "factor": 8.0}


def _llama(
    h: int,
    ffn: int,
    layers: int,
    heads: int,
    kv: int,
    max_pos: int,
    tie: bool,
    rope: dict[str, Any] | None,
    **kw: Any,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": h,
        "initializer_range": 0.02,
        "intermediate_size": ffn,
        "max_position_embeddings": max_pos,
        "mlp_bias": False,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-05,
        "rope_scaling": rope,
        "rope_theta": 500000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "vocab_size": 128256,
    }
    cfg.update(kw)
    return cfg


def _qwen3(h: int, ffn: int, layers: int, heads: int, kv: int, tie: bool) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": ffn,
        "max_position_embeddings": 40960,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    }


def _qwen3_moe(h: int, ffn: int, moe_ffn: int, layers: int, heads: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": ffn,
        "moe_intermediate_size": moe_ffn,
        "max_position_embeddings": 40960,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": layers,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    }


def _qwen25(
    h: int, ffn: int, layers: int, heads: int, kv: int, vocab: int, max_pos: int, tie: bool
) -> dict[str, Any]:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": ffn,
        "max_position_embeddings": max_pos,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
    }


_MLA_DIMS = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


def _gemma2(h: int, ffn: int, layers: int, heads: int, kv: int, head_dim: int, qpas: int) -> dict[str, Any]:
    return {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": h,
        "intermediate_size": ffn,
        "max_position_embeddings": 8192,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "query_pre_attn_scalar": qpas,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
        "vocab_size": 256000,
    }


def _gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "num_local_experts": experts,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
        },
        "rope_theta": 150000,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 201088,
    }


def _glm45(
    h: int, ffn: int, moe_ffn: int, layers: int, experts: int, first_dense: int, qk_norm: bool
) -> dict[str, Any]:
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "attention_bias": True,
        "first_k_dense_replace": first_dense,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": ffn,
        "max_position_embeddings": 131072,
        "moe_intermediate_size": moe_ffn,
        "n_routed_experts": experts,
        "n_shared_experts": 1,
        "num_attention_heads": 96,
        "num_experts_per_tok": 8,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_qk_norm": qk_norm,
        "vocab_size": 151552,
    }


HF_CONFIGS: dict[str, dict[str, Any]] = {
    # -- Llama ----------------------------------------------------------------------------------------
    "meta-llama/Llama-3.2-1B": {
        "config": _llama(2048, 8192, 16, 32, 8, 131072, True, _LLAMA3_ROPE_32, head_dim=64),
        "source": "HF meta-llama/Llama-3.2-1B config.json; [T] tests/unit_tests/models/llama/test_llama_bridge.py:43; [P31] llama_provider.py:232",
    },
    "meta-llama/Llama-3.2-3B": {
        "config": _llama(3072, 8192, 28, 24, 8, 131072, True, _LLAMA3_ROPE_32, head_dim=128),
        "source": "HF meta-llama/Llama-3.2-3B config.json; [P31] llama_provider.py:252",
    },
    "meta-llama/Meta-Llama-3-8B": {
        "config": _llama(4096, 14336, 32, 32, 8, 8192, False, None),
        "source": "HF meta-llama/Meta-Llama-3-8B config.json; [T] test_llama_bridge.py:525; [P31] llama_provider.py:142",
    },
    "meta-llama/Meta-Llama-3-70B": {
        "config": _llama(8192, 28672, 80, 64, 8, 8192, False, None),
        "source": "HF meta-llama/Meta-Llama-3-70B config.json; [P31] llama_provider.py:159",
    },
    "meta-llama/Meta-Llama-3.1-8B": {
        "config": _llama(4096, 14336, 32, 32, 8, 131072, False, _LLAMA31_ROPE_8),
        "source": "HF meta-llama/Meta-Llama-3.1-8B config.json; [P31] llama_provider.py:178",
    },
    "meta-llama/Meta-Llama-3.1-70B": {
        "config": _llama(8192, 28672, 80, 64, 8, 131072, False, _LLAMA31_ROPE_8),
        "source": "HF meta-llama/Meta-Llama-3.1-70B config.json; [P31] llama_provider.py:195",
    },
    "meta-llama/Meta-Llama-3.1-405B": {
        "config": _llama(16384, 53248, 126, 128, 8, 131072, False, _LLAMA31_ROPE_8),
        "source": "HF meta-llama/Meta-Llama-3.1-405B config.json; [P31] llama_provider.py:213",
    },
    "meta-llama/Llama-2-7b-hf": {
        "config": _llama(
            4096,
            11008,
            32,
            32,
            32,
            4096,
            False,
            None,
            rope_theta=10000.0,
            torch_dtype="float16",
            vocab_size=32000,
        ),
        "source": "HF meta-llama/Llama-2-7b-hf config.json",
    },
    # -- Qwen ------------------------------------------------------------------------------------------
    "Qwen/Qwen2.5-0.5B": {
        "config": _qwen25(896, 4864, 24, 14, 2, 151936, 32768, True),
        "source": "HF Qwen/Qwen2.5-0.5B config.json",
    },
    "Qwen/Qwen2.5-7B": {
        "config": _qwen25(3584, 18944, 28, 28, 4, 152064, 131072, False),
        "source": "HF Qwen/Qwen2.5-7B config.json",
    },
    "Qwen/Qwen2.5-14B": {
        "config": _qwen25(5120, 13824, 48, 40, 8, 152064, 131072, False),
        "source": "HF Qwen/Qwen2.5-14B config.json",
    },
    "Qwen/Qwen2.5-32B": {
        "config": _qwen25(5120, 27648, 64, 40, 8, 152064, 131072, False),
        "source": "HF Qwen/Qwen2.5-32B config.json",
    },
    "Qwen/Qwen2.5-72B": {
        "config": _qwen25(8192, 29568, 80, 64, 8, 152064, 131072, False),
        "source": "HF Qwen/Qwen2.5-72B config.json",
    },
    "Qwen/Qwen3-0.6B": {
        "config": _qwen3(1024, 3072, 28, 16, 8, True),
        "source": "HF Qwen/Qwen3-0.6B config.json; [T] tests/unit_tests/models/qwen/test_qwen3_bridge.py:255; [P31] qwen_provider.py:284",
    },
    "Qwen/Qwen3-1.7B": {
        "config": _qwen3(2048, 6144, 28, 16, 8, True),
        "source": "HF Qwen/Qwen3-1.7B config.json; [T] test_qwen3_bridge.py:37; [P31] qwen_provider.py:297",
    },
    "Qwen/Qwen3-4B": {
        "config": _qwen3(2560, 9728, 36, 32, 8, True),
        "source": "HF Qwen/Qwen3-4B config.json; [P31] qwen_provider.py:310",
    },
    "Qwen/Qwen3-8B": {
        "config": _qwen3(4096, 12288, 36, 32, 8, False),
        "source": "HF Qwen/Qwen3-8B config.json; [T] test_qwen3_bridge.py:283; [P31] qwen_provider.py:323",
    },
    "Qwen/Qwen3-14B": {
        "config": _qwen3(5120, 17408, 40, 40, 8, False),
        "source": "HF Qwen/Qwen3-14B config.json; [P31] qwen_provider.py:335",
    },
    "Qwen/Qwen3-32B": {
        "config": _qwen3(5120, 25600, 64, 64, 8, False),
        "source": "HF Qwen/Qwen3-32B config.json; [P31] qwen_provider.py:347",
    },
    "Qwen/Qwen3-30B-A3B": {
        "config": _qwen3_moe(2048, 6144, 768, 48, 32),
        "source": "HF Qwen/Qwen3-30B-A3B config.json; [T] tests/unit_tests/models/qwen/test_qwen3_moe_bridge.py:36; [P31] qwen_provider.py:401",
    },
    "Qwen/Qwen3-235B-A22B": {
        "config": _qwen3_moe(4096, 12288, 1536, 94, 64),
        "source": "HF Qwen/Qwen3-235B-A22B config.json; [T] test_qwen3_moe_bridge.py:66; [P31] qwen_provider.py:415",
    },
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        "config": {
            "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next",
            "full_attention_interval": 4,
            "head_dim": 256,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 5120,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_value_head_dim": 128,
            "max_position_embeddings": 262144,
            "moe_intermediate_size": 512,
            "norm_topk_prob": True,
            "num_attention_heads": 16,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "num_hidden_layers": 48,
            "num_key_value_heads": 2,
            "partial_rotary_factor": 0.25,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000000,
            "shared_expert_intermediate_size": 512,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 151936,
        },
        "source": "HF Qwen/Qwen3-Next-80B-A3B-Instruct config.json; [T] tests/unit_tests/models/qwen/test_qwen3_next_bridge.py:36; [P31] qwen_provider.py:470",
    },
    # -- OpenAI ------------------------------------------------------------------------------------------
    "openai/gpt-oss-20b": {
        "config": _gpt_oss(24, 32),
        "source": "HF openai/gpt-oss-20b config.json; [P31] gpt_oss_provider.py:102",
    },
    "openai/gpt-oss-120b": {
        "config": _gpt_oss(36, 128),
        "source": "HF openai/gpt-oss-120b config.json; [P31] gpt_oss_provider.py:94",
    },
    # -- DeepSeek / Moonshot --------------------------------------------------------------------------
    "deepseek-ai/DeepSeek-V3": {
        "config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "aux_loss_alpha": 0.001,
            "first_k_dense_replace": 3,
            "hidden_act": "silu",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "max_position_embeddings": 163840,
            "moe_intermediate_size": 2048,
            "n_group": 8,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "norm_topk_prob": True,
            "num_attention_heads": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 61,
            "num_key_value_heads": 128,
            "num_nextn_predict_layers": 1,
            "q_lora_rank": 1536,
            **_MLA_DIMS,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
            "rope_theta": 10000,
            "routed_scaling_factor": 2.5,
            "scoring_func": "sigmoid",
            "tie_word_embeddings": False,
            "topk_group": 4,
            "torch_dtype": "bfloat16",
            "vocab_size": 129280,
        },
        "source": "HF deepseek-ai/DeepSeek-V3 config.json; [T] tests/unit_tests/models/deepseek/test_deepseek_bridges.py:38; [P31] deepseek_provider.py:123",
    },
    "deepseek-ai/DeepSeek-V2": {
        "config": {
            "architectures": ["DeepseekV2ForCausalLM"],
            "model_type": "deepseek_v2",
            "first_k_dense_replace": 1,
            "hidden_act": "silu",
            "hidden_size": 5120,
            "intermediate_size": 12288,
            "max_position_embeddings": 163840,
            "moe_intermediate_size": 1536,
            "n_routed_experts": 160,
            "n_shared_experts": 2,
            "num_attention_heads": 128,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 60,
            "num_key_value_heads": 128,
            "q_lora_rank": 1536,
            **_MLA_DIMS,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 102400,
        },
        "source": "HF deepseek-ai/DeepSeek-V2 config.json (architecture keys); [P31] deepseek_provider.py:66",
    },
    "deepseek-ai/DeepSeek-V2-Lite": {
        "config": {
            "architectures": ["DeepseekV2ForCausalLM"],
            "model_type": "deepseek_v2",
            "first_k_dense_replace": 1,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "max_position_embeddings": 163840,
            "moe_intermediate_size": 1408,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_attention_heads": 16,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 27,
            "num_key_value_heads": 16,
            "q_lora_rank": None,
            **_MLA_DIMS,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 102400,
        },
        "source": "HF deepseek-ai/DeepSeek-V2-Lite config.json (architecture keys); [P31] deepseek_provider.py:93",
    },
    "moonshotai/Moonlight-16B-A3B": {
        "config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "first_k_dense_replace": 1,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 11264,
            "max_position_embeddings": 8192,
            "moe_intermediate_size": 1408,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_attention_heads": 16,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 27,
            "num_key_value_heads": 16,
            "q_lora_rank": None,
            **_MLA_DIMS,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 163840,
        },
        "source": "HF moonshotai/Moonlight-16B-A3B config.json (architecture keys)",
    },
    "moonshotai/Kimi-K2-Instruct": {
        "config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "kimi_k2",
            "first_k_dense_replace": 1,
            "hidden_act": "silu",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "max_position_embeddings": 131072,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 384,
            "n_shared_experts": 1,
            "num_attention_heads": 64,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 61,
            "num_key_value_heads": 64,
            "q_lora_rank": 1536,
            **_MLA_DIMS,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 163840,
        },
        "source": "HF moonshotai/Kimi-K2-Instruct config.json (architecture keys)",
    },
    # -- Zhipu -----------------------------------------------------------------------------------------
    "zai-org/GLM-4.5": {
        "config": _glm45(5120, 12288, 1536, 92, 160, 3, True),
        "source": "HF zai-org/GLM-4.5 config.json (architecture keys)",
    },
    "zai-org/GLM-4.5-Air": {
        "config": _glm45(4096, 10944, 1408, 46, 128, 1, False),
        "source": "HF zai-org/GLM-4.5-Air config.json (architecture keys)",
    },
    # -- AllenAI ---------------------------------------------------------------------------------------
    "allenai/OLMoE-1B-7B-0924": {
        "config": {
            "architectures": ["OlmoeForCausalLM"],
            "model_type": "olmoe",
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 1024,
            "max_position_embeddings": 4096,
            "norm_topk_prob": False,
            "num_attention_heads": 16,
            "num_experts": 64,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 16,
            "num_key_value_heads": 16,
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "router_aux_loss_coef": 0.01,
            "tie_word_embeddings": False,
            "vocab_size": 50304,
        },
        "source": "HF allenai/OLMoE-1B-7B-0924 config.json (architecture keys)",
    },
    # -- Google ----------------------------------------------------------------------------------------
    "google/gemma-2-2b": {
        "config": _gemma2(2304, 9216, 26, 8, 4, 256, 256),
        "source": "HF google/gemma-2-2b config.json",
    },
    "google/gemma-2-9b": {
        "config": _gemma2(3584, 14336, 42, 16, 8, 256, 256),
        "source": "HF google/gemma-2-9b config.json",
    },
    "google/gemma-2-27b": {
        "config": _gemma2(4608, 36864, 46, 32, 16, 128, 144),
        "source": "HF google/gemma-2-27b config.json",
    },
    "google/gemma-3-1b-pt": {
        "config": {
            "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "max_position_embeddings": 32768,
            "num_attention_heads": 4,
            "num_hidden_layers": 26,
            "num_key_value_heads": 1,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000,
            "rope_theta": 1000000,
            "sliding_window": 512,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 262144,
        },
        "source": "HF google/gemma-3-1b-pt config.json; [T] tests/unit_tests/models/gemma/test_gemma3_bridge.py:41; [R] recipes/gemma/h100/gemma3.py:42",
    },
}
