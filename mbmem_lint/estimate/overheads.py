"""Runtime overheads: CUDA context, cuBLAS workspace, NCCL communicators, CUDA-graph pools, DDP bucket
padding and the allocator fragmentation reserve. Constants come from ``data/gpus.json`` (per GPU family)."""

from __future__ import annotations

from mbmem_lint.estimate.activations import attention_scores, tokens
from mbmem_lint.estimate.gpus import GpuSpec
from mbmem_lint.estimate.inputs import Inputs
from mbmem_lint.estimate.params import layer_table
from mbmem_lint.estimate.types import ALLOCATED_KINDS, FRAGMENTATION_RESERVE, Component

_SCOPE_KINDS = {"attn": {"attn", "mla"}, "mlp": {"mlp"}, "moe": {"moe"}, "moe_router": {"moe"},
                "moe_preprocess": {"moe"}, "mamba": {"mamba"}}


def communicator_sizes(inp: Inputs) -> list[int]:
    """Sizes of the NCCL communicators a rank actually uses for this layout (lazily created ones count)."""
    p = inp.par
    sizes: list[int] = []
    if p.tp > 1:
        sizes.append(p.tp)
    if p.pp > 1:
        sizes += [p.pp, 2]  # pipeline p2p group + embedding/position-embedding sync group
    if p.dp * p.cp > 1:
        sizes.append(p.dp * p.cp)
    if p.cp > 1:
        sizes.append(p.cp)
    if inp.shape.num_experts:
        if p.ep > 1:
            sizes.append(p.ep)
        if p.ep * p.tp > 1 and p.tp > 1 and p.ep > 1:
            sizes.append(p.ep * p.tp)
        if p.etp > 1 and p.etp != p.tp:
            sizes.append(p.etp)
        if p.edp > 1 and p.edp != p.dp * p.cp:
            sizes.append(p.edp)
    return sizes


def runtime_components(inp: Inputs, gpu: GpuSpec) -> list[Component]:
    comps = [
        Component("cuda context", int(gpu.overhead("cuda_context_bytes")), [], kind="runtime"),
        Component("cublas workspace", int(gpu.overhead("cublas_workspace_bytes")), [], kind="workspace"),
    ]
    sizes = communicator_sizes(inp)
    if sizes:
        nccl = sum(gpu.overhead("nccl_small_group_bytes") if n == 2 else gpu.overhead("nccl_group_bytes")
                   for n in sizes)
        if inp.rt.nvls:
            nccl += gpu.overhead("nvls_extra_bytes") * sum(1 for n in sizes if n > 2)
        comps.append(Component(f"nccl buffers ({len(sizes)} communicators)", int(nccl), [
            "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
            "model.context_parallel_size", "model.expert_model_parallel_size", "env_vars.NCCL_NVLS_ENABLE",
            "ddp.nccl_ub"], kind="runtime"))
    return comps


def cuda_graph_component(inp: Inputs, gpu: GpuSpec, layers: list[int], inflight: float,
                         activation_bytes: float) -> Component | None:
    """The CUDA-graph private pool, as a ``reserve``: memory the GPU holds but ``max_memory_allocated`` does not
    count at the step's peak. Bridge runs ``cuda_graph_warmup_steps`` (MCore default 3, transformer_config.py
    L1023) eager iterations before capturing (training/train.py L429-441; the local implementation captures at the
    end of its first, eager, step), and the allocator's peak counter is never reset: the allocated peak is the
    eager one, where every activation is a normal allocation and no pool exists. After capture the graphed
    activations live in the pool between replays (freed blocks of a private pool, reserved but not allocated),
    while the eager iterations' segments stay cached, so the pool adds to what the GPU must hold."""
    impl = inp.rt.graph_impl
    if impl in ("none", ""):
        return None
    fields = ["model.cuda_graph_impl", "model.cuda_graph_scope", "model.pipeline_model_parallel_size"]
    base = gpu.overhead("cuda_graph_pool_base_bytes")
    if impl == "full_iteration" or "full_iteration" in inp.rt.graph_scope:
        # One graph of the whole forward_backward_func, captured into one private pool (MCore 0.19.2
        # full_cuda_graph.py FullCudaGraphWrapper.__call__ L224-236). The activations of the captured
        # iteration are allocated *in* that pool and live there between replays: they are the activation
        # component already counted, not an addition to it (the old ``+ 0.5 x activations`` had no source and
        # double-counted them). On top come the pool's base and StaticBufferLoader's per-microbatch copies of
        # the batch (L95-139: tokens, labels, position_ids int64 + loss_mask fp32 = 28 B/token).
        static = 28 * inp.train.seq * inp.train.mbs * max(1, inp.train.num_microbatches or 1)
        return Component("cuda graph pool", int(base + static), fields, kind="reserve")
    scope = inp.rt.graph_scope
    kinds: set[str] = set()
    for sc in scope:
        kinds |= _SCOPE_KINDS.get(sc, set())
    table = layer_table(inp.shape)
    codes = table.codes(layers)
    graphed = 0
    for code in dict.fromkeys(codes):  # per kind: its graphed sublayers times its layers
        graphed += sum(1 for k in table.kind(code) if not scope or k in kinds) * codes.count(code)
    r = 1.0 / inp.par.tp if inp.par.sp else 1.0
    # Static output buffer per graphed callable and in-flight microbatch. The static *input* buffer is the
    # tensor the callable's first norm saves for backward, already counted in the activation terms, so it
    # is not added again (previously it was: 2x). The pool never holds more than the graphed activations
    # plus its base, so the per-layer part is capped by this stage's activation bytes.
    io = 2 * tokens(inp) * inp.shape.hidden * r
    per_layer = min(graphed * io * max(1.0, inflight), activation_bytes)
    return Component("cuda graph pool", int(base + per_layer), fields, kind="reserve")


def unfused_score_buffer_component(inp: Inputs, layers: list[int]) -> Component | None:
    """Unfused attention writes its raw scores [b·np, sq, sk] with baddbmm into one global buffer
    (dot_product_attention.py L186-190: ``get_global_memory_buffer().get_tensor(..., "mpu")``), allocated once
    and kept for the whole run. Measured on H200: +1.0 GiB held after step 1 at 32 heads, seq 4096 (case F)."""
    if inp.rt.flash:
        return None
    table = layer_table(inp.shape)
    if not any(k in ("attn", "mla") for c in set(table.codes(layers)) for k in table.kind(c)):
        return None
    return Component("unfused-attention score buffer", int(2 * attention_scores(inp)), [
        "model.attention_backend", "model.seq_length", "train.micro_batch_size"], kind="workspace")


def ddp_padding_component(inp: Inputs, params_local: float) -> Component | None:
    """Grad/param buffers are padded per bucket to a multiple of lcm(DP, 128) elements (MCore DDP)."""
    if params_local <= 0:
        return None
    dp = max(1, inp.par.dp * inp.par.cp)
    bucket = max(40_000_000, 1_000_000 * dp)
    n_buckets = int(params_local // bucket) + 1
    pad = n_buckets * dp * 128 * (inp.prec.param_bytes + inp.prec.grad_bytes)
    return Component("ddp bucket padding", int(pad), ["ddp.bucket_size", "ddp.use_distributed_optimizer"],
                     kind="workspace")


def fragmentation_component(inp: Inputs, gpu: GpuSpec, comps: list[Component]) -> Component:
    allocated = sum(c.bytes for c in comps if c.kind in ALLOCATED_KINDS)
    key = "fragmentation_fraction_expandable" if inp.rt.expandable_segments else "fragmentation_fraction"
    frac = gpu.overhead(key)
    reserve = frac * allocated
    return Component(FRAGMENTATION_RESERVE, int(reserve), ["env_vars.PYTORCH_CUDA_ALLOC_CONF"],
                     kind="reserve")
