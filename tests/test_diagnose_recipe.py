"""``diagnose --recipe`` (per-stage comparison, re-estimated fixes), ``--record`` and ``estimate`` showing the
recorded measurement of the same configuration."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run_cli

RECIPE = '''from megatron.bridge.recipes.llama import llama32_1b_pretrain_config


def small_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.train.micro_batch_size = {mbs}
    cfg.model.pipeline_model_parallel_size = 2
    return cfg
'''
TARGET = "recipe.py::small_pretrain_8gpu_h100_bf16_config"
# Bridge's report_memory (train_utils.py:1229-1236): 8 ranks, PP=2, default rank order: ranks 0-3 are stage 0.
REPORTS = [
    "[Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 10.0 | mem-reserved-gigabytes: 30.0 | "
    "mem-max-allocated-gigabytes: 26.5 | mem-max-reserved-gigabytes: 29.0 | mem-alloc-retires: 0",
    "[Rank 4] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 10.0 | mem-reserved-gigabytes: 22.0 | "
    "mem-max-allocated-gigabytes: 17.25 | mem-max-reserved-gigabytes: 21.0 | mem-alloc-retires: 0",
]


def _project(tmp_path: Path, mbs: int = 2) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.mbmem-lint]\n")
    (tmp_path / "recipe.py").write_text(RECIPE.format(mbs=mbs))
    (tmp_path / "train.log").write_text("\n".join(REPORTS) + "\n")
    return tmp_path


def test_recipe_comparison_and_record(tmp_path: Path) -> None:
    _project(tmp_path)
    res = run_cli(["diagnose", "train.log", "--recipe", TARGET, "--format", "json", "--record"], cwd=tmp_path)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    stages = data["comparison"]["stages"]
    assert [s["pp_rank"] for s in stages] == [0, 1]
    assert stages[0]["ranks"] == [0] and stages[1]["ranks"] == [4]
    assert stages[0]["measured_max_allocated_bytes"] == 26_500_000_000
    assert stages[1]["measured_max_allocated_bytes"] == 17_250_000_000
    est0 = stages[0]["estimated_allocated_bytes"]
    assert stages[0]["error"] == round((est0 - 26_500_000_000) / 26_500_000_000, 4)
    rows = json.loads((tmp_path / ".mbmem-lint" / "measurements.json").read_text())
    assert rows["schema"] == "mbmem-lint/measurements/1"
    row = rows["measurements"][0]
    assert row["recipe"] == TARGET and row["gpu"] == "h100-80gb" and row["world_size"] == 8
    assert row["fingerprint"].startswith("sha256:") and row["iteration"] == 2 and row["oom"] is False

    # estimate shows it next to its own figure, unchanged.
    plain = json.loads(run_cli(["estimate", TARGET, "--format", "json", "--measurements", "/nonexistent.json"],
                               cwd=tmp_path).stdout)
    res = run_cli(["estimate", TARGET, "--format", "json"], cwd=tmp_path)
    est = json.loads(res.stdout)
    assert est["measurement"]["fingerprint"] == row["fingerprint"] and est["measurement"]["runs"] == 1
    assert plain["measurement"] is None
    assert {k: v for k, v in est.items() if k != "measurement"} == {k: v for k, v in plain.items() if k != "measurement"}
    text = run_cli(["estimate", TARGET], cwd=tmp_path).stdout
    assert "measured (recorded" in text and "stage 0: max allocated 24.68 GiB" in text

    # A second run appends; a changed config no longer matches.
    assert run_cli(["diagnose", "train.log", "--recipe", TARGET, "--record"], cwd=tmp_path).exit_code == 0
    assert len(json.loads((tmp_path / ".mbmem-lint" / "measurements.json").read_text())["measurements"]) == 2
    (tmp_path / "recipe.py").write_text(RECIPE.format(mbs=4))
    assert json.loads(run_cli(["estimate", TARGET, "--format", "json"], cwd=tmp_path).stdout)["measurement"] is None


def test_capacity_oom_with_recipe_ranks_re_estimated_fixes(tmp_path: Path) -> None:
    _project(tmp_path, mbs=16)
    oom = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 1 has a total capacity "
           "of 79.10 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in "
           "use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 210.50 MiB is reserved by PyTorch but "
           "unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
           "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    (tmp_path / "oom.log").write_text(oom + "\n")
    res = run_cli(["diagnose", "oom.log", "--recipe", TARGET, "--format", "json"], cwd=tmp_path)
    assert res.exit_code == 1, res.output
    d = json.loads(res.stdout)["diagnoses"][0]
    assert d["class"] == "capacity" and d["rank"] == 1 and d["codes"] == ["MBM701"]
    savings = [s["saving_bytes"] for s in d["suggestions"]]
    assert savings and all(isinstance(s, int) and s > 0 for s in savings)  # re-estimated, not generic
    assert "the estimate for stage 0" in d["message"]


def test_record_needs_recipe_and_reports(tmp_path: Path) -> None:
    _project(tmp_path)
    res = run_cli(["diagnose", "train.log", "--record"], cwd=tmp_path)
    assert res.exit_code == 2 and "--record needs --recipe" in res.stderr
    (tmp_path / "empty.log").write_text("nothing\n")
    res = run_cli(["diagnose", "empty.log", "--recipe", TARGET, "--record"], cwd=tmp_path)
    assert res.exit_code == 2 and "nothing to record" in res.stderr
    res = run_cli(["diagnose", "train.log", "--recipe", "recipe.py::small_pretrain_8gpu_h100_bf16"], cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert ("recipe.py has no function 'small_pretrain_8gpu_h100_bf16'; did you mean: "
            "recipe.py::small_pretrain_8gpu_h100_bf16_config?") in res.stderr


def test_outputs_match_their_schemas(tmp_path: Path) -> None:
    import jsonschema
    from referencing import Registry, Resource

    docs = Path(__file__).resolve().parents[1] / "docs" / "json-schema"
    diag_schema = json.loads((docs / "diagnose.schema.json").read_text())
    meas_schema = json.loads((docs / "measurements.schema.json").read_text())
    registry = Registry().with_resource("diagnose.schema.json", Resource.from_contents(diag_schema))
    _project(tmp_path)
    log = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "llama3_70b_sft.out"
    for args in (["diagnose", str(log), "--format", "json"],
                 ["diagnose", "train.log", "--recipe", TARGET, "--format", "json", "--record"]):
        res = run_cli(args, cwd=tmp_path)
        jsonschema.validate(json.loads(res.stdout), diag_schema)
    rows = json.loads((tmp_path / ".mbmem-lint" / "measurements.json").read_text())
    jsonschema.Draft202012Validator(meas_schema, registry=registry).validate(rows)


def test_validation_bench_reads_measurement_files(tmp_path: Path) -> None:
    import importlib.util

    _project(tmp_path)
    assert run_cli(["diagnose", "train.log", "--recipe", TARGET, "--record"], cwd=tmp_path).exit_code == 0
    bench = Path(__file__).resolve().parents[1] / "bench" / "estimate_validation.py"
    spec = importlib.util.spec_from_file_location("estimate_validation_bench", bench)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.recorded_rows([str(tmp_path / ".mbmem-lint" / "measurements.json")])
    assert [(name, m) for name, m, _e, _err in rows] == [
        (f"{TARGET} @ h100-80gb stage 0", 26_500_000_000), (f"{TARGET} @ h100-80gb stage 1", 17_250_000_000)]
