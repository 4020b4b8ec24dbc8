"""Result types of the estimator (the JSON contract lives in :meth:`Estimate.to_json`)."""

from __future__ import annotations

from typing import Any

from mbmem_lint.estimate.gpus import GpuSpec
from mbmem_lint.records import dataclass, field

# Component kinds. "state", "activation" and "workspace" live in PyTorch's caching allocator at the step's peak
# (they are what ``torch.cuda.max_memory_allocated`` and Megatron's "max allocated" report); "runtime" is outside
# it (CUDA context, NCCL buffers); "reserve" is memory the allocator reserves but does not count as allocated at
# that peak (the fragmentation allowance, CUDA-graph private pools after capture).
ALLOCATED_KINDS = ("state", "activation", "workspace")
# The "reserve" that is a risk allowance rather than memory held for sure (the capacity rules treat it apart).
FRAGMENTATION_RESERVE = "allocator fragmentation reserve"


class EstimateUnavailable(Exception):
    """The recipe lacks a value the estimate cannot do without (e.g. the model shape)."""

    def __init__(self, reason: str, missing_fields: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing_fields = missing_fields


@dataclass
class Component:
    """One named part of a stage's per-rank memory (weights, activations, NCCL buffers, ...): bytes, the
    config paths that drive it and its kind."""

    name: str
    bytes: int
    fields: list[str]
    kind: str = "state"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": int(self.bytes), "fields": list(self.fields), "kind": self.kind}


@dataclass
class StageEstimate:
    """The per-rank memory of one pipeline stage, as components."""

    pp_rank: int
    components: list[Component]
    layers: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes for c in self.components)

    @property
    def allocated_bytes(self) -> int:
        """Bytes PyTorch would report as max allocated (no context, NCCL or fragmentation)."""
        return sum(c.bytes for c in self.components if c.kind in ALLOCATED_KINDS)

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "pp_rank": self.pp_rank,
            "components": [c.to_json() for c in self.components],
            "total_bytes": self.total_bytes,
            "allocated_bytes": self.allocated_bytes,
        }


@dataclass
class Estimate:
    """The per-rank memory estimate of one recipe on a target GPU: one :class:`StageEstimate` per pipeline
    stage, the peak and the headroom, and the assumptions made."""

    recipe: str  # "<path>::<function>"
    gpu: GpuSpec
    world_size: int | None
    parallelism: dict[str, int | None]
    stages: list[StageEstimate]
    assumptions: list[str] = field(default_factory=list)
    # The estimator's measured error band for this kind of model (bench/estimate_validation.py):
    # model_kind names the validation rows it comes from.
    model_kind: str = "dense"
    uncertainty: float = 0.10

    @property
    def peak(self) -> StageEstimate:
        """The stage whose ranks need the most memory."""
        return max(self.stages, key=lambda s: s.total_bytes)

    @property
    def peak_stage(self) -> int:
        return self.peak.pp_rank

    def stage(self, pp_rank: int) -> StageEstimate | None:
        return next((s for s in self.stages if s.pp_rank == pp_rank), None)

    @property
    def peak_bytes(self) -> int:
        """Everything the peak stage's GPU must hold: allocations, CUDA context and NCCL, and reserves."""
        return max(s.total_bytes for s in self.stages)

    @property
    def allocated_peak_bytes(self) -> int:
        """The largest per-stage allocator total: what ``torch.cuda.max_memory_allocated`` (Megatron's
        "max allocated") reports on that stage's ranks."""
        return max(s.allocated_bytes for s in self.stages)

    @property
    def allocated_peak_stage(self) -> int:
        return max(self.stages, key=lambda s: s.allocated_bytes).pp_rank

    @property
    def headroom_bytes(self) -> int:
        return self.gpu.usable_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.headroom_bytes >= 0

    def has_headroom(self, margin: float) -> bool:
        """The peak stage leaves at least ``margin`` of the usable memory: no capacity finding (MBM701/MBM702)."""
        return self.headroom_bytes >= margin * self.gpu.usable_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "gpu": {
                "name": self.gpu.name,
                "capacity_bytes": self.gpu.capacity_bytes,
                "usable_bytes": self.gpu.usable_bytes,
            },
            "world_size": self.world_size,
            "parallelism": dict(self.parallelism),
            "stages": [s.to_json() for s in self.stages],
            "peak_bytes": self.peak_bytes,
            "allocated_peak_bytes": self.allocated_peak_bytes,
            "allocated_peak_stage": self.allocated_peak_stage,
            "peak_stage": self.peak_stage,
            "fits": self.fits,
            "headroom_bytes": self.headroom_bytes,
            "uncertainty": {"model_kind": self.model_kind, "fraction": self.uncertainty},
            "assumptions": list(self.assumptions),
        }
