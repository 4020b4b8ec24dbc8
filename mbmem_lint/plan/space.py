"""The search space: each memory knob's chain of values (the current value first, then values that save
more memory) and the layouts the world size allows around the current one."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.constraints import ModelFacts
from mbmem_lint.plan.current import Current
from mbmem_lint.records import dataclass

MODULE_ORDER = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts", "moe")
MAX_TP = 8  # TP beyond one 8-GPU NVLink board is not searched unless the recipe already uses it


def _ordered(mods: set[str]) -> tuple[str, ...]:
    return tuple(sorted(mods, key=lambda m: MODULE_ORDER.index(m) if m in MODULE_ORDER else len(MODULE_ORDER)))


def recompute_chain(base: K.Recompute, facts: ModelFacts, moe: bool, chunk_layers: int) -> list[K.Recompute]:
    """The current recompute setting, then settings that drop more activations: selective module sets that
    contain the current ones (core_attn; + moe_act / mla_up_proj; + mlp), full recompute of half of each
    pipeline chunk's layers (``block``), then full recompute of every layer (``uniform``, 1 layer a group)."""
    out = [base]
    half = chunk_layers // 2
    if base.granularity == "full":
        if base.method == "block" and (base.num_layers or 0) < half:
            out.append(K.Recompute("full", base.modules, "block", half))
        if base.method != "uniform" or (base.num_layers or 1) != 1:
            out.append(K.Recompute("full", base.modules, "uniform", 1))
        return out
    start = set(base.modules or ()) if base.granularity == "selective" else set()
    extra = (["moe_act"] if moe and facts.moe_grouped_gemm else []) + (["mla_up_proj"] if facts.mla else [])
    ladders: list[set[str]] = [{"core_attn"}, {"core_attn", *extra}]
    if facts.dense_mlp_layers:
        ladders += [{"core_attn", "mlp"}, {"core_attn", "mlp", *extra}]
    seen: set[tuple[str, ...]] = {_ordered(start)} if base.granularity == "selective" else set()
    for mods in ladders:
        union = start | mods
        key = _ordered(union)
        if key in seen or (base.granularity == "selective" and not union > start):
            continue
        seen.add(key)
        out.append(K.Recompute("selective", key, None, None))
    if half >= 1:
        out.append(K.Recompute("full", None, "block", half))
    out.append(K.Recompute("full", None, "uniform", 1))
    return out


@dataclass(frozen=True)
class Chains:
    """The options of each memory knob, the current value first."""

    mbs: tuple[int, ...]
    recompute: tuple[K.Recompute, ...]
    act_offload: tuple[int, ...]
    state: tuple[tuple[bool, str | None], ...]  # (distributed optimizer, FSDP strategy)
    opt_offload: tuple[float, ...]
    es: tuple[bool, ...]
    regather: tuple[bool, ...]

    def lengths(self) -> tuple[int, ...]:
        return (len(self.mbs), len(self.recompute), len(self.act_offload), len(self.state), len(self.opt_offload),
                len(self.es), len(self.regather))

    def setting(self, idx: tuple[int, ...]) -> K.Setting:
        dist, fsdp = self.state[idx[3]]
        return K.Setting(mbs=self.mbs[idx[0]], recompute=self.recompute[idx[1]], act_offload=self.act_offload[idx[2]],
                         dist_opt=dist, fsdp=fsdp, opt_offload=self.opt_offload[idx[4]], es=self.es[idx[5]],
                         regather=self.regather[idx[6]])


def build_chains(cur: Current) -> Chains:
    st, pin, f = cur.spec.setting, cur.pinned, cur.facts
    mbs = (st.mbs,) if "mbs" in pin else tuple(d for d in range(st.mbs, 0, -1) if st.mbs % d == 0)
    lay = cur.spec.layout
    chunk = f.num_layers // max(1, lay.pp * (lay.vpp or 1))
    rec = (st.recompute,) if "recompute" in pin else tuple(recompute_chain(st.recompute, f, cur.ctx.moe, chunk))
    n = f.num_layers
    off = [st.act_offload]
    if "cpu_offload" not in pin and n >= 2:
        off += sorted({k for k in (n // 4, n // 2, n - 1) if st.act_offload < k < n and k > 0})
    state: list[tuple[bool, str | None]] = [(st.dist_opt, st.fsdp)]
    if not st.dist_opt and st.fsdp is None and "distributed_optimizer" not in pin:
        state.append((True, None))
    # Megatron-FSDP is not searched for PEFT: no Bridge recipe runs LoRA under it.
    if st.fsdp != "optim_grads_params" and "fsdp" not in pin and "distributed_optimizer" not in pin \
            and not cur.ctx.peft:
        state.append((True, "optim_grads_params"))
    opt = [st.opt_offload]
    if "optimizer_offload" not in pin:
        opt += [x for x in (0.5, 1.0) if x > st.opt_offload]
    es = (st.es,) if st.es or "expandable_segments" in pin else (False, True)
    rg = (st.regather,) if st.regather or "regather" in pin else (False, True)
    return Chains(mbs, rec, tuple(off), tuple(state), tuple(opt), es, rg)


# -- layouts ------------------------------------------------------------------------------------------

def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def uneven_options(n: int, pp: int) -> list[tuple[int | None, int | None]]:
    """Uneven first/last stage sizes worth trying at PP ``pp``: the first and last stage (embedding, loss)
    one or two layers lighter than the middle ones."""
    if pp < 3:
        return []
    out: list[tuple[int | None, int | None]] = []
    mid0 = -(-n // pp)
    for mid in (mid0, mid0 + 1):
        rem = n - (pp - 2) * mid
        for fl in ((rem // 2, rem - rem // 2), (rem - rem // 2, rem // 2)):
            if 1 <= fl[0] <= mid and 1 <= fl[1] <= mid and fl not in out and (fl[0] != mid or fl[1] != mid):
                out.append(fl)
    return out


def enumerate_layouts(cur: Current) -> Iterator[K.Layout]:
    """Every layout the world size allows around the current one (pinned knobs fixed)."""
    base, pin, f = cur.spec.layout, cur.pinned, cur.facts
    ws = f.world_size
    if ws is None:
        yield base
        return
    tps = [base.tp] if "tp" in pin else sorted({t for t in _powers_of_two(max(MAX_TP, base.tp)) if ws % t == 0}
                                               | {base.tp})
    cp_cap = max(base.cp, 2, 8 if f.seq >= 8192 else 2, 16 if f.seq >= 32768 else 2, 32 if f.seq >= 131072 else 2)
    for tp in tps:
        sp = base.sp if "sp" in pin else tp > 1
        cps = [base.cp] if "cp" in pin else [c for c in _powers_of_two(cp_cap) if ws % (tp * c) == 0]
        for cp in cps:
            rest = ws // (tp * cp)
            pps = [base.pp] if "pp" in pin else [p for p in _divisors(rest) if p <= f.num_layers]
            for pp in pps:
                splits: list[tuple[int | None, int | None]] = [(None, None)]
                if "uneven" in pin:
                    splits = [(base.first, base.last)]
                elif pp >= 3 and not f.account_extra:
                    splits += uneven_options(f.num_layers, pp)
                    if (base.first, base.last) not in splits and base.pp == pp:
                        splits.append((base.first, base.last))
                for first, last in splits:
                    for vpp in _vpp_options(cur, pp, first, last):
                        for ep, etp in _expert_options(cur, tp, pp):
                            yield K.Layout(tp, sp, pp, vpp, first, last, cp, ep, etp)


def _vpp_options(cur: Current, pp: int, first: int | None, last: int | None) -> list[int | None]:
    base, f = cur.spec.layout, cur.facts
    if "vpp" in cur.pinned:
        return [base.vpp]
    if pp <= 1 or not f.vpp_supported:
        return [None]
    if first is None and last is None:
        per_stage = (f.num_layers + f.account_extra) // pp
    else:
        mids = pp - (first is not None) - (last is not None)
        per_stage = (f.num_layers - (first or 0) - (last or 0)) // max(1, mids)
    # The bubble shrinks with VPP and the send/recv passes grow with it; memory hardly moves. The plan tries
    # no VPP, the current one, and the smallest and largest that leave at least two layers per chunk.
    valid = [v for v in _divisors(per_stage) if v >= 2 and per_stage // v >= 2]
    opts: list[int | None] = [None, *valid[:1], *valid[-1:]]
    if base.vpp and base.vpp not in opts:
        opts.append(base.vpp)
    return list(dict.fromkeys(opts))


def _expert_options(cur: Current, tp: int, pp: int) -> list[tuple[int, int]]:
    base, f = cur.spec.layout, cur.facts
    if not f.experts or f.world_size is None:
        return [(base.ep, base.etp)]
    eps = [base.ep] if "ep" in cur.pinned else [e for e in _powers_of_two(f.experts) if f.experts % e == 0]
    etps = [base.etp] if "etp" in cur.pinned else sorted({1, base.etp})
    return [(e, t) for e in eps for t in etps if f.world_size % (e * t * pp) == 0]
