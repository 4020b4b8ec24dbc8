"""MBM6xx: config schema and YAML / --set overrides."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef, override_entries
from mbmem_lint.diagnostics import Edit
from mbmem_lint.parse.yaml_overrides import OverrideEntry
from mbmem_lint.resolve.resolved import Write

from ._common import closest, fix_rename, py
from .precision_optimizer import MP_NAMES

# Fields that moved or never existed, with where the value belongs (rules-from-source §1.11 of recipe-shapes).
MOVED = {
    "scheduler.max_lr": "optimizer.lr",
    "scheduler.min_lr": "optimizer.min_lr",
    "model.moe_a2a_overlap": "comm_overlap.overlap_moe_expert_parallel_comm",
    "optimizer.offload_optimizer_states": "optimizer.optimizer_cpu_offload",
}
_SKIP = {"peft.sequence_parallel_input_regather"}  # MBM503 reports it for CanonicalLoRA/DoRA


def _schema_suggestions(owner: str | None, name: str) -> list[str]:
    if not owner:
        return []
    try:
        from mbmem_lint.resolve.schema import Schema

        return list(Schema.load().closest_fields(owner, name, 1))
    except Exception:
        return []


def _entry_for(ctx: RuleContext, w: Write) -> OverrideEntry | None:
    for of in ctx.overrides:
        for e in of.entries:
            if e.location == w.location or e.key_location == w.location:
                return e
    return None


def _unknown_fields(ctx: RuleContext) -> Iterator[Finding]:
    seen: set[tuple[str, int, int]] = set()
    for w in ctx.invalid_writes():
        if w.path in _SKIP or w.origin not in ("recipe", "yaml", "cli"):
            continue
        key = (w.location.path, w.location.line, w.location.column)
        if key in seen:
            continue
        seen.add(key)
        section, _, name = w.path.rpartition(".")
        owner = (w.owner_class or "").rsplit(".", 1)[-1] or section or "ConfigContainer"
        hints = _schema_suggestions(w.owner_class, name)
        moved = MOVED.get(w.path)
        msg = f"{owner} has no field {name!r}: the assignment creates a dead attribute and does nothing"
        if w.origin in ("yaml", "cli"):
            msg = f"override key {w.path!r} does not exist on {owner}: Bridge skips it with a warning"
        fix = None
        if moved:
            msg += f"; the value belongs in {moved}"
        elif hints:
            msg += f"; did you mean {hints[0]!r}?"
            if w.origin in ("yaml", "cli"):
                entry = _entry_for(ctx, w)
                if entry is not None:
                    new_key = ".".join([*w.path.split(".")[:-1], hints[0]])

                    def build(entry: OverrideEntry = entry, new_key: str = new_key) -> list[Edit]:
                        from mbmem_lint.fix import edits

                        return list(edits.yaml_rename_key(entry, new_key, ctx.sources))

                    fix = ctx.fix(f"rename to {hints[0]}", "unsafe", build)
            else:
                fix = fix_rename(ctx, w, hints[0], f"rename to {hints[0]}")
        loc = w.statement if (w.statement is not None and not w.statement.in_library) else w.anchor
        if w.origin in ("yaml", "cli"):
            entry = _entry_for(ctx, w)
            loc = entry.key_location if entry is not None else w.location
        yield Finding(msg, [w.path], location=loc, fix=fix)


MBM601 = Rule(
    code="MBM601", name="unknown-config-field", severity="error",
    summary="Assignment or override key for a field that does not exist (with did-you-mean).",
    fields=("<any>",),
    rationale=("Config classes are plain dataclasses: `cfg.scheduler.max_lr = 3e-4` silently adds an attribute nobody reads, "
               "and Bridge's override loader skips unknown YAML/--set keys with a log warning. A typo such as "
               "`recompute_granulariy` turns a memory setting into a no-op."),
    sources=(SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:469-474", "no-effect", "Key ... not found in config object ... Skipping."),
             SourceRef("megatron/core/optimizer/optimizer_config.py:209", "no-effect", "learning rates live on OptimizerConfig (lr, min_lr)")),
    check=_unknown_fields,
    valid=(Example(py('cfg.model.recompute_granularity = "selective"'), yaml="model:\n  recompute_granularity: selective\n"),),
    invalid=(
        Example(py('cfg.model.recompute_granulariy = "selective"  # <-')),
        Example(py('cfg.model.tensor_model_parallel_size = 1'), yaml="model:\n  recompute_granulariy: selective  # <-\n"),
        Example(py("cfg.scheduler.max_lr = 3e-4  # <-")),
    ),
    fix_applicability="unsafe", fix_description="Rename to the closest existing field (the assignment starts to take effect).",
    fix_safety='Bridge skips the unknown key today; after the rename the value takes effect.',
    references=("rules-from-source §2.P, §5 rule 30; recipe-shapes §1.11",),
)


def _delete_noop(ctx: RuleContext) -> Iterator[Finding]:
    for e in override_entries(ctx):
        if e.op == "delete":
            def build(entry: OverrideEntry = e) -> list[Edit]:
                from mbmem_lint.fix import edits

                return list(edits.yaml_remove_entry(entry, ctx.sources))

            yield Finding(f"'~{e.path}' does not reset the field: Bridge applies only keys that are present, so the recipe value stays",
                          [e.path], location=e.key_location, fix=ctx.fix("remove the no-op deletion", "safe", build))


MBM602 = Rule(
    code="MBM602", name="override-delete-has-no-effect", severity="warning",
    summary="`~key` in a YAML override or --set does nothing.",
    fields=("<any>",),
    rationale=("Deleting a key removes it from the OmegaConf tree; _apply_overrides then only walks keys that are present, so "
               "the dataclass keeps the recipe's value. To reset a field, set it explicitly (e.g. `key: null`)."),
    sources=(SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:454-520", "no-effect", "only present keys are applied"),),
    check=_delete_noop,
    scope="overrides",
    valid=(Example(py("cfg.model.seq_length = 8192"), yaml="model:\n  seq_length: 4096\n"),),
    invalid=(Example(py("cfg.model.seq_length = 8192"), yaml="model:\n  ~seq_length: null  # <-\n"),),
    fix_applicability="safe", fix_description="Remove the entry (or set the value you want explicitly).",
    fix_safety='Bridge applies only keys that are present, so the `~key` deletion never did anything: removing it leaves the run unchanged.',
    references=("recipe-shapes §4.4",),
)


def _mp_name(ctx: RuleContext) -> Iterator[Finding]:
    mp = ctx.get("mixed_precision")
    if isinstance(mp, str) and mp not in MP_NAMES:
        hint = closest(mp, sorted(MP_NAMES))
        yield Finding(f"unknown mixed-precision recipe {mp!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""), ["mixed_precision"])


MBM603 = Rule(
    code="MBM603", name="unknown-mixed-precision-recipe", severity="error",
    summary="cfg.mixed_precision names a recipe that is not registered.",
    fields=("mixed_precision",),
    rationale="A string is looked up in MIXED_PRECISION_RECIPES when training starts; an unknown name raises ValueError.",
    sources=(SourceRef("megatron/bridge/training/mixed_precision.py:445-461", "raise", "unknown mixed precision recipe"),),
    check=_mp_name,
    valid=(Example(py('cfg.mixed_precision = "bf16_with_fp8_current_scaling_mixed"')),),
    invalid=(Example(py('cfg.mixed_precision = "bf16_fp8_current_scaling"  # <-')),),
    references=("rules-from-source §1.4",),
)

_DEPRECATED: dict[str, str] = {
    "model.enable_cuda_graph": "cuda_graph_impl='local'",
    "model.external_cuda_graph": "cuda_graph_impl='transformer_engine'",
    "model.moe_layer_recompute": "recompute_granularity='selective' with 'moe' in recompute_modules",
    "ddp.use_custom_fsdp": "ddp.use_megatron_fsdp",
}


def _deprecated(ctx: RuleContext) -> Iterator[Finding]:
    for path, repl in _DEPRECATED.items():
        w = ctx.last_write(path)
        if w is not None and w.origin not in ("default", "runtime") and w.value is True:
            yield Finding(f"{path} is deprecated; use {repl}", [path], location=w.anchor)


MBM604 = Rule(
    code="MBM604", name="deprecated-config-field", severity="warning",
    summary="A deprecated switch is used (enable_cuda_graph, external_cuda_graph, moe_layer_recompute, use_custom_fsdp).",
    fields=tuple(_DEPRECATED),
    rationale=("MCore migrates these with a deprecation warning and different interactions: e.g. enable_cuda_graph gets around "
               "Bridge's local-graph guard as a per-layer 'inference' graph."),
    sources=(SourceRef("megatron/core/transformer/transformer_config.py:2365-2381", "silent-rewrite", "impl set to local / transformer_engine"),
             SourceRef("megatron/core/transformer/transformer_config.py:1835-1846", "silent-rewrite", "--moe-layer-recompute is deprecated")),
    check=_deprecated,
    valid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True')),),
    invalid=(Example(py("cfg.model.moe_layer_recompute = True  # <-")),),
    references=("rules-from-source §2.I, §2.E",),
)


RULES = [MBM601, MBM602, MBM603, MBM604]
