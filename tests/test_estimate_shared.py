"""What-if re-estimates share work with the recipe's own estimate (read parts, layer tables, derived terms):
each must equal the estimate of a recipe that sets the what-if's values itself."""

from __future__ import annotations

from typing import Any

import pytest

from mbmem_lint.estimate import estimate_recipe
from mbmem_lint.estimate.api import recipe_getter
from mbmem_lint.estimate.inputs import read_inputs
from mbmem_lint.estimate.params import layer_kinds, layer_sublayers, layer_table
from mbmem_lint.estimate.pipeline import chunk_passes
from mbmem_lint.resolve.resolved import UNKNOWN, recipe_from_values

DENSE: dict[str, Any] = {
    "model.num_layers": 12,
    "model.hidden_size": 1024,
    "model.num_attention_heads": 8,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 4096,
    "model.vocab_size": 32000,
    "model.should_pad_vocab": True,
    "model.gated_linear_unit": True,
    "model.normalization": "RMSNorm",
    "model.position_embedding_type": "rope",
    "model.seq_length": 4096,
    "model.tensor_model_parallel_size": 2,
    "model.pipeline_model_parallel_size": 4,
    "model.virtual_pipeline_model_parallel_size": 3,
    "model.sequence_parallel": True,
    "train.micro_batch_size": 2,
    "train.global_batch_size": 128,
    "model.params_dtype": "torch.bfloat16",
    "optimizer.use_distributed_optimizer": False,
    "model.cuda_graph_impl": "transformer_engine",
    "model.cuda_graph_scope": ["attn"],
    "model.attention_backend": "unfused",
    "model.mtp_num_layers": 1,
}
MOE: dict[str, Any] = {
    **DENSE,
    "model.virtual_pipeline_model_parallel_size": None,
    "model.num_moe_experts": 16,
    "model.moe_ffn_hidden_size": 512,
    "model.moe_layer_freq": [0, 0, 1, 1] * 3,
    "model.expert_model_parallel_size": 4,
    "model.moe_shared_expert_intermediate_size": 1024,
    "model.mtp_num_layers": 0,
    "model.num_layers": 12,
    "train.micro_batch_size": UNKNOWN,  # an assumption, replayed by what-ifs that reuse the part
    "peft": {"_target_": "megatron.bridge.peft.lora.LoRA"},
    "peft.target_modules": ["linear_qkv", "linear_fc1"],
}
# The settings capacity suggestions try (estimate/suggest.py), and a few more.
WHAT_IFS: list[dict[str, Any]] = [
    {"env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    {"model.recompute_granularity": "selective", "model.recompute_modules": ["core_attn"]},
    {"model.recompute_granularity": "full", "model.recompute_method": "block", "model.recompute_num_layers": 2},
    {"optimizer.use_distributed_optimizer": True, "ddp.use_distributed_optimizer": True},
    {"model.pipeline_model_parallel_size": 8, "model.virtual_pipeline_model_parallel_size": None},
    {"optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": 1.0},
    {"model.tensor_model_parallel_size": 4},
    {"peft.sequence_parallel_input_regather": True},
    {"model.num_layers": 16},
    {"train.micro_batch_size": 1},
]


@pytest.mark.parametrize("values", [DENSE, MOE], ids=["dense-vpp-mtp", "moe-lora"])
def test_what_if_equals_the_recipe_that_sets_it(values: dict[str, Any]) -> None:
    recipe = recipe_from_values(values, world_size=64)
    estimate_recipe(recipe)  # the recipe's own estimate first: the what-ifs read and derive from it
    for setting in WHAT_IFS:
        what_if = estimate_recipe(recipe, overrides=setting)
        fresh = estimate_recipe(recipe_from_values({**values, **setting}, world_size=64))
        assert what_if.to_json() == fresh.to_json(), setting
        assert what_if.assumptions == fresh.assumptions, setting


def test_what_if_keeps_the_parts_its_overrides_cannot_change() -> None:
    recipe = recipe_from_values(MOE, world_size=64)
    get = recipe_getter(recipe)
    base = read_inputs(get, 64)
    setting = {"model.recompute_granularity": "selective"}
    what_if = read_inputs(recipe_getter(recipe, setting), 64, base=base, changed=setting.keys())
    assert what_if.shape is base.shape and what_if.opt is base.opt and what_if.par is base.par
    assert what_if.rec is not base.rec and what_if.rec.granularity == "selective"
    assert what_if.assumptions == base.assumptions  # the unknown micro-batch size, said again
    tp = {"model.tensor_model_parallel_size": 4}
    wider = read_inputs(recipe_getter(recipe, tp), 64, base=base, changed=tp.keys())
    assert wider.shape is not base.shape and wider.shape.vocab == 32256  # padded to a multiple of 128 x TP
    assert wider.par.tp == 4 and wider.par.dp == base.par.dp // 2


def test_chunk_passes_follow_the_interleaved_schedule() -> None:
    """Forward ``i`` of the warm-up runs chunk ``(i // PP) % v`` (MCore schedules.py); counted by formula."""
    inp = read_inputs({**DENSE}.get, 64)
    for pp in (2, 3, 4, 8, 32):
        for v in (2, 3, 5, 8):
            for rank in range(pp):
                par = type(inp.par)(**{**inp.par.__dict__, "pp": pp})
                forwards = 2 * (pp - rank - 1) + (v - 1) * pp + 1
                expected = [0.0] * v
                for i in range(forwards):
                    expected[(i // pp) % v] += 1
                assert chunk_passes(par, rank, v, None) == expected
                assert chunk_passes(par, rank, v, 3) == [min(c, 3.0) for c in expected]


def test_layer_table_codes() -> None:
    hybrid = read_inputs({**DENSE, "model.hybrid_layer_pattern": "M*-EM*", "model.num_moe_experts": 4,
                          "model.mtp_num_layers": 2}.get, 64).shape
    table = layer_table(hybrid)
    assert table is layer_table(hybrid)  # one per shape
    every = list(range(hybrid.num_layers + hybrid.mtp_layers))
    assert layer_kinds(hybrid, every) == [tuple(layer_sublayers(hybrid, i)) for i in every]
    codes = table.codes(every)
    assert len(set(codes[:6])) == 4  # M, *, - and E; the second M and * reuse their codes
    assert codes[0] == codes[4] and codes[1] == codes[5]
    assert codes[6] == codes[7] and codes[6] not in codes[:6]  # MTP layers: their own code
    assert table.is_mtp(codes[6]) and not table.is_mtp(codes[5])
    assert table.codes([5, 0, 6]) == codes[5] + codes[0] + codes[6]


def test_stages_of_the_same_layers_keep_their_own_microbatches() -> None:
    """The middle stages of a 1F1B pipeline hold the same layer kinds but PP - rank microbatches each: the
    per-stage activation memo must not hand one stage's activations to another."""
    values = {**DENSE, "model.virtual_pipeline_model_parallel_size": None, "model.mtp_num_layers": 0}
    est = estimate_recipe(recipe_from_values(values, world_size=64))
    acts = [next(c for c in s.components if c.name.startswith("activations (")) for s in est.stages]
    assert [c.name for c in acts] == [f"activations (3 layers x {n} microbatches)" for n in (4, 3, 2, 1)]
    assert acts[1].bytes / acts[2].bytes == pytest.approx(3 / 2)
