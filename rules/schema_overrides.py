"""MBM6xx: config schema and YAML / --set overrides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef, entry_for, override_entries
from mbmem_lint.diagnostics import Edit
from mbmem_lint.parse.override_types import OverrideEntry
from mbmem_lint.resolve.resolved import is_known

from ._common import closest, fix_rename, py
from .precision_optimizer import MP_NAMES

# Fields that moved or never existed, with where the value belongs: SchedulerConfig has no learning
# rates (megatron/training/config/training_config.py:165; they are OptimizerConfig.lr/min_lr), and
# MCore 0.19.2 has no moe_a2a_overlap or offload_optimizer_states. Bridge 0.6.2's own recipes write
# scheduler.max_lr 31 times and model.moe_a2a_overlap 25 times.
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
        if ctx.r.partial and section == "model":
            owner = "any model provider"  # a lone override file: the recipe's provider class is not known
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
                entry = entry_for(ctx, w)
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
            entry = entry_for(ctx, w)
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
)


def _field_schema(owner: str, name: str) -> Any:
    try:
        from mbmem_lint.resolve.schema import Schema

        cls = Schema.load().get(owner)
    except (FileNotFoundError, OSError):
        return None
    return cls.fields.get(name) if cls is not None else None


def _number_text(value: str, annotation: str) -> str | None:
    """YAML for a quoted value that is plainly what the annotation wants (``"4"`` for an int): written
    unquoted, YAML must read it as that same value (``"010"`` unquoted is octal 8, so it gets no fix)."""
    from mbmem_lint.parse.yaml_overrides import plain_scalar
    from mbmem_lint.resolve.field_types import accepts

    for candidate in (value.strip(), value.strip().lower()):
        try:
            parsed: Any = {"true": True, "false": False}.get(candidate)
            if parsed is None:
                parsed = float(candidate) if any(c in candidate for c in ".e") else int(candidate)
        except ValueError:
            continue
        resolved, as_yaml = plain_scalar(candidate)
        if not resolved or type(as_yaml) is not type(parsed) or as_yaml != parsed:
            continue
        if accepts(annotation, parsed):
            return candidate
    return None


def _override_types(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.r.overrides:
        return  # only override values are set without conversion; Python code is checked by its author's tools
    from mbmem_lint.resolve.field_types import accepts, kind_of

    for w in ctx.r.writes:
        if w.origin not in ("yaml", "cli") or not w.valid_field or not w.owner_class or not is_known(w.value):
            continue
        if isinstance(w.value, dict) and "_target_" in w.value:
            continue  # an object instantiated from _target_: MBM606 checks its class
        name = w.path.rsplit(".", 1)[-1]
        fs = _field_schema(w.owner_class, name)
        if fs is None or accepts(fs.type, w.value) is not False:
            continue
        owner = w.owner_class.rsplit(".", 1)[-1]
        if ctx.r.partial and w.path.startswith("model."):
            owner = "the model provider"  # a lone override file: GPTModelProvider stands in for any provider
        fix = None
        entry = entry_for(ctx, w)
        if entry is not None and isinstance(w.value, str) and (text := _number_text(w.value, fs.type)) is not None:
            def build(entry: OverrideEntry = entry, text: str = text) -> list[Edit]:
                from mbmem_lint.fix import edits

                return list(edits.yaml_set_value(entry, text, ctx.sources))

            fix = ctx.fix(f"write {text} unquoted", "unsafe", build)
        kind = kind_of(w.value)
        yield Finding(f"{w.path} = {w.value!r} is {'an' if kind == 'int' else 'a'} {kind}, but the field is `{fs.type}` "
                      f"({owner}): Bridge sets override values as they are, without conversion", [w.path],
                      location=w.location, fix=fix)


MBM605 = Rule(
    code="MBM605", name="override-value-type", severity="error",
    summary="A YAML / --set value whose type the field's annotation does not accept (\"4\" for an int, 1 for a Literal of names).",
    fields=("<any>",),
    rationale=("Bridge merges overrides into an untyped OmegaConf copy of the config and setattr()s each value on "
               "the dataclass; only torch dtypes and a few callables are converted back. A quoted number stays a "
               "string, so `tensor_model_parallel_size: \"4\"` fails wherever MCore computes with it, and a value "
               "outside a Literal is kept as given."),
    sources=(SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:46-80", "silent-rewrite", "OmegaConf.create(base_dict): an untyped DictConfig, merged with the YAML"),
             SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:454-520", "runtime-crash", "setattr(config_obj, key, value) with no conversion but torch.dtype / callables")),
    check=_override_types,
    valid=(Example(py("cfg.model.seq_length = 4096"), yaml="model:\n  tensor_model_parallel_size: 2\n"),),
    invalid=(Example(py("cfg.model.seq_length = 4096"), yaml='model:\n  tensor_model_parallel_size: "2"  # <-\n'),),
    fix_applicability="unsafe", fix_description="Write a quoted number or boolean unquoted.",
    fix_safety="The field receives a number (or bool) instead of a string: the run changes, from failing or misbehaving to using the value.",
)


def _target_names(module: str) -> set[str] | None:
    """Top-level names a summarised Megatron Bridge module defines or imports; None when the library
    summary does not hold it, or it star-imports (its names cannot be listed)."""
    try:
        from mbmem_lint.resolve.library import LibrarySummary

        library = LibrarySummary.load()
    except (FileNotFoundError, OSError):
        return None
    if not library.has_module(module):
        return None
    from mbmem_lint.resolve.project import top_level_bindings

    counts = top_level_bindings(library.module_body(module) or [])
    return set(counts) if counts is not None else None


def _declared_classes(section: str) -> list[str] | None:
    """Qualified classes a ConfigContainer section is declared as (None: not a section or no class)."""
    try:
        from mbmem_lint.resolve.schema import CONFIG_CONTAINER, MODEL_BASES, Schema

        schema = Schema.load()
    except (FileNotFoundError, OSError):
        return None
    container = schema.get(CONFIG_CONTAINER)
    fs = container.fields.get(section) if container is not None else None
    if fs is None:
        return None
    if section == "model":
        return list(MODEL_BASES)
    import re

    out = []
    for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", fs.type):
        found = schema.find(ident, module_hint=container.module) if container is not None else None
        if found is not None:
            out.append(found.qualname)
    return out or None


def _bad_targets(ctx: RuleContext) -> Iterator[Finding]:
    from mbmem_lint.resolve.schema import Schema

    for e in override_entries(ctx):
        target = e.value.get("_target_") if isinstance(e.value, dict) else None
        if not isinstance(target, str) or e.op == "delete":
            continue
        schema = Schema.load()
        cls = schema.get(target) or schema.find(target)
        if cls is None and target.startswith("megatron."):
            module, _, name = target.rpartition(".")
            names = _target_names(module)
            if names is not None and name not in names:
                hint = closest(name, sorted(names))
                yield Finding(f"_target_ {target!r}: {module} has no {name!r}; Bridge's instantiate fails, logs a "
                              "warning and applies the other keys to the object already there"
                              + (f"; did you mean {module}.{hint[0]!r}?" if hint else ""), [e.path], location=e.location)
            continue
        declared = _declared_classes(e.path) if cls is not None and "." not in e.path else None
        if cls is None or declared is None:
            continue
        if not any(schema.is_subclass(cls.qualname, d) for d in declared):
            kinds = " or ".join(sorted({d.rsplit(".", 1)[-1] for d in declared}))
            yield Finding(f"_target_ {target!r} builds a {cls.name}, but cfg.{e.path} is declared {kinds}: Bridge instantiates "
                          "and sets it anyway, and training fails where the section is used", [e.path], location=e.location)


MBM606 = Rule(
    code="MBM606", name="override-target-class", severity="error",
    summary="A YAML / --set `_target_` that does not exist in Megatron Bridge, or builds the wrong class for its section.",
    fields=("<any>",),
    rationale=("Bridge instantiates a mapping with `_target_` and setattr()s the result. A class that does not exist "
               "makes instantiate fail: Bridge logs a warning and merges the remaining keys into the object already "
               "there (and warns about `_target_` itself), so the intended object is never built. A class of the wrong "
               "kind (a LoRA config as the optimizer) is set as it is and fails later."),
    sources=(SourceRef("megatron/bridge/training/utils/omegaconf_utils.py:477-488", "no-effect", "Failed to instantiate ... from _target_ (warning), then the keys are applied to the existing object"),),
    check=_bad_targets,
    scope="overrides",
    valid=(Example(py("cfg.model.seq_length = 4096", base="llama3_8b_peft_config", task="peft"),
                   yaml="peft:\n  _target_: megatron.bridge.peft.lora.LoRA\n  dim: 8\n"),),
    invalid=(Example(py("cfg.model.seq_length = 4096"),
                     yaml="optimizer:\n  _target_: megatron.bridge.peft.lora.LoRA  # <-\n  dim: 8\n"),
             Example(py("cfg.model.seq_length = 4096"),
                     yaml="mixed_precision:\n  _target_: megatron.bridge.training.mixed_precision.bf16_mixd  # <-\n")),
)


RULES = [MBM601, MBM602, MBM603, MBM604, MBM605, MBM606]
