"""Per-rank GPU memory estimate per pipeline stage against the target GPU."""

from mbmem_lint.estimate.api import estimate_recipe, estimate_values
from mbmem_lint.estimate.gpus import GpuSpec, UnknownGpuError, resolve_gpu
from mbmem_lint.estimate.types import Component, Estimate, EstimateUnavailable, StageEstimate

__all__ = ["estimate_recipe", "estimate_values", "GpuSpec", "UnknownGpuError", "resolve_gpu", "Component",
           "Estimate", "EstimateUnavailable", "StageEstimate"]
