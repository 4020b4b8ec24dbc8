"""Parameter counts per layer for the actual architecture (unsharded, whole-model numbers).

Each sublayer returns a :class:`Params` split by how it is sharded: ``tp`` (split over TP),
``rep`` (replicated over TP: norms, router, row-parallel biases), ``expert`` (routed experts,
split over EP·ETP). ``linear`` is the TP-sharded GEMM weight subset (FP8 casts apply to it).
"""

from __future__ import annotations

from mbmem_lint.estimate.inputs import Shape
from mbmem_lint.records import dataclass


@dataclass
class Params:
    """Parameter counts of a (sub)layer by sharding: TP-split, TP-replicated and expert (EP·ETP), plus the
    GEMM-weight subsets that FP8 casts apply to."""

    tp: float = 0.0
    rep: float = 0.0
    expert: float = 0.0
    linear: float = 0.0
    expert_linear: float = 0.0

    def __add__(self, o: Params) -> Params:
        return Params(self.tp + o.tp, self.rep + o.rep, self.expert + o.expert, self.linear + o.linear,
                      self.expert_linear + o.expert_linear)

    def times(self, n: int) -> Params:
        return Params(self.tp * n, self.rep * n, self.expert * n, self.linear * n, self.expert_linear * n)

    @property
    def total(self) -> float:
        return self.tp + self.rep + self.expert


def norm_params(s: Shape, width: int) -> float:
    return float(width if s.rmsnorm else 2 * width)


def attention(s: Shape) -> Params:
    """Standard (GQA) self-attention incl. its input norm: q, k, v, o; biases; qk-norm."""
    h, a, g, d = s.hidden, s.heads, s.groups, s.kv_channels
    qkv = h * (a + 2 * g) * d
    if s.ext is not None and s.ext.attn_gate:
        qkv += h * a * d  # the output gate's projection (attention.py L1678-1680)
    proj = a * d * h
    bias_tp = (a + 2 * g) * d if (s.add_bias_linear or s.add_qkv_bias) else 0
    rep = norm_params(s, h) + (h if s.add_bias_linear else 0) + (2 * d if s.qk_layernorm else 0)
    return Params(tp=qkv + proj + bias_tp, rep=rep, linear=qkv + proj)


def mla(s: Shape) -> Params:
    """Multi-latent attention (DeepSeek): down-projections are replicated, up-projections TP-split."""
    h, a = s.hidden, s.heads
    qk, pe, v = s.qk_head_dim, s.qk_pos_dim, s.v_head_dim
    rep = norm_params(s, h)
    if s.q_lora_rank:
        rep += h * s.q_lora_rank + norm_params(s, s.q_lora_rank)
        q_up = s.q_lora_rank * a * (qk + pe)
    else:
        q_up = h * a * (qk + pe)
    rep += h * (s.kv_lora_rank + pe) + norm_params(s, s.kv_lora_rank)
    kv_up = s.kv_lora_rank * a * (qk + v)
    proj = a * v * h
    return Params(tp=q_up + kv_up + proj, rep=rep, linear=q_up + kv_up + proj)


def _mlp_weights(s: Shape, h: int, ffn: int) -> float:
    return h * ffn * (2 if s.glu else 1) + ffn * h


def dense_mlp(s: Shape) -> Params:
    w = _mlp_weights(s, s.hidden, s.ffn)
    bias_tp = s.ffn * (2 if s.glu else 1) if s.add_bias_linear else 0
    rep = norm_params(s, s.hidden) + (s.hidden if s.add_bias_linear else 0)
    return Params(tp=w + bias_tp, rep=rep, linear=w)


def moe(s: Shape) -> Params:
    h, e = s.hidden, s.num_experts
    if s.moe_latent:
        per_expert = _mlp_weights(s, s.moe_latent, s.moe_ffn)
        latent = 2 * h * s.moe_latent
    else:
        per_expert = _mlp_weights(s, h, s.moe_ffn)
        latent = 0
    if s.add_bias_linear:
        per_expert += s.moe_ffn * (2 if s.glu else 1) + h
    shared = _mlp_weights(s, h, s.shared_ffn) if s.shared_ffn else 0
    rep = norm_params(s, h) + h * e + (h if s.shared_gate else 0)
    return Params(tp=shared + latent, rep=rep, expert=per_expert * e, linear=shared + latent,
                  expert_linear=per_expert * e)


def mamba(s: Shape) -> Params:
    """MCore MambaMixer (Mamba-2): in_proj, conv1d, A_log/D/dt_bias, gated RMSNorm, out_proj."""
    h = s.hidden
    di = s.mamba_heads * s.mamba_head_dim
    gs = s.mamba_groups * s.mamba_state
    in_proj = h * (2 * di + 2 * gs + s.mamba_heads)
    conv = (di + 2 * gs) * (s.mamba_conv + 1)
    small = 3 * s.mamba_heads + di  # A_log, D, dt_bias, norm weight
    out = di * h
    return Params(tp=in_proj + conv + small + out, rep=norm_params(s, h), linear=in_proj + out)


def layer_sublayers(s: Shape, index: int) -> list[str]:
    """Sublayer kinds of layer ``index`` (MTP layers have index >= num_layers)."""
    if s.hybrid is not None and index < len(s.hybrid):
        return [{"M": "mamba", "*": "attn", "-": "mlp", "E": "moe", "G": "attn"}[s.hybrid[index]]]
    attn = "mla" if s.mla else "attn"
    extra: list[str] = []
    ext = s.ext
    if ext is not None:  # estimate/kinds.py
        if ext.dsv4 is not None:
            ratios = ext.dsv4.compress_ratios
            attn = f"dsv4:{ratios[index] if index < len(ratios) else 0}"
        elif ext.linear is not None and index < s.num_layers and ext.linear[index]:
            attn = "gdn"
        elif ext.dsa is not None and s.mla:
            extra = ["dsa"]
    if index >= s.num_layers:  # MTP: same type as the last layer
        is_moe = s.moe_pattern[-1] if s.moe_pattern else False
    else:
        is_moe = s.moe_pattern[index]
    return [attn, *extra, "moe" if is_moe else "mlp"]


class LayerTable:
    """The sublayer kinds of a shape's layers, built once per shape (estimates ask per stage, per chunk and per
    what-if; the what-ifs of a recipe share its Shape object).

    Each distinct (kind, MTP or not) gets a one-character code, so a list of layers reads as a string
    (:meth:`codes`): a chunk or a stage is then keyed, compared and counted by kind in C instead of layer by
    layer. MTP layers get codes of their own (their parameters differ; their activations do not)."""

    def __init__(self, s: Shape) -> None:
        self.shape = s
        self.kinds: list[tuple[str, ...]] = []  # by code number
        self.mtp: list[bool] = []
        self._number: dict[tuple[bool, tuple[str, ...]], int] = {}
        self._codes: list[str] = []  # by layer index
        self.params: dict[str, Params] = {}  # layer_params of each code, as computed

    def _extend(self, count: int) -> None:
        s, nl = self.shape, self.shape.num_layers
        for i in range(len(self._codes), count):
            key = (i >= nl, tuple(layer_sublayers(s, i)))
            n = self._number.get(key)
            if n is None:
                n = self._number[key] = len(self.kinds)
                self.kinds.append(key[1])
                self.mtp.append(key[0])
            self._codes.append(chr(0x30 + n))

    def codes(self, indices: list[int]) -> str:
        """One character per layer of ``indices``, in order (equal characters: layers of the same kind)."""
        if not indices:
            return ""
        top = max(indices)
        if top >= len(self._codes):
            self._extend(max(top + 1, self.shape.num_layers + self.shape.mtp_layers))  # every layer at once
        return "".join(map(self._codes.__getitem__, indices))

    def kind(self, code: str) -> tuple[str, ...]:
        return self.kinds[ord(code) - 0x30]

    def is_mtp(self, code: str) -> bool:
        return self.mtp[ord(code) - 0x30]

    def layer_params(self, code: str, index: int) -> Params:
        """:func:`layer_params` of layer ``index``, whose code is ``code`` (computed once per code)."""
        hit = self.params.get(code)
        if hit is None:
            hit = self.params[code] = layer_params(self.shape, index)
        return hit


def layer_table(s: Shape) -> LayerTable:
    table: LayerTable | None = s.__dict__.get("_layer_table")
    if table is None:
        table = s.__dict__["_layer_table"] = LayerTable(s)
    return table


def layer_kinds(s: Shape, indices: list[int]) -> list[tuple[str, ...]]:
    """:func:`layer_sublayers` of each of ``indices`` as tuples (from the shape's :class:`LayerTable`)."""
    table = layer_table(s)
    return [table.kind(c) for c in table.codes(indices)]


def _sublayer_params(s: Shape, kind: str) -> Params:
    from mbmem_lint.estimate import kinds

    if kind.startswith("dsv4:"):
        return kinds.dsv4_params(s, int(kind[5:]))
    return {"gdn": kinds.gdn_params, "dsa": kinds.dsa_params}[kind](s)


SUBLAYER_PARAMS = {"attn": attention, "mla": mla, "mlp": dense_mlp, "moe": moe, "mamba": mamba}


def layer_params(s: Shape, index: int) -> Params:
    p = Params()
    for kind in layer_sublayers(s, index):
        fn = SUBLAYER_PARAMS.get(kind)
        p = p + (fn(s) if fn is not None else _sublayer_params(s, kind))
    if index >= s.num_layers:  # MTP block: eh_proj (2h -> h) + enorm + hnorm
        p = p + Params(tp=2 * s.hidden * s.hidden, rep=2 * norm_params(s, s.hidden), linear=2 * s.hidden * s.hidden)
    return p


def embedding_params(s: Shape) -> float:
    return float(s.vocab * s.hidden + (s.max_pos * s.hidden if s.learned_pos else 0))


def output_params(s: Shape) -> float:
    return float(s.vocab * s.hidden)


def lora_params(s: Shape, kind: str, dim: int, targets: list[str], index: int,
                expert_copies: float | None = None) -> Params:
    """Adapter parameters for one layer (A: in x r, B: r x out; DoRA adds a magnitude vector of size out).

    Routed experts: with Bridge's default ``share_expert_adapters=True`` a grouped expert linear gets one
    ParallelLinearAdapter shared by all local experts of the EP rank (peft/lora.py, ``use_per_expert_adapter``
    is False), so the whole model holds ``expert_copies`` = EP·ETP copies (one per expert-parallel shard);
    ``None`` = one adapter per expert (``share_expert_adapters=False``)."""
    h, a, g, d = s.hidden, s.heads, s.groups, s.kv_channels
    fc1_out = s.ffn * (2 if s.glu else 1)
    shapes: dict[str, tuple[int, int]] = {
        "linear_qkv": (h, (a + 2 * g) * d), "linear_proj": (a * d, h),
        "linear_fc1": (h, fc1_out), "linear_fc2": (s.ffn, h),
        "linear_q": (h, a * d), "linear_k": (h, g * d), "linear_v": (h, g * d),
        "linear_fc1_up": (h, s.ffn), "linear_fc1_gate": (h, s.ffn),
    }
    subs = layer_sublayers(s, index)
    out = Params()
    for t in targets:
        if t not in shapes:
            continue
        attn_target = t in ("linear_qkv", "linear_proj", "linear_q", "linear_k", "linear_v")
        if attn_target and "attn" not in subs:
            continue
        i, o = shapes[t]
        per = dim * (i + o) + (o if kind == "dora" else 0)
        if not attn_target:
            if "moe" in subs:
                ei = s.hidden if t != "linear_fc2" else s.moe_ffn
                eo = (s.moe_ffn * (2 if s.glu else 1) if t == "linear_fc1" else s.moe_ffn if t != "linear_fc2" else h)
                copies = s.num_experts if expert_copies is None else expert_copies
                out = out + Params(expert=copies * dim * (ei + eo))
                if s.shared_ffn:
                    out = out + Params(tp=dim * (h + s.shared_ffn * (2 if s.glu else 1)))
                continue
            if "mlp" not in subs:
                continue
        out = out + Params(tp=per)
    return out
