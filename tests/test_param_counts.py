"""Self-check of every bundled architecture: the parameter count the estimator computes from the model table (the
same values a recipe resolves to) must match the size in the model's name: total within 3%, and for MoE models
the parameters active per token within 5%.

Names round. Where the model card states the exact count and the name rounds it past the tolerance, the card's
number is the reference (``PUBLISHED``, with its source); where a name rounds and no exact count is published,
the expected number is computed by hand here from the config (``HAND``). "Active" follows the convention of the
organisation that named the model: NVIDIA and OpenAI count the parameters a token multiplies with (everything
but the input embedding table), the others count the embedding table too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mbmem_lint.estimate.api import recipe_getter
from mbmem_lint.estimate.inputs import read_inputs
from mbmem_lint.estimate.kinds import param_counts
from mbmem_lint.estimate.params import embedding_params
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.hf_models import load_model_table
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

B = 1e9
# Size in the name: "8B", "0.6B", "235B-A22B", OLMoE's "1B-7B" (active-total).
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)B(?:-A(\d+(?:\.\d+)?)B)?(?![a-z])", re.I)
_OLMOE = re.compile(r"(\d+(?:\.\d+)?)B-(\d+(?:\.\d+)?)B")
NO_INPUT_EMBEDDING = ("nvidia/", "openai/")

# id -> (total, active or None, source): exact counts the cards state where the name rounds past the tolerance.
PUBLISHED: dict[str, tuple[float, float | None, str]] = {
    "LGAI-EXAONE/EXAONE-4.0-1.2B": (1.07 * B + 102400 * 2048, None,
                                    "model card: 1.07B without embeddings, + the tied 102400 x 2048 embedding"),
    "meta-llama/Llama-3.2-1B": (1.23 * B, None, "Llama 3.2 model card: 1.23B parameters"),
    "meta-llama/Llama-3.2-3B": (3.21 * B, None, "Llama 3.2 model card: 3.21B parameters"),
    "meta-llama/Llama-2-7b-hf": (6.74 * B, None, "Hub page: 6.74B parameters (Llama 2 paper: '7B')"),
    "Qwen/Qwen2-7B": (7.62 * B, None, "Hub page: 7.62B parameters"),
    "Qwen/Qwen2.5-7B": (7.61 * B, None, "model card: Number of Parameters 7.61B"),
    "Qwen/Qwen2.5-14B": (14.7 * B, None, "model card: Number of Parameters 14.7B"),
    "Qwen/Qwen3-14B": (14.8 * B, None, "model card: Number of Parameters 14.8B"),
    "Qwen/Qwen3-30B-A3B": (30.5 * B, 3.3 * B, "model card: 30.5B in total and 3.3B activated"),
    "Qwen/Qwen2.5-VL-3B-Instruct": (3.75 * B, None, "Hub page: 3.75B parameters (language model + vision)"),
    "Qwen/Qwen2.5-VL-7B-Instruct": (8.29 * B, None, "Hub page: 8.29B parameters (language model + vision)"),
    "Qwen/Qwen3-VL-8B-Instruct": (8.77 * B, None, "Hub page: 8.77B parameters (language model + vision)"),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (31.1 * B, None, "Hub page: 31.1B parameters (language model + vision)"),
    "google/gemma-2-2b": (2.61 * B, None, "Hub page: 2.61B parameters"),
    "google/gemma-3-4b-it": (4.3 * B, None, "Hub page: 4.3B parameters (language model + SigLIP)"),
    "mistralai/Ministral-3-3B-Instruct-2512": (3.8 * B, None, "model card: 3.4B language model + 0.4B vision encoder"),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (31.6 * B, 3.2 * B, "model card: 31.6B total, about 3.2B active"),
    # The same architecture as Nemotron-3 Nano (identical config.json shape keys).
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B": (31.6 * B, 3.2 * B, "Nemotron-3 Nano's architecture"),
    "openai/gpt-oss-20b": (21 * B, 3.6 * B, "model card: 21B parameters, 3.6B active"),
    "openai/gpt-oss-120b": (117 * B, 5.1 * B, "model card: 117B parameters, 5.1B active"),
    "allenai/OLMoE-1B-7B-0924": (6.9 * B, 1.3 * B, "model card: 1.3B active and 6.9B total parameters"),
}


def _qwen_a3b_active(layers: int, hidden: int, vocab: int, experts_per_tok: int, moe_ffn: int, shared: int,
                     linear: int, qk: int, v: int, v_heads: int, heads: int, head_dim: int, kv_heads: int,
                     n_experts: int, vision: float) -> float:
    """Active parameters of a Qwen3-Next / Qwen3.5 MoE model by hand: routed + shared experts, router, Gated
    DeltaNet layers (in_proj 2qk+2v+2Hv, out_proj), gated full attention (q and gate, k, v, o), embeddings."""
    moe = layers * ((experts_per_tok * moe_ffn + shared) * 3 * hidden + n_experts * hidden + hidden)
    gdn = linear * (hidden * (2 * qk + 2 * v + 2 * v_heads) + v * hidden)
    attn = (layers - linear) * (hidden * (2 * heads * head_dim + 2 * kv_heads * head_dim) + heads * head_dim * hidden)
    return moe + gdn + attn + 2 * vocab * hidden + vision


# Names whose active size rounds 3.2-3.9B down to "A3B" and whose cards give no exact count: the expected number is
# computed by hand from the config (norms and conv weights left out: < 0.1%).
HAND_ACTIVE: dict[str, float] = {
    # 48 layers (36 Gated DeltaNet), 10 of 512 experts + 1 shared of 512, 16x256 heads, 2 KV heads; untied 151936.
    "Qwen/Qwen3-Next-80B-A3B-Instruct": _qwen_a3b_active(48, 2048, 151936, 10, 512, 512, 36, 16 * 128, 32 * 128, 32,
                                                          16, 256, 2, 512, 0.0),
    # 40 layers (30 GDN), 8 of 256 experts + 1 shared of 512, 16x256 heads, 2 KV heads, 248320 vocab; the
    # 27-block ViT (1152 wide) is active for every image token: 0.41B by vision_params (checked in test_estimate_kinds).
    "Qwen/Qwen3.5-35B-A3B": _qwen_a3b_active(40, 2048, 248320, 8, 512, 512, 30, 16 * 128, 32 * 128, 32, 16, 256, 2,
                                             256, 0.414 * B),
    # Qwen3-30B-A3B's language model (3.35B: 48 layers, 8 of 128 experts of 768, 32x128 heads, 4 KV heads, untied
    # 151936 x 2048) plus the 27-block ViT with its three deepstack mergers (0.54B).
    "Qwen/Qwen3-VL-30B-A3B-Instruct": 48 * (8 * 768 * 3 * 2048 + 128 * 2048 + 2048 * (32 * 128 + 2 * 4 * 128)
                                             + 32 * 128 * 2048) + 2 * 151936 * 2048 + 0.54 * B,
}
HAND_TOLERANCE = 0.03


def _expected(hf_id: str) -> tuple[float, float | None, str] | None:
    name = hf_id.split("/", 1)[1]
    if hf_id in PUBLISHED:
        return PUBLISHED[hf_id]
    m = _OLMOE.search(name) if name.startswith("OLMoE") else None
    if m:
        return float(m.group(2)) * B, float(m.group(1)) * B, "name"
    m = _SIZE.search(name)
    if m is None:
        return None
    return float(m.group(1)) * B, (float(m.group(2)) * B if m.group(2) else None), "name"


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[float, float, float, bool]]:
    """{id: (total, active, input embedding, is MoE)} through the real resolver: one recipe per bundled id."""
    table = load_model_table(cache_dirs=[])
    ids = list(table)
    lines = ["from megatron.bridge import AutoBridge", "from megatron.bridge.recipes.common import _sft_common", ""]
    for i, hf_id in enumerate(ids):
        lines += [f"def m{i}_config():", "    cfg = _sft_common()",
                  f"    cfg.model = AutoBridge.from_hf_pretrained({hf_id!r}).to_megatron_provider(load_weights=False)",
                  "    return cfg", ""]
    folder = tmp_path_factory.mktemp("models")
    (folder / "models_recipe.py").write_text("\n".join(lines))
    old = os.getcwd()
    os.chdir(folder)
    try:
        run = resolve_paths(["models_recipe.py"], Settings(), ResolveOptions())
    finally:
        os.chdir(old)
    by_fn = {r.function: r for r in run.recipes}
    out = {}
    for i, hf_id in enumerate(ids):
        inp = read_inputs(recipe_getter(by_fn[f"m{i}_config"]), 8)
        total, active = param_counts(inp)
        out[hf_id] = (total, active, embedding_params(inp.shape), inp.shape.num_experts > 0)
    return out


def test_every_named_size_matches(counts: dict[str, tuple[float, float, float, bool]]) -> None:
    checked, misses = [], []
    for hf_id, (total, active, emb, moe) in sorted(counts.items()):
        exp = _expected(hf_id)
        if exp is None:
            continue
        exp_total, exp_active, source = exp
        checked.append(hf_id)
        if abs(total / exp_total - 1) > 0.03:
            misses.append(f"{hf_id}: total {total / B:.3f}B vs {exp_total / B:.3f}B ({source})")
        if moe and hf_id in HAND_ACTIVE:
            if abs(active / HAND_ACTIVE[hf_id] - 1) > HAND_TOLERANCE:
                misses.append(f"{hf_id}: active {active / B:.3f}B vs {HAND_ACTIVE[hf_id] / B:.3f}B by hand")
        elif moe and exp_active is not None:
            mine = active - emb if hf_id.startswith(NO_INPUT_EMBEDDING) else active
            if abs(mine / exp_active - 1) > 0.05:
                misses.append(f"{hf_id}: active {mine / B:.3f}B vs {exp_active / B:.3f}B ({source})")
    assert not misses, "\n".join(misses)
    # Every bundled id whose name states a size was checked (the new families among them).
    assert len(checked) == 54
    for must in ("Qwen/Qwen3.5-397B-A17B", "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
                 "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", "Qwen/Qwen3-VL-235B-A22B-Instruct",
                 "google/gemma-4-26B-A4B-it", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-27B"):
        assert must in checked


def test_the_issue_example(counts: dict[str, tuple[float, float, float, bool]]) -> None:
    total, active, _, moe = counts["Qwen/Qwen3.5-397B-A17B"]
    assert moe and abs(total / (397 * B) - 1) < 0.03 and abs(active / (17 * B) - 1) < 0.05


def test_models_without_a_size_in_the_name(counts: dict[str, tuple[float, float, float, bool]]) -> None:
    """Published totals of the large MoE models (their names state no size)."""
    for hf_id, total_b, active_b in (("deepseek-ai/DeepSeek-V3", 671, 37), ("moonshotai/Kimi-K2-Instruct", 1026, 32)):
        total, active, _, _ = counts[hf_id]
        assert abs(total / (total_b * B) - 1) < 0.03, hf_id
        assert abs(active / (active_b * B) - 1) < 0.05, hf_id


def test_published_table_is_only_used_where_the_name_rounds(counts: dict[str, tuple[float, float, float, bool]]) -> None:
    """An exception must be needed: the name alone would miss for every PUBLISHED / HAND_ACTIVE id."""
    for hf_id in PUBLISHED:
        name = hf_id.split("/", 1)[1]
        m = _OLMOE.search(name) if name.startswith("OLMoE") else _SIZE.search(name)
        assert m is not None, hf_id
        total, active, emb, _ = counts[hf_id]
        named_active: float | None
        if name.startswith("OLMoE"):
            named_total, named_active = float(m.group(2)) * B, float(m.group(1)) * B
        else:
            named_total = float(m.group(1)) * B
            named_active = float(m.group(2)) * B if m.group(2) else None
        mine = active - emb if hf_id.startswith(NO_INPUT_EMBEDDING) else active
        total_ok = abs(total / named_total - 1) <= 0.03
        active_ok = named_active is None or abs(mine / named_active - 1) <= 0.05
        assert not (total_ok and active_ok) or PUBLISHED[hf_id][1] is not None and named_active is None, hf_id
    assert set(HAND_ACTIVE) <= set(counts)


def test_counts_path_is_the_resolver(counts: dict[str, tuple[float, float, float, bool]]) -> None:
    assert Path(__file__).exists() and len(counts) == len(load_model_table(cache_dirs=[]).bundled)
