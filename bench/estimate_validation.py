"""Estimated vs measured peaks (seed-facts 2.1-2.2) and model-state parity with Megatron Bridge's estimator.

Run: ``MBMEM_CORPUS_DIR=/tmp/corpus/unpacked .venv/bin/python bench/estimate_validation.py``

``--measurements FILE...`` adds the rows of ``.mbmem-lint/measurements.json`` files (``diagnose --record``:
a team's own runs, measured against the estimate of the time) to the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from estimate_cases import MEASURED, PARITY, model_state_bytes  # noqa: E402

from mbmem_lint.dev.corpus import ensure_corpus  # noqa: E402
from mbmem_lint.estimate.api import estimate_values  # noqa: E402
from mbmem_lint.estimate.parity import bridge_config, load_bridge_estimator  # noqa: E402

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


def main() -> None:
    if "--measurements" in sys.argv:
        print_recorded(sys.argv[sys.argv.index("--measurements") + 1:])
    print("== estimated vs measured peak: Bridge mem-max-allocated-gigabytes = allocated_bytes.all.peak / 1e9 ==")
    print(f"{'case':<44} {'measured':>9} {'estimated':>10} {'err(GB)':>8} {'(if GiB)':>9}  full peak")
    for name, values, ws, measured in MEASURED:
        est = estimate_values(values, world_size=ws, name=name)
        alloc = max(s.allocated_bytes for s in est.stages)
        e_gib = (alloc - measured * GIB) / (measured * GIB) * 100
        e_gb = (alloc - measured * GB) / (measured * GB) * 100
        print(f"{name:<44} {measured:>9.3f} {alloc / GB:>9.2f}G {e_gb:>7.1f}% {e_gib:>8.1f}%  "
              f"{est.peak_bytes / GB:.1f} GB")
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
