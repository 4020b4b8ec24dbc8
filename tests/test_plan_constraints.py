"""The plan's constraints: each mirrors a rule (and through it the Megatron behaviour), checked on
hand-built model facts; and every candidate a real plan emits satisfies them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.constraints import ModelFacts, batch_ok, layout_ok, setting_ok, stage_split_ok

NONE = K.Recompute(None, None, None, None)


def facts(**kw: Any) -> ModelFacts:
    base: dict[str, Any] = dict(
        world_size=16, num_layers=32, heads=32, groups=8, ffn=14336, vocab=128256, pad_vocab=True, experts=0,
        moe_ffn=None, moe_bias=False, seq=8192, gbs=64, microbatch_group=None, vpp_supported=True,
        layout_string=False, account_extra=0, graph_impl="none", full_iteration_graph=False, peft_kind=None,
        lora_eligible_targets=False, moe_grouped_gemm=False, mla=False, decoupled_wd=True, nccl_ub=False,
        fine_grained_offload=False, torch_fsdp2=False, dense_mlp_layers=True,
    )
    base.update(kw)
    return ModelFacts(**base)


def lay(**kw: Any) -> K.Layout:
    base: dict[str, Any] = dict(tp=1, sp=False, pp=1, vpp=None, first=None, last=None, cp=1, ep=1, etp=1)
    base.update(kw)
    return K.Layout(**base)


def spec(layout: K.Layout | None = None, **kw: Any) -> K.Spec:
    st: dict[str, Any] = dict(mbs=1, recompute=NONE, act_offload=0, dist_opt=True, fsdp=None, opt_offload=0.0,
                              es=False, regather=False)
    st.update(kw)
    return K.Spec(layout or lay(), K.Setting(**st))


def test_world_size_divisibility() -> None:
    assert layout_ok(facts(), lay(tp=2, sp=True, pp=2, cp=2)) is None
    assert "MBM101" in (layout_ok(facts(), lay(tp=2, sp=True, pp=3)) or "")
    assert layout_ok(facts(world_size=None), lay()) == "world size unknown"


def test_tensor_parallel_splits_heads_groups_and_ffn() -> None:
    assert "MBM102" in (layout_ok(facts(heads=24, world_size=16), lay(tp=16, sp=True)) or "")
    # 6 query groups over TP 4: neither a multiple nor a divisor -> rejected; over TP 2 -> fine.
    assert "MBM102" in (layout_ok(facts(heads=24, groups=6, ffn=12288), lay(tp=4, sp=True)) or "")
    assert layout_ok(facts(heads=24, groups=6, ffn=12288), lay(tp=2, sp=True)) is None
    assert "MBM102" in (layout_ok(facts(ffn=1000), lay(tp=16, sp=True)) or "")
    assert "MBM102" in (layout_ok(facts(vocab=1001, pad_vocab=False), lay(tp=2, sp=True)) or "")


def test_sequence_parallel_needs_tensor_parallel() -> None:
    assert "MBM108" in (layout_ok(facts(), lay(tp=1, sp=True)) or "")
    assert layout_ok(facts(), lay(tp=2, sp=True)) is None


def test_sequence_splits_over_cp_and_sp() -> None:
    assert "MBM107" in (layout_ok(facts(seq=4094), lay(cp=2)) or "")
    assert "MBM107" in (layout_ok(facts(seq=8191), lay(tp=2, sp=True)) or "")
    assert layout_ok(facts(seq=8192), lay(tp=2, sp=True, cp=4)) is None


def test_finetuning_keeps_cp_at_one_without_per_token_loss() -> None:
    assert "MBM414" in (layout_ok(facts(sft_cp_blocked=True), lay(cp=2)) or "")
    assert layout_ok(facts(sft_cp_blocked=True), lay(cp=1)) is None


def test_virtual_pipeline_needs_pipeline() -> None:
    assert "MBM104" in (stage_split_ok(facts(), 1, 2, None, None) or "")
    assert "MBM104" in (stage_split_ok(facts(vpp_supported=False), 2, 2, None, None) or "")
    assert stage_split_ok(facts(), 2, 2, None, None) is None
    assert "MBM103" in (stage_split_ok(facts(), 2, 3, None, None) or "")  # 16 layers per stage over VPP 3


def test_pipeline_layer_splits_even_and_uneven() -> None:
    f = facts(num_layers=30)
    assert "MBM103" in (stage_split_ok(f, 4, None, None, None) or "")
    assert stage_split_ok(f, 4, None, 7, 7) is None  # 7 + 2x8 + 7
    assert "MBM103" in (stage_split_ok(f, 4, None, 6, 7) or "")  # 17 middle layers over 2 stages
    assert "MBM103" in (stage_split_ok(f, 4, 2, 7, 7) or "")  # first/last not divisible by VPP
    assert "MBM103" in (stage_split_ok(facts(num_layers=30, account_extra=1), 4, None, 7, 7) or "")
    assert stage_split_ok(facts(num_layers=30, account_extra=2), 4, None, None, None) is None  # 32 / 4


def test_expert_parallel_divides_experts() -> None:
    moe = facts(experts=64, moe_ffn=1024, world_size=32)
    assert layout_ok(moe, lay(ep=8)) is None
    assert "MBM110" in (layout_ok(facts(experts=60, moe_ffn=1024, world_size=32), lay(ep=8)) or "")
    assert "MBM110" in (layout_ok(facts(), lay(ep=2)) or "")  # no experts
    assert "MBM101" in (layout_ok(moe, lay(ep=16, etp=4)) or "")  # 16*4 > 32
    assert "MBM110" in (layout_ok(replace(moe, moe_bias=True), lay(tp=2, sp=True, ep=2, etp=2)) or "")


def test_batch_split_and_interleaved_microbatches() -> None:
    f = facts(world_size=16, gbs=24)
    assert "MBM106" in (batch_ok(f, lay(tp=2, sp=True), mbs=2) or "")  # DP 8: 24 % 16
    assert batch_ok(f, lay(tp=2, sp=True), mbs=1) is None
    # PP 4 with VPP: 24 / (1 * 4) = 6 micro-batches, remainder 2 < PP -> rejected.
    assert "MBM105" in (batch_ok(f, lay(pp=4, vpp=2), mbs=1) or "")
    assert batch_ok(facts(world_size=16, gbs=32), lay(pp=4, vpp=2), mbs=1) is None


def test_cpu_offload_needs_pp1_no_recompute_no_graphs() -> None:
    f = facts()
    assert setting_ok(f, spec(lay(), act_offload=8)) is None
    assert "MBM205" in (setting_ok(f, spec(lay(pp=2), act_offload=8)) or "")
    sel = K.Recompute("selective", ("core_attn",), None, None)
    assert "MBM206" in (setting_ok(f, spec(lay(), act_offload=8, recompute=sel)) or "")
    assert "MBM206" in (setting_ok(facts(graph_impl="transformer_engine"), spec(lay(), act_offload=8)) or "")
    assert "MBM206" in (setting_ok(f, spec(lay(), act_offload=32)) or "")  # must be < num_layers


def test_optimizer_offload_needs_distributed_optimizer_and_adamw() -> None:
    assert setting_ok(facts(), spec(opt_offload=0.5)) is None
    assert "distributed optimizer" in (setting_ok(facts(), spec(opt_offload=0.5, dist_opt=False)) or "")
    assert "MBM211" in (setting_ok(facts(decoupled_wd=False), spec(opt_offload=0.5)) or "")


def test_recompute_constraints() -> None:
    full = K.Recompute("full", None, "uniform", 1)
    assert "MBM305" in (setting_ok(facts(graph_impl="transformer_engine"), spec(recompute=full)) or "")
    assert setting_ok(facts(graph_impl="full_iteration", full_iteration_graph=True), spec(recompute=full)) is None
    moe_act = K.Recompute("selective", ("core_attn", "moe_act"), None, None)
    assert "MBM203" in (setting_ok(facts(moe_grouped_gemm=False), spec(recompute=moe_act)) or "")
    mla = K.Recompute("selective", ("mla_up_proj",), None, None)
    assert "MBM203" in (setting_ok(facts(), spec(recompute=mla)) or "")


def test_fsdp_expandable_segments_and_regather() -> None:
    assert setting_ok(facts(), spec(fsdp="optim_grads_params")) is None
    assert "MBM410" in (setting_ok(facts(), spec(lay(pp=2), fsdp="optim_grads_params")) or "")
    assert "MBM307" in (setting_ok(facts(nccl_ub=True), spec(es=True)) or "")
    lora = facts(peft_kind="lora", lora_eligible_targets=True)
    assert setting_ok(lora, spec(lay(tp=2, sp=True), regather=True)) is None
    assert "MBM502" in (setting_ok(lora, spec(lay(tp=1), regather=True)) or "")
    assert "MBM503" in (setting_ok(facts(peft_kind="dora", lora_eligible_targets=True),
                                   spec(lay(tp=2, sp=True), regather=True)) or "")


@pytest.mark.parametrize("fixture", ["fixtures/plan/llama3_8b_2gpu.py",
                                     "fixtures/plan/llama3_70b_sft_no_expandable_segments.py"])
def test_every_candidate_satisfies_the_constraints(fixture: str) -> None:
    from mbmem_lint.estimate.api import recipe_getter
    from mbmem_lint.plan import PlanOptions, PlanResult, plan_path
    from mbmem_lint.plan.current import read_current
    from mbmem_lint.plan.session import RecipeSession
    from mbmem_lint.settings import Settings

    results = plan_path(fixture, Settings(), PlanOptions(with_diff=False))
    assert results and all(isinstance(r, PlanResult) for r in results)
    for r in results:
        assert isinstance(r, PlanResult) and r.candidates
        for c in r.candidates:
            # Read the candidate back from its own re-resolved recipe: the layout and settings it runs with.
            session = RecipeSession([fixture], Settings())
            recipe = session.resolve_all(c.set_args)[0]
            cur = read_current(recipe_getter(recipe), recipe.target.world_size,
                               model_class=recipe.section_class("model"), dataset_class=recipe.section_class("dataset"))
            assert layout_ok(cur.facts, cur.spec.layout) is None, c.title
            assert batch_ok(cur.facts, cur.spec.layout, cur.spec.setting.mbs) is None, c.title
            assert setting_ok(cur.facts, cur.spec) is None, c.title
            assert c.estimate.peak_bytes <= r.budget_bytes
