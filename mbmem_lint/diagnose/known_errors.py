"""Failure messages of Megatron Core / Bridge that a rule of the catalog would have caught before launch.

Each entry: the message as the source raises it (``ref`` is where; megatron-core 0.19.2 /
megatron-bridge 0.6.2, checked against the wheels by ``tests/test_diagnose_formats.py``), a pattern
that finds it in a log line, and the rule codes whose finding and fix apply.
"""

from __future__ import annotations

import re

from mbmem_lint.records import dataclass


@dataclass(frozen=True)
class KnownError:
    """A failure message of Megatron Core / Bridge, where it is raised, and the rules that catch it."""

    text: str  # a literal part of the message, as in the source
    ref: str  # megatron/<pkg>/<file>.py:<line> of that literal
    codes: tuple[str, ...]
    pattern: re.Pattern[str]


def _entry(text: str, ref: str, *codes: str, pattern: str | None = None) -> KnownError:
    return KnownError(text, ref, codes, re.compile(pattern if pattern is not None else re.escape(text)))


KNOWN_ERRORS: tuple[KnownError, ...] = (
    _entry("Currently there is no support for Pipeline parallelism with CPU offloading",
           "megatron/core/transformer/transformer_config.py:1716", "MBM205"),
    _entry("CPU offloading does not work when activation recomputation is enabled",
           "megatron/core/transformer/transformer_config.py:1721", "MBM206"),
    _entry("fine_grained_activation_offloading cannot be enabled with cpu_offloading.",
           "megatron/core/transformer/transformer_config.py:1851", "MBM206"),
    _entry("CUDA graphs not supported with CPU offloading.",
           "megatron/core/transformer/transformer_config.py:2468", "MBM206"),
    _entry("full recompute is only supported with full iteration CUDA graph.",
           "megatron/core/transformer/transformer_config.py:2525", "MBM305"),
    _entry('recompute_method must be "block" or "uniform"',
           "megatron/core/transformer/transformer_config.py:1739", "MBM201", "MBM203"),
    _entry("recompute_num_layers must be None.",
           "megatron/core/transformer/transformer_config.py:1754", "MBM202"),
    _entry("Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access when using ",
           "megatron/core/transformer/cuda_graphs.py:2106", "MBM306"),
    _entry("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is currently not supported ",
           "megatron/core/distributed/distributed_data_parallel_config.py:259", "MBM307"),
    _entry("Transformer engine's RNG tracker is required for cudagraphs, it can be ",
           "megatron/bridge/models/gpt_provider.py:235", "MBM303"),
    _entry("check_for_nan_in_loss must be disabled when using full_iteration CUDA graph. ",
           "megatron/bridge/training/config.py:1372", "MBM304"),
    _entry("FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
           "megatron/bridge/training/config.py:1103", "MBM410"),
    _entry("Megatron-FSDP requires the fsdp_dtensor checkpointing format!",
           "megatron/bridge/training/config.py:1100", "MBM410"),
    _entry("Sequence length must be divisible by 2 * context parallel size if context parallel is used.",
           "megatron/bridge/training/config.py:1437", "MBM107"),
    _entry("is not divisible by total_model_size (",
           "megatron/bridge/training/config.py:1025", "MBM101",
           pattern=r"world size \(\d+\) is not divisible by total_model_size \("),
    _entry("is not divisible by ",
           "megatron/core/parallel_state.py:823", "MBM101",
           pattern=r"world_size \(\d+\) is not divisible by \d+"),
)


_ANY = re.compile("|".join(f"(?:{e.pattern.pattern})" for e in KNOWN_ERRORS))


def match_known_error(text: str) -> KnownError | None:
    """The known failure a log line shows, if any (one combined search first: most lines hold none)."""
    if _ANY.search(text) is None:
        return None
    return next((e for e in KNOWN_ERRORS if e.pattern.search(text)), None)
