"""The knobs a plan may turn: their names (for ``--keep``), the config paths each writes, and a knob
assignment (:class:`Spec`) as config values.

A :class:`Spec` is a full assignment of every knob; :func:`spec_values` turns it into config values and
:func:`changes` keeps the values that differ from the current recipe: exactly what ``--set`` takes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mbmem_lint.records import dataclass

TP = "model.tensor_model_parallel_size"
SP = "model.sequence_parallel"
PP = "model.pipeline_model_parallel_size"
VPP = "model.virtual_pipeline_model_parallel_size"
FIRST = "model.num_layers_in_first_pipeline_stage"
LAST = "model.num_layers_in_last_pipeline_stage"
CP = "model.context_parallel_size"
EP = "model.expert_model_parallel_size"
ETP = "model.expert_tensor_parallel_size"
MBS = "train.micro_batch_size"
GRAN = "model.recompute_granularity"
MODS = "model.recompute_modules"
METHOD = "model.recompute_method"
NUM = "model.recompute_num_layers"
OFFLOAD = "model.cpu_offloading"
OFFLOAD_LAYERS = "model.cpu_offloading_num_layers"
OPT_DO = "optimizer.use_distributed_optimizer"
DDP_DO = "ddp.use_distributed_optimizer"
DDP_FSDP = "ddp.use_megatron_fsdp"
DIST_FSDP = "dist.use_megatron_fsdp"
FSDP_STRATEGY = "ddp.data_parallel_sharding_strategy"
OPT_OFFLOAD = "optimizer.optimizer_cpu_offload"
OPT_FRACTION = "optimizer.optimizer_offload_fraction"
ALLOC_CONF = "env_vars.PYTORCH_CUDA_ALLOC_CONF"
GRAPH_REGISTER = "env_vars.NCCL_GRAPH_REGISTER"
REGATHER = "peft.sequence_parallel_input_regather"
ES_OPTION = "expandable_segments:True"

# --keep names → the config paths the knob writes. Order = display order.
KNOBS: dict[str, tuple[str, ...]] = {
    "tp": (TP,),
    "sp": (SP,),
    "pp": (PP,),
    "vpp": (VPP,),
    "uneven": (FIRST, LAST),
    "cp": (CP,),
    "ep": (EP,),
    "etp": (ETP,),
    "mbs": (MBS,),
    "recompute": (GRAN, MODS, METHOD, NUM),
    "distributed_optimizer": (OPT_DO, DDP_DO),
    "fsdp": (DDP_FSDP, DIST_FSDP, FSDP_STRATEGY),
    "cpu_offload": (OFFLOAD, OFFLOAD_LAYERS),
    "optimizer_offload": (OPT_OFFLOAD, OPT_FRACTION),
    "expandable_segments": (ALLOC_CONF,),
    "regather": (REGATHER,),
}
ALIASES = {
    "tensor_parallel": "tp", "sequence_parallel": "sp", "pipeline_parallel": "pp", "virtual_pipeline": "vpp",
    "context_parallel": "cp", "expert_parallel": "ep", "expert_tensor_parallel": "etp",
    "micro_batch_size": "mbs", "dist_opt": "distributed_optimizer", "distopt": "distributed_optimizer",
    "megatron_fsdp": "fsdp", "activation_offload": "cpu_offload", "act_offload": "cpu_offload",
    "opt_offload": "optimizer_offload", "es": "expandable_segments", "allocator": "expandable_segments",
    "lora_regather": "regather", "input_regather": "regather", "uneven_stages": "uneven",
}
# Accepted by --keep but never changed by a plan (the global batch and the sequence are the experiment).
FIXED = ("seq_length", "global_batch_size", "gbs", "world_size", "model.seq_length", "dataset.seq_length",
         "train.global_batch_size")


class UnknownKnob(ValueError):
    """A --keep name that is neither a knob, an alias, a config path a knob writes, nor a fixed setting."""


def parse_keep(items: list[str] | tuple[str, ...] | str) -> frozenset[str]:
    """``tp,seq_length`` (or a list of such strings) → the knob names to pin. Config paths are accepted
    (``model.tensor_model_parallel_size`` pins ``tp``); fixed settings are accepted and ignored."""
    raw = [items] if isinstance(items, str) else list(items)
    names: set[str] = set()
    by_path = {p: k for k, paths in KNOBS.items() for p in paths}
    for item in raw:
        for part in item.split(","):
            key = part.strip()
            if not key:
                continue
            low = key.lower().replace("-", "_")
            if low in KNOBS:
                names.add(low)
            elif low in ALIASES:
                names.add(ALIASES[low])
            elif key in by_path:
                names.add(by_path[key])
            elif low in FIXED or key in FIXED:
                continue
            else:
                known = ", ".join([*KNOBS, *FIXED[:4]])
                raise UnknownKnob(f"unknown --keep knob {key!r}; known: {known} (or a config path they write)")
    return frozenset(names)


@dataclass(frozen=True)
class Recompute:
    """One activation-recompute setting (the four ``model.recompute_*`` fields)."""

    granularity: str | None  # None | "selective" | "full"
    modules: tuple[str, ...] | None  # selective modules (None: leave the recipe's value)
    method: str | None  # full: "uniform" | "block"
    num_layers: int | None

    def label(self) -> str:
        if self.granularity == "selective":
            return "selective " + "+".join(self.modules or ("core_attn",))
        if self.granularity == "full":
            return f"full {self.method} {self.num_layers}"
        return "none"


@dataclass(frozen=True)
class Layout:
    """The parallel layout: TP (and whether SP is on), PP with its virtual and uneven first/last stages,
    CP, EP and expert TP."""

    tp: int
    sp: bool
    pp: int
    vpp: int | None
    first: int | None
    last: int | None
    cp: int
    ep: int
    etp: int

    def label(self) -> str:
        parts = [f"TP{self.tp}" + ("+SP" if self.sp else ""), f"PP{self.pp}"]
        if self.vpp:
            parts.append(f"VPP{self.vpp}")
        if self.first is not None or self.last is not None:
            parts.append(f"stages {self.first or '-'}/{self.last or '-'}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep} ETP{self.etp}")
        return " ".join(parts)


@dataclass(frozen=True)
class Setting:
    """The memory knobs: micro-batch size, recompute, activation and optimizer CPU offload, optimizer
    sharding (distributed optimizer, Megatron-FSDP), expandable segments and LoRA input re-gather."""

    mbs: int
    recompute: Recompute
    act_offload: int  # layers offloaded (0: off)
    dist_opt: bool
    fsdp: str | None  # Megatron-FSDP sharding strategy (None: off)
    opt_offload: float  # fraction of the optimizer on the CPU (0: off)
    es: bool
    regather: bool


@dataclass(frozen=True)
class Spec:
    """A full knob assignment: layout and memory settings."""

    layout: Layout
    setting: Setting

    def with_setting(self, **kw: Any) -> Spec:
        return Spec(self.layout, replace(self.setting, **kw))


@dataclass(frozen=True)
class Context:
    """What a spec's config values depend on besides the spec: the recipe's current allocator config,
    whether CUDA graphs run (they need ``NCCL_GRAPH_REGISTER=0`` with expandable segments), whether the
    model has experts, and the recipe's checkpoint settings (Megatron-FSDP needs ``fsdp_dtensor``)."""

    alloc_conf: str | None
    es_current: bool  # expandable segments already on (possibly through PYTORCH_ALLOC_CONF)
    cuda_graphs: bool
    graph_register_off: bool
    moe: bool
    peft: bool
    checkpointing: bool
    ckpt_format: str | None
    es_conf: str  # the allocator config with expandable segments on (the recipe's other options kept)


def spec_values(spec: Spec, ctx: Context) -> dict[str, Any]:
    """Every config value the plan controls, for ``spec``."""
    lay, st = spec.layout, spec.setting
    v: dict[str, Any] = {TP: lay.tp, SP: lay.sp, PP: lay.pp, VPP: lay.vpp, FIRST: lay.first, LAST: lay.last,
                         CP: lay.cp, MBS: st.mbs}
    if ctx.moe:
        v[EP] = lay.ep
        v[ETP] = lay.etp
    rc = st.recompute
    v[GRAN] = rc.granularity
    if rc.modules is not None:
        v[MODS] = list(rc.modules)
    v[METHOD] = rc.method
    v[NUM] = rc.num_layers
    v[OFFLOAD] = st.act_offload > 0
    if st.act_offload > 0:
        v[OFFLOAD_LAYERS] = st.act_offload
    dist = st.dist_opt or st.fsdp is not None
    v[OPT_DO] = dist
    v[DDP_DO] = dist
    if st.fsdp is not None:
        # Bridge's validate() turns dist.use_megatron_fsdp on and forces the distributed optimizer; the plan
        # writes them so the recipe says what runs.
        v[DDP_FSDP] = True
        v[DIST_FSDP] = True
        v[FSDP_STRATEGY] = st.fsdp
        if ctx.checkpointing and ctx.ckpt_format != "fsdp_dtensor":
            v["checkpoint.ckpt_format"] = "fsdp_dtensor"
    v[OPT_OFFLOAD] = st.opt_offload > 0
    if st.opt_offload > 0:
        v[OPT_FRACTION] = st.opt_offload
    if st.es and not ctx.es_current:
        v[ALLOC_CONF] = ctx.es_conf
        if ctx.cuda_graphs and not ctx.graph_register_off:
            v[GRAPH_REGISTER] = 0  # MCore asserts it for CUDA graphs with expandable segments
    if ctx.peft:
        v[REGATHER] = st.regather
    return v


def same_value(a: Any, b: Any) -> bool:
    """Config equality as Bridge sees it (``True`` is not ``1``; lists compare element-wise)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


def changes(spec: Spec, base: Spec, ctx: Context, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config values of ``spec`` that differ from those of ``base`` (the current recipe read as a
    spec), in knob order: exactly what ``--set`` needs to turn the current recipe into ``spec``.
    ``old``: ``spec_values(base, ctx)`` when the caller has it."""
    if old is None:
        old = spec_values(base, ctx)
    out: dict[str, Any] = {}
    for path, value in spec_values(spec, ctx).items():
        if path in old and same_value(old[path], value):
            continue
        if path not in old and value in (None, False):
            continue
        out[path] = value
    return out


def title(base: Spec, spec: Spec) -> str:
    """What a candidate changes, in words (``PP 4->8, expandable segments``)."""
    a, b = base.layout, spec.layout
    out: list[str] = []
    for name, x, y in (("TP", a.tp, b.tp), ("PP", a.pp, b.pp), ("VPP", a.vpp, b.vpp), ("CP", a.cp, b.cp),
                       ("EP", a.ep, b.ep), ("ETP", a.etp, b.etp)):
        if x != y:
            out.append(f"{name} {x or '-'}->{y or '-'}")
    if a.sp != b.sp:
        out.append("SP " + ("on" if b.sp else "off"))
    if (a.first, a.last) != (b.first, b.last):
        out.append(f"first/last stage layers {b.first or '-'}/{b.last or '-'}")
    s0, s1 = base.setting, spec.setting
    if s0.mbs != s1.mbs:
        out.append(f"MBS {s0.mbs}->{s1.mbs}")
    if s0.recompute != s1.recompute:
        out.append(f"recompute {s1.recompute.label()}")
    if s0.act_offload != s1.act_offload:
        out.append(f"CPU activation offload {s1.act_offload} layers")
    if s1.fsdp is not None and s0.fsdp != s1.fsdp:
        out.append(f"Megatron-FSDP {s1.fsdp}")
    elif s0.dist_opt != s1.dist_opt:
        out.append("distributed optimizer")
    if s0.opt_offload != s1.opt_offload:
        out.append(f"optimizer CPU offload {s1.opt_offload:.0%}")
    if s0.es != s1.es:
        out.append("expandable segments")
    if s0.regather != s1.regather:
        out.append("LoRA input re-gather")
    return ", ".join(out) or "no change"
