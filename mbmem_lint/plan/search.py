"""The search: every layout the world size allows, and from each, memory knobs turned one step at a time,
cheapest modelled step time first.

A node is a layout plus one position on each memory knob's *chain* (the current value first, then values
that save more memory: smaller micro-batches, more recompute, more offload, a sharded optimizer, expandable
segments, LoRA re-gather). Nodes leave a priority queue in order of modelled step time. A node that passes
the constraints is re-resolved with its changes as ``--set`` items and estimated; if it fits (within the
headroom margin) and the rules pass, it is a candidate and nothing above it on its chains is looked at;
otherwise its successors (one chain one step further) are queued. A layout is dropped before any of its
nodes is estimated when even its most memory-saving corner does not fit (one what-if estimate per layout:
model state that cannot fit prunes all of the layout's activation variants). A candidate whose changes
include all the changes of a cheaper candidate is dropped as redundant.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from mbmem_lint.check.engine import run_checks
from mbmem_lint.estimate.api import estimate_recipe, layer_activation_bytes, recipe_getter
from mbmem_lint.estimate.types import Estimate, EstimateUnavailable
from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.constraints import ModelFacts, batch_ok, layout_ok, setting_ok
from mbmem_lint.plan.cost import TERMS, CostModel, Terms, relative_terms, unmeasured_changes
from mbmem_lint.plan.current import Current, read_current
from mbmem_lint.plan.hardware import calibration, hardware
from mbmem_lint.plan.session import RecipeKey, RecipeSession, set_item
from mbmem_lint.plan.types import PlanCandidate, PlanOptions, PlanResult, PlanStats
from mbmem_lint.records import dataclass
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.settings import Settings

GIB = 1024**3
STOPS_THE_RUN = ("assert", "raise", "runtime-crash")


def _rejected_by_bridge() -> frozenset[str]:
    """Rules whose Megatron behaviour is an exception or crash: their errors make Bridge reject a run."""
    from mbmem_lint.check.registry import all_rules

    return frozenset(r.code for r in all_rules() if any(s.behaviour in STOPS_THE_RUN for s in r.sources))


def _cost_only() -> frozenset[str]:
    """Rules that only say a config is slower than it could be (their behaviour is ``cost``): the plan models
    cost itself, so a candidate is not rejected for them (a userbuffers preset tuned for another TP, say)."""
    from mbmem_lint.check.registry import all_rules

    return frozenset(r.code for r in all_rules() if r.sources and all(s.behaviour == "cost" for s in r.sources))


REJECTED_BY_BRIDGE = _rejected_by_bridge()
COST_ONLY = _cost_only()
SPLIT_KEYS = (K.VPP, K.FIRST, K.LAST)
MODULE_ORDER = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts", "moe")
MAX_TP = 8  # TP beyond one 8-GPU NVLink board is not searched unless the recipe already uses it


# -- chains -------------------------------------------------------------------------------------------

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


# -- the planner --------------------------------------------------------------------------------------

@dataclass
class _Accepted:
    """A candidate found by the search (its node, changes, estimate and cost)."""

    layout: int
    idx: tuple[int, ...]
    spec: K.Spec
    changes: dict[str, Any]
    estimate: Estimate
    terms: Terms


class Planner:
    """One recipe's plan: the base recipe, its current reading, the cost model and the search state."""

    def __init__(self, session: RecipeSession, key: RecipeKey, settings: Settings, options: PlanOptions) -> None:
        self.session, self.key, self.settings, self.options = session, key, settings, options
        self.user_items = list(options.set_items)
        base = session.resolve(key, self.user_items)
        if base is None:
            raise EstimateUnavailable(f"{key.function} does not resolve", [])
        self.ws = base.target.world_size
        self.cur = read_current(recipe_getter(base), self.ws, model_class=base.section_class("model"),
                                dataset_class=base.section_class("dataset"), keep=options.keep)
        self._base_values = K.spec_values(self.cur.spec, self.cur.ctx)
        self._act_memo: dict[tuple[Any, ...], list[float]] = {}
        self._changes: dict[K.Spec, dict[str, Any]] = {}
        self._far: dict[tuple[int, int, bool], tuple[int, ...]] = {}
        self._terms: dict[K.Spec, Terms] = {}
        self._whatif: dict[tuple[K.Layout, tuple[int, ...]], list[int] | None] = {}
        # The rules compare a candidate with the current recipe resolved the same way (with a --set item: some
        # rules read whether a recipe runs with overrides).
        noop = set_item(K.TP, self.cur.spec.layout.tp)
        self.base = session.resolve(key, [*self.user_items, noop]) or base
        self.current = estimate_recipe(self.base)
        self.gpu = self.current.gpu
        self.margin = settings.headroom_margin
        self.budget = int(self.gpu.usable_bytes * (1 - self.margin))
        self.hw = hardware(self.gpu.name)
        self.cm = CostModel(self.cur.inp, self.hw, calibration(), self.cur.flags, world_size=self.ws or 1,
                            gbs=self.cur.facts.gbs, act_bytes=self._act_bytes)
        self.base_terms = self.cm.terms(self.cur.spec)
        self.rule_settings = replace(settings, ignore=[*settings.ignore, "MBM7"])
        base_diags = run_checks([self.base], [], self.rule_settings, session.sources)
        self.base_findings = {(d.code, d.message) for d in base_diags if d.severity in ("error", "warning")}
        self.base_errors = sorted({d.code for d in base_diags if d.severity == "error" and d.code in REJECTED_BY_BRIDGE})
        # Findings of the current recipe that do not stop a run (dead attributes, silent rewrites): candidates
        # keep them, and the plan says so.
        self.inherited = [d for d in base_diags if d.severity in ("error", "warning") and d.code not in REJECTED_BY_BRIDGE]
        self.stats = PlanStats()

    # -- pieces ------------------------------------------------------------------------------------
    def changes(self, spec: K.Spec) -> dict[str, Any]:
        hit = self._changes.get(spec)
        if hit is None:
            hit = self._changes[spec] = K.changes(spec, self.cur.spec, self.cur.ctx, self._base_values)
        return hit

    def cost(self, spec: K.Spec) -> Terms:
        hit = self._terms.get(spec)
        if hit is None:
            hit = self._terms[spec] = self.cm.terms(spec)
        return hit

    def _act_bytes(self, spec: K.Spec) -> list[float]:
        lay, st = spec.layout, spec.setting
        key = (lay.tp, lay.sp, lay.cp, st.mbs)
        hit = self._act_memo.get(key)
        if hit is None:
            plain = K.Spec(lay, replace(st, act_offload=0))
            get = recipe_getter(self.base, self.changes(plain))
            hit = self._act_memo[key] = layer_activation_bytes(get, world_size=self.ws)
        return hit

    def _corner_peak(self, layout: K.Layout, chains: Chains) -> int:
        """Peak of the layout's most memory-saving setting that the constraints allow on each knob (a lower
        bound for all of the layout's settings: the estimate only falls along each chain)."""
        far = self._furthest(layout, chains)
        variants = [far[:2] + (0,) + far[3:]]
        if far[2]:
            variants.append(far[:1] + (0,) + far[2:])
        peaks = []
        for idx in variants:
            stages = self._whatif_stages(layout, chains, idx)
            if stages is not None:
                peaks.append(max(stages))
        return min(peaks) if peaks else 1 << 62

    def _furthest(self, layout: K.Layout, chains: Chains) -> tuple[int, ...]:
        """The furthest position on each chain the constraints allow for this layout, each alone (what is
        allowed depends on PP, TP and SP only)."""
        key = (layout.pp, layout.tp, layout.sp)
        hit = self._far.get(key)
        if hit is not None:
            return hit
        f = self.cur.facts
        zero = tuple(0 for _ in chains.lengths())

        def furthest(j: int) -> int:
            for i in range(chains.lengths()[j] - 1, 0, -1):
                idx = zero[:j] + (i,) + zero[j + 1:]
                if setting_ok(f, K.Spec(layout, chains.setting(idx))) is None:
                    return i
            return 0

        hit = self._far[key] = tuple(furthest(j) for j in range(len(zero)))
        return hit

    def _corner_ok(self, li: int, layout: K.Layout, chains: Chains, checked: dict[int, bool]) -> bool:
        hit = checked.get(li)
        if hit is None:
            peak = self._corner_peak(layout, chains)
            hit = checked[li] = peak <= self.budget
            st = self.stats
            if st.best_corner_bytes is None or peak < st.best_corner_bytes:
                st.best_corner_bytes, st.best_corner = peak, layout.label()
            if not hit:
                st.layouts_pruned += 1
        return hit

    def _whatif_stages(self, layout: K.Layout, chains: Chains, idx: tuple[int, ...]) -> list[int] | None:
        """Per-stage peaks of a node by the what-if estimate (no re-resolve), memoised."""
        key = (layout, idx)
        if key in self._whatif:
            return self._whatif[key]
        spec = K.Spec(layout, chains.setting(idx))
        try:
            est = estimate_recipe(self.base, overrides=self.changes(spec))
            hit: list[int] | None = [s.total_bytes for s in est.stages]
        except EstimateUnavailable:
            hit = None
        self._whatif[key] = hit
        return hit

    def predicted_peak(self, layout: K.Layout, chains: Chains, idx: tuple[int, ...]) -> int | None:
        """A node's peak predicted from its layout's root and one what-if estimate per chain step it takes
        (per stage, savings added up). Savings of different knobs overlap (a smaller micro-batch leaves less
        for recompute to drop; expandable segments shrink a reserve proportional to what is left), so the
        sum over-states the combined saving and the prediction errs low: a node predicted over budget is
        over budget, and only nodes predicted to fit are re-resolved and estimated."""
        zero = tuple(0 for _ in idx)
        root = self._whatif_stages(layout, chains, zero)
        if root is None:
            return None
        pred = list(root)
        for j, i in enumerate(idx):
            if i == 0:
                continue
            one = self._whatif_stages(layout, chains, zero[:j] + (i,) + zero[j + 1:])
            if one is None or len(one) != len(root):
                return None
            for k in range(len(pred)):
                pred[k] -= root[k] - one[k]
        return max(pred)

    def evaluate(self, changes: dict[str, Any]) -> tuple[ResolvedRecipe | None, Estimate | None, list[str]]:
        """Re-resolve with ``changes`` as --set items and estimate. Returns the recipe, its estimate and why
        it is blocked (values Bridge rewrites)."""
        items = [*self.user_items, *(set_item(k, v) for k, v in changes.items())]
        r = self.session.resolve(self.key, items)
        if r is None:
            return None, None, ["does not resolve"]
        rewritten = [k for k, v in changes.items() if not K.same_value(r.get(k), v)]
        try:
            est = estimate_recipe(r)
        except EstimateUnavailable as exc:
            return r, None, [exc.reason]
        return r, est, [f"Bridge rewrites {k}" for k in rewritten]

    def rule_blockers(self, recipe: ResolvedRecipe) -> list[str]:
        """Findings that reject a candidate: an error of a rule whose Megatron behaviour is to raise, assert
        or crash (Bridge rejects the run), and any error or warning the current recipe does not have (the
        change caused it: a silent rewrite, a setting without effect)."""
        out = []
        for d in run_checks([recipe], [], self.rule_settings, self.session.sources):
            rejected = d.severity == "error" and d.code in REJECTED_BY_BRIDGE
            caused = (d.severity in ("error", "warning") and d.code not in COST_ONLY
                      and (d.code, d.message) not in self.base_findings)
            if rejected or caused:
                out.append(d.code)
        return out

    # -- the search ------------------------------------------------------------------------------------
    def run(self) -> PlanResult:
        t0 = time.perf_counter()
        cur, stats = self.cur, self.stats
        chains = build_chains(cur)
        lengths = chains.lengths()
        layouts: list[K.Layout] = []
        for lay in enumerate_layouts(cur):
            reason = layout_ok(cur.facts, lay) if self.ws is not None else None
            if reason is None:
                layouts.append(lay)
            else:
                stats.constraint_rejects[_short(reason)] = stats.constraint_rejects.get(_short(reason), 0) + 1
        base_layout = cur.spec.layout
        if self.ws is None:
            layouts = [base_layout]
        stats.layouts = len(layouts)
        layout_steps = [sum(getattr(lay, f) != getattr(base_layout, f) for f in ("tp", "pp", "vpp", "first", "cp", "ep",
                                                                                   "etp")) for lay in layouts]
        heap: list[tuple[float, int, int, int, tuple[int, ...]]] = []
        seq = 0
        zero = tuple(0 for _ in lengths)

        def push(li: int, idx: tuple[int, ...]) -> None:
            nonlocal seq
            spec = K.Spec(layouts[li], chains.setting(idx))
            cost = self.cost(spec).total
            seq += 1
            # Equal costs (expandable segments are free): fewer steps from the current recipe first.
            heapq.heappush(heap, (cost, sum(idx) + layout_steps[li], seq, li, idx))

        for li in range(len(layouts)):
            push(li, zero)
        visited: set[tuple[int, tuple[int, ...]]] = set()
        corner_checked: dict[int, bool] = {}
        accepted: list[_Accepted] = []
        stops: list[tuple[int, tuple[int, ...]]] = []
        blocked_example: dict[str, str] = {}
        base_fits = self.current.peak_bytes <= self.budget
        top = max(1, self.options.top)

        fields = ("tp", "sp", "pp", "vpp", "first", "last", "cp", "ep", "etp")

        def dominated(li: int, idx: tuple[int, ...]) -> bool:
            """A cheaper candidate's changes are all here (its layout changes, each memory knob at least as
            far): this node, and everything above it, only adds cost."""
            lay = layouts[li]
            for a in accepted:
                other = layouts[a.layout]
                if all(x >= y for x, y in zip(idx, a.idx)) and all(
                        getattr(lay, f) == getattr(other, f) for f in fields
                        if getattr(other, f) != getattr(base_layout, f)):
                    return True
            return False

        def expand(li: int, idx: tuple[int, ...], only: int | None = None) -> None:
            for j, n in enumerate(lengths):
                if (only is None or j == only) and idx[j] + 1 < n:
                    push(li, idx[:j] + (idx[j] + 1,) + idx[j + 1:])

        while heap:
            cost, _n, _s, li, idx = heapq.heappop(heap)
            if len(accepted) >= top:
                costs = sorted(a.terms.total for a in accepted)
                if cost > costs[top - 1]:
                    break
            if (li, idx) in visited:
                continue
            visited.add((li, idx))
            layout = layouts[li]
            if any(a[0] == li and all(x >= y for x, y in zip(idx, a[1])) for a in stops) or dominated(li, idx):
                continue  # above a candidate (never the cheapest way) or above a rule-rejected configuration
            is_base = layout == base_layout and idx == zero
            if is_base:
                if not base_fits:
                    expand(li, idx)
                continue
            # The layout's most memory-saving corner decides whether any of its settings is worth estimating.
            if not self._corner_ok(li, layout, chains, corner_checked):
                continue
            spec = K.Spec(layout, chains.setting(idx))
            reason = setting_ok(cur.facts, spec) or batch_ok(cur.facts, layout, spec.setting.mbs)
            if reason is not None:
                stats.constraint_rejects[_short(reason)] = stats.constraint_rejects.get(_short(reason), 0) + 1
                expand(li, idx, only=0)  # a smaller micro-batch can fix the batch split
                continue
            pred = self.predicted_peak(layout, chains, idx)
            if pred is not None and pred > self.budget:
                stats.predicted_over += 1
                expand(li, idx)
                continue
            if stats.evaluated >= self.options.max_evaluations:
                stats.exhausted = True
                break
            changes = self.changes(spec)
            stats.evaluated += 1
            recipe, est, blockers = self.evaluate(changes)
            fits = est is not None and est.peak_bytes <= self.budget
            if fits and recipe is not None and not blockers:
                blockers = self.rule_blockers(recipe)
            if fits and not blockers and est is not None:
                items = set(_items(changes))
                if any(set(_items(a.changes)) <= items for a in accepted):
                    continue  # the changes of a cheaper candidate, and more
                if _family(changes) in {_family(a.changes) for a in accepted}:
                    stops.append((li, idx))
                    continue  # a cheaper candidate differs only in the (virtual) stage split
                accepted.append(_Accepted(li, idx, spec, changes, est, self.cost(spec)))
                stops.append((li, idx))
                continue
            if fits:
                # It fits but a rule rejects it: what the rule objects to stays on every step further up its
                # chains (the layout, or a knob already turned), so the search does not go above it.
                stops.append((li, idx))
            for b in blockers:
                code = _short(b)
                stats.rule_rejects[code] = stats.rule_rejects.get(code, 0) + 1
                blocked_example.setdefault(code, K.Layout.label(layout))
            if not fits:
                expand(li, idx)
        if not accepted and not stats.exhausted:
            # Nothing fits: every layout's corner says by how much (for the explanation).
            for li, layout in enumerate(layouts):
                if layout != base_layout or not base_fits:
                    self._corner_ok(li, layout, chains, corner_checked)
        stats.seconds = time.perf_counter() - t0
        return self._result(accepted, blocked_example)

    def _result(self, accepted: list[_Accepted], blocked_example: dict[str, str]) -> PlanResult:
        accepted.sort(key=lambda a: (a.terms.total, len(a.changes)))
        kept: list[_Accepted] = []
        families: set[frozenset[tuple[str, str]]] = set()
        for a in accepted:
            items = set(_items(a.changes))
            if any(set(_items(b.changes)) <= items for b in kept):
                continue
            family = _family(a.changes)
            if family in families:
                continue
            families.add(family)
            kept.append(a)
        kept = kept[: max(1, self.options.top)]
        cands: list[PlanCandidate] = []
        base_rel = relative_terms(self.base_terms, self.base_terms)
        for rank, a in enumerate(kept, 1):
            rel = relative_terms(a.terms, self.base_terms)
            cands.append(PlanCandidate(
                rank=rank, title=title(self.cur.spec, a.spec), spec=a.spec, changes=a.changes, estimate=a.estimate,
                fits=True, terms=a.terms, relative_step_time=sum(rel.values()), relative_terms=rel,
                set_args=[set_item(k, v) for k, v in a.changes.items()],
                unmeasured=self._unmeasured(a.spec, rel, base_rel),
            ))
        if self.options.with_diff and cands:
            from mbmem_lint.plan.render import candidate_diff

            for c in cands:
                c.diff = candidate_diff(self.base, c.changes, self.session.sources)
        result = PlanResult(
            recipe=f"{self.base.path}::{self.base.function}", gpu=self.gpu, world_size=self.ws,
            headroom_margin=self.margin, current=self.current, current_terms=self.base_terms, candidates=cands,
            pinned={k: v for k, v in self.cur.pinned.items() if v != "no experts" and v != "no LoRA"},
            notes=list(self.cur.notes), stats=self.stats,
        )
        seen: set[tuple[str, str]] = set()
        for d in self.inherited:
            if (d.code, d.message) not in seen:
                seen.add((d.code, d.message))
                result.notes.append(f"the current recipe has {d.code} [{d.severity}] {d.message} "
                                    f"({d.location.path}:{d.location.line}); candidates keep it (it does not stop a run)")
        if not cands:
            result.explanation = self._explain(blocked_example)
        if self.ws is None:
            result.notes.append("world size unknown: layouts were not searched (give --world-size)")
        return result

    def _unmeasured(self, spec: K.Spec, rel: dict[str, float], base_rel: dict[str, float]) -> list[str]:
        """Uncalibrated terms the candidate changes, and those of the mechanisms it turns (CP, EP, FSDP,
        offload) even where the model finds them hidden behind compute."""
        a, b = self.cur.spec, spec
        turned = {
            "cp_comm": a.layout.cp != b.layout.cp,
            "ep_comm": (a.layout.ep, a.layout.etp) != (b.layout.ep, b.layout.etp),
            "fsdp": a.setting.fsdp != b.setting.fsdp,
            "act_offload": a.setting.act_offload != b.setting.act_offload,
            "optimizer_offload": a.setting.opt_offload != b.setting.opt_offload,
        }
        changed = set(unmeasured_changes(rel, base_rel)) | {k for k, v in turned.items() if v}
        return [k for k in TERMS if k in changed]

    def _explain(self, blocked_example: dict[str, str]) -> str:
        st = self.stats
        budget = f"{self.budget / GIB:.1f} GiB ({self.gpu.name} usable less the {self.margin:.0%} headroom margin)"
        where = f"at world size {self.ws}" if self.ws else "without a world size"
        if self.base_errors:
            errs = ", ".join(self.base_errors)
            extra = f"; the current recipe already fails {errs}, which Bridge rejects and every candidate must fix"
        else:
            extra = ""
        if st.layouts and st.layouts_pruned == st.layouts:
            corner = st.best_corner_bytes or 0
            return (f"no configuration fits {where}: even the most memory-saving setting of every layout "
                    f"(smallest micro-batch, full recompute or CPU offload, distributed optimizer or Megatron-FSDP, "
                    f"optimizer offload, expandable segments) needs at least {corner / GIB:.1f} GiB per rank "
                    f"({st.best_corner}), above the {budget}{extra}")
        if st.rule_rejects:
            top = sorted(st.rule_rejects.items(), key=lambda kv: -kv[1])[:4]
            why = ", ".join(f"{code} ({n}x, e.g. at {blocked_example.get(code, '?')})" for code, n in top)
            tail = " (evaluation budget exhausted)" if st.exhausted else ""
            return (f"no configuration that fits {where} passes the rules: {why}{extra}{tail}")
        if st.exhausted:
            return (f"no fitting configuration found within {st.evaluated} evaluations {where} (budget {budget}); "
                    "raise the evaluation budget or pin knobs with --keep to narrow the search")
        return f"no configuration fits {where} within {budget}{extra}"


def _family(changes: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """Candidates that differ only in how the layers are split over (virtual) stages are one idea: the plan
    shows the cheapest of them."""
    return frozenset(kv for kv in _items(changes) if kv[0] not in SPLIT_KEYS)


def _items(changes: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k, repr(v)) for k, v in changes.items()]


def _short(reason: str) -> str:
    """A rejection reason's tag: the rule code in parentheses when there is one."""
    if reason.endswith(")") and "(MBM" in reason:
        return reason[reason.rindex("(") + 1:-1]
    if reason.startswith("MBM"):
        return reason
    return reason


def title(base: K.Spec, spec: K.Spec) -> str:
    """What a candidate changes, in words (``PP 4->8, expandable segments``)."""
    a, b = base.layout, spec.layout
    out: list[str] = []
    for name, x, y in (("TP", a.tp, b.tp), ("PP", a.pp, b.pp), ("VPP", a.vpp, b.vpp), ("CP", a.cp, b.cp),
                       ("EP", a.ep, b.ep), ("ETP", a.etp, b.etp)):
        if x != y:
            out.append(f"{name} {x or '-'}->{y or '-'}")
    if a.sp != b.sp:
        out.append("SP " + ("on" if b.sp else "off"))
    if (a.first, a.last) != (b.first, b.last):
        out.append(f"first/last stage layers {b.first or '-'}/{b.last or '-'}")
    s0, s1 = base.setting, spec.setting
    if s0.mbs != s1.mbs:
        out.append(f"MBS {s0.mbs}->{s1.mbs}")
    if s0.recompute != s1.recompute:
        out.append(f"recompute {s1.recompute.label()}")
    if s0.act_offload != s1.act_offload:
        out.append(f"CPU activation offload {s1.act_offload} layers")
    if s1.fsdp is not None and s0.fsdp != s1.fsdp:
        out.append(f"Megatron-FSDP {s1.fsdp}")
    elif s0.dist_opt != s1.dist_opt:
        out.append("distributed optimizer")
    if s0.opt_offload != s1.opt_offload:
        out.append(f"optimizer CPU offload {s1.opt_offload:.0%}")
    if s0.es != s1.es:
        out.append("expandable segments")
    if s0.regather != s1.regather:
        out.append("LoRA input re-gather")
    return ", ".join(out) or "no change"
