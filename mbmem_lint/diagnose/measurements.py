"""``.mbmem-lint/measurements.json``: measured peaks of the team's own runs next to the estimate, committed
with the recipes (``diagnose --record`` appends; ``estimate`` shows a matching row; the validation bench
reads them). The estimate is never rescaled by them.

Schema (``docs/json-schema/measurements.schema.json``)::

    {"schema": "mbmem-lint/measurements/1",
     "measurements": [
       {"recipe": "recipes/llama.py::llama3_8b_config",   # path relative to the pyproject folder
        "overrides": [],                                  # YAML files applied (same relative form)
        "gpu": "h100-80gb", "world_size": 8,
        "fingerprint": "sha256:...",                      # of the values the estimate reads
        "tool_version": "0.1.0", "recorded": "2026-12-01T12:00:00Z",
        "logs": ["slurm-1234.out"], "iteration": 2, "oom": false,
        "throughput": {"iteration": 2, "train_iters": 100, "elapsed_ms": 812.3, "tflops_per_gpu": 402.1},
        "stages": [{"pp_rank": 0, "ranks": [0], "measured_max_allocated_bytes": 41234000000,
                    "measured_max_reserved_bytes": 44000000000, "estimated_allocated_bytes": 40112345678,
                    "estimated_total_bytes": 46223344556, "error": -0.0272, "oom": false}]}]}

A row matches an estimate when recipe, GPU and fingerprint are equal (the world size is part of the
fingerprint). Rows are only ever appended: several runs of one config are several rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mbmem_lint.records import dataclass

SCHEMA = "mbmem-lint/measurements/1"


class MeasurementsError(Exception):
    """The measurements file exists but is not one (exit 2: never overwrite what we cannot read)."""


@dataclass(frozen=True)
class MeasurementKey:
    """What a recorded row and an estimate must share to be shown together."""

    recipe: str
    gpu: str
    fingerprint: str


def load(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a measurements file ([] when it does not exist)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise MeasurementsError(f"{p}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MeasurementsError(f"{p}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("measurements"), list):
        raise MeasurementsError(f"{p}: not a measurements file (expected {{\"schema\": \"{SCHEMA}\", "
                                "\"measurements\": [...]}})")
    return [row for row in data["measurements"] if isinstance(row, dict)]


def append(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` (atomically: the file is replaced whole, readers never see half of it)."""
    p = Path(path)
    existing = load(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schema": SCHEMA, "measurements": existing + rows}, indent=2) + "\n"
    tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)


def key_of(row: dict[str, Any]) -> MeasurementKey | None:
    try:
        return MeasurementKey(str(row["recipe"]), str(row["gpu"]), str(row["fingerprint"]))
    except KeyError:
        return None


def matching(rows: list[dict[str, Any]], key: MeasurementKey) -> list[dict[str, Any]]:
    """Rows recorded for exactly this recipe, GPU and configuration, oldest first."""
    return [r for r in rows if key_of(r) == key]


def row(*, recipe: str, overrides: list[str], gpu: str, world_size: int | None, fingerprint: str, logs: list[str],
        stages: list[dict[str, Any]], iteration: int | None, oom: bool, throughput: dict[str, Any] | None,
        tool_version: str, recorded: str) -> dict[str, Any]:
    """One row of the file, in the documented key order."""
    return {"recipe": recipe, "overrides": overrides, "gpu": gpu, "world_size": world_size,
            "fingerprint": fingerprint, "tool_version": tool_version, "recorded": recorded, "logs": logs,
            "iteration": iteration, "oom": oom, "throughput": throughput, "stages": stages}


def file_for(settings: Any, explicit: str | None) -> Path:
    """The measurements file of a run: ``--measurements``, else ``[tool.mbmem-lint] measurements`` relative
    to the pyproject folder (or the working folder)."""
    if explicit:
        return Path(explicit)
    p = Path(settings.measurements)
    return p if p.is_absolute() else (settings.root or Path.cwd()) / p


def recipe_key(settings: Any, recipe: Any, gpu: str, world_size: int | None) -> MeasurementKey:
    from mbmem_lint.fingerprint import config_fingerprint

    return MeasurementKey(f"{settings.relative(recipe.path)}::{recipe.function}", gpu,
                          config_fingerprint(recipe, world_size))


def latest_for(rows: list[dict[str, Any]], key: MeasurementKey) -> dict[str, Any] | None:
    """The most recent row for ``key``, with the number of matching runs (``"runs"``), or None."""
    hits = matching(rows, key)
    if not hits:
        return None
    return {**hits[-1], "runs": len(hits)}


def render_text(row: dict[str, Any]) -> str:
    """Lines showing a recorded measurement next to an estimate (the estimate itself is not changed)."""
    gib = 1024**3
    runs = row.get("runs", 1)
    lines = [f"measured (recorded {row.get('recorded', '?')}, {runs} run{'s' if runs != 1 else ''} of this exact "
             f"configuration; the estimate above is not adjusted):"]
    for st in row.get("stages", []):
        m, e = st.get("measured_max_allocated_bytes"), st.get("estimated_allocated_bytes")
        if m is None:
            continue
        err = f" (estimate {(e - m) / m * 100:+.1f}%)" if e else ""
        oom = ", ran out of memory" if st.get("oom") else ""
        lines.append(f"  stage {st.get('pp_rank')}: max allocated {m / gib:.2f} GiB{err}{oom}")
    return "\n".join(lines)
