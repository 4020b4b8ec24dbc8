"""Events → diagnoses: why each OOM happened and what to change, cheapest first.

* **fragmentation**: the allocator held at least the failed request in reserved-but-unallocated
  memory (or at least half of it, with free memory making up the rest). PyTorch's own comment at the
  OOM check: by then every fully free cached block was returned to the driver, so what remains is
  split from blocks partly in use. Fix: ``expandable_segments:True`` first (no throughput cost).
  With expandable segments already on, the gap is pinned by live blocks: treated as capacity.
* **imbalance**: this rank's pipeline stage peaks well above the others (measured, or estimated with
  ``--recipe``) while they keep headroom: move work off that stage.
* **capacity**: live tensors fill the GPU; the ranked cheapest changes, re-estimated with ``--recipe``.
* **oversized-request**: one allocation larger than the whole GPU: a shape or data bug, not a memory
  setting (no tuning is offered).
* **other-processes**: other processes on the GPU hold the memory the request lacked (a co-located
  inference engine, a zombie of an earlier run): freeing it comes before any allocator or model change.
* **known-error**: a Megatron / Transformer Engine failure a rule of the catalog catches before launch,
  with the numbers the message holds.
* **unknown**: the message carries no allocator figures (an OOM in NCCL, Triton, cuBLAS, a raw
  cudaMalloc), or is cut off before them — the diagnosis says what is missing.

Communication failures, CUDA errors and unrecognised fatal ends: :mod:`.classify_failures`.
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnose.compare import Layout, estimated_allocated
from mbmem_lint.diagnose.scan import KnownErrorEvent, OomEvent, ScanResult, Where
from mbmem_lint.estimate.types import Estimate
from mbmem_lint.records import dataclass, field

GIB = 1024**3
IMBALANCE_RATIO = 1.15  # a stage this much above every other stage is "one-stage imbalance"
HEADROOM_FRACTION = 0.10  # ... while the other stages leave at least this share of the GPU free
CAPACITY_CODE = "MBM701"
ALLOCATOR_FORMATS = ("torch>=2.1", "torch<=2.0", "allocator")  # the caching allocator's own messages
EXPANDABLE_CODE = "MBM314"


def gib(n: int | float | None) -> str:
    """Bytes as PyTorch's messages print them: GiB above 1 GiB, else MiB."""
    if n is None:
        return "?"
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / 1024**2:.2f} MiB"


@dataclass
class Suggestion:
    """A change to try: what to set, its re-estimated saving (None when not re-estimated), its cost."""

    title: str
    cost: str = ""
    saving_bytes: int | None = None
    setting: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "saving_bytes": self.saving_bytes, "cost": self.cost,
                "setting": dict(self.setting) if self.setting is not None else None}


@dataclass
class RunContext:
    """What is known about the run besides its logs (``--recipe``, ``--gpu``, ``--world-size``)."""

    layout: Layout | None = None
    estimate: Estimate | None = None
    capacity_suggestions: list[Suggestion] | None = None  # ranked, re-estimated (``--recipe``)
    expandable_segments: bool | None = None  # known from the recipe's env_vars or the log
    nccl_ub: bool | None = None
    cuda_graphs: bool | None = None
    recipe: str | None = None


@dataclass
class Diagnosis:
    """The verdict on one OOM or known failure, with what to change."""

    cls: str  # see DIAGNOSIS_CLASSES
    where: Where
    message: str
    codes: list[str] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    figures: OomEvent | None = None
    stage: int | None = None
    details: dict[str, Any] = field(default_factory=dict)  # what the class reads (collective, group, numbers...)
    ranks: list[int] = field(default_factory=list)  # every rank the diagnosis covers (where the logs say)

    def to_json(self) -> dict[str, Any]:
        f = self.figures
        return {
            "class": self.cls, "rank": self.where.rank, "iteration": self.where.iteration,
            "after_iteration": self.where.after_iteration, "file": self.where.file, "line": self.where.line,
            "stage": self.stage,
            "requested_bytes": f.requested_bytes if f else None, "capacity_bytes": f.capacity_bytes if f else None,
            "free_bytes": f.free_bytes if f else None, "allocated_bytes": f.allocated_bytes if f else None,
            "reserved_unallocated_bytes": f.reserved_unallocated_bytes if f else None,
            "codes": list(self.codes), "message": self.message,
            "suggestions": [s.to_json() for s in self.suggestions],
            "ranks": list(self.ranks), "details": dict(self.details),
        }


DIAGNOSIS_CLASSES = ("fragmentation", "capacity", "imbalance", "oversized-request", "other-processes", "known-error",
                     "unknown", "communication", "cuda-error", "unrecognised-failure")


def _rank_text(w: Where) -> str:
    if w.rank is not None:
        return f"rank {w.rank}"
    if w.local_rank is not None:
        return f"local rank {w.local_rank}" + (f" of Slurm task {w.task}" if w.task is not None else "")
    return "a rank (the log line carries no rank prefix)"


def _when(w: Where) -> str:
    if w.iteration is not None:
        return f" in iteration {w.iteration}"
    if w.after_iteration is not None:
        return f" after iteration {w.after_iteration}"
    return " before the first logged iteration"


def is_fragmentation(ev: OomEvent) -> bool:
    r, u, f = ev.requested_bytes, ev.reserved_unallocated_bytes, ev.free_bytes
    if r is None or u is None:
        return False
    return u >= r or (u >= r / 2 and u + (f or 0) >= r)


def _old_torch(ev: OomEvent | None) -> bool:
    """The message is torch <= 2.0's: that PyTorch has no ``expandable_segments`` (the option is absent from
    the 2.0.1 wheel's libc10_cuda.so and present in 2.1.2's; PyTorch 2.1 added it)."""
    return ev is not None and ev.format == "torch<=2.0"


OLD_TORCH_FRAGMENTATION = (
    Suggestion("set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:<MB> (this PyTorch's own advice in the message: blocks "
               "larger than <MB> are not split; expandable_segments does not exist before torch 2.1)",
               "none to small (more cudaMalloc calls for large blocks)"),
    Suggestion("upgrade to torch >= 2.1 and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
               "an upgrade; none measured at run time (Llama3 70B SFT on H100: same TFLOP/s)"),
)


def _expandable_suggestions(ctx: RunContext, ev: OomEvent | None = None) -> list[Suggestion]:
    if _old_torch(ev):
        return list(OLD_TORCH_FRAGMENTATION)
    out = [Suggestion("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cfg.env_vars or the launch environment)",
                      "none measured (Llama3 70B SFT on H100: same TFLOP/s, the OOM gone)",
                      setting={"env_vars.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]
    if ctx.cuda_graphs is not False:
        out.append(Suggestion("with CUDA graphs, also NCCL_GRAPH_REGISTER=0 (MBM306: MCore asserts it)", "none",
                              setting={"env_vars.NCCL_GRAPH_REGISTER": "0"}))
    if ctx.nccl_ub:
        out.append(Suggestion("ddp.nccl_ub=True cannot run with expandable segments on torch < 2.11 (MBM307): "
                              "drop nccl_ub first", "loses NCCL user-buffer registration"))
    return out


GENERIC_CAPACITY = (
    ("selective recompute of core_attn (model.recompute_granularity='selective', recompute_modules=['core_attn'])",
     "small: recomputes attention internals only"),
    ("use the distributed optimizer (optimizer.use_distributed_optimizer=True and ddp.use_distributed_optimizer=True)",
     "about 1-2%"),
    ("raise pipeline_model_parallel_size (keeping DP if the job can grow)", "about -6% when DP halves"),
    ("add mlp to recompute_modules", "about -16% throughput on Llama3 70B"),
    ("raise tensor_model_parallel_size (last resort)", "-28% throughput on Llama3 70B TP4->8"),
)


def _capacity_suggestions(ctx: RunContext, ev: OomEvent | None = None) -> list[Suggestion]:
    old = _old_torch(ev)
    if ctx.capacity_suggestions is not None:
        out = list(ctx.capacity_suggestions)
        if old:  # the re-estimated list knows no torch release: drop what that PyTorch does not have
            out = [s for s in out if "expandable_segments" not in f"{s.title} {s.setting or ''}"]
        return out
    out = [Suggestion(title, cost) for title, cost in GENERIC_CAPACITY]
    if ctx.expandable_segments is not True and not old:
        out.insert(0, _expandable_suggestions(ctx)[0])
    return out


OVERSIZE_ADVICE = (
    Suggestion("find the operation in the traceback's last frames and print the shapes that feed it (a mask or "
               "attention matrix built from a wrong shape, a sequence length or batch read wrong, a vocabulary "
               "mismatch)", "none"),
)


def _oversized(ev: OomEvent, who: str, when: str, stage: int | None) -> Diagnosis | None:
    req, cap = ev.requested_bytes, ev.capacity_bytes
    if not (ev.exceeds_limit or (req is not None and cap and req > cap)):
        return None
    asked = "more than 1 EB" if ev.exceeds_limit else gib(req)
    on = f" on a GPU of {gib(cap)} total" if cap else ""
    times = f" ({req / cap:,.0f}x the device)" if req and cap and req >= 2 * cap else ""
    msg = (f"oversized request: {who}{when} asked for {asked} in one allocation{on}{times}. No memory setting makes "
           "an allocation larger than the whole GPU fit: it is a shape or data bug (a tensor built from a wrong "
           "shape), not memory pressure; no memory tuning applies")
    return Diagnosis("oversized-request", ev.where, msg, [], list(OVERSIZE_ADVICE), ev, stage,
                     details={"requested_bytes": req, "capacity_bytes": cap, "exceeds_limit": ev.exceeds_limit})


OTHER_PROCESS_SHARE = 0.05  # other processes' memory counts as the pressure from this share of the GPU up


def other_processes_pressure(ev: OomEvent) -> bool:
    """The request would have fit without what other processes hold, and they hold a real share of the GPU."""
    others, req, cap = ev.other_processes_bytes or 0, ev.requested_bytes, ev.capacity_bytes
    if not others or req is None or not cap:
        return False
    shortfall = req - (ev.free_bytes or 0)
    return others >= shortfall and others >= OTHER_PROCESS_SHARE * cap


def _other_processes_text(ev: OomEvent) -> str:
    pids = [str(p["pid"]) for p in ev.processes if not p.get("self") and p.get("pid") is not None]
    return (f"other processes hold {gib(ev.other_processes_bytes)} on this GPU"
            + (f" (PID {', '.join(pids[:4])}{', ...' if len(pids) > 4 else ''})" if pids else ""))


def _stage_peaks(scan: ScanResult, layout: Layout) -> dict[int, int]:
    """Measured peak (max reserved, else max allocated) per stage from the memory reports."""
    out: dict[int, int] = {}
    for rank, rep in scan.peak_reports().items():
        stage = layout.stage_of(rank)
        peak = rep.max_reserved_bytes or rep.max_allocated_bytes
        if stage is None or peak is None:
            continue
        out[stage] = max(out.get(stage, 0), peak)
    return out


def _imbalance(ev: OomEvent, ctx: RunContext, oom_ranks: set[int],
               peaks: dict[int, int]) -> tuple[int | None, str] | None:
    """(stage, why) when this rank's stage peaks well above the others that keep headroom."""
    layout = ctx.layout
    cap = ev.capacity_bytes
    if layout is None or not layout.known or layout.pp < 2 or cap is None:
        return None
    stage = layout.stage_of(ev.where.rank)
    if stage is None:
        return None
    oom_stages = {layout.stage_of(r) for r in oom_ranks}
    if len(oom_stages) > 1:
        return None  # several stages ran out: the whole job is short of memory
    own = max(peaks.get(stage, 0), (ev.allocated_bytes or 0) + (ev.requested_bytes or 0))
    others = {s: p for s, p in peaks.items() if s != stage}
    if others:
        worst = max(others.values())
        if own >= IMBALANCE_RATIO * worst and worst <= (1 - HEADROOM_FRACTION) * cap:
            return stage, (f"stage {stage} needed at least {gib(own)} while the other measured stages peaked at "
                           f"{gib(worst)} or less (max reserved)")
    est = ctx.estimate
    if est is not None and len(est.stages) > 1:
        by = {s.pp_rank: estimated_allocated(s) for s in est.stages}
        mine = by.get(stage)
        rest = [v for k, v in by.items() if k != stage]
        if mine and rest and mine >= IMBALANCE_RATIO * max(rest) and max(rest) <= (1 - HEADROOM_FRACTION) * cap:
            return stage, (f"the estimate puts stage {stage} at {gib(mine)} allocated against at most {gib(max(rest))} "
                           f"on the other stages")
    return None


def _why_stage(stage: int, ctx: RunContext) -> tuple[str, list[Suggestion]]:
    pp = ctx.layout.pp if ctx.layout else None
    est = ctx.estimate
    why = ""
    if est is not None:
        heavy = est.stage(stage)
        others = [s for s in est.stages if s.pp_rank != stage]
        if heavy is not None and others:
            diffs = []
            for c in heavy.components:
                other = max((next((o.bytes for o in s.components if o.name == c.name), 0) for s in others), default=0)
                if c.bytes - other > 0.02 * max(1, heavy.total_bytes):
                    diffs.append((c.bytes - other, c.name))
            diffs.sort(reverse=True)
            if diffs:
                why = "; the estimate's extra on this stage: " + ", ".join(f"{n} +{gib(d)}" for d, n in diffs[:3])
    if stage == 0:
        reason = ("the first stage holds the embedding and, in the 1F1B schedule, the activations of the most "
                  "in-flight microbatches (PP of them)")
        sugg = [Suggestion("move layers off the first stage: model.num_layers_in_first_pipeline_stage (fewer layers), "
                           "or model.account_for_embedding_in_pipeline_split=True", "none (same total work)"),
                Suggestion("a pipeline_model_parallel_layout that gives stage 0 fewer layers", "none")]
    elif pp is not None and stage == pp - 1:
        reason = "the last stage holds the output layer, the fp32 logits and the cross-entropy"
        sugg = [Suggestion("model.account_for_loss_in_pipeline_split=True, or fewer layers via "
                           "model.num_layers_in_last_pipeline_stage", "none (same total work)")]
    else:
        reason = "a middle stage holds more layers or heavier layers (MoE / MTP) than the others"
        sugg = [Suggestion("balance the layers with model.pipeline_model_parallel_layout", "none")]
    return reason + why, sugg


def classify_oom(ev: OomEvent, scan: ScanResult, ctx: RunContext, oom_ranks: set[int],
                 stage_peaks: dict[int, int]) -> Diagnosis:
    """``oom_ranks``: every rank that ran out of memory; ``stage_peaks``: the measured peak per stage."""
    w = ev.where
    who, when = _rank_text(w), _when(w)
    stage = ctx.layout.stage_of(w.rank) if ctx.layout is not None else None
    oversized = _oversized(ev, who, when, stage)
    if oversized is not None:
        return oversized
    if not ev.has_figures:
        if ev.truncated or ev.format in ALLOCATOR_FORMATS:
            have = [f"{name} {gib(v)}" for name, v in (("requested", ev.requested_bytes), ("capacity", ev.capacity_bytes),
                                                        ("free", ev.free_bytes), ("allocated", ev.allocated_bytes))
                    if v is not None]
            why = ("cut off before the allocated and reserved figures (the log line was truncated)" if ev.truncated
                   else "has figures that are not sizes (unreadable numbers)")
            msg = (f"{who} ran out of memory{when} in PyTorch's caching allocator, but the message {why}; it has: "
                   f"{', '.join(have) or 'none'}"
                   ". Missing: the allocated and reserved sizes that tell fragmentation from capacity. Look for the "
                   "full message of the same rank (stderr, another log) or keep Megatron's memory report in the log")
            return Diagnosis("unknown", w, msg, [], [], ev, stage)
        if ev.format == "memory-fraction":
            msg = (f"{who} ran out of memory{when}: a request of {gib(ev.requested_bytes)} exceeded the process's "
                   "memory fraction (torch.cuda.set_per_process_memory_fraction / per_process_memory_fraction); the "
                   "message carries no other figures")
        else:
            msg = (f"{who} ran out of memory{when} outside PyTorch's caching allocator (NCCL buffers, Triton, cuBLAS "
                   "workspaces or a raw cudaMalloc): the message carries no allocator figures. Missing: the requested, "
                   "allocated and reserved sizes. Look for a 'CUDA out of memory. Tried to allocate' message of the same "
                   "rank, or keep Megatron's memory report in the log (it prints after the first iterations)")
        return Diagnosis("unknown", w, msg, [], [], ev, stage)
    req, alloc, unalloc = ev.requested_bytes, ev.allocated_bytes, ev.reserved_unallocated_bytes or 0
    cap, free = ev.capacity_bytes, ev.free_bytes
    figures = (f"asked for {gib(req)} with {gib(alloc)} allocated by tensors, {gib(unalloc)} reserved but "
               f"unallocated and {gib(free)} free of {gib(cap)}")
    others = ""
    if ev.other_processes_bytes:
        others = f"; {_other_processes_text(ev)} (it is shared)"
    elif ev.process_bytes and alloc is not None:
        outside = ev.process_bytes - alloc - unalloc
        if outside > 0:
            others = f"; {gib(outside)} of this process is outside the allocator (CUDA context, NCCL, workspaces)"
    retries = [r.alloc_retries for r in scan.reports if r.where.rank == w.rank and r.alloc_retries]
    if retries:
        others += f"; Bridge's memory report counted {max(retries)} cudaMalloc retries on this rank (a fragmentation sign)"
    if ev.truncated:
        others += "; the message is cut off after these figures"
    if other_processes_pressure(ev):
        shortfall = (req or 0) - (free or 0)
        msg = (f"other processes: {who}{when} {figures}; {_other_processes_text(ev)}, more than the {gib(shortfall)} the "
               "request lacked: without them it would have fit. Free that memory first (a co-located inference "
               "engine's share, a process of an earlier run still holding the GPU), before any allocator or model change")
        sugg = [Suggestion("find the processes on this GPU (nvidia-smi --query-compute-apps=pid,used_memory "
                           "--format=csv on the node) and stop the stale ones, or lower a co-located engine's memory "
                           "share", "none for this job")]
        if is_fragmentation(ev):
            sugg += _expandable_suggestions(ctx, ev)[:1]
        return Diagnosis("other-processes", w, msg, [], sugg, ev, stage,
                         details={"other_processes_bytes": ev.other_processes_bytes,
                                  "processes": [dict(p) for p in ev.processes]})
    if is_fragmentation(ev):
        if ctx.expandable_segments is True:
            msg = (f"{who}{when} {figures}: the request fits in the unallocated reserve, but expandable segments "
                   f"were already on, so live blocks pin it{others}. Treat it as capacity: free memory at this peak")
            return Diagnosis("capacity", w, msg, [CAPACITY_CODE], _capacity_suggestions(ctx, ev), ev, stage)
        if _old_torch(ev):
            msg = (f"fragmentation: {who}{when} {figures}{others}. The memory existed but not in one piece. This "
                   "message format is torch <= 2.0's, which has no expandable_segments (added in torch 2.1): set "
                   "max_split_size_mb, as the message itself advises, or upgrade to use expandable segments")
            return Diagnosis("fragmentation", w, msg, [], _expandable_suggestions(ctx, ev), ev, stage)
        msg = (f"fragmentation: {who}{when} {figures}{others}. The memory existed but not in one piece: set "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True first (no throughput cost), before any model change")
        return Diagnosis("fragmentation", w, msg, [EXPANDABLE_CODE], _expandable_suggestions(ctx, ev), ev, stage)
    imbalance = _imbalance(ev, ctx, oom_ranks, stage_peaks)
    if imbalance is not None:
        st, evidence = imbalance
        reason, sugg = _why_stage(st if st is not None else -1, ctx)
        msg = (f"one-stage imbalance: {who} (pipeline stage {st}){when} {figures}{others}; {evidence}. Why: {reason}")
        return Diagnosis("imbalance", w, msg, [CAPACITY_CODE], sugg + _capacity_suggestions(ctx, ev)[:2], ev, st)
    share = f" ({alloc / cap * 100:.0f}% of the GPU)" if alloc is not None and cap else ""
    msg = f"capacity: {who}{when} {figures}{share}{others}: the live tensors do not fit"
    if ctx.estimate is not None and stage is not None:
        st_est = ctx.estimate.stage(stage)
        if st_est is not None:
            msg += f"; the estimate for stage {stage} is {gib(estimated_allocated(st_est))} allocated"
    if ctx.capacity_suggestions is None:
        msg += ". Give --recipe FILE::FUNCTION to rank the changes by re-estimated saving"
    return Diagnosis("capacity", w, msg, [CAPACITY_CODE], _capacity_suggestions(ctx, ev), ev, stage)


def classify_known(ev: KnownErrorEvent) -> Diagnosis:
    from mbmem_lint.check.registry import get_rule

    parts = []
    sugg = []
    for code in ev.error.codes:
        rule = get_rule(code)
        if rule is None:
            continue
        parts.append(f"{code} {rule.name}: {rule.summary}")
        if rule.fix_description:
            sugg.append(Suggestion(f"{code}: {rule.fix_description}", "", setting=None))
    source = ev.error.ref + (f" at {ev.error.tag}" if ev.error.tag else "")
    numbers = ", ".join(f"{k}={v}" for k, v in ev.values.items())
    found = ev.error.pattern.search(ev.text)
    said = found.group(0).strip() if found else ev.error.text.strip()
    msg = (f"{_rank_text(ev.where)} failed{_when(ev.where)} with a known error ({source}): "
           f"{said}" + (f" (read back: {numbers})" if numbers else "")
           + ". `mbmem-lint check` reports it before launch as " + "; ".join(parts))
    return Diagnosis("known-error", ev.where, msg, list(ev.error.codes), sugg, None, None,
                     details={"values": dict(ev.values), "source": ev.error.ref, "source_release": ev.error.tag},
                     ranks=[ev.where.rank] if ev.where.rank is not None else [])


def diagnose(scan: ScanResult, ctx: RunContext) -> list[Diagnosis]:
    """One diagnosis per OOM event (per rank and message), per known failure, per communication / CUDA failure
    (ranks folded together) and, when nothing else explains the end, per unrecognised fatal end; by file and line."""
    oom_ranks = scan.oom_ranks()
    peaks = _stage_peaks(scan, ctx.layout) if ctx.layout is not None and ctx.layout.known else {}
    from mbmem_lint.diagnose.classify_failures import classify_failures

    out = [classify_oom(o, scan, ctx, oom_ranks, peaks) for o in scan.ooms]
    out += [classify_known(k) for k in scan.known]
    out += classify_failures(scan, bool(out))
    return sorted(out, key=lambda d: (d.where.file, d.where.line, d.cls))
