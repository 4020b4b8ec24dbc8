"""Weights, gradients, main params and optimizer states of one pipeline stage (bytes on one GPU)."""

from __future__ import annotations

from mbmem_lint.estimate.inputs import Inputs
from mbmem_lint.estimate.params import (
    Params,
    embedding_params,
    layer_table,
    lora_params,
    norm_params,
    output_params,
)
from mbmem_lint.estimate.types import Component

SHAPE_FIELDS = ["model.hidden_size", "model.num_layers", "model.ffn_hidden_size", "model.num_attention_heads",
                "model.num_query_groups", "model.vocab_size", "model.tensor_model_parallel_size",
                "model.pipeline_model_parallel_size"]
MOE_FIELDS = ["model.num_moe_experts", "model.moe_ffn_hidden_size", "model.expert_model_parallel_size",
              "model.expert_tensor_parallel_size"]


def stage_params(inp: Inputs, layers: list[int], first: bool, last: bool) -> tuple[Params, Params]:
    """(base params, trainable adapter params) of a stage, unsharded. ``layers`` may include MTP layers
    (index >= num_layers); ``first``/``last`` = the stage holds the embedding / the output layer + loss.
    A stage holding MTP layers also builds the embedding (GPTModel: ``if self.pre_process or
    self.mtp_process``, gpt_model.py L167)."""
    s = inp.shape
    base = Params()
    adapters = Params()
    # Layers of one kind have the same parameters: count the kinds (one code each in the shape's layer table),
    # compute each once, in the order the kinds first appear. (Counts are integers, so the products equal the
    # layer-by-layer sums exactly.)
    table = layer_table(s)
    codes = table.codes(layers)
    has_mtp = False
    for code in dict.fromkeys(codes):
        n = codes.count(code)
        first_i = layers[codes.index(code)]
        has_mtp = has_mtp or table.is_mtp(code)
        base = base + table.layer_params(code, first_i).times(n)
        if inp.peft is not None:
            copies = float(inp.par.ep * inp.par.etp) if inp.peft.share_expert_adapters else None
            adapters = adapters + lora_params(s, inp.peft.kind, inp.peft.dim, inp.peft.targets, first_i, copies).times(n)
    if last:
        base = base + Params(rep=norm_params(s, s.hidden))
        # Untied output layer, or the tied embedding's copy kept on the last stage when PP > 1.
        if not s.tied or inp.par.pp > 1 or not first:
            base = base + Params(tp=output_params(s))
    if first or has_mtp:
        base = base + Params(tp=embedding_params(s))
    ext = s.ext
    if ext is None:
        return base, adapters
    from mbmem_lint.estimate import kinds

    if inp.peft is None and kinds.trainable_subset(inp):
        # A VL model training only some parts: frozen parts count as weights only (like a PEFT base).
        return kinds.split_trainable(inp, base, first)
    if first and ext.vision is not None:
        tower = kinds.vision_params(ext.vision)
        base = base + Params(tp=tower, linear=tower)
    return base, adapters


def fp8_param_bytes(recipe: str, family: str) -> float:
    """Bytes per FP8 primary weight element. Hopper/Ada GEMMs need a transposed FP8 copy for dgrad/wgrad
    (MCore fp8_utils.post_all_gather_processing: "tensorwise: may need to create a transposed view";
    TE Float8Tensor keeps it until the next update); blockwise and MXFP8 keep column-wise storage on every
    architecture; MXFP8 adds one E8M0 scale per 32 elements per copy."""
    rec = recipe.lower()
    mx = "mxfp8" in rec or rec == "mx"
    columnwise = mx or "block" in rec or family in ("hopper", "ada", "ampere")
    return (2.0 if columnwise else 1.0) * (1.0 + (1.0 / 32 if mx else 0.0))


def offload_shares(inp: Inputs) -> tuple[float, float]:
    """(share of the optimizer states, share of the fp32 main params) that stay on the GPU under
    ``optimizer_cpu_offload``.

    MCore builds a HybridDeviceOptimizer over the distributed optimizer's parameter shards (optimizer/__init__.py
    L502-541, distrib_optimizer.py L778-781), which moves whole shards to the CPU until ``offload_fraction`` of
    the elements is reached (hybrid_optimizer.py _get_sub_optimizer_param_groups L251-282) and runs their Adam
    there. Without the precision-aware optimizer the shards it receives are the distributed optimizer's own fp32
    main params (distrib_optimizer.py L422-445, "orig_group" L486-490): the CPU copies are clones, the GPU
    originals stay (Bridge's optim.py calls them the "level-1 FP32 GPU shards"), so only the Adam states of the
    offloaded share leave the GPU. With the precision-aware optimizer the shards are bf16 views and the fp32
    copies are made per device (L273-278), so the offloaded share's fp32 params leave too."""
    opt = inp.opt
    if not opt.cpu_offload:
        return 1.0, 1.0
    on_gpu = 1.0 - min(max(opt.offload_fraction, 0.0), 1.0)
    return on_gpu, (on_gpu if opt.precision_aware else 1.0)


def _local(p: Params, inp: Inputs) -> tuple[float, float]:
    """(dense, expert) parameter counts on one GPU."""
    par = inp.par
    return p.tp / par.tp + p.rep, p.expert / (par.ep * par.etp)


def model_state_components(inp: Inputs, base: Params, adapters: Params, family: str) -> list[Component]:
    par, prec, opt = inp.par, inp.prec, inp.opt
    dense, expert = _local(base, inp)
    a_dense, a_expert = _local(adapters, inp)
    moe_f = MOE_FIELDS if inp.shape.num_experts else []
    comps: list[Component] = []

    dense_shard = max(1, par.dp * par.cp // opt.instances)
    expert_shard = max(1, par.edp // opt.instances)
    fsdp = opt.fsdp or "no_shard"
    shard_state = opt.distributed or fsdp != "no_shard"
    shard_grads = fsdp in ("optim_grads", "optim_grads_params")
    shard_params = fsdp == "optim_grads_params"

    # Weights (frozen base + adapters); FP8 params store GEMM weights in 1 byte.
    lin_d = base.linear / par.tp
    lin_e = base.expert_linear / (par.ep * par.etp)
    wbytes = (dense + expert) * prec.param_bytes
    if prec.fp8_param:
        wbytes -= (lin_d + lin_e) * (prec.param_bytes - fp8_param_bytes(prec.fp8_recipe, family))
    if shard_params:
        wbytes = (dense * prec.param_bytes) / dense_shard + (expert * prec.param_bytes) / expert_shard
    wbytes += (a_dense + a_expert) * prec.param_bytes
    fields = ["model.params_dtype", *SHAPE_FIELDS, *moe_f]
    if prec.fp8_param:
        fields.append("model.fp8_param")
    if shard_params:
        fields.append("ddp.data_parallel_sharding_strategy")
    comps.append(Component("weights", int(wbytes), fields))

    subset = False
    if inp.shape.ext is not None:
        from mbmem_lint.estimate.kinds import trainable_subset

        subset = trainable_subset(inp)
    if inp.peft is None and not subset:
        t_dense, t_expert = dense, expert
        peft_f: list[str] = []
    elif inp.peft is None:
        t_dense, t_expert = a_dense, a_expert
        peft_f = ["model.freeze_language_model", "model.freeze_vision_model", "model.freeze_vision_projection"]
    else:
        t_dense, t_expert = a_dense, a_expert
        peft_f = ["peft", "peft.dim", "peft.target_modules"]
    gbytes = (t_dense / (dense_shard if shard_grads else 1) + t_expert / (expert_shard if shard_grads else 1))
    gbytes *= prec.grad_bytes
    comps.append(Component("gradients", int(gbytes), [
        "ddp.grad_reduce_in_fp32", "model.params_dtype", *peft_f,
        *(["ddp.data_parallel_sharding_strategy"] if shard_grads else [])]))

    on_gpu, main_on_gpu = offload_shares(inp)
    per_param = (2 if opt.store_param_remainders else opt.main_param_bytes)
    state_bytes = sum(opt.state_bytes)
    if opt.cpu_offload:
        # HybridDeviceOptimizer's sub-optimizers (torch/CPU Adam, __init__.py L510-541) keep fp32 states and update
        # fp32 params: the precision-aware dtypes and param remainders do not apply.
        per_param = opt.main_param_bytes and 4
        state_bytes = 4 * len(opt.state_bytes)
    ds = dense_shard if shard_state else 1
    es = expert_shard if shard_state else 1
    state_fields = ["optimizer.use_distributed_optimizer", "model.context_parallel_size", *peft_f]
    if opt.cpu_offload:
        state_fields += ["optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction"]
    if per_param:
        mbytes = (t_dense / ds + t_expert / es) * per_param * main_on_gpu
        comps.append(Component("main params", int(mbytes), [
            *state_fields, "optimizer.main_params_dtype", "optimizer.use_precision_aware_optimizer"]))
    sbytes = (t_dense / ds + t_expert / es) * state_bytes * on_gpu
    comps.append(Component("optimizer states", int(sbytes), [
        "optimizer.optimizer", *state_fields, "optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype"]))

    # MCore passes is_first_microbatch=None to TE when disable_parameter_transpose_cache is set, so TE keeps
    # no persistent FP8 weight cache (casts are per-GEMM transients).
    if prec.fp8 and not prec.fp8_param and prec.transpose_cache:
        copies = 1
        if "mxfp8" in prec.fp8_recipe.lower() or family in ("hopper", "ada"):
            copies = 2
        comps.append(Component("fp8 weight casts", int((lin_d + lin_e) * copies), [
            "model.fp8", "model.fp8_recipe", "model.disable_parameter_transpose_cache", "ddp.fp8_param_gather"],
            kind="workspace"))
    if fsdp == "optim_grads_params":
        # Two layers' unsharded weights (prefetch double buffer) + one layer's unsharded grads.
        nl = max(1, inp.shape.num_layers)
        per_layer = (base.tp / par.tp + base.expert / (par.ep * par.etp)) / nl
        comps.append(Component("fsdp gather buffers", int(per_layer * (2 * prec.param_bytes + prec.grad_bytes)),
                               ["ddp.data_parallel_sharding_strategy", "ddp.use_megatron_fsdp"], kind="workspace"))
    return comps
