"""Bridge's runtime rewrites (issue 2 "Runtime rewrites"; the order is resolve/runtime.py's):
each rewritten value carries origin ``runtime`` and ``rewrites`` records why. Expectations follow the
megatron-bridge 0.6.2 source (training/config.py:1853 runtime_config_update, mixed_precision.py:138,
comm_overlap.py:422-640, config.py:1945, models/transformer_config.py:176, setup.py:681)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

HEADER = """\
from megatron.bridge.recipes.llama import llama3_8b_pretrain_config
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.mixed_precision import bf16_mixed


def recipe_config() -> ConfigContainer:
    cfg = llama3_8b_pretrain_config()
"""


def resolve_body(tmp_path: Path, body: str, **opts) -> ResolvedRecipe:
    src = HEADER + textwrap.indent(textwrap.dedent(body), "    ") + "    return cfg\n"
    (tmp_path / "recipe.py").write_text(src)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run = resolve_paths(["recipe.py"], Settings(), ResolveOptions(**opts))
    finally:
        os.chdir(old)
    assert not [d for d in run.diagnostics if d.code in ("MBM001", "MBM002")]
    (r,) = run.recipes
    return r


def body_line(body: str, needle: str) -> int:
    """Line in recipe.py of the first body line containing ``needle``."""
    lines = textwrap.dedent(body).splitlines()
    idx = next(i for i, t in enumerate(lines) if needle in t)
    return HEADER.count("\n") + 1 + idx


def rewrite(r: ResolvedRecipe, path: str):
    hits = [w for w in r.rewrites if w.path == path]
    assert hits, f"no rewrite recorded for {path}: {[w.path for w in r.rewrites]}"
    return hits[-1]


def test_mixed_precision_string_preset_overwrites_ddp_grad_reduce(tmp_path):
    body = """\
    import torch
    cfg.mixed_precision = "bf16_mixed"
    cfg.ddp.grad_reduce_in_fp32 = False
    cfg.model.pipeline_dtype = None
    cfg.model.params_dtype = torch.float32  # Bridge's conversion gave bf16 (config.json dtype)
    """
    r = resolve_body(tmp_path, body)
    f = r.fields["ddp.grad_reduce_in_fp32"]
    assert (f.value, f.origin) == (True, "runtime")
    assert r.pre_runtime["ddp.grad_reduce_in_fp32"] is False
    w = rewrite(r, "ddp.grad_reduce_in_fp32")
    assert (w.old, w.new) == (False, True) and "mixed_precision" in w.reason
    # the user is pointed at a line in their file
    assert f.anchor.path == "recipe.py"
    # the preset string itself is resolved to the config object
    assert r.section_class("mixed_precision").endswith("MixedPrecisionConfig")
    assert r.get("model.params_dtype") == "torch.bfloat16"
    assert r.fields["model.params_dtype"].origin == "runtime"
    assert rewrite(r, "model.params_dtype").old == "torch.float32"
    assert r.get("optimizer.bf16") is True
    # pipeline_dtype=None is replaced by the preset's bf16 (training/mixed_precision.py setup())
    assert r.get("model.pipeline_dtype") == "torch.bfloat16"


def test_mixed_precision_object_preset_same_as_string(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = bf16_mixed()
    cfg.ddp.grad_reduce_in_fp32 = False
    """)
    assert r.get("ddp.grad_reduce_in_fp32") is True
    assert r.fields["ddp.grad_reduce_in_fp32"].origin == "runtime"


def test_mixed_precision_explicit_field_wins_over_preset_default(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = bf16_mixed()
    cfg.mixed_precision.grad_reduce_in_fp32 = False
    """)
    assert r.get("ddp.grad_reduce_in_fp32") is False


def test_mixed_precision_none_leaves_sections_alone(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = None
    cfg.ddp.grad_reduce_in_fp32 = False
    """)
    assert r.get("ddp.grad_reduce_in_fp32") is False
    assert r.fields["ddp.grad_reduce_in_fp32"].origin == "recipe"


def test_unknown_mixed_precision_preset_makes_dtypes_unknown(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = "no_such_preset_mixed"
    """)
    assert not r.known("model.params_dtype")
    assert not r.known("ddp.grad_reduce_in_fp32")


def test_mixed_precision_fp8_param_setattr_sync(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = bf16_mixed()
    cfg.mixed_precision.fp8_param = True
    """)
    assert r.get("mixed_precision.fp8_param_gather") is True
    assert r.get("ddp.fp8_param_gather") is True


def test_distributed_optimizer_or_sync(tmp_path):
    body = """\
    cfg.ddp.use_distributed_optimizer = False
    cfg.optimizer.use_distributed_optimizer = True
    """
    r = resolve_body(tmp_path, body)
    f = r.fields["ddp.use_distributed_optimizer"]
    assert (f.value, f.origin) == (True, "runtime")
    assert r.pre_runtime["ddp.use_distributed_optimizer"] is False
    w = rewrite(r, "ddp.use_distributed_optimizer")
    assert "OR-sync" in w.reason and "config.py:1945" in w.reason
    assert r.get("optimizer.use_distributed_optimizer") is True


def test_distributed_optimizer_off_when_both_off(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.ddp.use_distributed_optimizer = False
    cfg.optimizer.use_distributed_optimizer = False
    """)
    assert r.get("ddp.use_distributed_optimizer") is False
    assert r.get("optimizer.use_distributed_optimizer") is False
    assert r.fields["ddp.use_distributed_optimizer"].origin == "recipe"


def test_overlap_param_gather_or_sync(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.comm_overlap = None
    cfg.ddp.overlap_param_gather = True
    cfg.optimizer.overlap_param_gather = False
    """)
    assert r.get("optimizer.overlap_param_gather") is True
    assert r.fields["optimizer.overlap_param_gather"].origin == "runtime"


def test_sequence_parallel_dropped_at_tp1(tmp_path):
    body = """\
    cfg.comm_overlap = None
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.sequence_parallel = True
    """
    r = resolve_body(tmp_path, body)
    f = r.fields["model.sequence_parallel"]
    assert (f.value, f.origin) == (False, "runtime")
    assert r.pre_runtime["model.sequence_parallel"] is True
    assert "TP=1" in rewrite(r, "model.sequence_parallel").reason


def test_sequence_parallel_kept_at_tp2(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.sequence_parallel = True
    """)
    assert r.get("model.sequence_parallel") is True
    assert r.fields["model.sequence_parallel"].origin == "recipe"


def test_null_tokenizer_vocab_replaces_model_vocab(tmp_path):
    body = """\
    cfg.tokenizer.tokenizer_type = "NullTokenizer"
    cfg.tokenizer.vocab_size = 50000
    cfg.tokenizer.use_tokenizer_vocab_size = True
    """
    r = resolve_body(tmp_path, body)
    f = r.fields["model.vocab_size"]
    assert (f.value, f.origin) == (50000, "runtime")
    assert "setup.py:681" in rewrite(r, "model.vocab_size").reason
    assert r.get("model.should_pad_vocab") is True


def test_hf_tokenizer_vocab_is_unknown_when_forced(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.tokenizer.tokenizer_type = "HuggingFaceTokenizer"
    cfg.tokenizer.tokenizer_model = "meta-llama/Meta-Llama-3-8B"
    cfg.tokenizer.use_tokenizer_vocab_size = True
    """)
    assert not r.known("model.vocab_size")


def test_model_seq_length_synced_from_dataset(tmp_path):
    body = """\
    cfg.model.seq_length = 4096
    cfg.dataset.seq_length = 16384
    """
    r = resolve_body(tmp_path, body)
    f = r.fields["model.seq_length"]
    assert (f.value, f.origin) == (16384, "runtime")
    assert r.pre_runtime["model.seq_length"] == 4096
    assert "sync_model_dataset_sequence_length" in rewrite(r, "model.seq_length").reason
    # the anchor points at the dataset assignment that caused it
    assert f.anchor.line == body_line(body, "dataset.seq_length")


def test_comm_overlap_tp_overlap_dropped_below_tp2(tmp_path):
    body = """\
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.sequence_parallel = False
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    """
    r = resolve_body(tmp_path, body)
    # Bridge drops TP overlap on its private copy: the model gets False (its default here, so no
    # rewrite is recorded) while cfg.comm_overlap keeps the user's True.
    assert r.get("model.tp_comm_overlap") is False
    assert r.get("comm_overlap.tp_comm_overlap") is True


def test_comm_overlap_user_field_is_not_rewritten(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.model.tensor_model_parallel_size = 1
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    """)
    assert r.get("comm_overlap.tp_comm_overlap") is True
    assert r.get("model.tp_comm_overlap") is False


def test_comm_overlap_tp_overlap_kept_and_copied(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.sequence_parallel = True
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.virtual_pipeline_model_parallel_size = 2
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    """)
    assert r.get("model.tp_comm_overlap") is True
    assert r.fields["model.tp_comm_overlap"].origin == "runtime"
    # PP>1 with VPP>1: overlap_p2p_comm on, batch_p2p_comm off (comm_overlap.py:455)
    assert r.get("model.overlap_p2p_comm") is True
    assert r.get("model.batch_p2p_comm") is False


def test_comm_overlap_pp_without_vpp_batches_p2p(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.virtual_pipeline_model_parallel_size = None
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    """)
    assert r.get("model.overlap_p2p_comm") is False
    assert r.get("model.batch_p2p_comm") is True


def test_comm_overlap_dp_overlap_needs_world_size(tmp_path):
    body = """\
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.pipeline_model_parallel_size = 1
    cfg.model.context_parallel_size = 1
    cfg.ddp.use_distributed_optimizer = True
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    """
    unknown_ws = resolve_body(tmp_path, body)
    assert not unknown_ws.known("ddp.overlap_grad_reduce")
    r = resolve_body(tmp_path, body, world_size=8)  # DP = 4
    assert r.get("ddp.overlap_grad_reduce") is True
    assert r.get("ddp.bucket_size") == 128 * 1024 * 1024
    assert r.fields["ddp.bucket_size"].origin == "runtime"
    dp1 = resolve_body(tmp_path, body, world_size=2)  # DP = 1
    assert dp1.get("ddp.overlap_grad_reduce") is False


def test_runtime_off_keeps_recipe_values(tmp_path):
    r = resolve_body(tmp_path, """\
    cfg.mixed_precision = "bf16_mixed"
    cfg.ddp.grad_reduce_in_fp32 = False
    """, apply_runtime=False)
    assert r.get("ddp.grad_reduce_in_fp32") is False
    assert not r.rewrites
