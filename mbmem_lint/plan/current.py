"""The current recipe as the planner sees it: its knob assignment (:class:`Spec`), what else the
candidates' config values depend on (:class:`Context`), the model facts the constraints read, the
flags the cost model reads, and which knobs are pinned (``--keep``, unknown values, structure)."""

from __future__ import annotations

from typing import Any

from mbmem_lint.alloc_conf import merge_alloc_conf
from mbmem_lint.estimate.inputs import Getter, Inputs, read_inputs
from mbmem_lint.plan.constraints import ModelFacts, known_str
from mbmem_lint.plan.cost import Flags, layer_kinds
from mbmem_lint.plan.knobs import (
    CP,
    ES_OPTION,
    FIRST,
    GRAN,
    KNOBS,
    LAST,
    MBS,
    METHOD,
    MODS,
    NUM,
    OFFLOAD,
    OPT_DO,
    OPT_OFFLOAD,
    PP,
    TP,
    VPP,
    Context,
    Layout,
    Recompute,
    Setting,
    Spec,
)
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import is_known

# Finetuning datasets (Bridge training/config.py:1439-1457 asserts per-token loss with CP>1 for them).
SFT_DATASETS = ("GPTSFTDatasetConfig", "DirectHFSFTDatasetConfig", "EnergonDatasetConfig", "MockVLMSFTDatasetConfig")
LAYOUT_KNOBS = ("tp", "sp", "pp", "vpp", "uneven", "cp", "ep", "etp")


@dataclass
class Current:
    """The current recipe, read once per plan."""

    inp: Inputs
    spec: Spec
    ctx: Context
    facts: ModelFacts
    flags: Flags
    pinned: dict[str, str] = field(default_factory=dict)  # knob -> why it is not searched
    notes: list[str] = field(default_factory=list)


def _env(get: Getter, key: str) -> Any:
    v = get(f"env_vars.{key}")
    if is_known(v) and v is not None:
        return v
    env = get("env_vars")
    if isinstance(env, dict):
        return env.get(key)
    return None


def read_current(get: Getter, world_size: int | None, *, model_class: str | None,
                 dataset_class: str | None = None, keep: frozenset[str] = frozenset()) -> Current:
    """Read the current recipe through ``get`` (``path -> value``). Raises
    :class:`~mbmem_lint.estimate.types.EstimateUnavailable` when the model shape is unknown."""
    inp = read_inputs(get, world_size)
    par, rec = inp.par, inp.rec
    pinned: dict[str, str] = {k: "--keep" for k in keep}
    notes: list[str] = []

    def unknown(path: str) -> bool:
        return not is_known(get(path))

    for knob, path in (("tp", TP), ("pp", PP), ("vpp", VPP), ("cp", CP), ("mbs", MBS), ("recompute", GRAN),
                       ("distributed_optimizer", OPT_DO), ("cpu_offload", OFFLOAD),
                       ("optimizer_offload", OPT_OFFLOAD)):
        if knob not in pinned and unknown(path):
            pinned[knob] = f"{path} is not statically known"
    if rec.granularity == "selective" and unknown(MODS):
        pinned.setdefault("recompute", f"{MODS} is not statically known")
    for path in (FIRST, LAST):
        if unknown(path):
            pinned.setdefault("uneven", f"{path} is not statically known")
    if world_size is None:
        for k in LAYOUT_KNOBS:
            pinned.setdefault(k, "the world size is unknown (give --world-size)")
    if get("model.pipeline_model_parallel_layout") is not None:
        for k in ("pp", "vpp", "uneven"):
            pinned.setdefault(k, "model.pipeline_model_parallel_layout fixes the pipeline split")
    moe = inp.shape.num_experts > 0
    if not moe:
        pinned.setdefault("ep", "no experts")
        pinned.setdefault("etp", "no experts")
    peft_kind = inp.peft.kind if inp.peft is not None else None
    if inp.peft is None:
        pinned.setdefault("regather", "no LoRA")
    env_known = is_known(get("env_vars"))
    if not env_known:
        pinned.setdefault("expandable_segments", "env_vars is not statically known")

    mods = tuple(rec.modules) if rec.granularity == "selective" else None
    num = get(NUM)
    recompute = Recompute(rec.granularity, mods, known_str(get, METHOD),
                          num if isinstance(num, int) and not isinstance(num, bool) else None)
    layout = Layout(tp=par.tp, sp=par.sp, pp=par.pp, vpp=par.vpp, first=par.first_stage_layers,
                    last=par.last_stage_layers, cp=par.cp, ep=par.ep, etp=par.etp)
    opt = inp.opt
    setting = Setting(
        mbs=inp.train.mbs, recompute=recompute,
        act_offload=inp.off.cpu_layers if inp.off.cpu_offloading else 0,
        dist_opt=opt.distributed, fsdp=opt.fsdp if opt.fsdp not in (None, "no_shard") else None,
        opt_offload=opt.offload_fraction if opt.cpu_offload else 0.0,
        es=inp.rt.expandable_segments, regather=inp.peft.regather if inp.peft is not None else False,
    )
    if opt.fsdp == "no_shard":
        pinned.setdefault("fsdp", "Megatron-FSDP is on without sharding (no_shard)")
    ckpt = get("checkpoint.save"), get("checkpoint.load")
    alloc_conf = known_str(get, "env_vars.PYTORCH_CUDA_ALLOC_CONF")
    ctx = Context(
        alloc_conf=alloc_conf, es_current=inp.rt.expandable_segments,
        cuda_graphs=inp.rt.graph_impl not in ("none", ""),
        graph_register_off=str(_env(get, "NCCL_GRAPH_REGISTER")) == "0",
        moe=moe, peft=inp.peft is not None,
        checkpointing=any(v is not None for v in ckpt), ckpt_format=known_str(get, "checkpoint.ckpt_format"),
        es_conf=merge_alloc_conf(alloc_conf, ES_OPTION),
    )
    kinds = layer_kinds(inp)
    facts = ModelFacts.read(
        get, world_size, runtime=inp.rt, num_layers=inp.shape.num_layers, heads=inp.shape.heads, seq=inp.train.seq,
        peft_kind=peft_kind, lora_targets=inp.peft.targets if inp.peft is not None else None,
        dense_mlp_layers=any(k.mlp == "dense" for k in kinds), model_class=model_class,
        sft_cp_blocked=(dataset_class or "").endswith(SFT_DATASETS)
        and (get("model.calculate_per_token_loss") is not True or get("ddp.average_in_collective") is True),
    )
    flags = Flags(
        tp_overlap=get("model.tp_comm_overlap") is True,
        overlap_grad_reduce=get("ddp.overlap_grad_reduce") is True,
        overlap_param_gather=get("ddp.overlap_param_gather") is True,
        overlap_ep=get("model.overlap_moe_expert_parallel_comm") is True,
        overlap_cpu_optimizer=get("optimizer.overlap_cpu_optimizer_d2h_h2d") is True,
        peft_targets=tuple(inp.peft.targets) if inp.peft is not None else (),
    )
    unused = [k for k in keep if k not in KNOBS]
    if unused:
        notes.append(f"--keep {', '.join(unused)}: not a knob")
    return Current(inp, Spec(layout, setting), ctx, facts, flags, pinned, notes)
