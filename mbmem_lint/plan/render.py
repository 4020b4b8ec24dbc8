"""Plan output: text (terminal), Markdown (PR comments), JSON, and each candidate's display-only diff."""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnostics import Edit
from mbmem_lint.plan.cost import TERMS
from mbmem_lint.plan.types import PlanResult
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.sources import SourceFile

GIB = 1024**3
TERM_LABELS = {
    "compute": "compute", "recompute": "recompute", "tp_comm": "TP comm", "cp_comm": "CP comm",
    "ep_comm": "EP comm", "regather": "re-gather", "act_offload": "act. offload", "fsdp": "FSDP gathers",
    "pipeline_bubble": "PP bubble", "pp_p2p": "PP send/recv", "dp_comm": "DP comm",
    "optimizer_offload": "opt. offload", "allocator": "allocator",
}


def candidate_diff(recipe: ResolvedRecipe, changes: dict[str, Any], sources: dict[str, SourceFile]) -> str:
    """The changes as a unified diff of the recipe's files (display-only: a suggestion to review), built
    with the fixes' edit primitives: the statement that set a value is edited when the recipe has one, else
    ``cfg.<path> = <value>`` goes before the ``return``. Values set by ``--set`` cannot be edited in a file:
    they are listed as comments."""
    from mbmem_lint.fix import edits as E
    from mbmem_lint.fix.apply import EditConflict, apply_edits
    from mbmem_lint.fix.diff import repo_relative, unified_diff

    by_file: dict[str, list[Edit]] = {}
    missing: list[str] = []
    for path, value in changes.items():
        found = E.set_setting(recipe, path, value, sources)
        if not found:
            missing.append(path)
        for e in found:
            by_file.setdefault(e.path, []).append(e)
    out: list[str] = []
    for path, file_edits in by_file.items():
        src = sources.get(path)
        if src is None:
            continue
        try:
            new = apply_edits(src.text, _merge_insertions(file_edits))
        except EditConflict:
            missing.extend(p for p in changes if p not in missing)
            continue
        out.append(unified_diff(src.text, new, repo_relative(path)))
    for path in missing:
        out.append(f"# {path}: no statement in the recipe to edit (set by --set or a YAML override); "
                   f"use --set {path}={changes[path]!r}\n")
    return "".join(out)


def _merge_insertions(edits: list[Edit]) -> list[Edit]:
    """Insertions at one offset as one edit, in the order the changes were listed (knob order)."""
    out: list[Edit] = []
    at: dict[int, int] = {}
    for e in edits:
        if e.start == e.end and e.start in at:
            i = at[e.start]
            prev = out[i]
            if e.replacement not in prev.replacement:
                out[i] = Edit(prev.path, prev.start, prev.end, prev.replacement + e.replacement)
            continue
        if e.start == e.end:
            at[e.start] = len(out)
        out.append(e)
    return out


def _gib(n: int | float) -> str:
    return f"{n / GIB:.1f}"


def _terms_line(rel: dict[str, float]) -> str:
    parts = [f"{TERM_LABELS[k]} {v:.3f}" for k, v in rel.items() if k in TERMS and abs(v) >= 0.0005]
    return ", ".join(parts)


def render_text(result: PlanResult) -> str:
    lines: list[str] = [f"{result.recipe}"]
    p = result.current.parallelism
    lay = f"tp={p.get('tp')} pp={p.get('pp')} vpp={p.get('vpp')} cp={p.get('cp')} ep={p.get('ep')} dp={p.get('dp')}"
    status = "fits" if result.current_fits else "DOES NOT FIT"
    lines.append(f"gpu {result.gpu.name}, world size {result.world_size}; budget {_gib(result.budget_bytes)} GiB per rank "
                 f"({_gib(result.gpu.usable_bytes)} usable, {result.headroom_margin:.0%} headroom)")
    lines.append(f"current: {lay}; peak {_gib(result.current.peak_bytes)} GiB on stage {result.current.peak_stage} "
                 f"({status}); modelled step {result.current_terms.total:.2f} s")
    for k, why in result.pinned.items():
        lines.append(f"  kept: {k} ({why})")
    for note in result.notes:
        lines.append(f"  note: {note}")
    lines.append("")
    if not result.candidates:
        lines.append(f"no candidate: {result.explanation}")
    for c in result.candidates:
        stages = " ".join(f"{_gib(s.total_bytes)}" for s in c.estimate.stages)
        lines.append(f"#{c.rank}  {c.relative_step_time:.3f}x step time  peak {_gib(c.estimate.peak_bytes)} GiB  "
                     f"{c.title}")
        lines.append(f"    stages (GiB): {stages}")
        lines.append(f"    cost terms (x current step): {_terms_line(c.relative_terms)}")
        if c.unmeasured:
            names = ", ".join(TERM_LABELS[t] for t in c.unmeasured)
            lines.append(f"    not calibrated on a measurement: {names} (docs/plan.md)")
        lines.append("    --set " + " --set ".join(_quote(a) for a in c.set_args))
        if c.diff:  # made only when the plan asked for diffs (PlanOptions.with_diff)
            lines.extend("    | " + ln for ln in c.diff.rstrip("\n").splitlines())
        lines.append("")
    st = result.stats
    lines.append(f"searched {st.layouts} layouts ({st.layouts_pruned} pruned by their model state), "
                 f"evaluated {st.evaluated} configurations in {st.seconds:.2f} s"
                 + ("; evaluation budget exhausted" if st.exhausted else ""))
    return "\n".join(lines) + "\n"


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def render_markdown(result: PlanResult) -> str:
    lines = [f"### Plan for `{result.recipe}`", ""]
    status = "fits" if result.current_fits else "**does not fit**"
    lines.append(f"{result.gpu.name}, world size {result.world_size}: current peak {_gib(result.current.peak_bytes)} GiB "
                 f"({status}; budget {_gib(result.budget_bytes)} GiB).")
    lines.append("")
    if not result.candidates:
        lines.append(f"No candidate: {result.explanation}")
        return "\n".join(lines) + "\n"
    lines.append("| # | change | step time | peak GiB | cost terms |")
    lines.append("|---:|---|---:|---:|---|")
    for c in result.candidates:
        lines.append(f"| {c.rank} | {c.title} | {c.relative_step_time:.3f}x | {_gib(c.estimate.peak_bytes)} | "
                     f"{_terms_line(c.relative_terms)} |")
    lines.append("")
    for c in result.candidates:
        if c.diff:
            lines += [f"<details><summary>#{c.rank} {c.title}</summary>", "", "```diff", c.diff.rstrip("\n"), "```",
                      "", "</details>", ""]
    return "\n".join(lines) + "\n"
