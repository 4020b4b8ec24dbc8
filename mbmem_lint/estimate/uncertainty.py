"""The estimator's error band per kind of model, measured on the published validation table.

``mbmem_lint/data/estimate_uncertainty.json`` is written by ``bench/estimate_validation.py --write-uncertainty``
from the published multi-GPU rows of ``tests/estimate_cases.py`` (estimated allocator peak vs the measured
"max allocated"): per model kind, the largest absolute relative error of its rows, rounded up to a whole percent.
``tests/test_estimate_validation.py`` recomputes it from the table, so the file cannot drift from the estimator.
The capacity rules (MBM701/MBM702) use it unless ``memory-uncertainty`` is set in ``[tool.mbmem-lint]``.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from mbmem_lint.data import data_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mbmem_lint.estimate.inputs import Inputs

# Used for a kind the table has no rows for, and as the floor of every band: the table's rows are few, and a
# band below the GPU calibration's per-case spread (docs/estimate.md) would claim more than was measured.
DEFAULT_BAND = 0.10
MIN_BAND = 0.05


def model_kind(inp: Inputs) -> str:
    """The validation-table kind of a recipe: ``moe`` (routed experts) or ``dense``."""
    return "moe" if inp.shape.num_experts else "dense"


def band_from_errors(errors: list[float]) -> float:
    """The band of one kind from its rows' relative errors: the largest absolute error, rounded up to a whole
    percent, never below ``MIN_BAND``."""
    if not errors:
        return DEFAULT_BAND
    worst = max(abs(e) for e in errors)
    return max(MIN_BAND, math.ceil(round(worst * 100, 6)) / 100)


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        with open(data_file("estimate_uncertainty.json"), encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:  # a checkout that has not written it yet: every kind gets DEFAULT_BAND
        return {}
    return data


def band(kind: str) -> float:
    """The error band (fraction of the estimate) for ``kind``; ``DEFAULT_BAND`` for a kind without rows."""
    entry = _table().get("kinds", {}).get(kind)
    return float(entry["band"]) if entry else DEFAULT_BAND
