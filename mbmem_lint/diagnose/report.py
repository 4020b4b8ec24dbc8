"""A diagnose run: scan the logs, build what is known about the run (recipe estimate, layout), classify,
compare; and its text / JSON / Markdown renderings."""

from __future__ import annotations

from typing import Any

from mbmem_lint.diagnose.classify import Diagnosis, RunContext, Suggestion, diagnose, gib
from mbmem_lint.diagnose.compare import (
    StageComparison,
    compare,
    layout_from_log,
)
from mbmem_lint.diagnose.scan import ScanResult
from mbmem_lint.records import dataclass, field


@dataclass
class DiagnoseReport:
    """The outcome of ``diagnose``: events, diagnoses, and (with a recipe) the per-stage comparison."""

    scan: ScanResult
    diagnoses: list[Diagnosis]
    context: RunContext
    comparison: list[StageComparison] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A failure was diagnosed (exit 1)."""
        return bool(self.diagnoses) or self.scan.failed

    def to_json(self) -> dict[str, Any]:
        s = self.scan
        est = self.context.estimate
        layout = self.context.layout
        return {
            "events": [e.to_json() for e in s.events()],
            "diagnoses": [d.to_json() for d in self.diagnoses],
            "comparison": None if self.comparison is None or est is None else {
                "recipe": self.context.recipe, "gpu": est.gpu.name, "world_size": est.world_size,
                "stages": [c.to_json() for c in self.comparison]},
            "layout": None if layout is None else {"world_size": layout.world_size, "tp": layout.tp, "pp": layout.pp,
                                                   "cp": layout.cp, "source": layout.source},
            "summary": {"files": list(s.files), "lines": s.lines, "ooms": len(s.ooms), "memory_reports": len(s.reports),
                        "known_errors": len(s.known), "communication_errors": len(s.comm), "cuda_errors": len(s.cuda),
                        "fatal_ends": len(s.fatal), "secondary_fatal_ends": s.secondary_fatal,
                        "failures": len(self.diagnoses),
                        "dropped": dict(s.dropped), "iteration_lines": s.iteration_lines,
                        "first_iteration": s.first_iteration,
                        "last_throughput": s.last_throughput.to_json() if s.last_throughput else None,
                        "alloc_conf": s.alloc_conf},
            "notes": list(s.notes) + list(self.notes),
        }


def run_diagnose(scan: ScanResult, ctx: RunContext | None = None) -> DiagnoseReport:
    """Diagnose the scanned logs (and compare them with the recipe's estimate when ``ctx`` has one)."""
    ctx = ctx or RunContext()
    notes: list[str] = []
    if ctx.layout is None:
        ctx.layout = layout_from_log(scan)
    if ctx.expandable_segments is None and scan.alloc_conf is not None:
        ctx.expandable_segments = "expandable_segments:True" in scan.alloc_conf.split(",")
    comparison = None
    if ctx.estimate is not None and ctx.layout is not None:
        comparison = compare(scan, ctx.estimate, ctx.layout, scan.oom_ranks())
        if not scan.reports:
            notes.append("no Megatron memory report in the logs: nothing measured to compare with the estimate "
                         "(Megatron prints one after the first iterations; the log may end before)")
    elif ctx.estimate is not None:
        notes.append("the ranks' pipeline stages are unknown (give --world-size): no per-stage comparison")
    if scan.reports and all(r.where.rank is None for r in scan.reports):
        notes.append("memory reports carry no rank")
    return DiagnoseReport(scan, diagnose(scan, ctx), ctx, comparison, notes)


def _suggestion_line(s: Suggestion) -> str:
    saving = f" (saves {gib(s.saving_bytes)})" if s.saving_bytes is not None else ""
    cost = f"; cost: {s.cost}" if s.cost else ""
    return f"{s.title}{saving}{cost}"


def render_text(rep: DiagnoseReport) -> str:
    s = rep.scan
    out: list[str] = []
    for d in rep.diagnoses:
        codes = f" [{', '.join(d.codes)}]" if d.codes else ""
        out.append(f"{d.where.file}:{d.where.line}: {d.cls}{codes}: {d.message}")
        for i, sug in enumerate(d.suggestions, 1):
            out.append(f"    {i}. {_suggestion_line(sug)}")
    if rep.comparison:
        est = rep.context.estimate
        out.append("")
        out.append(f"measured vs estimated per pipeline stage ({rep.context.recipe} on {est.gpu.name if est else '?'}):")
        out.append(f"  {'stage':<6} {'ranks':<12} {'measured max alloc':>19} {'estimated alloc':>16} {'error':>8}")
        for c in rep.comparison:
            ranks = ",".join(str(r) for r in c.ranks[:4]) + ("…" if len(c.ranks) > 4 else "")
            err = f"{c.error * 100:+.1f}%" if c.error is not None else "-"
            meas = gib(c.measured_max_allocated_bytes) if c.measured_max_allocated_bytes is not None else "-"
            flag = "  (OOM: measured is a lower bound)" if c.oom else ""
            out.append(f"  {c.pp_rank:<6} {ranks or '-':<12} {meas:>19} {gib(c.estimated_allocated_bytes):>16} "
                       f"{err:>8}{flag}")
    out.append("")
    summary = (f"{len(s.files)} log(s), {s.lines} lines: {len(s.ooms)} OOM report(s), {len(s.known)} known error(s), "
               f"{len(s.reports)} memory report(s)")
    others = [(len(s.comm), "communication error(s)"), (len(s.cuda), "CUDA error(s)"),
              (len(s.fatal), "unexplained fatal end(s)")]
    summary += "".join(f", {n} {what}" for n, what in others if n)
    if s.last_throughput and s.last_throughput.iteration is not None:
        t = s.last_throughput
        summary += f"; last iteration {t.iteration}"
        if t.elapsed_ms is not None:
            summary += f" ({t.elapsed_ms:.1f} ms"
            summary += f", {t.tflops_per_gpu:.1f} TFLOP/s/GPU)" if t.tflops_per_gpu is not None else ")"
    out.append(summary + ("." if rep.failed else ". No failure found (no OOM, known error, communication or CUDA error, "
                                                 "or traceback)."))
    if s.secondary_fatal:
        out.append(f"note: {s.secondary_fatal} more fatal end(s) (tracebacks, aborts, child failures) of processes whose "
                   "failure is diagnosed above")
    for n in [*s.notes, *rep.notes]:
        out.append(f"note: {n}")
    if s.dropped:
        out.append("note: events beyond the first " + ", ".join(f"{k}: {v} more" for k, v in s.dropped.items()))
    return "\n".join(out) + "\n"


def render_markdown(rep: DiagnoseReport) -> str:
    from mbmem_lint.report.markdown import cell

    out = ["### mbmem-lint diagnose", ""]
    if rep.diagnoses:
        out += ["| Class | Rank | Iteration | Where | Message | First change |", "|---|---:|---:|---|---|---|"]
        for d in rep.diagnoses:
            first = _suggestion_line(d.suggestions[0]) if d.suggestions else "—"
            it = d.where.iteration if d.where.iteration is not None else (
                f"after {d.where.after_iteration}" if d.where.after_iteration is not None else "—")
            out.append(f"| {d.cls} | {d.where.rank if d.where.rank is not None else '—'} | {it} | "
                       f"`{d.where.file}:{d.where.line}` | {cell(d.message)} | {cell(first)} |")
    else:
        out.append("No failure found (no OOM, known error, communication or CUDA error, or traceback).")
    if rep.comparison:
        out += ["", "| Stage | Measured max allocated | Estimated allocated | Error |", "|---|---:|---:|---:|"]
        for c in rep.comparison:
            err = f"{c.error * 100:+.1f}%" if c.error is not None else "—"
            out.append(f"| {c.pp_rank} | {gib(c.measured_max_allocated_bytes) if c.measured_max_allocated_bytes else '—'}"
                       f" | {gib(c.estimated_allocated_bytes)} | {err} |")
    return "\n".join(out) + "\n"
