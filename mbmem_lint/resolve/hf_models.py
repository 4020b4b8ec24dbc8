"""HF ``config.json`` → Megatron Bridge provider fields, and the model table (bundled + user files).

:func:`provider_fields_from_hf_config` copies what Bridge 0.6.2 does at ``AutoBridge.from_hf_pretrained``
time without importing it: ``MegatronModelBridge.CONFIG_MAPPING`` and ``hf_config_to_provider_kwargs``
(``models/conversion/model_bridge.py:437-627``), the generic ``provider_bridge`` (rope / yarn / MLA rope),
then the family bridge's hard-coded settings (``models/<family>/*_bridge.py``). Only fields that can
be expressed as JSON are returned (no layer specs, activation functions or dtypes objects;
``bf16``/``fp16`` flags are kept). Provider defaults are *not* filled in: the resolver takes them
from the schema.

The bundled table ``mbmem_lint/data/models.json`` is generated from
:data:`mbmem_lint.resolve.hf_configs.HF_CONFIGS` through the same function, so a user's
``[tool.mbmem-lint.models] "org/name" = "path/config.json"`` goes through exactly the same mapping.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mbmem_lint.data import data_file
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.schema import Schema

GPT_PROVIDER = "megatron.bridge.models.gpt_provider.GPTModelProvider"
MLA_PROVIDER = "megatron.bridge.models.mla_provider.MLAModelProvider"
GEMMA2_PROVIDER = "megatron.bridge.models.gemma.gemma2_provider.Gemma2ModelProvider"
GEMMA3_PROVIDER = "megatron.bridge.models.gemma.gemma3_provider.Gemma3ModelProvider"

MODELS_FILE = "models.json"

# MegatronModelBridge.CONFIG_MAPPING (model_bridge.py:437); the first HF name present wins.
CONFIG_MAPPING: tuple[tuple[str, str], ...] = (
    ("num_hidden_layers", "num_layers"),
    ("hidden_size", "hidden_size"),
    ("intermediate_size", "ffn_hidden_size"),
    ("num_attention_heads", "num_attention_heads"),
    ("num_key_value_heads", "num_query_groups"),
    ("head_dim", "kv_channels"),
    ("vocab_size", "vocab_size"),
    ("max_position_embeddings", "seq_length"),
    ("rms_norm_eps", "layernorm_epsilon"),
    ("initializer_range", "init_method_std"),
    ("attention_dropout", "attention_dropout"),
    ("hidden_dropout", "hidden_dropout"),
    ("tie_word_embeddings", "share_embeddings_and_output_weights"),
    ("attention_bias", "add_qkv_bias"),
    ("mlp_bias", "add_bias_linear"),
    ("use_qk_norm", "qk_layernorm"),
    ("rope_theta", "rotary_base"),
    ("partial_rotary_factor", "rotary_percent"),
    ("num_experts", "num_moe_experts"),
    ("num_local_experts", "num_moe_experts"),
    ("num_experts_per_tok", "moe_router_topk"),
    ("moe_intermediate_size", "moe_ffn_hidden_size"),
    ("aux_loss_alpha", "moe_aux_loss_coeff"),
    ("router_aux_loss_coef", "moe_aux_loss_coeff"),
    ("scoring_func", "moe_router_score_function"),
    ("n_routed_experts", "num_moe_experts"),
    ("n_group", "moe_router_num_groups"),
    ("topk_group", "moe_router_group_topk"),
    ("routed_scaling_factor", "moe_router_topk_scaling_factor"),
    ("q_lora_rank", "q_lora_rank"),
    ("kv_lora_rank", "kv_lora_rank"),
    ("qk_nope_head_dim", "qk_head_dim"),
    ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
    ("v_head_dim", "v_head_dim"),
    ("num_nextn_predict_layers", "mtp_num_layers"),
    ("mtp_num_hidden_layers", "mtp_num_layers"),
)

YARN_ROPE_SCALING_MAPPING: tuple[tuple[str, str], ...] = (
    ("factor", "yarn_rotary_scaling_factor"),
    ("original_max_position_embeddings", "yarn_original_max_position_embeddings"),
    ("beta_fast", "yarn_beta_fast"),
    ("beta_slow", "yarn_beta_slow"),
    ("mscale", "yarn_mscale"),
    ("mscale_all_dim", "yarn_mscale_all_dim"),
)
MLA_ROPE_SCALING_MAPPING: tuple[tuple[str, str], ...] = (
    ("factor", "rotary_scaling_factor"),
    ("original_max_position_embeddings", "original_max_position_embeddings"),
    ("beta_fast", "beta_fast"),
    ("beta_slow", "beta_slow"),
    ("mscale", "mscale"),
    ("mscale_all_dim", "mscale_all_dim"),
)

# Field names of MLAModelProvider that are not GPTModelProvider fields (MLATransformerConfig,
# MCore transformer_config.py:2899-2959); used when the schema is not available.
_MLA_ONLY = {
    "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
    "rotary_scaling_factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
    "mscale", "mscale_all_dim", "multi_latent_attention",
}  # fmt: skip


class ModelTableError(Exception):
    """A user-supplied model config.json is missing or unusable."""


@dataclass(frozen=True)
class ModelEntry:
    """A model table entry: the HF model's Bridge provider class and provider fields, and where the
    config came from."""

    provider: str
    fields: dict[str, Any]
    source: str


PostFn = Callable[[dict[str, Any], dict[str, Any]], None]


@dataclass(frozen=True)
class _Family:
    """One family bridge: provider class, HF config-class defaults it reads, hard-coded settings."""

    bridge: str  # citation
    provider: str = GPT_PROVIDER
    hf_defaults: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    post: PostFn | None = None


def _moe_layer_freq(hf: dict[str, Any], out: dict[str, Any]) -> None:
    k = int(hf.get("first_k_dense_replace", 0) or 0)
    n = int(hf["num_hidden_layers"])
    out["moe_layer_freq"] = [0] * k + [1] * (n - k)


def _post_llama(hf: dict[str, Any], out: dict[str, Any]) -> None:
    rs = hf.get("rope_scaling") or {}
    rope_type = rs.get("rope_type", rs.get("type"))
    if rope_type == "llama3":
        out["rope_scaling"] = True
        out["rope_scaling_factor"] = rs.get("factor", 8.0)
    elif rope_type == "linear":
        out["seq_len_interpolation_factor"] = rs["factor"]


def _post_qwen3_moe(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["moe_router_pre_softmax"] = not hf.get("norm_topk_prob", False)


def _post_qwen3_next(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["moe_shared_expert_intermediate_size"] = hf.get("shared_expert_intermediate_size")
    layer_types = hf.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        out["linear_attention_freq"] = [1 if t == "linear_attention" else 0 for t in layer_types]
    else:
        out["linear_attention_freq"] = hf.get("full_attention_interval", 4)
    for key in (
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
    ):
        if key in hf:
            out[key] = hf[key]


def _post_deepseek(hf: dict[str, Any], out: dict[str, Any]) -> None:
    _moe_layer_freq(hf, out)
    out["moe_shared_expert_intermediate_size"] = hf["moe_intermediate_size"] * hf["n_shared_experts"]


def _post_deepseek_v3(hf: dict[str, Any], out: dict[str, Any]) -> None:
    _post_deepseek(hf, out)
    out["moe_aux_loss_coeff"] = hf.get("aux_loss_alpha", 0.0001)
    out["mtp_num_layers"] = hf.get("num_nextn_predict_layers", 0) or None


def _post_glm45(hf: dict[str, Any], out: dict[str, Any]) -> None:
    _moe_layer_freq(hf, out)
    out["mtp_num_layers"] = hf.get("num_nextn_predict_layers")
    out["moe_shared_expert_intermediate_size"] = hf["moe_intermediate_size"]


def _post_olmoe(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["kv_channels"] = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    out["moe_ffn_hidden_size"] = hf["intermediate_size"]
    if "router_aux_loss_coef" in hf:
        out["moe_aux_loss_coeff"] = hf["router_aux_loss_coef"]


def _post_gpt_oss(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["window_size"] = [hf["sliding_window"] - 1, 0]
    out["moe_ffn_hidden_size"] = hf["intermediate_size"]


def _post_gemma2(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["query_pre_attn_scalar"] = hf.get("query_pre_attn_scalar")
    out["attn_logit_softcapping"] = hf.get("attn_logit_softcapping")
    out["final_logit_softcapping"] = hf.get("final_logit_softcapping")
    out["window_size"] = [hf["sliding_window"] - 1, 0]


def _post_gemma3(hf: dict[str, Any], out: dict[str, Any]) -> None:
    out["window_size"] = hf.get("sliding_window")
    out["rotary_base"] = [hf.get("rope_local_base_freq", 10000.0), hf.get("rope_theta", 1000000.0)]
    qpas = hf.get("query_pre_attn_scalar")
    if qpas:
        out["softmax_scale"] = 1.0 / float(qpas) ** 0.5


_RMS_GLU = {"normalization": "RMSNorm", "gated_linear_unit": True, "hidden_dropout": 0.0}
_MLA_EXTRAS = {
    **_RMS_GLU,
    "add_bias_linear": False,
    "share_embeddings_and_output_weights": False,
    "qk_layernorm": True,
    "multi_latent_attention": True,
    "moe_grouped_gemm": True,
    "moe_router_pre_softmax": True,
    "moe_token_dispatcher_type": "alltoall",
    "moe_router_load_balancing_type": "seq_aux_loss",
    "moe_shared_expert_overlap": True,
    "moe_router_dtype": "fp32",
    "moe_permute_fusion": True,
    "apply_rope_fusion": False,
    "gradient_accumulation_fusion": True,
    "bias_activation_fusion": True,
    "bias_dropout_fusion": True,
    "cross_entropy_fusion_impl": "te",
    "cross_entropy_loss_fusion": True,
    "masked_softmax_fusion": True,
    "persist_layer_norm": True,
    "attention_softmax_in_fp32": False,
}

FAMILIES: dict[str, _Family] = {
    "llama": _Family(
        bridge="models/llama/llama_bridge.py:36-85",
        hf_defaults={"attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False},
        extras={
            **_RMS_GLU,
            "bias_activation_fusion": True,
            "masked_softmax_fusion": True,
            "persist_layer_norm": True,
            "bias_dropout_fusion": True,
            "apply_rope_fusion": True,
            "rotary_percent": 1.0,
        },
        post=_post_llama,
    ),
    "qwen2": _Family(
        bridge="models/qwen/qwen2_bridge.py:28-56",
        hf_defaults={"tie_word_embeddings": False},
        extras={**_RMS_GLU, "add_bias_linear": False, "add_qkv_bias": True},
    ),
    "qwen3": _Family(
        bridge="models/qwen/qwen3_bridge.py:28-54",
        hf_defaults={"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128},
        extras={**_RMS_GLU, "add_bias_linear": False, "add_qkv_bias": False, "qk_layernorm": True},
    ),
    "qwen3_moe": _Family(
        bridge="models/qwen/qwen3_moe_bridge.py:28-69",
        hf_defaults={"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128},
        extras={
            **_RMS_GLU,
            "add_bias_linear": False,
            "add_qkv_bias": False,
            "qk_layernorm": True,
            "moe_grouped_gemm": True,
            "moe_router_load_balancing_type": "aux_loss",
            "moe_aux_loss_coeff": 1e-3,
            "moe_token_dispatcher_type": "alltoall",
            "moe_permute_fusion": True,
        },
        post=_post_qwen3_moe,
    ),
    "qwen3_next": _Family(
        bridge="models/qwen/qwen3_next_bridge.py:36-95",
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_RMS_GLU,
            "position_embedding_type": "rope",
            "add_bias_linear": False,
            "add_qkv_bias": False,
            "qk_layernorm": True,
            "moe_grouped_gemm": True,
            "moe_router_load_balancing_type": "global_aux_loss",
            "moe_aux_loss_coeff": 1e-3,
            "moe_router_pre_softmax": False,
            "moe_token_dispatcher_type": "alltoall",
            "moe_permute_fusion": True,
            "moe_shared_expert_gate": True,
            "moe_router_dtype": "fp32",
            "layernorm_zero_centered_gamma": True,
            "attention_output_gate": True,
            "experimental_attention_variant": "gated_delta_net",
        },
        post=_post_qwen3_next,
    ),
    "deepseek_v2": _Family(
        bridge="models/deepseek/deepseek_v2_bridge.py:35-100",
        provider=MLA_PROVIDER,
        hf_defaults={"tie_word_embeddings": False},
        extras={**_MLA_EXTRAS, "make_vocab_size_divisible_by": 3200, "seq_length": 4096},
        post=_post_deepseek,
    ),
    "deepseek_v3": _Family(
        bridge="models/deepseek/deepseek_v3_bridge.py:44-98",
        provider=MLA_PROVIDER,
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_MLA_EXTRAS,
            "moe_router_score_function": "sigmoid",
            "moe_router_enable_expert_bias": True,
            "make_vocab_size_divisible_by": 1280,
        },
        post=_post_deepseek_v3,
    ),
    "kimi_k2": _Family(
        bridge="models/kimi/kimi_bridge.py:35-100",
        provider=MLA_PROVIDER,
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_MLA_EXTRAS,
            "position_embedding_type": "rope",
            "moe_router_enable_expert_bias": True,
            "async_tensor_model_parallel_allreduce": True,
            "make_vocab_size_divisible_by": 1280,
            "seq_length": 4096,
            "moe_aux_loss_coeff": 1e-3,
        },
        post=_post_deepseek,
    ),
    "glm4_moe": _Family(
        bridge="models/glm/glm45_bridge.py:43-110",
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_RMS_GLU,
            "add_bias_linear": False,
            "share_embeddings_and_output_weights": False,
            "moe_shared_expert_overlap": True,
            "moe_token_dispatcher_type": "alltoall",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_pre_softmax": False,
            "moe_grouped_gemm": True,
            "moe_router_score_function": "sigmoid",
            "moe_permute_fusion": True,
            "moe_router_enable_expert_bias": True,
            "moe_router_dtype": "fp32",
            "moe_router_bias_update_rate": 0,
            "moe_aux_loss_coeff": 0.001,
            "persist_layer_norm": True,
            "bias_activation_fusion": True,
            "bias_dropout_fusion": True,
            "mtp_loss_scaling_factor": 0.3,
        },
        post=_post_glm45,
    ),
    "olmoe": _Family(
        bridge="models/olmoe/olmoe_bridge.py:36-90",
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_RMS_GLU,
            "add_bias_linear": False,
            "share_embeddings_and_output_weights": False,
            "qk_layernorm": True,
            "persist_layer_norm": True,
            "moe_token_dispatcher_type": "alltoall",
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_router_pre_softmax": True,
            "moe_grouped_gemm": True,
            "moe_router_score_function": "softmax",
            "moe_permute_fusion": True,
            "moe_router_dtype": "fp32",
        },
        post=_post_olmoe,
    ),
    "gpt_oss": _Family(
        bridge="models/gpt_oss/gpt_oss_bridge.py:43-101",
        hf_defaults={"tie_word_embeddings": False},
        extras={
            **_RMS_GLU,
            "add_bias_linear": True,
            "add_qkv_bias": False,
            "share_embeddings_and_output_weights": False,
            "position_embedding_type": "yarn",
            "moe_router_pre_softmax": False,
            "moe_grouped_gemm": True,
            "moe_token_dispatcher_type": "alltoall",
            "moe_permute_fusion": True,
            "moe_router_load_balancing_type": "none",
            "bias_activation_fusion": True,
            "bias_dropout_fusion": False,
            "fp16": False,
            "bf16": True,
            "activation_func_clamp_value": 7.0,
            "glu_linear_offset": 1.0,
            "softmax_type": "learnable",
            "window_attn_skip_freq": 2,
            "yarn_rotary_scaling_factor": 32.0,
            "yarn_original_max_position_embeddings": 4096,
            "yarn_beta_fast": 32.0,
            "yarn_beta_slow": 1.0,
            "yarn_correction_range_round_to_int": False,
            "yarn_mscale": None,
            "yarn_mscale_all_dim": None,
        },
        post=_post_gpt_oss,
    ),
    "gemma2": _Family(
        bridge="models/gemma/gemma2_bridge.py:36-70",
        provider=GEMMA2_PROVIDER,
        hf_defaults={"tie_word_embeddings": True},
        extras={
            **_RMS_GLU,
            "add_bias_linear": False,
            "attention_dropout": 0.0,
            "share_embeddings_and_output_weights": True,
            "layernorm_zero_centered_gamma": True,
        },
        post=_post_gemma2,
    ),
    "gemma3_text": _Family(
        bridge="models/gemma/gemma3_bridge.py:42-80",
        provider=GEMMA3_PROVIDER,
        hf_defaults={"tie_word_embeddings": True},
        post=_post_gemma3,
    ),
}
FAMILIES["gemma3"] = FAMILIES["gemma3_text"]

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "KimiK2ForCausalLM": "kimi_k2",
    "Glm4MoeForCausalLM": "glm4_moe",
    "OlmoeForCausalLM": "olmoe",
    "GptOssForCausalLM": "gpt_oss",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
}

# Bridge's str_to_dtype names for bf16 / fp16 (utils/activation_map.py); anything else → float32.
_BF16 = {"bfloat16", "bf16", "bf16-mixed", "torch.bfloat16"}
_FP16 = {"float16", "fp16", "half", "16", "16-mixed", "torch.float16"}


def family_of(hf: dict[str, Any]) -> str | None:
    """The family key (``model_type``) of an HF config dict, or None when no known bridge handles it."""
    model_type = hf.get("model_type")
    if isinstance(model_type, str) and model_type in FAMILIES:
        return model_type
    for arch in hf.get("architectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    return None


def _provider_field_names(provider: str, schema: Schema | None) -> set[str] | None:
    if schema is None:
        try:
            schema = Schema.load()
        except (FileNotFoundError, OSError, ValueError):
            return None
    cls = schema.get(provider)
    return set(cls.fields) if cls is not None else None


def provider_fields_from_hf_config(
    hf: dict[str, Any], schema: Schema | None = None
) -> tuple[str, dict[str, Any]]:
    """(provider class qualname, provider fields) that Bridge 0.6.2 builds from this ``config.json``.

    Unknown families go through the generic ``MegatronModelBridge.provider_bridge`` with
    ``GPTModelProvider`` (what an unregistered-but-GPT-shaped model would get).
    """
    if not isinstance(hf, dict):
        raise TypeError("config.json must be a JSON object")
    key = family_of(hf)
    fam = FAMILIES[key] if key is not None else _Family(bridge="models/conversion/model_bridge.py:630")
    cfg: dict[str, Any] = {**fam.hf_defaults, **hf}
    is_mla = fam.provider == MLA_PROVIDER

    kwargs: dict[str, Any] = {}
    for hf_name, meg_name in CONFIG_MAPPING:
        if hf_name in cfg and meg_name not in kwargs:
            kwargs[meg_name] = cfg[hf_name]
    if "rotary_base" not in kwargs:
        rope_params = cfg.get("rope_parameters")
        if isinstance(rope_params, dict) and "rope_theta" in rope_params:
            kwargs["rotary_base"] = rope_params["rope_theta"]

    rope_scaling = cfg.get("rope_scaling")
    rope_type = None
    if isinstance(rope_scaling, dict) and rope_scaling:
        rope_type = rope_scaling.get("type") or rope_scaling.get("rope_type")
    mla_rope: dict[str, Any] = {}
    if rope_type == "yarn" and isinstance(rope_scaling, dict):
        if is_mla:
            for hf_key, meg_key in MLA_ROPE_SCALING_MAPPING:
                if rope_scaling.get(hf_key) is not None:
                    mla_rope[meg_key] = rope_scaling[hf_key]
        else:
            kwargs["position_embedding_type"] = "yarn"
            for hf_key, meg_key in YARN_ROPE_SCALING_MAPPING:
                if rope_scaling.get(hf_key) is not None:
                    kwargs[meg_key] = rope_scaling[hf_key]
            if "truncate" in rope_scaling:
                kwargs["yarn_correction_range_round_to_int"] = rope_scaling["truncate"]
    elif is_mla:
        mla_rope = {"rotary_scaling_factor": 1.0, "mscale_all_dim": 1.0}

    vocab = kwargs.get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:
        kwargs["make_vocab_size_divisible_by"] = _vocab_divisor(vocab)
    dtype = cfg.get("torch_dtype", cfg.get("dtype"))
    dtype_s = str(dtype).lower() if dtype is not None else "float32"
    kwargs["fp16"] = dtype_s in _FP16
    kwargs["bf16"] = dtype_s in _BF16

    valid = _provider_field_names(fam.provider, schema)
    if valid is None:
        out = {k: v for k, v in kwargs.items() if is_mla or k not in _MLA_ONLY}
    else:
        out = {k: v for k, v in kwargs.items() if k in valid}
    out["position_embedding_type"] = "yarn" if rope_type == "yarn" and not is_mla else "rope"
    out.update(mla_rope)

    # kv_channels: head_dim, else hidden/heads (what MCore's TransformerConfig.__post_init__ computes).
    if out.get("kv_channels") is None and cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        out["kv_channels"] = int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])

    out.update(fam.extras)
    if fam.post is not None:
        try:
            fam.post(cfg, out)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"config.json lacks a field the {key} bridge reads: {exc}") from exc
    return fam.provider, out


def _vocab_divisor(vocab_size: int) -> int:
    """``MegatronModelBridge.make_vocab_size_divisible_by``: largest power of two ≤ 128 dividing it."""
    d = 128
    while d > 1 and vocab_size % d:
        d //= 2
    return d


# -- the table ---------------------------------------------------------------------------------------


def generate_models(schema: Schema | None = None) -> dict[str, Any]:
    """The ``models.json`` content, built from :data:`hf_configs.HF_CONFIGS`."""
    from mbmem_lint.resolve.hf_configs import HF_CONFIGS

    models: dict[str, Any] = {}
    for hf_id in sorted(HF_CONFIGS):
        entry = HF_CONFIGS[hf_id]
        provider, fields = provider_fields_from_hf_config(entry["config"], schema)
        models[hf_id] = {"provider": provider, "fields": fields, "source": entry["source"]}
    return {"models": models}


def _read_bundled() -> dict[str, Any]:
    res = data_file(MODELS_FILE)
    if not res.is_file():
        raise ModelTableError("mbmem_lint/data/models.json is missing; run `mbmem-lint dev regenerate`")
    data: dict[str, Any] = json.loads(res.read_text(encoding="utf-8"))
    return data


def load_model_table(
    user_models: dict[str, str] | None = None, root: Path | None = None
) -> dict[str, ModelEntry]:
    """The bundled table plus user entries ``{"org/name": "path/to/config.json"}`` (paths relative to ``root``).

    User entries replace bundled ones of the same id. Raises :class:`ModelTableError` when a user
    file is missing, is not JSON, is not an object, or lacks what the mapping needs.
    """
    table: dict[str, ModelEntry] = {}
    for hf_id, spec in _read_bundled().get("models", {}).items():
        table[hf_id] = ModelEntry(
            provider=spec["provider"], fields=dict(spec["fields"]), source=spec["source"]
        )
    for hf_id, path_s in (user_models or {}).items():
        path = Path(path_s)
        if not path.is_absolute() and root is not None:
            path = root / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ModelTableError(
                f"model {hf_id!r}: cannot read config.json {path}: {exc.strerror or exc}"
            ) from exc
        try:
            hf = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelTableError(f"model {hf_id!r}: {path} is not valid JSON: {exc}") from exc
        if not isinstance(hf, dict):
            raise ModelTableError(f"model {hf_id!r}: {path} must hold a JSON object (an HF config.json)")
        missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads") if k not in hf]
        if missing:
            raise ModelTableError(
                f"model {hf_id!r}: {path} is not an HF causal-LM config.json (missing {', '.join(missing)})"
            )
        try:
            provider, fields = provider_fields_from_hf_config(hf)
        except (ValueError, TypeError) as exc:
            raise ModelTableError(f"model {hf_id!r}: {path}: {exc}") from exc
        table[hf_id] = ModelEntry(provider=provider, fields=fields, source=str(path))
    return table
