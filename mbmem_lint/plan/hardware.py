"""Compute and interconnect figures of each catalog GPU, and the cost model's calibration constants
(``mbmem_lint/data/interconnect.json``, loaded once)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from mbmem_lint.data import data_file
from mbmem_lint.records import dataclass

GB = 1e9


@dataclass(frozen=True)
class Hardware:
    """One GPU's dense tensor throughput (FLOP/s), memory and link bandwidths (bytes/s per direction) and
    the size of its NVLink domain (the GPUs that reach each other without the scale-out network)."""

    name: str
    bf16_flops: float
    fp8_flops: float
    hbm_bps: float
    nvlink_bps: float
    nvlink_domain: int
    network_bps: float
    host_bps: float
    source: str

    def group_bps(self, span: int) -> float:
        """Bandwidth of a communication group whose ranks span ``span`` consecutive ranks: NVLink when the
        span fits in one NVLink domain (Megatron places TP innermost, then CP, EP/DP, and PP outermost), else
        the scale-out network."""
        return self.nvlink_bps if span <= self.nvlink_domain else self.network_bps


@dataclass(frozen=True)
class Calibration:
    """Constants of the cost model fitted on measured step times (``bench/plan_calibration.py``), plus two
    assumptions that no measurement pins down (see ``interconnect.json``)."""

    gemm_efficiency: float  # achieved fraction of the dense tensor peak
    tp_exposure: float  # TP collective time = exposure x bytes / link bandwidth
    tp_hidden: float  # with TP overlap: fraction of a block's GEMM time its collectives can hide under
    regather_exposure: float  # LoRA re-gather all-gathers (backward)
    ep_exposure: float
    cpu_adam_params_per_s: float


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(data_file("interconnect.json").read_text(encoding="utf-8"))
    return data


def hardware(gpu_name: str) -> Hardware:
    """The figures of catalog GPU ``gpu_name`` (a canonical name of ``gpus.json``); GPUs the table lacks
    get H100's figures (the cost model is relative: the ratios between terms are what matter)."""
    gpus = _load()["gpus"]
    g = gpus.get(gpu_name) or gpus["h100-80gb"]
    return Hardware(
        name=gpu_name, bf16_flops=g["bf16_tflops"] * 1e12, fp8_flops=g["fp8_tflops"] * 1e12,
        hbm_bps=g["hbm_gbps"] * GB, nvlink_bps=g["nvlink_gbps"] * GB, nvlink_domain=int(g["nvlink_domain"]),
        network_bps=g["network_gbps"] * GB, host_bps=g["host_gbps"] * GB, source=str(g["source"]),
    )


def calibration() -> Calibration:
    c = _load()["calibration"]
    return Calibration(
        gemm_efficiency=float(c["gemm_efficiency"]), tp_exposure=float(c["tp_exposure"]),
        tp_hidden=float(c.get("tp_hidden", 0.0)),
        regather_exposure=float(c["regather_exposure"]),
        ep_exposure=float(c["ep_exposure"]), cpu_adam_params_per_s=float(c["cpu_adam_params_per_s"]),
    )
