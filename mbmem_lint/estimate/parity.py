"""Load Megatron Bridge's pure-formula ``theoretical_memory_utils`` from the corpus without torch/megatron.

Its only imports are ``torch.nn.functional as F`` (for ``F.silu`` identity checks),
``ConfigContainer`` (a type annotation) and ``calculate_padded_vocab_size``; all three are stubbed with
simple namespaces. Used by ``bench/estimate_validation.py`` and the parity tests (dev only).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

SILU = object()  # stands in for torch.nn.functional.silu


def _padded(vocab_size: int, divisible_by: int, tp: int, logging_enabled: bool = True) -> int:
    m = divisible_by * tp
    return -(-vocab_size // m) * m


def load_bridge_estimator(corpus: Path) -> Any:
    path = corpus / "megatron" / "bridge" / "training" / "utils" / "theoretical_memory_utils.py"
    stubs = {
        "torch": types.ModuleType("torch"),
        "torch.nn": types.ModuleType("torch.nn"),
        "torch.nn.functional": types.SimpleNamespace(silu=SILU),
        "megatron": types.ModuleType("megatron"),
        "megatron.bridge": types.ModuleType("megatron.bridge"),
        "megatron.bridge.training": types.ModuleType("megatron.bridge.training"),
        "megatron.bridge.training.config": types.SimpleNamespace(ConfigContainer=object),
        "megatron.bridge.utils": types.ModuleType("megatron.bridge.utils"),
        "megatron.bridge.utils.vocab_utils": types.SimpleNamespace(calculate_padded_vocab_size=_padded),
    }
    saved = {k: sys.modules.get(k) for k in stubs}
    try:
        sys.modules.update(stubs)  # type: ignore[arg-type]
        spec = importlib.util.spec_from_file_location("_mb_theoretical_memory_utils", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def bridge_config(values: dict[str, Any], data_parallel_size: int) -> Any:
    """A ``ConfigContainer`` look-alike for the Bridge estimator from flat ``model.*``/``train.*`` values."""
    model: dict[str, Any] = {
        "kv_channels": None, "num_query_groups": None, "gated_linear_unit": False, "activation_func": None,
        "num_moe_experts": None, "moe_layer_freq": 1, "mtp_num_layers": None, "share_embeddings_and_output_weights":
        True, "make_vocab_size_divisible_by": 128, "should_pad_vocab": False,
        "virtual_pipeline_model_parallel_size": None, "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
    }
    optimizer: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for k, v in values.items():
        sec, _, name = k.partition(".")
        {"model": model, "optimizer": optimizer, "train": train}.get(sec, {})[name] = v
    if model.get("gated_linear_unit"):
        model["activation_func"] = SILU
    if model.get("kv_channels") is None:
        model["kv_channels"] = model["hidden_size"] // model["num_attention_heads"]
    return types.SimpleNamespace(model=types.SimpleNamespace(**model),
                                 optimizer=types.SimpleNamespace(**optimizer),
                                 train=types.SimpleNamespace(**train), data_parallel_size=data_parallel_size)
