"""HF config.json → provider fields, the bundled model table, user config files, recipe HF-id coverage."""

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
    ModelTableError,
    generate_models,
    load_model_table,
    provider_fields_from_hf_config,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
DATA = Path(__file__).resolve().parents[1] / "mbmem_lint" / "data" / "models.json"


def test_tiny_llama_fixture_mapping() -> None:
    hf = json.loads((FIXTURES / "tiny-llama-config.json").read_text())
    provider, f = provider_fields_from_hf_config(hf)
    assert provider == GPT_PROVIDER
    expected = {
        "num_layers": 12,
        "hidden_size": 1024,
        "ffn_hidden_size": 2816,
        "num_attention_heads": 16,
        "num_query_groups": 4,
        "kv_channels": 64,  # no head_dim: 1024 / 16
        "seq_length": 4096,
        "vocab_size": 32001,
        "make_vocab_size_divisible_by": 1,  # 32001 is odd
        "share_embeddings_and_output_weights": False,
        "add_qkv_bias": False,  # LlamaConfig default attention_bias
        "add_bias_linear": False,  # LlamaConfig default mlp_bias
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "position_embedding_type": "rope",
        "seq_len_interpolation_factor": 2.0,  # rope_type "linear"
        "rotary_base": 10000.0,
        "layernorm_epsilon": 1e-06,
        "bf16": True,
        "fp16": False,
        "hidden_dropout": 0.0,
    }
    for key, value in expected.items():
        assert f[key] == value, key
    assert "rope_scaling" not in f
    assert "q_lora_rank" not in f and "num_moe_experts" not in f


def test_tiny_deepseek_fixture_mapping() -> None:
    hf = json.loads((FIXTURES / "tiny-deepseek-config.json").read_text())
    provider, f = provider_fields_from_hf_config(hf)
    assert provider == MLA_PROVIDER
    assert f["num_moe_experts"] == 16
    assert f["moe_router_topk"] == 4
    assert f["moe_ffn_hidden_size"] == 256
    assert f["moe_shared_expert_intermediate_size"] == 512  # 2 shared × 256
    assert f["moe_layer_freq"] == [0, 0, 1, 1, 1, 1]
    assert f["mtp_num_layers"] is None  # 0 → None in the V3 bridge
    assert f["q_lora_rank"] is None
    assert (f["kv_lora_rank"], f["qk_head_dim"], f["qk_pos_emb_head_dim"], f["v_head_dim"]) == (
        128,
        64,
        32,
        64,
    )
    assert f["multi_latent_attention"] is True
    assert f["make_vocab_size_divisible_by"] == 1280  # the bridge's hard-coded value wins
    assert (f["fp16"], f["bf16"]) == (True, False)
    assert (f["rotary_scaling_factor"], f["mscale_all_dim"]) == (1.0, 1.0)  # no yarn in config
    assert f["seq_length"] == 2048
    assert f["position_embedding_type"] == "rope"


def test_unknown_family_uses_generic_gpt_mapping() -> None:
    provider, f = provider_fields_from_hf_config(
        {"model_type": "mystery", "num_hidden_layers": 2, "hidden_size": 96, "num_attention_heads": 3,
         "vocab_size": 1024, "rope_scaling": {"type": "yarn", "factor": 4.0}}
    )  # fmt: skip
    assert provider == GPT_PROVIDER
    assert f == {
        "num_layers": 2,
        "hidden_size": 96,
        "num_attention_heads": 3,
        "vocab_size": 1024,
        "kv_channels": 32,
        "make_vocab_size_divisible_by": 128,
        "fp16": False,
        "bf16": False,
        "position_embedding_type": "yarn",
        "yarn_rotary_scaling_factor": 4.0,
    }


def test_bundled_table_hand_checked() -> None:
    table = load_model_table()
    llama70 = table["meta-llama/Meta-Llama-3-70B"]
    assert isinstance(llama70, ModelEntry)
    assert llama70.provider == GPT_PROVIDER
    f = llama70.fields
    assert (f["num_layers"], f["hidden_size"], f["ffn_hidden_size"]) == (80, 8192, 28672)
    assert (f["num_attention_heads"], f["num_query_groups"], f["kv_channels"]) == (64, 8, 128)
    assert (f["vocab_size"], f["seq_length"]) == (128256, 8192)
    assert f["share_embeddings_and_output_weights"] is False
    assert "P31" in llama70.source
    l1b = table["meta-llama/Llama-3.2-1B"].fields
    assert (l1b["kv_channels"], l1b["share_embeddings_and_output_weights"], l1b["rope_scaling_factor"]) == (
        64,
        True,
        32.0,
    )
    assert table["meta-llama/Llama-3.2-3B"].fields["vocab_size"] == 128256
    assert table["meta-llama/Meta-Llama-3.1-405B"].fields["num_layers"] == 126
    q3 = table["Qwen/Qwen3-30B-A3B"].fields
    assert (q3["num_moe_experts"], q3["moe_router_topk"], q3["moe_ffn_hidden_size"]) == (128, 8, 768)
    assert q3["qk_layernorm"] is True and "moe_shared_expert_intermediate_size" not in q3
    ds = table["deepseek-ai/DeepSeek-V3"]
    assert ds.provider == MLA_PROVIDER
    assert ds.fields["moe_layer_freq"] == [0] * 3 + [1] * 58
    assert ds.fields["moe_shared_expert_intermediate_size"] == 2048
    assert ds.fields["mtp_num_layers"] == 1
    assert (ds.fields["q_lora_rank"], ds.fields["kv_lora_rank"]) == (1536, 512)
    assert ds.fields["rotary_scaling_factor"] == 40
    assert table["deepseek-ai/DeepSeek-V2-Lite"].fields["seq_length"] == 4096  # bridge hard-codes it
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


def test_models_json_matches_hf_configs() -> None:
    from mbmem_lint.dev.regenerate import dumps

    assert DATA.read_bytes() == dumps(generate_models()) + b"\n"
    assert set(json.loads(DATA.read_text())["models"]) == set(HF_CONFIGS)


def test_user_models(tmp_path: Path) -> None:
    table = load_model_table({"me/tiny": "tiny-llama-config.json"}, root=FIXTURES)
    assert table["me/tiny"].fields["num_layers"] == 12
    assert table["me/tiny"].source.endswith("tiny-llama-config.json")
    assert "meta-llama/Meta-Llama-3-8B" in table
    # A user file replaces a bundled id.
    override = load_model_table({"meta-llama/Meta-Llama-3-8B": str(FIXTURES / "tiny-llama-config.json")})
    assert override["meta-llama/Meta-Llama-3-8B"].fields["hidden_size"] == 1024


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"hidden_size": 8}', "missing num_hidden_layers, num_attention_heads"),
        (
            '{"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2}',
            "lacks a field",
        ),
    ],
)
def test_bad_user_config(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ModelTableError, match=message) as info:
        load_model_table({"org/bad": "config.json"}, root=tmp_path)
    assert "org/bad" in str(info.value)


def test_broken_fixture_is_reported() -> None:
    with pytest.raises(ModelTableError, match="not valid JSON"):
        load_model_table({"org/broken": str(FIXTURES / "broken-config.json")})


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
    covered = sorted(i for i in ids if i in HF_CONFIGS)
    missing = sorted(ids - set(HF_CONFIGS))
    with capsys.disabled():
        print(f"\nHF ids in recipes: {len(ids)}; covered {len(covered)}; not covered {len(missing)}")
        for i in missing:
            print(f"  not covered: {i}")
    # Every bundled id is referenced by a recipe (no stale entries); OLMoE's recipe builds
    # OlMoEModelProvider inline and names the id only as cfg.tokenizer.tokenizer_model.
    assert set(HF_CONFIGS) - ids == {"allenai/OLMoE-1B-7B-0924"}
    # Hand-checked: these recipe families resolve through the table.
    for must in (
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3.1-405B",
        "Qwen/Qwen3-235B-A22B",
        "deepseek-ai/DeepSeek-V3",
        "openai/gpt-oss-20b",
        "moonshotai/Kimi-K2-Instruct",
    ):
        assert must in ids and must in HF_CONFIGS, must
    assert (len(covered), len(ids)) == (35, 84)
