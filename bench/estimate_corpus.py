"""Estimate every recipe function of the megatron-bridge 0.6.2 corpus (issue 4 acceptance).

Prints: crashes (must be 0), estimate-unavailable recipes and why, the share of H100 ``perf_recipes``
predicted to fit on 80 GB, every "does not fit" with its top components, and the estimate time
(must add <= 2 s to the resolve time).

    MBMEM_CORPUS_DIR=/tmp/corpus/unpacked .venv/bin/python bench/estimate_corpus.py [--all-gpus]
"""

from __future__ import annotations

import argparse
import collections
import time
import traceback

from mbmem_lint.dev.corpus import corpus_cwd, ensure_corpus
from mbmem_lint.estimate.api import estimate_recipe
from mbmem_lint.estimate.types import Estimate, EstimateUnavailable
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

GB = 1e9


def _top(est: Estimate, n: int = 4) -> str:
    st = next(s for s in est.stages if s.pp_rank == est.peak_stage)
    comps = sorted(st.components, key=lambda c: -c.bytes)[:n]
    return ", ".join(f"{c.name} {c.bytes / GB:.1f}" for c in comps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all-gpus", action="store_true", help="also list non-H100 recipes that do not fit")
    args = ap.parse_args(argv)
    corpus = ensure_corpus()
    with corpus_cwd(corpus) as rel:
        t0 = time.perf_counter()
        run = resolve_paths(rel, Settings(), ResolveOptions())
        t_resolve = time.perf_counter() - t0
    recipes = run.recipes
    crashes: list[str] = []
    unavailable: list[tuple[str, str]] = []
    results: list[tuple[str, Estimate]] = []
    t1 = time.perf_counter()
    for r in recipes:
        name = f"{r.path}::{r.function}"
        try:
            results.append((name, estimate_recipe(r)))
        except EstimateUnavailable as exc:
            unavailable.append((name, f"{exc.reason}: {', '.join(exc.missing_fields)}"))
        except Exception:  # noqa: BLE001 - a crash is what this bench counts
            crashes.append(f"{name}\n{traceback.format_exc()}")
    t_est = time.perf_counter() - t1
    print(f"{len(rel)} files, {len(recipes)} recipe functions; resolve {t_resolve:.2f}s, "
          f"estimate all {t_est:.3f}s ({t_est / max(1, len(recipes)) * 1e3:.2f} ms/recipe)")
    print(f"crashes: {len(crashes)}")
    kinds = collections.Counter(c.strip().splitlines()[-1][:160] for c in crashes)
    for k, n in kinds.most_common():
        print(f"   {n:4d}  {k}")
    for c in crashes[:3]:
        print(c)
    print(f"estimate unavailable: {len(unavailable)}")
    reasons = collections.Counter(u[1] for u in unavailable)
    for reason, n in reasons.most_common():
        print(f"   {n:4d}  {reason}")
    for name, reason in unavailable:
        print(f"       {name}: {reason}")

    def is_h100_perf(name: str) -> bool:
        return "perf_recipes/" in name and "/h100/" in name

    h100 = [(n, e) for n, e in results if is_h100_perf(n)]
    h100_unavail = [n for n, _ in unavailable if is_h100_perf(n)]
    fit = [x for x in h100 if x[1].fits]
    share = len(fit) / len(h100) if h100 else 0.0
    print(f"\nH100 perf_recipes: {len(h100)} estimated, {len(h100_unavail)} unavailable; "
          f"predicted to fit on 80 GB: {len(fit)}/{len(h100)} = {share:.1%}")
    for name, est in h100:
        if not est.fits:
            print(f"   DOES NOT FIT {name}: peak {est.peak_bytes / GB:.1f} GB on stage {est.peak_stage} "
                  f"(usable {est.gpu.usable_bytes / GB:.1f}); {_top(est)}")
    perf = [(n, e) for n, e in results if "perf_recipes/" in n]
    pfit = sum(1 for _, e in perf if e.fits)
    print(f"\nall perf_recipes on their target GPU: {pfit}/{len(perf)} fit")
    for name, est in perf:
        if not est.fits and (args.all_gpus or not is_h100_perf(name)):
            print(f"   DOES NOT FIT {name} [{est.gpu.name}, ws {est.world_size}]: peak {est.peak_bytes / GB:.1f} GB "
                  f"stage {est.peak_stage} (usable {est.gpu.usable_bytes / GB:.1f}); {_top(est)}")
    lib = [(n, e) for n, e in results if "perf_recipes/" not in n]
    print(f"library recipes: {len(lib)} estimated, {sum(1 for _, e in lib if e.fits)} fit on their "
          f"target (or assumed H100 80GB)")
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
