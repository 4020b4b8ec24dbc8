"""Failure messages of Megatron Core / Bridge that a rule of the catalog would have caught before launch.

Each entry: the message as the source raises it (``ref`` is where: in the megatron-core 0.19.2 /
megatron-bridge 0.6.2 wheels when ``tag`` is None, else in the public repository and release ``tag``
names: older wordings, Transformer Engine; ``tests/test_diagnose.py`` checks both), a pattern that finds
it in a log line (its named groups are the numbers the message holds, read back into the diagnosis), and
the rule codes whose finding and fix apply.
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
    tag: str | None = None  # "REPO@TAG" (``Megatron-LM@core_v0.10.0``): where ``ref`` is, when not in the wheels
    needle: str = ""  # a literal every matching line holds (``text`` unless that has source placeholders)

    def values(self, text: str) -> dict[str, int]:
        """The numbers the message holds (the pattern's named groups), as integers."""
        from mbmem_lint.diagnose.formats import bounded_int

        m = self.pattern.search(text)
        if m is None:
            return {}
        out = {k: bounded_int(v) for k, v in m.groupdict().items() if v is not None}
        return {k: v for k, v in out.items() if v is not None}


def _entry(text: str, ref: str, *codes: str, pattern: str | None = None, tag: str | None = None,
           needle: str | None = None) -> KnownError:
    return KnownError(text, ref, codes, re.compile(pattern if pattern is not None else re.escape(text)), tag,
                      needle if needle is not None else text.strip())


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
    # Parallel layout (MBM1xx), every wording of the releases: the numbers are read back.
    _entry("is not divisible by total_model_size (",
           "megatron/bridge/training/config.py:1025", "MBM101",
           pattern=r"world size \((?P<world_size>\d+)\) is not divisible by total_model_size \("
                   r"(?:model_cfg\.tensor_model_parallel_size=(?P<tensor_model_parallel_size>\d+) \* "
                   r"model_cfg\.pipeline_model_parallel_size=(?P<pipeline_model_parallel_size>\d+) \* "
                   r"model_cfg\.context_parallel_size=(?P<context_parallel_size>\d+))?"),
    _entry("is not divisible by expert_tensor_model_pipeline_parallel size (",
           "megatron/core/parallel_state.py:883", "MBM101",
           pattern=r"(?<!decoder )world_size \((?P<world_size>\d+)\) is not divisible by "
                   r"expert_tensor_model_pipeline_parallel size \((?P<expert_tensor_model_pipeline_parallel_size>\d+)\)"),
    _entry("decoder world_size ({decoder_world_size}) is not divisible by expert_tensor_model_pipeline_parallel size",
           "megatron/core/parallel_state.py:651", "MBM101", tag="Megatron-LM@core_v0.10.0", needle="is not divisible by",
           pattern=r"decoder world_size \((?P<world_size>\d+)\) is not divisible by "
                   r"expert_tensor_model_pipeline_parallel size \((?P<expert_tensor_model_pipeline_parallel_size>\d+)\)"),
    _entry("is not divisible by tensor_model_parallel_size ",
           "megatron/core/parallel_state.py:433", "MBM101", tag="Megatron-LM@core_v0.8.0",
           pattern=r"world_size \((?P<world_size>\d+)\) is not divisible by tensor_model_parallel_size "
                   r"\((?P<tensor_model_parallel_size>\d+)\) x pipeline_model_parallel_size "
                   r"\((?P<pipeline_model_parallel_size>\d+)\)(?: x context_parallel_size \((?P<context_parallel_size>\d+)\))?"),
    _entry("is not divisible by expert_model_parallel_size ",
           "megatron/core/parallel_state.py:444", "MBM101", tag="Megatron-LM@core_v0.8.0", needle="is not divisible by",
           pattern=r"data_parallel_size \((?P<data_parallel_size>\d+)\) is not divisible by expert_model_parallel_size"
                   r"(?! \()"),
    _entry("is not divisible by ",
           "megatron/core/parallel_state.py:823", "MBM101",
           pattern=r"world_size \((?P<world_size>\d+)\) is not divisible by (?P<model_size>\d+)"),
    _entry("must be a multiple of ",
           "megatron/core/transformer/transformer_config.py:1325", "MBM102",
           pattern=r"num_attention_heads \((?P<num_attention_heads>\d+)\) must be a multiple of "
                   r"tensor_model_parallel_size \((?P<tensor_model_parallel_size>\d+)\)"),
    _entry("must be a multiple or divisor of ",
           "megatron/core/transformer/transformer_config.py:1343", "MBM102",
           pattern=r"num_query_groups \((?P<num_query_groups>\d+)\) must be a multiple or divisor of "
                   r"tensor_model_parallel_size \((?P<tensor_model_parallel_size>\d+)\)"),
    _entry("should be divisible by {config.pipeline_model_parallel_size=}",
           "megatron/core/transformer/transformer_block.py:152", "MBM103", needle="should be divisible by",
           pattern=r"num_layers=(?P<num_layers>\d+) should be divisible by "
                   r"config\.pipeline_model_parallel_size=(?P<pipeline_model_parallel_size>\d+)"),
    # Start-up misconfigurations Transformer Engine reports (the same text in TE v2.4 :589 to HEAD :823): Megatron
    # passes cpu_offloading_activations / cpu_offloading_weights through to get_cpu_offload_context.
    _entry("mentioned what to offload (weights/activations)",
           "transformer_engine/pytorch/cpu_offload.py:689", "MBM206", tag="TransformerEngine@v2.8",
           pattern=r"CPU Offloading is enabled while it is not mentioned what to offload \(weights/activations\)"),
)


# One search for all of them (named groups dropped: several patterns read the same number).
_ANY = re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[a-z_]+>', '(?:', e.pattern.pattern)})" for e in KNOWN_ERRORS))


# Literal pieces every matching line holds, and short words that one of them is in (``tests/test_diagnose_failures.py``
# checks the cover): nine substring tests reject almost every line of a log before any regex runs.
_NEEDLES = tuple(dict.fromkeys(e.needle for e in KNOWN_ERRORS))
TRIGGERS = ("offload", "recompute", "NCCL_GRAPH", "expandable_segments", "RNG tracker", "check_for_nan", "FSDP",
            "divisible", "multiple")


def match_known_error(text: str) -> KnownError | None:
    """The known failure a log line shows, if any (trigger words first, then one combined search: most lines
    hold none)."""
    for word in TRIGGERS:
        if word in text:
            break
    else:
        return None
    if _ANY.search(text) is None:
        return None
    return next((e for e in KNOWN_ERRORS if e.pattern.search(text)), None)
