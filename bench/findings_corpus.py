"""Run the full pipeline over the megatron-bridge 0.6.2 ``recipes/`` + ``perf_recipes/`` corpus and print
findings per rule (and every error-level finding, for review).

    .venv/bin/python bench/findings_corpus.py [--errors] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from mbmem_lint.check.registry import all_rules
from mbmem_lint.dev.corpus import corpus_cwd, ensure_corpus
from mbmem_lint.pipeline import run_check
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--errors", action="store_true", help="print every error-level finding")
    ap.add_argument("--show", default="", help="print every finding of these codes (comma-separated)")
    ap.add_argument("--json", help="write all findings as JSON")
    args = ap.parse_args(argv)
    corpus = ensure_corpus()
    with corpus_cwd(corpus) as rel:
        t0 = time.perf_counter()
        run = run_check(rel, Settings(), ResolveOptions())
        dt = time.perf_counter() - t0
    diags = run.diagnostics
    by_code = collections.Counter(d.code for d in diags)
    sev = {r.code: r.severity for r in all_rules()}
    names = {r.code: r.name for r in all_rules()}
    print(f"{len(rel)} files, {run.functions_seen} functions seen, {len(run.failed)} failed to resolve, "
          f"{len(diags)} findings in {dt:.1f}s")
    crashes = [d for d in diags if d.code == "MBM001"]
    print(f"rule crashes (MBM001): {len(crashes)}")
    for d in crashes[:20]:
        print("   ", d.message)
    print()
    by_sev = collections.Counter((d.code, d.severity) for d in diags)
    print(f"{'code':<8} {'default':<8} {'count':>6}  {'error':>5} {'warn':>5} {'info':>5}  name")
    for code, n in sorted(by_code.items()):
        e, w, i = (by_sev[(code, s)] for s in ("error", "warning", "info"))
        print(f"{code:<8} {sev.get(code, '-'):<8} {n:>6}  {e:>5} {w:>5} {i:>5}  {names.get(code, '')}")
    show = {c.strip() for c in args.show.split(",") if c.strip()}
    if args.errors or show:
        print()
        for d in diags:
            if (args.errors and d.severity == "error" and d.code != "MBM001") or d.code in show:
                print(f"{d.location.path}:{d.location.line}: {d.code} [{d.severity}] {d.function}: {d.message}")
    if args.json:
        Path(args.json).write_text(json.dumps([d.to_json() for d in diags], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
