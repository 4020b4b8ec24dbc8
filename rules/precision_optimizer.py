"""MBM4xx: precision, optimizer, DDP, comm overlap and Megatron-FSDP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef
from mbmem_lint.resolve.resolved import UNKNOWN, is_known

from ._common import dead_writes, fix_delete_dead, fix_set, fmt, is_fsdp, py

DDP_DO = "ddp.use_distributed_optimizer"
OPT_DO = "optimizer.use_distributed_optimizer"

# MB training/mixed_precision.py:113-157: fields copied from cfg.mixed_precision.
MP_TARGETS: dict[str, tuple[str, ...]] = {
    "model": ("fp16", "bf16", "params_dtype", "pipeline_dtype", "autocast_dtype", "fp8", "fp8_recipe",
              "first_last_layers_bf16", "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_wgrad",
              "fp8_dot_product_attention", "fp8_multi_head_attention", "fp8_param", "fp4", "fp4_recipe", "fp4_param",
              "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"),
    "optimizer": ("fp16", "bf16", "params_dtype", "fp8_recipe", "loss_scale", "initial_loss_scale", "min_loss_scale",
                  "loss_scale_window", "hysteresis", "reuse_grad_buf_for_mxfp8_param_ag"),
    "ddp": ("grad_reduce_in_fp32", "fp8_param_gather", "fp4_param_gather", "reuse_grad_buf_for_mxfp8_param_ag"),
}
# Registered presets (MB training/mixed_precision.py:184-443), fields that differ from MixedPrecisionConfig defaults.
_MP_DEFAULTS: dict[str, Any] = {"grad_reduce_in_fp32": True, "fp8": None, "fp8_recipe": "tensorwise", "fp8_param_gather": False,
                                "fp4": None, "fp4_param_gather": False, "bf16": False, "fp16": False,
                                "reuse_grad_buf_for_mxfp8_param_ag": False, "first_last_layers_bf16": False}
_BF16 = {"bf16": True, "params_dtype": "torch.bfloat16", "pipeline_dtype": "torch.bfloat16"}
_FP16 = {"fp16": True, "params_dtype": "torch.half", "pipeline_dtype": "torch.half", "grad_reduce_in_fp32": False}
MP_PRESETS: dict[str, dict[str, Any]] = {
    "bf16_mixed": _BF16,
    "fp16_mixed": _FP16,
    "bf16_with_fp8_delayed_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "delayed", "fp8_param_gather": True},
    "fp16_with_fp8_delayed_scaling_mixed": {**_FP16, "fp8": "hybrid", "fp8_recipe": "delayed", "fp8_param_gather": True},
    "bf16_with_mxfp8_mixed": {**_BF16, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
                              "reuse_grad_buf_for_mxfp8_param_ag": True},
    "fp16_with_mxfp8_mixed": {**_FP16, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True,
                              "reuse_grad_buf_for_mxfp8_param_ag": True},
    "bf16_with_fp8_current_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "tensorwise", "fp8_param_gather": True,
                                            "first_last_layers_bf16": True},
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "tensorwise",
                                                       "fp8_param_gather": True, "first_last_layers_bf16": True},
    "nanov2_bf16_with_fp8_current_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": True,
                                                   "first_last_layers_bf16": True},
    "fp16_with_fp8_current_scaling_mixed": {**_FP16, "fp8": "hybrid", "fp8_recipe": "tensorwise", "fp8_param_gather": True,
                                            "first_last_layers_bf16": True},
    "bf16_with_fp8_subchannel_scaling_mixed": {**_BF16, "fp8": "e4m3", "fp8_recipe": "blockwise"},
    "fp16_with_fp8_subchannel_scaling_mixed": {**_FP16, "fp8": "e4m3", "fp8_recipe": "blockwise"},
    "bf16_with_nvfp4_mixed": {**_BF16, "fp4": "e2m1", "fp4_param_gather": True},
    "nemotron_3_super_bf16_with_nvfp4_mixed": {**_BF16, "fp4": "e2m1", "fp4_param_gather": True},
    "nemotron_3_ultra_bf16_with_nvfp4_mixed": {**_BF16, "fp4": "e2m1", "fp4_param_gather": True},
}
MP_NAMES = set(MP_PRESETS) | {n.replace("_", "-") for n in MP_PRESETS}


def mp_value(ctx: RuleContext, field: str) -> Any:
    """The value ``cfg.mixed_precision`` copies for ``field``; UNKNOWN when not known."""
    mp = ctx.get("mixed_precision")
    if not is_known(mp) or mp is None:
        return UNKNOWN
    path = f"mixed_precision.{field}"
    if path in ctx.r.fields:
        return ctx.get(path)
    if isinstance(mp, str):
        preset = MP_PRESETS.get(mp.replace("-", "_"))
        if preset is None:
            return UNKNOWN
        if field in preset:
            return preset[field]
        return _MP_DEFAULTS.get(field, UNKNOWN)
    return UNKNOWN


def _opg_without_distopt(ctx: RuleContext) -> Iterator[Finding]:
    if not (ctx.is_true("ddp.overlap_param_gather") or ctx.is_true("optimizer.overlap_param_gather")):
        return
    if is_fsdp(ctx) is not False or ctx.is_true("optimizer.use_layer_wise_distributed_optimizer"):
        return
    dp = ctx.dp()
    if ctx.is_off(DDP_DO) and ctx.is_off(OPT_DO) and (dp is None or dp > 1):
        yield Finding("overlap_param_gather=True without the distributed optimizer (or FSDP): Bridge accepts it and the first "
                      "forward pass fails in the param-sync hook", ctx.recent(["ddp.overlap_param_gather", DDP_DO, OPT_DO]),
                      fix=fix_set(ctx, "ddp.overlap_param_gather", "False", "turn overlap_param_gather off", "unsafe"))
    elif ctx.is_off("ddp.overlap_grad_reduce"):
        yield Finding("overlap_param_gather=True without overlap_grad_reduce (Megatron-LM rejects this combination)",
                      ctx.recent(["ddp.overlap_param_gather", "ddp.overlap_grad_reduce"]), severity="warning")


MBM401 = Rule(
    code="MBM401", name="overlap-param-gather-without-distributed-optimizer", severity="error",
    summary="overlap_param_gather without a distributed optimizer/FSDP (error) or without overlap_grad_reduce (warning).",
    fields=("ddp.overlap_param_gather", "optimizer.overlap_param_gather", DDP_DO, OPT_DO, "ddp.overlap_grad_reduce"),
    rationale=("Bridge does not check it; with DP>1 MCore's forward pre-hook takes the layer-wise param-sync path, "
               "whose bucket sizes are unset, and raises TypeError on the first step. Megatron-LM's CLI asserts both."),
    sources=(
        SourceRef("megatron/core/distributed/param_and_grad_buffer.py:389-433", "runtime-crash", "start_param_sync on the legacy layer-wise path"),
        SourceRef("megatron/training/arguments.py:990-995", "assert", "--overlap-param-gather only supported with distributed optimizer"),
    ),
    check=_opg_without_distopt,
    valid=(Example(py("cfg.ddp.overlap_param_gather = True\ncfg.ddp.overlap_grad_reduce = True")),),
    invalid=(Example(py("cfg.ddp.use_distributed_optimizer = False\ncfg.optimizer.use_distributed_optimizer = False\ncfg.ddp.overlap_param_gather = True  # <-")),),
    fix_applicability="unsafe", fix_description="Turn overlap_param_gather off.",
    fix_safety='Today the first training step fails (with DP>1); after the fix the parameter all-gather is no longer overlapped with compute.',
)


def _pao(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("optimizer.use_precision_aware_optimizer"):
        return
    opt = ctx.as_str("optimizer.optimizer")
    if opt is not None and opt != "adam":
        yield Finding(f"use_precision_aware_optimizer is only supported with adam (optimizer={opt!r})",
                      ["optimizer.use_precision_aware_optimizer", "optimizer.optimizer"])
    elif ctx.is_off(OPT_DO, pre=True):
        yield Finding("use_precision_aware_optimizer needs cfg.optimizer.use_distributed_optimizer=True; the assert runs before "
                      "Bridge syncs it from cfg.ddp or enables it for FSDP", ctx.recent(["optimizer.use_precision_aware_optimizer", OPT_DO]),
                      fix=fix_set(ctx, OPT_DO, "True", "set cfg.optimizer.use_distributed_optimizer=True"))


MBM402 = Rule(
    code="MBM402", name="precision-aware-optimizer-requirements", severity="error",
    summary="Precision-aware optimizer without the optimizer's distributed-optimizer flag, or with a non-Adam optimizer.",
    fields=("optimizer.use_precision_aware_optimizer", OPT_DO, "optimizer.optimizer"),
    rationale=("MCore's OptimizerConfig.__post_init__ asserts both; it runs inside validate() before Bridge's "
               "distributed-optimizer sync, so setting only cfg.ddp.use_distributed_optimizer is not enough."),
    sources=(
        SourceRef("megatron/core/optimizer/optimizer_config.py:430-436", "assert", "only supported with adam / with distributed optimizer"),
        SourceRef("megatron/bridge/training/config.py:1256", "assert", "optimizer.finalize() runs before the sync at :1365"),
    ),
    check=_pao,
    valid=(Example(py("cfg.optimizer.use_precision_aware_optimizer = True\ncfg.optimizer.use_distributed_optimizer = True")),),
    invalid=(Example(py("cfg.optimizer.use_distributed_optimizer = False\ncfg.optimizer.use_precision_aware_optimizer = True  # <-")),),
    fix_applicability="unsafe", fix_description="Set cfg.optimizer.use_distributed_optimizer=True.",
    fix_safety='Today the run stops before training (OptimizerConfig asserts before Bridge syncs the flags); after the fix it trains: a different run, even where it is the one the recipe meant. The optimizer state is then sharded over data-parallel ranks.',
)

_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


def _dtypes(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_off("optimizer.use_precision_aware_optimizer"):
        return
    for name in _DTYPES:
        v = ctx.get(f"optimizer.{name}")
        if is_known(v) and isinstance(v, str) and v not in ("torch.float32", "torch.float"):
            yield Finding(f"optimizer.{name}={v} needs use_precision_aware_optimizer=True (only fp32 otherwise)",
                          [f"optimizer.{name}", "optimizer.use_precision_aware_optimizer"],
                          fix=fix_set(ctx, "optimizer.use_precision_aware_optimizer", "True", "enable the precision-aware optimizer", "unsafe"))
            return


MBM403 = Rule(
    code="MBM403", name="optimizer-dtype-without-precision-aware", severity="error",
    summary="Non-fp32 optimizer state/master/grad dtypes without the precision-aware optimizer.",
    fields=tuple(f"optimizer.{d}" for d in _DTYPES) + ("optimizer.use_precision_aware_optimizer",),
    rationale="Only the precision-aware (TE FusedAdam) path can keep bf16/fp16 moments or masters; MCore asserts otherwise.",
    sources=(SourceRef("megatron/core/optimizer/optimizer_config.py:469-481", "assert", "main_params_dtype can only be fp32 when not using precision-aware optimizer"),),
    check=_dtypes,
    valid=(Example(py("cfg.optimizer.exp_avg_dtype = torch.float32", imports="import torch")),),
    invalid=(Example(py("cfg.optimizer.exp_avg_dtype = torch.bfloat16  # <-", imports="import torch")),),
    fix_applicability="unsafe", fix_description="Enable the precision-aware optimizer.",
    fix_safety='Today the run stops before training (OptimizerConfig asserts); after the fix it trains: a different run, even where it is the one the recipe meant. The precision-aware optimizer keeps master weights and moments in the requested dtypes.',
)


def _mismatch(ctx: RuleContext, a: str, b: str, what: str) -> Iterator[Finding]:
    """One flag True, the other False *because the user wrote False*: Bridge turns both on, so the
    explicit False (the user's attempt to turn the feature off) is dead. Setting only one flag to
    True and leaving the other at its default is the ordinary way to enable the feature: not flagged."""
    va, vb = ctx.pre(a), ctx.pre(b)
    if not (isinstance(va, bool) and isinstance(vb, bool)) or va == vb:
        return
    off = b if va else a
    on = a if va else b
    w = ctx.user_write(off)
    if w is None or w.origin not in ("recipe", "yaml", "cli"):
        return  # the False is a default or comes from library code the user does not edit
    yield Finding(f"{off} = False has no effect: {on} is True and Bridge silently enables {what} for both; "
                  f"set both to False to turn it off, or drop the False", [off, on], location=w.anchor,
                  fix=fix_set(ctx, off, "True", f"set {off}=True (what Bridge does)"))


MBM404 = Rule(
    code="MBM404", name="distributed-optimizer-flags-mismatch", severity="warning",
    summary="ddp.use_distributed_optimizer and optimizer.use_distributed_optimizer differ (silently unified to True).",
    fields=(DDP_DO, OPT_DO),
    rationale=("Bridge warns and forces both to True when either is True (MB #2302: disabling it needs both). A recipe "
               "that sets one flag to False to turn the distributed optimizer off still runs with it (different memory, "
               "checkpoint layout and speed than the recipe reads). Only an explicit False in the user's code or "
               "overrides is flagged: setting one flag True and leaving the other at its default is how Bridge is meant "
               "to be used."),
    sources=(SourceRef("megatron/bridge/training/config.py:1945-1967", "silent-rewrite", "Automatically enabling distributed optimizer for both settings"),),
    check=lambda ctx: _mismatch(ctx, DDP_DO, OPT_DO, "the distributed optimizer"),
    valid=(Example(py("cfg.ddp.use_distributed_optimizer = True\ncfg.optimizer.use_distributed_optimizer = True")),
           Example(py("cfg.ddp.use_distributed_optimizer = True"), note="one flag on, the other at its default: the usual way")),
    invalid=(Example(py("cfg.optimizer.use_distributed_optimizer = True\ncfg.ddp.use_distributed_optimizer = False  # <-")),),
    fix_applicability="safe", fix_description="Set the False flag to True (the effective runtime value).",
    fix_safety='Bridge turns both flags on when either is on: the False the fix edits never took effect.',
    references=('Megatron Bridge issue #2302 (disabling the distributed optimizer needs both flags)',)
)

MBM405 = Rule(
    code="MBM405", name="overlap-param-gather-flags-mismatch", severity="info",
    summary="An explicit overlap_param_gather=False is dead: the other flag is True and Bridge enables both.",
    fields=("ddp.overlap_param_gather", "optimizer.overlap_param_gather"),
    rationale=("Bridge warns and sets both to True when either is True, so the False line does nothing. Info, not "
               "warning: the overlap only hides the parameter all-gather behind compute (no memory cost, and the run "
               "gets the faster setting); the finding is about a dead line that misleads the reader. Bridge's own perf "
               "recipes write `ddp.overlap_param_gather = True` + `optimizer.overlap_param_gather = False` and run with "
               "both on. A False that is only a default is not flagged."),
    sources=(SourceRef("megatron/bridge/training/config.py:1969-1981", "silent-rewrite", "overlap_param_gather settings were not in sync"),),
    check=lambda ctx: _mismatch(ctx, "ddp.overlap_param_gather", "optimizer.overlap_param_gather", "overlap_param_gather"),
    valid=(Example(py("cfg.ddp.overlap_param_gather = True\ncfg.optimizer.overlap_param_gather = True")),
           Example(py("cfg.ddp.overlap_param_gather = True"), note="the optimizer flag is left at its default")),
    invalid=(Example(py("cfg.ddp.overlap_param_gather = True\ncfg.optimizer.overlap_param_gather = False  # <-")),),
    fix_applicability="safe", fix_description="Set the False flag to True.",
    fix_safety='Bridge sets both overlap_param_gather flags to True when either is: the False the fix edits never took effect.',
)


def _same(a: Any, b: Any) -> bool:
    alias = {"torch.half": "torch.float16", "torch.float": "torch.float32"}
    if isinstance(a, str) and isinstance(b, str):
        return alias.get(a, a) == alias.get(b, b)
    return bool(a == b) and type(a) is type(b) or (a is None and b is None)


# Fields that only act with FP8/FP4 training, and loss-scaling fields that only act with fp16: their
# overwrite changes nothing when the effective precision does not use them (e.g. Bridge's NemotronH
# providers set first_last_layers_bf16=True and train with 'bf16_mixed').
_LOW_PRECISION_ONLY = {"first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16", "fp8_recipe",
                       "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_wgrad", "fp8_dot_product_attention",
                       "fp8_multi_head_attention", "fp8_param", "fp8_param_gather", "fp4_recipe", "fp4_param", "fp4_param_gather",
                       "reuse_grad_buf_for_mxfp8_param_ag"}
_FP16_ONLY = {"loss_scale", "initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis"}


def _mp_field_matters(ctx: RuleContext, name: str) -> bool:
    """False when the runtime precision makes ``name`` irrelevant (the overwrite then costs nothing)."""
    if name in _LOW_PRECISION_ONLY:
        fp8, fp4 = mp_value(ctx, "fp8"), mp_value(ctx, "fp4")
        return not (is_known(fp8) and is_known(fp4) and not fp8 and not fp4)
    if name in _FP16_ONLY:
        fp16 = mp_value(ctx, "fp16")
        return not (is_known(fp16) and not fp16)
    return True


def _mp_dead(ctx: RuleContext) -> Iterator[Finding]:
    mp = ctx.get("mixed_precision")
    if not is_known(mp) or mp is None:
        return
    rewritten = ctx.r.pre_runtime  # only a path the runtime rewrote can have been overwritten
    for section, names in MP_TARGETS.items():
        for name in names:
            path = f"{section}.{name}"
            if path not in rewritten:
                continue
            w = ctx.user_write(path)
            if w is None or w.origin not in ("recipe", "yaml", "cli"):
                continue
            old, new = w.value, mp_value(ctx, name)
            if old is None or not is_known(old) or not is_known(new) or _same(old, new):
                continue
            if not _mp_field_matters(ctx, name):
                continue
            pre_mp = ctx.pre("mixed_precision")
            if isinstance(pre_mp, str):
                keep = (f"to keep {fmt(old)}, build the preset object ({pre_mp.replace('-', '_')}() from "
                        f"megatron.bridge.training.mixed_precision) and set .{name} on it")
            else:
                keep = f"to keep {fmt(old)}, set cfg.mixed_precision.{name}"
            others = [sec for sec, names in MP_TARGETS.items() if name in names and sec != section]
            if others:
                keep += f" (which also sets {', '.join(f'{o}.{name}' for o in others)})"
            yield Finding(
                f"{path} = {fmt(old)} is overwritten by cfg.mixed_precision ({fmt(new)}) at runtime"
                + (" — fp32 gradient buffers: 4 bytes/param instead of 2" if name == "grad_reduce_in_fp32" and new is True else ""),
                [path, "mixed_precision"], location=w.anchor,
                fix=fix_delete_dead(ctx, dead_writes(ctx, path), f"delete the dead {path} assignment (the run keeps {fmt(new)})"),
                notes=[keep[0].upper() + keep[1:]])


MBM406 = Rule(
    code="MBM406", name="precision-field-overwritten-by-mixed-precision", severity="warning",
    summary="A precision field set on model/optimizer/ddp is overwritten by cfg.mixed_precision.",
    fields=("ddp.grad_reduce_in_fp32", "model.fp8", "model.params_dtype", "mixed_precision"),
    rationale=("MixedPrecisionConfig.setup() copies every same-named field onto model, optimizer and ddp, unconditionally, "
               "logging only at debug level. The classic case: cfg.ddp.grad_reduce_in_fp32=False under 'bf16_mixed' is reset "
               "to True, so gradient buffers take 4 bytes per parameter instead of 2 (56 findings on Bridge 0.6.2's own "
               "recipes). A warning because the overwrite changes memory or numerics; fields that only act with FP8/FP4 "
               "(first_last_layers_bf16, fp8_*, ...) or with fp16 (loss scaling) are not flagged when the effective "
               "precision does not use them — Bridge's NemotronH providers set first_last_layers_bf16=True and train "
               "in plain bf16, and the overwrite changes nothing there."),
    sources=(SourceRef("megatron/bridge/training/mixed_precision.py:113-157", "silent-rewrite", "setup() overwrites same-named fields"),),
    check=_mp_dead,
    valid=(Example(py("cfg.ddp.grad_reduce_in_fp32 = True")),),
    invalid=(
        Example(py("cfg.ddp.grad_reduce_in_fp32 = False  # <-"),
                note="the library recipe leaves cfg.mixed_precision = 'bf16_mixed' (a preset name)"),
        Example(py("cfg.mixed_precision = bf16_mixed()\ncfg.ddp.grad_reduce_in_fp32 = False  # <-",
                   imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),
    ),
    fix_applicability="safe",
    fix_description=("Delete the dead assignment (every assignment of the field since its section was built; a YAML "
                     "entry too). The finding's note says how to keep the value instead: set it on cfg.mixed_precision "
                     "(building the preset object first when cfg.mixed_precision is a preset name), which changes the "
                     "run. No fix for a --set item."),
    fix_safety='cfg.mixed_precision overwrites the field before training: deleting the dead assignment leaves the run as it was.',
)


def _mp_dead_fields(ctx: RuleContext) -> Iterator[Finding]:
    for name in ("fp32", "autocast_enabled"):
        path = f"mixed_precision.{name}"
        if ctx.is_true(path) and ctx.explicitly_set(path):
            yield Finding(f"mixed_precision.{name} is copied nowhere and has no effect", [path])


MBM407 = Rule(
    code="MBM407", name="mixed-precision-field-without-effect", severity="info",
    summary="mixed_precision.fp32 / autocast_enabled are set but copied nowhere.",
    fields=("mixed_precision.fp32", "mixed_precision.autocast_enabled"),
    rationale="No model/optimizer/ddp field has these names, so setup() never copies them.",
    sources=(SourceRef("megatron/bridge/training/mixed_precision.py:148-157", "no-effect", "copied only when the target has the attribute"),),
    check=_mp_dead_fields,
    valid=(Example(py("cfg.mixed_precision = bf16_mixed()", imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),),
    invalid=(Example(py("cfg.mixed_precision = bf16_mixed()\ncfg.mixed_precision.autocast_enabled = True  # <-",
                        imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),),
)

_CO_MODEL_DEFAULTS: dict[str, Any] = {"tp_comm_overlap": False, "defer_embedding_wgrad_compute": False, "wgrad_deferral_limit": -1,
                                      "overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": False}


def _co_new(ctx: RuleContext, name: str) -> Any:
    for rw in ctx.r.rewrites:
        if rw.path == f"model.{name}":
            return rw.new
    v = ctx.get(f"comm_overlap.{name}")
    if is_known(v) and v is not None:
        return v
    if not is_known(v):
        return UNKNOWN
    if name in _CO_MODEL_DEFAULTS:
        return _CO_MODEL_DEFAULTS[name]
    pp, vraw = ctx.pp(), ctx.get("model.virtual_pipeline_model_parallel_size")
    if pp is None or not is_known(vraw):
        return UNKNOWN
    interleaved = pp > 1 and isinstance(vraw, int) and vraw > 1
    if name == "overlap_p2p_comm":
        return interleaved
    if name == "batch_p2p_comm":
        return pp > 1 and not interleaved
    return UNKNOWN


def _co_dead(ctx: RuleContext) -> Iterator[Finding]:
    co = ctx.get("comm_overlap")
    if not is_known(co) or co is None:
        return
    for name in (*_CO_MODEL_DEFAULTS, "overlap_p2p_comm", "batch_p2p_comm"):
        path = f"model.{name}"
        w = ctx.user_write(path)
        if w is None or w.origin not in ("recipe", "yaml", "cli"):
            continue
        new = _co_new(ctx, name)
        if is_known(w.value) and is_known(new) and w.value != new:
            yield Finding(f"{path} = {fmt(w.value)} is overwritten by cfg.comm_overlap setup ({fmt(new)})", [path, "comm_overlap"],
                          location=w.anchor, notes=[f"To keep {fmt(w.value)}, set cfg.comm_overlap.{name}."],
                          fix=fix_delete_dead(ctx, dead_writes(ctx, path), f"delete the dead {path} assignment (the run keeps {fmt(new)})"))


MBM408 = Rule(
    code="MBM408", name="field-overwritten-by-comm-overlap", severity="warning",
    summary="A model field owned by cfg.comm_overlap is set directly and overwritten at runtime.",
    fields=("model.tp_comm_overlap", "model.overlap_p2p_comm", "model.batch_p2p_comm", "model.overlap_moe_expert_parallel_comm",
            "model.delay_wgrad_compute", "model.defer_embedding_wgrad_compute", "comm_overlap"),
    rationale="CommOverlapConfig.setup() always writes these model fields (computed default unless set on cfg.comm_overlap).",
    sources=(SourceRef("megatron/bridge/training/comm_overlap.py:604-643", "silent-rewrite", "setup() overwrites the comm-overlap-owned fields"),),
    check=_co_dead,
    valid=(Example(py("cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, delay_wgrad_compute=False)",
                      imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),),
    invalid=(Example(py("cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)\ncfg.model.defer_embedding_wgrad_compute = True  # <-",
                        imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),),
    fix_applicability="safe", fix_description="Delete the dead assignment; the note says how to keep the value instead (set it on cfg.comm_overlap, which changes the run).",
    fix_safety='CommOverlapConfig.setup() overwrites the field before training: deleting the dead assignment leaves the run as it was.',
)


def _co_dp_ignored(ctx: RuleContext) -> Iterator[Finding]:
    co = ctx.get("comm_overlap")
    if not is_known(co) or co is None or not ctx.is_off(DDP_DO, pre=True):
        return
    set_ = [f for f in ("overlap_grad_reduce", "overlap_param_gather", "bucket_size", "align_param_gather")
            if ctx.known(f"comm_overlap.{f}") and ctx.get(f"comm_overlap.{f}") is not None]
    if set_:
        yield Finding(f"cfg.comm_overlap.{', '.join(set_)} are skipped because ddp.use_distributed_optimizer is False at setup",
                      [f"comm_overlap.{set_[0]}", DDP_DO])


MBM409 = Rule(
    code="MBM409", name="comm-overlap-dp-settings-ignored", severity="warning",
    summary="comm_overlap DP settings are skipped when ddp.use_distributed_optimizer is False at setup time.",
    fields=("comm_overlap.overlap_grad_reduce", "comm_overlap.overlap_param_gather", "comm_overlap.bucket_size", DDP_DO),
    rationale=("setup() writes the DDP/optimizer overlap settings only if cfg.ddp.use_distributed_optimizer is already True; "
               "validate() may enable it later, but the overlap settings are lost."),
    sources=(SourceRef("megatron/bridge/training/comm_overlap.py:635-643", "no-effect", "DP settings only applied with the distributed optimizer"),),
    check=_co_dp_ignored,
    valid=(Example(py("cfg.ddp.use_distributed_optimizer = True\ncfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, overlap_grad_reduce=True)",
                      imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),),
    invalid=(Example(py("cfg.ddp.use_distributed_optimizer = False\ncfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, overlap_grad_reduce=True)  # <-",
                        imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),),
)


def _fsdp(ctx: RuleContext) -> Iterator[Finding]:
    fsdp = is_fsdp(ctx)
    fmt_ = ctx.as_str("checkpoint.ckpt_format")
    saving = any(ctx.known(p) and ctx.get(p) for p in ("checkpoint.save", "checkpoint.load"))
    if fsdp is False and fmt_ == "fsdp_dtensor" and saving:
        yield Finding("ckpt_format='fsdp_dtensor' only supports Megatron-FSDP", ["checkpoint.ckpt_format"])
        return
    if fsdp is not True:
        return
    anchor_path = "ddp.use_megatron_fsdp" if ctx.is_true("ddp.use_megatron_fsdp", pre=True) else "dist.use_megatron_fsdp"
    if ctx.is_true("dist.use_torch_fsdp2"):
        yield Finding("use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive", [anchor_path, "dist.use_torch_fsdp2"])
    elif saving and fmt_ is not None and fmt_ != "fsdp_dtensor":
        yield Finding(f"Megatron-FSDP with checkpoint save/load requires ckpt_format='fsdp_dtensor' (got {fmt_!r})",
                      ctx.recent(["checkpoint.ckpt_format", anchor_path]),
                      fix=fix_set(ctx, "checkpoint.ckpt_format", '"fsdp_dtensor"', "set ckpt_format='fsdp_dtensor'", "unsafe"))
    elif ctx.env_str("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        yield Finding("Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset", ["env_vars.CUDA_DEVICE_MAX_CONNECTIONS", anchor_path],
                      location=ctx.env_anchor("CUDA_DEVICE_MAX_CONNECTIONS"))
    elif ctx.is_true("ddp.fsdp_manual_registration") and ctx.is_off("ddp.nccl_ub"):
        yield Finding("ddp.fsdp_manual_registration requires ddp.nccl_ub", ["ddp.fsdp_manual_registration", "ddp.nccl_ub"])
    elif ctx.is_true("dist.use_tp_pp_dp_mapping"):
        yield Finding("use_tp_pp_dp_mapping is not supported with Megatron-FSDP", ["dist.use_tp_pp_dp_mapping", anchor_path])
    elif (ctx.value_is("ddp.data_parallel_sharding_strategy", "optim_grads_params")
          and ctx.as_int("train.check_weight_hash_across_dp_replicas_interval")):
        yield Finding("check_weight_hash_across_dp_replicas_interval is not supported with optim_grads_params sharding",
                      ["train.check_weight_hash_across_dp_replicas_interval", "ddp.data_parallel_sharding_strategy"])


MBM410 = Rule(
    code="MBM410", name="megatron-fsdp-conflict", severity="error",
    summary="Megatron-FSDP with a non-fsdp_dtensor checkpoint, CUDA_DEVICE_MAX_CONNECTIONS=1, FSDP2, or other unsupported options.",
    fields=("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp", "checkpoint.ckpt_format", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS",
            "ddp.fsdp_manual_registration", "dist.use_tp_pp_dp_mapping", "dist.use_torch_fsdp2"),
    rationale="Bridge's validate() asserts each of these for the Megatron-FSDP path.",
    sources=(
        SourceRef("megatron/bridge/training/config.py:1096-1116", "assert", "fsdp_dtensor format; CUDA_DEVICE_MAX_CONNECTIONS; manual registration; tp_pp_dp mapping"),
        SourceRef("megatron/bridge/training/config.py:1341-1343", "raise", "use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive"),
        SourceRef("megatron/bridge/training/config.py:1389-1394", "assert", "fsdp_dtensor checkpoint format only supports Megatron FSDP"),
    ),
    check=_fsdp,
    valid=(Example(py('cfg.ddp.use_megatron_fsdp = True\ncfg.ddp.data_parallel_sharding_strategy = "optim_grads_params"\ncfg.checkpoint.save = "/ckpt"\ncfg.checkpoint.ckpt_format = "fsdp_dtensor"')),),
    invalid=(Example(py('cfg.checkpoint.save = "/ckpt"\ncfg.checkpoint.ckpt_format = "torch_dist"\ncfg.ddp.data_parallel_sharding_strategy = "optim_grads_params"\ncfg.ddp.use_megatron_fsdp = True  # <-')),),
    fix_applicability="unsafe", fix_description="For the checkpoint format: set ckpt_format='fsdp_dtensor'.",
    fix_safety='Today the run stops before training (Bridge asserts the Megatron-FSDP requirements); after the fix it trains: a different run, even where it is the one the recipe meant. The checkpoint format also changes what is written to disk.',
)


def _no_shard(ctx: RuleContext) -> Iterator[Finding]:
    if is_fsdp(ctx) is True and ctx.value_is("ddp.data_parallel_sharding_strategy", "no_shard"):
        yield Finding("Megatron-FSDP with data_parallel_sharding_strategy='no_shard' shards nothing: no memory saving",
                      ["ddp.data_parallel_sharding_strategy", "ddp.use_megatron_fsdp"],
                      fix=fix_set(ctx, "ddp.data_parallel_sharding_strategy", '"optim_grads_params"', "shard optimizer, grads and params", "display-only"))


MBM411 = Rule(
    code="MBM411", name="fsdp-without-sharding", severity="warning",
    summary="Megatron-FSDP with sharding strategy 'no_shard'.",
    fields=("ddp.data_parallel_sharding_strategy", "ddp.use_megatron_fsdp"),
    rationale="FSDP's memory saving comes from sharding optimizer state, grads and params; no_shard keeps full replicas.",
    sources=(SourceRef("megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py:326-337", "cost", "sharding strategy decides what is sharded"),),
    check=_no_shard,
    valid=(Example(py('cfg.ddp.use_megatron_fsdp = True\ncfg.ddp.data_parallel_sharding_strategy = "optim_grads_params"\ncfg.checkpoint.ckpt_format = "fsdp_dtensor"')),),
    invalid=(Example(py('cfg.ddp.use_megatron_fsdp = True\ncfg.checkpoint.ckpt_format = "fsdp_dtensor"\ncfg.ddp.data_parallel_sharding_strategy = "no_shard"  # <-')),),
    fix_applicability="display-only", fix_description="Use 'optim_grads_params' sharding.",
    fix_safety='Sharding changes what every rank holds (memory, communication): a suggestion to review, never applied.',
)


def _fp8_recipe(ctx: RuleContext) -> Any:
    v = ctx.get("model.fp8_recipe")
    if ctx.known("model.fp8") and ctx.get("model.fp8") is None:
        return None
    return v


def _mxfp8(ctx: RuleContext) -> Iterator[Finding]:
    if _fp8_recipe(ctx) != "mxfp8" or ctx.get("model.fp8") is None:
        return
    reuse = ctx.get("ddp.reuse_grad_buf_for_mxfp8_param_ag")
    if not is_known(reuse) or reuse:
        return
    mp_obj = isinstance(ctx.get("mixed_precision"), dict)
    fix = fix_set(ctx, "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", "True", "enable reuse_grad_buf_for_mxfp8_param_ag") if mp_obj else None
    where = "mixed_precision" if "mixed_precision" in ctx.r.fields else "model.fp8_recipe"
    if ctx.is_true("ddp.fp8_param_gather") and is_fsdp(ctx) is False:
        yield Finding("fp8_param_gather with fp8_recipe='mxfp8' requires reuse_grad_buf_for_mxfp8_param_ag=True",
                      [where, "ddp.reuse_grad_buf_for_mxfp8_param_ag", "ddp.fp8_param_gather"], fix=fix)
    elif ctx.is_off("ddp.fp8_param_gather"):
        yield Finding("mxfp8 without reuse_grad_buf_for_mxfp8_param_ag and fp8_param_gather uses a significant amount of "
                      "additional GPU memory", [where, "ddp.reuse_grad_buf_for_mxfp8_param_ag"], severity="warning", fix=fix)


MBM412 = Rule(
    code="MBM412", name="mxfp8-without-grad-buffer-reuse", severity="error",
    summary="MXFP8 without reuse_grad_buf_for_mxfp8_param_ag (error with fp8_param_gather, warning otherwise).",
    fields=("mixed_precision", "model.fp8_recipe", "ddp.fp8_param_gather", "ddp.reuse_grad_buf_for_mxfp8_param_ag"),
    rationale=("Bridge asserts the reuse flag when MXFP8 params are gathered outside FSDP; without it MCore keeps separate "
               "MXFP8 param buffers ('significant amount additional GPU memory')."),
    sources=(
        SourceRef("megatron/bridge/training/config.py:1348-1359", "assert", "reuse_grad_buf_for_mxfp8_param_ag must be set to True"),
        SourceRef("megatron/core/optimizer/optimizer_config.py:413-422", "warning", "mxfp8 without reuse ... significant amount additional GPU memory"),
    ),
    check=_mxfp8,
    valid=(Example(py('cfg.mixed_precision = "bf16_with_mxfp8_mixed"')),),
    invalid=(Example(py('cfg.mixed_precision = bf16_with_mxfp8_mixed()  # <-\ncfg.mixed_precision.reuse_grad_buf_for_mxfp8_param_ag = False',
                        imports="from megatron.bridge.training.mixed_precision import bf16_with_mxfp8_mixed")),),
    fix_applicability="unsafe", fix_description="Set cfg.mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=True.",
    fix_safety="With fp8_param_gather the run stops in validate() today (Bridge asserts); without it, reusing the gradient buffer changes the run's memory.",
)


def _mp_src(ctx: RuleContext, name: str) -> list[str]:
    """``["mixed_precision.<name>"]`` when the recipe set it there (the copy onto model is the runtime's)."""
    return [f"mixed_precision.{name}"] if ctx.user_write(f"mixed_precision.{name}") is not None else []


def _fp8_fp4(ctx: RuleContext) -> Iterator[Finding]:
    fp8, fp4 = ctx.get("model.fp8"), ctx.get("model.fp4")
    if not is_known(fp8) or not is_known(fp4):
        return
    if fp8 and fp4:
        yield Finding("fp4 and fp8 cannot be used simultaneously", ["mixed_precision", "model.fp8", "model.fp4"])
    elif ctx.is_true("model.fp8_param") and not fp8:
        yield Finding("fp8_param must be used together with fp8", [*_mp_src(ctx, "fp8_param"), "model.fp8_param", "model.fp8"])
    elif ctx.is_true("model.fp4_param") and not fp4:
        yield Finding("fp4_param must be used together with fp4", ["model.fp4_param", "model.fp4"])
    elif fp8 and ctx.is_true("model.first_last_layers_bf16") and ctx.value_is("model.fp8_recipe", "delayed"):
        yield Finding("delayed scaling does not support first/last layers in BF16", ["model.first_last_layers_bf16", "model.fp8_recipe"])
    elif (fp8 or fp4) and ctx.is_true("model.first_last_layers_bf16"):
        layers, pp = ctx.as_int("model.num_layers"), ctx.pp()
        if layers and pp:
            for end in ("start", "end"):
                n = ctx.as_int(f"model.num_layers_at_{end}_in_bf16", 0)
                if n is not None and not 0 <= n <= layers // pp:
                    yield Finding(f"num_layers_at_{end}_in_bf16 ({n}) must be between 0 and layers per pipeline stage ({layers // pp})",
                                  [f"model.num_layers_at_{end}_in_bf16"])
                    return


MBM413 = Rule(
    code="MBM413", name="low-precision-config-conflict", severity="error",
    summary="fp8 with fp4, fp8_param/fp4_param without the format, BF16 edge layers with delayed scaling or out of range.",
    fields=("model.fp8", "model.fp4", "model.fp8_param", "model.fp4_param", "model.first_last_layers_bf16", "model.fp8_recipe"),
    rationale="MCore's TransformerConfig.__post_init__ (and MixedPrecisionConfig.finalize) raise for these combinations.",
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:1400-1455", "raise", "fp8/fp4 parameter and BF16-layer checks"),
        SourceRef("megatron/bridge/training/mixed_precision.py:106-111", "raise", "fp4 and fp8 cannot be used simultaneously"),
    ),
    check=_fp8_fp4,
    valid=(Example(py('cfg.mixed_precision = "bf16_with_fp8_current_scaling_mixed"')),),
    invalid=(Example(py('cfg.mixed_precision = bf16_mixed()\ncfg.mixed_precision.fp8_param = True  # <-',
                        imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),),
)

_SFT_DATASETS = ("GPTSFTDatasetConfig", "DirectHFSFTDatasetConfig", "EnergonDatasetConfig", "MockVLMSFTDatasetConfig")


def _sft_cp(ctx: RuleContext) -> Iterator[Finding]:
    cp, cls = ctx.cp(), ctx.section_class("dataset")
    if not cp or cp <= 1 or not cls or not cls.endswith(_SFT_DATASETS):
        return
    if ctx.is_off("model.calculate_per_token_loss"):
        yield Finding("finetuning with CP>1 needs model.calculate_per_token_loss=True", ["model.calculate_per_token_loss", "model.context_parallel_size"],
                      fix=fix_set(ctx, "model.calculate_per_token_loss", "True", "set calculate_per_token_loss=True"))
    elif ctx.is_true("ddp.average_in_collective"):
        yield Finding("finetuning with CP>1 needs ddp.average_in_collective=False", ["ddp.average_in_collective", "model.context_parallel_size"],
                      fix=fix_set(ctx, "ddp.average_in_collective", "False", "set average_in_collective=False"))


MBM414 = Rule(
    code="MBM414", name="finetune-context-parallel-loss", severity="error",
    summary="SFT/PEFT dataset with CP>1 without per-token loss, or with average_in_collective.",
    fields=("model.calculate_per_token_loss", "ddp.average_in_collective", "model.context_parallel_size", "dataset"),
    rationale="Ranks whose CP shard is fully masked produce NaN losses unless the loss is per token; Bridge asserts in validate().",
    sources=(SourceRef("megatron/bridge/training/config.py:1439-1457", "assert", "When finetuning with CP>1, calculate_per_token_loss must be True"),),
    check=_sft_cp,
    valid=(Example(py("cfg.model.context_parallel_size = 2\ncfg.model.calculate_per_token_loss = True\ncfg.ddp.average_in_collective = False", base="llama3_8b_sft_config", task="sft")),),
    invalid=(Example(py("cfg.model.context_parallel_size = 2\ncfg.model.calculate_per_token_loss = False  # <-", base="llama3_8b_sft_config", task="sft")),),
    fix_applicability="unsafe", fix_description="Set calculate_per_token_loss=True / average_in_collective=False.",
    fix_safety='Today the run stops before training (Bridge asserts on the loss settings for finetuning with CP>1); after the fix it trains: a different run, even where it is the one the recipe meant. The loss is also reduced differently (per token, or outside the collective).',
)


def _ep_overlap(ctx: RuleContext) -> Iterator[Finding]:
    on = ctx.is_true("model.overlap_moe_expert_parallel_comm")
    if ctx.is_true("model.delay_wgrad_compute") and ctx.is_off("model.overlap_moe_expert_parallel_comm"):
        yield Finding("delay_wgrad_compute needs overlap_moe_expert_parallel_comm", ["model.delay_wgrad_compute"])
        return
    if not on:
        return
    ep, pp = ctx.ep(), ctx.pp()
    reasons = []
    if ep is not None and ep <= 1:
        reasons.append("expert_model_parallel_size > 1")
    disp = ctx.as_str("model.moe_token_dispatcher_type")
    # only an explicit dispatcher: HF bridges set it on the provider and the model table may not carry it
    if disp is not None and disp not in ("alltoall", "flex") and ctx.explicitly_set("model.moe_token_dispatcher_type"):
        reasons.append(f"an alltoall/flex dispatcher (got {disp!r})")
    if pp and pp > 1 and ctx.known("model.virtual_pipeline_model_parallel_size") and not ctx.get("model.virtual_pipeline_model_parallel_size"):
        reasons.append("VPP when PP > 1")
    if ctx.value_is("model.recompute_granularity", "full") or (ctx.known("model.recompute_method") and ctx.get("model.recompute_method")):
        reasons.append("no full recompute / recompute_method")
    if "moe" in (ctx.as_list("model.recompute_modules") or []) and ctx.value_is("model.recompute_granularity", "selective"):
        reasons.append("no 'moe' in recompute_modules")
    if ctx.is_true("model.moe_shared_expert_overlap"):
        reasons.append("moe_shared_expert_overlap=False")
    mtp = ctx.as_int("model.mtp_num_layers", 0)
    if mtp and mtp > 1:
        reasons.append("mtp_num_layers ≤ 1")
    if reasons:
        yield Finding("overlap_moe_expert_parallel_comm requires " + "; ".join(reasons),
                      ["comm_overlap.overlap_moe_expert_parallel_comm" if ctx.explicitly_set("comm_overlap.overlap_moe_expert_parallel_comm")
                       else "model.overlap_moe_expert_parallel_comm"])


MBM415 = Rule(
    code="MBM415", name="moe-ep-overlap-prerequisites", severity="error",
    summary="EP communication overlap (or delayed wgrad) without its prerequisites.",
    fields=("comm_overlap.overlap_moe_expert_parallel_comm", "model.overlap_moe_expert_parallel_comm", "model.delay_wgrad_compute",
            "model.expert_model_parallel_size", "model.moe_token_dispatcher_type"),
    rationale="Bridge's comm-overlap setup and MCore's TransformerConfig assert each prerequisite of the 1F1B EP overlap.",
    sources=(
        SourceRef("megatron/bridge/training/comm_overlap.py:478-518", "assert", "overlap_moe_expert_parallel_comm is only supported when ..."),
        SourceRef("megatron/core/transformer/transformer_config.py:2669-2757", "assert", "EP overlap and delay_wgrad_compute prerequisites"),
    ),
    check=_ep_overlap,
    valid=(Example(py("cfg.model.delay_wgrad_compute = False")),),
    invalid=(Example(py("cfg.model.delay_wgrad_compute = True  # <-")),),
)


def _tp_overlap_disabled(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("comm_overlap.tp_comm_overlap", pre=True):
        return
    tp = ctx.tp()
    if tp is None:
        return
    fields = ["comm_overlap.tp_comm_overlap", "model.tensor_model_parallel_size", "model.sequence_parallel"]
    if tp < 2:
        # No TP communication exists, so nothing is lost. Only a request the user wrote is worth a note;
        # a library recipe's tp_comm_overlap=True under a user's TP=1 is expected (93 of Bridge's recipes).
        w = ctx.user_write("comm_overlap.tp_comm_overlap")
        if w is not None and w.origin in ("recipe", "yaml", "cli"):
            yield Finding("comm_overlap.tp_comm_overlap=True has no effect at tensor_model_parallel_size=1 (Bridge disables it)",
                          fields[:2], location=w.anchor, severity="info")
    elif ctx.is_off("model.sequence_parallel"):
        yield Finding(f"comm_overlap.tp_comm_overlap=True is silently disabled because sequence_parallel is off: the TP={tp} "
                      "all-reduces run exposed instead of overlapped with the GEMMs", ctx.recent(fields))


MBM416 = Rule(
    code="MBM416", name="tp-comm-overlap-disabled", severity="warning",
    summary="tp_comm_overlap silently disabled: at TP>=2 without sequence parallelism (warning); at TP=1 when the user asked for it (info).",
    fields=("comm_overlap.tp_comm_overlap", "model.tensor_model_parallel_size", "model.sequence_parallel"),
    rationale=("CommOverlapConfig disables TP overlap with a log warning when TP<2 or SP is off. With TP>=2 and SP off "
               "the TP collectives still run, but exposed: a throughput loss the recipe does not show (warning). At TP=1 "
               "there is no TP communication, so nothing is lost: a library recipe's tp_comm_overlap=True under a user's "
               "TP=1 is not flagged at all (93 such findings on Bridge's 0.6.2 recipes were noise), and an explicit "
               "request in the user's own code is an info note."),
    sources=(SourceRef("megatron/bridge/training/comm_overlap.py:442-451", "silent-rewrite", "Disabling tensor parallel communication overlap due to ..."),),
    check=_tp_overlap_disabled,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\ncfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)",
                      imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),),
    invalid=(
        Example(py("cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)\ncfg.model.tensor_model_parallel_size = 4\n"
                   "cfg.model.sequence_parallel = False  # <-",
                   imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig")),
        Example(py("cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)  # <-",
                   imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig"),
                note="info: explicit request at TP=1"),
    ),
)


def _bf16_fp16(ctx: RuleContext) -> Iterator[Finding]:
    for section in ("mixed_precision", "model", "optimizer"):
        if ctx.is_true(f"{section}.bf16") and ctx.is_true(f"{section}.fp16"):
            yield Finding(f"{section} cannot have both bf16=True and fp16=True", ctx.recent([f"{section}.fp16", f"{section}.bf16"]))
            return


MBM417 = Rule(
    code="MBM417", name="bf16-and-fp16", severity="error",
    summary="bf16 and fp16 both enabled.",
    fields=("model.bf16", "model.fp16", "optimizer.bf16", "optimizer.fp16"),
    rationale="Bridge asserts and MCore raises: a model has one half-precision format.",
    sources=(SourceRef("megatron/bridge/training/config.py:1998-2003", "assert", "cannot have both bf16=True and fp16=True"),),
    check=_bf16_fp16,
    valid=(Example(py("cfg.mixed_precision = bf16_mixed()", imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),),
    invalid=(Example(py("cfg.mixed_precision = bf16_mixed()\ncfg.mixed_precision.fp16 = True  # <-", imports="from megatron.bridge.training.mixed_precision import bf16_mixed")),),
)


def _deterministic(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("model.deterministic_mode"):
        return
    if ctx.is_true("model.cross_entropy_loss_fusion"):
        yield Finding("deterministic_mode with cross_entropy_loss_fusion=True (the GPT provider default) is rejected",
                      ctx.recent(["model.cross_entropy_loss_fusion", "model.deterministic_mode"]),
                      fix=fix_set(ctx, "model.cross_entropy_loss_fusion", "False", "set cross_entropy_loss_fusion=False"))
        return
    algo = ctx.env_str("NCCL_ALGO")
    if ctx.env_known() and (algo is None or (isinstance(algo, str) and algo not in ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS"))):
        yield Finding(f"deterministic_mode needs env NCCL_ALGO in Tree/Ring/CollnetDirect/CollnetChain/^NVLS (it is {algo!r})",
                      ["model.deterministic_mode", "env_vars.NCCL_ALGO"], fix=fix_set(ctx, "env_vars.NCCL_ALGO", '"Ring"', "set NCCL_ALGO=Ring", "unsafe"))


MBM418 = Rule(
    code="MBM418", name="deterministic-mode-requirements", severity="error",
    summary="deterministic_mode with fused cross entropy or without a deterministic NCCL_ALGO.",
    fields=("model.deterministic_mode", "model.cross_entropy_loss_fusion", "env_vars.NCCL_ALGO"),
    rationale="Bridge asserts both in validate(): the fused cross entropy and NVLS collectives are not deterministic.",
    sources=(SourceRef("megatron/bridge/training/config.py:1043-1063", "assert", "Cross Entropy Fusion is currently not deterministic / NCCL_ALGO must be one of"),),
    check=_deterministic,
    valid=(Example(py('cfg.model.deterministic_mode = True\ncfg.model.cross_entropy_loss_fusion = False\ncfg.env_vars["NCCL_ALGO"] = "Ring"')),),
    invalid=(Example(py('cfg.model.cross_entropy_loss_fusion = True\ncfg.env_vars["NCCL_ALGO"] = "Ring"\ncfg.model.deterministic_mode = True  # <-')),),
    fix_applicability="unsafe", fix_description="Disable the fused cross entropy.",
    fix_safety='Today the run stops before training (Bridge asserts in validate()); after the fix it trains: a different run, even where it is the one the recipe meant. The unfused cross entropy (or NCCL algorithm) also changes speed.',
)


# Compiled on first use (re's cache): only recipes with TP comm overlap and a named preset need it.
_UB_NAME = (r"userbuffers_(?P<dtype>[a-z0-9]+)_(?:(?P<gpu>[a-z]+[0-9]+)_)?h(?P<h>\d+)_tp(?P<tp>\d+)(?:_cp(?P<cp>\d+))?"
            r"_mbs(?P<mbs>\d+)_seqlen(?P<seq>\d+)")


def _ub_preset_mismatch(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("model.tp_comm_overlap"):
        return  # the preset is unused when Bridge turns TP overlap off
    preset = ctx.get("comm_overlap.tp_comm_overlap_cfg")
    name = preset.get("_name_") if isinstance(preset, dict) else None
    m = re.fullmatch(_UB_NAME, name) if isinstance(name, str) else None
    if m is None:
        return
    tuned = {"model.hidden_size": int(m["h"]), "model.tensor_model_parallel_size": int(m["tp"]),
             "train.micro_batch_size": int(m["mbs"]), "model.seq_length": int(m["seq"])}
    if m["cp"]:  # older preset names leave CP out (Bridge pairs them with CP=2): compare only when named
        tuned["model.context_parallel_size"] = int(m["cp"])
    labels = {"model.hidden_size": "hidden_size", "model.tensor_model_parallel_size": "TP",
              "model.context_parallel_size": "CP", "train.micro_batch_size": "MBS", "model.seq_length": "seq_length"}
    diffs = []
    for path, want in tuned.items():
        have = ctx.get(path)
        if is_known(have) and isinstance(have, int) and not isinstance(have, bool) and have != want:
            diffs.append(f"{labels[path]} {have} (preset: {want})")
    if diffs:
        yield Finding(f"tp_comm_overlap_cfg={name} was tuned for another layout: {', '.join(diffs)}. TE sizes the "
                      "userbuffers from the actual shape (seq_length*MBS/CP, hidden), so the run works, but with "
                      "communication-overlap settings (SM counts, algorithms) tuned for a different GEMM shape; "
                      "a preset/layout mismatch also suggests the layout changed since the recipe was benchmarked",
                      ["comm_overlap.tp_comm_overlap_cfg", *(p for p in tuned if labels[p] in " ".join(diffs))],
                      location=ctx.pre_anchor("comm_overlap.tp_comm_overlap_cfg"))


MBM419 = Rule(
    code="MBM419", name="userbuffers-preset-mismatch", severity="warning",
    summary="A userbuffers TP-overlap preset whose name (hidden size, TP, CP, MBS, seq length) does not match the recipe.",
    fields=("comm_overlap.tp_comm_overlap_cfg", "model.hidden_size", "model.tensor_model_parallel_size",
            "model.context_parallel_size", "train.micro_batch_size", "model.seq_length"),
    rationale=("Bridge's userbuffers presets (`userbuffers_<dtype>_<gpu>_h<hidden>_tp<TP>[_cp<CP>]_mbs<MBS>_seqlen<S>`) "
               "hold per-GEMM overlap settings tuned for one shape. initialize_ub sizes the buffers from the model's "
               "actual (seq_length*MBS/CP, hidden), so a mismatch does not crash; it runs the overlap with settings "
               "tuned for another GEMM (throughput), and usually means the parallel layout was edited after the "
               "recipe was benchmarked (e.g. Bridge 0.6.2's 405B B200 recipes use a tp4_cp2 preset with CP=1)."),
    sources=(SourceRef("megatron/bridge/training/initialize.py:355-375", "cost",
                       "initialize_ub(shape=[seq_length*micro_batch_size//context_parallel_size, hidden], ub_cfgs=preset)"),
             SourceRef("megatron/bridge/training/comm_overlap.py:98", "cost",
                       "module-level presets named after the shape they were tuned for")),
    check=_ub_preset_mismatch,
    valid=(Example(py("cfg.model.tensor_model_parallel_size = 4\ncfg.model.sequence_parallel = True\n"
                      "cfg.model.seq_length = 8192\ncfg.dataset.seq_length = 8192\ncfg.train.micro_batch_size = 1\n"
                      "cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True, "
                      "tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192)",
                      base="llama3_70b_pretrain_config", gpus=64,
                      imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig, "
                              "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")),),
    invalid=(Example(py("cfg.model.tensor_model_parallel_size = 8\ncfg.model.sequence_parallel = True\n"
                        "cfg.model.seq_length = 8192\ncfg.dataset.seq_length = 8192\ncfg.train.micro_batch_size = 1\n"
                        "cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True, "
                        "tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192)  # <-",
                        base="llama3_70b_pretrain_config", gpus=64,
                        imports="from megatron.bridge.training.comm_overlap import CommOverlapConfig, "
                                "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")),),
    references=('megatron/bridge/training/comm_overlap.py: the userbuffers_* presets, named for the shape they were tuned for',)
)


RULES = [MBM401, MBM402, MBM403, MBM404, MBM405, MBM406, MBM407, MBM408, MBM409, MBM410, MBM411, MBM412, MBM413,
         MBM414, MBM415, MBM416, MBM417, MBM418, MBM419]
