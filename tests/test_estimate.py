"""Unit tests for the estimator's component formulas (hand-computed) and the JSON contract."""

from __future__ import annotations

import pytest

from mbmem_lint.estimate import EstimateUnavailable, UnknownGpuError, estimate_recipe, resolve_gpu
from mbmem_lint.estimate.activations import layer_terms
from mbmem_lint.estimate.inputs import Inputs, read_inputs
from mbmem_lint.estimate.params import attention, dense_mlp, mamba, moe
from mbmem_lint.estimate.pipeline import inflight_microbatches, stage_layer_indices
from mbmem_lint.estimate.render import render_markdown, render_text
from mbmem_lint.estimate.suggest import capacity_findings, suggestions
from mbmem_lint.estimate.types import StageEstimate
from mbmem_lint.resolve.resolved import UNKNOWN, recipe_from_values

TINY = {
    "model.num_layers": 4,
    "model.hidden_size": 1024,
    "model.num_attention_heads": 8,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 4096,
    "model.vocab_size": 32000,
    "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm",
    "model.add_bias_linear": False,
    "model.hidden_dropout": 0.0,
    "model.attention_dropout": 0.0,
    "model.position_embedding_type": "rope",
    "model.seq_length": 2048,
    "train.micro_batch_size": 1,
    "model.params_dtype": "torch.bfloat16",
    "ddp.grad_reduce_in_fp32": True,
}


def _bytes(stage: StageEstimate, name: str) -> int:
    comp = stage.component(name)
    assert comp is not None, name
    return comp.bytes


def _inp(**kw: object) -> Inputs:
    return read_inputs({**TINY, **kw}.get, 8)


def test_gpu_catalog_aliases_and_error() -> None:
    assert resolve_gpu("h100").name == "h100-80gb"
    assert resolve_gpu("H100_SXM").usable_bytes == 84935720960  # 79.10 GiB
    assert resolve_gpu("a100").name == "a100-40gb"
    assert resolve_gpu("gb200").family == "blackwell"
    with pytest.raises(UnknownGpuError, match="known names: .*h200"):
        resolve_gpu("tpu-v5")


def test_attention_gqa_params() -> None:
    s = _inp().shape
    # qkv: 1024*(8+2*2)*128 = 1,572,864; proj: 8*128*1024 = 1,048,576; RMSNorm 1024
    p = attention(s)
    assert p.tp == 1_572_864 + 1_048_576 and p.rep == 1024


def test_swiglu_mlp_params_and_biases() -> None:
    p = dense_mlp(_inp().shape)
    assert p.tp == 3 * 1024 * 4096  # fc1 (2 x ffn) + fc2
    pb = dense_mlp(_inp(**{"model.add_bias_linear": True, "model.normalization": "LayerNorm"}).shape)
    assert pb.tp == 3 * 1024 * 4096 + 2 * 4096 and pb.rep == 2 * 1024 + 1024


def test_moe_params() -> None:
    s = _inp(
        **{
            "model.num_moe_experts": 8,
            "model.moe_ffn_hidden_size": 512,
            "model.moe_shared_expert_intermediate_size": 1024,
        }
    ).shape
    p = moe(s)
    assert p.expert == 8 * 3 * 1024 * 512  # 8 experts x SwiGLU(1024 -> 512)
    assert p.tp == 3 * 1024 * 1024  # shared expert
    assert p.rep == 1024 + 1024 * 8  # norm + router


def test_mamba_params() -> None:
    s = _inp(
        **{
            "model.hybrid_override_pattern": "M*-M",
            "model.mamba_num_heads": 16,
            "model.mamba_head_dim": 64,
            "model.mamba_state_dim": 128,
            "model.mamba_num_groups": 8,
        }
    ).shape
    assert s.hybrid == "M*-M" and s.num_layers == 4
    di, gs = 16 * 64, 8 * 128
    expected = 1024 * (2 * di + 2 * gs + 16) + (di + 2 * gs) * 5 + 3 * 16 + di + di * 1024
    assert mamba(s).tp == expected


def test_model_state_bytes_adam_distopt() -> None:
    # 1 layer per stage, TP1 PP1, DP8 dist-opt: params = 2,621,440 (attn) + 12,582,912 (mlp) + 2*1024 norms
    # + 1024 final norm + 2 * 32000*1024 (untied embedding + output).
    vals = {
        **TINY,
        "model.num_layers": 1,
        "model.share_embeddings_and_output_weights": False,
        "optimizer.use_distributed_optimizer": True,
    }
    est = estimate_recipe(recipe_from_values(vals, world_size=8))
    n = 2_621_440 + 12_582_912 + 2048 + 1024 + 2 * 32000 * 1024
    st = est.stages[0]
    assert _bytes(st, "weights") == 2 * n
    assert _bytes(st, "gradients") == 4 * n
    assert _bytes(st, "main params") == int(4 * n / 8)
    assert _bytes(st, "optimizer states") == int(8 * n / 8)


def test_peft_freezes_base() -> None:
    vals = {
        **TINY,
        "model.num_layers": 1,
        "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"},
        "peft.dim": 8,
        "peft.target_modules": ["linear_qkv"],
    }
    st = estimate_recipe(recipe_from_values(vals, world_size=1)).stages[0]
    lora = 8 * (1024 + 12 * 128)  # A: 1024x8, B: 8x1536
    assert _bytes(st, "gradients") == 4 * lora
    assert _bytes(st, "optimizer states") == 8 * lora


def test_activation_terms_sp_and_lora_regather() -> None:
    base = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}
    t = layer_terms(_inp(**base), 0)
    T = 2048
    assert t["attn_norm"] == 2 * T * 1024 / 2  # SP shards the replicated LN input
    assert t["mlp_fc1_out"] == 2 * T * 4096 * 2 / 2  # SwiGLU fc1 output (2 x ffn) / TP
    no_sp = layer_terms(_inp(**{"model.tensor_model_parallel_size": 2}), 0)
    assert no_sp["attn_norm"] == 2 * T * 1024  # replicated without SP
    lora = {**base, "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"}}
    assert layer_terms(_inp(**lora), 0)["lora_qkv"] == 2 * T * 1024  # full gathered LoRA-A input kept
    # Re-gather keeps only the sequence-local shard (Bridge peft/utils.py: MCore SP linear saves the local input).
    rg = layer_terms(_inp(**lora, **{"peft.sequence_parallel_input_regather": True}), 0)
    assert rg["lora_qkv"] == 2 * T * 1024 / 2
    # ... but not with selective mlp recompute over fc1 (eligibility gate), nor with CUDA graphs.
    rg_mlp = layer_terms(_inp(**lora, **{"peft.sequence_parallel_input_regather": True,
                                         "model.recompute_granularity": "selective",
                                         "model.recompute_modules": ["mlp"]}), 0)
    assert rg_mlp["lora_fc1"] == 2 * T * 1024 and rg_mlp["lora_qkv"] == 2 * T * 1024 / 2
    # Frozen base (PEFT): TE saves no GEMM inputs for frozen weights; LoRA-A on fc2 saves the bf16 fc2 input.
    lt = layer_terms(_inp(**lora), 0)
    assert "qkv_linear" not in lt and "mlp_fc1_in" not in lt and "mlp_act_out" not in lt
    assert lt["lora_fc2"] == 2 * T * 4096 / 2


def test_recompute_module_semantics() -> None:
    from mbmem_lint.estimate.activations import selective_drops

    T, sel = 2048, {"model.recompute_granularity": "selective"}
    # TE fuses the dense norms into LayerNormLinear (IdentityOp norm modules): "layernorm" drops nothing there.
    dense = layer_terms(_inp(), 0)
    drops = selective_drops(_inp(**sel, **{"model.recompute_modules": ["layernorm"]}))
    assert not drops & set(dense)
    # ... but drops the MoE pre-MLP TENorm output.
    moe = _inp(**sel, **{"model.recompute_modules": ["layernorm"], "model.num_moe_experts": 4})
    assert layer_terms(moe, 0)["moe_norm_out"] == 2 * T * 1024 and "moe_norm_out" in selective_drops(moe)
    # "mlp" checkpoints the whole dense MLP: fc1's saved norm output, fc1 output and fc2 input all go.
    assert {"mlp_fc1_in", "mlp_fc1_out", "mlp_act_out"} <= selective_drops(_inp(**sel, **{"model.recompute_modules": ["mlp"]}))
    # "core_attn": q, k, v are the checkpoint inputs and stay; O stays too when the bf16 projection saves it.
    ca = layer_terms(_inp(), 0)
    assert ca["core_attn"] == 2 * T * (8 + 4) * 128 and ca["attn_proj"] == 2 * T * 8 * 128
    assert ca["core_attn_out"] == 4 * T * 8  # softmax stats only


def test_fp8_param_bytes_per_family() -> None:
    from mbmem_lint.estimate.model_state import fp8_param_bytes

    assert fp8_param_bytes("tensorwise", "hopper") == 2.0  # data + transpose (post_all_gather_processing)
    assert fp8_param_bytes("tensorwise", "blackwell") == 1.0
    assert fp8_param_bytes("mxfp8", "blackwell") == 2.0 * (1 + 1 / 32)  # row + column-wise, E8M0 scales


def test_gpu_capacity_is_marketed_and_above_usable() -> None:
    from mbmem_lint.estimate.gpus import _catalog

    h100 = resolve_gpu("h100-80gb")
    assert h100.capacity_bytes == 80 * 2**30 and h100.usable_bytes == 84935720960
    for spec in _catalog()[0].values():
        assert spec.capacity_bytes >= spec.usable_bytes, spec.name


def test_pipeline_inflight_and_layout() -> None:
    inp = _inp(
        **{
            "model.pipeline_model_parallel_size": 4,
            "model.num_layers": 8,
            "model.virtual_pipeline_model_parallel_size": 2,
        }
    )
    assert stage_layer_indices(8, inp.par, []) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # interleaved: (2*(4-0-1) + (2-1)*4 + 1) / 2 = 5.5 = PP*(1 + (PP-1)/(PP*v))
    assert inflight_microbatches(inp.par, 0, None) == 5.5
    inp1 = _inp(**{"model.pipeline_model_parallel_size": 4})
    assert [inflight_microbatches(inp1.par, r, None) for r in range(4)] == [4, 3, 2, 1]
    assert inflight_microbatches(inp1.par, 0, 2) == 2


def test_full_recompute_keeps_layer_inputs() -> None:
    vals = {
        **TINY,
        "model.recompute_granularity": "full",
        "model.recompute_method": "uniform",
        "model.recompute_num_layers": 1,
    }
    st = estimate_recipe(recipe_from_values(vals, world_size=1)).stages[0]
    act = next(c for c in st.components if c.name.startswith("activations"))
    assert act.bytes == 4 * 2 * 2048 * 1024  # 4 layers x layer input


def test_unknown_shape_raises_and_json_contract() -> None:
    with pytest.raises(EstimateUnavailable) as ei:
        estimate_recipe(recipe_from_values({**TINY, "model.hidden_size": UNKNOWN}))
    assert ei.value.missing_fields == ["model.hidden_size"]
    est = estimate_recipe(recipe_from_values(TINY, world_size=None))
    j = est.to_json()
    assert set(j) == {
        "recipe",
        "gpu",
        "world_size",
        "parallelism",
        "stages",
        "peak_bytes",
        "allocated_peak_bytes",
        "allocated_peak_stage",
        "peak_stage",
        "fits",
        "headroom_bytes",
        "uncertainty",
        "assumptions",
    }
    assert set(j["parallelism"]) == {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp"}
    assert set(j["stages"][0]["components"][0]) == {"name", "bytes", "fields", "kind"}
    assert any("DP=1" in a for a in j["assumptions"])
    assert "pp0" in render_text(est) and "| stage |" in render_markdown(est)


def test_capacity_finding_and_suggestions() -> None:
    big = {
        **TINY,
        "model.num_layers": 64,
        "model.hidden_size": 8192,
        "model.num_attention_heads": 64,
        "model.num_query_groups": 8,
        "model.ffn_hidden_size": 28672,
        "model.seq_length": 8192,
    }
    rec = recipe_from_values(big, world_size=64)
    est = estimate_recipe(rec)
    assert not est.fits
    f = capacity_findings(rec, est, 0.05)
    assert f and f[0].severity == "error" and "stage 0" in f[0].message
    sugg = suggestions(rec, est)
    assert sugg[0].title.startswith("set PYTORCH_CUDA_ALLOC_CONF")
    assert all(s.saving_bytes > 0 for s in sugg)


def test_pipeline_layout_string_places_layers_mtp_and_loss() -> None:
    from mbmem_lint.estimate.pipeline import chunk_passes, parse_layout, stage_plans

    # MCore parse_str_to_list: "(tt|)*2" unrolls to "tt|tt|"; commas are cosmetic.
    assert parse_layout("Et|(tt|)*2,tmL") == [["E", "t"], ["t", "t"], ["t", "t"], ["t", "m", "L"]]
    assert parse_layout([["embedding", "decoder"], ["decoder", "mtp", "loss"]]) == [["E", "t"], ["t", "m", "L"]]
    assert parse_layout("Ex|t") is None
    inp = _inp(**{"model.num_layers": 6, "model.mtp_num_layers": 1, "model.pipeline_model_parallel_size": 2,
                  "model.pipeline_model_parallel_layout": "Et|(tt|)*2,tmL"})
    plans = stage_plans(6, 1, inp.par, inp.par.layout, [])
    # virtual stage k -> PP rank k % 2: rank 0 gets stages 0, 2; rank 1 gets 1, 3 (MTP layer = index 6).
    assert [p.chunks for p in plans] == [[[0], [3, 4]], [[1, 2], [5, 6]]]
    assert (plans[0].embedding, plans[0].loss, plans[1].embedding, plans[1].loss) == (True, False, False, True)
    # Interleaved warm-up, PP2 v2: rank 0 runs 2*(2-0-1) + (2-1)*2 + 1 = 5 forwards before its first
    # backward, forward i on chunk (i // 2) % 2 -> chunks 0,0,1,1,0 = [3, 2]; rank 1: 0 + 2 + 1 = 3 -> [2, 1].
    assert chunk_passes(inp.par, 0, 2, None) == [3.0, 2.0]
    assert chunk_passes(inp.par, 1, 2, None) == [2.0, 1.0]
    bad: list[str] = []
    plans = stage_plans(6, 1, inp.par, "Et|tmL", bad)  # 2 decoder layers != 6: fall back to an even split
    assert bad and [p.layers for p in plans] == [[0, 1, 2], [3, 4, 5, 6]]


def test_moe_terms_alltoall_no_combine_copy() -> None:
    # T = 2048 tokens, TP1, topk 2 -> 4096 routed copies on this rank (balanced), h 1024, moe_ffn 512, SwiGLU.
    inp = _inp(**{"model.num_moe_experts": 4, "model.moe_router_topk": 2, "model.moe_ffn_hidden_size": 512,
                  "model.expert_model_parallel_size": 4})
    t = layer_terms(inp, 0)
    assert t["expert_fc1_in"] == 2 * 4096 * 1024  # grouped fc1 input (bf16)
    assert t["expert_fc1_out"] == 2 * 4096 * 2 * 512  # SwiGLU input
    assert t["moe_act"] == 2 * 4096 * 512  # fc2 input
    assert t["moe_probs"] == 4 * 4096  # fp32 permuted probs
    assert t["router"] == 8 * 2048 * 4
    assert "expert_combine" not in t  # unpermute runs without probs: nothing saved on the combine side


def test_mla_terms_and_up_proj_recompute() -> None:
    mla = {"model.multi_latent_attention": True, "model.q_lora_rank": 64, "model.kv_lora_rank": 32,
           "model.qk_head_dim": 16, "model.qk_pos_emb_head_dim": 8, "model.v_head_dim": 16}
    t = layer_terms(_inp(**mla), 0)
    T = 2048
    assert t["mla_qkv"] == 2 * T * 8 * (2 * (16 + 8) + 16)  # query, key (qk+pe), value; 8 heads
    assert t["mla_down"] == 2 * 2 * T * (64 + 32) + 2 * T * 8  # latents (norm in + out) + k_pos_emb
    assert "mla_up" not in t  # up-projection outputs are not saved (RoPE saves nothing)
    from mbmem_lint.estimate.activations import selective_drops

    assert "mla_qkv" in selective_drops(_inp(**mla, **{"model.recompute_granularity": "selective",
                                                         "model.recompute_modules": ["mla_up_proj"]}))


def test_mamba_terms_memory_efficient_path() -> None:
    # d_inner = 8 heads x 64 = 512, groups*state = 2*16 = 32; T = 2048, TP1, bf16.
    inp = _inp(**{"model.hybrid_layer_pattern": "M*", "model.mamba_num_heads": 8, "model.mamba_head_dim": 64,
                  "model.mamba_num_groups": 2, "model.mamba_state_dim": 16})
    t = layer_terms(inp, 0)
    assert t["mamba_internal"] == 2 * 2048 * (2 * 512 + 2 * 32 + 8 + 512 + 512)  # zxBCdt, out_x, norm in
    assert t["mamba_out_proj_in"] == 2 * 2048 * 512


def test_shared_expert_lora_and_bf16_grad_buffer() -> None:
    from mbmem_lint.estimate.params import lora_params

    vals = {"model.num_moe_experts": 4, "model.moe_ffn_hidden_size": 512, "model.expert_model_parallel_size": 2}
    s = _inp(**vals).shape
    # shared adapter (default): EP copies of one adapter; fc1: 32*(1024 + 2*512), fc2: 32*(512 + 1024)
    p = lora_params(s, "lora", 32, ["linear_fc1", "linear_fc2"], 0, expert_copies=2.0)
    assert p.expert == 2 * (32 * (1024 + 1024) + 32 * (512 + 1024))
    # Precision-aware optimizer without Megatron-FSDP: DDP grad buffer follows grad_reduce_in_fp32 (bf16 here).
    inp = _inp(**{"optimizer.use_precision_aware_optimizer": True, "optimizer.main_grads_dtype": "torch.float32",
                  "ddp.grad_reduce_in_fp32": False})
    assert inp.prec.grad_bytes == 2


def test_full_iteration_graph_pool_does_not_recount_activations() -> None:
    # MCore full_cuda_graph.py: the captured iteration's activations live in the graph pool (counted once, as
    # activations); the pool adds its base (1 GiB) and StaticBufferLoader's batch copies, 28 B/token/microbatch.
    vals = {**TINY, "model.cuda_graph_impl": "full_iteration", "train.global_batch_size": 16}
    est = estimate_recipe(recipe_from_values(vals, world_size=8))
    pool = est.stages[0].component("cuda graph pool")
    assert pool is not None
    assert pool.bytes == 1024**3 + 28 * 2048 * 1 * 2  # GBS 16 / (MBS 1 x DP 8) = 2 microbatches
    assert any("full iteration" in a for a in est.assumptions)


def test_fragmentation_only_overflow_is_a_warning() -> None:
    from mbmem_lint.estimate.types import Component, Estimate, StageEstimate

    gpu = resolve_gpu("h100")
    usable = gpu.usable_bytes
    rec = recipe_from_values(TINY, world_size=8)

    def est(alloc: int, reserve: int) -> Estimate:
        comps = [Component("activations", alloc, ["model.seq_length"], kind="activation"),
                 Component("allocator fragmentation reserve", reserve, [], kind="reserve")]
        return Estimate("x::y", gpu, 8, {"tp": 1, "pp": 1}, [StageEstimate(0, comps, 4)])

    # Allocations fit (1 GiB spare), the 20% reserve does not: MBM702 warning, not an error.
    f = capacity_findings(rec, est(usable - 1024**3, int(0.2 * usable)), 0.05)
    assert f and f[0].severity == "warning" and "fragmentation" in f[0].message
    # Allocations exceed usable memory by less than the 10% uncertainty band: a "may not fit" warning.
    f = capacity_findings(rec, est(usable + 1024**3, int(0.2 * usable)), 0.05, 0.10)
    assert f and f[0].severity == "warning" and "uncertainty" in f[0].message
    # Allocations exceed usable memory beyond the band (usable * 1.10 + 1 GiB): error.
    f = capacity_findings(rec, est(int(usable * 1.10) + 1024**3, int(0.2 * usable)), 0.05, 0.10)
    assert f and f[0].severity == "error"
    # With no band, any overflow of the allocations is an error.
    f = capacity_findings(rec, est(usable + 1024**3, int(0.2 * usable)), 0.05, 0.0)
    assert f and f[0].severity == "error"


def test_core_attn_recompute_keeps_the_fused_qkv_output() -> None:
    # v is a torch.split view of the fused QKV output, so the core_attn checkpoint keeps that whole output
    # besides the RoPE'd q and k: (a + g)·d extra per token. TINY: a=8, g=2, d=128, T=2048.
    T, sel = 2048, {"model.recompute_granularity": "selective", "model.recompute_modules": ["core_attn"]}
    assert layer_terms(_inp(**sel), 0)["core_attn_ckpt_qkv"] == 2 * T * (8 + 2) * 128
    assert "core_attn_ckpt_qkv" not in layer_terms(_inp(), 0)  # no checkpoint: flash saves its own copies
    # Without RoPE or q/k norms, q and k are views too: the checkpoint keeps the fused output only.
    assert "core_attn_ckpt_qkv" not in layer_terms(_inp(**sel, **{"model.position_embedding_type": "none"}), 0)
    # A fused single-QKV RoPE hands over three new tensors.
    assert "core_attn_ckpt_qkv" not in layer_terms(_inp(**sel, **{"model.fused_single_qkv_rope": True}), 0)


def test_unfused_attention_softmax_kernel_and_torch_fallback() -> None:
    T, a, g, d = 2048, 8, 2, 128
    probs = a * T * T  # b·np·sq·sk elements, MBS 1, TP 1
    gqa = 2 * 2 * T * (a - g) * d  # K and V repeat_interleave'd to all heads, bf16
    local = {"model.attention_backend": "local"}
    # Fused kernel (masked_softmax_fusion, sk <= 4096): its bf16 result is saved once.
    fused = layer_terms(_inp(**local, **{"model.masked_softmax_fusion": True}), 0)
    assert fused["core_attn_internal"] == 2 * probs + gqa
    # Torch fallback in fp32: the fp32 softmax output and its bf16 cast are both saved (6 B per element).
    fallback = {**local, "model.masked_softmax_fusion": False, "model.attention_softmax_in_fp32": True}
    assert layer_terms(_inp(**fallback), 0)["core_attn_internal"] == 6 * probs + gqa
    # ... in bf16 the softmax output is the tensor the bmm saves.
    bf16 = {**fallback, "model.attention_softmax_in_fp32": False}
    assert layer_terms(_inp(**bf16), 0)["core_attn_internal"] == 2 * probs + gqa
    # The kernel has a shape limit: sk > 4096 always takes the fallback, even with the fusion on.
    long = layer_terms(_inp(**local, **{"model.masked_softmax_fusion": True, "model.attention_softmax_in_fp32": True,
                                        "model.seq_length": 8192}), 0)
    assert long["core_attn_internal"] == 6 * a * 8192 * 8192 + 2 * 2 * 8192 * (a - g) * d
    # Attention dropout adds its mask (1 B) and output (2 B); in the fp32 fallback the output replaces the probs.
    drop = layer_terms(_inp(**fallback, **{"model.attention_dropout": 0.1}), 0)
    assert drop["core_attn_internal"] == 7 * probs + gqa
    # The raw scores go to one persistent global buffer (bf16, b·np·sq·sk), a workspace counted once.
    st = estimate_recipe(recipe_from_values({**TINY, **local}, world_size=1)).stages[0]
    buf = [c for c in st.components if c.name == "unfused-attention score buffer"]
    assert [c.bytes for c in buf] == [2 * probs] and buf[0].kind == "workspace"
    flash = estimate_recipe(recipe_from_values(TINY, world_size=1)).stages[0]
    assert not any(c.name == "unfused-attention score buffer" for c in flash.components)
    # Counting on the fused kernel is an assumption, and the estimate says so; the fallback is not one.
    kernel = {**local, "model.masked_softmax_fusion": True, "model.attention_softmax_in_fp32": True}
    said = estimate_recipe(recipe_from_values({**TINY, **kernel}, world_size=1)).assumptions
    assert any("fused masked-softmax kernel" in a for a in said)
    said = estimate_recipe(recipe_from_values({**TINY, **fallback}, world_size=1)).assumptions
    assert not any("fused masked-softmax kernel" in a for a in said)


def test_full_recompute_transient_overlaps_the_logits_peak_on_the_last_stage() -> None:
    # The block recompute runs after the output layer's backward freed the logits: only the excess adds.
    from mbmem_lint.estimate.activations import output_activation

    base = {**TINY, "model.recompute_granularity": "full", "model.recompute_method": "uniform"}
    big_block = {**base, "model.recompute_num_layers": 4, "model.vocab_size": 4096}
    est = estimate_recipe(recipe_from_values(big_block, world_size=1)).stages[0]
    per_layer = sum(layer_terms(read_inputs(big_block.get, 1), 0).values())
    logits = output_activation(read_inputs(big_block.get, 1))
    assert 4 * per_layer > logits  # this block's recompute peak exceeds the logits peak ...
    transient = next(c for c in est.components if c.name == "full-recompute transient")
    assert transient.bytes == int(4 * per_layer - logits)  # ... so only the difference is added
    # One layer per group with a 32000-token vocabulary: the logits peak covers the recompute entirely.
    small = estimate_recipe(recipe_from_values({**base, "model.recompute_num_layers": 1}, world_size=1)).stages[0]
    assert not any(c.name == "full-recompute transient" for c in small.components)


# --- Issue 16: terms read from the MCore 0.19.2 / Bridge 0.6.2 / TE 2.20 code paths (hand-computed values) ---


def test_unfused_glu_saves_both_factors_of_the_product() -> None:
    # mlp.py L320-331 (bias_activation_fusion False, MCore's default, transformer_config.py L482):
    # act(x_glu) * (x_linear + glu_linear_offset) saves the activation output and the offset sum, 2 B each.
    # TINY: T 2048, ffn 4096, TP1 -> 2 tensors x 2 B x 2048 x 4096.
    unfused = layer_terms(_inp(), 0)
    assert unfused["mlp_glu_unfused"] == 2 * 2 * 2048 * 4096
    assert unfused["mlp_fc1_out"] == 2 * 2048 * 2 * 4096  # the fc1 output itself, kept by the chunk view
    fused = layer_terms(_inp(**{"model.bias_activation_fusion": True}), 0)
    assert "mlp_glu_unfused" not in fused  # bias_swiglu saves only its input
    assert "mlp_glu_unfused" not in layer_terms(_inp(**{"model.use_te_activation_func": True}), 0)
    assert "mlp_glu_unfused" not in layer_terms(_inp(**{"model.gated_linear_unit": False}), 0)
    from mbmem_lint.estimate.activations import selective_drops

    assert "mlp_glu_unfused" in selective_drops(_inp(**{"model.recompute_granularity": "selective",
                                                         "model.recompute_modules": ["mlp"]}))


def test_unfused_glu_of_routed_experts_also_saves_the_weighted_product() -> None:
    # experts.py L858-876: glu(x) * permuted_probs (fp32 probs, which need a gradient) saves the glu output too:
    # 3 tensors x 2 B per routed copy and moe_ffn column. T 2048, topk 2 -> 4096 copies, moe_ffn 512, ETP 1.
    moe = {"model.num_moe_experts": 4, "model.moe_router_topk": 2, "model.moe_ffn_hidden_size": 512,
           "model.expert_model_parallel_size": 4, "model.moe_shared_expert_intermediate_size": 1024}
    t = layer_terms(_inp(**moe), 0)
    assert t["moe_glu_unfused"] == 3 * 2 * 4096 * 512
    assert t["shared_glu_unfused"] == 2 * 2 * 2048 * 1024  # the shared expert is an MLP: no probs multiply
    assert "moe_glu_unfused" not in layer_terms(_inp(**moe, **{"model.bias_activation_fusion": True}), 0)
    from mbmem_lint.estimate.activations import selective_drops

    drops = selective_drops(_inp(**moe, **{"model.recompute_granularity": "selective",
                                           "model.recompute_modules": ["moe_act"]}))
    assert {"moe_glu_unfused", "shared_glu_unfused"} <= drops  # CheckpointWithoutOutput over bias_act_func


def test_lora_on_te_layernorm_linear_keeps_the_local_norm_output() -> None:
    # Bridge sets return_layernorm_output=True on an adapted TELayerNormColumnParallelLinear (peft/utils.py L600);
    # TE frees the norm output only when `not weight.requires_grad and not return_layernorm_output`
    # (layernorm_linear.py L427-429) and saves it (L526-535). With SP and without re-gather the LoRA-A input is the
    # gathered copy (return_layernorm_output_gathered), so the local shard is extra: 2 B x T x h / TP.
    T, sp = 2048, {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
                   "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"}}
    t = layer_terms(_inp(**sp), 0)
    assert t["lora_qkv_ln_out"] == 2 * T * 1024 / 2 and t["lora_fc1_ln_out"] == 2 * T * 1024 / 2
    assert t["lora_qkv"] == 2 * T * 1024  # the gathered LoRA-A input
    # Re-gather: the adapter's saved local shard is that same norm output, nothing extra.
    rg = layer_terms(_inp(**sp, **{"peft.sequence_parallel_input_regather": True}), 0)
    assert "lora_qkv_ln_out" not in rg and rg["lora_qkv"] == 2 * T * 1024 / 2
    # Without SP the LoRA-A input is the norm output itself.
    no_sp = layer_terms(_inp(**{**sp, "model.sequence_parallel": False}), 0)
    assert "lora_qkv_ln_out" not in no_sp and no_sp["lora_qkv"] == 2 * T * 1024
    # No adapter on fc1: the frozen TE linear clears its norm output.
    qkv_only = layer_terms(_inp(**sp, **{"peft.target_modules": ["linear_qkv"]}), 0)
    assert "lora_fc1_ln_out" not in qkv_only and "lora_fc1" not in qkv_only


def test_qk_layernorm_keeps_the_pre_norm_q_and_k() -> None:
    # attention.py L1921-1924 normalises the split q and k; TE's RMSNorm saves input_.contiguous()
    # (ops/basic/rmsnorm.py L189, L209): 2 B x T x (a + g) x d / TP. TINY: a 8, g 2, d 128, T 2048, TP 2.
    t = layer_terms(_inp(**{"model.qk_layernorm": True, "model.tensor_model_parallel_size": 2}), 0)
    assert t["qk_norm_in"] == 2 * 2048 * (8 + 2) * 128 / 2
    assert "qk_norm_in" not in layer_terms(_inp(), 0)


def test_mla_value_padded_to_the_query_head_dim_with_packed_sequences() -> None:
    # multi_latent_attention.py L85-108: under THD (packed sequences) v is padded to qk+rope (24 here) before core
    # attention, which saves the padded v and a padded output; the projection saves its trimmed copy.
    mla = {"model.multi_latent_attention": True, "model.q_lora_rank": 64, "model.kv_lora_rank": 32,
           "model.qk_head_dim": 16, "model.qk_pos_emb_head_dim": 8, "model.v_head_dim": 16}
    T, a = 2048, 8
    sbhd = layer_terms(_inp(**mla), 0)
    assert sbhd["mla_qkv"] == 2 * T * a * (2 * 24 + 16) and sbhd["attn_proj"] == 2 * T * a * 16
    assert sbhd["core_attn_out"] == 4 * T * a  # O shared with the projection: softmax stats only
    thd = layer_terms(_inp(**mla, **{"dataset.enable_offline_packing": True}), 0)
    assert thd["mla_qkv"] == 2 * T * a * (2 * 24 + 24)
    assert thd["core_attn_out"] == 2 * T * a * 24 + 4 * T * a and thd["attn_proj"] == 2 * T * a * 16


def test_frozen_experts_save_no_gemm_inputs_unless_adapted() -> None:
    # TE's grouped GEMMs save their input only for a trainable weight; a LoRA adapter on the expert linear saves
    # the same tensor. Attention-only LoRA: no expert fc1 input, no fc2 input (T 2048, topk 2, h 1024).
    moe = {"model.num_moe_experts": 4, "model.moe_router_topk": 2, "model.moe_ffn_hidden_size": 512,
           "model.expert_model_parallel_size": 4, "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"}}
    attn_only = layer_terms(_inp(**moe, **{"peft.target_modules": ["linear_qkv", "linear_proj"]}), 0)
    assert "expert_fc1_in" not in attn_only and "moe_act" not in attn_only
    assert attn_only["expert_fc1_out"] == 2 * 4096 * 2 * 512  # the activation's own input stays
    default = layer_terms(_inp(**moe), 0)
    assert default["expert_fc1_in"] == 2 * 4096 * 1024 and default["moe_act"] == 2 * 4096 * 512


def test_cross_entropy_peak_per_implementation() -> None:
    # MCore's cross entropies (tensor_parallel/cross_entropy.py L25, L62) keep an fp32 copy of the bf16 logits:
    # 6 B per logit at the peak; TE's parallel_cross_entropy keeps a bf16 copy (triton/cross_entropy.py L40-44).
    from mbmem_lint.estimate.activations import output_activation

    T, h, V = 2048, 1024, 32000
    assert output_activation(_inp()) == 4 * T * h + 6 * T * V
    te = _inp(**{"model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "te"})
    assert output_activation(te) == 4 * T * h + 4 * T * V
    assert output_activation(_inp(**{"model.cross_entropy_loss_fusion": False})) == 4 * T * h + 6 * T * V


def test_deferred_embedding_wgrad_buffers_on_the_last_stage() -> None:
    # tensor_parallel/layers.py L1149-1154 and L604-607: the last stage keeps the output layer's input (SP shard)
    # and its bf16 logit gradient for min(wgrad_deferral_limit, microbatches) microbatches until the flush.
    # TP2 SP PP2, GBS 16 / (MBS 1 x DP 2) = 8 microbatches, limit 3: 3 x (2·T·h/2 + 2·T·V/2).
    vals = {**TINY, "model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
            "model.pipeline_model_parallel_size": 2, "train.global_batch_size": 16,
            "model.defer_embedding_wgrad_compute": True, "model.wgrad_deferral_limit": 3}
    est = estimate_recipe(recipe_from_values(vals, world_size=8))
    first, last = est.stages
    T, h, V = 2048, 1024, 32000
    assert first.component("deferred output-layer wgrad buffers") is None
    buf = last.component("deferred output-layer wgrad buffers")
    assert buf is not None and buf.kind == "activation"
    assert buf.bytes == 3 * (2 * T * h // 2 + 2 * T * V // 2)
    # Limit 0 defers every microbatch of the step; PP=1 cannot defer (model_parallel_config.py L545).
    unlimited = estimate_recipe(recipe_from_values({**vals, "model.wgrad_deferral_limit": 0}, world_size=8))
    assert _bytes(unlimited.stages[1], "deferred output-layer wgrad buffers") == 8 * (2 * T * h // 2 + 2 * T * V // 2)
    pp1 = estimate_recipe(recipe_from_values({**vals, "model.pipeline_model_parallel_size": 1}, world_size=8))
    assert pp1.stages[0].component("deferred output-layer wgrad buffers") is None


def test_cpu_optimizer_offload_moves_states_not_the_distopt_main_params() -> None:
    # HybridDeviceOptimizer over the distributed optimizer's shards (optimizer/__init__.py L502-541,
    # distrib_optimizer.py L778-781): without the precision-aware optimizer those shards are the dist-opt's own fp32
    # main params (L422-445), which stay on the GPU; only the offloaded share's Adam states leave. TINY 1 layer,
    # untied, DP 8: n params as in test_model_state_bytes_adam_distopt.
    n = 2_621_440 + 12_582_912 + 2048 + 1024 + 2 * 32000 * 1024
    base = {**TINY, "model.num_layers": 1, "model.share_embeddings_and_output_weights": False,
            "optimizer.use_distributed_optimizer": True, "optimizer.optimizer_cpu_offload": True,
            "optimizer.optimizer_offload_fraction": 0.75}
    st = estimate_recipe(recipe_from_values(base, world_size=8)).stages[0]
    assert _bytes(st, "main params") == int(4 * n / 8)  # not reduced by the fraction
    assert _bytes(st, "optimizer states") == int(8 * n / 8 * 0.25)
    # Precision-aware: bf16 shards, fp32 copies made per device (hybrid_optimizer.py L273-278): both move.
    pa = {**base, "optimizer.use_precision_aware_optimizer": True}
    st = estimate_recipe(recipe_from_values(pa, world_size=8)).stages[0]
    assert _bytes(st, "main params") == int(4 * n / 8 * 0.25)
    assert _bytes(st, "optimizer states") == int(8 * n / 8 * 0.25)
    # MCore's default fraction is 0.0 (optimizer_config.py L347): offload on, nothing moved.
    st = estimate_recipe(recipe_from_values({k: v for k, v in base.items()
                                             if k != "optimizer.optimizer_offload_fraction"}, world_size=8)).stages[0]
    assert _bytes(st, "optimizer states") == int(8 * n / 8)


def test_cuda_graph_pool_is_reserved_not_allocated() -> None:
    # Bridge captures TE graphs after cuda_graph_warmup_steps eager iterations (train.py L429-441) and never resets
    # the peak counter: max allocated is the eager peak, with no pool. The pool is a "reserve": in peak_bytes,
    # not in allocated_peak_bytes, and (unlike the fragmentation allowance) counted as certain by MBM701.
    vals = {**TINY, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["mlp"]}
    est = estimate_recipe(recipe_from_values(vals, world_size=8))
    st = est.stages[0]
    pool = st.component("cuda graph pool")
    assert pool is not None and pool.kind == "reserve"
    assert st.allocated_bytes == sum(c.bytes for c in st.components if c.kind in ("state", "activation", "workspace"))
    assert est.peak_bytes - est.allocated_peak_bytes >= pool.bytes
    assert est.to_json()["allocated_peak_bytes"] == est.allocated_peak_bytes


def test_uncertainty_band_per_model_kind() -> None:
    from mbmem_lint.estimate.uncertainty import MIN_BAND, band, band_from_errors

    assert band_from_errors([0.021, -0.158, 0.04]) == 0.16  # largest |error|, rounded up to a whole percent
    assert band_from_errors([0.01]) == MIN_BAND
    dense = estimate_recipe(recipe_from_values(TINY, world_size=8))
    moe = estimate_recipe(recipe_from_values({**TINY, "model.num_moe_experts": 4}, world_size=8))
    assert (dense.model_kind, moe.model_kind) == ("dense", "moe")
    assert dense.uncertainty == band("dense") and moe.uncertainty == band("moe")
    assert dense.to_json()["uncertainty"] == {"model_kind": "dense", "fraction": band("dense")}
