"""Wall time of ``mbmem-lint plan`` on one recipe with the default search (issue: <= 1 s), against
``mbmem-lint estimate`` of the same recipe in the same run (the floor: resolving and estimating it once).

    .venv/bin/python bench/plan_speed.py [--runs 5] [--corpus]

Each command runs as a subprocess (interpreter start-up and imports included), ``--runs`` times, alternating
plan / plan --no-diff / estimate so that load on this shared machine hits all three alike; medians are
printed, and the plan's own search time (from its JSON) for the first run. ``--corpus`` adds the largest
layout space of the MBM701 recipes (Llama3.1-405B, 128 GPUs, PP16 VPP8) from the megatron-bridge corpus.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).parent / "mbmem-lint")
TARGETS = [
    str(ROOT / "fixtures/plan/llama3_70b_sft_no_expandable_segments.py"),
    str(ROOT / "fixtures/plan/llama3_8b_2gpu.py"),
]
CORPUS_TARGET = "megatron/bridge/perf_recipes/llama/b200/llama31.py::llama31_405b_pretrain_128gpu_b200_bf16_config"


def _run(args: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([EXE, *args], capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--corpus", action="store_true", help="also the largest corpus layout space")
    args = ap.parse_args(argv)
    targets = list(TARGETS)
    if args.corpus:
        from mbmem_lint.dev.corpus import ensure_corpus

        targets.append(str(ensure_corpus() / CORPUS_TARGET))
    print(f"{'recipe':<48} {'plan':>7} {'no-diff':>8} {'estimate':>9} {'ratio':>6} {'search':>7}")
    worst = 0.0
    for target in targets:
        times: dict[str, list[float]] = {"plan": [], "nodiff": [], "estimate": []}
        search = None
        for i in range(args.runs):
            dt, out = _run(["plan", target, "--format", "json"])
            times["plan"].append(dt)
            if i == 0:
                data = json.loads(out)
                search = (data[0] if isinstance(data, list) else data).get("search", {})
            times["nodiff"].append(_run(["plan", target, "--no-diff", "--format", "json"])[0])
            times["estimate"].append(_run(["estimate", target])[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        worst = max(worst, med["plan"])
        name = Path(target.split("::")[0]).name + ("::" + target.split("::")[1][:20] if "::" in target else "")
        print(f"{name:<48} {med['plan']:>6.2f}s {med['nodiff']:>7.2f}s {med['estimate']:>8.2f}s "
              f"{med['plan'] / med['estimate']:>5.1f}x {search and search.get('evaluated')!s:>7}")
    print(f"\nslowest median plan: {worst:.2f} s (target <= 1 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
