"""The plan's search space: memory-knob chains only save more memory than the current value, and the
layouts respect the world size and --keep."""

from __future__ import annotations

from plan_cases import LLAMA
from test_plan_constraints import facts

from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.current import read_current
from mbmem_lint.plan.space import build_chains, enumerate_layouts, recompute_chain, uneven_options


def test_recompute_chain_only_adds_recompute() -> None:
    none = K.Recompute(None, None, None, None)
    chain = recompute_chain(none, facts(), moe=False, chunk_layers=8)
    assert chain[0] == none
    labels = [r.label() for r in chain[1:]]
    assert labels == ["selective core_attn", "selective core_attn+mlp", "full block 4", "full uniform 1"]
    sel = K.Recompute("selective", ("core_attn", "mlp"), None, None)
    assert [r.label() for r in recompute_chain(sel, facts(), moe=False, chunk_layers=8)] == [
        "selective core_attn+mlp", "full block 4", "full uniform 1"]
    moe = facts(moe_grouped_gemm=True, dense_mlp_layers=False)
    assert "selective core_attn+moe_act" in [r.label() for r in recompute_chain(none, moe, moe=True, chunk_layers=8)]
    full = K.Recompute("full", None, "uniform", 1)
    assert recompute_chain(full, facts(), moe=False, chunk_layers=8) == [full]


def test_uneven_stages_lighten_first_and_last() -> None:
    assert uneven_options(30, 4) == [(7, 7), (6, 6)]  # 7+8+8+7, 6+9+9+6
    assert uneven_options(32, 2) == []  # first and last are all of PP 2


def test_layouts_respect_world_size_and_keep() -> None:
    cur = read_current(LLAMA.get, 32, model_class=None)
    layouts = list(enumerate_layouts(cur))
    assert cur.spec.layout in layouts
    for lay in layouts:
        assert 32 % (lay.tp * lay.pp * lay.cp) == 0
        assert lay.tp <= 8 and lay.sp == (lay.tp > 1)
        assert lay.vpp is None or lay.pp > 1
    kept = read_current(LLAMA.get, 32, model_class=None, keep=K.parse_keep("tp,cp"))
    assert {(lay.tp, lay.cp) for lay in enumerate_layouts(kept)} == {(4, 1)}
    alone = read_current(LLAMA.get, None, model_class=None)
    assert list(enumerate_layouts(alone)) == [alone.spec.layout]  # no world size: the layout stays


def test_chains_start_at_the_current_value() -> None:
    values = {k: v for k, v in LLAMA.items() if k != "env_vars.PYTORCH_CUDA_ALLOC_CONF"}
    cur = read_current({**values, "train.micro_batch_size": 4}.get, 32, model_class=None)
    chains = build_chains(cur)
    assert chains.mbs == (4, 2, 1)
    assert chains.setting(tuple(0 for _ in chains.lengths())) == cur.spec.setting
    assert chains.es == (False, True)
    assert build_chains(read_current(LLAMA.get, 32, model_class=None)).es == (True,)  # already on
    pinned = read_current(LLAMA.get, 32, model_class=None, keep=K.parse_keep("mbs,recompute"))
    assert build_chains(pinned).recompute == (pinned.spec.setting.recompute,)
