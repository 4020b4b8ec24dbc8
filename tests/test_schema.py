"""The shipped dataclass schema: hand-checked fields/defaults, lookup API, and staleness vs the wheels."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mbmem_lint.resolve.schema import ClassSchema, Schema
from mbmem_lint.resolve.schema_gen import generate_schema
from mbmem_lint.resolve.versions import SHIPPED

GPT = "megatron.bridge.models.gpt_provider.GPTModelProvider"
BRIDGE_DDP = "megatron.bridge.training.config.DistributedDataParallelConfig"
MCORE_DDP = "megatron.core.distributed.distributed_data_parallel_config.DistributedDataParallelConfig"


@pytest.fixture(scope="module")
def schema() -> Schema:
    return Schema.load()


def _cls(schema: Schema, qual: str) -> ClassSchema:
    cls = schema.get(qual)
    assert cls is not None, qual
    return cls


def test_generator_versions_and_size(schema: Schema) -> None:
    assert schema.generator == {"megatron_bridge": "0.6.2", "megatron_core": "0.19.2"}
    assert len(schema) > 300
    assert Schema.load() is schema  # cached


def test_config_container_sections(schema: Schema) -> None:
    cc = _cls(schema, "megatron.bridge.training.config.ConfigContainer")
    assert cc.fields["train"].default == {"required": True}
    assert cc.fields["ddp"].default == {"factory": BRIDGE_DDP}
    assert cc.fields["env_vars"].default == {"value": {}}
    assert cc.fields["peft"].default == {"value": None}
    assert cc.fields["_checkpoint_load_required"].init is False
    expected = {
        "train": "megatron.bridge.training.config.TrainingConfig",
        "model": GPT,
        "optimizer": "megatron.bridge.training.config.OptimizerConfig",
        "ddp": BRIDGE_DDP,
        "scheduler": "megatron.bridge.training.config.SchedulerConfig",
        "tokenizer": "megatron.bridge.training.tokenizers.config.TokenizerConfig",
        "checkpoint": "megatron.bridge.training.config.CheckpointConfig",
        "mixed_precision": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig",
        "comm_overlap": "megatron.bridge.training.comm_overlap.CommOverlapConfig",
        "validation": "megatron.training.config.training_config.ValidationConfig",
        "rng": "megatron.training.config.common_config.RNGConfig",
    }
    for section, qual in expected.items():
        found = schema.section_class(section)
        assert found is not None and found.qualname == qual, section
    assert schema.section_class("no_such_section") is None


def test_gpt_model_provider_fields(schema: Schema) -> None:
    gpt = _cls(schema, GPT)
    assert gpt.bases == [
        "megatron.core.transformer.transformer_config.TransformerConfig",
        "megatron.bridge.models.model_provider.ModelProviderMixin",
    ]
    f = gpt.fields
    # ModelParallelConfig (via TransformerConfig)
    assert f["tensor_model_parallel_size"].default == {"value": 1}
    assert f["tensor_model_parallel_size"].type == "int"
    assert f["sequence_parallel"].default == {"value": False}
    assert f["virtual_pipeline_model_parallel_size"].default == {"value": None}
    assert f["params_dtype"].default == {"symbol": "torch.float32"}
    # TransformerConfig
    assert f["recompute_granularity"].default == {"value": None}
    assert f["recompute_granularity"].type == "Optional[Literal['full', 'selective']]"
    assert f["activation_func"].default == {"symbol": "torch.nn.functional.gelu"}
    assert f["min_offloaded_tensor_size"].default == {"value": 1024 * 1024}
    assert f["moe_router_topk"].default == {"value": 2}
    assert f["attention_backend"].default == {"symbol": "megatron.core.transformer.enums.AttnBackend.auto"}
    # GPTModelProvider's own fields and the defaults it overrides
    assert f["seq_length"].default == {"value": 1024}
    assert f["deallocate_pipeline_outputs"].default == {"value": True}
    assert f["share_embeddings_and_output_weights"].default == {"value": True}
    assert f["make_vocab_size_divisible_by"].default == {"value": 128}
    mpc = _cls(schema, "megatron.core.model_parallel_config.ModelParallelConfig")
    assert mpc.fields["deallocate_pipeline_outputs"].default == {"value": False}
    assert not gpt.has_field("max_lr")


def test_ddp_optimizer_mixed_precision_comm_overlap(schema: Schema) -> None:
    ddp = _cls(schema, BRIDGE_DDP)
    assert ddp.bases == [MCORE_DDP]
    assert schema.is_subclass(BRIDGE_DDP, MCORE_DDP)
    assert ddp.fields["grad_reduce_in_fp32"].default == {"value": False}
    assert ddp.fields["use_distributed_optimizer"].default == {"value": False}
    assert ddp.fields["data_parallel_sharding_strategy"].default == {"value": "no_shard"}
    opt = _cls(schema, "megatron.bridge.training.config.OptimizerConfig")
    assert opt.fields["optimizer"].default == {"value": "adam"}
    assert opt.fields["main_grads_dtype"].default == {"symbol": "torch.float32"}
    assert opt.fields["initial_loss_scale"].default == {"value": 2**32}
    mp = _cls(schema, "megatron.bridge.training.mixed_precision.MixedPrecisionConfig")
    assert mp.fields["grad_reduce_in_fp32"].default == {"value": True}
    assert mp.fields["fp8_recipe"].default == {"value": "tensorwise"}
    assert mp.fields["num_layers_at_start_in_bf16"].default == {"value": 0}
    co = _cls(schema, "megatron.bridge.training.comm_overlap.CommOverlapConfig")
    assert co.fields["tp_comm_overlap"].default == {"required": True}
    assert co.fields["tp_comm_bootstrap_backend"].default == {"value": "nccl"}
    assert co.fields["bucket_size"].default == {"value": None}
    ub = _cls(schema, "megatron.bridge.training.comm_overlap.TransformerLayerTPOverlapCfg")
    assert set(ub.fields) >= {"qkv_dgrad", "fc1_fprop", "fc2_fprop", "proj_fprop"}


def test_peft_classes(schema: Schema) -> None:
    lora = schema.find("megatron.bridge.peft.LoRA")  # re-export
    assert lora is not None and lora.qualname == "megatron.bridge.peft.lora.LoRA"
    assert lora.fields["target_modules"].default == {
        "value": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    }
    assert lora.fields["dim"].default == {"value": 32}
    assert lora.fields["alpha"].default == {"value": 32}
    assert lora.fields["sequence_parallel_input_regather"].default == {"value": False}
    assert lora.fields["exclude_modules"].default == {"value": []}  # from ModuleMatcher
    dora = _cls(schema, "megatron.bridge.peft.dora.DoRA")
    assert dora.fields["alpha"].default == {"value": 64}
    assert not dora.has_field("sequence_parallel_input_regather")
    canon = _cls(schema, "megatron.bridge.peft.canonical_lora.CanonicalLoRA")
    assert canon.fields["target_modules"].default["value"][:3] == ["linear_q", "linear_k", "linear_v"]
    assert not canon.has_field("sequence_parallel_input_regather")
    assert schema.is_subclass(lora.qualname, "megatron.bridge.peft.base.PEFT")


def test_scheduler_tokenizer_hybrid(schema: Schema) -> None:
    sched = _cls(schema, "megatron.bridge.training.config.SchedulerConfig")
    assert not sched.has_field("max_lr")
    assert sched.has_field("max_steps")
    assert sched.fields["lr_decay_style"].default == {"value": "linear"}
    assert sched.fields["lr_warmup_steps"].init is False
    assert schema.closest_fields(sched.qualname, "lr_warmup_iter")[0] == "lr_warmup_iters"
    tok = _cls(schema, "megatron.bridge.training.tokenizers.config.TokenizerConfig")
    assert tok.fields["make_vocab_size_divisible_by"].default == {"value": 1}  # Bridge override
    assert tok.fields["vocab_size"].default == {"value": None}  # inherited from MT
    hyb = _cls(schema, "megatron.bridge.models.hybrid.hybrid_provider.HybridModelProvider")
    assert hyb.has_field("tensor_model_parallel_size") and hyb.has_field("seq_length")
    assert schema.is_subclass(hyb.qualname, "megatron.core.transformer.transformer_config.TransformerConfig")
    mla = _cls(schema, "megatron.bridge.models.mla_provider.MLAModelProvider")
    assert mla.has_field("kv_lora_rank") and mla.has_field("seq_length")
    assert not _cls(schema, GPT).has_field("kv_lora_rank")


def test_find_by_simple_name(schema: Schema) -> None:
    found = schema.find("GPTModelProvider")
    assert found is not None and found.qualname == GPT
    assert schema.find("DistributedDataParallelConfig") is None  # ambiguous without a hint
    hinted = schema.find("DistributedDataParallelConfig", module_hint="megatron.bridge.training.config")
    assert hinted is not None and hinted.qualname == BRIDGE_DDP
    core = schema.find("DistributedDataParallelConfig", module_hint="megatron.core.distributed")
    assert core is not None and core.qualname == MCORE_DDP
    assert schema.find("NoSuchConfig") is None
    assert schema.closest_fields(GPT, "tensor_model_paralel_size")[0] == "tensor_model_parallel_size"
    assert schema.closest_fields("no.such.Class", "x") == []


def _tiny_corpus(root: Path) -> Path:
    pkg = root / "megatron" / "bridge"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "package_info.py").write_text("MAJOR = 9\nMINOR = 8\nPATCH = 7\n")
    (pkg / "sub" / "__init__.py").write_text("from .base import Base as Base\n")
    (pkg / "sub" / "base.py").write_text(
        "import dataclasses\nfrom dataclasses import dataclass, field\nfrom typing import ClassVar\n"
        "import torch\nimport torch.nn.functional as F\n"
        "SIZE = 4\n"
        "@dataclass\nclass Base:\n"
        "    a: int = 1\n"
        "    b: 'list[int]' = field(default_factory=lambda: [1, 2] * 2)\n"
        "    c: torch.dtype = torch.float\n"
        "    d: object = F.silu\n"
        "    e: int = SIZE * 2\n"
        "    f: float = 2 ** -1\n"
        "    g: object = field(default_factory=dict)\n"
        "    h: int = field(default=3, init=False)\n"
        "    r: int = dataclasses.field()\n"
        "    cv: ClassVar[int] = 5\n"
        "    not_a_field = 7\n"
        "    u: object = object()\n"
    )
    (pkg / "child.py").write_text(
        "from dataclasses import dataclass, field\nfrom megatron.bridge.sub import Base\n"
        "@dataclass\nclass Child(Base):\n"
        "    a: int = 10\n"
        "    z: Base = field(default_factory=Base)\n"
        "    t: tuple = (1, 'x')\n"
        "class Plain(Child):\n"
        "    extra: int = 3\n"
    )
    return root


def test_generator_on_tiny_corpus(tmp_path: Path) -> None:
    out = generate_schema(_tiny_corpus(tmp_path))
    assert out["generator"] == {"megatron_bridge": "9.8.7", "megatron_core": "unknown"}
    base = out["classes"]["megatron.bridge.sub.base.Base"]
    f = base["fields"]
    assert f["a"] == {"type": "int", "default": {"value": 1}, "line": 9, "init": True}
    assert f["b"]["type"] == "list[int]" and f["b"]["default"] == {"value": [1, 2, 1, 2]}
    assert f["c"]["default"] == {"symbol": "torch.float32"}
    assert f["d"]["default"] == {"symbol": "torch.nn.functional.silu"}
    assert f["e"]["default"] == {"value": 8}
    assert f["f"]["default"] == {"value": 0.5}
    assert f["g"]["default"] == {"value": {}}
    assert f["h"]["default"] == {"value": 3} and f["h"]["init"] is False
    assert f["r"]["default"] == {"required": True}
    assert f["u"]["default"] == {"unknown": "object()"}
    assert "cv" not in f and "not_a_field" not in f
    child = out["classes"]["megatron.bridge.child.Child"]
    assert child["bases"] == ["megatron.bridge.sub.base.Base"]  # re-export followed
    assert child["fields"]["a"]["default"] == {"value": 10}
    assert child["fields"]["a"]["line"] == 5
    assert child["fields"]["z"]["default"] == {"factory": "megatron.bridge.sub.base.Base"}
    assert child["fields"]["t"]["default"] == {"value": [1, "x"]}
    assert child["fields"]["c"] == f["c"]
    plain = out["classes"]["megatron.bridge.child.Plain"]
    assert "extra" not in plain["fields"]  # not decorated: annotations are not fields
    assert set(plain["fields"]) == set(child["fields"])
    # Deterministic.
    again = generate_schema(tmp_path)
    assert json.dumps(again, sort_keys=True) == json.dumps(out, sort_keys=True)
    ast.parse("x = 1")  # the generator never imports analysed code


@pytest.mark.corpus
@pytest.mark.parametrize("version", list(SHIPPED))
def test_shipped_data_is_fresh(version: str) -> None:
    """Per shipped release: regenerating it from its wheels (bridge + the paired core) changes no file."""
    from mbmem_lint.data_pack import open_pack
    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.dev.regenerate import DATA_DIR, check_stale

    stale = check_stale(ensure_corpus(version=version), version=version)
    assert stale == [], f"regenerate shipped data (mbmem-lint dev regenerate --version {version}): {stale}"
    pack = open_pack((DATA_DIR / "schema.pack").read_bytes(), version)
    assert len(pack) > 250 and "megatron.bridge.training.config.ConfigContainer" in pack
    assert pack.meta["generator"] == {"megatron_bridge": version, "megatron_core": SHIPPED[version]}
