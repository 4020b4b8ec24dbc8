"""First-order step-time model of a parallel layout and memory setting (per GPU, seconds per step).

Every term is named and documented in docs/plan.md; :meth:`CostModel.terms` returns them for one
:class:`~mbmem_lint.plan.knobs.Spec`, and a plan reports each divided by the current recipe's step time,
so the terms of a candidate add up to its ``relative_step_time``.

Structure: a pipeline stage processes ``M = GBS / (MBS·DP)`` micro-batches; the slowest stage paces the
pipeline. Its per-micro-batch time is the sum over its layers of compute, recompute and the exposed
TP/CP/EP/re-gather communication, plus the logits on the last stage, offload transfers and FSDP gathers.
The step is ``M × that + bubble + pipeline send/recv + DP gradient sync + optimizer offload``. The
constants fitted on measured runs (GEMM efficiency, TP exposure, per-pass overhead, re-gather exposure)
live in ``data/interconnect.json`` with the fit (``bench/plan_calibration.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mbmem_lint.estimate.inputs import LORA_TARGETS, Inputs
from mbmem_lint.estimate.pipeline import stage_layer_counts
from mbmem_lint.plan.hardware import Calibration, Hardware
from mbmem_lint.plan.knobs import Spec
from mbmem_lint.records import dataclass, field

BF16 = 2
# Terms whose constants were fitted on measured step times (bench/plan_calibration.py); the others are
# first-order physics with assumed efficiencies (docs/plan.md says which).
MEASURED_TERMS = ("compute", "recompute", "tp_comm", "pipeline_bubble", "pp_p2p", "regather", "allocator")
TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "regather", "act_offload", "fsdp",
         "pipeline_bubble", "pp_p2p", "dp_comm", "optimizer_offload", "allocator")


@dataclass(frozen=True)
class Kind:
    """A layer kind as the cost model sees it: which blocks it has and their per-token forward FLOPs."""

    attn: bool
    mlp: str | None  # "dense" | "moe" | None
    mamba: bool


@dataclass
class KindCost:
    """Per-token forward FLOPs and per-layer parameters of one layer kind."""

    lin: float = 0.0  # GEMM FLOPs per token (forward)
    core: float = 0.0  # attention score / scan FLOPs per token (forward, causal)
    attn_lin: float = 0.0
    mlp_lin: float = 0.0  # dense MLP, or routed + shared experts of an MoE layer
    up_proj: float = 0.0  # MLA up projections (mla_up_proj recompute)
    shared_lin: float = 0.0
    moe_act_bytes: float = 0.0  # elementwise traffic of the expert activation (moe_act recompute)
    norm_bytes: float = 0.0  # elementwise traffic of the layer's norms (layernorm recompute)
    kv_dim: int = 0  # K+V width exchanged by context parallelism
    tp_blocks: list[float] = field(default_factory=list)  # GEMM FLOPs per token of each TP-sharded block
    dense_params: float = 0.0
    expert_params: float = 0.0
    blocks: int = 0  # TP-sharded blocks (attention, dense MLP, Mamba mixer)


@dataclass(frozen=True)
class Flags:
    """Recipe settings the model reads that the plan does not change."""

    tp_overlap: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    overlap_ep: bool
    overlap_cpu_optimizer: bool
    peft_targets: tuple[str, ...] = ()


@dataclass
class Terms:
    """Seconds per step of each cost term for one spec (``TERMS`` order), and which stage paced it."""

    seconds: dict[str, float] = field(default_factory=dict)
    slowest_stage: int = 0
    microbatches: int = 1

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def layer_kinds(inp: Inputs) -> list[Kind]:
    """One :class:`Kind` per layer (hybrid patterns: M Mamba, * attention, - MLP, E MoE, G gated delta
    net counted as attention)."""
    sh = inp.shape
    if sh.hybrid:
        table = {"M": Kind(False, None, True), "*": Kind(True, None, False), "G": Kind(True, None, False),
                 "-": Kind(False, "dense", False), "E": Kind(False, "moe", False)}
        return [table.get(c, Kind(True, None, False)) for c in sh.hybrid]
    return [Kind(True, "moe" if moe else "dense", False) for moe in sh.moe_pattern]


def _kind_cost(inp: Inputs, k: Kind) -> KindCost:
    sh = inp.shape
    h, s = sh.hidden, inp.train.seq
    c = KindCost()
    glu = 3 if sh.glu else 2
    if k.attn:
        c.blocks += 1
        if sh.mla:
            qk = sh.qk_head_dim + sh.qk_pos_dim
            q = (sh.q_lora_rank * (h + sh.heads * qk)) if sh.q_lora_rank else h * sh.heads * qk
            kv_down = h * (sh.kv_lora_rank + sh.qk_pos_dim)
            kv_up = sh.kv_lora_rank * sh.heads * (sh.qk_head_dim + sh.v_head_dim)
            o = sh.heads * sh.v_head_dim * h
            params = q + kv_down + kv_up + o
            c.up_proj = 2.0 * (kv_up + (sh.q_lora_rank * sh.heads * qk if sh.q_lora_rank else 0))
            c.core = float(s * sh.heads * qk + s * sh.heads * sh.v_head_dim)
            c.kv_dim = sh.heads * (qk + sh.v_head_dim)
        else:
            qd, kvd = sh.heads * sh.kv_channels, sh.groups * sh.kv_channels
            params = h * (qd + 2 * kvd) + qd * h
            c.core = 2.0 * s * qd  # QK^T and AV, causal (half the square)
            c.kv_dim = 2 * kvd
        c.attn_lin = 2.0 * params
        c.tp_blocks.append(c.attn_lin)
        c.dense_params += params
        c.norm_bytes += 4.0 * h * BF16
    if k.mlp == "dense":
        c.blocks += 1
        params = glu * h * sh.ffn
        c.mlp_lin = 2.0 * params
        c.tp_blocks.append(c.mlp_lin)
        c.dense_params += params
        c.norm_bytes += 4.0 * h * BF16
    elif k.mlp == "moe":
        width = sh.moe_latent or h
        routed = sh.topk * 2.0 * width * sh.moe_ffn * glu
        if sh.moe_latent:
            routed += 4.0 * h * sh.moe_latent
        shared = 2.0 * h * sh.shared_ffn * glu
        c.shared_lin = shared
        c.mlp_lin = routed + shared + 2.0 * h * sh.num_experts
        c.expert_params = sh.num_experts * glu * width * sh.moe_ffn
        c.dense_params += h * sh.shared_ffn * glu + h * sh.num_experts
        c.moe_act_bytes = sh.topk * sh.moe_ffn * (glu + 1) * BF16 * 2.0
        c.norm_bytes += 4.0 * h * BF16
    if k.mamba:
        c.blocks += 1
        d_in = sh.mamba_heads * sh.mamba_head_dim
        gn = sh.mamba_groups * sh.mamba_state
        params = h * (2 * d_in + 2 * gn + sh.mamba_heads) + d_in * h
        c.attn_lin += 2.0 * params
        c.tp_blocks.append(2.0 * params)
        c.core += 7.0 * d_in * sh.mamba_state
        c.dense_params += params
        c.norm_bytes += 4.0 * h * BF16
    c.lin = c.attn_lin + c.mlp_lin
    return c


ActBytes = Callable[[Spec], list[float]]


class CostModel:
    """Step-time terms of any spec for one model on one GPU (per-kind FLOPs computed once)."""

    def __init__(self, inp: Inputs, hw: Hardware, cal: Calibration, flags: Flags, *, world_size: int,
                 gbs: int | None, act_bytes: ActBytes | None = None) -> None:
        self.inp = inp
        self.hw = hw
        self.cal = cal
        self.flags = flags
        self.ws = world_size
        self.gbs = gbs
        self.act_bytes = act_bytes
        self.kinds = layer_kinds(inp)
        self._costs: dict[Kind, KindCost] = {}
        self._stages: dict[tuple[int, int | None, int | None], list[dict[Kind, int]]] = {}
        for k in self.kinds:
            if k not in self._costs:
                self._costs[k] = _kind_cost(inp, k)
        sh = inp.shape
        self.mtp_kind = self.kinds[-1] if self.kinds else Kind(True, "dense", False)
        self.lora = inp.peft is not None
        self.train_mult = 2.0 if self.lora else 3.0  # frozen base: forward + input gradients, no wgrad
        self.logits_lin = 2.0 * sh.hidden * sh.vocab
        self.embed_params = float(sh.hidden * sh.vocab)
        targets = flags.peft_targets or tuple(LORA_TARGETS)
        self.regather_qkv = any(t.rstrip("*").endswith("linear_qkv") or t in ("*", ".*") for t in targets)
        self.regather_fc1 = any(t.rstrip("*").endswith("linear_fc1") or t in ("*", ".*") for t in targets)

    # -- helpers ---------------------------------------------------------------------------------
    def _stage_kinds(self, spec: Spec) -> list[dict[Kind, int]]:
        lay = spec.layout
        key = (lay.pp, lay.first, lay.last)
        hit = self._stages.get(key)
        if hit is None:
            hit = self._stages[key] = self._split(*key)
        return hit

    def _split(self, pp: int, first: int | None, last: int | None) -> list[dict[Kind, int]]:
        # The estimator's own split (uneven stages, account_for_* layers), on this spec's pipeline.
        par = replace(self.inp.par, pp=pp, first_stage_layers=first, last_stage_layers=last)
        counts = stage_layer_counts(len(self.kinds), par, [])
        out: list[dict[Kind, int]] = []
        i = 0
        for n in counts:
            d: dict[Kind, int] = {}
            for k in self.kinds[i:i + n]:
                d[k] = d.get(k, 0) + 1
            out.append(d)
            i += n
        if self.inp.shape.mtp_layers:
            d = out[-1]
            d[self.mtp_kind] = d.get(self.mtp_kind, 0) + self.inp.shape.mtp_layers
        return out

    def microbatches(self, spec: Spec) -> int:
        lay = spec.layout
        dp = max(1, self.ws // (lay.tp * lay.pp * lay.cp))
        if not self.gbs:
            return 1
        return max(1, self.gbs // (spec.setting.mbs * dp))

    # -- the model -------------------------------------------------------------------------------
    def terms(self, spec: Spec) -> Terms:
        lay, st = spec.layout, spec.setting
        hw, cal, sh = self.hw, self.cal, self.inp.shape
        tp, pp, cp = lay.tp, lay.pp, lay.cp
        dp = max(1, self.ws // (tp * pp * cp))
        v = lay.vpp or 1
        m = self.microbatches(spec)
        tokens = float(st.mbs * self.inp.train.seq)
        shard = tp * cp
        eff = cal.gemm_efficiency
        p_lin = (hw.fp8_flops if self.inp.prec.fp8 else hw.bf16_flops) * eff
        p_core = hw.bf16_flops * eff
        tm = self.train_mult
        unit = 2.0 * tokens * sh.hidden / cp  # one bf16 activation of the CP shard
        bw_tp = hw.group_bps(tp)
        tp_frac = (tp - 1) / tp
        units_per_block = (4 if self.lora else 5) if lay.sp else 4
        rc = st.recompute
        mods = set(rc.modules or ("core_attn",)) if rc.granularity == "selective" else set()

        per_kind: dict[Kind, dict[str, float]] = {}
        for k, c in self._costs.items():
            t_fwd = tokens * (c.lin / p_lin + c.core / p_core) / shard
            comp = tm * t_fwd
            tpc = 0.0
            if tp > 1:
                # Each block's collectives; with TP overlap they run under the block's own GEMMs (forward and
                # backward), so only what exceeds the hiding capacity is exposed.
                coll = cal.tp_exposure * units_per_block * unit * tp_frac / bw_tp
                for lin in c.tp_blocks:
                    hide = cal.tp_hidden * tm * tokens * lin / p_lin / shard if self.flags.tp_overlap else 0.0
                    tpc += max(0.0, coll - hide)
            # Recompute: the forward of what is dropped runs again in backward.
            rec = 0.0
            if rc.granularity == "selective":
                if "core_attn" in mods:
                    rec += tokens * c.core / p_core / shard
                if "mlp" in mods and k.mlp == "dense":
                    rec += tokens * c.mlp_lin / p_lin / shard
                    if tp > 1 and lay.sp:
                        rec += cal.tp_exposure * unit * tp_frac / bw_tp  # the fc1 input is all-gathered again
                if "moe" in mods and k.mlp == "moe":
                    rec += tokens * c.mlp_lin / p_lin / shard
                if "shared_experts" in mods and k.mlp == "moe":
                    rec += tokens * c.shared_lin / p_lin / shard
                if "mla_up_proj" in mods:
                    rec += tokens * c.up_proj / p_lin / shard
                if "moe_act" in mods and k.mlp == "moe":
                    rec += tokens * c.moe_act_bytes / hw.hbm_bps / shard
                if "layernorm" in mods:
                    rec += tokens * c.norm_bytes / hw.hbm_bps / shard
            # CP ring exchange of K and V (forward; K, V and their gradients in backward), hidden behind the
            # attention kernels it overlaps with.
            cpc = 0.0
            if cp > 1 and k.attn:
                kv = 3.0 * (cp - 1) * (tokens / cp) * c.kv_dim * BF16 / max(1, min(tp, sh.groups or tp))
                cpc = max(0.0, kv / hw.group_bps(tp * cp) - tm * tokens * c.core / p_core / shard)
            epc = 0.0
            if k.mlp == "moe":
                tok = tokens / cp / (tp if lay.sp else 1)
                if lay.ep > 1:
                    # Dispatch and combine, forward and backward: each token's top-k copies go to the other EP
                    # ranks; those in this NVLink domain over NVLink, the rest over the network, at once.
                    sent = 4.0 * tok * sh.topk * sh.hidden * BF16 / lay.ep
                    near = max(1, min(lay.ep, hw.nvlink_domain // lay.etp))  # EP ranks in this NVLink domain
                    epc = cal.ep_exposure * max(sent * (near - 1) / hw.nvlink_bps,
                                                sent * (lay.ep - near) / hw.network_bps)
                    if self.flags.overlap_ep:
                        epc = max(0.0, epc - tm * tokens * c.mlp_lin / p_lin / shard)
                    if "moe" in mods:
                        epc *= 1.5  # the forward dispatch/combine runs again
                if lay.etp > 1:
                    epc += cal.tp_exposure * 5 * unit * sh.topk * (lay.etp - 1) / lay.etp / hw.group_bps(lay.etp)
            rg = 0.0
            if st.regather and tp > 1 and lay.sp:
                n = (1 if (k.attn and self.regather_qkv) else 0)
                if k.mlp == "dense" and self.regather_fc1 and "mlp" not in mods:
                    n += 1
                rg = cal.regather_exposure * n * unit * tp_frac / bw_tp
            per_kind[k] = {"compute": comp, "recompute": rec, "tp_comm": tpc, "cp_comm": cpc, "ep_comm": epc,
                           "regather": rg, "fwd": t_fwd}

        # Full recompute: the forward (and its TP collectives) of the recomputed layers runs again.
        def full_rec(k: Kind, count: int) -> float:
            if rc.granularity != "full" or count <= 0:
                return 0.0
            c = self._costs[k]
            fwd_tp = cal.tp_exposure * 2 * c.blocks * unit * tp_frac / bw_tp if tp > 1 else 0.0
            if rc.method == "block":
                per_chunk = len(self.kinds) / (pp * v)
                count = int(round(count * min(1.0, (rc.num_layers or 1) / max(1.0, per_chunk))))
            return count * (per_kind[k]["fwd"] + fwd_tp)

        stages = self._stage_kinds(spec)
        params_stage: list[tuple[float, float]] = []
        stage_parts: list[dict[str, float]] = []
        for si, kinds in enumerate(stages):
            parts = dict.fromkeys(("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "regather",
                                   "act_offload", "fsdp"), 0.0)
            dense = exp = 0.0
            for k, n in kinds.items():
                pk = per_kind[k]
                for key in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "regather"):
                    parts[key] += n * pk[key]
                parts["recompute"] += full_rec(k, n)
                dense += n * self._costs[k].dense_params
                exp += n * self._costs[k].expert_params
            if si == 0:
                dense += self.embed_params
            if si == len(stages) - 1:
                n_logits = 1 + sh.mtp_layers
                parts["compute"] += tm * n_logits * tokens * self.logits_lin / p_lin / shard
                if not sh.tied or pp > 1:
                    dense += self.embed_params
            params_stage.append((dense, exp))
            stage_parts.append(parts)

        # Activation CPU offload (PP=1): each offloaded layer's activations go to the host during its
        # forward and come back during its backward, overlapped with that layer's compute.
        if st.act_offload and self.act_bytes is not None:
            per_layer = self.act_bytes(spec)
            k0 = self.kinds[0]
            fwd_one = per_kind[k0]["fwd"]
            moved = sum(per_layer[: st.act_offload])
            t_copy = moved / hw.host_bps
            t_fwd = st.act_offload * fwd_one
            stage_parts[0]["act_offload"] = max(0.0, t_copy - t_fwd) + max(0.0, t_copy - (tm - 1) * t_fwd)

        g_dense = dp * cp
        g_exp = max(1, (dp * tp * cp) // (lay.ep * lay.etp))
        span = tp * cp * dp
        bw_dp = hw.group_bps(span)
        pb, gb = self.inp.prec.param_bytes, self.inp.prec.grad_bytes
        gathers = st.fsdp == "optim_grads_params"  # parameters gathered per micro-batch (forward and backward)
        if gathers:
            for si, parts in enumerate(stage_parts):
                dense, exp = params_stage[si]
                local = dense / tp + exp / (lay.etp * lay.ep)
                comm = 3.0 * local * pb * (g_dense - 1) / g_dense / bw_dp
                busy = parts["compute"] + parts["recompute"]
                parts["fsdp"] = max(0.0, comm - busy)

        per_mb = [sum(p.values()) for p in stage_parts]
        slow = max(range(len(per_mb)), key=lambda i: per_mb[i])
        t_max = per_mb[slow]
        out = {key: m * val for key, val in stage_parts[slow].items()}

        out["pipeline_bubble"] = (pp - 1) / v * t_max if pp > 1 else 0.0
        if pp > 1:
            act = 2.0 * tokens * sh.hidden / cp / (tp if lay.sp else 1)
            bw_pp = hw.nvlink_bps if pp * span <= hw.nvlink_domain else hw.network_bps
            out["pp_p2p"] = m * 2 * v * act / bw_pp
        else:
            out["pp_p2p"] = 0.0

        dense, exp = params_stage[slow]
        local_dense, local_exp = dense / tp, exp / (lay.etp * lay.ep)
        dp_t = 0.0
        if not gathers:
            for local, g in ((local_dense, g_dense), (local_exp, g_exp)):
                if g <= 1 or local <= 0:
                    continue
                frac = (g - 1) / g
                if st.dist_opt or st.fsdp is not None:
                    rs, ag = local * gb * frac / bw_dp, local * pb * frac / bw_dp
                else:
                    rs, ag = 2.0 * local * gb * frac / bw_dp, 0.0
                if self.flags.overlap_grad_reduce:
                    rs = max(0.0, rs - (tm - 1) / tm * t_max)
                if self.flags.overlap_param_gather:
                    ag = max(0.0, ag - t_max / tm)
                dp_t += rs + ag
        out["dp_comm"] = dp_t

        opt_t = 0.0
        if st.opt_offload:
            shard_params = local_dense / g_dense + local_exp / g_exp
            moved = st.opt_offload * shard_params
            copy = moved * (gb + pb) / hw.host_bps
            cpu = moved / cal.cpu_adam_params_per_s
            opt_t = max(copy, cpu) if self.flags.overlap_cpu_optimizer else copy + cpu
        out["optimizer_offload"] = opt_t
        out["allocator"] = 0.0  # expandable segments: measured free
        return Terms({key: out.get(key, 0.0) for key in TERMS}, slow, m)


def unmeasured_changes(rel: dict[str, float], base_rel: dict[str, float], tolerance: float = 0.005) -> list[str]:
    """Terms a candidate changes (by more than ``tolerance`` of the current step) whose cost no measurement
    calibrates: its rank leans on an assumption there."""
    return [k for k in TERMS if k not in MEASURED_TERMS and abs(rel.get(k, 0.0) - base_rel.get(k, 0.0)) > tolerance]


def relative_terms(terms: Terms, base: Terms) -> dict[str, float]:
    """Each term as a fraction of the current recipe's modelled step time."""
    total = base.total or 1.0
    return {k: v / total for k, v in terms.seconds.items()}
