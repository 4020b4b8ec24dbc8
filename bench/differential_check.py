"""Differential check: mbmem-lint's resolver against megatron-bridge 0.6.2 building the recipes for real.

Not part of CI (issue 2, last acceptance bullet; `mbmem-lint verify` is the per-file command over the
same doubles and comparison, mbmem_lint/verify/). Needs the Python 3.12 venv with megatron-bridge
0.6.2 + megatron-core 0.19.2 + torch in ``.cache/diffcheck-venv`` (install steps in
docs/differential-check.md; ``--venv`` to point elsewhere). Run from this repo's own venv:

    python bench/differential_check.py [--limit N] [--family llama] [--json OUT] [--examples K]

1. writes mbmem-lint's model table (``load_model_table()``) to a temporary JSON file and runs
   ``bench/diffcheck/build_real.py`` in the 3.12 venv: every public recipe function of
   ``recipes/`` + ``perf_recipes/`` is called with its defaults (Transformer Engine & co. doubled,
   ``AutoBridge.from_hf_pretrained`` answered from that table; recipes whose HF id is not in it are
   skipped) and its ConfigContainer is dumped flattened, without ``validate()`` or runtime updates;
2. resolves the same corpus files with ``resolve_paths(files, Settings(), ResolveOptions(apply_runtime=False))``;
3. compares, for every field path the real object has, the real value with mbmem-lint's value before
   runtime rewrites (``pre_runtime[path]`` when present, else ``fields[path].value``):
   ``agree`` / ``disagree`` / ``unknown`` (mbmem-lint says UNKNOWN) / ``missing`` (mbmem-lint has
   no such path) / ``opaque`` (the real value is an object with no JSON form: layer specs, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mbmem_lint.dev.corpus import ensure_corpus, recipe_files  # noqa: E402
from mbmem_lint.pipeline import resolve_paths  # noqa: E402
from mbmem_lint.resolve.hf_models import load_model_table  # noqa: E402
from mbmem_lint.resolve.resolver import ResolveOptions  # noqa: E402
from mbmem_lint.settings import Settings  # noqa: E402
from mbmem_lint.verify.compare import CLASSES, classify, norm, static_value  # noqa: E402

DEFAULT_VENV = REPO / ".cache" / "diffcheck-venv"
HARNESS = REPO / "bench" / "diffcheck" / "build_real.py"


def run_real(venv: Path, family: str | None, limit: int | None, out: Path) -> dict[str, Any]:
    table = {k: {"provider": e.provider, "fields": e.fields} for k, e in load_model_table().items()}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(table, fh)
        models = fh.name
    cmd = [str(venv / "bin" / "python"), str(HARNESS), "--models", models, "--out", str(out)]
    if family:
        cmd += ["--family", family]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    os.unlink(models)
    if proc.returncode != 0 or not out.is_file():
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"harness failed (rc {proc.returncode})")
    sys.stderr.write(proc.stderr.splitlines()[-1] + "\n" if proc.stderr else "")
    return json.loads(out.read_text())


def section_of(path: str) -> str:
    return path.split(".", 1)[0]


def compare(real: dict[str, Any], resolved: dict[tuple[str, str], Any]) -> dict[str, Any]:
    totals: Counter[str] = Counter()
    per_section: dict[str, Counter[str]] = defaultdict(Counter)
    per_field: dict[str, Counter[str]] = defaultdict(Counter)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    unknown_reasons: dict[str, Counter[str]] = defaultdict(Counter)
    name_normalised: Counter[str] = Counter()
    per_origin: dict[str, Counter[str]] = defaultdict(Counter)
    extra_real = Counter()
    mine_only: Counter[str] = Counter()
    per_recipe: dict[str, Counter[str]] = {}
    matched = 0
    for key, rec in real["recipes"].items():
        rel, func = key.split("::")
        r = resolved.get((rel, func))
        if r is None:
            continue
        matched += 1
        rc: Counter[str] = Counter()
        for path, rv in rec["fields"].items():
            if path in rec["extra"]:
                extra_real[path.split(".", 1)[0] + "." + path.split(".")[-1]] += 1
            if path == "env_vars":
                continue
            cls, mv, by_name = classify(path, rv, r)
            if cls == "unknown":
                uv = static_value(r, path)
                note = r.fields[path].note or getattr(uv, "reason", "") or "partly unknown"
                unknown_reasons[path][str(note)[:80]] += 1
            elif by_name:
                name_normalised[path] += 1
            elif cls == "disagree" and len(examples[path]) < 6:
                examples[path].append({"recipe": key, "real": rv, "mbmem": norm(mv),
                                       "origin": r.fields[path].origin})
            totals[cls] += 1
            per_origin[r.fields[path].origin if path in r.fields else "-"][cls] += 1
            per_section[section_of(path)][cls] += 1
            per_field[path][cls] += 1
            rc[cls] += 1
        mine_only.update(p for p in r.fields if p not in rec["fields"] and p != "env_vars")
        per_recipe[key] = rc
    return {"matched": matched, "totals": totals, "per_section": per_section, "per_field": per_field,
            "examples": examples, "unknown_reasons": unknown_reasons, "name_normalised": name_normalised, "per_origin": per_origin,
            "extra_real": extra_real, "mine_only": mine_only, "per_recipe": per_recipe}


def pct(c: Counter[str], k: str) -> str:
    n = sum(c.values())
    return f"{c[k] / n:6.1%}" if n else "   n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="build at most N recipe functions")
    ap.add_argument("--family", default=None, help="only corpus files under this family folder (llama, qwen, ...)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--real", type=Path, default=None, help="reuse a harness dump instead of building again")
    ap.add_argument("--json", type=Path, default=None, help="write the comparison summary here")
    ap.add_argument("--examples", type=int, default=25, help="how many disagreeing fields to list")
    args = ap.parse_args()

    corpus = ensure_corpus()
    bridge = corpus / "megatron" / "bridge"
    t0 = time.perf_counter()
    if args.real is not None:
        real = json.loads(args.real.read_text())
    else:
        out = REPO / ".cache" / "diffcheck-real.json"
        real = run_real(args.venv, args.family, args.limit, out)
    t_real = time.perf_counter() - t0

    rels = {k.split("::")[0] for k in real["recipes"]} | {k.split("::")[0] for k in real["skipped"]}
    files = [str(p) for p in recipe_files(corpus) if p.relative_to(bridge).as_posix() in rels]
    t1 = time.perf_counter()
    run = resolve_paths(files, Settings(), ResolveOptions(apply_runtime=False))
    t_res = time.perf_counter() - t1
    resolved = {(Path(r.path).resolve().relative_to(bridge.resolve()).as_posix(), r.function): r for r in run.recipes}
    res = compare(real, resolved)

    unmatched_real = [k for k in real["recipes"] if tuple(k.split("::")) not in resolved]
    print(f"megatron-bridge {real['versions'].get('megatron-bridge')} / megatron-core "
          f"{real['versions'].get('megatron-core')} / torch {real['versions'].get('torch')} / "
          f"Python {real['versions'].get('python')}")
    print(f"real builds: {len(real['recipes'])} recipe functions built, {len(real['skipped'])} skipped "
          f"(HF id not in mbmem-lint's table), {len(real['errors'])} raised, "
          f"{len(real['import_errors'])} modules failed to import, {len(real['not_called'])} not called "
          f"[{t_real:.0f} s]; stubbed modules: {', '.join(real.get('stubbed_modules', [])) or 'none'}")
    print(f"mbmem-lint: {len(run.recipes)} recipes resolved from {len(files)} files [{t_res:.1f} s]; "
          f"compared {res['matched']} recipes ({len(unmatched_real)} built recipes have no resolved counterpart)")
    tot = res["totals"]
    n = sum(tot.values())
    print(f"\nfields compared: {n} (path × recipe)")
    for k in CLASSES:
        print(f"  {k:10} {tot[k]:8d} {pct(tot, k)}")
    known = tot["agree"] + tot["disagree"]
    if known:
        print(f"  agreement where mbmem-lint knows the value: {tot['agree'] / known:.2%} "
              f"({sum(res['name_normalised'].values())} by dotted-name normalisation, in "
              f"{len(res['name_normalised'])} fields: {', '.join(sorted(res['name_normalised']))[:300]})")
    print(f"\n{'mbmem-lint origin':34} {'fields':>8} {'agree':>7} {'disagr':>7} {'unknown':>7}")
    for origin, c in sorted(res["per_origin"].items(), key=lambda kv: -sum(kv[1].values())):
        print(f"{origin:34} {sum(c.values()):8d} {pct(c, 'agree')} {pct(c, 'disagree')} {pct(c, 'unknown')}")
    print(f"\n{'section':34} {'fields':>8} {'agree':>7} {'disagr':>7} {'unknown':>7} {'missing':>7} {'opaque':>7}")
    for sec, c in sorted(res["per_section"].items(), key=lambda kv: -sum(kv[1].values())):
        print(f"{sec:34} {sum(c.values()):8d} {pct(c, 'agree')} {pct(c, 'disagree')} {pct(c, 'unknown')} "
              f"{pct(c, 'missing')} {pct(c, 'opaque')}")
    print("\ntop disagreeing fields (recipes disagreeing / compared):")
    top = sorted(res["per_field"].items(), key=lambda kv: -kv[1]["disagree"])
    for path, c in top[: args.examples]:
        if not c["disagree"]:
            break
        ex = res["examples"][path][0]
        print(f"  {path:58} {c['disagree']:4d}/{sum(c.values()):<4d} e.g. {ex['recipe'].split('/', 1)[-1]}: "
              f"real={json.dumps(ex['real'])[:60]} mbmem={json.dumps(ex['mbmem'])[:60]} ({ex['origin']})")
    print("\ntop unknown fields:")
    for path, c in sorted(res["per_field"].items(), key=lambda kv: -kv[1]["unknown"])[:12]:
        if not c["unknown"]:
            break
        reason = res["unknown_reasons"][path].most_common(1)[0][0]
        print(f"  {path:58} {c['unknown']:4d}  {reason}")
    print("\ntop missing fields (real path mbmem-lint does not have):")
    for path, c in sorted(res["per_field"].items(), key=lambda kv: -kv[1]["missing"])[:12]:
        if not c["missing"]:
            break
        print(f"  {path:58} {c['missing']:4d}")
    if real["errors"]:
        print("\nrecipes that raised when built for real:")
        for k, v in list(real["errors"].items())[:15]:
            print(f"  {k}: {' '.join(v.split())[:160]}")
    if real["import_errors"]:
        print("\nmodules that failed to import:")
        for k, v in list(real["import_errors"].items())[:15]:
            print(f"  {k}: {' '.join(v.split())[:160]}")
    skipped_ids = Counter(v for v in real["skipped"].values())
    if skipped_ids:
        print(f"\nskipped (HF id not in the model table): {len(real['skipped'])} recipes, {len(skipped_ids)} ids")
    if args.json:
        summary = {
            "versions": real["versions"], "built": len(real["recipes"]), "skipped": real["skipped"],
            "errors": real["errors"], "import_errors": real["import_errors"], "not_called": real["not_called"],
            "stubbed_modules": real.get("stubbed_modules"), "matched": res["matched"],
            "unmatched_real": unmatched_real, "totals": dict(tot), "name_normalised": dict(res["name_normalised"]),
            "per_origin": {k: dict(v) for k, v in res["per_origin"].items()},
            "per_section": {k: dict(v) for k, v in res["per_section"].items()},
            "per_field": {k: dict(v) for k, v in res["per_field"].items()},
            "examples": res["examples"], "extra_real": dict(res["extra_real"]),
            "unknown_reasons": {k: dict(v) for k, v in res["unknown_reasons"].items()},
        }
        args.json.write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
