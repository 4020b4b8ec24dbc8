"""GPU catalog and per-family overhead constants (``mbmem_lint/data/gpus.json``, loaded once)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from mbmem_lint.data import data_file
from mbmem_lint.records import dataclass


class UnknownGpuError(ValueError):
    """A GPU name that is neither a catalog name nor an alias."""


@dataclass(frozen=True)
class Overhead:
    """A per-GPU-family overhead constant (bytes, or a fragmentation fraction) and the source it cites."""

    value: float
    source: str


@dataclass(frozen=True)
class GpuSpec:
    """A GPU of the catalog: family, marketed and usable memory (the estimate is compared to
    ``usable_bytes``) and its family's overhead constants."""

    name: str  # canonical catalog name
    family: str  # "hopper", "blackwell", "ampere", ...
    capacity_bytes: int  # marketed HBM, binary-nominal: marketed_gb * 2**30 (>= usable_bytes)
    usable_bytes: int  # total reported by software (PyTorch total_memory); the estimate is compared to this
    source: str
    overheads: dict[str, Overhead]

    def overhead(self, key: str) -> float:
        return self.overheads[key].value


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    raw: dict[str, Any] = json.loads(
        data_file("gpus.json").read_text(encoding="utf-8")
    )
    families = {
        fam: {k: Overhead(float(v["value"]), str(v["source"])) for k, v in consts.items()}
        for fam, consts in raw["families"].items()
    }
    specs: dict[str, GpuSpec] = {}
    aliases: dict[str, str] = {}
    for name, g in raw["gpus"].items():
        specs[name] = GpuSpec(
            name=name,
            family=g["family"],
            # HBM "GB" are binary-nominal: an "80 GB" H100 has 80 GiB of HBM, and PyTorch reports 79.1 GiB.
            capacity_bytes=int(g["marketed_gb"] * 2**30),
            usable_bytes=int(g["usable_bytes"]),
            source=g["source"],
            overheads=families[g["family"]],
        )
        aliases[name] = name
        for a in g.get("aliases", []):
            aliases[a] = name
    return specs, aliases


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def known_gpu_names() -> list[str]:
    """Canonical names and aliases, sorted."""
    return sorted(_catalog()[1])


def resolve_gpu(name: str) -> GpuSpec:
    specs, aliases = _catalog()
    canonical = aliases.get(_normalize(name))
    if canonical is None:
        raise UnknownGpuError(f"unknown GPU {name!r}; known names: {', '.join(known_gpu_names())}")
    return specs[canonical]


def family_overheads(family: str) -> dict[str, Overhead]:
    for spec in _catalog()[0].values():
        if spec.family == family:
            return spec.overheads
    raise KeyError(family)
