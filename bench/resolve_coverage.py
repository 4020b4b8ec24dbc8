"""Resolver coverage on a shipped megatron-bridge release's corpus (issue 2, issue 18 acceptance).

Resolves every recipe function in ``recipes/`` and ``perf_recipes/`` of that release's wheel (downloaded
by ``mbmem_lint.dev.corpus.ensure_corpus``; set MBMEM_CORPUS_DIR / MBMEM_CORPORA_DIR to reuse unpacked
copies) against that release's data and prints, for each key field, the share of recipe functions whose
value is statically known, the share that know all 11 layout fields, crashes, plus wall time.

    python bench/resolve_coverage.py [--version 0.6.2] [--json]
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

from mbmem_lint.dev.corpus import DEFAULT_VERSION, KEY_FIELDS, SHAPE_KEYS, ensure_corpus, recipe_files
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings


def main() -> int:
    version = sys.argv[sys.argv.index("--version") + 1] if "--version" in sys.argv else DEFAULT_VERSION
    corpus = ensure_corpus(version=version)
    files = [str(p) for p in recipe_files(corpus)]
    t0 = time.perf_counter()
    run = resolve_paths(files, Settings(), ResolveOptions(megatron_bridge_version=version))
    wall = time.perf_counter() - t0
    n = len(run.recipes)
    known = Counter()
    all_known = 0
    layout_known = 0
    missing_examples: dict[str, list[str]] = {}
    for r in run.recipes:
        layout_known += all(r.known(p) for k, p in KEY_FIELDS.items() if k not in SHAPE_KEYS)
        ok = True
        for label, path in KEY_FIELDS.items():
            if r.known(path):
                known[label] += 1
            else:
                ok = False
                missing_examples.setdefault(label, []).append(f"{r.path.split('megatron/bridge/')[-1]}::{r.function}")
        all_known += ok
    crashes = [d for d in run.diagnostics if d.code == "MBM001"]
    rows = {label: known[label] / n if n else 0.0 for label in KEY_FIELDS}
    if "--json" in sys.argv:
        print(json.dumps({"files": len(files), "recipes": n, "functions_seen": run.functions_seen,
                          "failed": len(run.failed), "wall_s": wall, "coverage": rows,
                          "megatron_bridge": run.bridge.to_json() if run.bridge else None,
                          "all_layout_fields_known": layout_known / n if n else 0.0,
                          "all_fields_known": all_known / n if n else 0.0}, indent=2))
        return 0
    print(f"data: {run.bridge.describe() if run.bridge else '?'}")
    print(f"corpus: {len(files)} files, {run.functions_seen} recipe functions detected, "
          f"{n} resolved to a ConfigContainer, {len(run.failed)} not resolvable, crashes: {len(crashes)}")
    print(f"resolve wall time: {wall:.2f} s")
    print(f"{'field':28} {'known':>7} {'share':>7}")
    for label in KEY_FIELDS:
        print(f"{label:28} {known[label]:7d} {rows[label]:7.1%}")
    print(f"{'all 11 layout fields':28} {layout_known:7d} {layout_known / n if n else 0:7.1%}")
    print(f"{'all 14 fields':28} {all_known:7d} {all_known / n if n else 0:7.1%}")
    for label, ex in missing_examples.items():
        print(f"  unknown {label}: {len(ex)} e.g. {ex[:3]}")
    for f in run.failed[:20]:
        print(f"  not resolvable: {f.split('megatron/bridge/')[-1]}")
    # Recipes whose model shape is unknown, by model id (or by why, for recipes that build the provider
    # themselves), with the reason the architecture is unknown.
    unknown_models: dict[str, tuple[int, str]] = {}
    for r in run.recipes:
        if all(r.known(KEY_FIELDS[k]) for k in SHAPE_KEYS):
            continue
        arch = r.architecture
        if arch is not None:
            key, why = arch["hf_id"], str(arch.get("reason", ""))
        else:
            f = r.fields.get("model.num_layers") or r.fields.get("model")
            key, why = f"<{r.function}>", str(getattr(f.value, "reason", "")) if f is not None else ""
        n, _ = unknown_models.get(key, (0, why))
        unknown_models[key] = (n + 1, why)
    print(f"model shape unknown in {sum(n for n, _ in unknown_models.values())} recipes:")
    for key, (n, why) in sorted(unknown_models.items(), key=lambda kv: (-kv[1][0], kv[0])):
        print(f"  {n:3d}  {key}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
