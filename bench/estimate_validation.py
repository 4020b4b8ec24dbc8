"""Estimated vs measured peaks on published multi-GPU runs, and model-state parity with Megatron Bridge's estimator.

Run: ``MBMEM_CORPUS_DIR=/tmp/corpus/unpacked .venv/bin/python bench/estimate_validation.py``

``--markdown`` prints the validation table as docs/estimate.md shows it; ``--write-uncertainty`` writes the error
band per model kind (mbmem_lint/data/estimate_uncertainty.json) that the capacity rules use. The rows, their
sources and the configurations they ran are in tests/estimate_cases.py. ``--measurements FILE...`` adds the rows of
``.mbmem-lint/measurements.json`` files (``diagnose --record``: a team's own runs, measured against the estimate of
the time) to the output; they are not part of the published table or the bands.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from estimate_cases import MEASURED, PARITY, SOURCES, model_state_bytes  # noqa: E402

from mbmem_lint.data import data_file  # noqa: E402
from mbmem_lint.estimate.api import estimate_values  # noqa: E402
from mbmem_lint.estimate.uncertainty import band_from_errors  # noqa: E402

GB, GIB = 1e9, 1024**3


def recorded_rows(paths: list[str]) -> list[tuple[str, int, int, float | None]]:
    """(recipe @ gpu stage k, measured max allocated, estimated allocated, error) of every recorded stage."""
    from mbmem_lint.diagnose.measurements import load

    out = []
    for path in paths:
        for row in load(path):
            for st in row.get("stages", []):
                m, e = st.get("measured_max_allocated_bytes"), st.get("estimated_allocated_bytes")
                if m and e is not None:
                    name = f"{row.get('recipe')} @ {row.get('gpu')} stage {st.get('pp_rank')}"
                    out.append((name, m, e, (e - m) / m))
    return out


def print_recorded(paths: list[str]) -> None:
    print("== recorded measurements (diagnose --record): max allocated, measured vs estimated at recording time ==")
    for name, m, e, err in recorded_rows(paths):
        print(f"{name[:60]:<60} {m / GB:8.2f} GB {e / GB:8.2f} GB {err * 100 if err is not None else 0:+7.1f}%")
    print()


def rows() -> list[dict[str, Any]]:
    """One dict per measured row: name, kind, measured and estimated allocated peak (1e9 B), relative error."""
    out = []
    for name, values, ws, measured in MEASURED:
        est = estimate_values(values, world_size=ws, name=name)
        alloc = est.allocated_peak_bytes / GB
        out.append({"name": name, "kind": est.model_kind, "measured": measured, "estimated": alloc,
                    "error": (alloc - measured) / measured, "stage": est.allocated_peak_stage,
                    "source": SOURCES[name][0], "config": SOURCES[name][1]})
    return out


def uncertainty_table(table: list[dict[str, Any]]) -> dict[str, Any]:
    kinds: dict[str, list[float]] = {}
    for r in table:
        kinds.setdefault(r["kind"], []).append(r["error"])
    return {
        "source": "bench/estimate_validation.py --write-uncertainty: per model kind, the largest absolute error of "
                  "the estimated allocator peak against the published multi-GPU measurements (tests/estimate_cases.py), "
                  "rounded up to a whole percent, at least 5%",
        "kinds": {k: {"band": band_from_errors(errs), "rows": len(errs),
                      "max_abs_error": round(max(abs(e) for e in errs), 4),
                      "median_abs_error": round(statistics.median(abs(e) for e in errs), 4)}
                  for k, errs in sorted(kinds.items())},
    }


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| case | kind | config | measured GB | estimated GB | error | source |", "|---|---|---|---:|---:|---:|---|"]
    for r in table:
        src = "MB PR #3107" if "3107" in r["source"] else "MB PR #4581"
        lines.append(f"| {r['name']} | {r['kind']} | {r['config']} | {r['measured']:.3f} | {r['estimated']:.2f} | "
                     f"{r['error'] * 100:+.1f}% | {src} |")
    errs = [abs(r["error"]) for r in table]
    lines.append("")
    lines.append(f"Median absolute error {statistics.median(errs) * 100:.1f}% over {len(errs)} rows; largest "
                 f"{max(errs) * 100:.1f}%; within 10%: {sum(e <= 0.10 for e in errs)} of {len(errs)}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the docs/estimate.md table")
    ap.add_argument("--write-uncertainty", action="store_true", help="write mbmem_lint/data/estimate_uncertainty.json")
    ap.add_argument("--no-parity", action="store_true", help="skip the Bridge parity rows (they need the corpus)")
    ap.add_argument("--measurements", nargs="+", metavar="FILE", default=[],
                    help="also print the rows of recorded measurements.json files (diagnose --record)")
    args = ap.parse_args()
    if args.measurements:
        print_recorded(args.measurements)
    table = rows()
    if args.markdown:
        print(markdown(table))
    else:
        print("== estimated allocator peak vs measured: Bridge mem-max-allocated = allocated_bytes.all.peak / 1e9 ==")
        print(f"{'case':<44} {'kind':<6} {'measured':>9} {'estimated':>10} {'error':>7}  stage")
        for r in table:
            print(f"{r['name']:<44} {r['kind']:<6} {r['measured']:>9.3f} {r['estimated']:>9.2f}G "
                  f"{r['error'] * 100:>+6.1f}%  {r['stage']}")
        errs = [abs(r["error"]) for r in table]
        print(f"median |error| {statistics.median(errs) * 100:.1f}%, max {max(errs) * 100:.1f}%, "
              f"within 10%: {sum(e <= 0.10 for e in errs)}/{len(errs)}")
    unc = uncertainty_table(table)
    print()
    print("== error band per model kind (memory-uncertainty default) ==")
    for k, v in unc["kinds"].items():
        print(f"{k:<6} band {v['band'] * 100:.0f}%  ({v['rows']} rows, median |error| "
              f"{v['median_abs_error'] * 100:.1f}%, max {v['max_abs_error'] * 100:.1f}%)")
    if args.write_uncertainty:
        path = data_file("estimate_uncertainty.json")
        path.write_text(json.dumps(unc, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    if args.no_parity:
        return
    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.estimate.parity import bridge_config, load_bridge_estimator

    print()
    print("== model-state parity with megatron.bridge estimate_training_memory (weights+grads+optimizer) ==")
    mod = load_bridge_estimator(ensure_corpus())
    for name, values, ws, dp in PARITY:
        cfg = bridge_config(values, dp)
        theirs = mod.estimate_training_memory(cfg, include_activation=False).weight_and_optimizer_bytes
        ours = model_state_bytes(values, ws)
        print(f"{name:<44} bridge {theirs / GIB:8.3f} GiB  ours {ours / GIB:8.3f} GiB  "
              f"diff {(ours - theirs) / theirs * 100:+.3f}%")


if __name__ == "__main__":
    main()
