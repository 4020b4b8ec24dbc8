"""Measured peaks (seed-facts 2.1-2.2) and parity with Megatron Bridge's own model-state formulas."""

from __future__ import annotations

import pytest
from estimate_cases import MEASURED, PARITY, model_state_bytes

from mbmem_lint.estimate.api import estimate_values

GIB = 1024**3
GB = 1e9  # Bridge report_memory prints allocated_bytes.all.peak / 1.0e9 (training/utils/train_utils.py)


def _alloc(values: dict, ws: int) -> float:
    return max(s.allocated_bytes for s in estimate_values(values, world_size=ws).stages) / GB


@pytest.mark.parametrize("name,values,ws,measured", MEASURED, ids=[m[0] for m in MEASURED])
def test_measured_within_tolerance(name: str, values: dict, ws: int, measured: float) -> None:
    # Target is 10%; actual errors are reported in docs/estimate.md. This guards against regressions (35%);
    # measured values are Bridge's mem-max-allocated-gigabytes (1e9 B).
    err = abs(_alloc(values, ws) - measured) / measured
    assert err < 0.35, f"{name}: {err:.1%}"


def test_lora_regather_saving_qwen3_8b() -> None:
    # Re-gather keeps the sequence-local shard instead of the gathered input of the qkv and fc1 LoRA-A:
    # 2 targets x 2*s*h*(1 - 1/TP) bytes x 36 layers = 2 * 2*8192*4096*0.5 * 36 = 2.416e9 B per microbatch.
    # Measured 4.731 GB (seed-facts 2.2) is 1.96x that: the run most likely had 2 sequences per microbatch
    # (the source does not give MBS); see docs/estimate.md.
    (_, base, ws, _), (_, rg, _, _) = MEASURED[6], MEASURED[7]
    saving = (_alloc(base, ws) - _alloc(rg, ws)) * GB
    assert abs(saving - 2 * 2 * 8192 * 4096 * 0.5 * 36) < 1e6


@pytest.mark.corpus
@pytest.mark.parametrize("name,values,ws,dp", PARITY, ids=[p[0] for p in PARITY])
def test_parity_with_bridge(name: str, values: dict, ws: int, dp: int) -> None:
    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.estimate.parity import bridge_config, load_bridge_estimator

    mod = load_bridge_estimator(ensure_corpus())
    theirs = mod.estimate_training_memory(bridge_config(values, dp), include_activation=False)
    ours = model_state_bytes(values, ws)
    assert abs(ours - theirs.weight_and_optimizer_bytes) / theirs.weight_and_optimizer_bytes < 0.001
