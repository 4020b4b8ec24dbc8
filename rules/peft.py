"""MBM5xx: PEFT (LoRA / DoRA / CanonicalLoRA), including LoRA + sequence-parallel input re-gather."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef
from mbmem_lint.estimate.inputs import regather_eligible_targets
from mbmem_lint.resolve.resolved import is_known

from ._common import PEFT, cuda_graph_impl, fix_set, peft_class, py

REGATHER = "peft.sequence_parallel_input_regather"
REGATHER_NOTE = ("`LoRA.sequence_parallel_input_regather` appeared in Megatron Bridge 0.6; on older releases the "
                 "adapter always keeps the gathered input and the keyword is an unknown field (MBM601).")
LORA_IMPORT = "from megatron.bridge.peft.lora import LoRA"
DORA_IMPORT = "from megatron.bridge.peft.dora import DoRA"
_DEFAULT_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
SAVING_NOTE = ("measured (MB PR #4581, H100): Qwen3-8B TP2 seq 8192 47.5→42.8 GB (−4.7 GB, −10%, −6.7% throughput); "
               "Qwen3-30B-A3B TP4/EP4 −1.6 GB (−5.2%); GPT-OSS-120B TP2/EP8 −0.8 GB (−1.6%)")


def _targets(ctx: RuleContext) -> list[str] | None:
    v = ctx.get("peft.target_modules")
    if not is_known(v):
        return None
    if v is None:
        return list(_DEFAULT_TARGETS)
    return [str(t) for t in v] if isinstance(v, (list, tuple)) else None


def _blockers(ctx: RuleContext) -> list[str]:
    out = []
    tp = ctx.tp()
    if tp is not None and tp <= 1:
        out.append("TP=1")
    if ctx.is_off("model.sequence_parallel"):
        out.append("sequence_parallel is off")
    impl = cuda_graph_impl(ctx)
    if impl not in (None, "none"):
        out.append(f"CUDA graphs are on (cuda_graph_impl={impl!r})")
    if ctx.value_is("model.recompute_granularity", "full"):
        out.append("full recompute")
    if ctx.is_true("model.cpu_offloading") and not ctx.is_off("model.cpu_offloading_activations"):
        out.append("CPU activation offloading")
    targets = _targets(ctx)
    if targets is not None:
        elig = regather_eligible_targets(targets)
        if ctx.value_is("model.recompute_granularity", "selective") and "mlp" in (ctx.as_list("model.recompute_modules") or []):
            elig = [t for t in elig if not t.endswith("linear_fc1")]
            if not elig:
                out.append("selective 'mlp' recompute covers linear_fc1")
        if not regather_eligible_targets(targets):
            out.append("no linear_qkv/linear_fc1 (non-expert) targets")
    return out


def _suggest_regather(ctx: RuleContext) -> Iterator[Finding]:
    if peft_class(ctx) not in ("LoRA", "VLMLoRA") or not ctx.is_off(REGATHER):
        return
    tp = ctx.tp()
    if tp is None or tp <= 1 or not ctx.is_true("model.sequence_parallel") or _blockers(ctx):
        return
    if _targets(ctx) is None:
        return
    yield Finding(
        f"LoRA with sequence parallelism (TP={tp}) keeps the full gathered LayerNorm output for LoRA-A until backward; "
        f"LoRA(sequence_parallel_input_regather=True) keeps only the S/TP shard ({SAVING_NOTE})",
        ["peft", REGATHER, "model.sequence_parallel"],
        fix=fix_set(ctx, REGATHER, "True", "set sequence_parallel_input_regather=True on the LoRA config"),
        notes=["Trades memory for an asynchronous re-gather in backward; numerics are unchanged (parity-tested)."])


MBM501 = Rule(
    code="MBM501", name="lora-sequence-parallel-without-input-regather", severity="info",
    summary="LoRA + SP + TP>1 without sequence_parallel_input_regather (activation memory left on the table).",
    fields=("peft", REGATHER, "model.sequence_parallel", "model.tensor_model_parallel_size"),
    rationale=("The default path keeps the all-gathered LayerNorm output alive for the trainable LoRA-A GEMM of linear_qkv and "
               "linear_fc1. Re-gather keeps only the sequence shard and re-gathers in backward, overlapped with dgrad. "
               + SAVING_NOTE + "."),
    sources=(SourceRef("megatron/bridge/peft/utils.py:597-624", "cost", "adapters keep the gathered input without re-gather"),
             SourceRef("megatron/bridge/peft/lora.py:101-115", "cost", "sequence_parallel_input_regather defaults to False")),
    check=_suggest_regather,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.peft = LoRA(dim=8, alpha=16, sequence_parallel_input_regather=True)",
                      base=PEFT, task="peft", gpus=2, imports=LORA_IMPORT)),
           Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.peft = LoRA(dim=8, alpha=16)",
                      base=PEFT, task="peft", gpus=2, imports=LORA_IMPORT),
                   settings={"megatron-bridge-version": "0.5.1"}, note="Megatron Bridge 0.5 has no input re-gather")),
    invalid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.peft = LoRA(dim=8, alpha=16)  # <-",
                        base=PEFT, task="peft", gpus=2, imports=LORA_IMPORT)),),
    fix_applicability="unsafe", fix_description="Add sequence_parallel_input_regather=True to the LoRA config.",
    fix_safety='Numerics are unchanged, but the run keeps a smaller activation and re-gathers it in backward: different memory and communication.',
    references=('Megatron Bridge PR #4581 (adds sequence_parallel_input_regather; on H100: Qwen3-8B TP2 47.5 -> 42.8 GB at -6.7% throughput, Qwen3-30B-A3B -1.6 GB, GPT-OSS-120B -0.8 GB)',),
    bridge_since="0.6.0", bridge_note=REGATHER_NOTE,
)


def _never_applies(ctx: RuleContext) -> Iterator[Finding]:
    if peft_class(ctx) not in ("LoRA", "VLMLoRA") or not ctx.is_true(REGATHER):
        return
    blockers = _blockers(ctx)
    if blockers:
        yield Finding("sequence_parallel_input_regather=True never applies here (" + "; ".join(blockers)
                      + "): the adapter silently falls back to the default path and saves no memory", [REGATHER])


MBM502 = Rule(
    code="MBM502", name="lora-input-regather-never-applies", severity="info",
    summary="sequence_parallel_input_regather=True where no adapter is eligible (TP=1, SP off, CUDA graphs, full recompute, ...).",
    fields=(REGATHER, "model.sequence_parallel", "model.tensor_model_parallel_size", "model.cuda_graph_impl", "peft.target_modules"),
    rationale=("Each adapter checks an eligibility chain at every forward and falls back silently (one debug log) when a gate "
               "fails: TP>1, SP on, column-parallel linear_qkv/linear_fc1 non-expert targets, no CUDA graphs, no full "
               "recompute, no CPU activation offload, no selective 'mlp' recompute for fc1."),
    sources=(SourceRef("megatron/bridge/peft/utils.py:1082-1132", "no-effect", "silent fallback to the default gather path"),),
    check=_never_applies,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.peft = LoRA(dim=8, sequence_parallel_input_regather=True)",
                      base=PEFT, task="peft", gpus=2, imports=LORA_IMPORT)),),
    invalid=(Example(py("cfg.peft = LoRA(dim=8, sequence_parallel_input_regather=True)  # <-", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT)),),
    references=('Megatron Bridge PR #4581 (the re-gather and its eligibility gates)',),
    bridge_since="0.6.0", bridge_note=REGATHER_NOTE,
)


def _unsupported_peft(ctx: RuleContext) -> Iterator[Finding]:
    cls = peft_class(ctx)
    if cls not in ("CanonicalLoRA", "DoRA"):
        return
    for w in ctx.writes(REGATHER):
        yield Finding(f"{cls} has no sequence_parallel_input_regather field (TypeError as a keyword; skipped with a warning in YAML)",
                      [REGATHER, "peft"], location=w.anchor)
        return


MBM503 = Rule(
    code="MBM503", name="input-regather-on-unsupported-peft", severity="error",
    summary="sequence_parallel_input_regather passed to CanonicalLoRA or DoRA.",
    fields=(REGATHER, "peft"),
    rationale="Only LoRA/VLMLoRA define the field: a keyword argument raises TypeError, a YAML key is skipped with a warning.",
    sources=(SourceRef("megatron/bridge/peft/dora.py:59-67", "raise", "DoRA dataclass has no such field"),
             SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:469-474", "no-effect", "unknown YAML key skipped")),
    check=_unsupported_peft,
    valid=(Example(py("cfg.peft = DoRA(dim=8)", base=PEFT, task="peft", gpus=1, imports=DORA_IMPORT)),),
    invalid=(Example(py("cfg.peft = DoRA(dim=8, sequence_parallel_input_regather=True)  # <-", base=PEFT, task="peft", gpus=1, imports=DORA_IMPORT)),),
    bridge_since="0.6.0", bridge_note=REGATHER_NOTE,
)


def _pretrained(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.known("peft") or ctx.get("peft") is None:
        return
    if not ctx.known("checkpoint.pretrained_checkpoint") or ctx.get("checkpoint.pretrained_checkpoint"):
        return
    # The checkpoint path is a per-launch value (like data paths): Bridge's own PEFT recipes leave it
    # unset, or set it to None as a placeholder (recipes/common.py), for the launch command to supply.
    # Only an assembled launch config (recipe + YAML / --set overrides) that still lacks it is flagged.
    if not ctx.r.overrides:
        return
    w = ctx.user_write("checkpoint.pretrained_checkpoint")
    where = w.anchor if w is not None and w.origin in ("recipe", "yaml", "cli") else ctx.anchor("peft")
    yield Finding("PEFT requires checkpoint.pretrained_checkpoint and neither the recipe nor the overrides "
                  f"({', '.join(ctx.r.overrides)}) set it: Bridge asserts at startup",
                  ["checkpoint.pretrained_checkpoint", "peft"], location=where)


MBM504 = Rule(
    code="MBM504", name="peft-without-pretrained-checkpoint", severity="warning",
    summary="PEFT without checkpoint.pretrained_checkpoint in a launch config (recipe + YAML/--set overrides).",
    fields=("checkpoint.pretrained_checkpoint", "peft"),
    rationale=("Adapters train on top of frozen pretrained weights; Bridge asserts a pretrained checkpoint path in "
               "validate(). The path is a per-launch value: Bridge's own PEFT recipes leave it unset for the launch "
               "command to supply (`checkpoint.pretrained_checkpoint=...`), so a recipe function alone is not flagged "
               "(that was 78 findings on Bridge's 0.6.2 recipes, all expected usage; `_peft_common` even sets it to None as a "
               "placeholder). It is flagged when YAML/--set overrides are paired with the recipe, i.e. the launch config "
               "is assembled, and still leave it unset."),
    sources=(SourceRef("megatron/bridge/training/config.py:1487-1488", "assert", "PEFT requires a pretrained checkpoint path"),),
    check=_pretrained,
    valid=(
        Example(py('cfg.checkpoint.pretrained_checkpoint = "/models/llama3-8b"', base=PEFT, task="peft", gpus=1)),
        Example(py("cfg.peft = LoRA(dim=8)", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT),
                note="the path comes from the launch command, as in Bridge's own PEFT recipes"),
        Example(py("cfg.peft = LoRA(dim=8)\ncfg.checkpoint.pretrained_checkpoint = None", base=PEFT, task="peft", gpus=1,
                   imports=LORA_IMPORT), note="a placeholder, as in Bridge's _peft_common"),
        Example(py("cfg.peft = LoRA(dim=8)", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT),
                yaml="checkpoint:\n  pretrained_checkpoint: /models/llama3-8b\n"),
    ),
    invalid=(
        Example(py("cfg.peft = LoRA(dim=8)  # <-", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT),
                yaml="train:\n  train_iters: 100\n"),
        Example(py('cfg.peft = LoRA(dim=8)\ncfg.checkpoint.pretrained_checkpoint = None  # <-', base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT),
                yaml="train:\n  train_iters: 100\n"),
    ),
)


def _peft_modules(ctx: RuleContext) -> Iterator[Finding]:
    cls = peft_class(ctx)
    targets = ctx.as_list("peft.target_modules")
    if cls == "CanonicalLoRA" and targets and {"linear_qkv", "linear_fc1"} & set(targets):
        yield Finding("CanonicalLoRA does not support target 'linear_qkv'/'linear_fc1' (use linear_q/k/v, linear_fc1_up/gate)",
                      ["peft.target_modules"])
    elif cls == "DoRA" and ctx.as_str("peft.dropout_position") not in (None, "pre"):
        yield Finding("DoRA only supports dropout_position='pre'", ["peft.dropout_position"])
    elif targets and ctx.as_list("peft.exclude_modules"):
        yield Finding("exclude_modules must be empty when target_modules is set", ["peft.exclude_modules", "peft.target_modules"])


MBM505 = Rule(
    code="MBM505", name="peft-module-selection-invalid", severity="error",
    summary="CanonicalLoRA on fused targets, DoRA with post-dropout, or exclude_modules together with target_modules.",
    fields=("peft.target_modules", "peft.exclude_modules", "peft.dropout_position"),
    rationale="Bridge's PEFT classes assert these when the adapter config is built or applied.",
    sources=(SourceRef("megatron/bridge/peft/canonical_lora.py:277-284", "assert", "Canonical LoRA does not support target 'linear_qkv'"),
             SourceRef("megatron/bridge/peft/dora.py:69-73", "assert", "DoRA only supports pre-adapter dropout"),
             SourceRef("megatron/bridge/peft/module_matcher.py:136-142", "assert", "exclude_modules should be empty when using target_modules")),
    check=_peft_modules,
    valid=(Example(py('cfg.peft = LoRA(target_modules=["linear_qkv", "linear_proj"])', base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT)),),
    invalid=(Example(py('cfg.peft = DoRA(dim=8, dropout_position="post")  # <-', base=PEFT, task="peft", gpus=1, imports=DORA_IMPORT)),),
)


def _normalize_moe(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("peft.normalize_moe_lora"):
        return
    topk, dim = ctx.as_int("model.moe_router_topk"), ctx.as_int("peft.dim")
    if topk is not None and topk <= 0 or (ctx.known("model.moe_router_topk") and ctx.get("model.moe_router_topk") is None):
        yield Finding("normalize_moe_lora needs moe_router_topk > 0", ["peft.normalize_moe_lora", "model.moe_router_topk"])
    elif topk and dim and dim % topk:
        yield Finding(f"LoRA dim={dim} must be divisible by moe_router_topk={topk} with normalize_moe_lora",
                      ["peft.dim", "peft.normalize_moe_lora"])


MBM506 = Rule(
    code="MBM506", name="lora-moe-normalization-dim", severity="error",
    summary="normalize_moe_lora with a LoRA dim not divisible by moe_router_topk.",
    fields=("peft.normalize_moe_lora", "peft.dim", "model.moe_router_topk"),
    rationale="Normalised MoE LoRA splits the rank over the routed experts; Bridge raises when building adapters.",
    sources=(SourceRef("megatron/bridge/peft/utils.py:682-697", "raise", "LoRA dim must be divisible by moe_router_topk"),),
    check=_normalize_moe,
    valid=(Example(py("cfg.peft = LoRA(dim=8)", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT)),),
    invalid=(Example(py("cfg.model.moe_router_topk = 3\ncfg.peft = LoRA(dim=8, normalize_moe_lora=True)  # <-", base=PEFT, task="peft", gpus=1, imports=LORA_IMPORT)),),
    bridge_since="0.5.0", bridge_note=("`LoRA.normalize_moe_lora` appeared in Megatron Bridge 0.5; on 0.4 the keyword is an unknown field (MBM601)."),
)

RULES = [MBM501, MBM502, MBM503, MBM504, MBM505, MBM506]
