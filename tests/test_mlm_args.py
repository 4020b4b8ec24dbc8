"""Megatron-LM arguments → Megatron Bridge fields (mbmem_lint/dev/mlm_args.py): Megatron-LM's defaults and its
validate_args post-processing (megatron/training/arguments.py), hand-checked per argument."""

from __future__ import annotations

from typing import Any

import pytest

from mbmem_lint.dev.mlm_args import (
    NO_MEMORY_EFFECT,
    UNSUPPORTED,
    Symbol,
    Translation,
    eval_int_list,
    translate,
)

BASE: dict[str, Any] = {
    "--num-layers": 12, "--hidden-size": 512, "--num-attention-heads": 8, "--seq-length": 1024,
    "--max-position-embeddings": 1024, "--micro-batch-size": 4, "--global-batch-size": 32, "--bf16": True,
    "--vocab-file": "${DATA_PATH}/bpe/vocab.json", "--merge-file": "${DATA_PATH}/bpe/merges.txt",
}


def run(**extra: Any) -> Translation:
    args = dict(BASE)
    for k, v in extra.items():
        key = "--" + k.replace("_", "-")
        if v is None:
            args.pop(key, None)
        else:
            args[key] = v
    return translate(args, {})


def fields(**extra: Any) -> dict[str, Any]:
    tr = run(**extra)
    assert tr.skipped is None, tr.skipped
    return tr.fields


def test_defaults_are_megatron_lms_not_bridges() -> None:
    f = fields()
    # 4h MLP, h/heads channels, no GQA, GeLU with bias-GeLU fusion, learned positions, LayerNorm, biases (qkv too)
    assert f["model.ffn_hidden_size"] == 2048 and f["model.kv_channels"] == 64
    assert f["model.num_query_groups"] == 8
    assert f["model.gated_linear_unit"] is False and f["model.activation_func"] == Symbol("F.gelu")
    assert f["model.bias_activation_fusion"] is True
    assert f["model.position_embedding_type"] == "learned_absolute" and f["model.apply_rope_fusion"] is False
    assert f["model.normalization"] == "LayerNorm"
    assert f["model.add_bias_linear"] is True and f["model.add_qkv_bias"] is True
    assert f["model.share_embeddings_and_output_weights"] is True
    # dropout 0.1 (TransformerConfig), softmax not in fp32, masked-softmax fusion on, no CE fusion
    assert f["model.hidden_dropout"] == 0.1 and f["model.attention_dropout"] == 0.1
    assert f["model.attention_softmax_in_fp32"] is False and f["model.masked_softmax_fusion"] is True
    assert f["model.cross_entropy_loss_fusion"] is False
    assert f["model.attention_backend"] == Symbol("AttnBackend.auto")
    # GPT-2 BPE vocabulary, padded by Megatron-LM's rule (the estimator pads: 128 x TP)
    assert f["model.vocab_size"] == 50257 and f["model.should_pad_vocab"] is True
    assert f["model.make_vocab_size_divisible_by"] == 128
    # bf16: params bf16, gradients accumulated and reduced in fp32 (validate_args L1203-1216); Adam, no dist-opt
    assert f["model.params_dtype"] == Symbol("torch.bfloat16")
    assert f["ddp.grad_reduce_in_fp32"] is True
    assert f["optimizer.optimizer"] == "adam" and f["optimizer.use_distributed_optimizer"] is False
    assert f["train.micro_batch_size"] == 4 and f["train.global_batch_size"] == 32
    assert f["model.seq_length"] == 1024 and f["dataset.seq_length"] == 1024


def test_swiglu_ffn_and_fusion_flags() -> None:
    f = fields(swiglu=True, hidden_size=4096, num_attention_heads=32)
    assert f["model.ffn_hidden_size"] == int((4 * 4096 * 2 / 3) / 64) * 64 == 10880
    assert f["model.gated_linear_unit"] is True and f["model.activation_func"] == Symbol("F.silu")
    assert f["model.bias_activation_fusion"] is True
    assert fields(swiglu=True, no_bias_swiglu_fusion=True)["model.bias_activation_fusion"] is False
    # --disable-bias-linear turns bias-GeLU fusion off (L1604-1606), not the SwiGLU one
    assert fields(disable_bias_linear=True)["model.bias_activation_fusion"] is False
    f = fields(disable_bias_linear=True, swiglu=True)
    assert f["model.bias_activation_fusion"] is True and f["model.add_qkv_bias"] is False
    assert fields(ffn_hidden_size=3000, swiglu=True)["model.ffn_hidden_size"] == 3000
    assert fields(squared_relu=True)["model.activation_func"] == Symbol("squared_relu")
    f = fields(quick_geglu=True)
    assert f["model.gated_linear_unit"] is True and f["model.activation_func"] == Symbol("quick_gelu")


def test_query_groups_only_with_group_query_attention() -> None:
    assert fields(num_query_groups=2)["model.num_query_groups"] == 8  # ignored without the flag
    assert fields(num_query_groups=2, group_query_attention=True)["model.num_query_groups"] == 2
    assert fields(group_query_attention=True)["model.num_query_groups"] == 1  # the argument's default
    assert fields(kv_channels=128)["model.kv_channels"] == 128


def test_positions_rope_and_tied_embeddings() -> None:
    f = fields(position_embedding_type="rope")
    assert f["model.position_embedding_type"] == "rope" and f["model.apply_rope_fusion"] is True
    assert fields(position_embedding_type="rope", no_rope_fusion=True)["model.apply_rope_fusion"] is False
    assert fields(use_rotary_position_embeddings=True)["model.position_embedding_type"] == "rope"
    assert fields(untie_embeddings_and_output_weights=True)["model.share_embeddings_and_output_weights"] is False
    assert fields(apply_query_key_layer_scaling=True)["model.attention_softmax_in_fp32"] is True


def test_parallel_sizes_and_sequence_parallel() -> None:
    f = fields(tensor_model_parallel_size=1, sequence_parallel=True)
    assert f["model.sequence_parallel"] is False  # off at TP 1 (L1431-1439)
    f = fields(tensor_model_parallel_size=2, sequence_parallel=True, context_parallel_size=2)
    assert f["model.sequence_parallel"] is True and f["model.context_parallel_size"] == 2
    assert f["model.expert_tensor_parallel_size"] == 2  # ETP defaults to TP (L587)
    assert "CP" in run(context_parallel_size=2).mechanisms


def test_virtual_pipeline_from_layers_per_stage() -> None:
    f = fields(pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=1)
    assert f["model.virtual_pipeline_model_parallel_size"] == 3  # 12 layers / 4 stages / 1
    # the embedding and the loss count as layers of the split when accounted for (L957-975)
    f = fields(num_layers=14, pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=2,
               account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    assert f["model.virtual_pipeline_model_parallel_size"] == 2
    assert f["model.account_for_embedding_in_pipeline_split"] is True
    f = fields(pipeline_model_parallel_size=4, num_virtual_stages_per_pipeline_rank=3)
    assert f["model.virtual_pipeline_model_parallel_size"] == 3
    f = fields(pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=3)
    assert "model.virtual_pipeline_model_parallel_size" not in f  # 1 virtual stage: no interleaving
    assert "VPP" in run(pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=1).mechanisms
    assert run(pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=5).skipped


def test_pipeline_layout_and_uneven_stages() -> None:
    f = fields(num_layers=15, pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Et*3|(tt|)*6L")
    assert f["model.pipeline_model_parallel_layout"] == "Et*3|(tt|)*6L"
    assert f["model.virtual_pipeline_model_parallel_size"] == 4  # 8 stages over PP 2
    f = fields(pipeline_model_parallel_size=4, decoder_first_pipeline_num_layers=2,
               decoder_last_pipeline_num_layers=2)
    assert f["model.num_layers_in_first_pipeline_stage"] == 2 and f["model.num_layers_in_last_pipeline_stage"] == 2


def test_moe_arguments() -> None:
    f = fields(num_experts=8, moe_router_topk=1, expert_model_parallel_size=2, moe_grouped_gemm=True,
               moe_token_dispatcher_type="alltoall", moe_layer_freq="([0]*3+[1]*9)")
    assert f["model.num_moe_experts"] == 8 and f["model.moe_router_topk"] == 1
    assert f["model.moe_ffn_hidden_size"] == 2048  # ffn_hidden_size (L1650)
    assert f["model.moe_layer_freq"] == [0, 0, 0] + [1] * 9
    assert f["model.moe_grouped_gemm"] is True and f["model.moe_token_dispatcher_type"] == "alltoall"
    assert f["model.moe_router_load_balancing_type"] == "aux_loss"
    assert fields(num_experts=8)["model.moe_token_dispatcher_type"] == "allgather"  # TransformerConfig default
    assert fields(num_experts=8, moe_router_load_balancing_type="[seq_aux_loss]")[
        "model.moe_router_load_balancing_type"] == "seq_aux_loss"
    assert run(num_experts=8).kind == "MoE" and run().kind == "dense"
    assert run(expert_model_parallel_size=2).skipped  # EP without experts


def test_eval_int_list_is_a_safe_evaluator() -> None:
    assert eval_int_list("([0]*1+[1]*3)*2") == [0, 1, 1, 1, 0, 1, 1, 1]
    for bad in ("__import__('os')", "[1.5]", "[x]"):
        with pytest.raises(ValueError):
            eval_int_list(bad)


def test_mla_defaults() -> None:
    tr = run(multi_latent_attention=True, num_experts=8)
    f = tr.fields
    assert tr.provider == "mla" and tr.kind == "MLA"
    # _add_mla_args: q_lora_rank None (no q compression), kv_lora_rank 32, qk 128, rope 64, v 128
    assert f["model.q_lora_rank"] is None and f["model.kv_lora_rank"] == 32
    assert (f["model.qk_head_dim"], f["model.qk_pos_emb_head_dim"], f["model.v_head_dim"]) == (128, 64, 128)


def test_hybrid_pattern() -> None:
    tr = run(hybrid_layer_pattern="M-M-|M*-E/*E/*E", num_layers=52, pipeline_model_parallel_size=1)
    assert tr.skipped is None and tr.provider == "hybrid" and tr.kind == "hybrid"
    f = tr.fields
    # the pattern decides the layer count (L766-776); '/' separates the MTP depths (L860-873)
    assert f["model.hybrid_layer_pattern"] == "M-M-M*-E" and f["model.num_layers"] == 8
    assert f["model.mtp_num_layers"] == 2
    f = fields(hybrid_layer_pattern="M-M-|M-M-|M*-|M*-", pipeline_model_parallel_size=2)
    assert f["model.virtual_pipeline_model_parallel_size"] == 2  # 4 segments over PP 2 (L822-840)
    assert fields(hybrid_override_pattern="M*M-")["model.hybrid_layer_pattern"] == "M*M-"
    assert run(hybrid_layer_pattern="MQM").skipped


def test_recompute() -> None:
    f = fields(recompute_activations=True)
    assert f["model.recompute_granularity"] == "selective" and f["model.recompute_modules"] == ["core_attn"]
    f = fields(recompute_granularity="selective", recompute_modules="[moe_act mla_up_proj]")
    assert f["model.recompute_modules"] == ["moe_act", "mla_up_proj"]
    f = fields(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    assert (f["model.recompute_granularity"], f["model.recompute_method"], f["model.recompute_num_layers"]) == (
        "full", "uniform", 1)
    assert "full recompute" in run(recompute_granularity="full", recompute_method="block").mechanisms


def test_cuda_graphs_and_offloading() -> None:
    f = fields(enable_cuda_graph=True)
    assert f["model.cuda_graph_impl"] == "local" and f["model.cuda_graph_scope"] == []
    f = fields(external_cuda_graph=True, cuda_graph_modules="[attn mlp]")
    assert f["model.cuda_graph_impl"] == "transformer_engine" and f["model.cuda_graph_scope"] == ["attn", "mlp"]
    assert fields(cuda_graph_impl="transformer_engine", cuda_graph_scope="[full]")["model.cuda_graph_scope"] == []
    assert "model.cuda_graph_impl" not in fields()
    f = fields(fine_grained_activation_offloading=True, offload_modules="[core_attn moe_act]")
    assert f["model.fine_grained_activation_offloading"] is True
    assert f["model.offload_modules"] == ["core_attn", "moe_act"]
    f = fields(cpu_offloading_num_layers=2)
    assert f["model.cpu_offloading"] is True and f["model.cpu_offloading_num_layers"] == 2


def test_low_precision_and_optimizer() -> None:
    f = fields(fp8_format="hybrid", fp8_recipe="tensorwise", fp8_param_gather=True, use_distributed_optimizer=True)
    assert (f["model.fp8"], f["model.fp8_recipe"], f["model.fp8_param"]) == ("hybrid", "tensorwise", True)
    assert f["optimizer.use_distributed_optimizer"] is True and f["ddp.use_distributed_optimizer"] is True
    assert fields(fp8_format="e4m3")["model.fp8_recipe"] == "delayed"  # TransformerConfig default
    assert fields(grad_reduce_in_bf16=True)["ddp.grad_reduce_in_fp32"] is False
    f = fields(bf16=None, fp16=True)
    assert f["model.params_dtype"] == Symbol("torch.float16") and f["ddp.grad_reduce_in_fp32"] is False
    assert fields(bf16=None)["model.params_dtype"] == Symbol("torch.float32")
    # Muon + distributed optimizer = the layer-wise optimizer, Bridge's "dist_muon" (L1726-1738)
    f = fields(optimizer="muon", use_distributed_optimizer=True)
    assert f["optimizer.optimizer"] == "dist_muon" and f["optimizer.use_distributed_optimizer"] is False
    assert fields(optimizer="muon")["optimizer.optimizer"] == "muon"
    assert fields(num_distributed_optimizer_instances=2)["ddp.num_distributed_optimizer_instances"] == 2
    f = fields(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    assert f["ddp.use_megatron_fsdp"] is True and f["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    f = fields(optimizer_cpu_offload=True)
    assert f["optimizer.optimizer_offload_fraction"] == 1.0  # Megatron-LM's default, not MCore's 0.0
    assert run(optimizer="lion").skipped


def test_tokenizers() -> None:
    assert fields(tokenizer_type="NullTokenizer", vocab_size=131073)["model.vocab_size"] == 131073
    assert fields(tokenizer_type="GPTSentencePieceTokenizer",
                  tokenizer_model="${DATA_PATH}/utils/nemotron_2_256k.model")["model.vocab_size"] == 256000
    assert fields(tokenizer_type="Llama2Tokenizer")["model.vocab_size"] == 32000
    f = fields(padded_vocab_size=201088)
    assert f["model.vocab_size"] == 201088 and f["model.should_pad_vocab"] is False
    assert run(tokenizer_type="HuggingFaceTokenizer", tokenizer_model="x/y").skipped
    assert run(tokenizer_type="${TOKENIZER_TYPE}").skipped


def test_local_implementation_runs_unfused_attention() -> None:
    tr = run(transformer_impl="local")
    assert tr.fields["model.attention_backend"] == Symbol("AttnBackend.local")
    assert fields(attention_backend="flash")["model.attention_backend"] == Symbol("AttnBackend.flash")


def test_what_is_skipped_and_why() -> None:
    assert run(foo_bar=3).skipped == "Megatron-LM argument --foo-bar is not mapped"
    assert run(use_checkpoint_args=True).skipped == UNSUPPORTED["use-checkpoint-args"]
    assert run(micro_batch_size="${MBS}").skipped == "--micro-batch-size takes its value from the environment (${MBS})"
    assert run(seq_length=None).skipped == "missing required argument(s): --seq-length"
    assert run(sequence_parallel=False).skipped  # a flag given false is not what the runner passes
    assert run(transformer_impl="inference_optimized").skipped
    assert run(spec="[my.module my_spec]").skipped
    # arguments without a memory effect are accepted and change nothing
    assert run(lr=1e-4, save_interval=5, log_interval=1).fields == run().fields
    assert {"lr", "save", "data-path", "eval-iters", "seed", "deterministic-mode"} <= set(NO_MEMORY_EFFECT)


def test_provider_fields_pass_through_with_their_types() -> None:
    passthrough = {"moe_aux_loss_coeff_x": ("float", 0.0), "some_flag": ("bool", True)}
    tr = translate({**BASE, "--moe-aux-loss-coeff-x": "0.01", "--no-some-flag": True}, {},
                   passthrough=passthrough)
    assert tr.skipped is None
    assert tr.fields["model.moe_aux_loss_coeff_x"] == 0.01 and tr.fields["model.some_flag"] is False
    assert translate({**BASE, "--other": 1}, {}, passthrough=passthrough).skipped


def test_environment_the_estimate_reads() -> None:
    tr = translate(BASE, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_NVLS_ENABLE": 0,
                          "CUDA_DEVICE_MAX_CONNECTIONS": 1})
    assert tr.fields["env_vars.PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert tr.fields["env_vars.NCCL_NVLS_ENABLE"] == "0"
    assert "env_vars.CUDA_DEVICE_MAX_CONNECTIONS" not in tr.fields


def test_values_megatron_lm_would_refuse_are_skipped_not_raised() -> None:
    assert run(num_attention_heads=0).skipped == "a model size, batch size, sequence length or parallel size below 1"
    assert run(hidden_size="[1 2]").skipped == "--hidden-size: cannot read '[1 2]' as int"
    assert run(kv_channels=None, hidden_size=500, num_attention_heads=7).skipped is None  # h // heads, as MLM


def test_world_sizes_megatron_lm_would_refuse() -> None:
    from mbmem_lint.dev.mlm_goldens import _layout_problem

    tr = run(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, num_experts=8, expert_model_parallel_size=4,
             expert_tensor_parallel_size=1)
    assert _layout_problem(tr, 8) == "" and _layout_problem(tr, 16) == ""
    assert _layout_problem(tr, 6) == "world size 6 not divisible by TP·PP·CP = 4"
    assert _layout_problem(tr, 4) == "world size 4 / PP 2 not divisible by EP·ETP = 4"
    # expert TP defaults to TP: EP 4 x ETP 2 needs 8 ranks per pipeline stage
    wide = run(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, num_experts=8, expert_model_parallel_size=4)
    assert _layout_problem(wide, 8) == "world size 8 / PP 2 not divisible by EP·ETP = 8"
