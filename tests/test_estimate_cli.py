"""The estimate CLI and API through real recipes (fixtures/estimate/, resolved by the full pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run_cli

from mbmem_lint.estimate import estimate_recipe
from mbmem_lint.pipeline import resolve_paths
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.settings import Settings

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "estimate" / "llama3_8b_pp2.py"
TARGET = f"{FIX}::llama3_8b_pp2_config"


def _run(*args: str) -> tuple[int, str, str]:
    res = run_cli(["estimate", TARGET, *args])
    return res.exit_code, res.stdout, res.stderr


def test_json_contract_exact_keys() -> None:
    code, out, _ = _run("--gpu", "h100", "--world-size", "8", "--format", "json")
    assert code == 0, out
    d = json.loads(out)
    assert set(d) == {"recipe", "gpu", "world_size", "parallelism", "stages", "peak_bytes", "peak_stage", "fits",
                      "headroom_bytes", "assumptions", "measurement"}
    assert d["measurement"] is None  # no recorded measurement of this configuration (diagnose --record)
    assert set(d["gpu"]) == {"name", "capacity_bytes", "usable_bytes"}
    assert d["gpu"]["name"] == "h100-80gb" and d["gpu"]["capacity_bytes"] >= d["gpu"]["usable_bytes"]
    assert set(d["parallelism"]) == {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp"}
    assert d["parallelism"]["tp"] == 2 and d["parallelism"]["pp"] == 2 and d["parallelism"]["dp"] == 2
    assert d["world_size"] == 8 and [s["pp_rank"] for s in d["stages"]] == [0, 1]
    for st in d["stages"]:
        assert set(st) == {"pp_rank", "components", "total_bytes"}
        assert st["total_bytes"] == sum(c["bytes"] for c in st["components"])
        for c in st["components"]:
            assert set(c) == {"name", "bytes", "fields"} and isinstance(c["fields"], list)
    assert d["peak_bytes"] == max(s["total_bytes"] for s in d["stages"])
    assert d["headroom_bytes"] == d["gpu"]["usable_bytes"] - d["peak_bytes"]
    assert d["fits"] is (d["headroom_bytes"] >= 0)
    assert isinstance(d["assumptions"], list)


def test_unknown_gpu_exits_2_listing_known_names() -> None:
    code, _, err = _run("--gpu", "tpu-v5", "--world-size", "8")
    assert code == 2
    assert "tpu-v5" in err and "h100-80gb" in err and "gb200" in err


def test_text_has_stage_table_and_bars() -> None:
    code, out, _ = _run("--gpu", "h100", "--world-size", "8")
    assert code == 0
    assert "stage 0" in out.lower() or "pp_rank 0" in out.lower() or "pp 0" in out.lower()
    assert "weights" in out and "optimizer states" in out
    assert "█" in out or "#" in out  # bar chart against usable capacity


def test_api_through_resolve_paths() -> None:
    run = resolve_paths([str(FIX)], Settings(), ResolveOptions())
    (rec,) = run.recipes
    est = estimate_recipe(rec, gpu="h100", world_size=8)
    first, last = est.stages
    assert first.component("embedding activations") is not None
    assert last.component("logits + cross-entropy (fp32)") is not None
    # 1F1B: the first stage holds PP=2 microbatches in flight, the last one.
    assert "x 2 microbatches" in next(c.name for c in first.components if c.name.startswith("activations"))
    assert est.fits
