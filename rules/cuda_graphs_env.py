"""MBM3xx: CUDA graphs, the PyTorch caching allocator (PYTORCH_CUDA_ALLOC_CONF) and env vars."""

from __future__ import annotations

from collections.abc import Iterator

from mbmem_lint.check.rule import Example, Finding, Rule, RuleContext, SourceRef, version_tuple
from mbmem_lint.resolve.resolved import is_known

from ._common import (
    ENV_VARS_NOTE,
    ENV_VARS_SINCE,
    alloc_conf,
    closest,
    cuda_graph_impl,
    fix_env,
    fix_set,
    graph_modules,
    has_expandable_token,
    parse_alloc_conf,
    py,
    py_str,
)

IMPL = "model.cuda_graph_impl"
SCOPE = "model.cuda_graph_scope"
ACONF = "env_vars.PYTORCH_CUDA_ALLOC_CONF"
ES_IMPORT = "from megatron.bridge.recipes.utils.environment_utils import COMMON_RECIPE_ENV_VARS"


def _scope_list(ctx: RuleContext) -> list[str]:
    return [str(s).split(".")[-1] for s in (ctx.as_list(SCOPE) or [])]


def _local_not_full(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.as_str(IMPL) != "local" or not ctx.known(SCOPE) or not ctx.known("model.cuda_graph_modules"):
        return
    mods = [str(m).split(".")[-1] for m in (ctx.as_list("model.cuda_graph_modules") or [])]
    if "full_iteration" in _scope_list(ctx) or "full_iteration" in mods:  # legacy value, migrated by MCore
        return
    yield Finding(
        "Megatron Bridge supports cuda_graph_impl='local' only for full-iteration CUDA graphs; use "
        "'transformer_engine' for scoped capture", [IMPL],
        fix=fix_set(ctx, IMPL, '"transformer_engine"', "use cuda_graph_impl='transformer_engine'", "unsafe"))


MBM301 = Rule(
    code="MBM301", name="local-cuda-graph-not-full-iteration", severity="error",
    summary="cuda_graph_impl='local' without a full-iteration graph.",
    fields=(IMPL, SCOPE),
    rationale="Bridge's CUDA-graph guard rejects per-layer 'local' graphs in validate(); scoped capture goes through TE.",
    sources=(SourceRef("megatron/bridge/utils/cuda_graph.py:141-153", "raise", "supports model.cuda_graph_impl=\"local\" only for full-iteration CUDA graphs"),),
    bridge_since="0.6.0",
    bridge_note=("`validate_cuda_graph_configuration` (utils/cuda_graph.py) appeared in Megatron Bridge 0.6; before, "
                 "`cuda_graph_impl='local'` with per-module scopes builds MCore's CudaGraphManager."),
    check=_local_not_full,
    valid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True\ncfg.env_vars["NCCL_GRAPH_REGISTER"] = 0')),
           Example(py('cfg.model.cuda_graph_impl = "local"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True'),
                   settings={"megatron-bridge-version": "0.5.1"}, note="Megatron Bridge 0.5: MCore's CudaGraphManager")),
    invalid=(Example(py('cfg.model.cuda_graph_impl = "local"  # <-\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True')),),
    fix_applicability="unsafe", fix_description="Switch to cuda_graph_impl='transformer_engine'.",
    fix_safety="Today the run stops before training (Bridge's CUDA-graph guard raises); after the fix it trains: a different run, even where it is the one the recipe meant. Transformer Engine graphs capture differently from local ones.",
)


def _full_iteration_impl() -> str:
    """The ``cuda_graph_impl`` of a full-iteration graph: ``"full_iteration"`` from MCore 0.18 (Bridge 0.5);
    MCore 0.17 (Bridge 0.4) has no such value and captures the iteration with ``"local"`` plus
    ``cuda_graph_scope=["full_iteration"]``."""
    from mbmem_lint.resolve.versions import active

    return "full_iteration" if active().at_least("0.5.0") else "local"


def _scope_dropped(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.as_str(IMPL) == "none" and "full_iteration" in _scope_list(ctx) and not ctx.is_true("model.enable_cuda_graph"):
        impl = _full_iteration_impl()
        yield Finding("cuda_graph_scope='full_iteration' with cuda_graph_impl='none' is cleared by Bridge: no CUDA graph is captured",
                      [SCOPE, IMPL], fix=fix_set(ctx, IMPL, f'"{impl}"', f"set cuda_graph_impl={impl!r}", "unsafe"))


MBM302 = Rule(
    code="MBM302", name="legacy-cuda-graph-scope-dropped", severity="warning",
    summary="Legacy cuda_graph_scope='full_iteration' with impl 'none' is silently cleared.",
    fields=(SCOPE, IMPL),
    rationale=("MCore alone would migrate the legacy scope to impl 'full_iteration', but Bridge clears scope and "
               "modules when the impl is 'none' before that migration: the run trains without graphs."),
    sources=(SourceRef("megatron/bridge/utils/cuda_graph.py:134-139", "silent-rewrite", "modules and scope cleared when cuda_graph_impl='none'"),),
    check=_scope_dropped,
    valid=(Example(py('cfg.model.cuda_graph_impl = "full_iteration"\ncfg.model.cuda_graph_scope = []\ncfg.rng.te_rng_tracker = True\ncfg.rerun_state_machine.check_for_nan_in_loss = False')),),
    invalid=(Example(py('cfg.model.cuda_graph_scope = ["full_iteration"]  # <-')),
             Example(py('cfg.model.cuda_graph_scope = ["full_iteration"]  # <-'),
                     settings={"megatron-bridge-version": "0.4.2"}, note="Megatron Bridge 0.4: the fix sets 'local'")),
    fix_applicability="unsafe", fix_description="Set cuda_graph_impl='full_iteration' ('local' on Megatron Bridge 0.4, "
                                                 "whose MCore 0.17 has no 'full_iteration' implementation).",
    fix_safety='Bridge clears the legacy scope today, so the run captures no CUDA graph; the fix turns full-iteration graphs on.',
)


def _rng_tracker(ctx: RuleContext) -> Iterator[Finding]:
    impl = cuda_graph_impl(ctx)
    if impl in (None, "none"):
        return
    if ctx.is_off("model.use_te_rng_tracker") and ctx.is_off("rng.te_rng_tracker"):
        yield Finding(f"cuda_graph_impl={impl!r} needs the Transformer Engine RNG tracker (rng.te_rng_tracker=True)",
                      [IMPL, "rng.te_rng_tracker", "model.use_te_rng_tracker"],
                      fix=fix_set(ctx, "rng.te_rng_tracker", "True", "set cfg.rng.te_rng_tracker=True"))


MBM303 = Rule(
    code="MBM303", name="cuda-graph-without-te-rng-tracker", severity="error",
    summary="CUDA graphs without the Transformer Engine RNG tracker.",
    fields=(IMPL, "rng.te_rng_tracker", "model.use_te_rng_tracker"),
    rationale="Captured graphs need graph-safe RNG state; the GPT provider asserts when the model is built.",
    sources=(SourceRef("megatron/bridge/models/gpt_provider.py:233-237", "assert", "Transformer engine's RNG tracker is required for cudagraphs"),),
    check=_rng_tracker,
    valid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True')),),
    invalid=(Example(py('cfg.rng.te_rng_tracker = False\ncfg.model.use_te_rng_tracker = False\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.model.cuda_graph_impl = "transformer_engine"  # <-')),),
    fix_applicability="unsafe", fix_description="Set cfg.rng.te_rng_tracker=True.",
    fix_safety='Today the run stops before training (the GPT provider asserts when the model is built); after the fix it trains: a different run, even where it is the one the recipe meant. The RNG tracker also changes how dropout random numbers are drawn.',
)


def _nan_check(ctx: RuleContext) -> Iterator[Finding]:
    impl = cuda_graph_impl(ctx)
    full = impl == "full_iteration" or (impl == "local" and "full_iteration" in _scope_list(ctx))
    if full and ctx.is_true("rerun_state_machine.check_for_nan_in_loss"):
        yield Finding("check_for_nan_in_loss must be disabled with full-iteration CUDA graphs",
                      ctx.recent([IMPL, "rerun_state_machine.check_for_nan_in_loss"]),
                      fix=fix_set(ctx, "rerun_state_machine.check_for_nan_in_loss", "False",
                                  "set cfg.rerun_state_machine.check_for_nan_in_loss=False", "unsafe"))


MBM304 = Rule(
    code="MBM304", name="full-iteration-graph-with-nan-check", severity="error",
    summary="Full-iteration CUDA graph with NaN-in-loss checking on (the default).",
    fields=(IMPL, "rerun_state_machine.check_for_nan_in_loss"),
    rationale="The NaN check syncs the host inside the captured iteration; Bridge asserts in validate().",
    sources=(SourceRef("megatron/bridge/training/config.py:1370-1374", "assert", "check_for_nan_in_loss must be disabled when using full_iteration CUDA graph"),),
    check=_nan_check,
    valid=(Example(py('cfg.model.cuda_graph_impl = "full_iteration"\ncfg.model.cuda_graph_scope = []\ncfg.rng.te_rng_tracker = True\ncfg.rerun_state_machine.check_for_nan_in_loss = False')),),
    invalid=(Example(py('cfg.model.cuda_graph_scope = []\ncfg.rng.te_rng_tracker = True\ncfg.model.cuda_graph_impl = "full_iteration"  # <-')),),
    fix_applicability="unsafe", fix_description="Disable check_for_nan_in_loss.",
    fix_safety='Today the run stops before training (Bridge asserts in validate()); after the fix it trains: a different run, even where it is the one the recipe meant. The run then no longer checks the loss for NaNs.',
)


def _graph_recompute(ctx: RuleContext) -> Iterator[Finding]:
    impl = cuda_graph_impl(ctx)
    if impl not in ("local", "transformer_engine"):
        return
    if impl == "local" and "full_iteration" in _scope_list(ctx):
        return  # a full-iteration graph: MCore 0.17's form (Bridge 0.4), migrated to impl 'full_iteration' from 0.18
    if ctx.value_is("model.recompute_granularity", "full"):
        yield Finding(f"full recompute is only supported with full-iteration CUDA graphs, not cuda_graph_impl={impl!r}",
                      ctx.recent(["model.recompute_granularity", IMPL]))
        return
    mods = graph_modules(ctx)
    if mods is None:
        return
    if "moe" in mods and "moe_router" in mods:
        yield Finding("cuda graph modules 'moe' and 'moe_router' cannot be captured together", [SCOPE])
    elif "moe_preprocess" in mods and "moe_router" not in mods:
        yield Finding("cuda graph module 'moe_preprocess' needs 'moe_router'", [SCOPE])
    elif {"moe", "moe_router", "moe_preprocess"} & set(mods) and ctx.known("model.num_moe_experts") and not ctx.get("model.num_moe_experts"):
        yield Finding("MoE CUDA graph modules on a model without experts", [SCOPE, "model.num_moe_experts"])


MBM305 = Rule(
    code="MBM305", name="cuda-graph-scope-conflict", severity="error",
    summary="Full recompute with per-layer CUDA graphs, or inconsistent MoE graph modules.",
    fields=(IMPL, SCOPE, "model.cuda_graph_modules", "model.recompute_granularity"),
    rationale="MCore asserts these in TransformerConfig.__post_init__: per-layer graphs cannot replay a fully recomputed layer.",
    sources=(
        SourceRef("megatron/core/transformer/transformer_config.py:2521-2525", "assert", "full recompute is only supported with full iteration CUDA graph"),
        SourceRef("megatron/core/transformer/transformer_config.py:2484-2519", "assert", "moe/moe_router/moe_preprocess module rules"),
    ),
    check=_graph_recompute,
    valid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True\ncfg.model.recompute_granularity = "selective"')),
           Example(py('cfg.model.cuda_graph_impl = "local"\ncfg.model.cuda_graph_scope = ["full_iteration"]\ncfg.rng.te_rng_tracker = True\n'
                      'cfg.rerun_state_machine.check_for_nan_in_loss = False\ncfg.model.recompute_granularity = "full"\n'
                      'cfg.model.recompute_method = "uniform"\ncfg.model.recompute_num_layers = 1'),
                   settings={"megatron-bridge-version": "0.4.2"}, note="a full-iteration graph in MCore 0.17's form")),
    invalid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True\ncfg.model.recompute_granularity = "full"  # <-\ncfg.model.recompute_method = "uniform"\ncfg.model.recompute_num_layers = 1')),),
)


def _te_graph_register(ctx: RuleContext) -> Iterator[Finding]:
    impl = cuda_graph_impl(ctx)
    if impl in (None, "none") or not ctx.env_known():
        return
    conf = ctx.env_str("PYTORCH_CUDA_ALLOC_CONF")
    if not isinstance(conf, str) or "expandable_segments:True" not in conf:
        return
    reg = ctx.env_str("NCCL_GRAPH_REGISTER")
    if not (reg is None or (isinstance(reg, str) and reg != "0")):
        return
    got = "unset" if reg is None else repr(reg)
    fix = fix_env(ctx, "NCCL_GRAPH_REGISTER", "0", "set NCCL_GRAPH_REGISTER=0 in cfg.env_vars")
    if impl == "transformer_engine":
        yield Finding(f"TE CUDA graphs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True need NCCL_GRAPH_REGISTER='0' (it is {got})",
                      [IMPL, "env_vars.NCCL_GRAPH_REGISTER", ACONF], fix=fix,
                      notes=["The launcher's environment wins over cfg.env_vars (os.environ.setdefault)."])
    else:
        yield Finding(f"cuda_graph_impl={impl!r} with expandable_segments:True: set NCCL_GRAPH_REGISTER=0 (it is {got}) "
                      "to avoid illegal memory access, as the perf recipes do", [IMPL, "env_vars.NCCL_GRAPH_REGISTER", ACONF],
                      severity="info", fix=fix)


MBM306 = Rule(
    code="MBM306", name="cuda-graph-expandable-segments-graph-register", severity="error",
    summary="CUDA graphs + expandable_segments:True without NCCL_GRAPH_REGISTER=0 (error for TE graphs, info otherwise).",
    fields=(IMPL, "env_vars.NCCL_GRAPH_REGISTER", ACONF),
    rationale=("NCCL graph registration of expandable-segment memory causes illegal memory accesses during replay. "
               "TECudaGraphHelper asserts on every GPU architecture when training starts; the local/full-iteration "
               "paths are unchecked, but the perf recipes pair the two settings everywhere."),
    sources=(
        SourceRef("megatron/core/transformer/cuda_graphs.py:2098-2108", "assert", "Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access ..."),
        SourceRef("megatron/bridge/training/train.py:269-280", "runtime-crash", "the TE graph helper is created at the start of train()"),
    ),
    check=_te_graph_register,
    valid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True\ncfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_GRAPH_REGISTER": 0}')),),
    invalid=(Example(py('cfg.model.cuda_graph_impl = "transformer_engine"  # <-\ncfg.model.cuda_graph_scope = ["attn"]\ncfg.rng.te_rng_tracker = True\ncfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}')),),
    fix_applicability="unsafe", fix_description="Add NCCL_GRAPH_REGISTER=0 (an int) to cfg.env_vars.",
    fix_safety='With Transformer Engine graphs the run stops at the start of training today (MCore asserts); the fix also changes how NCCL registers memory for every CUDA-graph implementation.',
    references=('Megatron-LM issue #5474 (the guard failing in CI) and PR #5451 (removed from the local CudaGraphManager; the TE helper keeps it)', 'Megatron Bridge PR #2971 (Llama3 70B SFT OOM fix: expandable_segments:True together with NCCL_GRAPH_REGISTER=0)',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _nccl_ub_es(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.is_true("ddp.nccl_ub"):
        return
    conf = ctx.env_str("PYTORCH_CUDA_ALLOC_CONF")
    if not isinstance(conf, str) or not has_expandable_token(conf):
        return
    tv = version_tuple(ctx.settings.torch_version)
    old = tv is None or tv < (2, 11)
    msg = ("ddp.nccl_ub=True with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
           + ("raises ValueError on torch < 2.11 (torch.cuda.MemPool incompatibility)" if old
              else "is accepted on torch ≥ 2.11, but NCCL user buffers and expandable segments are documented as incompatible"))
    if tv is None:
        msg += "; set torch-version in [tool.mbmem-lint] if you run torch ≥ 2.11"
    yield Finding(msg, ctx.recent(["ddp.nccl_ub", ACONF]), severity=None if old else "info")


MBM307 = Rule(
    code="MBM307", name="nccl-ub-with-expandable-segments", severity="error",
    summary="ddp.nccl_ub with expandable_segments:True (error on torch < 2.11, info otherwise).",
    fields=("ddp.nccl_ub", ACONF),
    rationale=("NCCL user-buffer registration allocates through a torch.cuda.MemPool, which does not support "
               "expandable segments. MCore's DDP config raises unless torch ≥ 2.11 (MCore PR #4492)."),
    sources=(SourceRef("megatron/core/distributed/distributed_data_parallel_config.py:256-261", "raise",
                       "expandable_segments:True is currently not supported with nccl_ub"),),
    check=_nccl_ub_es,
    valid=(Example(py('cfg.ddp.nccl_ub = True\ncfg.env_vars = {"NCCL_NVLS_ENABLE": 1}')),),
    invalid=(Example(py('cfg.ddp.nccl_ub = True  # <-\ncfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}')),),
    versions="raises on torch < 2.11.0a0 (setting torch-version); info on newer torch",
    references=('Megatron-LM MR !3599 (the ValueError) and PR #4492 (limited to torch < 2.11)', 'PyTorch PR #148374 (torch.cuda.MemPool does not support expandable segments)',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _nvls(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.is_true("ddp.nccl_ub") and ctx.env_str("NCCL_NVLS_ENABLE") == "0":
        yield Finding("ddp.nccl_ub=True overwrites NCCL_NVLS_ENABLE to 1 at build time; the recipe's 0 has no effect "
                      "(NVLS buffers cost several GB)", ctx.recent(["ddp.nccl_ub", "env_vars.NCCL_NVLS_ENABLE"]))


MBM308 = Rule(
    code="MBM308", name="nccl-ub-overrides-nvls", severity="warning",
    summary="ddp.nccl_ub forces NCCL_NVLS_ENABLE=1, contradicting the recipe's 0.",
    fields=("ddp.nccl_ub", "env_vars.NCCL_NVLS_ENABLE"),
    rationale="The NCCL allocator writes os.environ['NCCL_NVLS_ENABLE']='1' when nccl_ub is on; NVLS initialisation is memory-intensive.",
    sources=(SourceRef("megatron/core/nccl_allocator.py:143-156", "silent-rewrite", "NCCL_NVLS_ENABLE=1 and TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=0 written"),),
    check=_nvls,
    valid=(Example(py('cfg.ddp.nccl_ub = False\ncfg.env_vars = {"NCCL_NVLS_ENABLE": 0}')),),
    invalid=(Example(py('cfg.env_vars = {"NCCL_NVLS_ENABLE": 0}\ncfg.ddp.nccl_ub = True  # <-')),),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _env_bool(ctx: RuleContext) -> Iterator[Finding]:
    for name in ctx.env_names():
        v = ctx.env(name)
        if isinstance(v, bool):
            yield Finding(f"cfg.env_vars[{name!r}] = {v} becomes the string {str(v)!r}, not {'1' if v else '0'!r}: "
                          "exact-string checks (NCCL_GRAPH_REGISTER == '0', NVTE_CPU_OFFLOAD_V1 == '1') fail",
                          [f"env_vars.{name}"], location=ctx.env_anchor(name),
                          fix=fix_env(ctx, name, "1" if v else "0", f"use {int(v)} instead of {v}"))


MBM309 = Rule(
    code="MBM309", name="env-var-bool-value", severity="warning",
    summary="A bool in cfg.env_vars becomes 'True'/'False', not '1'/'0'.",
    fields=("env_vars",),
    rationale="Bridge applies env_vars with os.environ.setdefault(name, str(value)); every reader compares exact strings.",
    sources=(SourceRef("megatron/bridge/training/config.py:1832-1850", "silent-rewrite", "os.environ.setdefault(name, str(value))"),),
    check=_env_bool,
    valid=(Example(py('cfg.env_vars["NCCL_GRAPH_REGISTER"] = 0')),),
    invalid=(Example(py('cfg.env_vars["NCCL_GRAPH_REGISTER"] = False  # <-')),),
    fix_applicability="unsafe", fix_description="Replace True/False by 1/0.",
    fix_safety="The process sees '1'/'0' instead of 'True'/'False': readers that compare exact strings or parse integers behave differently.",
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


_BOOL_OPTS = ("expandable_segments", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
              "pinned_use_background_threads", "graph_capture_record_stream_reuse")
_ALLOC_OPTS = (*_BOOL_OPTS, "backend", "max_split_size_mb", "roundup_power2_divisions", "max_non_split_rounding_mb",
               "large_segment_size_mb", "garbage_collection_threshold", "pinned_num_register_threads",
               "pinned_reserve_segment_size_mb", "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb",
               "per_process_memory_fraction", "throw_on_cudamalloc_oom", "expandable_segments_page_size")


def _alloc_bool_case(ctx: RuleContext) -> Iterator[Finding]:
    for var, text in alloc_conf(ctx).items():
        if not text:
            continue
        for key, value in parse_alloc_conf(text):
            if key in _BOOL_OPTS and value not in ("True", "False"):
                good = "True" if value.lower() in ("true", "1", "yes", "on") else "False"
                fixed = ",".join(f"{k}:{good if (k == key and v == value) else v}" if v else k for k, v in parse_alloc_conf(text))
                yield Finding(f"{var}: '{key}:{value}' must be exactly True or False (PyTorch raises on anything else)",
                              [f"env_vars.{var}"], location=ctx.env_anchor(var),
                              fix=fix_env(ctx, var, py_str(fixed), f"write {key}:{good}"))


MBM310 = Rule(
    code="MBM310", name="allocator-bool-not-capitalised", severity="error",
    summary="A boolean allocator option is not written exactly True/False (e.g. expandable_segments:true).",
    fields=("env_vars.PYTORCH_CUDA_ALLOC_CONF", "env_vars.PYTORCH_ALLOC_CONF"),
    rationale=("PyTorch's allocator config parser accepts only 'True' or 'False' and raises at the first CUDA "
               "allocation. MCore's guards compare 'expandable_segments:True' literally, so a lowercase value also "
               "slips past them."),
    sources=(SourceRef("megatron/core/distributed/distributed_data_parallel_config.py:256-261", "raise",
                       "exact-token check; torch's c10 AllocatorConfig raises \"Expected 'True' or 'False'\""),),
    check=_alloc_bool_case,
    valid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')),),
    invalid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:true"  # <-')),),
    fix_applicability="unsafe", fix_description="Capitalise the boolean.",
    fix_safety="Today the run stops before training (PyTorch's allocator raises at the first CUDA allocation); after the fix it trains: a different run, even where it is the one the recipe meant. The option then takes effect.",
    references=("PyTorch CUDA notes, 'Optimizing memory usage with PYTORCH_ALLOC_CONF'; c10/core/AllocatorConfig.cpp (booleans are True or False)", 'pytorch/torchtitan issue #3306',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _new_name(ctx: RuleContext) -> Iterator[Finding]:
    confs = alloc_conf(ctx)
    new = confs.get("PYTORCH_ALLOC_CONF")
    if not new:
        return
    old = confs.get("PYTORCH_CUDA_ALLOC_CONF")
    msg = ("PYTORCH_ALLOC_CONF is not read by Megatron's guards (nccl_ub, TE CUDA graphs read only PYTORCH_CUDA_ALLOC_CONF), "
           "is ignored for CUDA by torch 2.9.1")
    if old:
        msg += f", and it overrides PYTORCH_CUDA_ALLOC_CONF={old!r} entirely"
    if "expandable_segments:True" in new or old:
        yield Finding(msg + "; use PYTORCH_CUDA_ALLOC_CONF", ["env_vars.PYTORCH_ALLOC_CONF"],
                      location=ctx.env_anchor("PYTORCH_ALLOC_CONF"))


MBM311 = Rule(
    code="MBM311", name="allocator-conf-new-name-bypasses-guards", severity="warning",
    summary="Allocator settings via PYTORCH_ALLOC_CONF get past Megatron's guards (and were ignored by torch 2.9.1).",
    fields=("env_vars.PYTORCH_ALLOC_CONF", "env_vars.PYTORCH_CUDA_ALLOC_CONF"),
    rationale=("PyTorch reads PYTORCH_ALLOC_CONF first and then ignores the alias; MCore's nccl_ub and CUDA-graph "
               "checks read only PYTORCH_CUDA_ALLOC_CONF, so expandable segments set through the new name reach the "
               "incompatible paths unchecked. torch 2.9.1 did not apply it to CUDA at all (pytorch #183387)."),
    sources=(
        SourceRef("megatron/core/distributed/distributed_data_parallel_config.py:257", "no-effect", "reads PYTORCH_CUDA_ALLOC_CONF only"),
        SourceRef("megatron/core/transformer/cuda_graphs.py:2103", "no-effect", "reads PYTORCH_CUDA_ALLOC_CONF only"),
    ),
    check=_new_name,
    valid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')),),
    invalid=(Example(py('cfg.env_vars["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"  # <-')),),
    versions="torch 2.9.1 ignores PYTORCH_ALLOC_CONF for CUDA; fixed in 2.11",
    references=('PyTorch issue #183387 (PYTORCH_ALLOC_CONF=expandable_segments:True ignored for CUDA in torch 2.9.1, fixed in 2.11)', 'PyTorch CUDA notes: PYTORCH_CUDA_ALLOC_CONF is the deprecated alias of PYTORCH_ALLOC_CONF',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _ignored_opts(ctx: RuleContext) -> Iterator[Finding]:
    for var, text in alloc_conf(ctx).items():
        if not text:
            continue
        opts = dict(parse_alloc_conf(text))
        if opts.get("backend") == "cudaMallocAsync":
            ignored = [k for k in ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold") if k in opts]
            if ignored:
                yield Finding(f"{var}: {', '.join(ignored)} are ignored with backend:cudaMallocAsync", [f"env_vars.{var}"],
                              location=ctx.env_anchor(var))
                continue
        if opts.get("expandable_segments") == "True" and "max_split_size_mb" in opts:
            yield Finding(f"{var}: max_split_size_mb with expandable_segments:True makes no sense (blocks in a segment always "
                          "coalesce) and has triggered allocator asserts", [f"env_vars.{var}"], location=ctx.env_anchor(var))


MBM312 = Rule(
    code="MBM312", name="allocator-options-ignored", severity="warning",
    summary="max_split_size_mb with expandable segments, or native-only options with backend:cudaMallocAsync.",
    fields=("env_vars.PYTORCH_CUDA_ALLOC_CONF", "env_vars.PYTORCH_ALLOC_CONF"),
    rationale=("cudaMallocAsync ignores the native allocator's split/rounding/GC options; max_split_size_mb is "
               "skipped for expandable segments (pytorch #134338) after asserts when combined (pytorch #119452)."),
    sources=(SourceRef("megatron/bridge/training/config.py:1832-1850", "no-effect", "the value is passed to PyTorch unchanged via os.environ"),),
    check=_ignored_opts,
    valid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')),),
    invalid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:512"  # <-')),),
    references=('PyTorch issue #119452 and PR #134338 (max_split_size_mb with expandable segments)', 'PyTorch CUDA notes: backend:cudaMallocAsync ignores max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _unknown_opt(ctx: RuleContext) -> Iterator[Finding]:
    for var, text in alloc_conf(ctx).items():
        for key, _ in parse_alloc_conf(text or ""):
            if key not in _ALLOC_OPTS:
                hint = closest(key, _ALLOC_OPTS)
                yield Finding(f"{var}: unknown allocator option {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""),
                              [f"env_vars.{var}"], location=ctx.env_anchor(var))


MBM313 = Rule(
    code="MBM313", name="allocator-unknown-option", severity="warning",
    summary="Unknown key in the allocator config (a typo may be skipped silently by newer torch).",
    fields=("env_vars.PYTORCH_CUDA_ALLOC_CONF", "env_vars.PYTORCH_ALLOC_CONF"),
    rationale=("Older parsers raise 'Unrecognized CachingAllocator option'; the newer device-generic parser skips keys it "
               "does not own, so a misspelled expandable_segments silently leaves fragmentation on."),
    sources=(SourceRef("megatron/bridge/training/config.py:1832-1850", "no-effect", "passed to PyTorch's allocator parser unchanged"),),
    check=_unknown_opt,
    valid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,graph_capture_record_stream_reuse:True"')),),
    invalid=(Example(py('cfg.env_vars["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segment:True"  # <-')),),
    references=("PyTorch CUDA notes, 'Optimizing memory usage with PYTORCH_ALLOC_CONF' (the options); c10/core/AllocatorConfig.cpp",),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _suggest_es(ctx: RuleContext) -> Iterator[Finding]:
    if not ctx.env_known() or ctx.is_true("ddp.nccl_ub") or not ctx.known("ddp.nccl_ub"):
        return
    confs = alloc_conf(ctx)
    if set(confs) != {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} or any(confs.values()):
        return
    extra = []
    if cuda_graph_impl(ctx) not in (None, "none") and ctx.env_str("NCCL_GRAPH_REGISTER") != "0":
        extra.append(("NCCL_GRAPH_REGISTER", "0"))
    yield Finding("no allocator setting: set PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' to avoid fragmentation OOMs "
                  "(first step of the memory-tuning order; no throughput cost measured on Llama3 70B)",
                  ["env_vars.PYTORCH_CUDA_ALLOC_CONF"], location=ctx.anchor("env_vars"),
                  fix=fix_env(ctx, "PYTORCH_CUDA_ALLOC_CONF", '"expandable_segments:True"',
                              "add PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", extra=extra))


MBM314 = Rule(
    code="MBM314", name="suggest-expandable-segments", severity="info",
    summary="No allocator setting and no nccl_ub: suggest expandable_segments:True.",
    fields=("env_vars.PYTORCH_CUDA_ALLOC_CONF", "ddp.nccl_ub"),
    rationale=("Many OOMs are fragmentation, not capacity: the Llama3 70B SFT OOM (58.8 GB peak on 80 GB) disappeared with "
               "expandable segments at no throughput cost, where TP8 cost 28%. The perf recipes replace "
               "COMMON_RECIPE_ENV_VARS and often drop it."),
    sources=(SourceRef("megatron/bridge/recipes/utils/environment_utils.py:22-33", "cost", "COMMON_RECIPE_ENV_VARS sets expandable_segments:True"),),
    check=_suggest_es,
    valid=(Example(py('cfg.env_vars = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}')),),
    invalid=(Example(py('cfg.env_vars = {"TORCH_NCCL_AVOID_RECORD_STREAMS": 1}  # <-')),),
    fix_applicability="unsafe", fix_description="Add PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (and NCCL_GRAPH_REGISTER=0 with CUDA graphs).",
    fix_safety='Expandable segments change how the CUDA caching allocator maps memory (fragmentation, peak reserved memory).',
    references=('Megatron Bridge PRs #2971, #3107, #3706, #3767, #3780: fragmentation OOMs fixed by expandable_segments:True (Llama3 70B SFT on 32x H100: no throughput change, where TP8 cost 28.4%)',),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)


def _dropped_common(ctx: RuleContext) -> Iterator[Finding]:
    ws = [w for w in ctx.writes("env_vars") if isinstance(w.value, dict) and is_known(w.value)]
    if len(ws) < 2 or ws[-1].origin not in ("recipe", "yaml", "cli"):
        return
    prev, new = ws[-2].value, ws[-1].value
    lost = [k for k in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER", "NCCL_NVLS_ENABLE") if k in prev and k not in new]
    if lost:
        yield Finding(f"cfg.env_vars is replaced and drops {', '.join(lost)} set by the base recipe "
                      "(spread {**COMMON_RECIPE_ENV_VARS, ...} to keep them)", ["env_vars"], location=ws[-1].anchor)


MBM315 = Rule(
    code="MBM315", name="env-vars-replaced", severity="info",
    summary="A wholesale cfg.env_vars = {...} drops allocator/NCCL settings of the base recipe.",
    fields=("env_vars",),
    rationale="Replacing the dict loses COMMON_RECIPE_ENV_VARS (expandable segments, NCCL_GRAPH_REGISTER=0, NVLS off).",
    sources=(SourceRef("megatron/bridge/recipes/utils/environment_utils.py:22-33", "no-effect", "the base recipe's defaults are lost"),),
    check=_dropped_common,
    valid=(Example(py('cfg.env_vars = {**COMMON_RECIPE_ENV_VARS, "CUDA_DEVICE_MAX_CONNECTIONS": 32}', imports=ES_IMPORT)),),
    invalid=(Example(py('cfg.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 32}  # <-')),),
    bridge_since=ENV_VARS_SINCE, bridge_note=ENV_VARS_NOTE,
)

RULES = [MBM301, MBM302, MBM303, MBM304, MBM305, MBM306, MBM307, MBM308, MBM309, MBM310, MBM311, MBM312,
         MBM313, MBM314, MBM315]
