"""Which layers sit on which pipeline stage, and how many microbatches each stage holds in flight."""

from __future__ import annotations

from mbmem_lint.estimate.inputs import Par


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


def stage_layer_indices(num_layers: int, par: Par, assumptions: list[str]) -> list[list[int]]:
    """Global layer indices on each PP rank (round-robin chunks under VPP, as MCore assigns them)."""
    counts = stage_layer_counts(num_layers, par, assumptions)
    v = par.vpp or 1
    out: list[list[int]] = [[] for _ in counts]
    offset = 0
    for chunk in range(v):
        for rank, c in enumerate(counts):
            size = c // v + (1 if chunk < c % v else 0)
            out[rank].extend(range(offset, offset + size))
            offset += size
    return out


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
