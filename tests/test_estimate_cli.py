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
    assert set(d) == {"recipe", "gpu", "world_size", "parallelism", "stages", "peak_bytes", "allocated_peak_bytes",
                      "allocated_peak_stage", "peak_stage", "fits", "headroom_bytes", "uncertainty", "assumptions",
                      "measurement", "megatron_bridge"}  # megatron_bridge: additive (issue 18)
    assert d["measurement"] is None  # no recorded measurement of this configuration (diagnose --record)
    assert d["megatron_bridge"] == {"version": "0.6.2", "megatron_core": "0.19.2", "source": "default",
                                    "data": "shipped"}
    assert set(d["gpu"]) == {"name", "capacity_bytes", "usable_bytes"}
    assert d["gpu"]["name"] == "h100-80gb" and d["gpu"]["capacity_bytes"] >= d["gpu"]["usable_bytes"]
    assert set(d["parallelism"]) == {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp"}
    assert d["parallelism"]["tp"] == 2 and d["parallelism"]["pp"] == 2 and d["parallelism"]["dp"] == 2
    assert d["world_size"] == 8 and [s["pp_rank"] for s in d["stages"]] == [0, 1]
    for st in d["stages"]:
        assert set(st) == {"pp_rank", "components", "total_bytes", "allocated_bytes"}
        assert st["total_bytes"] == sum(c["bytes"] for c in st["components"])
        for c in st["components"]:
            assert set(c) == {"name", "bytes", "fields", "kind"} and isinstance(c["fields"], list)
            assert c["kind"] in ("state", "activation", "workspace", "runtime", "reserve")
        # The allocator total: what torch.cuda.max_memory_allocated reports (no context, NCCL or reserves).
        assert st["allocated_bytes"] == sum(c["bytes"] for c in st["components"]
                                            if c["kind"] in ("state", "activation", "workspace"))
        assert st["allocated_bytes"] < st["total_bytes"]
    assert d["peak_bytes"] == max(s["total_bytes"] for s in d["stages"])
    assert d["allocated_peak_bytes"] == max(s["allocated_bytes"] for s in d["stages"])
    assert d["stages"][d["allocated_peak_stage"]]["allocated_bytes"] == d["allocated_peak_bytes"]
    assert d["uncertainty"]["model_kind"] == "dense" and 0 < d["uncertainty"]["fraction"] < 1
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
    # Both peaks: everything the GPU holds, and the allocator's (max_memory_allocated), with the error band.
    assert "peak: stage" in out and "allocated peak (max_memory_allocated): stage" in out
    assert "uncertainty: +/-" in out and "dense" in out


def test_markdown_shows_allocated_peak_and_kinds() -> None:
    code, out, _ = _run("--gpu", "h100", "--world-size", "8", "--format", "markdown")
    assert code == 0
    assert "Allocated peak (`max_memory_allocated`)" in out and "| stage | total | allocated | usage |" in out
    assert "| component | kind | bytes | fields |" in out and "| weights | state |" in out


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


def test_json_matches_schema_and_golden() -> None:
    # docs/json-schema/estimate.schema.json documents the contract; the golden file was checked by hand:
    # stage 0 activations = 32 layer-microbatches (16 layers x 2 in flight) x 306,184,192 B, where one layer at
    # T 4096, h 4096, TP2 SP, GQA 32/8 x 128, ffn 14336 (fused SwiGLU), core_attn recompute is
    # 5 x 16,777,216 (norm inputs, fc1/qkv inputs, O) + 25,165,824 (q,k,v) + 20,971,520 (fused QKV output kept by the
    # checkpoint) + 117,440,512 (fc1 output) + 58,720,256 (fc2 input); allocated_bytes = state + activations +
    # workspaces = 31,624,664,064 B; the logits use TE's cross entropy (4 B per logit: 4·T·h/2 + 4·T·V/2).
    import jsonschema

    root = Path(__file__).resolve().parents[1]
    code, out, _ = _run("--gpu", "h100", "--world-size", "8", "--format", "json")
    assert code == 0
    d = json.loads(out)
    schema = json.loads((root / "docs" / "json-schema" / "estimate.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(d)
    golden = json.loads((root / "tests" / "golden" / "estimate_llama3_8b_pp2.json").read_text(encoding="utf-8"))
    d["recipe"] = Path(d["recipe"].split("::")[0]).relative_to(root).as_posix() + "::" + d["recipe"].split("::")[1]
    assert d == golden, "estimate JSON changed: check the new values by hand, then update tests/golden"
