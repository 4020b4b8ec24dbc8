"""HF config.json → provider fields through Bridge's own conversion code, the bundled model table, user files,
the Hugging Face cache, and recipe HF-id coverage.

Expected values are read by hand from the config files and the Bridge 0.6.2 code that converts them
(``models/conversion/model_bridge.py`` CONFIG_MAPPING / hf_config_to_provider_kwargs, the family bridges).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from mbmem_lint.resolve.hf_configs import HF_CONFIGS
from mbmem_lint.resolve.hf_models import (
    GPT_PROVIDER,
    MLA_PROVIDER,
    ModelEntry,
    bundled_configs,
    generate_models,
    hf_cache_config,
    hf_cache_dirs,
    hf_class_view,
    load_model_table,
    provider_fields_from_hf_config,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
DATA = Path(__file__).resolve().parents[1] / "mbmem_lint" / "data" / "models.pack"
HYBRID = "megatron.bridge.models.hybrid.hybrid_provider.HybridModelProvider"


def test_tiny_llama_fixture_mapping() -> None:
    hf = json.loads((FIXTURES / "tiny-llama-config.json").read_text())
    provider, f = provider_fields_from_hf_config(hf)
    assert provider == GPT_PROVIDER
    expected = {
        # CONFIG_MAPPING
        "num_layers": 12, "hidden_size": 1024, "ffn_hidden_size": 2816, "num_attention_heads": 16,
        "num_query_groups": 4, "seq_length": 4096, "vocab_size": 32001, "layernorm_epsilon": 1e-06,
        "rotary_base": 10000.0, "share_embeddings_and_output_weights": False,
        "add_qkv_bias": False, "add_bias_linear": False,  # LlamaConfig defaults attention_bias / mlp_bias
        # hf_config_to_provider_kwargs: largest power of two <= 128 dividing 32001; dtype flags
        "make_vocab_size_divisible_by": 1, "bf16": True, "fp16": False,
        "params_dtype": {"symbol": "torch.bfloat16"}, "activation_func": {"symbol": "torch.nn.functional.silu"},
        "position_embedding_type": "rope",
        # LlamaBridge.provider_bridge: constants, then rope_type "linear" -> seq_len_interpolation_factor
        "normalization": "RMSNorm", "gated_linear_unit": True, "hidden_dropout": 0.0, "rotary_percent": 1.0,
        "apply_rope_fusion": True, "seq_len_interpolation_factor": 2.0,
    }
    for key, value in expected.items():
        assert f[key] == value, key
    # Bridge leaves kv_channels to MCore (hidden / heads when head_dim is absent), and sets no rope_scaling
    # for a "linear" rope.
    assert "kv_channels" not in f and "rope_scaling" not in f
    assert "q_lora_rank" not in f and "num_moe_experts" not in f  # not GPTModelProvider fields: filtered


def test_tiny_deepseek_fixture_mapping() -> None:
    hf = json.loads((FIXTURES / "tiny-deepseek-config.json").read_text())
    provider, f = provider_fields_from_hf_config(hf)
    assert provider == MLA_PROVIDER  # register_bridge(provider=MLAModelProvider)
    assert (f["num_moe_experts"], f["moe_router_topk"], f["moe_ffn_hidden_size"]) == (16, 4, 256)
    assert f["moe_shared_expert_intermediate_size"] == 512  # 2 shared x 256 (deepseek/common.py)
    assert f["moe_layer_freq"] == [0, 0, 1, 1, 1, 1]  # first_k_dense_replace = 2
    assert f["mtp_num_layers"] is None  # num_nextn_predict_layers 0 -> None
    assert f["q_lora_rank"] is None
    assert (f["kv_lora_rank"], f["qk_head_dim"], f["qk_pos_emb_head_dim"], f["v_head_dim"]) == (128, 64, 32, 64)
    assert f["multi_latent_attention"] is True
    assert f["make_vocab_size_divisible_by"] == 1280  # the bridge's constant replaces the computed 8
    assert (f["fp16"], f["bf16"]) == (True, False)
    # No yarn rope_scaling: MLA providers get rotary_scaling_factor = mscale_all_dim = 1.0.
    assert (f["rotary_scaling_factor"], f["mscale_all_dim"]) == (1.0, 1.0)
    assert f["seq_length"] == 2048 and f["position_embedding_type"] == "rope"


def test_unregistered_architecture_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["MysteryForCausalLM"], "model_type": "mystery", "num_hidden_layers": 2,
         "hidden_size": 96, "num_attention_heads": 3}))
    table = load_model_table({"org/mystery": "config.json"}, root=tmp_path, cache_dirs=[])
    assert table.lookup("org/mystery") is None
    assert "registers no model bridge for MysteryForCausalLM" in table.why_unknown("org/mystery")


def test_bundled_table_hand_checked() -> None:
    table = load_model_table(cache_dirs=[])
    llama70 = table["meta-llama/Meta-Llama-3-70B"]
    assert isinstance(llama70, ModelEntry) and llama70.provider == GPT_PROVIDER
    assert llama70.bridge is not None and llama70.bridge.endswith("LlamaBridge") and llama70.origin == "bundled"
    f = llama70.fields
    assert (f["num_layers"], f["hidden_size"], f["ffn_hidden_size"]) == (80, 8192, 28672)
    assert (f["num_attention_heads"], f["num_query_groups"]) == (64, 8)
    assert (f["vocab_size"], f["seq_length"]) == (128256, 8192)
    assert f["share_embeddings_and_output_weights"] is False
    assert "P31" in llama70.source
    l1b = table["meta-llama/Llama-3.2-1B"].fields
    assert (l1b["kv_channels"], l1b["share_embeddings_and_output_weights"], l1b["rope_scaling_factor"]) == (
        64, True, 32.0)
    assert table["meta-llama/Meta-Llama-3.1-405B"].fields["num_layers"] == 126
    q3 = table["Qwen/Qwen3-30B-A3B"].fields
    assert (q3["num_moe_experts"], q3["moe_router_topk"], q3["moe_ffn_hidden_size"]) == (128, 8, 768)
    assert q3["qk_layernorm"] is True and "moe_shared_expert_intermediate_size" not in q3
    ds = table["deepseek-ai/DeepSeek-V3"]
    assert ds.provider == MLA_PROVIDER
    assert ds.fields["moe_layer_freq"] == [0] * 3 + [1] * 58
    assert ds.fields["moe_shared_expert_intermediate_size"] == 2048 and ds.fields["mtp_num_layers"] == 1
    assert (ds.fields["q_lora_rank"], ds.fields["kv_lora_rank"]) == (1536, 512)
    assert ds.fields["rotary_scaling_factor"] == 40  # yarn rope_scaling factor via MLA_ROPE_SCALING_MAPPING
    assert table["deepseek-ai/DeepSeek-V2-Lite"].fields["seq_length"] == 4096  # DeepSeekV2Bridge constant
    # Kimi-K2-Instruct's config.json names DeepseekV3ForCausalLM: Bridge dispatches by architecture, so the
    # DeepSeek-V3 bridge converts it (not KimiK2Bridge, registered for KimiK2ForCausalLM).
    kimi = table["moonshotai/Kimi-K2-Instruct"]
    assert kimi.bridge is not None and kimi.bridge.endswith("DeepSeekV3Bridge")
    assert (kimi.fields["num_moe_experts"], kimi.fields["seq_length"]) == (384, 131072)
    oss = table["openai/gpt-oss-120b"].fields
    assert (oss["num_layers"], oss["num_moe_experts"], oss["moe_ffn_hidden_size"]) == (36, 128, 2880)
    assert oss["window_size"] == [127, 0] and oss["add_bias_linear"] is True
    g2 = table["google/gemma-2-27b"]
    assert g2.provider.endswith("Gemma2ModelProvider")
    assert (g2.fields["kv_channels"], g2.fields["query_pre_attn_scalar"]) == (128, 144)
    glm = table["zai-org/GLM-4.5-Air"].fields
    assert glm["moe_layer_freq"] == [0] + [1] * 45
    assert glm["moe_shared_expert_intermediate_size"] == 1408 and glm["mtp_num_layers"] == 1
    olmoe = table["allenai/OLMoE-1B-7B-0924"].fields
    assert (olmoe["num_moe_experts"], olmoe["moe_router_topk"], olmoe["moe_ffn_hidden_size"]) == (64, 8, 1024)


def test_new_families_hand_checked() -> None:
    """Published configs of the model families recipes train today, converted by their bridges."""
    table = load_model_table(cache_dirs=[])
    # Qwen3.5 MoE (Qwen35VLMoEBridge): text_config through CONFIG_MAPPING, Gated DeltaNet settings from
    # _apply_qwen35_common_config, layer_types -> linear_attention_freq (transformers_compat.py).
    q = table["Qwen/Qwen3.5-35B-A3B"]
    assert q.provider.endswith("Qwen35VLMoEModelProvider")
    f = q.fields
    assert (f["num_layers"], f["hidden_size"], f["num_attention_heads"], f["num_query_groups"]) == (40, 2048, 16, 2)
    assert (f["kv_channels"], f["num_moe_experts"], f["moe_router_topk"], f["moe_ffn_hidden_size"]) == (256, 256, 8, 512)
    assert f["moe_shared_expert_intermediate_size"] == 512 and f["moe_shared_expert_gate"] is True
    assert f["experimental_attention_variant"] == "gated_delta_net"
    assert f["linear_attention_freq"] == [1, 1, 1, 0] * 10
    assert (f["linear_num_key_heads"], f["linear_num_value_heads"]) == (16, 32)
    assert (f["linear_key_head_dim"], f["linear_value_head_dim"], f["linear_conv_kernel_dim"]) == (128, 128, 4)
    assert f["rotary_percent"] == 0.25 and f["mtp_num_layers"] == 1
    assert f["vision_config"]["depth"] == 27 and f["vision_config"]["hidden_size"] == 1152
    # Nemotron-3 Super (NemotronHBridge): hybrid pattern and latent MoE from the config.
    s = table["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"]
    assert s.provider == HYBRID
    f = s.fields
    assert len(f["hybrid_layer_pattern"]) == 88 and f["hybrid_layer_pattern"].startswith("MEMEMEM*E")
    assert (f["num_moe_experts"], f["moe_router_topk"], f["moe_latent_size"]) == (512, 22, 1024)
    assert (f["mamba_num_heads"], f["mamba_head_dim"], f["mamba_num_groups"], f["mamba_state_dim"]) == (128, 64, 8, 128)
    assert (f["mtp_num_layers"], f["mtp_hybrid_override_pattern"]) == (1, "*E")
    # Nemotron-3 Ultra states its layers as layers_block_type (no num_hidden_layers key): the pattern is built
    # from it, as the config class exposes it.
    u = table["nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"].fields
    assert u["num_layers"] == 108 and len(u["hybrid_layer_pattern"]) == 108
    assert u["hybrid_layer_pattern"].count("*") == 12 and u["hybrid_layer_pattern"].count("M") == 48 and u["mtp_hybrid_override_pattern"] == "*E"
    # DeepSeek-V4 (DeepSeekV4Bridge): q/o LoRA, CSA compression, indexer, hyper-connections.
    d = table["deepseek-ai/DeepSeek-V4-Flash"].fields
    assert (d["num_layers"], d["hidden_size"], d["q_lora_rank"], d["o_lora_rank"], d["o_groups"]) == (43, 4096, 1024, 1024, 8)
    assert (d["v_head_dim"], d["qk_pos_emb_head_dim"], d["num_residual_streams"]) == (512, 64, 4)
    assert (d["dsa_indexer_n_heads"], d["dsa_indexer_head_dim"], d["dsa_indexer_topk"]) == (64, 128, 512)
    assert len(d["csa_compress_ratios"]) == 44 and d["csa_compress_ratios"][:4] == [0, 0, 4, 128]
    assert d["apply_dsa_kernel_fusion"] == {"unknown": "boolean of an unknown value"}  # depends on the GPU
    # GLM-5.1 (GLM5Bridge): MLA + DSA indexer.
    g = table["zai-org/GLM-5.1"].fields
    assert (g["num_layers"], g["experimental_attention_variant"], g["dsa_indexer_topk"]) == (78, "dsa", 2048)
    assert (g["q_lora_rank"], g["kv_lora_rank"], g["qk_head_dim"], g["qk_pos_emb_head_dim"], g["v_head_dim"]) == (
        2048, 512, 192, 64, 256)
    # Kimi-K2.5 (KimiK25VLBridge): the text model is DeepSeek-V3-shaped MLA MoE.
    k = table["moonshotai/Kimi-K2.5"].fields
    assert (k["num_layers"], k["num_moe_experts"], k["moe_layer_freq"][:2]) == (61, 384, [0, 1])


def test_partial_config_leaves_unstated_keys_unknown() -> None:
    """A partial file states only some keys: what the bridge reads beyond them is unknown, never a default."""
    table = load_model_table(cache_dirs=[])
    g = table["google/gemma-3-4b-it"]
    assert g.confidence == "partial"
    f = g.fields
    assert (f["num_layers"], f["hidden_size"], f["num_attention_heads"], f["kv_channels"]) == (34, 2560, 8, 256)
    assert f["window_size"] == 1024 and f["rotary_base"] == [10000, 1000000]
    assert f["seq_length"] == {"unknown": "set conditionally"}  # max_position_embeddings not stated
    assert "partial config.json" in f["mm_tokens_per_image"]["unknown"]


def test_models_pack_matches_generation() -> None:
    from mbmem_lint.resolve.hf_models import dump_models, read_models

    generated = generate_models()
    assert DATA.read_bytes() == dump_models(generated)
    stored = read_models(DATA.read_bytes())
    assert dict(stored["models"]) == generated["models"] and stored["unmapped"] == generated["unmapped"]
    assert set(generated["models"]) | set(generated["unmapped"]) == set(bundled_configs())
    assert set(HF_CONFIGS) <= set(generated["models"])
    # Bundled but not convertible by Bridge 0.6.2, with the reason.
    assert set(generated["unmapped"]) == {"MiniMaxAI/MiniMax-M3", "stepfun-ai/Step-3.7-Flash"}
    assert "registers no model bridge for Step3p7FlashForCausalLM" in generated["unmapped"]["stepfun-ai/Step-3.7-Flash"]


def test_hf_class_view() -> None:
    # Qwen2.5-VL files of transformers 4.41 keep the text keys at the top level.
    cfg, _ = hf_class_view({"model_type": "qwen2_5_vl", "architectures": ["X"], "hidden_size": 8,
                            "vision_config": {"depth": 2}})
    assert cfg["text_config"] == {"model_type": "qwen2_5_vl", "hidden_size": 8}
    _, defaults = hf_class_view({"model_type": "nemotron_h", "layers_block_type": ["mamba", "moe", "attention", "mlp"],
                                 "mtp_layers_block_type": ["attention", "moe"]})
    assert defaults["hybrid_override_pattern"] == "ME*-" and defaults["num_hidden_layers"] == 4
    assert defaults["mtp_hybrid_override_pattern"] == "*E"
    _, defaults = hf_class_view({"model_type": "nemotron_h", "layers_block_type": ["mamba", "sparkle"]})
    assert "hybrid_override_pattern" not in defaults  # an unknown layer kind: no pattern


# -- user files and the HF cache ---------------------------------------------------------------------------------

def test_user_models_file_and_folder(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((FIXTURES / "tiny-llama-config.json").read_text())
    table = load_model_table({"me/tiny": "tiny-llama-config.json"}, root=FIXTURES, cache_dirs=[])
    e = table["me/tiny"]
    assert e.fields["num_layers"] == 12 and e.origin == "pyproject" and e.source.endswith("tiny-llama-config.json")
    assert "meta-llama/Meta-Llama-3-8B" in table
    # A folder holding a config.json (a local checkpoint).
    folder = load_model_table({"me/ckpt": str(ckpt)}, cache_dirs=[])["me/ckpt"]
    assert folder.fields["hidden_size"] == 1024 and folder.path == str(ckpt / "config.json")
    # A user file replaces a bundled id.
    override = load_model_table({"meta-llama/Meta-Llama-3-8B": str(FIXTURES / "tiny-llama-config.json")}, cache_dirs=[])
    assert override["meta-llama/Meta-Llama-3-8B"].fields["hidden_size"] == 1024


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read config.json"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"hidden_size": 8}', "no 'architectures' list"),
    ],
)
def test_bad_user_config(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    table = load_model_table({"org/bad": "config.json"}, root=tmp_path, cache_dirs=[])
    assert table.lookup("org/bad") is None
    why = table.why_unknown("org/bad")
    assert message in why and "org/bad" in why


def _cache_repo(cache: Path, hf_id: str, snapshots: dict[str, str], refs: dict[str, str]) -> None:
    repo = cache / ("models--" + hf_id.replace("/", "--"))
    for rev, text in snapshots.items():
        (repo / "snapshots" / rev).mkdir(parents=True)
        (repo / "snapshots" / rev / "config.json").write_text(text)
    for name, rev in refs.items():
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(rev + "\n")


def test_hf_cache_lookup(tmp_path: Path) -> None:
    tiny = json.loads((FIXTURES / "tiny-llama-config.json").read_text())
    wide = {**tiny, "hidden_size": 2048}
    cache = tmp_path / "hub"
    _cache_repo(cache, "org/tiny", {"a1b2": json.dumps(tiny), "c3d4": json.dumps(wide)}, {"main": "a1b2", "v2": "c3d4"})
    _cache_repo(cache, "org/broken", {"e5f6": "{not json"}, {"main": "e5f6"})
    _cache_repo(cache, "org/nofile", {}, {"main": "0000"})
    table = load_model_table(cache_dirs=[cache])
    main = table.lookup("org/tiny")  # refs/main -> a1b2
    assert main is not None and main.origin == "cache" and main.fields["hidden_size"] == 1024
    assert main.path == str(cache / "models--org--tiny" / "snapshots" / "a1b2" / "config.json")
    pinned = table.lookup("org/tiny", "c3d4")  # a commit hash
    assert pinned is not None and pinned.fields["hidden_size"] == 2048
    tag = table.lookup("org/tiny", "v2")  # a branch or tag name, through refs/
    assert tag is not None and tag.fields["hidden_size"] == 2048
    assert table.lookup("org/broken") is None
    assert "not valid JSON" in table.why_unknown("org/broken")
    assert table.lookup("org/nofile") is None
    assert "snapshots/0000/config.json" in table.why_unknown("org/nofile")
    assert table.lookup("org/absent") is None
    assert "not in the Hugging Face cache" in table.why_unknown("org/absent")
    # Bundled ids never read the cache.
    _cache_repo(cache, "meta-llama/Meta-Llama-3-8B", {"ffff": json.dumps(wide)}, {"main": "ffff"})
    assert load_model_table(cache_dirs=[cache])["meta-llama/Meta-Llama-3-8B"].origin == "bundled"


def test_hf_cache_location() -> None:
    assert hf_cache_dirs({"HF_HUB_CACHE": "/c/hub", "HF_HOME": "/h"}) == [Path("/c/hub")]
    assert hf_cache_dirs({"HF_HOME": "/h"}) == [Path("/h/hub")]
    assert hf_cache_dirs({"XDG_CACHE_HOME": "/x"}) == [Path("/x/huggingface/hub")]
    assert hf_cache_dirs({}) == [Path("~/.cache/huggingface/hub").expanduser()]
    assert hf_cache_config("not-an-id", None, [])[0] is None
    assert hf_cache_config("../../etc", None, [])[0] is None


# -- coverage of the HF ids referenced by the 0.6.2 recipes -------------------------------------------

_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ID_NAME = re.compile(r"(^hf_path$|_MODEL_ID$|_HF_PATH$|^_?HF_PATH$|_HF_MODEL_PATH$)")


def _is_id(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_HF_ID.match(node.value))


def recipe_hf_ids(files: list[Path]) -> set[str]:
    """HF ids passed to ``from_hf_pretrained`` or assigned to ``hf_path`` / ``*_MODEL_ID`` / ``*_HF_PATH``."""
    ids: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "from_hf_pretrained" and node.args and _is_id(node.args[0]):
                    ids.add(node.args[0].value)  # type: ignore[attr-defined]
                for kw in node.keywords:
                    if kw.arg and _ID_NAME.search(kw.arg) and _is_id(kw.value):
                        ids.add(kw.value.value)  # type: ignore[attr-defined]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
                if value is not None and _is_id(value):
                    for t in targets:
                        if isinstance(t, ast.Name) and _ID_NAME.search(t.id):
                            ids.add(value.value)  # type: ignore[attr-defined]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
                defaults += list(node.args.kw_defaults)
                for arg, default in zip(args, defaults):
                    if default is not None and _ID_NAME.search(arg.arg) and _is_id(default):
                        ids.add(default.value)  # type: ignore[attr-defined]
    return ids


@pytest.mark.corpus
def test_recipe_hf_id_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    from mbmem_lint.dev.corpus import ensure_corpus, recipe_files

    ids = recipe_hf_ids(recipe_files(ensure_corpus()))
    table = load_model_table(cache_dirs=[])
    covered = sorted(i for i in ids if i in table.bundled)
    missing = sorted(ids - set(table.bundled))
    with capsys.disabled():
        print(f"\nHF ids in recipes: {len(ids)}; covered {len(covered)}; not covered {len(missing)}")
        for i in missing:
            print(f"  not covered: {i}: {table.why_unknown(i)}")
    # Every bundled id is referenced by a recipe (no stale entries), except two models recipes build inline:
    # OLMoE (OlMoEModelProvider; the id is only cfg.tokenizer.tokenizer_model) and Nemotron-3.5 Lightning (the
    # Nemotron-3 Nano HybridModelProvider; the recipes name the -BF16 release only as model.hf_model_id).
    assert set(bundled_configs()) - ids == {"allenai/OLMoE-1B-7B-0924", "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B"}
    for must in ("meta-llama/Meta-Llama-3-8B", "Qwen/Qwen3.5-397B-A17B", "deepseek-ai/DeepSeek-V4-Flash",
                 "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", "zai-org/GLM-5.2", "moonshotai/Kimi-K2.5"):
        assert must in ids and must in table.bundled, must
    assert (len(covered), len(ids)) == (63, 84)  # 65 convertible bundled ids, 2 of them not referenced


def test_a_lookup_decodes_only_its_own_entry_of_the_bundled_table() -> None:
    table = load_model_table(cache_dirs=[])
    assert table._bundled is None  # nothing read before the first lookup
    entry = table.lookup("Qwen/Qwen3-8B")
    assert entry is not None and entry.origin == "bundled" and entry.fields["num_layers"] == 36
    specs = table.bundled._specs  # type: ignore[attr-defined]
    assert list(specs._decoded) == ["Qwen/Qwen3-8B"]
    assert len(table.bundled) == len(specs) > 50
