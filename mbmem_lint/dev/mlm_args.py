"""Megatron-LM command-line arguments → Megatron Core / Megatron Bridge config fields.

``translate(MODEL_ARGS, ENV_VARS)`` reads the arguments of a Megatron-LM training run (the ``pretrain_gpt.py`` /
``pretrain_hybrid.py`` command line, as Megatron-LM's functional tests write it in ``model_config.yaml``) and gives
the ``ConfigContainer`` fields of the run it describes (``model.*``, ``train.*``, ``optimizer.*``, ``ddp.*``,
``env_vars.*``), the way a Megatron Bridge recipe would set them. It is the one place that knows Megatron-LM's
argument semantics; ``bench/mlm_validation.py`` uses it to run the estimator on Megatron-LM's measured runs.

What it mirrors (NVIDIA/Megatron-LM, ``megatron/training/arguments.py`` and ``argument_utils.py`` at the snapshot
the validation data names; the line numbers below are from that file version):

- **Defaults.** An argument a run does not give has Megatron-LM's default, not Bridge's: most model arguments are
  generated from ``TransformerConfig`` / ``ModelParallelConfig`` fields with the field's default
  (``_add_network_size_args``, ``ArgumentGroupFactory``; bool fields default True become ``--no-x`` /
  ``--disable-x`` flags), and a few are declared with other defaults (``--attention-softmax-in-fp32`` off,
  ``--no-masked-softmax-fusion`` / ``--no-rope-fusion`` / ``--no-bias-swiglu-fusion`` / ``--no-bias-gelu-fusion``
  on by default, ``--make-vocab-size-divisible-by 128``, ``--kv-lora-rank 32``, ``--q-lora-rank`` None,
  ``--optimizer-offload-fraction 1.0``). Bridge's providers default several of these differently (e.g.
  ``GPTModelProvider`` has ``attention_softmax_in_fp32=False`` but ``cross_entropy_loss_fusion=True`` and untied
  dropout 0.1), so every field the estimate reads is written explicitly.
- **validate_args post-processing** (L389-1990): ``ffn_hidden_size`` = 4·h, or ``int(4·h·2/3 / 64)·64`` with
  ``--swiglu`` (L1320-1329); ``kv_channels`` = h / heads (L1331-1333); ``num_query_groups`` only with
  ``--group-query-attention`` (``core_transformer_config_from_args``); ``moe_ffn_hidden_size`` = ffn (L1650);
  ``expert_tensor_parallel_size`` = TP (L587); ``--recompute-activations`` = selective (L607);
  ``--enable-cuda-graph`` / ``--external-cuda-graph`` = ``cuda_graph_impl`` local / transformer_engine (L612-631);
  VPP from ``--num-layers-per-virtual-pipeline-stage`` (layers per stage, embedding/loss counted when they are
  accounted in the split), ``--num-virtual-stages-per-pipeline-rank`` or the stages of
  ``--pipeline-model-parallel-layout`` (L928-983); the hybrid pattern's layer count, ``|`` segments (VPP) and
  ``/`` MTP depths (L745-893); bf16 gradients accumulated and reduced in fp32 unless ``--grad-reduce-in-bf16``
  (L1203-1216); sequence parallelism off at TP 1 (L1431-1439); ``add_qkv_bias`` follows ``add_bias_linear`` and
  ``bias_gelu_fusion`` is off without biases (L1604-1610); RoPE fusion off for non-RoPE embeddings (L1626-1629);
  ``attention_softmax_in_fp32`` forced by ``--apply-query-key-layer-scaling`` (L1714); ``muon`` with
  ``--use-distributed-optimizer`` is the layer-wise distributed optimizer (L1726-1738);
  ``--cpu-offloading-num-layers`` turns ``cpu_offloading`` on (L1950).
- **core_transformer_config_from_args** (argument_utils.py L277-381): ``--swiglu`` = GLU + SiLU with
  ``bias_activation_fusion = bias_swiglu_fusion``, else ``bias_gelu_fusion``; ``--squared-relu`` /
  ``--quick-geglu``; ``--num-experts`` = ``num_moe_experts``; ``--decoder-first/last-pipeline-num-layers`` =
  ``num_layers_in_first/last_pipeline_stage``; ``--fp8-param-gather`` = ``fp8_param``; the padded vocabulary
  (``vocab_size_with_padding``: ``make_vocab_size_divisible_by`` × TP, core/tokenizers/utils/build_tokenizer.py
  L133-145).
- **The model Megatron-LM builds**: ``--transformer-impl local`` builds the local spec, whose attention is MCore's
  unfused ``DotProductAttention`` (``attention_backend`` local here); ``--multi-latent-attention`` builds
  ``MLATransformerConfig`` (Bridge's ``MLAModelProvider``); a hybrid layer pattern builds the hybrid (Mamba) model
  (``HybridModelProvider``).

Arguments that cannot change the training memory (logging, checkpoint paths, data, learning-rate schedule,
evaluation, ...) are listed in :data:`NO_MEMORY_EFFECT` with the reason. An argument that is neither mapped nor
listed there, or one that changes the run in a way the estimate does not model (a teacher model for distillation,
RL, configurations read from a checkpoint), makes the translation ``skipped`` with the reason; a value taken from
the environment (``${VAR}``) for an argument that matters does the same. ``passthrough`` (the provider's field
names and annotations, from the package's schema) maps any other argument named like a provider field, as
``ArgumentGroupFactory`` generates it, to that field.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from mbmem_lint.records import dataclass, field

__all__ = ["Symbol", "Translation", "translate", "NO_MEMORY_EFFECT", "UNSUPPORTED", "eval_int_list"]


class Symbol(str):
    """A Python name a recipe writes unquoted (``torch.bfloat16``, ``F.silu``, ``AttnBackend.flash``)."""

    __slots__ = ()


BF16, FP16, FP32 = Symbol("torch.bfloat16"), Symbol("torch.float16"), Symbol("torch.float32")

# What kind of value each mapped argument takes (the argparse ``type``/``action`` Megatron-LM gives it):
# "flag" = store_true, "noflag" = store_false (dest keeps the name without ``no-``/``disable-``), "int", "float",
# "str", "list" (nargs="+", strings), "intlist".
ARG_KINDS: dict[str, str] = {
    # network size / transformer config
    "num-layers": "int", "hidden-size": "int", "ffn-hidden-size": "int", "num-attention-heads": "int",
    "num-query-groups": "int", "group-query-attention": "flag", "kv-channels": "int",
    "max-position-embeddings": "int", "position-embedding-type": "str", "use-rotary-position-embeddings": "flag",
    "rotary-percent": "float", "rotary-base": "int", "rotary-interleaved": "flag", "rotary-scaling-factor": "float",
    "no-rope-fusion": "noflag", "rope-type": "str", "mscale": "float", "mscale-all-dim": "float",
    "yarn-original-max-position-embeddings": "int", "yarn-beta-fast": "float", "yarn-beta-slow": "float",
    "no-yarn-correction-range-round-to-int": "noflag", "no-position-embedding": "noflag",
    "normalization": "str", "norm-epsilon": "float", "apply-layernorm-1p": "flag", "qk-layernorm": "flag",
    "disable-bias-linear": "noflag", "add-qkv-bias": "flag", "swiglu": "flag", "squared-relu": "flag",
    "quick-geglu": "flag", "openai-gelu": "flag", "glu-linear-offset": "float", "activation-func-clamp-value": "float",
    "use-fused-weighted-squared-relu": "flag", "untie-embeddings-and-output-weights": "flag",
    "hidden-dropout": "float", "attention-dropout": "float", "apply-query-key-layer-scaling": "flag",
    "attention-softmax-in-fp32": "flag", "no-masked-softmax-fusion": "noflag", "no-bias-gelu-fusion": "noflag",
    "no-bias-swiglu-fusion": "noflag", "no-bias-dropout-fusion": "noflag", "no-persist-layer-norm": "flag",
    "attention-backend": "str", "use-flash-attn": "flag", "transformer-impl": "str", "spec": "list",
    "softmax-type": "str", "window-size": "str", "window-attn-skip-freq": "str",
    "make-vocab-size-divisible-by": "int", "vocab-size": "int", "padded-vocab-size": "int", "tokenizer-type": "str",
    "tokenizer-model": "str", "vocab-file": "str", "merge-file": "str", "tiktoken-pattern": "str",
    "cross-entropy-loss-fusion": "flag", "cross-entropy-fusion-impl": "str", "fp16-lm-cross-entropy": "flag",
    "init-method-std": "float",
    # parallelism and pipeline layout
    "tensor-model-parallel-size": "int", "pipeline-model-parallel-size": "int", "context-parallel-size": "int",
    "expert-model-parallel-size": "int", "expert-tensor-parallel-size": "int", "sequence-parallel": "flag",
    "cp-comm-type": "list", "hierarchical-context-parallel-sizes": "intlist",
    "num-layers-per-virtual-pipeline-stage": "int", "num-virtual-stages-per-pipeline-rank": "int",
    "pipeline-model-parallel-layout": "str", "decoder-first-pipeline-num-layers": "int",
    "decoder-last-pipeline-num-layers": "int", "account-for-embedding-in-pipeline-split": "flag",
    "account-for-loss-in-pipeline-split": "flag", "microbatch-group-size-per-virtual-pipeline-stage": "int",
    "overlap-p2p-communication-warmup-flush": "flag", "use-tp-pp-dp-mapping": "flag",
    "defer-embedding-wgrad-compute": "flag", "wgrad-deferral-limit": "int", "tp-comm-overlap": "flag",
    "delay-wgrad-compute": "flag",
    # MoE
    "num-experts": "int", "moe-ffn-hidden-size": "int", "moe-router-topk": "int", "moe-layer-freq": "str",
    "moe-shared-expert-intermediate-size": "int", "moe-shared-expert-overlap": "flag", "moe-grouped-gemm": "flag",
    "moe-token-dispatcher-type": "str", "moe-flex-dispatcher-backend": "str", "moe-router-load-balancing-type": "list",
    "moe-aux-loss-coeff": "str", "moe-z-loss-coeff": "float", "moe-router-score-function": "str",
    "moe-router-pre-softmax": "flag", "moe-router-topk-scaling-factor": "float", "moe-router-dtype": "str",
    "moe-router-enable-expert-bias": "flag", "moe-router-bias-update-rate": "float", "moe-router-num-groups": "int",
    "moe-router-group-topk": "int", "moe-router-fusion": "flag", "moe-permute-fusion": "flag",
    "moe-expert-capacity-factor": "float", "moe-pad-expert-input-to-capacity": "flag", "moe-token-drop-policy": "str",
    "moe-latent-size": "int", "moe-router-padding-for-quantization": "flag", "moe-flex-dispatcher-num-sms": "int",
    "moe-hybridep-num-sms": "int", "overlap-moe-expert-parallel-comm": "flag",
    # MLA
    "multi-latent-attention": "flag", "q-lora-rank": "int", "kv-lora-rank": "int", "qk-head-dim": "int",
    "qk-pos-emb-head-dim": "int", "v-head-dim": "int",
    # Mamba / hybrid
    "hybrid-layer-pattern": "str", "hybrid-override-pattern": "str", "is-hybrid-model": "flag",
    "mamba-state-dim": "int", "mamba-head-dim": "int", "mamba-num-groups": "int", "mamba-num-heads": "int",
    # MTP
    "mtp-num-layers": "int", "mtp-use-repeated-layer": "flag", "mtp-loss-scaling-factor": "float",
    # recompute and offloading
    "recompute-granularity": "str", "recompute-method": "str", "recompute-num-layers": "int",
    "recompute-modules": "list", "recompute-activations": "flag", "distribute-saved-activations": "flag",
    "fine-grained-activation-offloading": "flag", "offload-modules": "list", "cpu-offloading-num-layers": "int",
    # CUDA graphs
    "cuda-graph-impl": "str", "enable-cuda-graph": "flag", "external-cuda-graph": "flag",
    "cuda-graph-modules": "list", "cuda-graph-scope": "list", "cuda-graph-warmup-steps": "int",
    # precision
    "bf16": "flag", "fp16": "flag", "fp8-format": "str", "fp8-recipe": "str", "fp8-param-gather": "flag",
    "fp4-format": "str", "fp4-recipe": "str", "fp4-param-gather": "flag", "first-last-layers-bf16": "flag",
    "num-layers-at-start-in-bf16": "int", "num-layers-at-end-in-bf16": "int", "grad-reduce-in-bf16": "flag",
    "accumulate-allreduce-grads-in-fp32": "flag", "main-grads-dtype": "str", "main-params-dtype": "str",
    "exp-avg-dtype": "str", "exp-avg-sq-dtype": "str", "use-precision-aware-optimizer": "flag",
    "reuse-grad-buf-for-mxfp8-param-ag": "flag",
    # training, optimizer, data parallelism
    "micro-batch-size": "int", "global-batch-size": "int", "seq-length": "int", "optimizer": "str",
    "use-distributed-optimizer": "flag", "num-distributed-optimizer-instances": "int",
    "overlap-grad-reduce": "flag", "overlap-param-gather": "flag", "overlap-param-gather-with-optimizer-step": "flag",
    "optimizer-cpu-offload": "flag", "optimizer-offload-fraction": "float", "use-megatron-fsdp": "flag",
    "data-parallel-sharding-strategy": "str", "outer-dp-sharding-strategy": "str",
    "megatron-fsdp-main-params-dtype": "str", "megatron-fsdp-main-grads-dtype": "str",
    "megatron-fsdp-grad-comm-dtype": "str", "ddp-num-buckets": "int", "ddp-pad-buckets-for-high-nccl-busbw": "flag",
    "ddp-bucket-size": "int", "use-torch-fsdp2": "flag", "no-use-layer-wise-param-layout": "noflag",
}
# dest of flags whose dest is not the name: the name without its ``no-`` / ``disable-`` prefix, or another name.
DEST: dict[str, str] = {
    "no-rope-fusion": "apply_rope_fusion", "no-masked-softmax-fusion": "masked_softmax_fusion",
    "no-bias-gelu-fusion": "bias_gelu_fusion", "no-bias-swiglu-fusion": "bias_swiglu_fusion",
    "no-bias-dropout-fusion": "bias_dropout_fusion", "disable-bias-linear": "add_bias_linear",
    "no-position-embedding": "add_position_embedding", "norm-epsilon": "layernorm_epsilon",
    "apply-layernorm-1p": "layernorm_zero_centered_gamma", "num-experts": "num_moe_experts",
    "fp8-format": "fp8", "fp4-format": "fp4", "no-yarn-correction-range-round-to-int": "yarn_correction_range_round_to_int",
    "no-use-layer-wise-param-layout": "use_layer_wise_param_layout",
    "microbatch-group-size-per-virtual-pipeline-stage": "microbatch_group_size_per_vp_stage",
}

# Megatron-LM's value of each dest a run does not set (arguments.py, or the TransformerConfig /
# ModelParallelConfig field default ArgumentGroupFactory copies).
DEFAULTS: dict[str, Any] = {
    "num_layers": None, "hidden_size": None, "ffn_hidden_size": None, "num_attention_heads": None,
    "num_query_groups": 1, "group_query_attention": False, "kv_channels": None, "max_position_embeddings": None,
    "position_embedding_type": "learned_absolute", "use_rotary_position_embeddings": False,
    "add_position_embedding": True, "rotary_percent": 1.0, "rotary_base": 10000, "apply_rope_fusion": True,
    "normalization": "LayerNorm", "layernorm_epsilon": 1e-5, "layernorm_zero_centered_gamma": False,
    "qk_layernorm": False, "add_bias_linear": True, "add_qkv_bias": False, "swiglu": False, "squared_relu": False,
    "quick_geglu": False, "untie_embeddings_and_output_weights": False, "hidden_dropout": 0.1,
    "attention_dropout": 0.1, "apply_query_key_layer_scaling": False, "attention_softmax_in_fp32": False,
    "masked_softmax_fusion": True, "bias_gelu_fusion": True, "bias_swiglu_fusion": True, "bias_dropout_fusion": True,
    "use_fused_weighted_squared_relu": False, "attention_backend": "auto", "transformer_impl": "transformer_engine",
    "spec": None, "make_vocab_size_divisible_by": 128, "vocab_size": None, "padded_vocab_size": None,
    "tokenizer_type": None, "tokenizer_model": None, "vocab_file": None, "cross_entropy_loss_fusion": False,
    "cross_entropy_fusion_impl": "native",
    "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
    "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None, "sequence_parallel": False,
    "cp_comm_type": ["p2p"], "num_layers_per_virtual_pipeline_stage": None,
    "num_virtual_stages_per_pipeline_rank": None, "pipeline_model_parallel_layout": None,
    "decoder_first_pipeline_num_layers": None, "decoder_last_pipeline_num_layers": None,
    "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
    "defer_embedding_wgrad_compute": False, "wgrad_deferral_limit": 0, "tp_comm_overlap": False,
    "num_moe_experts": None, "moe_ffn_hidden_size": None, "moe_router_topk": 2, "moe_layer_freq": 1,
    "moe_shared_expert_intermediate_size": None, "moe_grouped_gemm": False, "moe_token_dispatcher_type": "allgather",
    "moe_router_load_balancing_type": "aux_loss", "moe_expert_capacity_factor": None,
    "moe_pad_expert_input_to_capacity": False, "moe_router_dtype": None, "moe_permute_fusion": False,
    "moe_latent_size": None, "moe_shared_expert_overlap": False,
    "multi_latent_attention": False, "q_lora_rank": None, "kv_lora_rank": 32, "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
    "hybrid_layer_pattern": None, "hybrid_override_pattern": None, "mamba_state_dim": 128, "mamba_head_dim": 64,
    "mamba_num_groups": 8, "mamba_num_heads": None, "mtp_num_layers": None,
    "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None, "recompute_modules": None,
    "recompute_activations": False, "fine_grained_activation_offloading": False, "offload_modules": [],
    "cpu_offloading_num_layers": 0,
    "cuda_graph_impl": "none", "enable_cuda_graph": False, "external_cuda_graph": False, "cuda_graph_modules": [],
    "cuda_graph_scope": None, "cuda_graph_warmup_steps": 3,
    "bf16": False, "fp16": False, "fp8": None, "fp8_recipe": "delayed", "fp8_param_gather": False, "fp4": None,
    "fp4_param_gather": False, "first_last_layers_bf16": False, "grad_reduce_in_bf16": False,
    "accumulate_allreduce_grads_in_fp32": False, "main_grads_dtype": "fp32", "main_params_dtype": "fp32",
    "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32", "use_precision_aware_optimizer": False,
    "micro_batch_size": None, "global_batch_size": None, "seq_length": None, "optimizer": "adam",
    "use_distributed_optimizer": False, "num_distributed_optimizer_instances": 1, "overlap_grad_reduce": False,
    "overlap_param_gather": False, "optimizer_cpu_offload": False, "optimizer_offload_fraction": 1.0,
    "use_megatron_fsdp": False, "data_parallel_sharding_strategy": "optim_grads_params",
    "megatron_fsdp_main_grads_dtype": "auto", "use_torch_fsdp2": False,
}

# Arguments that do not change what a training step holds on the GPU, by what they are about.
_NO_MEMORY_EFFECT_GROUPS: dict[str, tuple[str, ...]] = {
    "logging": (
        "log-params-norm", "log-num-zeros-in-grad", "log-validation-ppl-to-tensorboard", "log-timers-to-tensorboard",
        "tensorboard-dir", "tensorboard-log-interval", "log-interval", "log-memory-to-tensorboard", "log-throughput",
        "log-progress", "log-energy", "log-memory-interval", "logging-level", "timing-log-level", "timing-log-option",
        "wandb-entity", "wandb-exp-name", "wandb-project", "wandb-save-dir", "no-record-throughput",
        "straggler-minmax-count", "log-max-attention-logit",
    ),
    "checkpointing": (
        "save", "load", "save-interval", "save-retain-interval", "ckpt-format", "async-save", "async-strategy",
        "async-ckpt-use-cpu-shm", "use-persistent-ckpt-worker", "dist-ckpt-strictness",
        "dist-ckpt-optim-fully-reshardable", "ckpt-fully-parallel-load", "ckpt-fully-parallel-save",
        "no-ckpt-fully-parallel-save", "ckpt-fully-parallel-load-per-rank-objects", "ckpt-assume-constant-structure",
        "ckpt-drop-redundant-extra-state", "no-ckpt-load-validate-sharding-integrity", "auto-detect-ckpt-format",
        "no-load-optim", "no-load-rng", "finetune", "use-checkpoint-opt_param-scheduler",
        "override-opt_param-scheduler", "override-opt-param-scheduler", "verify-integrity", "exit-on-missing-checkpoint",
        "no-use-tokenizer-model-from-checkpoint-args",
    ),
    "data": (
        "data-path", "split", "data-cache-path", "num-workers", "mock-data", "fim-data", "fim-rate", "fim-spm-rate",
        "no-mmap-bin-files", "dataloader-type", "no-create-attention-mask-in-dataloader", "seed",
    ),
    "learning-rate schedule and optimizer hyper-parameters": (
        "lr", "min-lr", "lr-decay-style", "lr-decay-iters", "lr-decay-samples", "lr-warmup-fraction",
        "lr-warmup-iters", "lr-warmup-samples", "lr-warmup-init", "lr-wsd-decay-style", "lr-wsd-decay-samples",
        "weight-decay", "clip-grad", "adam-beta1", "adam-beta2", "adam-eps", "decoupled-lr", "decoupled-min-lr",
        "lr-mult-router", "muon-momentum", "muon-scale-mode", "muon-extra-scale-factor",
    ),
    "run length and evaluation": (
        "train-iters", "train-samples", "exit-interval", "exit-duration-in-mins", "eval-interval", "eval-iters",
    ),
    "numerics checks, determinism and process set-up": (
        "distributed-backend", "distributed-timeout-minutes", "deterministic-mode", "use-mcore-models",
        "no-check-for-nan-in-loss-and-grad", "check-for-large-grads", "check-weight-hash-across-dp-replicas-interval",
        "rerun-mode", "calculate-per-token-loss", "ddp-average-in-collective", "manual-gc", "manual-gc-interval",
        "te-rng-tracker", "disable-gloo-process-groups", "no-gradient-accumulation-fusion", "enable-experimental",
        "high-priority-stream-groups", "empty-unused-memory-level", "tp-comm-overlap-cfg",
    ),
}
NO_MEMORY_EFFECT: dict[str, str] = {name: why for why, names in _NO_MEMORY_EFFECT_GROUPS.items() for name in names}
# ``empty-unused-memory-level`` frees cached blocks (reserved memory); the allocated peak is the same.

# Arguments whose run the estimate does not describe.
UNSUPPORTED: dict[str, str] = {
    "use-checkpoint-args": "the model configuration is read from the checkpoint (--use-checkpoint-args)",
    "perform-rl-step": "reinforcement-learning run (inference engine and training in one process)",
    "flextron": "elastic (Flextron) training of several sub-networks",
    "export-kd-teacher-load": "knowledge distillation: a teacher model is loaded besides the student",
    "export-kd-cfg": "knowledge distillation: a teacher model is loaded besides the student",
    "export-te-mcore-model": "a ModelOpt model (export/distillation layer spec)",
    "heterogeneous-layers-config-path": "heterogeneous per-layer configuration file",
    "yaml-cfg": "configuration read from a YAML file",
    "te-precision-config-file": "per-module precision overrides from a file",
    "moe-use-upcycling": "dense-to-MoE upcycling run",
    "hybrid-context-parallel": "hybrid context parallelism",
}
_UNSUPPORTED_VALUES: dict[str, dict[str, str]] = {
    "optimizer": {o: f"optimizer {o!r} (the estimate models Adam, SGD and Muon)" for o in ("lion", "soap",
                                                                                          "adaptive_muon")},
    "transformer-impl": {"inference_optimized": "inference-optimized layers"},
}
_HYBRID_SPEC = "megatron.core.models.hybrid.hybrid_layer_specs"
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")

# Vocabulary sizes of the tokenizers Megatron-LM's tests use, before padding (a tokenizer file is not read).
TOKENIZER_VOCAB: dict[str, int] = {
    # GPT2BPETokenizer: the GPT-2 BPE vocabulary (50256 merges + <|endoftext|>)
    "GPT2BPETokenizer": 50257,
    # Llama-2's SentencePiece model
    "Llama2Tokenizer": 32000,
}
# SentencePiece models named by file: Nemotron's 256k vocabulary
_SP_MODELS = {"nemotron_2_256k.model": 256000}


@dataclass
class Translation:
    """A run's ConfigContainer fields, which provider class builds its model, the mechanisms it uses, and why it
    cannot be estimated (``skipped``), if so."""

    fields: dict[str, Any] = field(default_factory=dict)
    provider: str = "gpt"  # gpt | mla | hybrid
    kind: str = ""  # dense | MoE | MLA | hybrid
    skipped: str | None = None
    mechanisms: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Skip(Exception):
    pass


def eval_int_list(text: str) -> list[int]:
    """A Megatron-LM list expression (``moe_freq_type``: ``"([0]*3+[1]*11)"``) evaluated without ``eval``: integer
    lists, ``+`` and ``*`` only."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = ev(node.left), ev(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"not an integer list expression: {text!r}")

    out = ev(ast.parse(text.strip(), mode="eval"))
    if not isinstance(out, list) or not all(type(x) is int for x in out):
        raise ValueError(f"not an integer list expression: {text!r}")
    return out


def _words(value: Any) -> list[str]:
    """A list argument as the test runner passes it: ``[a b c]`` (brackets stripped, split on spaces) or a list."""
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [w for w in re.split(r"[\s,]+", text) if w]


def _convert(name: str, kind: str, value: Any) -> Any:
    if kind in ("flag", "noflag"):
        if value is not True and str(value).lower() != "true":
            raise _Skip(f"--{name} given the value {value!r} (a flag)")
        return kind == "flag"
    if isinstance(value, str) and _PLACEHOLDER.search(value) and kind != "str":
        raise _Skip(f"--{name} takes its value from the environment ({value})")
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "list":
            return _words(value)
        if kind == "intlist":
            return [int(w) for w in _words(value)]
    except (TypeError, ValueError):
        raise _Skip(f"--{name}: cannot read {value!r} as {kind}") from None
    return str(value)


def _dest(name: str) -> str:
    return DEST.get(name) or name.replace("-", "_")


def _passthrough_kind(type_text: str, default: Any) -> str | None:
    t = type_text.replace(" ", "")
    if t.startswith(("bool", "Optional[bool]")):
        return "noflag" if default is True else "flag"
    if t.startswith(("int", "Optional[int]")):
        return "int"
    if t.startswith(("float", "Optional[float]")):
        return "float"
    if t.startswith(("str", "Optional[str]", "Literal")):
        return "str"
    return None


def _read_args(model_args: Mapping[str, Any], passthrough: Mapping[str, tuple[str, Any]] | None,
               tr: Translation) -> tuple[dict[str, Any], dict[str, Any]]:
    """(dest → value of every mapped argument, provider field → value of passed-through arguments)."""
    given: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key in model_args:  # what the run is comes first: one such argument decides it
        if str(key).lstrip("-") in UNSUPPORTED:
            raise _Skip(UNSUPPORTED[str(key).lstrip("-")])
    for key, value in model_args.items():
        name = str(key).lstrip("-")
        if not str(key).startswith("--"):
            raise _Skip(f"{key!r} is not a command-line argument")
        if name in NO_MEMORY_EFFECT:
            continue
        bad = _UNSUPPORTED_VALUES.get(name, {}).get(str(value))
        if bad is not None:
            raise _Skip(bad)
        kind = ARG_KINDS.get(name)
        if kind is not None:
            given[_dest(name)] = _convert(name, kind, value)
            continue
        # ArgumentGroupFactory's names for a provider field: --x, --no-x / --disable-x for a bool that defaults True
        fname = name.replace("-", "_")
        for prefix in ("no_", "disable_"):
            if fname.startswith(prefix) and passthrough and fname[len(prefix):] in passthrough:
                fname = fname[len(prefix):]
                break
        spec = passthrough.get(fname) if passthrough else None
        pkind = _passthrough_kind(*spec) if spec else None
        if pkind is None:
            raise _Skip(f"Megatron-LM argument --{name} is not mapped")
        extra[fname] = _convert(name, pkind, value)
        tr.notes.append(f"--{name} passed through to model.{fname}")
    return given, extra


def _vocab(a: dict[str, Any]) -> int:
    """The tokenizer's vocabulary before padding (build_tokenizer.py: NullTokenizer and TikTokenizer take
    ``--vocab-size``; pretrain_gpt.py and pretrain_hybrid.py default the tokenizer to GPT2BPETokenizer)."""
    tok = a["tokenizer_type"] or "GPT2BPETokenizer"
    if isinstance(tok, str) and _PLACEHOLDER.search(tok):
        raise _Skip(f"--tokenizer-type takes its value from the environment ({tok})")
    if a["vocab_size"] is not None and tok in ("NullTokenizer", "TikTokenizer", "HuggingFaceTokenizer"):
        return int(a["vocab_size"])
    if tok in TOKENIZER_VOCAB:
        return TOKENIZER_VOCAB[tok]
    model = str(a["tokenizer_model"] or "")
    for file, size in _SP_MODELS.items():
        if tok in ("GPTSentencePieceTokenizer", "SentencePieceTokenizer") and model.endswith(file):
            return size
    raise _Skip(f"vocabulary size of tokenizer {tok} ({model or 'no model file'}) is not known")


def _vpp(a: dict[str, Any], num_layers: int, pp: int) -> int | None:
    """Virtual pipeline stages per rank (validate_args L928-983)."""
    if a["num_virtual_stages_per_pipeline_rank"] is not None:
        vpp = int(a["num_virtual_stages_per_pipeline_rank"])
    elif a["num_layers_per_virtual_pipeline_stage"] is not None:
        n = num_layers + int(a["account_for_embedding_in_pipeline_split"]) + int(a["account_for_loss_in_pipeline_split"])
        if n % pp or (n // pp) % a["num_layers_per_virtual_pipeline_stage"]:
            raise _Skip("layers per pipeline stage not divisible by --num-layers-per-virtual-pipeline-stage")
        vpp = (n // pp) // a["num_layers_per_virtual_pipeline_stage"]
    else:
        return None
    return vpp if vpp > 1 else None


def _layout_stages(layout: str) -> int:
    """Stages of a ``--pipeline-model-parallel-layout`` string (``(…)*n`` / ``x*n`` repeats expanded), as
    ``PipelineParallelLayerLayout.get_num_stages_from_str`` counts them."""
    text = layout.replace(",", "").replace(" ", "")
    while "(" in text:
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
        if new == text:
            raise _Skip(f"cannot read --pipeline-model-parallel-layout {layout!r}")
        text = new
    return len(text.split("|"))


def _hybrid(a: dict[str, Any], pp: int, tr: Translation) -> tuple[str, int, int | None, int | None]:
    """(main pattern without pipeline separators, layer count, VPP, MTP depths) of a hybrid layer pattern
    (validate_args L745-893; hybrid_layer_allocation.py: ``|`` separates pipeline segments, ``/`` the MTP
    depths)."""
    pattern = str(a["hybrid_layer_pattern"])
    main, *mtp = pattern.split("/")
    segments = main.split("|")
    flat = "".join(segments)
    if not flat or any(c not in "M*-EG" for c in flat):
        raise _Skip(f"hybrid layer pattern {pattern!r} has layer kinds the estimate does not know")
    vpp = None
    if len(segments) > 1:
        if len(segments) % pp:
            raise _Skip("hybrid pattern segments not divisible by the pipeline size")
        vpp = len(segments) // pp if len(segments) > pp else None
        if pp > 1 or vpp:
            tr.notes.append("hybrid pipeline segments ('|') split as evenly as the estimate splits layers")
    return flat, len(flat), vpp, (len(mtp) or None)


def translate(model_args: Mapping[str, Any], env_vars: Mapping[str, Any] | None = None, *,
              passthrough: Mapping[str, tuple[str, Any]] | None = None) -> Translation:
    """The ConfigContainer fields of the Megatron-LM run ``model_args`` describes (its ``MODEL_ARGS``, with
    ``--`` names), under ``env_vars``. ``passthrough``: provider field name → (annotation, default), for
    arguments named after a provider field that this module does not map itself."""
    tr = Translation()
    try:
        given, extra = _read_args(model_args, passthrough, tr)
        a = {**DEFAULTS, **given}
        _fill(a, env_vars or {}, tr)
        tr.fields.update({f"model.{k}": v for k, v in extra.items() if f"model.{k}" not in tr.fields})
    except _Skip as exc:
        tr.skipped = str(exc)
    except (TypeError, ValueError, ArithmeticError, KeyError, AttributeError) as exc:
        # a value of an unexpected shape (a held-out test the table has not seen): say so, do not fail the run
        tr.skipped = f"arguments not understood ({type(exc).__name__}: {exc})"
    return tr


def _require(a: dict[str, Any], *names: str) -> None:
    missing = [n for n in names if a.get(n) is None]
    if missing:
        raise _Skip("missing required argument(s): " + ", ".join("--" + n.replace("_", "-") for n in missing))


def _fill(a: dict[str, Any], env: Mapping[str, Any], tr: Translation) -> None:
    f = tr.fields
    mech = tr.mechanisms
    spec = a["spec"]
    hybrid = a["hybrid_layer_pattern"] or a["hybrid_override_pattern"]
    if spec is not None and not (spec == ["local"] or (spec and spec[0] == _HYBRID_SPEC)):
        raise _Skip(f"custom layer spec {' '.join(spec)}")
    if spec and spec[0] == _HYBRID_SPEC and not hybrid:
        raise _Skip("hybrid layer spec without a hybrid layer pattern")
    _require(a, "hidden_size", "num_attention_heads", "micro_batch_size", "seq_length")
    tp, pp = a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]
    cp, ep = a["context_parallel_size"], a["expert_model_parallel_size"]
    if hybrid:
        a["hybrid_layer_pattern"] = hybrid
        pattern, num_layers, hybrid_vpp, mtp_depths = _hybrid(a, pp, tr)
        tr.provider = "hybrid"
        mech.append("hybrid")
    else:
        _require(a, "num_layers")
        num_layers = int(a["num_layers"])
        pattern, hybrid_vpp, mtp_depths = None, None, None
    h, heads = int(a["hidden_size"]), int(a["num_attention_heads"])
    if min(num_layers, h, heads, int(a["micro_batch_size"]), int(a["seq_length"]), tp, pp, cp, ep) < 1:
        raise _Skip("a model size, batch size, sequence length or parallel size below 1")
    # precision (validate_args L1194-1216)
    if a["fp16"] and a["bf16"]:
        raise _Skip("--fp16 and --bf16 together")
    params = BF16 if a["bf16"] else FP16 if a["fp16"] else FP32
    grads_fp32 = bool(a["accumulate_allreduce_grads_in_fp32"])
    if a["bf16"]:
        if a["grad_reduce_in_bf16"]:
            grads_fp32 = False
        elif a["main_grads_dtype"] == "fp32":
            grads_fp32 = True
    if params == FP32:
        grads_fp32 = True
    # derived sizes (validate_args L1320-1333, L587, L1650)
    ffn = a["ffn_hidden_size"]
    if ffn is None:
        ffn = int((4 * h * 2 / 3) / 64) * 64 if a["swiglu"] else 4 * h
    kv = a["kv_channels"] if a["kv_channels"] is not None else h // heads
    etp = a["expert_tensor_parallel_size"] if a["expert_tensor_parallel_size"] is not None else tp
    sp = bool(a["sequence_parallel"]) and tp > 1
    add_bias = bool(a["add_bias_linear"])
    bias_gelu = bool(a["bias_gelu_fusion"]) and add_bias
    pos = "rope" if a["use_rotary_position_embeddings"] else a["position_embedding_type"]
    rope_fusion = bool(a["apply_rope_fusion"]) and pos == "rope"
    mla = bool(a["multi_latent_attention"])
    if mla:
        tr.provider = "mla" if tr.provider == "gpt" else tr.provider
        mech.append("MLA")
    local = a["transformer_impl"] == "local" or spec == ["local"]
    backend = "local" if local else str(a["attention_backend"])
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise _Skip(f"attention backend {backend!r}")
    # the model config (core_transformer_config_from_args)
    m = {
        "num_layers": num_layers, "hidden_size": h, "num_attention_heads": heads, "ffn_hidden_size": int(ffn),
        "kv_channels": int(kv), "num_query_groups": int(a["num_query_groups"]) if a["group_query_attention"] else heads,
        "seq_length": int(a["seq_length"]),
        "position_embedding_type": pos, "apply_rope_fusion": rope_fusion,
        "normalization": a["normalization"], "qk_layernorm": bool(a["qk_layernorm"]),
        "add_bias_linear": add_bias, "add_qkv_bias": bool(a["add_qkv_bias"]) or add_bias,
        "share_embeddings_and_output_weights": not a["untie_embeddings_and_output_weights"],
        "hidden_dropout": float(a["hidden_dropout"]), "attention_dropout": float(a["attention_dropout"]),
        "attention_softmax_in_fp32": bool(a["attention_softmax_in_fp32"] or a["apply_query_key_layer_scaling"]),
        "apply_query_key_layer_scaling": bool(a["apply_query_key_layer_scaling"]),
        "masked_softmax_fusion": bool(a["masked_softmax_fusion"]), "bias_dropout_fusion": bool(a["bias_dropout_fusion"]),
        "attention_backend": Symbol(f"AttnBackend.{backend}"),
        "cross_entropy_loss_fusion": bool(a["cross_entropy_loss_fusion"]),
        "cross_entropy_fusion_impl": a["cross_entropy_fusion_impl"],
        "vocab_size": _vocab(a) if a["padded_vocab_size"] is None else int(a["padded_vocab_size"]),
        "should_pad_vocab": a["padded_vocab_size"] is None,
        "make_vocab_size_divisible_by": int(a["make_vocab_size_divisible_by"]),
        "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
        "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp, "sequence_parallel": sp,
        "params_dtype": params, "pipeline_dtype": params, "bf16": bool(a["bf16"]), "fp16": bool(a["fp16"]),
        "defer_embedding_wgrad_compute": bool(a["defer_embedding_wgrad_compute"]),
        "wgrad_deferral_limit": int(a["wgrad_deferral_limit"]), "tp_comm_overlap": bool(a["tp_comm_overlap"]),
        "deallocate_pipeline_outputs": True,
    }
    if a["max_position_embeddings"] is None:
        raise _Skip("missing required argument(s): --max-position-embeddings")
    if pos == "learned_absolute" and int(a["max_position_embeddings"]) != int(a["seq_length"]):
        # Bridge sizes the learned position table by seq_length (GPTModelProvider.provide); Megatron-LM by
        # --max-position-embeddings (gpt_config_from_args). The table is max_position x hidden parameters.
        tr.notes.append("learned position table sized by --seq-length, not --max-position-embeddings")
    # activation (core_transformer_config_from_args: swiglu / squared_relu / quick_geglu)
    if a["swiglu"]:
        m.update(gated_linear_unit=True, activation_func=Symbol("F.silu"), bias_activation_fusion=bool(a["bias_swiglu_fusion"]))
    elif a["quick_geglu"]:
        m.update(gated_linear_unit=True, activation_func=Symbol("quick_gelu"), bias_activation_fusion=bias_gelu)
    elif a["squared_relu"]:
        m.update(gated_linear_unit=False, activation_func=Symbol("squared_relu"), bias_activation_fusion=bias_gelu)
        if a["use_fused_weighted_squared_relu"]:
            m["use_fused_weighted_squared_relu"] = True
    else:
        m.update(gated_linear_unit=False, activation_func=Symbol("F.gelu"), bias_activation_fusion=bias_gelu)
    # pipeline layout
    if pp > 1:
        mech.append("PP")
    vpp = hybrid_vpp
    layout = a["pipeline_model_parallel_layout"]
    if layout is not None:
        stages = _layout_stages(str(layout))
        if stages % pp:
            raise _Skip("pipeline layout stages not divisible by the pipeline size")
        vpp = stages // pp if stages > pp else None
        m["pipeline_model_parallel_layout"] = str(layout)
        mech.append("pipeline layout")
    elif not hybrid:
        vpp = _vpp(a, num_layers, pp)
    if vpp:
        m["virtual_pipeline_model_parallel_size"] = vpp
        mech.append("VPP")
        if a.get("microbatch_group_size_per_vp_stage") is not None:
            m["microbatch_group_size_per_vp_stage"] = int(a["microbatch_group_size_per_vp_stage"])
    first, last = a["decoder_first_pipeline_num_layers"], a["decoder_last_pipeline_num_layers"]
    if first is not None or last is not None:
        m["num_layers_in_first_pipeline_stage"] = first
        m["num_layers_in_last_pipeline_stage"] = last
        mech.append("uneven pipeline")
    m["account_for_embedding_in_pipeline_split"] = bool(a["account_for_embedding_in_pipeline_split"])
    m["account_for_loss_in_pipeline_split"] = bool(a["account_for_loss_in_pipeline_split"])
    if cp > 1:
        mech.append("CP")
        cp_type = a["cp_comm_type"]
        m["cp_comm_type"] = cp_type[0] if isinstance(cp_type, list) and len(cp_type) == 1 else cp_type
        if a.get("hierarchical_context_parallel_sizes"):
            m["hierarchical_context_parallel_sizes"] = a["hierarchical_context_parallel_sizes"]
    if sp:
        mech.append("SP")
    if tp > 1:
        mech.append("TP")
    # MoE
    if a["num_moe_experts"]:
        mech.append("MoE")
        if ep > 1:
            mech.append("EP")
        freq = a["moe_layer_freq"]
        if isinstance(freq, str):
            try:
                freq = int(freq) if freq.strip().isdigit() else eval_int_list(freq)
            except ValueError as exc:
                raise _Skip(str(exc)) from None
        lb = a["moe_router_load_balancing_type"]
        m.update(
            num_moe_experts=int(a["num_moe_experts"]),
            moe_ffn_hidden_size=int(a["moe_ffn_hidden_size"] if a["moe_ffn_hidden_size"] is not None else ffn),
            moe_router_topk=int(a["moe_router_topk"]), moe_layer_freq=freq,
            moe_grouped_gemm=bool(a["moe_grouped_gemm"]), moe_token_dispatcher_type=a["moe_token_dispatcher_type"],
            moe_router_load_balancing_type=lb[0] if isinstance(lb, list) and len(lb) == 1 else lb,
            moe_permute_fusion=bool(a["moe_permute_fusion"]),
            moe_shared_expert_overlap=bool(a["moe_shared_expert_overlap"]),
        )
        if a["moe_shared_expert_intermediate_size"]:
            m["moe_shared_expert_intermediate_size"] = int(a["moe_shared_expert_intermediate_size"])
        for k in ("moe_expert_capacity_factor", "moe_router_dtype", "moe_latent_size"):
            if a[k] is not None:
                m[k] = a[k]
        if a["moe_pad_expert_input_to_capacity"]:
            m["moe_pad_expert_input_to_capacity"] = True
        for k in ("moe_router_topk_scaling_factor", "moe_router_score_function", "moe_router_num_groups",
                  "moe_router_group_topk", "moe_router_pre_softmax", "moe_router_enable_expert_bias",
                  "moe_flex_dispatcher_backend", "overlap_moe_expert_parallel_comm", "moe_z_loss_coeff"):
            if a.get(k) is not None:
                m[k] = a[k]
    elif ep > 1:
        raise _Skip("expert parallelism without experts")
    # MLA (MLATransformerConfig fields; arguments.py _add_mla_args L3546-3573 defaults)
    if mla:
        m.update(multi_latent_attention=True, q_lora_rank=a["q_lora_rank"], kv_lora_rank=int(a["kv_lora_rank"]),
                 qk_head_dim=int(a["qk_head_dim"]), qk_pos_emb_head_dim=int(a["qk_pos_emb_head_dim"]),
                 v_head_dim=int(a["v_head_dim"]))
    # Mamba / hybrid
    if hybrid:
        m.update(hybrid_layer_pattern=pattern, mamba_state_dim=int(a["mamba_state_dim"]),
                 mamba_head_dim=int(a["mamba_head_dim"]), mamba_num_groups=int(a["mamba_num_groups"]))
        if a["mamba_num_heads"] is not None:
            m["mamba_num_heads"] = int(a["mamba_num_heads"])
    mtp = mtp_depths if mtp_depths is not None else a["mtp_num_layers"]
    if mtp:
        m["mtp_num_layers"] = int(mtp)
        mech.append("MTP")
    # recompute (validate_args L607; TransformerConfig fields)
    gran = "selective" if a["recompute_activations"] else a["recompute_granularity"]
    if gran is not None:
        if gran not in ("selective", "full"):
            raise _Skip(f"recompute granularity {gran!r}")
        m["recompute_granularity"] = gran
        if gran == "full":
            mech.append("full recompute")
            m["recompute_method"] = a["recompute_method"]
            m["recompute_num_layers"] = a["recompute_num_layers"]
        else:
            mech.append("selective recompute")
            m["recompute_modules"] = a["recompute_modules"] if a["recompute_modules"] is not None else ["core_attn"]
    # activation offloading
    if a["fine_grained_activation_offloading"]:
        m.update(fine_grained_activation_offloading=True, offload_modules=list(a["offload_modules"]))
        mech.append("activation offloading")
    if a["cpu_offloading_num_layers"]:
        m.update(cpu_offloading=True, cpu_offloading_num_layers=int(a["cpu_offloading_num_layers"]))
        mech.append("activation offloading")
    # CUDA graphs (validate_args L612-631; --cuda-graph-modules, empty = the whole layer)
    impl = a["cuda_graph_impl"]
    if a["enable_cuda_graph"]:
        impl = "local"
    if a["external_cuda_graph"]:
        impl = "transformer_engine"
    if impl not in ("none", "local", "transformer_engine", "full_iteration"):
        raise _Skip(f"CUDA graph implementation {impl!r}")
    if impl != "none":
        mods = a["cuda_graph_modules"] or a["cuda_graph_scope"] or []
        mods = [] if mods in (["full"], "full") else list(mods)
        m["cuda_graph_impl"] = impl
        m["cuda_graph_scope"] = mods
        m["cuda_graph_warmup_steps"] = int(a["cuda_graph_warmup_steps"])
        mech.append("CUDA graphs")
    # low precision (fp8 flags: --fp8-format, --fp8-recipe, --fp8-param-gather = fp8_param)
    if a["fp8"] is not None:
        m.update(fp8=a["fp8"], fp8_recipe=a["fp8_recipe"], fp8_param=bool(a["fp8_param_gather"]))
        if a["first_last_layers_bf16"]:
            m["first_last_layers_bf16"] = True
        mech.append("FP8")
    if a["fp4"] is not None:
        m.update(fp4=a["fp4"], fp4_param=bool(a["fp4_param_gather"]))
        mech.append("FP4")
    for k, v in m.items():
        f[f"model.{k}"] = v
    # training, optimizer and data parallelism
    gbs = a["global_batch_size"]
    f["train.micro_batch_size"] = int(a["micro_batch_size"])
    if gbs is not None:
        f["train.global_batch_size"] = int(gbs)
    f["dataset.seq_length"] = int(a["seq_length"])
    opt = str(a["optimizer"])
    dist = bool(a["use_distributed_optimizer"])
    if opt not in ("adam", "sgd", "muon", "dist_muon"):
        raise _Skip(f"optimizer {opt!r}")
    if opt in ("muon", "dist_muon"):
        # Muon with --use-distributed-optimizer (or the deprecated dist_muon) is the layer-wise distributed
        # optimizer, not the distributed optimizer (validate_args L1726-1738); Bridge names it "dist_muon"
        # (training/optim.py: layer_wise_distributed_optimizer="dist" in optimizer)
        opt, dist = ("dist_muon" if dist or opt == "dist_muon" else "muon"), False
        mech.append("Muon")
    f["optimizer.optimizer"] = opt
    f["optimizer.use_distributed_optimizer"] = dist
    f["ddp.use_distributed_optimizer"] = dist
    if dist:
        mech.append("distributed optimizer")
    if a["num_distributed_optimizer_instances"] != 1:
        f["ddp.num_distributed_optimizer_instances"] = int(a["num_distributed_optimizer_instances"])
    f["ddp.grad_reduce_in_fp32"] = grads_fp32
    f["ddp.overlap_grad_reduce"] = bool(a["overlap_grad_reduce"])
    f["ddp.overlap_param_gather"] = bool(a["overlap_param_gather"])
    f["optimizer.bf16"] = bool(a["bf16"])
    f["optimizer.fp16"] = bool(a["fp16"])
    f["optimizer.params_dtype"] = params
    if a["use_precision_aware_optimizer"]:
        f["optimizer.use_precision_aware_optimizer"] = True
        for k in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            f[f"optimizer.{k}"] = {"fp32": FP32, "bf16": BF16, "fp16": FP16}.get(a[k], Symbol("torch.uint8"))
    if a["optimizer_cpu_offload"]:
        f["optimizer.optimizer_cpu_offload"] = True
        f["optimizer.optimizer_offload_fraction"] = float(a["optimizer_offload_fraction"])
        mech.append("optimizer offload")
    if a["use_torch_fsdp2"]:
        raise _Skip("PyTorch FSDP2 (--use-torch-fsdp2)")
    if a["use_megatron_fsdp"]:
        f["ddp.use_megatron_fsdp"] = True
        f["ddp.data_parallel_sharding_strategy"] = a["data_parallel_sharding_strategy"]
        mech.append("Megatron-FSDP")
    # environment the estimate reads
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "NCCL_NVLS_ENABLE"):
        if k in env:
            f[f"env_vars.{k}"] = str(env[k])
    if local:
        tr.notes.append("--transformer-impl local: MCore's local layers, unfused DotProductAttention")
    tr.mechanisms = list(dict.fromkeys(mech))
    tr.kind = ("hybrid" if tr.provider == "hybrid" else "MLA" if mla else "MoE" if a["num_moe_experts"]
               else "dense")
