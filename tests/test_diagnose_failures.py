"""``diagnose`` on the failures real jobs have (issue 28), on the log corpus in ``fixtures/logs/`` (each file's
``.md`` sidecar cites where its formats are printed; the citations are repeated at each test), plus hostile
input (issue 32): numbers, FIFOs and devices, measurement files, concurrent ``--record``."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from cli_run import run_cli

from mbmem_lint.diagnose.classify import RunContext, diagnose
from mbmem_lint.diagnose.report import run_diagnose
from mbmem_lint.diagnose.scan import scan_logs

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
GIB = 1024**3


def _run(*names: str) -> list:
    return run_diagnose(scan_logs([str(LOGS / n) for n in names])).diagnoses


def _json(*args: str, cwd: Path | None = None) -> tuple[int, dict]:
    res = run_cli(["diagnose", *args, "--format", "json"], cwd=cwd)
    assert "Traceback" not in res.output, res.output
    return res.exit_code, json.loads(res.stdout) if res.stdout.strip() else {}


def test_every_fixture_log_has_a_source_sidecar() -> None:
    logs = [p for p in LOGS.rglob("*") if p.is_file() and p.suffix != ".md"]
    assert len(logs) >= 18
    for p in logs:
        side = p.with_name(p.name + ".md")
        assert side.is_file(), p
        text = side.read_text()
        assert re.search(r"\w\.(?:cpp|hpp|cc|cu|py|c|h)\b", text) or "Hostile" in text, side


# --- 1. communication -------------------------------------------------------------------------------------
def test_watchdog_timeout_torch26_names_group_dimension_ranks_iteration() -> None:
    # "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=..., NumelIn=...,
    # NumelOut=..., Timeout(ms)=...) ran for ... milliseconds before timing out.": ProcessGroupNCCL.cpp
    # WorkNCCL::checkTimeout / operator<<(WorkNCCL), fragments in the torch 2.6.0 and 2.8.0 wheels' libtorch_cuda.so;
    # "[PG ID 2 PG GUID 5(PIPELINE_MODEL_PARALLEL_GROUP) Rank 5]": the same wheels' logPrefix fragments, the name from
    # megatron/core/parallel_state.py:1250 (megatron-core 0.19.2).
    code, data = _json(str(LOGS / "nccl_watchdog_pp_torch26.out"))
    assert code == 1
    [d] = data["diagnoses"]
    assert d["class"] == "communication" and d["ranks"] == [5, 13] and d["iteration"] == 8
    det = d["details"]
    assert det["group"] == "PIPELINE_MODEL_PARALLEL_GROUP" and det["dimension"] == "pipeline parallel"
    assert det["setting"] == "model.pipeline_model_parallel_size"
    assert det["collectives"] == ["RECV", "SEND"] and det["timeout_ms"] == 600000 and det["elapsed_ms"] == 600207
    assert det["seq"] == [48213]
    titles = " ".join(s["title"] for s in d["suggestions"])
    # Sourced advice only: the flight recorder (ProcessGroupNCCL env vars), NCCL_DEBUG (NCCL src/init.cc), the
    # timeout Bridge passes to torch.distributed (megatron/bridge/training/initialize.py:744).
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" in titles and "NCCL_DEBUG=INFO" in titles
    assert "dist.distributed_timeout_minutes" in titles and "initialize.py:744" in titles
    kinds = [e["kind"] for e in data["events"]]
    assert kinds.count("communication") == 2 and "fatal" not in kinds  # the terminate/what() follows from it
    assert data["summary"]["secondary_fatal_ends"] >= 1


def test_watchdog_timeout_torch23_without_group_name() -> None:
    # torch 2.3 prints "[Rank 3] Watchdog caught ..." and "[PG 0 Rank 3]" (2.3.1 wheel's libtorch_cuda.so): no name.
    [d] = _run("nccl_watchdog_allreduce_torch23.log")
    assert d.cls == "communication" and d.ranks == [3] and d.details["collective"] == "ALLREDUCE"
    assert d.details["timeout_ms"] == 1800000 and d.details["group"] is None
    assert "30 min" in d.message and "prints no process-group name" in d.message
    assert d.where.local_rank == 3  # torchrun's [default3]: tee prefix


def test_nccl_system_error_both_wordings() -> None:
    # "NCCL error in: FILE:LINE, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version X"
    # (torch NCCLUtils.hpp C10D_NCCL_CHECK) and "NCCL Error 2: unhandled system error" (torch/csrc/cuda/nccl.cpp);
    # the meaning line is getNcclErrorDetailStr's (2.6.0 wheel).
    [d] = _run("nccl_system_error.log")
    assert d.cls == "communication" and d.details["type"] == "nccl-error" and d.ranks == [2, 6]
    assert d.details["nccl_error"].startswith("unhandled system error") and "ncclSystemError" in d.message
    assert d.suggestions[0].setting == {"env_vars.NCCL_DEBUG": "INFO"}


def test_infiniband_retry_exceeded_in_two_nccl_wordings_with_nccl_hint() -> None:
    # NCCL src/transport/net_ib.cc:1909 (v2.21.5-1) "with status=%d ..." and src/transport/net_ib/p2p.cc:688 (HEAD)
    # "with status=%s(%d) ..."; status 12 = IBV_WC_RETRY_EXC_ERR (NCCL src/include/ibvcore.h:316); the hint is
    # NCCL's (src/transport/net_ib/common.h:621-624).
    diags = _run("nccl_ib_retry_exceeded.log")
    ib = next(d for d in diags if d.details.get("type") == "ib-error")
    assert ib.ranks == [9, 11] and ib.details["ib_status"] == 12 and ib.details["ib_status_name"] == "IBV_WC_RETRY_EXC_ERR"
    assert ib.details["peers"] == ["10.52.3.18<53188>", "10.52.3.18<53214>"]
    assert "NCCL_IB_TIMEOUT" in ib.suggestions[0].title
    remote = next(d for d in diags if d.details.get("type") == "nccl-error")
    assert "remote process exited" in remote.details["nccl_error"] and "died first" in remote.message


# --- 2. parallel layout errors ----------------------------------------------------------------------------------
def test_layout_errors_of_every_wording_link_to_mbm101_with_numbers() -> None:
    # megatron/core/parallel_state.py:883 (megatron-core 0.19.2) and :651 at Megatron-LM core_v0.10.0 ("decoder").
    diags = _run("moe_layout_not_divisible.log")
    assert [d.ranks for d in diags] == [[0], [1]]
    for d in diags:
        assert d.cls == "known-error" and d.codes == ["MBM101"]
        assert d.details["values"] == {"world_size": 8, "expert_tensor_model_pipeline_parallel_size": 16}
        assert "world_size (8) is not divisible by expert_tensor_model_pipeline_parallel size (16)" in d.message
    [old] = _run("moe_layout_decoder_core012.log")
    assert old.codes == ["MBM101"] and old.details["source_release"] == "Megatron-LM@core_v0.10.0"
    assert old.details["values"] == {"world_size": 4, "expert_tensor_model_pipeline_parallel_size": 8}


def test_trigger_words_cover_every_known_error() -> None:
    """match_known_error's cheap first test: every known error's literal holds one trigger word."""
    from mbmem_lint.diagnose.known_errors import _NEEDLES, TRIGGERS

    assert all(any(t in n for t in TRIGGERS) for n in _NEEDLES), [n for n in _NEEDLES if not any(t in n for t in TRIGGERS)]


@pytest.mark.parametrize(("line", "code", "values"), [
    # megatron/core/parallel_state.py:823 (0.19.2)
    ("RuntimeError: world_size (12) is not divisible by 8", "MBM101", {"world_size": 12, "model_size": 8}),
    # megatron/core/parallel_state.py:433 at core_v0.8.0
    ("RuntimeError: world_size (12) is not divisible by tensor_model_parallel_size (4) x pipeline_model_parallel_size "
     "(2) x context_parallel_size (1)", "MBM101",
     {"world_size": 12, "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2, "context_parallel_size": 1}),
    # megatron/core/transformer/transformer_config.py:1325 (0.19.2)
    ("ValueError: num_attention_heads (14) must be a multiple of tensor_model_parallel_size (4).", "MBM102",
     {"num_attention_heads": 14, "tensor_model_parallel_size": 4}),
    # megatron/core/transformer/transformer_block.py:152 (0.19.2)
    ("AssertionError: num_layers=30 should be divisible by config.pipeline_model_parallel_size=4", "MBM103",
     {"num_layers": 30, "pipeline_model_parallel_size": 4}),
    # megatron/bridge/training/config.py:1025 (0.6.2): an f-string with `=` specifiers
    ("world size (12) is not divisible by total_model_size (model_cfg.tensor_model_parallel_size=4 * "
     "model_cfg.pipeline_model_parallel_size=2 * model_cfg.context_parallel_size=1)", "MBM101",
     {"world_size": 12, "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2, "context_parallel_size": 1}),
])
def test_layout_error_wordings(tmp_path: Path, line: str, code: str, values: dict) -> None:
    log = tmp_path / "a.log"
    log.write_text(f"[rank0]: {line}\n")
    [d] = run_diagnose(scan_logs([str(log)])).diagnoses
    assert d.codes == [code] and d.details["values"] == values


# --- 3. CUDA errors -------------------------------------------------------------------------------------------
def test_illegal_memory_access_torch_and_triton() -> None:
    # c10/cuda/CUDAException.cpp (2.6.0 libc10_cuda.so); torch.AcceleratorError (2.8.0 libtorch_python.so);
    # "Triton Error [CUDA]: " (triton/backends/nvidia/driver.c:13, triton 3.2.0).
    [d] = _run("cuda_illegal_memory_access.log")
    assert d.cls == "cuda-error" and d.ranks == [4] and d.details["category"] == "memory-access"
    assert d.details["exception"] == "torch.AcceleratorError" and d.where.after_iteration == 311
    assert d.suggestions[0].setting == {"env_vars.CUDA_LAUNCH_BLOCKING": "1"}
    assert "no memory setting applies" in d.message
    [t] = _run("triton_illegal_memory_access.log")
    assert t.cls == "cuda-error" and t.details["via"] == "triton" and t.ranks == [2]


def test_device_assert_keeps_the_failed_check() -> None:
    [d] = _run("cuda_device_assert_embedding.log")
    assert d.cls == "cuda-error" and d.details["category"] == "device-assert" and d.ranks == [1]
    assert "srcIndex < srcSelectDimSize" in d.details["assertion"] and "vocabulary" in d.message
    assert [s.title.split()[0] for s in d.suggestions] == ["rerun", "for"]  # CUDA_LAUNCH_BLOCKING, TORCH_USE_CUDA_DSA


def test_cublas_status_error() -> None:
    # aten/src/ATen/cuda/Exceptions.h TORCH_CUDABLAS_CHECK "CUDA error: <status> when calling `...`" (2.6.0 wheel).
    [d] = _run("cublas_execution_failed.log")
    assert d.cls == "cuda-error" and d.details["via"] == "cublas" and d.details["category"] == "library-status"
    assert d.details["error"] == "CUBLAS_STATUS_EXECUTION_FAILED" and d.details["call"].startswith("cublasGemmEx(")


# --- 4. start-up misconfiguration -----------------------------------------------------------------------------
def test_te_cpu_offload_without_anything_to_offload_links_mbm206() -> None:
    # transformer_engine/pytorch/cpu_offload.py:688-689 (TE v2.8).
    [d] = _run("te_cpu_offload_nothing_to_offload.log")
    assert d.cls == "known-error" and d.codes == ["MBM206"] and d.details["source_release"] == "TransformerEngine@v2.8"


# --- 5. any other fatal end -----------------------------------------------------------------------------------
def test_unrecognised_failure_reports_last_exception_and_where() -> None:
    # Python tracebacks behind torch's "[rankN]: " prefix; torchrun's ChildFailedError block
    # (torch/distributed/elastic/multiprocessing/errors/__init__.py:179-197, 2.8.0 wheel).
    code, data = _json(str(LOGS / "unrecognised_keyerror.log"))
    assert code == 1
    [d] = data["diagnoses"]
    assert d["class"] == "unrecognised-failure" and d["ranks"] == [0, 1]
    assert d["details"]["exception"] == "KeyError: 'validation'"
    assert d["details"]["location"].endswith("line 201, in build_train_valid_test_data_loaders")
    assert "No known pattern explains it" in d["message"]


def test_child_failed_alone_and_sigkill(tmp_path: Path) -> None:
    block = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED", "-" * 60,
             "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60, "Root Cause (first observed failure):", "[0]:",
             "  time      : 2026-11-30_11:02:31", "  host      : node009", "  rank      : 12 (local_rank: 4)",
             "  exitcode  : -9 (pid: 777)", "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 777",
             "=" * 60]
    log = tmp_path / "launcher.log"
    log.write_text("\n".join(block) + "\n")
    [d] = run_diagnose(scan_logs([str(log)])).diagnoses
    assert d.cls == "unrecognised-failure" and d.ranks == [12] and d.details["exitcode"] == -9
    assert d.details["signal"] == "SIGKILL" and "out-of-memory killer" in d.message and d.where.local_rank == 4


def test_terminate_called_alone(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n")
    [d] = run_diagnose(scan_logs([str(log)])).diagnoses
    assert d.cls == "unrecognised-failure" and "std::bad_alloc" in d.details["exception"]


# --- OOM verdicts the issue found wrong -----------------------------------------------------------------------------
def test_request_beyond_the_device_is_a_shape_bug_without_tuning() -> None:
    [d] = _run("oom_oversized_mask.log")
    assert d.cls == "oversized-request" and d.codes == []
    assert d.details["requested_bytes"] == round(37631.25 * GIB)
    joined = " ".join(s.title for s in d.suggestions)
    for tuning in ("expandable_segments", "recompute", "pipeline_model_parallel", "tensor_model_parallel"):
        assert tuning not in joined
    assert "shape or data bug" in d.message


def test_torch20_message_advises_what_that_release_has() -> None:
    [d] = _run("oom_torch20_fragmentation.log")
    assert d.cls == "fragmentation" and d.codes == []
    assert "max_split_size_mb" in d.suggestions[0].title and "torch >= 2.1" in d.suggestions[1].title
    assert d.figures is not None and d.figures.reserved_unallocated_bytes == round(76.40 * GIB) - round(61.02 * GIB)


def test_other_processes_memory_is_the_pressure() -> None:
    # torch prints each NVML process; inside a container its own is "Process 1486990" (44.46 GiB >= the 38.12 + 4.91
    # GiB PyTorch reserved), the other one (33.39 GiB) is the co-located engine.
    [d] = _run("oom_colocated_engine.log")
    assert d.cls == "other-processes" and d.figures is not None
    assert d.figures.other_processes_bytes == round(33.39 * GIB) and d.figures.process_bytes == round(44.46 * GIB)
    assert "PID 1486774" in d.message and "nvidia-smi" in d.suggestions[0].title
    assert "expandable_segments" in d.suggestions[1].title  # weighed after it: second


def test_truncated_allocator_line_keeps_its_figures() -> None:
    [d] = _run("oom_truncated_line.log")
    assert d.cls == "unknown" and "outside PyTorch's caching allocator" not in d.message and "cut off" in d.message
    f = d.figures
    assert f is not None and f.truncated and f.requested_bytes == round(1.5 * GIB) and f.capacity_bytes == round(79.11 * GIB)
    assert f.free_bytes == round(1.02 * GIB)


def test_glued_lines_are_all_read() -> None:
    scan = scan_logs([str(LOGS / "glued_lines.log")])
    by_rank = {r.where.rank: r.max_allocated_bytes for r in scan.reports}
    assert by_rank == {0: 58_812_000_000, 8: 52_340_000_000}
    assert scan.iteration_lines == 1 and scan.last_throughput is not None and scan.last_throughput.iteration == 1
    [oom] = scan.ooms
    assert oom.where.rank == 2 and oom.requested_bytes == round(1.96 * GIB)
    assert oom.text.startswith("torch.OutOfMemoryError")


def test_several_logs_in_any_order_lose_nothing(tmp_path: Path) -> None:
    names = ["multi/rank0.log", "multi/rank1.log", "oom_colocated_engine.log", "llama3_70b_sft.out"]

    def summary(order: tuple[str, ...]) -> list:
        diags = run_diagnose(scan_logs([str(LOGS / n) for n in order])).diagnoses
        return sorted((Path(d.where.file).name, d.where.line, d.cls, d.where.rank, d.where.iteration) for d in diags)

    results = {tuple(summary(order)) for order in itertools.permutations(names)}
    assert len(results) == 1
    [result] = results
    files = [r[0] for r in result]
    # rank0's allocator OOM does not hide rank1's OOM outside the allocator (ranks were keyed without the file).
    assert files.count("rank0.log") == 1 and files.count("rank1.log") == 1
    # The same process's echoes in one file still fold: rank1's NCCL WARN and CUDA error line are one report.
    scan = scan_logs([str(LOGS / "multi" / "rank1.log")])
    assert len(scan.ooms) == 1 and scan.ooms[0].count == 2


# --- hostile input (issue 32) -------------------------------------------------------------------------------------
def test_hostile_numbers_do_not_crash_and_json_is_strict() -> None:
    code, data = _json(str(LOGS / "hostile_numbers.log"))
    assert code == 1
    text = run_cli(["diagnose", str(LOGS / "hostile_numbers.log"), "--format", "json"]).stdout
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    oom = next(e for e in data["events"] if e["kind"] == "oom")
    assert oom["requested_bytes"] is None and oom["allocated_bytes"] is None and oom["capacity_bytes"] == round(79.11 * GIB)
    reps = [e for e in data["events"] if e["kind"] == "memory-report"]
    assert all(r["max_allocated_bytes"] is None for r in reps) and reps[0]["alloc_retries"] is None
    for fmt in ("text", "markdown"):
        res = run_cli(["diagnose", str(LOGS / "hostile_numbers.log"), "--format", fmt])
        assert res.exit_code == 1 and "Traceback" not in res.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_and_device_are_refused_not_read(tmp_path: Path) -> None:
    """A FIFO or /dev/zero as a log, as --measurements or as the configured measurements file: exit 2 at once (a
    subprocess with a timeout: a regression would hang or eat memory)."""
    import subprocess
    import sys

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _project(tmp_path)
    exe = [sys.executable, "-m", "mbmem_lint"]
    fn = "recipe.py::small_pretrain_8gpu_h100_bf16_config"
    runs = [[*exe, "diagnose", str(fifo)], [*exe, "diagnose", "/dev/zero"]]
    for special in (str(fifo), "/dev/zero"):
        runs.append([*exe, "diagnose", "train.log", "--recipe", fn, "--record", "--measurements", special])
    for cmd in runs:
        res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 2 and "not a regular" in res.stderr and "Traceback" not in res.stderr, (cmd, res.stderr)
    assert not (tmp_path / "pipe.lock").exists()  # nothing is written beside what is not a regular file
    (tmp_path / "pyproject.toml").write_text(f'[tool.mbmem-lint]\nmeasurements = "{fifo}"\n')
    res = subprocess.run([*exe, "estimate", fn], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert "not a regular measurements file" in res.stderr and "Traceback" not in res.stderr


def _row(**over: object) -> dict:
    row = {"recipe": "r.py::f", "overrides": [], "gpu": "h100-80gb", "world_size": 8, "fingerprint": "sha256:" + "0" * 32,
           "tool_version": "0", "recorded": "2026-12-01T00:00:00Z", "logs": ["a.log"], "iteration": 2, "oom": False,
           "throughput": None, "stages": [{"pp_rank": 0, "ranks": [0], "measured_max_allocated_bytes": 10,
                                           "estimated_allocated_bytes": 9, "error": -0.1, "oom": False}]}
    row.update(over)
    return row


@pytest.mark.parametrize(("text", "why"), [
    ('{"schema": "mbmem-lint/measurements/1", "measurements": [ROW]}'.replace("ROW", json.dumps(_row(world_size="8"))),
     "measurements[0].world_size: expected an integer"),
    ('{"schema": "mbmem-lint/measurements/1", "measurements": [ROW]}'.replace("ROW", json.dumps(_row(world_size=0))),
     "measurements[0].world_size: expected an integer in [1,"),
    ('{"schema": "mbmem-lint/measurements/1", "measurements": [ROW]}'.replace(
        "ROW", json.dumps(_row(stages=[{"pp_rank": 0, "ranks": [0], "measured_max_allocated_bytes": 10**400, "oom": False}]))),
     "stages[0].measured_max_allocated_bytes: expected an integer in [0,"),
    ('{"schema": "mbmem-lint/measurements/1", "measurements": [ROW]}'.replace(
        "ROW", json.dumps(_row()).replace('"error": -0.1', '"error": NaN')), "NaN is not a JSON number"),
    ('{"schema": "mbmem-lint/measurements/1", "measurements": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
    ('{"schema": "mbmem-lint/measurements/1", "measurements": [1]}', "measurements[0]: expected an object"),
])
def test_hostile_measurements_are_named_not_crashed(tmp_path: Path, text: str, why: str) -> None:
    from mbmem_lint.diagnose import measurements as M

    p = tmp_path / "m.json"
    p.write_text(text)
    with pytest.raises(M.MeasurementsError) as exc:
        M.load(p)
    assert why in str(exc.value) and str(p) in str(exc.value)


def test_zero_measurement_renders_without_dividing() -> None:
    from mbmem_lint.diagnose import measurements as M

    row = _row(stages=[{"pp_rank": 0, "ranks": [0], "measured_max_allocated_bytes": 0, "estimated_allocated_bytes": 9,
                        "error": None, "oom": False}])
    assert M.row_problem(row) is None
    assert "stage 0" not in M.render_text(row)


def test_concurrent_appends_keep_every_row(tmp_path: Path) -> None:
    """Twelve writers at once (forked processes released together): all twelve rows are in the file."""
    from mbmem_lint.diagnose import measurements as M

    target = tmp_path / ".mbmem-lint" / "measurements.json"
    r, w = os.pipe()
    pids = []
    for i in range(12):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.close(w)
            os.read(r, 1)
            try:
                M.append(target, [_row(iteration=i)])
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(r)
    os.write(w, b"x" * 12)
    os.close(w)
    for pid in pids:
        os.waitpid(pid, 0)
    rows = M.load(target)
    assert sorted(row["iteration"] for row in rows) == list(range(12))
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


# --- --recipe targets (issue 24 §2) -----------------------------------------------------------------------------------
RECIPE = '''from megatron.bridge.recipes.llama import llama32_1b_pretrain_config


def small_pretrain_8gpu_h100_bf16_config():
    cfg = llama32_1b_pretrain_config()
    cfg.model.pipeline_model_parallel_size = 2
    return cfg
'''
REPORT = ("[Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 10.0 | mem-reserved-gigabytes: 30.0 | "
          "mem-max-allocated-gigabytes: 26.5 | mem-max-reserved-gigabytes: 29.0 | mem-alloc-retires: 0")


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.mbmem-lint]\n")
    (tmp_path / "recipe.py").write_text(RECIPE)
    (tmp_path / "train.log").write_text(REPORT + "\n")
    (tmp_path / "mbs4.yaml").write_text("train:\n  micro_batch_size: 4\n")
    (tmp_path / "declared.yaml").write_text("# mbmem-lint: recipe=recipe.py::small_pretrain_8gpu_h100_bf16_config\n"
                                            "train:\n  micro_batch_size: 4\n")
    return tmp_path


def test_recipe_accepts_estimates_targets(tmp_path: Path) -> None:
    _project(tmp_path)
    fn = "recipe.py::small_pretrain_8gpu_h100_bf16_config"
    est = {}
    for name, args in (("function", ["--recipe", fn]), ("file", ["--recipe", "recipe.py"]),
                       ("paired", ["--recipe", fn, "--recipe", "mbs4.yaml"]), ("declared", ["--recipe", "declared.yaml"])):
        code, data = _json("train.log", *args, cwd=tmp_path)
        assert code == 0, (name, data)
        est[name] = data["comparison"]["stages"][0]["estimated_allocated_bytes"]
    assert est["function"] == est["file"]
    assert est["paired"] == est["declared"] != est["function"]  # the override (micro-batch 4) was applied
    res = run_cli(["diagnose", "train.log", "--recipe", "mbs4.yaml"], cwd=tmp_path)
    assert res.exit_code == 2 and "names no recipe" in res.stderr


def test_recipe_function_typo_exits_2_with_did_you_mean(tmp_path: Path) -> None:
    _project(tmp_path)
    res = run_cli(["diagnose", "train.log", "--recipe", "recipe.py::small_pretrain_8gpu_h100_config"], cwd=tmp_path)
    assert res.exit_code == 2
    assert "did you mean: recipe.py::small_pretrain_8gpu_h100_bf16_config?" in res.stderr


def test_closest_functions() -> None:
    from mbmem_lint.resolve.target import closest_functions, missing_function_message

    src = LOGS.parent / "recipes"
    some = next(p for p in sorted(src.rglob("*.py")) if "def " in p.read_text())
    import ast

    names = [n.name for n in ast.parse(some.read_text()).body if isinstance(n, ast.FunctionDef)]
    public = [n for n in names if not n.startswith("_")] or names
    assert closest_functions(str(some), public[0] + "x")[0] == public[0]
    assert missing_function_message(str(some), public[0]) is None
    assert missing_function_message(str(some), "zzz_nothing_like_it") is not None


def test_help_documents_exit_codes() -> None:
    res = run_cli(["diagnose", "--help"])
    assert "0 no failure found; 1 failures diagnosed; 2 usage or input error" in " ".join(res.stdout.split())


def test_clean_log_exits_0_and_says_no_failure(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    shutil.copy(LOGS / "llama3_70b_sft.out", log)
    log.write_text("\n".join(log.read_text().splitlines()[:8]) + "\n")
    res = run_cli(["diagnose", str(log)])
    assert res.exit_code == 0 and "No failure found" in res.stdout
    assert diagnose(scan_logs([str(log)]), RunContext()) == []


def test_append_writes_through_a_symlink(tmp_path: Path) -> None:
    from mbmem_lint.diagnose import measurements as M

    real = tmp_path / "shared" / "measurements.json"
    real.parent.mkdir()
    M.append(real, [_row(iteration=1)])
    link = tmp_path / "link.json"
    link.symlink_to(real)
    M.append(link, [_row(iteration=2)])
    assert link.is_symlink() and [r["iteration"] for r in M.load(real)] == [1, 2]
