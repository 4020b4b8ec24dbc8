"""What a plan returns (the JSON contract lives in :meth:`PlanResult.to_json`; docs/json-schema/plan.json)."""

from __future__ import annotations

from typing import Any

from mbmem_lint.estimate.gpus import GpuSpec
from mbmem_lint.estimate.types import Estimate
from mbmem_lint.plan.cost import Terms
from mbmem_lint.plan.knobs import Spec
from mbmem_lint.records import dataclass, field


@dataclass
class PlanOptions:
    """What to plan for: target (default: the recipe's), pinned knobs, how many candidates, the user's own
    ``--set`` items (applied under every candidate) and the search's evaluation budget."""

    gpu: str | None = None
    world_size: int | None = None
    keep: frozenset[str] = frozenset()
    top: int = 5
    set_items: tuple[str, ...] = ()
    max_evaluations: int = 400
    with_diff: bool = True


def budget_bytes(gpu: GpuSpec, margin: float) -> int:
    """The per-rank peak a candidate may reach: usable memory less the headroom margin."""
    return int(gpu.usable_bytes * (1 - margin))


def stages_json(est: Estimate) -> list[dict[str, Any]]:
    return [{"pp_rank": s.pp_rank, "layers": s.layers, "total_bytes": s.total_bytes,
             "allocated_bytes": s.allocated_bytes} for s in est.stages]


@dataclass
class PlanCandidate:
    """One way to make the recipe fit: the ``--set`` changes, the re-resolved recipe's estimate, the
    modelled step time (terms relative to the current recipe's) and the display-only diff."""

    rank: int
    title: str
    spec: Spec
    changes: dict[str, Any]
    estimate: Estimate
    fits: bool
    terms: Terms
    relative_step_time: float
    relative_terms: dict[str, float]
    set_args: list[str]
    unmeasured: list[str] = field(default_factory=list)  # changed terms no measurement calibrates
    diff: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "title": self.title,
            "changes": dict(self.changes),
            "set_args": list(self.set_args),
            "peak_bytes": self.estimate.peak_bytes,
            "allocated_peak_bytes": self.estimate.allocated_peak_bytes,
            "peak_stage": self.estimate.peak_stage,
            "fits": self.fits,
            "parallelism": dict(self.estimate.parallelism),
            "stages": stages_json(self.estimate),
            "cost": {
                "relative_step_time": round(self.relative_step_time, 4),
                "terms": {k: round(v, 4) for k, v in self.relative_terms.items()},
                "step_time_s": round(self.terms.total, 4),
                "microbatches": self.terms.microbatches,
                "slowest_stage": self.terms.slowest_stage,
                "unmeasured_terms": list(self.unmeasured),
            },
            "diff": self.diff,
        }


@dataclass
class PlanStats:
    """How the search went: layouts considered and pruned, configurations evaluated, why others were
    rejected, and whether the evaluation budget ran out."""

    layouts: int = 0
    layouts_pruned: int = 0
    evaluated: int = 0
    predicted_over: int = 0  # nodes skipped: their predicted peak was over budget
    constraint_rejects: dict[str, int] = field(default_factory=dict)
    rule_rejects: dict[str, int] = field(default_factory=dict)
    exhausted: bool = False
    seconds: float = 0.0
    best_corner_bytes: int | None = None  # smallest peak of any layout's most memory-saving setting
    best_corner: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"layouts": self.layouts, "layouts_pruned": self.layouts_pruned, "evaluated": self.evaluated,
                "predicted_over_budget": self.predicted_over,
                "constraint_rejects": dict(sorted(self.constraint_rejects.items())),
                "rule_rejects": dict(sorted(self.rule_rejects.items())), "exhausted": self.exhausted}


@dataclass
class PlanResult:
    """The plan of one recipe: the current estimate and cost, the ranked candidates (cheapest first), and
    when there is none, why."""

    recipe: str
    gpu: GpuSpec
    world_size: int | None
    headroom_margin: float
    current: Estimate
    current_terms: Terms
    candidates: list[PlanCandidate]
    explanation: str | None = None
    pinned: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    stats: PlanStats = field(default_factory=PlanStats)

    @property
    def budget_bytes(self) -> int:
        return budget_bytes(self.gpu, self.headroom_margin)

    @property
    def current_fits(self) -> bool:
        return self.current.peak_bytes <= self.budget_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "gpu": {"name": self.gpu.name, "capacity_bytes": self.gpu.capacity_bytes,
                    "usable_bytes": self.gpu.usable_bytes},
            "world_size": self.world_size,
            "headroom_margin": self.headroom_margin,
            "budget_bytes": self.budget_bytes,
            "current": {
                "peak_bytes": self.current.peak_bytes,
                "allocated_peak_bytes": self.current.allocated_peak_bytes,
                "fits": self.current_fits,
                "parallelism": dict(self.current.parallelism),
                "stages": stages_json(self.current),
                "cost": {"step_time_s": round(self.current_terms.total, 4),
                         "terms_s": {k: round(v, 4) for k, v in self.current_terms.seconds.items()}},
            },
            "candidates": [c.to_json() for c in self.candidates],
            "explanation": self.explanation,
            "pinned": dict(self.pinned),
            "notes": list(self.notes),
            "search": self.stats.to_json(),
        }
