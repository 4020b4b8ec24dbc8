"""Layer kinds beyond the dense / MoE / MLA / Mamba transformer: parameters and saved activations.

- ``gdn``: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5), MCore ``ssm/gated_delta_net`` (Core 0.19.2),
  on the layers ``linear_attention_freq`` marks (``models/gpt/experimental_attention_variant_module_specs.py``
  L403-420: an int N puts full attention on every N-th layer, a list gives 1 = linear per layer); the full
  attention layers of these models carry an output gate (``attention_output_gate``: ``linear_qkv`` also
  projects a gate the size of the queries, ``transformer/attention.py`` L1678-1680).
- ``dsa``: the DSA lightning indexer next to MLA (GLM-5.x, ``experimental_attention_variant="dsa"``), MCore
  ``transformer/experimental_attention_variant/dsa.py`` ``DSAIndexer`` (L1159-1200, L1248-1322).
- ``dsv4``: DeepSeek-V4 attention as its config and Bridge's ``DeepSeekV4Bridge.provider_bridge`` describe it
  (q LoRA, one shared KV head of ``head_dim``, grouped output LoRA ``o_groups`` x ``o_lora_rank``, attention
  sink, CSA compressors and a lightning indexer on compressed layers, hyper-connections of ``hc_mult``
  residual streams). Megatron Core 0.19.2 ships no ``dsv4_hybrid`` attention to read, so the tensors follow
  the checkpoint names Bridge maps (``models/deepseek/deepseek_v4_bridge.py`` L610-705).
- vision towers of VL models: the ViT of the ``vision_config``, built on the first pipeline stage only
  (``pre_process``), with its patch merger / projector; frozen (``freeze_vision_model``) it holds weights and
  saves no activations (nothing upstream of it needs a gradient).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mbmem_lint.estimate.activations import tokens
from mbmem_lint.records import dataclass, field

if TYPE_CHECKING:
    from mbmem_lint.estimate.inputs import Inputs, Reader, Shape
    from mbmem_lint.estimate.params import Params


@dataclass
class GDN:
    """Gated DeltaNet dimensions (``linear_*`` provider fields)."""

    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv: int

    @property
    def qk(self) -> int:
        return self.key_heads * self.key_dim

    @property
    def v(self) -> int:
        return self.value_heads * self.value_dim


@dataclass
class DSA:
    """DSA lightning-indexer dimensions (``dsa_indexer_*``)."""

    heads: int
    head_dim: int
    topk: int


@dataclass
class DSV4:
    """DeepSeek-V4 attention dimensions."""

    q_lora_rank: int
    head_dim: int
    o_groups: int
    o_lora_rank: int
    compress_ratios: list[int]
    hc_mult: int
    index_heads: int
    index_head_dim: int
    index_topk: int
    window: int


@dataclass
class Vision:
    """A vision (or audio) tower: ViT blocks, patch embedding, position table and merger/projector widths."""

    family: str  # "qwen" (Qwen2.5/3/3.5-VL), "siglip" (gemma-3), "generic"
    depth: int
    hidden: int
    ffn: int
    heads: int
    patch: int
    temporal_patch: int
    in_channels: int
    merge: int  # spatial merge (2 = 2x2 patches per LM token)
    out_hidden: int  # LM width the projector writes
    positions: int  # learned position-embedding rows
    glu: bool
    rmsnorm: bool
    deepstack: int  # extra (deepstack) mergers
    frozen: bool
    proj_frozen: bool
    tokens: float  # patches per sample (all images)
    source: str = ""
    bias: bool = True  # the blocks' linears have biases (Pixtral's have none)


@dataclass
class ShapeExt:
    """What the new layer kinds add to :class:`~mbmem_lint.estimate.inputs.Shape`."""

    linear: list[bool] | None = None  # per decoder layer: Gated DeltaNet instead of attention
    gdn: GDN | None = None
    attn_gate: bool = False
    dsa: DSA | None = None
    dsv4: DSV4 | None = None
    vision: Vision | None = None
    freeze_lm: bool = False
    assumptions: list[str] = field(default_factory=list)


# -- reading ------------------------------------------------------------------------------------------------------

def _linear_pattern(freq: Any, n: int) -> list[bool] | None:
    if isinstance(freq, bool) or freq is None:
        return None
    if isinstance(freq, int) and freq > 0:
        return [(i + 1) % freq != 0 for i in range(n)]
    if isinstance(freq, list) and len(freq) == n and all(isinstance(x, int) for x in freq):
        return [bool(x) for x in freq]
    return None


def read_ext(r: Reader, n_layers: int, hidden: int) -> ShapeExt | None:
    """The new layer kinds a recipe's model uses (None for none of them)."""
    variant = r.raw("model.experimental_attention_variant")
    vc = r.raw("model.vision_config")  # partly unknown (a dtype) is fine: _vision reads known keys only
    ext = ShapeExt()
    if variant == "gated_delta_net":
        pattern = _linear_pattern(r.value("model.linear_attention_freq", None), n_layers)
        if pattern is None:
            ext.assumptions.append("model.linear_attention_freq not known: every 4th layer assumed full attention")
            pattern = _linear_pattern(4, n_layers)
        ext.linear = pattern
        ext.gdn = GDN(key_heads=r.pos("model.linear_num_key_heads", 16), value_heads=r.pos("model.linear_num_value_heads", 32),
                      key_dim=r.pos("model.linear_key_head_dim", 128), value_dim=r.pos("model.linear_value_head_dim", 128),
                      conv=r.pos("model.linear_conv_kernel_dim", 4))
    ext.attn_gate = r.bool_("model.attention_output_gate", False)
    if variant == "dsa":
        ext.dsa = DSA(heads=r.pos("model.dsa_indexer_n_heads", 64), head_dim=r.pos("model.dsa_indexer_head_dim", 128),
                      topk=r.pos("model.dsa_indexer_topk", 2048))
    if variant == "dsv4_hybrid":
        ratios = r.value("model.csa_compress_ratios", None)
        ratios = [int(x) for x in ratios[:n_layers]] if isinstance(ratios, list) else [0] * n_layers
        ext.dsv4 = DSV4(q_lora_rank=r.pos("model.q_lora_rank", 1024), head_dim=r.pos("model.v_head_dim", 512),
                        o_groups=r.pos("model.o_groups", 8), o_lora_rank=r.pos("model.o_lora_rank", 1024),
                        compress_ratios=ratios + [0] * (n_layers - len(ratios)),
                        hc_mult=r.pos("model.num_residual_streams", 1) if r.bool_("model.enable_hyper_connections", False) else 1,
                        index_heads=r.pos("model.dsa_indexer_n_heads", 64), index_head_dim=r.pos("model.dsa_indexer_head_dim", 128),
                        index_topk=r.pos("model.dsa_indexer_topk", 512), window=r.pos("model.csa_window_size", 128))
        ext.assumptions.append("DeepSeek-V4 attention: Megatron Core 0.19.2 has no dsv4_hybrid module; its tensors are "
                               "modelled from the config (CSA compressor widths assumed equal to the head width)")
    if not isinstance(vc, dict):  # providers that keep the whole HF config (Ministral3ModelProvider.hf_config)
        whole = r.raw("model.hf_config")
        vc = whole.get("vision_config") if isinstance(whole, dict) else None
    if isinstance(vc, dict) and vc:
        ext.vision = _vision(r, vc, hidden, ext.assumptions)
    ext.freeze_lm = r.bool_("model.freeze_language_model", False)
    if (ext.linear is None and not ext.attn_gate and ext.dsa is None and ext.dsv4 is None and ext.vision is None
            and not ext.freeze_lm):
        return None
    return ext


def _int(d: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return default


def _vision(r: Reader, vc: dict[str, Any], lm_hidden: int, notes: list[str]) -> Vision | None:
    mt = str(vc.get("model_type", ""))
    depth = _int(vc, "depth", "num_hidden_layers", "vt_num_hidden_layers")  # vt_*: Kimi-K2.5's MoonViT
    hidden = _int(vc, "hidden_size", "embed_dim", "vt_hidden_size")
    if depth <= 0 or hidden <= 0:
        notes.append("vision_config lacks depth/hidden_size: the vision tower is not counted")
        return None
    ffn = _int(vc, "intermediate_size", "vt_intermediate_size", default=4 * hidden)
    heads = _int(vc, "num_heads", "num_attention_heads", "vt_num_attention_heads", default=max(1, hidden // 64))
    patch = _int(vc, "patch_size", default=14)
    act = str(vc.get("hidden_act", vc.get("hidden_activation", "")))
    qwen = mt.startswith("qwen") or "spatial_merge_size" in vc
    if qwen:
        family = "qwen"
        merge = _int(vc, "spatial_merge_size", default=2)
        out_hidden = _int(vc, "out_hidden_size", default=lm_hidden)
        positions = _int(vc, "num_position_embeddings")
        glu = act == "silu"  # Qwen2.5-VL blocks: SwiGLU (gate/up/down); Qwen3-VL: GELU fc1/fc2
        rms = "qwen2_5" in mt or glu
        deepstack = len(vc.get("deepstack_visual_indexes") or [])
        temporal = _int(vc, "temporal_patch_size", default=2)
    elif mt == "pixtral":
        # Pixtral (Ministral 3): 2-D RoPE (no position table), RMSNorm, SwiGLU, no biases (transformers
        # modeling_pixtral.py: PixtralAttention and PixtralMLP linears bias=False); Mistral3 projector: patch
        # merger (2x2 patches -> h), then h -> LM width -> LM width.
        family, merge, out_hidden, positions = "pixtral", _int(vc, "spatial_merge_size", default=2), lm_hidden, 0
        glu, rms, deepstack, temporal = True, True, 0, 1
    elif "siglip" in mt or "image_size" in vc:
        family = "siglip"
        merge = 1
        out_hidden = lm_hidden
        image = _int(vc, "image_size", default=896)
        positions = (image // patch) ** 2
        glu, rms, deepstack, temporal = False, False, 0, 1
    else:
        family = "generic"
        merge = _int(vc, "spatial_merge_size", default=1)  # pooling (gemma-4) averages: no wider projector
        kernel = vc.get("merge_kernel_size")
        if isinstance(kernel, list) and kernel and isinstance(kernel[0], int):
            merge = kernel[0]  # Kimi-K2.5's patch merger concatenates kernel x kernel patches
        out_hidden = _int(vc, "text_hidden_size", default=lm_hidden)
        positions = _int(vc, "position_embedding_size", "num_position_embeddings")
        glu, rms, deepstack, temporal = act == "silu", True, 0, 1
        notes.append(f"vision tower ({mt or 'unknown type'}) counted as a generic ViT from vision_config")
    frozen = r.bool_("model.freeze_vision_model", False)
    proj_frozen = r.bool_("model.freeze_vision_projection", False)
    tokens = _image_tokens(r, patch, notes)
    return Vision(family=family, depth=depth, hidden=hidden, ffn=ffn, heads=heads, patch=patch,
                  temporal_patch=temporal, in_channels=_int(vc, "in_channels", "num_channels", default=3),
                  merge=merge, out_hidden=out_hidden, positions=positions, glu=glu, rmsnorm=rms,
                  deepstack=deepstack, frozen=frozen, proj_frozen=proj_frozen, tokens=tokens, source=mt,
                  bias=mt != "pixtral")


def _image_tokens(r: Reader, patch: int, notes: list[str]) -> float:
    """Vision patches per sample: the dataset's images (``image_size`` x ``num_images`` of the mock VLM dataset,
    bridge/data/builders/mock_vlm_sft.py); else one 448x448 image, as an assumption."""
    size = r.value("dataset.image_size", None)
    n = r.value("dataset.num_images", None)
    if isinstance(size, list) and len(size) == 2 and all(isinstance(x, int) and x > 0 for x in size) \
            and isinstance(n, int) and n >= 0:
        return float(n * (size[0] // patch) * (size[1] // patch))
    notes.append("images per sample unknown (dataset.image_size / num_images): one 448x448 image assumed")
    return float((448 // patch) ** 2)


# -- parameters -----------------------------------------------------------------------------------------------------

def gdn_params(s: Shape) -> Params:
    """One Gated DeltaNet mixer incl. its fused input norm (ssm/gated_delta_net/common.py L195-278, gdn.py
    L34-48): in_proj h -> 2·qk + 2·v + 2·Hv (q, k, v, z, beta, alpha), depthwise conv1d over q, k, v (no bias),
    dt_bias and A_log per value head, out_norm over the value head width, out_proj v -> h."""
    from mbmem_lint.estimate.params import Params, norm_params

    g = _ext(s).gdn
    assert g is not None
    h = s.hidden
    in_proj = h * (2 * g.qk + 2 * g.v + 2 * g.value_heads)
    conv = (2 * g.qk + g.v) * g.conv
    out = g.v * h
    return Params(tp=in_proj + conv + 2 * g.value_heads + out, rep=norm_params(s, h) + g.value_dim,
                  linear=in_proj + out)


def dsa_params(s: Shape) -> Params:
    """The DSA indexer (dsa.py L1159-1200), replicated over TP (``parallel_mode="duplicated"``): linear_wq_b
    q_lora_rank -> heads·head_dim, linear_wk h -> head_dim, LayerNorm k_norm (weight + bias), linear_weights_proj
    h -> heads."""
    from mbmem_lint.estimate.params import Params

    d = _ext(s).dsa
    assert d is not None
    q_in = s.q_lora_rank or s.hidden
    return Params(rep=q_in * d.heads * d.head_dim + s.hidden * d.head_dim + 2 * d.head_dim + s.hidden * d.heads)


def dsv4_params(s: Shape, ratio: int) -> Params:
    """DeepSeek-V4 attention of a layer with CSA compression ``ratio`` (0: sliding-window only) incl. its input
    norm and hyper-connection mixers."""
    from mbmem_lint.estimate.params import Params, norm_params

    v4 = _ext(s).dsv4
    assert v4 is not None
    h, a, dh = s.hidden, s.heads, v4.head_dim
    rep = norm_params(s, h) + h * v4.q_lora_rank + norm_params(s, v4.q_lora_rank)  # wq_a + q_norm
    rep += h * dh + norm_params(s, dh)  # wkv (one shared KV head) + kv_norm
    q_up = v4.q_lora_rank * a * dh  # wq_b
    o_a = a * dh * v4.o_lora_rank // max(1, v4.o_groups)  # wo_a: each group maps its heads to o_lora_rank
    o_b = v4.o_groups * v4.o_lora_rank * h  # wo_b
    tp = q_up + o_a + o_b + a  # + attn_sink per head
    if ratio:
        # compressor: wkv and wgate (h -> head width), ape (ratio x width), norm; the indexer (q from the q latent,
        # head weights from h) with a compressor of its own.
        rep += 2 * h * dh + ratio * dh + dh
        rep += v4.q_lora_rank * v4.index_heads * v4.index_head_dim + h * v4.index_heads
        rep += 2 * h * v4.index_head_dim + ratio * v4.index_head_dim + v4.index_head_dim
    if v4.hc_mult > 1:
        n = v4.hc_mult
        # hc_{attn,ffn}_fn (n·h -> (2 + n)·n mixing weights), _base and _scale, for both sublayers.
        rep += 2 * (n * h * (2 + n) * n + (2 + n) * n + 3)
    return Params(tp=tp, rep=rep, linear=q_up + o_a + o_b)


def vision_params(v: Vision) -> float:
    """The tower's parameters: ViT blocks, patch embedding, position table, merger(s)/projector."""
    tower, proj = vision_param_split(v)
    return tower + proj


def vision_param_split(v: Vision) -> tuple[float, float]:
    """(ViT blocks + patch embedding + position table, merger(s)/projector) parameters."""
    h, f = v.hidden, v.ffn
    norm = h if v.rmsnorm else 2 * h
    attn = h * 3 * h + h * h + (3 * h + h if v.bias else 0)  # qkv and proj
    mlp = (3 * h * f + (2 * f + h if v.bias else 0)) if v.glu else (2 * h * f + (f + h if v.bias else 0))
    block = 2 * norm + attn + mlp
    patch = v.in_channels * v.temporal_patch * v.patch * v.patch * h + (h if v.family in ("siglip", "generic") or
                                                                         (v.family == "qwen" and not v.rmsnorm) else 0)
    if v.family == "pixtral":
        patch += h  # ln_pre
    positions = v.positions * h
    if v.family == "qwen":
        m = h * v.merge * v.merge
        merger = norm + m * m + m + m * v.out_hidden + v.out_hidden  # norm, fc1, fc2 (biases)
        extra = v.deepstack * (2 * m + m * m + m + m * v.out_hidden + v.out_hidden)  # post-shuffle norm
    elif v.family == "siglip":
        merger = 2 * h + h + h * v.out_hidden  # post_layernorm, soft-embedding RMSNorm, input projection
        extra = 0
    elif v.family == "pixtral":
        o = v.out_hidden
        merger = h + h * v.merge * v.merge * h + h * o + o * o  # norm, patch merger, linear_1, linear_2
        extra = 0
    else:
        m = h * v.merge * v.merge
        merger = norm + m * v.out_hidden
        extra = 0
    return float(v.depth * block + patch + positions), float(merger + extra)


def trainable_subset(inp: Inputs) -> bool:
    """True when only part of the base model trains without PEFT: a frozen language model, vision tower or
    projection (``freeze_language_model`` / ``freeze_vision_model`` / ``freeze_vision_projection``)."""
    ext = inp.shape.ext
    if inp.peft is not None or ext is None:
        return False
    return ext.freeze_lm or (ext.vision is not None and (ext.vision.frozen or ext.vision.proj_frozen))


def split_trainable(inp: Inputs, lm: Params, first: bool) -> tuple[Params, Params]:
    """(frozen, trainable) parameters of a stage without PEFT: the language model's ``lm`` and, on the first
    stage, the tower and projector, each frozen or trained as the recipe says."""
    from mbmem_lint.estimate.params import Params

    ext = inp.shape.ext
    frozen, trained = Params(), Params()
    if ext is not None and ext.freeze_lm:
        frozen = frozen + lm
    else:
        trained = trained + lm
    v = ext.vision if ext is not None else None
    if first and v is not None:
        tower, proj = vision_param_split(v)
        frozen = frozen + Params(tp=(tower if v.frozen else 0) + (proj if v.proj_frozen else 0))
        trained = trained + Params(tp=(0 if v.frozen else tower) + (0 if v.proj_frozen else proj))
    return frozen, trained


# -- activations ----------------------------------------------------------------------------------------------------

Add = Callable[[str, float], None]


def gdn_terms(inp: Inputs, add: Add, frozen: bool) -> None:
    """Saved for backward by one Gated DeltaNet mixer, per microbatch (gdn.py forward L133-277): the fused input
    norm's input and output (in_proj GEMM input); the in_proj output qkvzba, kept whole by its views (conv input,
    gate z, beta, alpha); the conv output (q, k and v of the rule); q and k after the L2 norm, repeated to the
    value heads when there are more; g (fp32) and beta; the rule's output (saved by the gated RMSNorm with z);
    the norm output (out_proj GEMM input, freed by "gdn_norm_out" recompute, common.py L262-265)."""
    s, p = inp.shape, inp.par
    g = _ext(s).gdn
    assert g is not None
    T, t = tokens(inp), p.tp
    r = 1.0 / t if p.sp else 1.0
    g8 = 1.0 if inp.prec.fp8 else 2.0
    add("attn_norm", 2 * T * s.hidden * r)
    if not frozen:
        add("qkv_linear", g8 * T * s.hidden * r)
    add("gdn_in_proj_out", 2 * T * (2 * g.qk + 2 * g.v + 2 * g.value_heads) / t)
    add("gdn_conv_out", 2 * T * (2 * g.qk + g.v) / t)
    qk_heads = max(g.value_heads, g.key_heads)
    add("gdn_qk", 2 * T * 2 * qk_heads * g.key_dim / t)
    add("gdn_g_beta", (4 + 2) * T * g.value_heads / t)
    add("core_attn_out", 2 * T * g.v / t)
    add("gdn_norm_out", g8 * T * g.v / t)
    if s.hidden_dropout > 0:
        add("attn_dropout", T * s.hidden * r)


def dsa_terms(inp: Inputs, add: Add) -> None:
    """Saved by the DSA indexer, per microbatch (dsa.py forward_before_topk L1248-1322): its inputs x and the q
    latent are gathered over sequence parallelism (full sequence on every TP rank) and saved by the duplicated
    linears; q (heads x head_dim) and k after RoPE, the head weights, and the top-k indices (int64)."""
    s = inp.shape
    d = _ext(s).dsa
    assert d is not None
    T = tokens(inp)
    q_in = s.q_lora_rank or s.hidden
    add("dsa_indexer", 2 * T * (s.hidden + q_in + d.heads * d.head_dim + d.head_dim + d.heads) + 8 * T * d.topk)


def dsv4_terms(inp: Inputs, add: Add, ratio: int) -> None:
    """DeepSeek-V4 attention of a layer with CSA compression ``ratio``, per microbatch: the hyper-connection mixers keep the n residual
    streams (n·h) for both sublayers; the input norm output, the q latent and its norm; q (a·D) and the shared
    KV head; the attention output (a·D) and log-sum-exp; the output-LoRA latent (o_groups·o_lora_rank);
    on compressed layers the compressed KV (ratio 4 keeps two overlapping halves) and the indexer's q, head
    weights and top-k indices."""
    s, p = inp.shape, inp.par
    v4 = _ext(s).dsv4
    assert v4 is not None
    T, t = tokens(inp), p.tp
    r = 1.0 / t if p.sp else 1.0
    h, a, dh = s.hidden, s.heads, v4.head_dim
    if v4.hc_mult > 1:
        add("hc_streams", 2 * 2 * T * v4.hc_mult * h * r)
    add("attn_norm", 2 * T * h * r)
    add("mla_down", 2 * T * (2 * v4.q_lora_rank + 2 * dh))
    add("core_attn", 2 * T * (a * dh / t + dh))
    add("core_attn_out", 2 * T * a * dh / t + 4 * T * a / t)
    add("attn_proj", 2 * T * v4.o_groups * v4.o_lora_rank)
    if ratio:
        add("csa_compressed", 2 * T * dh * (2 if ratio == 4 else 1) / ratio)
        add("dsa_indexer", 2 * T * (v4.index_heads * v4.index_head_dim + v4.index_heads) + 8 * T * v4.index_topk)


def vision_activation_bytes(inp: Inputs) -> float:
    """One microbatch of the tower's saved activations: per patch token and block, what a TE transformer layer
    saves without sequence parallelism (the layer terms of activations.py with the tower's widths: norm inputs
    and outputs, q/k/v, the attention output and log-sum-exp, the MLP input, fc1 output and fc2 input), plus the
    merger's input. Zero when the tower is frozen: nothing before it needs a gradient."""
    ext = inp.shape.ext
    v = ext.vision if ext is not None else None
    if v is None or v.frozen:
        return 0.0
    t = inp.par.tp
    T = v.tokens * inp.train.mbs
    h, f = v.hidden, v.ffn
    glu = 2 if v.glu else 1
    per_tok = 2 * (h + h + 3 * h / t + h / t + h / t + h + h + f * glu / t + f / t) + 4 * v.heads / t
    return T * (v.depth * per_tok + 2 * h * (1 + v.deepstack))


# -- counts -------------------------------------------------------------------------------------------------------------

def param_counts(inp: Inputs, with_mtp: bool = False) -> tuple[float, float]:
    """(total, active per token) parameters of the whole model: every decoder layer (and MTP layer when asked),
    embedding and output layer (once when tied), vision tower. Active counts ``topk`` of the routed experts."""
    from mbmem_lint.estimate.params import embedding_params, layer_params, norm_params, output_params

    s = inp.shape
    n = s.num_layers + (s.mtp_layers if with_mtp else 0)
    total = active = 0.0
    for i in range(n):
        p = layer_params(s, i)
        total += p.total
        dense = p.tp + p.rep
        active += dense + (p.expert * s.topk / s.num_experts if s.num_experts else p.expert)
    tail = embedding_params(s) + norm_params(s, s.hidden) + (0 if s.tied else output_params(s))
    ext = s.__dict__.get("ext")
    vis = vision_params(ext.vision) if ext is not None and ext.vision is not None else 0.0
    return total + tail + vis, active + tail + vis


def _ext(s: Shape) -> ShapeExt:
    ext = s.ext
    assert ext is not None
    return ext
