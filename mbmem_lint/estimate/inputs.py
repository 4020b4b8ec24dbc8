"""Read the fields the estimate needs from a recipe into plain typed values.

Every UNKNOWN is handled here, once: either a documented default (recorded in
``assumptions``) or :class:`EstimateUnavailable` for the model shape.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from mbmem_lint.estimate.types import EstimateUnavailable
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolved import PLAIN_TYPES, Unknown, is_known

Getter = Callable[[str], Any]

DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
               "float8_e4m3fn": 1, "uint8": 1, "int8": 1}
DEFAULT_VOCAB = 131072
# Without these the model's size is unknown and there is no estimate (MBM704 names them).
SHAPE_PATHS = ("model.num_layers", "model.hidden_size", "model.num_attention_heads")
LORA_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]


def regather_eligible_targets(targets: list[str]) -> list[str]:
    """LoRA targets whose base linear name ends in linear_qkv / linear_fc1 (or every linear) and that are not
    expert linears: the adapters the input re-gather with sequence parallelism is about."""
    return [t for t in targets if not ("experts" in t and "shared_experts" not in t)
            and (t.rstrip("*").endswith(("linear_qkv", "linear_fc1")) or t in ("*", ".*"))]


def dtype_bytes(value: Any, default: int) -> int:
    if not isinstance(value, str):
        return default
    return DTYPE_BYTES.get(value.rsplit(".", 1)[-1].lower(), default)


class Reader:
    """Typed access to recipe values with default handling and assumption logging.

    An estimate reads ~100 values and what-if re-estimates read them again: each accessor fetches the value
    itself and returns plain known values (most of them) without further calls."""

    def __init__(self, get: Getter) -> None:
        self._get = get
        self.assumptions: list[str] = []
        self.paths: list[str] = []  # every path read, in order

    def raw(self, path: str) -> Any:
        self.paths.append(path)
        return self._get(path)

    def known(self, path: str) -> bool:
        self.paths.append(path)
        v = self._get(path)
        return v is not None and is_known(v)

    def _unknown(self, path: str, default: Any, note: str | None) -> Any:
        if note is not None:
            self.assumptions.append(f"{path} is not statically known; assumed {default!r} ({note})")
        return default

    def value(self, path: str, default: Any = None, *, note: str | None = None) -> Any:
        self.paths.append(path)
        v = self._get(path)
        if type(v) in PLAIN_TYPES or is_known(v):
            return v
        return self._unknown(path, default, note)

    def int_(self, path: str, default: int | None, *, note: str | None = None) -> int | None:
        self.paths.append(path)
        v = self._get(path)
        return v if type(v) is int else self._to_int(path, v, default, note)

    def _to_int(self, path: str, v: Any, default: int | None, note: str | None) -> int | None:
        if type(v) is float:
            return int(v)
        if type(v) not in PLAIN_TYPES and not is_known(v):
            v = self._unknown(path, default, note)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            return default
        return int(v)

    def pos(self, path: str, default: int, *, note: str | None = None) -> int:
        self.paths.append(path)
        v = self._get(path)
        if type(v) is not int:
            v = self._to_int(path, v, default, note)
        return v if v is not None and v > 0 else default

    def bool_(self, path: str, default: bool, *, note: str | None = None) -> bool:
        self.paths.append(path)
        v = self._get(path)
        if type(v) is bool:
            return v
        if type(v) not in PLAIN_TYPES and not is_known(v):
            v = self._unknown(path, default, note)
        return bool(v) if isinstance(v, (bool, int)) else default

    def float_(self, path: str, default: float, *, note: str | None = None) -> float:
        v = self.value(path, default, note=note)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


@dataclass
class Shape:
    """The model architecture the estimate sizes: dense, MoE, MLA, Mamba/hybrid and MTP dimensions."""

    num_layers: int
    hidden: int
    heads: int
    groups: int
    kv_channels: int
    ffn: int
    vocab: int  # padded
    glu: bool
    rmsnorm: bool
    add_bias_linear: bool
    add_qkv_bias: bool
    qk_layernorm: bool
    tied: bool
    learned_pos: bool
    rotary: bool  # RoPE/YaRN/MRoPE: q and k are new tensors, not views of the fused QKV output
    max_pos: int
    # MoE
    num_experts: int
    moe_ffn: int
    topk: int
    shared_ffn: int
    shared_gate: bool
    moe_pattern: list[bool]
    moe_latent: int | None
    # MLA
    mla: bool
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_dim: int
    v_head_dim: int
    # Mamba / hybrid: one symbol per layer (None for plain GPT)
    hybrid: str | None
    mamba_heads: int
    mamba_head_dim: int
    mamba_state: int
    mamba_groups: int
    mamba_conv: int
    mtp_layers: int
    hidden_dropout: float
    attention_dropout: float
    # MLP activation runs in a fused kernel (bias_activation_fusion or use_te_activation_func); MCore's
    # TransformerConfig defaults bias_activation_fusion to False (transformer_config.py L482) and only some
    # Bridge model bridges turn it on (e.g. llama_bridge.py L67, not qwen3_bridge.py).
    glu_fused: bool = True
    # Gated DeltaNet, DSA indexer, DeepSeek-V4 attention, vision tower, frozen LM (estimate/kinds.py)
    ext: Any = None


@dataclass
class Par:
    """The parallel layout: TP/PP/VPP/CP/EP/ETP sizes, the derived DP and expert DP, sequence parallelism
    and the pipeline-split options."""

    tp: int
    pp: int
    vpp: int | None
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    sp: bool
    world_size: int | None
    first_stage_layers: int | None
    last_stage_layers: int | None
    account_embedding: bool
    account_loss: bool
    layout: Any = None  # pipeline_model_parallel_layout (str or list of lists), parsed in pipeline.py


@dataclass
class Train:
    """Sequence length, micro-batch size and micro-batches per step (None when the global batch size or
    the world size is unknown)."""

    seq: int
    mbs: int
    num_microbatches: int | None
    packed_thd: bool = False  # packed sequences (THD layout): dataset.enable_offline_packing / packed specs


@dataclass
class Precision:
    """Bytes per parameter and per gradient element, and the FP8/FP4 settings."""

    param_bytes: int
    grad_bytes: int
    fp8: bool  # fp8/fp4 compute
    fp8_recipe: str
    fp8_param: bool
    transpose_cache: bool


@dataclass
class Optim:
    """The optimizer as the estimate models it: main-param and per-state bytes, distributed / FSDP sharding
    and CPU offload."""

    name: str  # adam | sgd | muon
    distributed: bool
    instances: int
    main_param_bytes: int
    state_bytes: list[int]  # bytes per element of each optimizer state
    store_param_remainders: bool
    cpu_offload: bool
    offload_fraction: float
    fsdp: str | None  # megatron-fsdp sharding strategy, or None
    precision_aware: bool = False  # optimizer.use_precision_aware_optimizer


@dataclass
class Peft:
    """The LoRA / DoRA / canonical-LoRA adapters: kind, rank, target modules and sharing options."""

    kind: str  # lora | dora | canonical_lora
    dim: int
    targets: list[str]
    regather: bool
    share_expert_adapters: bool = True


@dataclass
class Recompute:
    """Activation recomputation: granularity (None, selective or full), method, layer count and modules."""

    granularity: str | None  # None | selective | full
    method: str | None
    num_layers: int
    modules: list[str]


@dataclass
class Offload:
    """Activation and weight offloading: fine-grained per-module offload and layer-wise CPU offloading."""

    fine_grained: bool
    modules: list[str]
    cpu_offloading: bool
    cpu_layers: int
    cpu_activations: bool
    cpu_weights: bool


@dataclass
class Runtime:
    """Runtime settings the estimate reads: CUDA graph implementation and scope, expandable segments,
    NCCL NVLS, whether attention is fused (flash) and, for unfused attention, how its softmax runs."""

    graph_impl: str  # none | local | transformer_engine | full_iteration
    graph_scope: list[str]
    expandable_segments: bool
    nvls: bool
    flash: bool
    softmax_fusion: bool  # model.masked_softmax_fusion (the fused kernel still has shape limits)
    softmax_fp32: bool  # model.attention_softmax_in_fp32 (forced by apply_query_key_layer_scaling)
    fused_qkv_rope: bool  # model.fused_single_qkv_rope: q, k, v all leave the fused RoPE as new tensors
    ce_impl: str = "native"  # cross-entropy: "te" | "native" (MCore fused) | "unfused" (vocab_parallel_cross_entropy)
    # Last pipeline stage: output-layer wgrad deferred to the pipeline flush (defer_embedding_wgrad_compute),
    # holding up to ``wgrad_deferral_limit`` microbatches' inputs and logit gradients (0 = all of them).
    defer_embedding_wgrad: bool = False
    wgrad_deferral_limit: int = 0


@dataclass
class Inputs:
    """Everything the estimate reads from one recipe, as plain typed values; unknown values were replaced
    by defaults, each recorded in ``assumptions``."""

    shape: Shape
    par: Par
    train: Train
    prec: Precision
    opt: Optim
    peft: Peft | None
    rec: Recompute
    off: Offload
    rt: Runtime
    assumptions: list[str] = field(default_factory=list)
    # How each part was read (read_inputs' ``base``: what-if re-estimates reuse the parts a change cannot affect).
    parts: dict[str, _Part] = field(default_factory=dict, repr=False, compare=False)
    # What the estimate derives from some of the parts, keyed by those parts' identity: one dict for a recipe's
    # inputs and every what-if read with them as base (they share the parts their overrides leave alone).
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


def _moe_pattern(r: Reader, n_layers: int, num_experts: int) -> list[bool]:
    if num_experts <= 0:
        return [False] * n_layers
    freq = r.value("model.moe_layer_freq", 1)
    if isinstance(freq, list) and len(freq) == n_layers:
        return [bool(x) for x in freq]
    if isinstance(freq, int) and freq > 0:
        return [i % freq == 0 for i in range(n_layers)]
    if isinstance(freq, str):  # "([0]*3+[1]*58)" style expressions are not evaluated
        r.assumptions.append(f"model.moe_layer_freq={freq!r} not evaluated; assumed every layer is MoE")
    return [True] * n_layers


def _hybrid(r: Reader) -> str | None:
    for p in ("model.hybrid_layer_pattern", "model.hybrid_override_pattern"):
        v = r.value(p, None)
        if isinstance(v, str) and v:
            return v
    return None


def _model_or_overlap(r: Reader, name: str, default: Any) -> Any:
    """``model.<name>``, else ``comm_overlap.<name>`` (Bridge's CommOverlapConfig copies it into the model config
    at setup, comm_overlap.py L416), else ``default``."""
    for path in (f"model.{name}", f"comm_overlap.{name}"):
        v = r.value(path, None)
        if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)):
            return int(v)
        if isinstance(v, bool):
            return v
    return default


def _ce_impl(r: Reader) -> str:
    """Which cross entropy the loss runs (MCore language_module.py compute_language_model_loss L166-196):
    TE's parallel_cross_entropy, MCore's fused one, or vocab_parallel_cross_entropy. Bridge's GPTModelProvider
    turns cross_entropy_loss_fusion on (gpt_provider.py L204); the implementation defaults to "native"."""
    if not r.bool_("model.cross_entropy_loss_fusion", True):
        return "unfused"
    impl = r.value("model.cross_entropy_fusion_impl", "native")
    return "te" if impl == "te" else "native"


def _pad_vocab(v: int, div: int, tp: int) -> int:
    m = max(1, div) * tp
    return -(-v // m) * m


class _Part:
    """One part of :class:`Inputs` as it was read: the value, the arguments it was read with, the paths it read
    and the assumptions it added. (A plain class: one per part and estimate, and a data class costs more to
    define than a one-file check spends on these.)"""

    __slots__ = ("value", "args", "reads", "assumptions")

    def __init__(self, value: Any, args: tuple[Any, ...], reads: list[str], assumptions: list[str]) -> None:
        self.value = value
        self.args = args
        self.reads = reads
        self.assumptions = assumptions


class _Parts:
    """Reads each part of the inputs, or takes it from ``base`` (the inputs of the same recipe without the
    ``changed`` paths: a what-if re-estimate) when the part read none of them and gets the same arguments. Its
    value is then the same, and the same object: what the estimate derives from it once (layer kinds,
    parameters, activation terms) is derived once for all what-ifs. A part read again that comes out equal to
    the base's is replaced by the base's object for the same reason."""

    def __init__(self, r: Reader, base: Inputs | None, changed: Collection[str]) -> None:
        self.r = r
        self.base = base.parts if base is not None else {}
        self.changed = frozenset(changed)
        self.read: dict[str, _Part] = {}

    def get(self, name: str, read: Callable[..., Any], *args: Any) -> Any:
        r = self.r
        old = self.base.get(name)
        if old is not None and old.args == args and self.changed.isdisjoint(old.reads):
            r.assumptions.extend(old.assumptions)
            self.read[name] = old
            return old.value
        paths, notes = len(r.paths), len(r.assumptions)
        value = read(r, *args)
        if old is not None and old.value == value:
            value = old.value
        self.read[name] = _Part(value, args, r.paths[paths:], r.assumptions[notes:])
        return value


def read_inputs(get: Getter, world_size: int | None, *, base: Inputs | None = None,
                changed: Collection[str] = ()) -> Inputs:
    """The estimate's inputs from ``get``. With ``base`` (read from the same values except the ``changed``
    paths), the parts of ``base`` that do not depend on ``changed`` are reused rather than read again."""
    parts = _Parts(Reader(get), base, changed)
    tp, pp, vpp, cp, ep, etp = sizes = parts.get("sizes", _read_sizes)
    shape = parts.get("shape", _read_shape, tp)
    par = parts.get("par", _read_par, world_size, sizes)
    train = parts.get("train", _read_train, world_size, par.dp)
    prec = parts.get("prec", _read_precision)
    opt = parts.get("opt", _read_optim, prec.param_bytes)
    peft = parts.get("peft", _read_peft)
    rec = parts.get("rec", _read_recompute)
    off = parts.get("off", _read_offload)
    rt = parts.get("rt", _read_runtime, pp)
    return Inputs(shape, par, train, prec, opt, peft, rec, off, rt, parts.r.assumptions, parts.read,
                  base.derived if base is not None else {})


def _read_sizes(r: Reader) -> tuple[int, int, int | None, int, int, int]:
    """(TP, PP, VPP or None, CP, EP, ETP)."""
    tp = r.pos("model.tensor_model_parallel_size", 1)
    pp = r.pos("model.pipeline_model_parallel_size", 1)
    vpp_v = r.int_("model.virtual_pipeline_model_parallel_size", None)
    vpp = vpp_v if vpp_v and vpp_v > 1 else None
    cp = r.pos("model.context_parallel_size", 1)
    ep = r.pos("model.expert_model_parallel_size", 1)
    etp_v = r.int_("model.expert_tensor_parallel_size", None)
    etp = etp_v if etp_v and etp_v > 0 else (1 if ep > 1 else tp)
    return tp, pp, vpp, cp, ep, etp


def _read_shape(r: Reader, tp: int) -> Shape:
    missing = [p for p in SHAPE_PATHS if not r.known(p)]
    hybrid = _hybrid(r)
    if hybrid is not None and "model.num_layers" in missing:
        missing.remove("model.num_layers")
    if missing:
        raise EstimateUnavailable("model shape is not statically known", missing)
    hidden = r.pos("model.hidden_size", 1)
    heads = r.pos("model.num_attention_heads", 1)

    hybrid_syms = None
    mtp = r.int_("model.mtp_num_layers", 0) or 0
    if hybrid is not None:
        main, _, mtp_part = hybrid.partition("/")
        hybrid_syms = "".join(c for c in main if c in "M*-EG")
        n_layers = len(hybrid_syms)
    else:
        n_layers = r.pos("model.num_layers", 1)

    vocab_raw = r.int_("model.vocab_size", None)
    if vocab_raw is None:
        vocab_raw = r.int_("tokenizer.vocab_size", None)
    if vocab_raw is None:
        vocab_raw = DEFAULT_VOCAB
        r.assumptions.append(f"vocab size unknown (model.vocab_size, tokenizer.vocab_size); assumed {DEFAULT_VOCAB}")
    pad = r.value("model.should_pad_vocab", False)
    vocab = _pad_vocab(vocab_raw, r.pos("model.make_vocab_size_divisible_by", 128), tp) if pad is not False else vocab_raw

    ffn_v = r.int_("model.ffn_hidden_size", None)
    ffn = ffn_v if ffn_v else 4 * hidden
    groups = r.int_("model.num_query_groups", None) or heads
    kv = r.int_("model.kv_channels", None) or hidden // heads
    num_experts = r.int_("model.num_moe_experts", 0) or 0
    norm = r.value("model.normalization", "LayerNorm")
    mla = r.value("model.multi_latent_attention", False) is True or r.known("model.kv_lora_rank")
    act = r.value("model.activation_func", "")
    glu = r.value("model.gated_linear_unit", False) is True
    pos_type = r.value("model.position_embedding_type", "learned_absolute")
    if isinstance(r.raw("model.position_embedding_type"), Unknown):
        # Unknown (e.g. a partial config.json leaves Bridge's rope/yarn choice open): every AutoBridge model uses
        # rotary embeddings; a learned table would add max_position x hidden parameters.
        pos_type = "rope"
        r.assumptions.append("model.position_embedding_type is not statically known; assumed rotary (rope)")

    shape = Shape(
        num_layers=n_layers, hidden=hidden, heads=heads, groups=groups, kv_channels=kv, ffn=ffn, vocab=vocab,
        glu=glu, rmsnorm=isinstance(norm, str) and "rms" in norm.lower(),
        add_bias_linear=r.bool_("model.add_bias_linear", True),
        add_qkv_bias=r.bool_("model.add_qkv_bias", False),
        qk_layernorm=r.bool_("model.qk_layernorm", False),
        tied=r.bool_("model.share_embeddings_and_output_weights", True),
        learned_pos=pos_type == "learned_absolute",
        rotary=pos_type in ("rope", "yarn", "mrope"),
        max_pos=r.pos("model.seq_length", 1024),
        num_experts=num_experts,
        moe_ffn=r.int_("model.moe_ffn_hidden_size", None) or ffn,
        topk=r.pos("model.moe_router_topk", 2),
        shared_ffn=r.int_("model.moe_shared_expert_intermediate_size", 0) or 0,
        shared_gate=r.bool_("model.moe_shared_expert_gate", False),
        moe_pattern=_moe_pattern(r, n_layers, num_experts) if hybrid_syms is None else
        [c == "E" for c in hybrid_syms],
        moe_latent=r.int_("model.moe_latent_size", None),
        mla=mla,
        q_lora_rank=r.int_("model.q_lora_rank", None) if mla else None,
        kv_lora_rank=r.pos("model.kv_lora_rank", 512),
        qk_head_dim=r.pos("model.qk_head_dim", 128),
        qk_pos_dim=r.pos("model.qk_pos_emb_head_dim", 64),
        v_head_dim=r.pos("model.v_head_dim", 128),
        hybrid=hybrid_syms,
        mamba_heads=r.int_("model.mamba_num_heads", None) or (2 * hidden) // r.pos("model.mamba_head_dim", 64),
        mamba_head_dim=r.pos("model.mamba_head_dim", 64),
        mamba_state=r.pos("model.mamba_state_dim", 128),
        mamba_groups=r.pos("model.mamba_num_groups", 8),
        mamba_conv=r.pos("model.mamba_d_conv", 4),
        mtp_layers=mtp,
        hidden_dropout=r.float_("model.hidden_dropout", 0.1),
        attention_dropout=r.float_("model.attention_dropout", 0.1),
        glu_fused=r.bool_("model.bias_activation_fusion", False,
                          note="MCore's TransformerConfig default: the unfused GLU path") is True
        or r.bool_("model.use_te_activation_func", False),
    )
    if (r.raw("model.experimental_attention_variant") is not None or r.raw("model.attention_output_gate") is True
            or isinstance(r.raw("model.vision_config"), dict) or r.raw("model.freeze_language_model") is True
            or isinstance(r.raw("model.hf_config"), dict)):
        # Gated DeltaNet, DSA, DeepSeek-V4, a vision tower or a frozen LM (estimate/kinds.py, imported only then)
        from mbmem_lint.estimate.kinds import read_ext

        shape.ext = read_ext(r, n_layers, hidden)
        if shape.ext is not None:
            r.assumptions.extend(shape.ext.assumptions)
    if num_experts == 0 and isinstance(r.raw("model.num_moe_experts"), Unknown):
        r.assumptions.append("model.num_moe_experts is not statically known; assumed a dense model")
    if isinstance(act, str) and act and "silu" not in act and "gelu" not in act and glu:
        r.assumptions.append(f"activation {act!r} with gated_linear_unit counted as a 2-matrix GLU input")
    return shape


def _read_par(r: Reader, world_size: int | None, sizes: tuple[int, int, int | None, int, int, int]) -> Par:
    tp, pp, vpp, cp, ep, etp = sizes
    if world_size is None:
        dp = 1
        r.assumptions.append("world size unknown: assumed DP=1 (no data-parallel sharding of optimizer state)")
    else:
        dp = max(1, world_size // (tp * pp * cp))
    edp = max(1, (dp * tp * cp) // (ep * etp))
    return Par(
        tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=dp, edp=edp,
        sp=r.bool_("model.sequence_parallel", False) and tp > 1, world_size=world_size,
        first_stage_layers=r.int_("model.num_layers_in_first_pipeline_stage", None),
        last_stage_layers=r.int_("model.num_layers_in_last_pipeline_stage", None),
        account_embedding=r.bool_("model.account_for_embedding_in_pipeline_split", False),
        account_loss=r.bool_("model.account_for_loss_in_pipeline_split", False),
        layout=r.value("model.pipeline_model_parallel_layout", None),
    )


def _read_train(r: Reader, world_size: int | None, dp: int) -> Train:
    seq = r.pos("model.seq_length", 0) or r.pos("dataset.seq_length", 0)
    if seq <= 0:
        seq = 4096
        r.assumptions.append("sequence length unknown (model.seq_length); assumed 4096")
    mbs = r.pos("train.micro_batch_size", 1, note="no micro_batch_size")
    gbs = r.int_("train.global_batch_size", None)
    nmb = max(1, gbs // (mbs * dp)) if gbs and world_size is not None else None
    # Packed sequences run in the THD layout (Bridge's packed-sequence datasets pass PackedSeqParams(qkv_format="thd")).
    packed_size = r.int_("dataset.packed_sequence_specs.packed_sequence_size", None) or 0
    packed = r.bool_("dataset.enable_offline_packing", False) or packed_size > 0
    return Train(seq=seq, mbs=mbs, num_microbatches=nmb, packed_thd=packed)


def _read_precision(r: Reader) -> Precision:
    pdt = r.value("model.params_dtype", None)
    if pdt is None:
        pdt = r.value("mixed_precision.params_dtype", None)
    if pdt is None and (r.value("model.bf16", False) is True or r.value("mixed_precision.bf16", False) is True):
        pdt = "torch.bfloat16"
    if pdt is None:
        pdt = "torch.bfloat16"
        r.assumptions.append("model.params_dtype unknown; assumed torch.bfloat16")
    param_bytes = dtype_bytes(pdt, 2)
    fp32_grads = r.bool_("ddp.grad_reduce_in_fp32", True)
    grad_bytes = 4 if fp32_grads else param_bytes
    pa_opt = r.bool_("optimizer.use_precision_aware_optimizer", False)
    # MCore DDP's grad buffer dtype is fp32 iff grad_reduce_in_fp32, else the param dtype
    # (param_and_grad_buffer.py group_params_for_buffers L883-900); optimizer.main_grads_dtype is read only by
    # Megatron-FSDP (megatron_fsdp_main_grads_dtype falls back to it), not by the DDP buffers.
    use_fsdp = r.bool_("ddp.use_megatron_fsdp", False) or r.bool_("dist.use_megatron_fsdp", False)
    if pa_opt and use_fsdp:
        fsdp_g = r.value("ddp.megatron_fsdp_main_grads_dtype", None)
        grad_bytes = dtype_bytes(fsdp_g if fsdp_g is not None else r.value("optimizer.main_grads_dtype", None),
                                 grad_bytes)
    fp8 = r.value("model.fp8", None)
    fp4 = r.value("model.fp4", None)
    fp8_on = (isinstance(fp8, str) and fp8 != "") or (isinstance(fp4, str) and fp4 != "")
    return Precision(
        param_bytes=param_bytes, grad_bytes=grad_bytes, fp8=fp8_on,
        fp8_recipe=str(r.value("model.fp8_recipe", "delayed") or "delayed"),
        fp8_param=fp8_on and (r.bool_("model.fp8_param", False) or r.bool_("ddp.fp8_param_gather", False)),
        transpose_cache=not r.bool_("model.disable_parameter_transpose_cache", False),
    )


def _read_optim(r: Reader, param_bytes: int) -> Optim:
    pa_opt = r.bool_("optimizer.use_precision_aware_optimizer", False)
    opt_name = str(r.value("optimizer.optimizer", "adam") or "adam").lower()
    if opt_name not in ("adam", "adamw", "sgd", "muon", "dist_muon"):
        r.assumptions.append(f"optimizer {opt_name!r} modelled as Adam (2 states)")
    main_bytes = 4 if param_bytes < 4 else 0
    states = [4, 4]
    if pa_opt:
        main_bytes = dtype_bytes(r.value("optimizer.main_params_dtype", None), 4) if param_bytes < 4 else 0
        states = [dtype_bytes(r.value("optimizer.exp_avg_dtype", None), 4),
                  dtype_bytes(r.value("optimizer.exp_avg_sq_dtype", None), 4)]
    if opt_name == "sgd":
        states = [4] if r.float_("optimizer.sgd_momentum", 0.9) > 0 else []
    elif "muon" in opt_name:
        states = [4]
    fsdp = None
    if r.bool_("ddp.use_megatron_fsdp", False) or r.bool_("dist.use_megatron_fsdp", False):
        fsdp = str(r.value("ddp.data_parallel_sharding_strategy", "no_shard") or "no_shard")
    dist = r.bool_("optimizer.use_distributed_optimizer", False) or r.bool_("ddp.use_distributed_optimizer", False)
    return Optim(
        name=opt_name, distributed=dist,
        instances=r.pos("ddp.num_distributed_optimizer_instances", 1),
        main_param_bytes=main_bytes, state_bytes=states,
        store_param_remainders=pa_opt and r.bool_("optimizer.store_param_remainders", True) and param_bytes == 2
        and main_bytes == 4,
        cpu_offload=r.bool_("optimizer.optimizer_cpu_offload", False),
        offload_fraction=r.float_("optimizer.optimizer_offload_fraction", 0.0),  # optimizer_config.py L347
        fsdp=fsdp,
        precision_aware=pa_opt,
    )


def _read_peft(r: Reader) -> Peft | None:
    peft = None
    pv = r.value("peft", None)
    if isinstance(pv, dict):
        target = str(pv.get("_target_", ""))
        kind = "dora" if "dora" in target.lower() else "canonical_lora" if "canonical" in target.lower() else "lora"
        targets = r.value("peft.target_modules", None)
        if not isinstance(targets, list):
            targets = (["linear_q", "linear_k", "linear_v", "linear_proj", "linear_fc1_up", "linear_fc1_gate",
                        "linear_fc2"] if kind == "canonical_lora" else list(LORA_TARGETS))
        peft = Peft(kind=kind, dim=r.pos("peft.dim", 32), targets=[str(t) for t in targets],
                    regather=r.bool_("peft.sequence_parallel_input_regather", False),
                    share_expert_adapters=r.bool_("peft.share_expert_adapters", True))
    return peft


def _read_recompute(r: Reader) -> Recompute:
    gran = r.value("model.recompute_granularity", None)
    mods = r.value("model.recompute_modules", None)
    return Recompute(
        granularity=gran if gran in ("selective", "full") else None,
        method=r.value("model.recompute_method", None),
        num_layers=r.int_("model.recompute_num_layers", None) or 1,
        modules=[str(m) for m in mods] if isinstance(mods, list) else ["core_attn"],
    )


def _read_offload(r: Reader) -> Offload:
    om = r.value("model.offload_modules", None)
    return Offload(
        fine_grained=r.bool_("model.fine_grained_activation_offloading", False),
        modules=[str(m) for m in om] if isinstance(om, list) else [],
        cpu_offloading=r.bool_("model.cpu_offloading", False),
        cpu_layers=r.int_("model.cpu_offloading_num_layers", 0) or 0,
        cpu_activations=r.bool_("model.cpu_offloading_activations", True),
        cpu_weights=r.bool_("model.cpu_offloading_weights", False),
    )


def _read_runtime(r: Reader, pp: int) -> Runtime:
    impl = r.value("model.cuda_graph_impl", "none")
    scope = r.value("model.cuda_graph_scope", [])
    scope_l = [str(s) for s in scope] if isinstance(scope, list) else ([scope] if isinstance(scope, str) else [])
    env = r.value("env_vars.PYTORCH_CUDA_ALLOC_CONF", None)
    if env is None:
        env = r.value("env_vars.PYTORCH_ALLOC_CONF", None)
    if env is None:
        env_all = r.value("env_vars", None)
        if isinstance(env_all, dict):
            env = env_all.get("PYTORCH_ALLOC_CONF", env_all.get("PYTORCH_CUDA_ALLOC_CONF"))
    es = isinstance(env, str) and "expandable_segments:True" in env.replace(" ", "")
    nvls_v = r.value("env_vars.NCCL_NVLS_ENABLE", None)
    nvls = r.bool_("ddp.nccl_ub", False) or not (nvls_v is not None and str(nvls_v) == "0")
    attn_backend = str(r.value("model.attention_backend", "auto") or "auto")
    return Runtime(
        graph_impl=str(impl) if isinstance(impl, str) and impl else "none",
        graph_scope=scope_l, expandable_segments=es, nvls=nvls,
        flash="unfused" not in attn_backend and "local" not in attn_backend,
        # Bridge's GPTModelProvider sets masked_softmax_fusion=True; MCore's TransformerConfig defaults
        # attention_softmax_in_fp32 to True.
        softmax_fusion=r.bool_("model.masked_softmax_fusion", True),
        softmax_fp32=r.bool_("model.attention_softmax_in_fp32", True)
        or r.bool_("model.apply_query_key_layer_scaling", False),
        fused_qkv_rope=r.bool_("model.fused_single_qkv_rope", False),
        ce_impl=_ce_impl(r),
        defer_embedding_wgrad=pp > 1 and _model_or_overlap(r, "defer_embedding_wgrad_compute", False) is True,
        wgrad_deferral_limit=max(0, int(_model_or_overlap(r, "wgrad_deferral_limit", 0) or 0)),
    )
