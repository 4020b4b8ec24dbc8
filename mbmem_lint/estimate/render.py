"""Text and markdown renderings of an :class:`Estimate` (plain ASCII, width-limited)."""

from __future__ import annotations

from mbmem_lint.estimate.types import Estimate
from mbmem_lint.report.common import fmt_gib

GIB = 1024**3


def _gib(n: float) -> str:
    return fmt_gib(n, 2)


def _bar(value: int, capacity: int, width: int) -> str:
    frac = value / capacity if capacity else 0.0
    filled = min(width, int(round(frac * width)))
    bar = "#" * filled + "." * (width - filled)
    if frac > 1:
        bar = bar[:-1] + "!"
    return f"[{bar}] {frac * 100:5.1f}%"


def render_text(est: Estimate, width: int = 100) -> str:
    usable = est.gpu.usable_bytes
    lines = [
        f"{est.recipe} on {est.gpu.name} (usable {_gib(usable)}, marketed {est.gpu.capacity_bytes / 1e9:.0f} GB)",
        "parallelism: " + " ".join(f"{k}={v}" for k, v in est.parallelism.items())
        + f"  world_size={est.world_size}",
    ]
    name_w = max(20, min(48, width - 30))
    for st in est.stages:
        lines.append("")
        lines.append(f"stage pp_rank={st.pp_rank} ({st.layers} layers): {_gib(st.total_bytes)} "
                     f"(allocated {_gib(st.allocated_bytes)})")
        for c in sorted(st.components, key=lambda c: -c.bytes):
            lines.append(f"  {c.name[:name_w]:<{name_w}} {c.bytes / GIB:10.2f} GiB  {c.kind}")
    lines.append("")
    bar_w = max(10, width - 30)
    for st in est.stages:
        lines.append(f"pp{st.pp_rank:<3} {_bar(st.total_bytes, usable, bar_w)}")
    verdict = "fits" if est.fits else "DOES NOT FIT"
    lines.append("")
    lines.append(f"peak: stage {est.peak_stage}, {_gib(est.peak_bytes)}; {verdict}; headroom "
                 f"{_gib(est.headroom_bytes)}")
    lines.append(f"allocated peak (max_memory_allocated): stage {est.allocated_peak_stage}, "
                 f"{_gib(est.allocated_peak_bytes)}")
    lines.append(_band_line(est))
    for a in est.assumptions:
        lines.append(f"assumption: {a}")
    return "\n".join(line[:width] if len(line) > width and not line.startswith("assumption") else line
                     for line in lines)


def _band_line(est: Estimate) -> str:
    return (f"uncertainty: +/-{est.uncertainty * 100:.0f}% (error band measured on published {est.model_kind} "
            f"runs, bench/estimate_validation.py)")


def render_markdown(est: Estimate) -> str:
    usable = est.gpu.usable_bytes
    verdict = "fits" if est.fits else "**does not fit**"
    out = [
        f"### Memory estimate: `{est.recipe}` on {est.gpu.name}",
        "",
        f"Peak: stage {est.peak_stage}, {_gib(est.peak_bytes)} of {_gib(usable)} usable; {verdict} "
        f"(headroom {_gib(est.headroom_bytes)}). Allocated peak (`max_memory_allocated`): stage "
        f"{est.allocated_peak_stage}, {_gib(est.allocated_peak_bytes)}. {_band_line(est).capitalize()}.",
        "",
        "| stage | total | allocated | usage |",
        "|---|---:|---:|---|",
    ]
    for st in est.stages:
        out.append(f"| {st.pp_rank} | {_gib(st.total_bytes)} | {_gib(st.allocated_bytes)} | "
                   f"`{_bar(st.total_bytes, usable, 20)}` |")
    peak = est.peak
    out += ["", f"Components of stage {peak.pp_rank}:", "", "| component | kind | bytes | fields |",
            "|---|---|---:|---|"]
    for c in sorted(peak.components, key=lambda c: -c.bytes):
        out.append(f"| {c.name} | {c.kind} | {_gib(c.bytes)} | {', '.join(f'`{f}`' for f in c.fields[:4])} |")
    if est.assumptions:
        out += ["", "Assumptions:", ""] + [f"- {a}" for a in est.assumptions]
    return "\n".join(out) + "\n"
