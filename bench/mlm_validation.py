"""The memory estimate against Megatron-LM's functional tests: measured max allocated on the last rank.

Run: ``MBMEM_CORPUS_DIR=... .venv/bin/python bench/mlm_validation.py [DIR] [--json OUT] [--markdown]``

DIR (default ``../shared/reference/mlm-goldens`` next to the repository) holds ``tests/<family>/<test>/``
(``model_config.yaml``, ``memory.json``) and ``recipes/<platform>/*.yaml`` as Megatron-LM's functional tests lay
them out (mbmem_lint/dev/mlm_goldens.py). Each golden file of a test is a row: the run's Megatron-LM arguments
translated into Megatron Bridge fields (mbmem_lint/dev/mlm_args.py), resolved and estimated by the package as
``mbmem-lint estimate --gpu G --world-size N`` would, the last pipeline stage's allocated peak against the largest
``mem-max-allocated-bytes`` the golden file logs. ``error`` = estimated / measured - 1.

``--json OUT`` writes ``{"rows": [{"test", "golden_file", "gpu", "world_size", "measured_bytes",
"estimated_bytes", "error", "status": "estimated" | "skipped", "reason", ...}]}``; ``--markdown`` prints the tables
docs/estimate.md shows (by family, by model kind, by mechanism, skip reasons).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mbmem_lint.dev.mlm_goldens import Row, validate

REPO = Path(__file__).resolve().parents[1]
GOLDENS = Path("shared", "reference", "mlm-goldens")


def default_dir() -> Path:
    """``../shared/reference/mlm-goldens`` from the repository root; from a git worktree, from the root of the
    checkout the worktree belongs to (``.git`` is then a ``gitdir: <checkout>/.git/worktrees/<name>`` file)."""
    here = REPO.parent / GOLDENS
    git = REPO / ".git"
    if not here.is_dir() and git.is_file():
        line = git.read_text(encoding="utf-8").strip()
        if line.startswith("gitdir:"):
            main_git = Path(line[len("gitdir:"):].strip()).resolve().parents[1]
            return main_git.parent.parent / GOLDENS
    return here
FAMILIES = ("gpt", "moe", "mixtral", "hybrid", "nemotron")
KINDS = ("dense", "MoE", "MLA", "hybrid")
MECHANISMS = ("PP", "VPP", "pipeline layout", "uneven pipeline", "TP", "SP", "CP", "EP", "MTP",
              "selective recompute", "full recompute", "FP8", "CUDA graphs", "activation offloading",
              "distributed optimizer", "Megatron-FSDP", "Muon")


def reason_class(reason: str) -> str:
    """A skip reason without its per-test details (argument names), for counting."""
    return re.sub(r"--[A-Za-z0-9_-]+", "--<arg>", reason)


def group_stats(rows: list[Row], current_only: bool = True) -> dict[str, Any]:
    """Counts of a group's tests and rows, and the error statistics of its estimated rows (those of golden files a
    recipe runs at the snapshot, unless ``current_only`` is off)."""
    est = [r for r in rows if r.status == "estimated" and r.error is not None and (r.scheduled or not current_only)]
    errs = [abs(r.error) for r in est if r.error is not None]
    worst = max(est, key=lambda r: abs(r.error or 0.0), default=None)
    return {
        "rows": len(rows), "estimated": len(est), "tests": len({r.test for r in rows}),
        "tests_estimated": len({r.test for r in est}),
        "median_abs_error": statistics.median(errs) if errs else None,
        "worst_error": worst.error if worst is not None else None,
        "worst_test": worst.test if worst is not None else None,
        "within_10": sum(e <= 0.10 for e in errs),
    }


def grouped(rows: list[Row], names: Iterable[str], member: Callable[[Row, str], bool],
            current_only: bool = True) -> list[tuple[str, Any]]:
    return [(name, group_stats([r for r in rows if member(r, name)], current_only)) for name in names]


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def table(title: str, groups: list[tuple[str, Any]]) -> str:
    lines = [f"| {title} | tests (estimated / all) | rows estimated | median abs. error | worst error | "
             "within 10% | worst test |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, s in groups:
        if not s["rows"]:
            continue
        lines.append(f"| {name} | {s['tests_estimated']} / {s['tests']} | {s['estimated']} | "
                     f"{_pct(s['median_abs_error'])} | {_pct(s['worst_error'], True)} | "
                     f"{s['within_10']} / {s['estimated']} | {(s['worst_test'] or '–').split('/')[-1]} |")
    return "\n".join(lines)


def skip_table(rows: list[Row]) -> str:
    counts: dict[str, tuple[int, set[str]]] = {}
    for r in rows:
        if r.status != "skipped":
            continue
        key = reason_class(r.reason)
        n, tests = counts.get(key, (0, set()))
        tests.add(r.test)
        counts[key] = (n + 1, tests)
    lines = ["| reason | rows | tests |", "|---|---:|---:|"]
    for key, (n, tests) in sorted(counts.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {key} | {n} | {len(tests)} |")
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    """The tables of docs/estimate.md: errors of the golden files a recipe runs at the snapshot, by family, model
    kind and mechanism (test counts include every test of the group); the families again with every golden file
    whose world size recipes/ gives; the skip reasons."""
    est = [r for r in rows if r.status == "estimated"]
    cur_est = [r for r in est if r.scheduled]
    tests = {r.test for r in rows}
    training = {r.test for r in rows if not r.reason.startswith(("not a training run", "not a pretraining"))}
    tests_est = {r.test for r in est}
    parts = [
        f"{len(rows)} golden files of {len(tests)} tests ({len(training)} of them training runs). Estimated: "
        f"**{len(tests_est)} tests** ({len(tests_est) / max(1, len(training)):.0%} of the training tests, "
        f"{len(tests_est) / max(1, len(tests)):.0%} of all tests), {len(est)} golden files. The error statistics "
        f"below are over the {len(cur_est)} golden files (of {len({r.test for r in cur_est})} tests) that a recipe "
        "runs at the snapshot; the other estimated files are no longer compared by any recipe (their run may "
        "predate the configuration) and are summarised in the second family table.",
        "", table("family", grouped(rows, FAMILIES, lambda r, n: r.family == n)),
        "", table("model kind", grouped(rows, KINDS, lambda r, n: r.kind == n)),
        "", table("mechanism", grouped(rows, MECHANISMS, lambda r, n: n in r.mechanisms)),
        "", "Every golden file whose world size recipes/ gives (also those no recipe runs at the snapshot):",
        "", table("family", grouped(rows, FAMILIES, lambda r, n: r.family == n, current_only=False)),
        "", "Skipped golden files by reason:", "", skip_table(rows),
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=None,
                    help="the goldens folder (tests/, recipes/); default ../shared/reference/mlm-goldens")
    ap.add_argument("--json", dest="json_out", type=Path, metavar="OUT", help="write the rows as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the docs/estimate.md tables")
    args = ap.parse_args(argv)
    args.dir = args.dir if args.dir is not None else default_dir()
    if not (args.dir / "tests").is_dir():
        print(f"mlm_validation: {args.dir} has no tests/ folder", file=sys.stderr)
        return 2
    rows = validate(args.dir)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"rows": [r.to_json() for r in rows]}, indent=1) + "\n",
                                 encoding="utf-8")
    if args.markdown:
        print(markdown(rows))
        return 0
    for r in rows:
        if r.status == "estimated" and r.error is not None:
            print(f"{r.error * 100:+6.1f}%  {(r.measured_bytes or 0) / 1e9:8.2f} GB meas  "
                  f"{(r.estimated_bytes or 0) / 1e9:8.2f} GB est  {r.gpu:<10} {r.world_size:>3}  {r.test}  "
                  f"[{r.golden_file}]")
    print()
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
