"""Measured per-stage peaks (Megatron memory reports) next to the estimate of each pipeline stage.

A rank's pipeline stage follows Megatron's rank order: ``tp-cp-ep-dp-pp`` by default (tensor-parallel
ranks vary fastest, pipeline stages slowest), ``tp-cp-ep-pp-dp`` with Bridge's
``dist.use_tp_pp_dp_mapping`` (``megatron/bridge/training/initialize.py:820``; the order is read by
``RankGenerator`` in ``megatron/core/parallel_state.py``).
"""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnose.scan import MemoryReport, ScanResult
from mbmem_lint.estimate.types import Estimate, StageEstimate
from mbmem_lint.records import dataclass, field


@dataclass
class Layout:
    """The parallel sizes needed to map a global rank to its pipeline stage."""

    world_size: int | None = None
    tp: int = 1
    pp: int = 1
    cp: int = 1
    tp_pp_dp: bool = False  # dist.use_tp_pp_dp_mapping
    source: str = ""  # where the sizes came from ("recipe", "log")

    def stage_of(self, rank: int | None) -> int | None:
        if rank is None or rank < 0:
            return None
        if self.pp == 1:
            return 0
        if self.tp_pp_dp:
            return (rank // (self.tp * self.cp)) % self.pp
        if not self.world_size or self.world_size % self.pp:
            return None
        return rank // (self.world_size // self.pp) if rank < self.world_size else None

    @property
    def known(self) -> bool:
        return self.pp == 1 or self.tp_pp_dp or bool(self.world_size)


def layout_from_estimate(est: Estimate, tp_pp_dp: bool = False) -> Layout:
    p = est.parallelism
    return Layout(est.world_size, p.get("tp") or 1, p.get("pp") or 1, p.get("cp") or 1, tp_pp_dp, "recipe")


def layout_from_log(scan: ScanResult, world_size: int | None = None) -> Layout | None:
    sizes = scan.parallel
    if "pipeline_model_parallel_size" not in sizes:
        return None
    return Layout(world_size or sizes.get("world_size"), sizes.get("tensor_model_parallel_size", 1),
                  sizes["pipeline_model_parallel_size"], sizes.get("context_parallel_size", 1), False, "log")


def estimated_allocated(stage: StageEstimate) -> int:
    """The estimate to hold against Megatron's "max allocated" (tensors only: no CUDA context, NCCL
    buffers or allocator reserve). The one place to switch to a dedicated allocator-peak figure."""
    return stage.allocated_bytes


@dataclass
class StageComparison:
    """One pipeline stage: the highest measured peak of its ranks against the estimate."""

    pp_rank: int
    ranks: list[int] = field(default_factory=list)
    measured_max_allocated_bytes: int | None = None
    measured_max_reserved_bytes: int | None = None
    estimated_allocated_bytes: int | None = None
    estimated_total_bytes: int | None = None
    oom: bool = False  # a rank of this stage ran out of memory: the measured peak is a lower bound

    @property
    def error(self) -> float | None:
        """(estimate - measured) / measured of the allocated peak; positive = the estimate is high."""
        m, e = self.measured_max_allocated_bytes, self.estimated_allocated_bytes
        if not m or e is None:
            return None
        return (e - m) / m

    def to_json(self) -> dict[str, Any]:
        return {"pp_rank": self.pp_rank, "ranks": list(self.ranks),
                "measured_max_allocated_bytes": self.measured_max_allocated_bytes,
                "measured_max_reserved_bytes": self.measured_max_reserved_bytes,
                "estimated_allocated_bytes": self.estimated_allocated_bytes,
                "estimated_total_bytes": self.estimated_total_bytes,
                "error": None if self.error is None else round(self.error, 4), "oom": self.oom}


def measured_by_stage(reports: dict[int, MemoryReport], layout: Layout) -> dict[int, StageComparison]:
    """Per stage, the highest max-allocated / max-reserved among its ranks' reports."""
    stages: dict[int, StageComparison] = {}
    for rank, rep in sorted(reports.items()):
        stage = layout.stage_of(rank)
        if stage is None:
            continue
        sc = stages.setdefault(stage, StageComparison(stage))
        sc.ranks.append(rank)
        if rep.max_allocated_bytes is not None:
            sc.measured_max_allocated_bytes = max(sc.measured_max_allocated_bytes or 0, rep.max_allocated_bytes)
        if rep.max_reserved_bytes is not None:
            sc.measured_max_reserved_bytes = max(sc.measured_max_reserved_bytes or 0, rep.max_reserved_bytes)
    return stages


def compare(scan: ScanResult, est: Estimate, layout: Layout, oom_ranks: set[int]) -> list[StageComparison]:
    """Every stage of the estimate, with the measured peaks of its ranks where the log has them."""
    measured = measured_by_stage(scan.peak_reports(), layout)
    out: list[StageComparison] = []
    for st in est.stages:
        sc = measured.get(st.pp_rank, StageComparison(st.pp_rank))
        sc.estimated_allocated_bytes = estimated_allocated(st)
        sc.estimated_total_bytes = st.total_bytes
        sc.oom = any(layout.stage_of(r) == st.pp_rank for r in oom_ranks)
        out.append(sc)
    return out
