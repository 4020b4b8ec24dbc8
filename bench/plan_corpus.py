"""Plan every corpus recipe the check reports as not fitting (MBM701) and print the table for docs/plan.md.

    MBMEM_CORPUS_DIR=/tmp/corpus/unpacked .venv/bin/python bench/plan_corpus.py [--markdown OUT]

For each MBM701 recipe: the best candidate (change, step time relative to the recipe's, peak) or why there is
none at that world size, and the plan's time. Exit 1 when a recipe has neither a candidate nor an explanation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from mbmem_lint.dev.corpus import corpus_cwd, ensure_corpus
from mbmem_lint.estimate.api import estimate_recipe
from mbmem_lint.estimate.gpus import UnknownGpuError
from mbmem_lint.estimate.suggest import capacity_findings
from mbmem_lint.estimate.types import EstimateUnavailable
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.plan import PlanError, PlanOptions, plan_path
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

GIB = 1024**3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--top", type=int, default=3)
    args = ap.parse_args(argv)
    corpus = ensure_corpus()
    rows: list[str] = []
    times: list[float] = []
    missing = 0
    new_errors = 0
    inherited: dict[str, int] = {}
    with corpus_cwd(corpus) as rel:
        run = resolve_paths(rel, Settings(), ResolveOptions())
        targets = sorted({(r.path, r.function) for r in run.recipes if _mbm701(r)})
        print(f"{len(targets)} recipes with MBM701")
        for path, function in targets:
            t0 = time.perf_counter()
            results = plan_path(path, Settings(), PlanOptions(top=args.top, with_diff=False), function=function)
            dt = time.perf_counter() - t0
            times.append(dt)
            for r in results:
                short = path.split("megatron/bridge/", 1)[-1]
                name = f"`{short}` `{function}`"
                if isinstance(r, PlanError):
                    rows.append(f"| {name} | – | – | – | – | {r.reason} |")
                    missing += 1
                    continue
                cur = f"{r.current.peak_bytes / GIB:.1f}"
                if r.candidates:
                    c = r.candidates[0]
                    new, kept = _recheck(path, function, c.set_args)
                    new_errors += len(new)
                    for code in kept:
                        inherited[code] = inherited.get(code, 0) + 1
                    if new:
                        print(f"NEW ERRORS with the best candidate of {path}::{function}: {new}")
                    more = "; ".join(f"{x.title} ({x.relative_step_time:.2f}x)" for x in r.candidates[1:])
                    unmeasured = ", ".join(c.unmeasured) or "–"
                    rows.append(f"| {name} | {r.world_size} {r.gpu.name} | {cur} → {c.estimate.peak_bytes / GIB:.1f} | "
                                f"{c.title} ({c.relative_step_time:.2f}x) | {unmeasured} | {more or '–'} |")
                else:
                    rows.append(f"| {name} | {r.world_size} {r.gpu.name} | {cur} | none | – | {r.explanation} |")
                    if not r.explanation:
                        missing += 1
                print(rows[-1], f"[{dt:.2f}s]", flush=True)
    head = ["| recipe | GPUs | peak GiB (current → best) | best candidate (step time) | its uncalibrated terms | "
            "next candidates, or why none |",
            "|---|---|---:|---|---|---|"]
    text = "\n".join(head + rows) + "\n"
    text += (f"\n{len(times)} recipes; plan time median {statistics.median(times):.2f} s, max {max(times):.2f} s "
             "(in-process, search only, no diff).\n")
    print(f"\nplans: {len(times)}, median {statistics.median(times):.2f} s, max {max(times):.2f} s; "
          f"without candidate or explanation: {missing}")
    print(f"best candidates re-checked with `check FILE::FUNCTION --set ...`: new errors {new_errors}; errors "
          f"the recipe already had (no-effect rules, kept): {inherited or 'none'}")
    text += (f"Each best candidate re-checked (`check FILE::FUNCTION --set ...`): {new_errors} new errors; "
             f"errors the recipes already had and keep: {inherited or 'none'}.\n")
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 1 if missing else 0


def _recheck(path: str, function: str, set_args: list[str]) -> tuple[list[str], list[str]]:
    """Errors of ``check FILE::FUNCTION --set ...`` with a candidate's items: those the recipe does not have
    without them (must be none), and the codes of those it already had."""
    from mbmem_lint.parse.yaml_overrides import parse_dotlist
    from mbmem_lint.pipeline import run_check

    def errors(items: list[str]) -> set[tuple[str, str]]:
        opts = ResolveOptions(function=function, set_overrides=parse_dotlist(items) if items else None)
        diags = run_check([path], Settings(), opts, need_edits=False).diagnostics
        return {(d.code, d.message) for d in diags if d.severity == "error"}

    before, after = errors([]), errors(set_args)
    return sorted(f"{c}: {m}" for c, m in after - before), sorted(c for c, _ in after & before)


def _mbm701(recipe: ResolvedRecipe) -> bool:
    """What MBM701 reports (rules/memory.py): a capacity finding of severity error."""
    try:
        est = estimate_recipe(recipe)
    except (EstimateUnavailable, UnknownGpuError):
        return False
    s = Settings()
    return any(f.severity == "error" for f in capacity_findings(recipe, est, s.headroom_margin, s.memory_uncertainty))


if __name__ == "__main__":
    raise SystemExit(main())
