"""Megatron Bridge-style recipes matching the cases of bench/gpu_calibration/measure.py (one function per case).

Each function builds the same configuration measure.py runs on one H200 with Megatron Core 0.19.2 (local layer
spec, no Transformer Engine), so that

    mbmem-lint estimate bench/gpu_calibration/recipes/llama_calibration.py::case_a_llama32_1b_seq4k_mbs1_1gpu_h200_config \
        --gpu H200 --world-size 1 --format json

gives the estimator's prediction for the measured case. Shapes: Llama-3.2-1B / 3B (untied embeddings here),
bf16 params, fp32 gradient buffers, Adam with fp32 main params and states, 2 microbatches per step.
The SDPA cases declare ``attention_backend=AttnBackend.flash`` (measure.py's SDPAFlashCoreAttention mirrors
TE flash attention); case F declares ``AttnBackend.local`` (MCore's unfused DotProductAttention).

Keep the values in sync with CASES / LLAMA32_1B / LLAMA32_3B in measure.py (compare.py cross-checks them).
"""

import torch
import torch.nn.functional as F
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training.config import (
    CheckpointConfig,
    ConfigContainer,
    DistributedDataParallelConfig,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainingConfig,
)
from megatron.core.transformer.enums import AttnBackend


def _llama_calibration(
    num_layers: int = 16,
    hidden_size: int = 2048,
    ffn_hidden_size: int = 8192,
    num_attention_heads: int = 32,
    num_query_groups: int = 8,
    kv_channels: int = 64,
    seq_length: int = 4096,
    micro_batch_size: int = 1,
    num_microbatches: int = 2,
    use_distributed_optimizer: bool = False,
) -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=num_layers,
        hidden_size=hidden_size,
        ffn_hidden_size=ffn_hidden_size,
        num_attention_heads=num_attention_heads,
        num_query_groups=num_query_groups,
        kv_channels=kv_channels,
        vocab_size=128256,
        seq_length=seq_length,
        normalization="RMSNorm",
        layernorm_epsilon=1e-5,
        gated_linear_unit=True,
        activation_func=F.silu,
        bias_activation_fusion=True,
        position_embedding_type="rope",
        rotary_base=500000,
        add_bias_linear=False,
        add_qkv_bias=False,
        share_embeddings_and_output_weights=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        context_parallel_size=1,
        sequence_parallel=False,
        cross_entropy_loss_fusion=False,
        masked_softmax_fusion=False,
        # MCore's TransformerConfig default, which measure.py uses; Bridge's GPTModelProvider defaults to False.
        # Only the unfused attention of case F reads it (torch softmax fallback in fp32).
        attention_softmax_in_fp32=True,
        attention_backend=AttnBackend.flash,
    )
    cfg = ConfigContainer(
        model=model,
        train=TrainingConfig(
            micro_batch_size=micro_batch_size,
            global_batch_size=micro_batch_size * num_microbatches,
            train_iters=3,
        ),
        optimizer=OptimizerConfig(
            optimizer="adam",
            lr=1e-4,
            min_lr=1e-5,
            weight_decay=0.1,
            adam_beta1=0.9,
            adam_beta2=0.95,
            clip_grad=1.0,
            bf16=True,
            params_dtype=torch.bfloat16,
            use_distributed_optimizer=use_distributed_optimizer,
        ),
        ddp=DistributedDataParallelConfig(
            grad_reduce_in_fp32=True,
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            use_distributed_optimizer=use_distributed_optimizer,
        ),
        scheduler=SchedulerConfig(),
        dataset=MockGPTDatasetConfig(seq_length=seq_length),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(),
        checkpoint=CheckpointConfig(),
        rng=RNGConfig(seed=1234),
    )
    return cfg


def case_a_llama32_1b_seq4k_mbs1_1gpu_h200_config() -> ConfigContainer:
    """A: Llama-3.2-1B shape, seq 4096, mbs 1, no recompute, flash attention, no distributed optimizer."""
    cfg = _llama_calibration()
    return cfg


def case_b_llama32_1b_seq4k_mbs2_1gpu_h200_config() -> ConfigContainer:
    """B: A with micro batch size 2."""
    cfg = _llama_calibration(micro_batch_size=2)
    return cfg


def case_c_llama32_1b_seq8k_mbs1_1gpu_h200_config() -> ConfigContainer:
    """C: A with sequence length 8192."""
    cfg = _llama_calibration(seq_length=8192)
    return cfg


def case_d_llama32_1b_full_recompute_1gpu_h200_config() -> ConfigContainer:
    """D: A with full recompute, uniform, one layer per checkpoint."""
    cfg = _llama_calibration()
    cfg.model.recompute_granularity = "full"
    cfg.model.recompute_method = "uniform"
    cfg.model.recompute_num_layers = 1
    return cfg


def case_e_llama32_1b_selective_recompute_1gpu_h200_config() -> ConfigContainer:
    """E: A with selective recompute, default modules (core_attn)."""
    cfg = _llama_calibration()
    cfg.model.recompute_granularity = "selective"
    return cfg


def case_f_llama32_1b_unfused_attention_1gpu_h200_config() -> ConfigContainer:
    """F: A with MCore's local unfused DotProductAttention (the s x s scores are materialised)."""
    cfg = _llama_calibration()
    cfg.model.attention_backend = AttnBackend.local
    return cfg


def case_g_llama32_3b_seq4k_mbs1_1gpu_h200_config() -> ConfigContainer:
    """G: Llama-3.2-3B shape, seq 4096, mbs 1, no recompute, flash attention."""
    cfg = _llama_calibration(
        num_layers=28,
        hidden_size=3072,
        ffn_hidden_size=8192,
        num_attention_heads=24,
        num_query_groups=8,
        kv_channels=128,
    )
    return cfg


def case_h_llama32_1b_distributed_optimizer_1gpu_h200_config() -> ConfigContainer:
    """H: A with the distributed optimizer (DP=1: nothing is sharded; DDP adds a contiguous bf16 param buffer)."""
    cfg = _llama_calibration(use_distributed_optimizer=True)
    return cfg


def case_i_llama32_1b_dropout_1gpu_h200_config() -> ConfigContainer:
    """I: A with hidden and attention dropout 0.1 (dropout masks saved; flash attention regenerates its own)."""
    cfg = _llama_calibration()
    cfg.model.hidden_dropout = 0.1
    cfg.model.attention_dropout = 0.1
    return cfg


def case_j_llama32_1b_tied_embeddings_1gpu_h200_config() -> ConfigContainer:
    """J: A with the output layer sharing the word-embedding weight (as the real Llama-3.2-1B)."""
    cfg = _llama_calibration()
    cfg.model.share_embeddings_and_output_weights = True
    return cfg


def case_k_llama32_1b_native_fused_cross_entropy_1gpu_h200_config() -> ConfigContainer:
    """K: A with MCore's fused vocab-parallel cross-entropy (cross_entropy_fusion_impl="native")."""
    cfg = _llama_calibration()
    cfg.model.cross_entropy_loss_fusion = True
    cfg.model.cross_entropy_fusion_impl = "native"
    return cfg


def case_l_llama32_1b_unfused_attention_bf16_softmax_1gpu_h200_config() -> ConfigContainer:
    """L: F with the softmax in bf16 (attention_softmax_in_fp32=False, Bridge's GPTModelProvider default)."""
    cfg = _llama_calibration()
    cfg.model.attention_backend = AttnBackend.local
    cfg.model.attention_softmax_in_fp32 = False
    return cfg
