"""``estimate_recipe``: per-rank memory estimate of each pipeline stage against the target GPU."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mbmem_lint.estimate.activations import (
    deferred_wgrad_bytes,
    embedding_activation,
    fused_softmax_applies,
    layer_input_bytes,
    layer_terms,
    offloaded_terms,
    output_activation,
    selective_drops,
)
from mbmem_lint.estimate.gpus import GpuSpec, UnknownGpuError, resolve_gpu
from mbmem_lint.estimate.inputs import Inputs, read_inputs
from mbmem_lint.estimate.model_state import model_state_components, stage_params
from mbmem_lint.estimate.overheads import (
    cuda_graph_component,
    ddp_padding_component,
    fragmentation_component,
    runtime_components,
    unfused_score_buffer_component,
)
from mbmem_lint.estimate.params import Params, layer_kinds, layer_table
from mbmem_lint.estimate.pipeline import StagePlan, chunk_passes, stage_plans
from mbmem_lint.estimate.types import Component, Estimate, EstimateUnavailable, StageEstimate
from mbmem_lint.estimate.uncertainty import band, model_kind
from mbmem_lint.resolve.resolved import ResolvedRecipe

__all__ = ["estimate_recipe", "estimate_values", "layer_activation_bytes", "EstimateUnavailable", "DEFAULT_GPU"]

DEFAULT_GPU = "h100-80gb"
_MISSING = object()

ACT_FIELDS = ["model.seq_length", "train.micro_batch_size", "model.hidden_size", "model.ffn_hidden_size",
              "model.tensor_model_parallel_size", "model.sequence_parallel", "model.context_parallel_size",
              "model.recompute_granularity", "model.recompute_modules", "model.pipeline_model_parallel_size",
              "model.virtual_pipeline_model_parallel_size"]


class _KindTerms:
    """Per estimate: each layer kind's (kept, offloaded) activation bytes, computed once for all stages
    (layers of one kind have the same terms; deep models with many stages ask for them many times)."""

    def __init__(self, inp: Inputs) -> None:
        self.inp = inp
        self.table = layer_table(inp.shape)
        self.dropped = selective_drops(inp)
        self.offloaded = offloaded_terms(inp)
        self.by_kind: dict[tuple[str, ...], tuple[float, float]] = {}
        self.by_chunk: dict[str, tuple[list[float], list[float]]] = {}
        self.stages: dict[tuple[Any, ...], tuple[list[Component], list[Component], float]] = {}

    def get(self, kind: tuple[str, ...], index: int) -> tuple[float, float]:
        hit = self.by_kind.get(kind)
        if hit is None:
            terms = layer_terms(self.inp, index)
            dropped, offl = self.dropped, self.offloaded
            hit = self.by_kind[kind] = (
                sum(v for k, v in terms.items() if k not in dropped and k not in offl),
                sum(v for k, v in terms.items() if k in offl and k not in dropped),
            )
        return hit

    def chunk(self, indices: list[int], codes: str) -> tuple[list[float], list[float]]:
        """(kept, offloaded) bytes of each layer of a chunk (``codes``: its layers' codes in the shape's
        table); chunks of the same kinds share one answer."""
        hit = self.by_chunk.get(codes)
        if hit is None:
            table = self.table
            by_code = {c: self.get(table.kind(c), indices[codes.index(c)]) for c in dict.fromkeys(codes)}
            vals = [by_code[c] for c in codes]
            hit = self.by_chunk[codes] = ([v[0] for v in vals], [v[1] for v in vals])
        return hit

    def stage(self, inp: Inputs, plan: StagePlan,
              chunk_codes: tuple[str, ...]) -> tuple[list[Component], list[Component], float]:
        """(the layers' activation components, every activation component of the stage, in-flight microbatches):
        computed once per rank and layer kinds, for the estimate and the what-ifs that share these terms."""
        key = (plan.rank, chunk_codes, plan.embedding, plan.loss)
        hit = self.stages.get(key)
        if hit is None:
            hit = self.stages[key] = _stage_activations(inp, plan, chunk_codes, self)
        return hit


def _activation_components(inp: Inputs, plan: StagePlan, chunk_codes: tuple[str, ...],
                           kind_terms: _KindTerms) -> tuple[list[Component], float]:
    par = inp.par
    layers = plan.layers
    passes = chunk_passes(par, plan.rank, len(plan.chunks), inp.train.num_microbatches)
    # Display value: in-flight microbatches in units of "whole stage" (layer-weighted).
    inflight = (sum(p * len(c) for p, c in zip(passes, plan.chunks)) / len(layers)) if layers else max(passes)
    chunk_layers: list[list[float]] = []
    offloaded = 0.0
    for chunk, codes in zip(plan.chunks, chunk_codes):
        kept, offl = kind_terms.chunk(chunk, codes)
        chunk_layers.append(kept)
        if kind_terms.offloaded:
            for x in offl:  # in layer order, as floats add up
                offloaded += x
    comps: list[Component] = []
    fields = list(ACT_FIELDS)
    if par.layout is not None:
        fields.append("model.pipeline_model_parallel_layout")
    if inp.shape.num_experts:
        fields += ["model.moe_router_topk", "model.moe_ffn_hidden_size", "model.expert_tensor_parallel_size"]
    if inp.peft is not None:
        fields += ["peft.sequence_parallel_input_regather", "peft.target_modules"]
    transient = 0.0
    act = 0.0
    if inp.rec.granularity == "full" and layers:
        n = max(1, inp.rec.num_layers)
        keep = layer_input_bytes(inp)
        for block, p in zip(chunk_layers, passes):
            if not block:
                continue
            if inp.rec.method == "block":
                stored = keep * min(n, len(block)) + sum(block[n:])
                transient = max(transient, max(block[:n], default=0.0))
            else:  # uniform: groups of n layers keep only the group input
                groups = -(-len(block) // n)
                stored = keep * groups
                transient = max(transient, sum(block[:n]))
            act += stored * p
        fields += ["model.recompute_method", "model.recompute_num_layers"]
    else:
        act = sum(sum(block) * p for block, p in zip(chunk_layers, passes))
    if inp.off.fine_grained and offloaded:
        # Offloaded tensors leave the GPU except a one-layer double buffer.
        one = offloaded / max(1, len(layers))
        act += one
        fields += ["model.fine_grained_activation_offloading", "model.offload_modules"]
    if inp.off.cpu_offloading and inp.off.cpu_activations and inp.off.cpu_layers > 0 and layers:
        per_layer = [x for vals in chunk_layers for x in vals]
        k = min(inp.off.cpu_layers, len(per_layer))
        act -= max(0.0, sum(per_layer[:k]) - per_layer[0]) * inflight
        fields += ["model.cpu_offloading", "model.cpu_offloading_num_layers"]
    comps.append(Component(f"activations ({len(layers)} layers x {inflight:g} microbatches)", int(act), fields,
                           kind="activation"))
    if transient and plan.loss and par.vpp in (None, 1):
        # The recompute of a block runs in backward, after the output layer's backward has freed the logits and
        # the cross-entropy softmax of the same microbatch; without VPP the last stage holds no other
        # microbatch's logits then. Only what exceeds the logits peak adds to the stage's peak (measured on H200,
        # case D: peak = checkpoints + logits, the recompute transient did not add).
        transient = max(0.0, transient - output_activation(inp))
    if transient:
        comps.append(Component("full-recompute transient", int(transient), [
            "model.recompute_granularity", "model.recompute_method", "model.recompute_num_layers"],
            kind="activation"))
    return comps, inflight


def _stage_activations(inp: Inputs, plan: StagePlan, chunk_codes: tuple[str, ...],
                       kind_terms: _KindTerms) -> tuple[list[Component], list[Component], float]:
    """A stage's activation components: its layers' (:func:`_activation_components`), then the embedding's,
    the vision tower's and the loss's."""
    par, rank = inp.par, plan.rank
    act_comps, inflight = _activation_components(inp, plan, chunk_codes, kind_terms)
    comps = list(act_comps)
    if plan.embedding:
        emb_mb = chunk_passes(par, rank, len(plan.chunks), inp.train.num_microbatches)[0]
        comps.append(Component("embedding activations", int(embedding_activation(inp) * emb_mb), [
            "model.seq_length", "train.micro_batch_size", "model.hidden_dropout"], kind="activation"))
        vision = 0.0
        if inp.shape.ext is not None:
            from mbmem_lint.estimate.kinds import vision_activation_bytes

            vision = vision_activation_bytes(inp)
        if vision:
            comps.append(Component(f"vision tower activations ({emb_mb:g} microbatches)", int(vision * emb_mb), [
                "model.vision_config", "model.freeze_vision_model", "dataset.image_size", "dataset.num_images",
                "train.micro_batch_size"], kind="activation"))
    if plan.loss:
        comps.append(Component("logits + cross-entropy (fp32)", int(output_activation(inp)), [
            "model.vocab_size", "model.seq_length", "train.micro_batch_size",
            "model.tensor_model_parallel_size", "model.cross_entropy_fusion_impl"], kind="activation"))
        deferred = deferred_wgrad_bytes(inp)
        if deferred:
            comps.append(Component("deferred output-layer wgrad buffers", int(deferred), [
                "model.defer_embedding_wgrad_compute", "model.wgrad_deferral_limit", "model.vocab_size",
                "train.global_batch_size"], kind="activation"))
    return act_comps, comps, inflight


def _derived(inp: Inputs, name: str, parts: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """What ``make`` derives from ``parts`` (parts of ``inp``), made once for a recipe and the what-ifs that share
    those parts with it (:func:`~mbmem_lint.estimate.inputs.read_inputs`). The key holds the parts' identities;
    the entry holds the parts, so they stay alive and their ids unique as long as it does."""
    key = (name, *map(id, parts))
    hit = inp.derived.get(key)
    if hit is None:
        hit = inp.derived[key] = (parts, make())
    return hit[1]


def _build(inp: Inputs, gpu: GpuSpec, recipe_name: str) -> Estimate:
    par = inp.par
    assumptions = list(inp.assumptions)
    plans = stage_plans(inp.shape.num_layers, inp.shape.mtp_layers, par, par.layout, assumptions)
    runtime = runtime_components(inp, gpu)
    stages: list[StageEstimate] = []
    shape, peft = inp.shape, inp.peft
    # Derivations of the parts they read, shared with the recipe's what-ifs that keep those parts (an optimizer
    # what-if keeps the activations, a recompute what-if the parameters and model state).
    kind_terms = _derived(inp, "activation terms", (shape, par, inp.train, inp.prec, peft, inp.rec, inp.off, inp.rt),
                          lambda: _KindTerms(inp))
    params_memo: dict[tuple[Any, ...], tuple[Params, Params]] = _derived(inp, "stage params", (shape, par, peft), dict)
    # Stages with the same layer kinds and the same embedding/loss placement hold the same parameters (the
    # middle stages of a deep pipeline): count them once. Components are never mutated, so stages share them.
    state_memo: dict[tuple[Any, ...], list[Component]] = _derived(
        inp, f"model state on {gpu.family}", (shape, par, inp.prec, inp.opt, peft), dict)
    for plan in plans:
        rank, layers = plan.rank, plan.layers
        chunk_codes = tuple(kind_terms.table.codes(c) for c in plan.chunks)
        key = ("".join(chunk_codes), plan.embedding, plan.loss)  # codes tell MTP layers apart
        params = params_memo.get(key)
        if params is None:
            params = params_memo[key] = stage_params(inp, layers, plan.embedding, plan.loss)
        base, adapters = params
        state = state_memo.get(key)
        if state is None:
            state = state_memo[key] = model_state_components(inp, base, adapters, gpu.family)
        act_comps, stage_acts, inflight = kind_terms.stage(inp, plan, chunk_codes)
        comps = [*state, *stage_acts]
        act_total = sum(c.bytes for c in act_comps)
        graph = cuda_graph_component(inp, gpu, layers, inflight, act_total)
        if graph is not None:
            comps.append(graph)
        scores = unfused_score_buffer_component(inp, layers)
        if scores is not None:
            comps.append(scores)
        pad = ddp_padding_component(inp, (base.tp / par.tp + base.rep) if inp.peft is None else 0.0)
        if pad is not None:
            comps.append(pad)
        comps += runtime
        comps.append(fragmentation_component(inp, gpu, comps))
        stages.append(StageEstimate(rank, [c for c in comps if c.bytes > 0 or c.kind == "state"], len(layers)))
    if not inp.rt.flash and inp.rt.softmax_fp32 and fused_softmax_applies(inp):
        assumptions.append("unfused attention: the fused masked-softmax kernel (scaled_upper_triang_masked_softmax_cuda, "
                           "from Apex) is installed; without it the fp32 torch fallback saves 3x more per attention "
                           "score (6 bytes instead of 2)")
    if inp.rt.graph_impl not in ("none", ""):
        if inp.rt.graph_impl == "full_iteration" or "full_iteration" in inp.rt.graph_scope:
            assumptions.append("CUDA-graph pool (full iteration): the captured iteration's activations live in the "
                               "graph pool and are counted once as activations; the pool adds its base and the "
                               "static per-microbatch batch buffers")
        else:
            assumptions.append("CUDA-graph pool: fixed base plus static output buffers per graphed layer and "
                               "in-flight microbatch (order-of-magnitude model); reserved after capture, not part "
                               "of the allocated peak, which the eager warm-up iterations set")
    if inp.rt.defer_embedding_wgrad and inp.train.num_microbatches is None and not inp.rt.wgrad_deferral_limit:
        assumptions.append("defer_embedding_wgrad_compute without a deferral limit and an unknown number of "
                           "microbatches: the last stage's deferred output-layer buffers counted for 1 microbatch")
    if inp.rt.ce_impl == "te":
        assumptions.append("TE cross entropy keeps a bf16 copy of the logits for backward (Transformer Engine 2.20 "
                           "parallel_cross_entropy without overwrite_input); older TE versions wrote the gradient "
                           "into the logits and kept no copy")
    parallelism: dict[str, int | None] = {"tp": par.tp, "pp": par.pp, "vpp": par.vpp, "cp": par.cp, "ep": par.ep,
                                          "etp": par.etp, "dp": par.dp, "edp": par.edp}
    kind = model_kind(inp)
    return Estimate(recipe_name, gpu, par.world_size, parallelism, stages, assumptions, kind, band(kind))


def estimate_values(values: Mapping[str, Any] | Any, *, gpu: str | GpuSpec = DEFAULT_GPU,
                    world_size: int | None = None, name: str = "<values>") -> Estimate:
    """Estimate from a getter (``path -> value``) or a flat mapping; used for what-if re-estimates."""
    get = values.get if isinstance(values, Mapping) else values
    spec = gpu if isinstance(gpu, GpuSpec) else resolve_gpu(gpu)
    inp = read_inputs(get, world_size)
    return _build(inp, spec, name)


def layer_activation_bytes(values: Mapping[str, Any] | Any, *, world_size: int | None = None) -> list[float]:
    """Activation bytes each layer keeps for one micro-batch (after what recompute drops), as the estimate
    counts them; ``values`` is a getter or a flat mapping. Used to cost activation offload transfers."""
    get = values.get if isinstance(values, Mapping) else values
    inp = read_inputs(get, world_size)
    kind_terms = _KindTerms(inp)
    indices = list(range(inp.shape.num_layers))
    return [kind_terms.get(k, i)[0] for k, i in zip(layer_kinds(inp.shape, indices), indices)]


def recipe_getter(recipe: ResolvedRecipe, overrides: Mapping[str, Any] | None = None) -> Any:
    # Values read once per recipe: an estimate reads ~60 fields, and what-if re-estimates (with
    # ``overrides``) read them again.
    values: dict[str, Any] = recipe.__dict__.setdefault("_estimate_values", {})

    def get_value(path: str) -> Any:
        v = values.get(path, _MISSING)
        if v is _MISSING:
            v = values[path] = recipe.get(path)
        return v

    if not overrides:
        return get_value
    ov = dict(overrides)

    def get(path: str) -> Any:
        if path in ov:
            return ov[path]
        v = values.get(path, _MISSING)
        if v is _MISSING:
            v = values[path] = recipe.get(path)
        return v

    return get


def estimate_recipe(recipe: ResolvedRecipe, *, gpu: str | None = None, world_size: int | None = None,
                    overrides: Mapping[str, Any] | None = None) -> Estimate:
    """Per-stage estimate of ``recipe`` on ``gpu`` (default: the recipe's target, else H100 80GB).

    Raises :class:`EstimateUnavailable` when the model shape is unknown and
    :class:`~mbmem_lint.estimate.gpus.UnknownGpuError` for an unknown GPU name.
    """
    if recipe.partial:  # an override file on its own: the recipe's values (its shape, batch, ...) are unknown
        raise EstimateUnavailable("an override file on its own: memory needs the recipe it is paired with", [])
    # Capacity rules and suggestions ask for the same estimate several times per recipe (an unknown shape
    # too: it is remembered as such).
    cache: dict[Any, Estimate | EstimateUnavailable] = recipe.__dict__.setdefault("_estimate_cache", {})
    key = (gpu, world_size, tuple(sorted((k, repr(v)) for k, v in overrides.items())) if overrides else None)
    hit = cache.get(key)
    if isinstance(hit, EstimateUnavailable):
        raise hit.with_traceback(None)
    if hit is not None:
        return hit
    try:
        est = _estimate_recipe(recipe, gpu=gpu, world_size=world_size, overrides=overrides)
    except EstimateUnavailable as exc:
        cache[key] = exc
        raise
    cache[key] = est
    return est


def _estimate_recipe(recipe: ResolvedRecipe, *, gpu: str | None, world_size: int | None,
                     overrides: Mapping[str, Any] | None) -> Estimate:
    note = None
    if gpu is not None:
        spec = resolve_gpu(gpu)  # a name the user typed: unknown -> UnknownGpuError
    elif recipe.target.gpu is None:
        spec, note = resolve_gpu(DEFAULT_GPU), f"target GPU unknown; assumed {DEFAULT_GPU}"
    else:
        try:
            spec = resolve_gpu(recipe.target.gpu)
        except UnknownGpuError:  # inferred from the recipe name: fall back rather than fail
            spec = resolve_gpu(DEFAULT_GPU)
            note = f"target GPU {recipe.target.gpu!r} is not in the catalog; assumed {DEFAULT_GPU}"
    ws = world_size if world_size is not None else recipe.target.world_size
    # What-ifs re-read only the parts of the recipe's own inputs that their overrides can change.
    base: Inputs | None = recipe.__dict__.get("_estimate_inputs")
    inp = read_inputs(recipe_getter(recipe, overrides), ws, base=base, changed=overrides.keys() if overrides else ())
    if not overrides:
        recipe.__dict__["_estimate_inputs"] = inp
    est = _build(inp, spec, f"{recipe.path}::{recipe.function}")
    if note:
        est.assumptions.insert(0, note)
    return est
