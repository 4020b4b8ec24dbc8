"""Measured step-time changes the plan's cost model is calibrated on (bench/plan_calibration.py) and
checked against (tests/test_plan_cost.py).

Llama3-70B SFT, 32x H100, FP8 current scaling, TP4 PP4 VPP5, MBS 1, GBS 32, seq 4096, selective core_attn
recompute, TP overlap on (Megatron-Bridge perf recipe ``llama3_70b_sft_32gpu_h100_fp8cs_config``; numbers
from NVIDIA's nemo-mbridge-perf-memory-tuning skill and activation-recompute skill, evidence Megatron-Bridge
PR #3107): baseline ~704 TFLOP/s/GPU, TP8 508.7, PP8 668.0, mlp recompute 593.6, mlp+core_attn 586.8,
core_attn+layernorm ~702. LoRA input re-gather (Megatron-Bridge PR #4581): Qwen3-8B TP2 seq 8192 -6.74%,
Qwen3-30B-A3B TP4/EP4 -2.89%, GPT-OSS-120B TP2/EP8 -0.34% (world size, MBS and the MoE sequence length are
not stated: the estimate validation's assumptions, 8 GPUs, MBS 1, seq 8192, are reused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from estimate_cases import GPT_OSS_120B, LLAMA_SFT, QWEN3_8B, QWEN3_30B_A3B, _lora

from mbmem_lint.plan.cost import CostModel
from mbmem_lint.plan.current import read_current
from mbmem_lint.plan.hardware import Calibration, calibration, hardware
from mbmem_lint.plan.knobs import Recompute, Spec

LLAMA = {**LLAMA_SFT, "model.tp_comm_overlap": True, "ddp.overlap_grad_reduce": True,
         "ddp.overlap_param_gather": True}
BASELINE_TFLOPS = 704.0


def _time_ratio(tflops: float) -> float:
    """Step-time ratio to the baseline for a measured throughput (same work per step)."""
    return BASELINE_TFLOPS / tflops


@dataclass(frozen=True)
class Case:
    """A measured change: the base config, the change (on the base spec) and the measured step-time ratio."""

    name: str
    values: dict[str, Any]
    world_size: int
    change: Callable[[Spec], Spec]
    measured: float  # step time with the change / without
    fitted: bool  # used by the fit (else an out-of-sample check)


def _layout(**kw: Any) -> Callable[[Spec], Spec]:
    return lambda s: replace(s, layout=replace(s.layout, **kw))


def _recompute(*mods: str) -> Callable[[Spec], Spec]:
    return lambda s: s.with_setting(recompute=Recompute("selective", mods, None, None))


def _regather(s: Spec) -> Spec:
    return s.with_setting(regather=True)


CASES: list[Case] = [
    Case("llama3-70b TP4->TP8 (DP 2->1)", LLAMA, 32, _layout(tp=8), _time_ratio(508.7), True),
    Case("llama3-70b PP4->PP8 (DP 2->1)", LLAMA, 32, _layout(pp=8), _time_ratio(668.0), True),
    Case("llama3-70b recompute mlp", LLAMA, 32, _recompute("mlp"), _time_ratio(593.6), True),
    Case("llama3-70b recompute mlp+core_attn", LLAMA, 32, _recompute("mlp", "core_attn"), _time_ratio(586.8), True),
    Case("llama3-70b recompute core_attn+layernorm", LLAMA, 32, _recompute("core_attn", "layernorm"),
         _time_ratio(702.0), False),
    Case("qwen3-8b LoRA TP2 re-gather", {**_lora(QWEN3_8B, 2, 1, False)}, 8, _regather, 1 / (1 - 0.0674), True),
    Case("qwen3-30b-a3b LoRA TP4 EP4 re-gather", {**_lora(QWEN3_30B_A3B, 4, 4, False)}, 8, _regather,
         1 / (1 - 0.0289), False),
    Case("gpt-oss-120b LoRA TP2 EP8 re-gather", {**_lora(GPT_OSS_120B, 2, 8, False)}, 8, _regather,
         1 / (1 - 0.0034), False),
]


def cost_model(values: dict[str, Any], world_size: int, cal: Calibration | None = None,
               gpu: str = "h100-80gb") -> tuple[Spec, CostModel]:
    cur = read_current(values.get, world_size, model_class=None)
    cm = CostModel(cur.inp, hardware(gpu), cal or calibration(), cur.flags, world_size=world_size,
                   gbs=values.get("train.global_batch_size"))
    return cur.spec, cm


def modelled(case: Case, cal: Calibration | None = None) -> float:
    """The cost model's step-time ratio for ``case``."""
    spec, cm = cost_model(case.values, case.world_size, cal)
    return cm.terms(case.change(spec)).total / cm.terms(spec).total


def llama_megatron_flops_per_step() -> float:
    """Model FLOPs of one Llama3-70B step as Bridge's ``num_floating_point_operations`` counts them
    (training/utils/flop_utils.py: 3 x (2 x linear params + causal core attention + logits) per token)."""
    h, n, s, v, ffn, q, kv = 8192, 80, 4096, 128256, 28672, 8192, 1024
    per_token = 3 * (2 * n * (h * (q + 2 * kv) + q * h + 3 * h * ffn) + 2 * q * s * n + 2 * h * v)
    return per_token * 32 * s  # GBS 32 sequences


def llama_measured_step_s() -> float:
    return llama_megatron_flops_per_step() / (32 * BASELINE_TFLOPS * 1e12)


def llama_modelled_step_s(cal: Calibration | None = None) -> float:
    spec, cm = cost_model(LLAMA, 32, cal)
    return cm.terms(spec).total
