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
from dataclasses import replace
from typing import Any

from mbmem_lint.check.engine import run_checks
from mbmem_lint.estimate.api import estimate_recipe, layer_activation_bytes, recipe_getter
from mbmem_lint.estimate.types import Estimate, EstimateUnavailable
from mbmem_lint.plan import knobs as K
from mbmem_lint.plan.constraints import batch_ok, layout_ok, setting_ok
from mbmem_lint.plan.cost import TERMS, CostModel, Terms, relative_terms, unmeasured_changes
from mbmem_lint.plan.current import read_current
from mbmem_lint.plan.hardware import calibration, hardware
from mbmem_lint.plan.session import RecipeKey, RecipeSession, set_item
from mbmem_lint.plan.space import Chains, build_chains, enumerate_layouts
from mbmem_lint.plan.types import PlanCandidate, PlanOptions, PlanResult, PlanStats, budget_bytes
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
        self.budget = budget_bytes(self.gpu, self.margin)
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
                rank=rank, title=K.title(self.cur.spec, a.spec), spec=a.spec, changes=a.changes, estimate=a.estimate,
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
    return reason
