"""``mbmem-lint verify`` on corpus recipes of megatron-bridge 0.6.2 (issue 18 acceptance).

Builds N recipe functions (default 20, one per corpus file, spread over the families: every k-th
file of the sorted corpus) for real in a Python 3.12 environment with megatron-bridge 0.6.2,
megatron-core 0.19.2 and torch (``--python``, default ``/work/venvs/mb062/bin/python``), through the
same code path as the command (:func:`mbmem_lint.verify.run.verify`), and prints the share of compared
fields that agree where mbmem-lint knows the value, every disagreement, and the model-state bytes
against Bridge's ``estimate_training_memory``. A recipe the doubles cannot build (its HF id is not in
mbmem-lint's model table) is replaced by the next file's.

    python bench/verify_corpus.py [--python PATH] [--count 20] [--world-size 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mbmem_lint.dev.corpus import corpus_cwd, ensure_corpus  # noqa: E402
from mbmem_lint.pipeline import resolve_paths  # noqa: E402
from mbmem_lint.resolve.resolver import ResolveOptions  # noqa: E402
from mbmem_lint.settings import Settings  # noqa: E402
from mbmem_lint.verify.compare import CLASSES  # noqa: E402
from mbmem_lint.verify.run import RecipeCheck, verify  # noqa: E402

GIB = 1024**3


def candidates(files: list[str]) -> list[tuple[str, str]]:
    """One recipe function per file (the first the resolver finds), files spread over the corpus."""
    run = resolve_paths(files, Settings(), ResolveOptions())
    first: dict[str, str] = {}
    for r in run.recipes:
        first.setdefault(r.path, r.function)
    ordered = sorted(first)
    step = 7  # coprime with the family sizes: consecutive picks land in different families
    picks = [ordered[(i * step) % len(ordered)] for i in range(len(ordered))]
    seen: set[str] = set()
    out = []
    for p in picks:
        if p not in seen:
            seen.add(p)
            out.append((p, first[p]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="/work/venvs/mb062/bin/python")
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    corpus = ensure_corpus()
    checks: list[RecipeCheck] = []
    skipped: list[RecipeCheck] = []
    t0 = time.perf_counter()
    versions: dict[str, str] = {}
    with corpus_cwd(corpus) as files:
        pool = candidates(files)
        opts = ResolveOptions(world_size=args.world_size)
        for file, function in pool:
            if len(checks) >= args.count:
                break
            report = verify([(file, function)], Settings(), opts, python=args.python)
            versions = report.versions
            for c in report.recipes:
                (checks if c.status == "compared" else skipped).append(c)
            print(f"  {file}::{function}: {report.recipes[0].status if report.recipes else 'no recipe'}",
                  file=sys.stderr)
    wall = time.perf_counter() - t0
    totals: Counter[str] = Counter()
    for c in checks:
        totals.update(c.counts)
    known = totals["agree"] + totals["disagree"]
    print(f"built with {args.python}: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"{len(checks)} recipes compared ({len(skipped)} not built: "
          f"{Counter(c.status for c in skipped).most_common()}) in {wall:.0f} s")
    print("fields: " + ", ".join(f"{totals[k]} {k}" for k in CLASSES))
    if known:
        print(f"agreement where mbmem-lint knows the value: {totals['agree'] / known:.2%} "
              f"({totals['agree']} of {known}); with unknowns counted as misses: "
              f"{totals['agree'] / (known + totals['unknown']):.2%}")
    print("\ndisagreements:")
    for c in checks:
        for d in c.diffs:
            print(f"  {c.path}::{c.function}: {d.path}: real {json.dumps(d.real, default=str)[:70]} "
                  f"static {json.dumps(d.static, default=str)[:70]} ({d.origin} {d.where})")
    if not any(c.diffs for c in checks):
        print("  none")
    print("\nunknown fields (mbmem-lint declines to guess):")
    unknown = Counter(p for c in checks for p in c.unknown)
    for path, n in unknown.most_common():
        print(f"  {path}: {n}")
    print(f"\n{'recipe':78} {'mbmem-lint':>11} {'Bridge':>9} {'diff':>7}")
    for c in checks:
        ms = c.model_state
        ours = f"{ms['mbmem_bytes'] / GIB:9.2f}G" if ms.get("mbmem_bytes") else "      n/a"
        theirs = f"{ms['bridge_bytes'] / GIB:7.2f}G" if ms.get("bridge_bytes") else "    n/a"
        diff = f"{ms['difference']:+.1%}" if "difference" in ms else ""
        print(f"{(c.path + '::' + c.function)[-78:]:78} {ours:>11} {theirs:>9} {diff:>7}")
    if args.json:
        args.json.write_text(json.dumps({"versions": versions, "totals": dict(totals),
                                         "recipes": [c.to_json() for c in checks + skipped]}, indent=1, default=str))
    return 0 if known and totals["agree"] / known >= 0.99 else 1


if __name__ == "__main__":
    os.environ.setdefault("MBMEM_LINT_JOBS", "1")
    sys.exit(main())
