"""Which layers sit on which pipeline stage (and virtual stage), and how many microbatches each holds in flight.

Layer indices: decoder layers ``0..num_layers-1``; MTP layers are numbered ``num_layers + j``.
"""

from __future__ import annotations

import re
from typing import Any

from mbmem_lint.estimate.inputs import Par
from mbmem_lint.records import dataclass, field


@dataclass
class StagePlan:
    """One pipeline rank: its virtual-stage chunks (layer indices per chunk) and the extra modules it holds."""

    rank: int
    chunks: list[list[int]] = field(default_factory=list)
    embedding: bool = False
    loss: bool = False

    @property
    def layers(self) -> list[int]:
        return [i for c in self.chunks for i in c]


_LAYOUT_CHARS = {"E": "E", "L": "L", "t": "t", "m": "m"}


def parse_layout(layout: Any) -> list[list[str]] | None:
    """MCore ``PipelineParallelLayerLayout.parse_str_to_list`` (transformer/pipeline_parallel_layer_layout.py
    L283-321): commas are cosmetic, ``(...)*n`` and ``x*n`` are unrolled, ``|`` separates virtual stages,
    E = embedding, t = decoder layer, m = MTP layer, L = loss. A list of lists of those names (or of LayerType
    names ``embedding``/``decoder``/``mtp``/``loss``) is accepted too. None when it cannot be parsed."""
    names = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
    if isinstance(layout, list):
        out: list[list[str]] = []
        for row in layout:
            if not isinstance(row, list):
                return None
            stage: list[str] = []
            for x in row:
                sym = _LAYOUT_CHARS.get(x) if isinstance(x, str) else None
                sym = sym or (names.get(str(x).rsplit(".", 1)[-1].lower()) if isinstance(x, str) else None)
                if sym is None:
                    return None
                stage.append(sym)
            out.append(stage)
        return out
    if not isinstance(layout, str) or not layout:
        return None
    s = layout.replace(",", "").replace(" ", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), s)
    stages = []
    for part in s.split("|"):
        if any(c not in _LAYOUT_CHARS for c in part):
            return None
        stages.append(list(part))
    return stages


def layout_plans(layout: Any, num_layers: int, mtp_layers: int, par: Par,
                 assumptions: list[str]) -> list[StagePlan] | None:
    """Stage plans from ``pipeline_model_parallel_layout``; virtual stage ``k`` lives on PP rank ``k % PP``
    (the 1-D -> 2-D conversion in ``PipelineParallelLayerLayout.__init__``, L46-52). None (and an assumption)
    when the layout is unparseable or inconsistent with the model."""
    parsed = parse_layout(layout)
    if parsed is None:
        assumptions.append(f"pipeline_model_parallel_layout {layout!r} could not be parsed; layers split evenly")
        return None
    flat = [c for st in parsed for c in st]
    if (len(parsed) % par.pp or flat.count("t") != num_layers or flat.count("m") != mtp_layers
            or flat.count("E") != 1 or flat.count("L") != 1):
        assumptions.append(f"pipeline_model_parallel_layout {layout!r} does not match PP={par.pp}, "
                           f"{num_layers} layers, {mtp_layers} MTP layers; layers split evenly")
        return None
    plans = [StagePlan(r) for r in range(par.pp)]
    nxt, nxt_mtp = 0, num_layers
    for k, st in enumerate(parsed):
        plan = plans[k % par.pp]
        chunk: list[int] = []
        for c in st:
            if c == "t":
                chunk.append(nxt)
                nxt += 1
            elif c == "m":
                chunk.append(nxt_mtp)
                nxt_mtp += 1
            elif c == "E":
                plan.embedding = True
            else:
                plan.loss = True
        plan.chunks.append(chunk)
    return plans


def stage_layer_counts(num_layers: int, par: Par, assumptions: list[str]) -> list[int]:
    pp = par.pp
    if pp == 1:
        return [num_layers]
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is not None or last is not None:
        left, stages = num_layers, pp
        if first is not None:
            left, stages = left - first, stages - 1
        if last is not None:
            left, stages = left - last, stages - 1
        mid = left // stages if stages > 0 else 0
        counts = [mid] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return counts
    extra_first = 1 if par.account_embedding else 0
    extra_last = 1 if par.account_loss else 0
    total = num_layers + extra_first + extra_last
    base, rem = divmod(total, pp)
    if rem:
        assumptions.append(f"{num_layers} layers do not divide over PP={pp}; extra layers placed on the first stages")
    counts = [base + (1 if i < rem else 0) for i in range(pp)]
    counts[0] -= extra_first
    counts[-1] -= extra_last
    return counts


def stage_chunks(num_layers: int, par: Par, assumptions: list[str]) -> list[list[list[int]]]:
    """Per PP rank, the global layer indices of each virtual chunk (MCore assigns chunks round-robin)."""
    counts = stage_layer_counts(num_layers, par, assumptions)
    v = par.vpp or 1
    out: list[list[list[int]]] = [[] for _ in counts]
    offset = 0
    for chunk in range(v):
        for rank, c in enumerate(counts):
            size = c // v + (1 if chunk < c % v else 0)
            out[rank].append(list(range(offset, offset + size)))
            offset += size
    return out


def stage_layer_indices(num_layers: int, par: Par, assumptions: list[str]) -> list[list[int]]:
    """Global layer indices on each PP rank (round-robin chunks under VPP, as MCore assigns them)."""
    return [[i for c in chunks for i in c] for chunks in stage_chunks(num_layers, par, assumptions)]


def stage_plans(num_layers: int, mtp_layers: int, par: Par, layout: Any, assumptions: list[str]) -> list[StagePlan]:
    """Stage plans: from the explicit layout when given, else the even/uneven split with the embedding on the
    first rank, and MTP layers + loss on the last rank's last chunk (MCore's default placement)."""
    if layout is not None:
        plans = layout_plans(layout, num_layers, mtp_layers, par, assumptions)
        if plans is not None:
            return plans
    plans = [StagePlan(r, chunks) for r, chunks in enumerate(stage_chunks(num_layers, par, assumptions))]
    plans[0].embedding = True
    plans[-1].loss = True
    plans[-1].chunks[-1].extend(range(num_layers, num_layers + mtp_layers))
    return plans


def chunk_passes(par: Par, rank: int, n_chunks: int, num_microbatches: int | None) -> list[float]:
    """Microbatches whose activations each chunk of a stage holds at the stage's peak (first backward).

    1F1B: ``PP - rank`` microbatches of the (single) chunk. Interleaved (MCore schedules.py
    ``get_pp_rank_microbatches``): ``2(PP-rank-1) + (v-1)PP`` warm-up forwards plus one in steady state;
    forward ``i`` runs chunk ``(i // PP) % v`` (microbatch groups of PP). Capped by the number of
    microbatches (per chunk).
    """
    pp = par.pp
    v = max(1, n_chunks)
    if pp == 1:
        return [1.0] * v
    if v == 1:
        value = float(pp - rank)
        if num_microbatches is not None:
            value = min(value, float(num_microbatches))
        return [value] + [0.0] * (v - 1)
    passes = 2 * (pp - rank - 1) + (v - 1) * pp + 1
    # Forward i runs chunk (i // PP) % v: whole groups of PP forwards go round the chunks, then the rest.
    groups, rest = divmod(passes, pp)
    counts = [float(pp * (groups // v + (1 if c < groups % v else 0)) + (rest if c == groups % v else 0))
              for c in range(v)]
    if num_microbatches is not None:
        counts = [min(c, float(num_microbatches)) for c in counts]
    return counts


def inflight_microbatches(par: Par, rank: int, num_microbatches: int | None) -> float:
    """Microbatches whose activations a stage holds at its peak, in units of 'whole stage'.

    1F1B: ``PP - rank``. Interleaved (VPP v): warm-up chunk forwards ``2(PP-rank-1) + (v-1)PP``
    plus one in steady state, each covering 1/v of the stage's layers (Korthikanti et al. 2022:
    ``PP(1 + (PP-1)/(PP v))`` on the first stage). Capped by the number of microbatches.
    """
    pp = par.pp
    if pp == 1:
        return 1.0
    if par.vpp:
        v = par.vpp
        chunks = 2 * (pp - rank - 1) + (v - 1) * pp + 1
        value = chunks / v
    else:
        value = float(pp - rank)
    if num_microbatches is not None:
        value = min(value, float(num_microbatches))
    return value
