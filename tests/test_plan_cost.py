"""The plan's cost model: terms on a case computed by hand, the calibration against the measured runs,
and the direction of each knob's cost."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plan_cases import CASES, LLAMA, cost_model, llama_measured_step_s, llama_modelled_step_s, modelled

from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.hardware import calibration, hardware

# A 2-layer dense GPT small enough to follow by hand: h 1024, 8 heads of 128 (MHA), FFN 4096 (no GLU),
# vocab 32000, seq 1024, MBS 1, GBS 4 on 4 H100s as TP2 (SP) x PP2 -> DP 1, 4 micro-batches.
SMALL = {
    "model.num_layers": 2, "model.hidden_size": 1024, "model.num_attention_heads": 8, "model.num_query_groups": 8,
    "model.kv_channels": 128, "model.ffn_hidden_size": 4096, "model.vocab_size": 32000,
    "model.should_pad_vocab": False, "model.gated_linear_unit": False, "model.share_embeddings_and_output_weights": False,
    "model.seq_length": 1024, "train.micro_batch_size": 1, "train.global_batch_size": 4,
    "model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.pipeline_model_parallel_size": 2,
    "model.params_dtype": "torch.bfloat16", "optimizer.use_distributed_optimizer": False,
}
CAL = replace(calibration(), gemm_efficiency=0.5, tp_exposure=1.0, tp_hidden=0.0)


def test_terms_on_a_hand_computed_case() -> None:
    spec, cm = cost_model(SMALL, 4, CAL)
    t = cm.terms(spec)
    peak = 989e12 * 0.5  # H100 dense BF16 x GEMM efficiency
    nvlink = 450e9  # bytes/s per direction
    tokens, shard, m = 1024, 2, 4  # tokens per micro-batch; TP x CP; micro-batches
    # Forward FLOPs per token: attention 2 x (h*(q + 2kv) + q*h) = 2 x 4,194,304; MLP 2 x 2*h*ffn = 2 x 8,388,608;
    # causal attention scores 2*s*q = 2,097,152; logits 2*h*V = 65,536,000.
    layer_flops = 2 * 4_194_304 + 2 * 8_388_608 + 2_097_152
    layer = 3 * tokens * layer_flops / peak / shard  # forward + backward (2x)
    logits = 3 * tokens * 65_536_000 / peak / shard  # last stage
    # TP with SP: 5 collectives per block (2 forward, 3 backward), 2 blocks, each moving (TP-1)/TP of a
    # bf16 activation (2 * 1024 tokens * 1024 hidden bytes) over NVLink.
    tp = 2 * 5 * (2 * 1024 * 1024) * 0.5 / nvlink
    slowest = layer + logits + tp  # stage 1: one layer and the logits
    p2p = 2 * 1024 * 1024 / 2 / nvlink  # SP-scattered activation, one send forward and one backward
    assert t.slowest_stage == 1 and t.microbatches == m
    assert t.seconds["compute"] == pytest.approx(m * (layer + logits), rel=1e-9)
    assert t.seconds["tp_comm"] == pytest.approx(m * tp, rel=1e-9)
    assert t.seconds["pipeline_bubble"] == pytest.approx(1 * slowest, rel=1e-9)  # (PP-1)/VPP stages
    assert t.seconds["pp_p2p"] == pytest.approx(m * 2 * p2p, rel=1e-9)
    assert t.seconds["dp_comm"] == 0.0  # DP 1
    assert t.total == pytest.approx(m * slowest + slowest + m * 2 * p2p, rel=1e-9)
    # Selective core_attn recompute runs the attention scores' forward again: 2*s*q FLOPs per token.
    core = K.Recompute("selective", ("core_attn",), None, None)
    t2 = cm.terms(spec.with_setting(recompute=core))
    assert t2.seconds["recompute"] == pytest.approx(m * tokens * 2_097_152 / peak / shard, rel=1e-9)
    # Expandable segments cost nothing.
    assert cm.terms(spec.with_setting(es=True)).total == t.total


def test_data_parallel_gradient_sync_by_hand() -> None:
    # Same model as TP2 PP1 on 4 GPUs: DP 2; all-reduce of bf16... fp32 grads (grad_reduce_in_fp32 default) without
    # the distributed optimizer and without overlap: 2 x grads x (DP-1)/DP over NVLink.
    values = {**SMALL, "model.pipeline_model_parallel_size": 1, "train.global_batch_size": 8}
    spec, cm = cost_model(values, 4, CAL)
    t = cm.terms(spec)
    params = 2 * (4_194_304 + 8_388_608) + 2 * 1024 * 32000  # two layers, embedding and untied output
    grads = params / 2 * 4  # per TP rank, fp32
    assert t.seconds["dp_comm"] == pytest.approx(2 * grads * 0.5 / 450e9, rel=1e-9)
    dist = cm.terms(spec.with_setting(dist_opt=True))
    # Reduce-scatter of the fp32 grads and all-gather of the bf16 params: the same bytes as half an all-reduce each.
    assert dist.seconds["dp_comm"] == pytest.approx((grads + params / 2 * 2) * 0.5 / 450e9, rel=1e-9)


def test_calibration_reproduces_the_measured_runs() -> None:
    """The shipped constants (bench/plan_calibration.py) reproduce the fitted measurements within 2 points and
    the baseline's absolute step time within 2%."""
    for case in CASES:
        if case.fitted:
            assert modelled(case) == pytest.approx(case.measured, abs=0.02), case.name
    assert llama_modelled_step_s() == pytest.approx(llama_measured_step_s(), rel=0.02)


def test_llama_ordering_follows_the_measurements() -> None:
    """Measured: TP4->8 cost 28.4%, PP4->8 5.9%, mlp recompute ~16%: the model orders them the same way."""
    spec, cm = cost_model(LLAMA, 32)
    base = cm.terms(spec).total
    tp8 = cm.terms(replace(spec, layout=replace(spec.layout, tp=8))).total / base
    pp8 = cm.terms(replace(spec, layout=replace(spec.layout, pp=8))).total / base
    mlp = cm.terms(spec.with_setting(recompute=K.Recompute("selective", ("core_attn", "mlp"), None, None))).total / base
    es = cm.terms(spec.with_setting(es=True)).total / base
    assert es == 1.0 < pp8 < mlp < tp8


def test_each_memory_knob_costs_time() -> None:
    spec, cm = cost_model(LLAMA, 32)
    base = cm.terms(spec).total
    assert cm.terms(spec.with_setting(recompute=K.Recompute("full", None, "uniform", 1))).total > base
    assert cm.terms(spec.with_setting(opt_offload=0.5)).total > base
    assert cm.terms(spec.with_setting(opt_offload=1.0)).total > cm.terms(spec.with_setting(opt_offload=0.5)).total


def test_inter_node_tp_is_slower_than_nvlink() -> None:
    """TP 16 on 8-GPU H100 boards crosses the network; on a 72-GPU NVLink domain it does not."""
    values = {**LLAMA, "model.tensor_model_parallel_size": 16, "model.pipeline_model_parallel_size": 2,
              "model.virtual_pipeline_model_parallel_size": None}
    spec, h100 = cost_model(values, 32)
    _, gb200 = cost_model(values, 32, gpu="gb200")
    assert hardware("h100-80gb").group_bps(16) == hardware("h100-80gb").network_bps
    assert hardware("gb200").group_bps(16) == hardware("gb200").nvlink_bps
    ratio_h100 = h100.terms(spec).seconds["tp_comm"] / h100.terms(spec).seconds["compute"]
    ratio_gb200 = gb200.terms(spec).seconds["tp_comm"] / gb200.terms(spec).seconds["compute"]
    assert ratio_h100 > 3 * ratio_gb200
