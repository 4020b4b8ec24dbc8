"""``diagnose``: logs written in the exact formats of their sources (cited in
``mbmem_lint/diagnose/formats.py``), each class recognised, ranks and iterations extracted, and no
traceback on garbage, binary or truncated logs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_run import run_cli

from mbmem_lint.diagnose.classify import RunContext, diagnose
from mbmem_lint.diagnose.compare import Layout
from mbmem_lint.diagnose.logread import LogReadError, split_prefixes
from mbmem_lint.diagnose.scan import parse_oom, parse_report, scan_logs

MIB, GIB = 1024**2, 1024**3

# torch 2.6+ (CUDACachingAllocator.cpp v2.6.0:1338-1363): per-process NVML lines, private pools. The
# "[rank3]: " prefix is torch's excepthook, "03: " Slurm's --label for 16 tasks.
OOM_26 = ("03: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
          "capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB "
          "memory in use. Of the allocated memory 70.12 GiB is allocated by PyTorch, with 512.00 MiB allocated in "
          "private pools (e.g., CUDA Graphs), and 6.53 GiB is reserved by PyTorch but unallocated. If reserved but "
          "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
          "fragmentation.  See documentation for Memory Management  "
          "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# torch 2.1 (the 2.1.2 wheel's fragments: "capacty", max_split_size_mb), torchrun's tee prefix.
OOM_21 = ("[default5]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 5 has a total "
          "capacty of 79.15 GiB of which 483.25 MiB is free. Process 2233285 has 78.66 GiB memory in use. Of the "
          "allocated memory 76.40 GiB is allocated by PyTorch, and 1.73 GiB is reserved by PyTorch but unallocated. If "
          "reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
          "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
# torch <= 2.0 (v1.13.1:681-702; the 2.0.1 wheel), with a memory fraction ("X allowed; ").
OOM_20 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total "
          "capacity; 76.50 GiB already allocated; 11.06 MiB free; 78.00 GiB allowed; 77.62 GiB reserved in total by "
          "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
          "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
# Capacity: almost nothing reserved-but-unallocated (torch 2.3 wording: no private-pool clause).
OOM_CAPACITY = ("[rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a "
                "total capacity of 79.11 GiB of which 2.12 GiB is free. Including non-PyTorch memory, this process has "
                "76.98 GiB memory in use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 210.50 MiB is "
                "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# MCore report_memory (megatron/training/utils/common_utils.py:313-334) and the iteration line before it.
MCORE_ITER = (" [2026-11-30 10:01:02.123456] iteration        2/     100 | consumed samples:          512 | elapsed "
              "time per iteration (ms): 1534.2 | throughput per GPU (TFLOP/s/GPU): 402.7 | learning rate: 1.000000E-04 |"
              " global batch size:   256 | lm loss: 9.123456E+00 | loss scale: 1.0 | grad norm: 3.210 | number of "
              "skipped iterations:   0 | number of nan iterations:   0 |")
MCORE_REPORT = ("[Rank 12] (after 2 iterations) memory (MB) | allocated: 40960.00 | max allocated: 61440.50 | reserved: "
                "65536.00 | max reserved: 70000.25")
# Bridge (train_utils.py:1229-1236, MEMORY_KEYS): decimal GB, five significant digits.
BRIDGE_REPORT = ("[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 41.234 | mem-active-gigabytes: "
                 "41.234 | mem-inactive-gigabytes: 2.1 | mem-reserved-gigabytes: 63.5 | mem-max-allocated-gigabytes: "
                 "60.123 | mem-max-active-gigabytes: 60.123 | mem-max-inactive-gigabytes: 3.2 | "
                 "mem-max-reserved-gigabytes: 66.0 | mem-alloc-retires: 3 | mem-allocated-count: 12345")
KNOWN = ("[rank0]: ValueError: Currently there is no support for Pipeline parallelism with CPU offloading")


def _write(tmp_path: Path, name: str, *lines: str) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(p)


def test_prefixes() -> None:
    assert split_prefixes(" 3: [rank3]: x") == ("x", 3, 3, None)
    assert split_prefixes("P1  12: x")[:2] == ("x", 12)
    assert split_prefixes("[default7]:[rank15]: x") == ("x", None, 15, 7)
    assert split_prefixes("[trainer2]: x") == ("x", None, None, 2)
    assert split_prefixes("[4]: x") == ("x", None, 4, None)
    assert split_prefixes("[Rank 0] (after 1 iterations)")[0] == "[Rank 0] (after 1 iterations)"


def test_current_format_figures() -> None:
    fmt, f = parse_oom(OOM_26)  # type: ignore[misc]
    assert fmt == "torch>=2.1"
    assert f["requested_bytes"] == 2 * GIB and f["device"] == 3
    assert f["capacity_bytes"] == round(79.11 * GIB) and f["free_bytes"] == round(1.06 * GIB)
    assert f["allocated_bytes"] == round(70.12 * GIB) and f["private_pool_bytes"] == 512 * MIB
    assert f["reserved_unallocated_bytes"] == round(6.53 * GIB)
    assert f["process_bytes"] == round(78.04 * GIB) and f["other_processes_bytes"] == 0


def test_torch21_and_old_formats() -> None:
    fmt, f = parse_oom(OOM_21)  # type: ignore[misc]
    # No "this process" line: inside a container NVML reports the host PID, so torch prints this process as
    # "Process 2233285"; it holds at least what PyTorch reserved (76.40 + 1.73 GiB): it is this process.
    assert fmt == "torch>=2.1" and f["other_processes_bytes"] == 0 and f["process_bytes"] == round(78.66 * GIB)
    assert f["processes"] == [{"pid": 2233285, "bytes": round(78.66 * GIB), "self": True, "assumed": True}]
    assert f["reserved_unallocated_bytes"] == round(1.73 * GIB)
    fmt, f = parse_oom(OOM_20)  # type: ignore[misc]
    assert fmt == "torch<=2.0"
    assert f["requested_bytes"] == 20 * MIB and f["allocated_bytes"] == round(76.50 * GIB)
    assert f["allowed_bytes"] == 78 * GIB
    # "reserved in total" includes the allocated memory.
    assert f["reserved_unallocated_bytes"] == round(77.62 * GIB) - round(76.50 * GIB)


def test_other_oom_messages() -> None:
    assert parse_oom("RuntimeError: CUDA error: out of memory") == ("outside-allocator", {})
    assert parse_oom("node1:123:456 [0] NCCL WARN Cuda failure 'out of memory'") == ("outside-allocator", {})
    frac = parse_oom("torch.OutOfMemoryError: CUDA out of memory. Allocation was preemptively rejected because it "
                     "would exceed per_process_memory_fraction limit. Requested size: 4.00 GiB")
    assert frac == ("memory-fraction", {"requested_bytes": 4 * GIB})
    assert parse_oom("loading checkpoint: ok") is None


def test_reports() -> None:
    rank, source, label, f = parse_report(MCORE_REPORT)  # type: ignore[misc]
    assert (rank, source, label) == (12, "megatron-core", "(after 2 iterations)")
    assert f["max_allocated_bytes"] == round(61440.50 * MIB) and f["max_reserved_bytes"] == round(70000.25 * MIB)
    rank, source, _, f = parse_report(BRIDGE_REPORT)  # type: ignore[misc]
    assert (rank, source) == (0, "megatron-bridge")
    assert f["max_allocated_bytes"] == 60_123_000_000 and f["max_reserved_bytes"] == 66_000_000_000
    assert f["alloc_retries"] == 3


def test_classes_ranks_and_iterations(tmp_path: Path) -> None:
    log = _write(tmp_path, "slurm-1.out",
                 " 0: " + MCORE_ITER.replace("iteration        2/", "iteration        1/"),
                 " 0: " + MCORE_ITER, "12: " + MCORE_REPORT, OOM_26, " 7: " + OOM_CAPACITY.replace("[rank0]: ", ""),
                 " 0: " + KNOWN, " 0: " + KNOWN, "11: RuntimeError: CUDA error: out of memory")
    scan = scan_logs([log])
    by_rank = {o.where.rank: o for o in scan.ooms}
    assert set(by_rank) == {3, 7, 11}
    # Iteration lines 1 and 2 were logged, one apart: the OOMs happened in iteration 3.
    assert by_rank[3].where.iteration == 3 and by_rank[3].where.after_iteration == 2
    assert scan.reports[0].where.rank == 12 and scan.reports[0].where.iteration == 2
    assert scan.reports[0].throughput is not None and scan.reports[0].throughput.tflops_per_gpu == 402.7
    assert len(scan.known) == 1 and scan.known[0].count == 2 and scan.known[0].error.codes == ("MBM205",)
    classes = {(d.cls, d.where.rank) for d in diagnose(scan, RunContext())}
    assert classes == {("fragmentation", 3), ("capacity", 7), ("unknown", 11), ("known-error", 0)}


def test_fragmentation_old_and_21(tmp_path: Path) -> None:
    scan = scan_logs([_write(tmp_path, "a.log", OOM_20, OOM_21)])
    diags = diagnose(scan, RunContext())
    assert [d.cls for d in diags] == ["fragmentation", "fragmentation"]
    assert diags[1].where.local_rank == 5 and "other processes" not in diags[1].message
    # torch <= 2.0 has no expandable_segments (absent from the 2.0.1 wheel's libc10_cuda.so, present in 2.1.2's):
    # the message's own advice (max_split_size_mb) first, then the upgrade; never MBM314's expandable segments.
    assert diags[0].codes == [] and "max_split_size_mb" in diags[0].suggestions[0].title
    assert "torch >= 2.1" in diags[0].suggestions[1].title and "no expandable_segments" in diags[0].message
    assert diags[1].codes == ["MBM314"] and "expandable_segments:True" in diags[1].suggestions[0].title


def test_expandable_segments_already_on_means_capacity(tmp_path: Path) -> None:
    scan = scan_logs([_write(tmp_path, "a.log", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", OOM_26)])
    assert scan.alloc_conf == "expandable_segments:True"
    from mbmem_lint.diagnose.report import run_diagnose

    rep = run_diagnose(scan)
    assert rep.diagnoses[0].cls == "capacity" and "already on" in rep.diagnoses[0].message


def test_one_stage_imbalance(tmp_path: Path) -> None:
    # PP=4 over 16 ranks (Megatron-LM's argument dump); rank 0 (stage 0) OOMs, the other stages report headroom.
    lines = ["  pipeline_model_parallel_size .................... 4", "  tensor_model_parallel_size ...................... 2",
             "  world_size ...................................... 16"]
    for rank, max_alloc in ((4, 40000.0), (8, 38000.0), (12, 45000.0)):
        lines.append(f"[Rank {rank}] (after 1 iterations) memory (MB) | allocated: 30000.00 | max allocated: "
                     f"{max_alloc:.2f} | reserved: {max_alloc + 2000:.2f} | max reserved: {max_alloc + 3000:.2f}")
    lines.append(OOM_CAPACITY)
    scan = scan_logs([_write(tmp_path, "a.log", *lines)])
    from mbmem_lint.diagnose.report import run_diagnose

    rep = run_diagnose(scan)
    d = rep.diagnoses[0]
    assert rep.context.layout is not None and rep.context.layout.pp == 4
    assert d.cls == "imbalance" and d.stage == 0
    assert "first stage" in d.message and "num_layers_in_first_pipeline_stage" in d.suggestions[0].title


def test_all_stages_short_is_capacity_not_imbalance(tmp_path: Path) -> None:
    layout = Layout(world_size=16, tp=2, pp=4)
    scan = scan_logs([_write(tmp_path, "a.log", OOM_CAPACITY, "[rank12]: " + OOM_CAPACITY.replace("[rank0]: ", ""))])
    assert {o.where.rank for o in scan.ooms} == {0, 12}
    assert {d.cls for d in diagnose(scan, RunContext(layout=layout))} == {"capacity"}


def test_slurm_task_and_torchrun_local_rank_give_global_rank(tmp_path: Path) -> None:
    log = _write(tmp_path, "a.log", "0: [default0]: starting", "0: [default7]: starting",
                 "1: [default5]:" + OOM_21.replace("[default5]:", ""))
    scan = scan_logs([log])
    assert scan.ooms[0].where.rank == 13  # task 1 x 8 local ranks + 5


def test_gzip_and_truncated_gzip(tmp_path: Path) -> None:
    body = ("\n".join(["noise line"] * 2000 + [OOM_26] + ["more noise"] * 50000) + "\n").encode()
    gz = gzip.compress(body)
    full = tmp_path / "run.log.gz"
    full.write_bytes(gz)
    assert len(scan_logs([str(full)]).ooms) == 1
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gz[: len(gz) // 2])
    scan = scan_logs([str(cut)])
    assert len(scan.ooms) == 1  # the OOM is in the first half
    assert any("truncated" in n for n in scan.notes)


def test_garbage_binary_and_empty_logs(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(b"\xff\xfe CUDA out of mem\xc3\x28ory Tried to allocate 2.00 ZiB\r\r\n" * 100 + b"x" * 200_000)
    scan = scan_logs([str(garbage)])
    assert scan.ooms and scan.ooms[0].format == "outside-allocator" or not scan.ooms
    binary = tmp_path / "core.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(LogReadError, match="binary"):
        scan_logs([str(binary)])
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert scan_logs([str(empty)]).lines == 0
    bad_gz = tmp_path / "bad.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"\x00garbage" * 10)
    with pytest.raises(LogReadError):
        scan_logs([str(bad_gz)])


def test_cli_exit_codes_and_json_contract(tmp_path: Path) -> None:
    oom = _write(tmp_path, "oom.log", OOM_26)
    res = run_cli(["diagnose", oom, "--format", "json"])
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    ev = data["events"][0]
    assert ev["kind"] == "oom" and ev["file"] == oom and ev["line"] == 1 and ev["rank"] == 3
    assert "iteration" in ev and ev["iteration"] is None
    d = data["diagnoses"][0]
    assert set(d) >= {"class", "rank", "iteration", "file", "line", "requested_bytes", "capacity_bytes", "free_bytes",
                      "allocated_bytes", "reserved_unallocated_bytes", "codes", "message", "suggestions"}
    assert d["class"] == "fragmentation" and d["codes"] == ["MBM314"] and d["requested_bytes"] == 2 * GIB
    clean = _write(tmp_path, "clean.log", MCORE_ITER, "all good")
    res = run_cli(["diagnose", clean, "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["diagnoses"] == []
    known = _write(tmp_path, "known.log", KNOWN)
    res = run_cli(["diagnose", known])
    assert res.exit_code == 1 and "MBM205" in res.stdout
    for bad in (str(tmp_path / "missing.log"), str(tmp_path)):
        res = run_cli(["diagnose", bad])
        assert res.exit_code == 2 and "Traceback" not in res.output and "error:" in res.stderr
    (tmp_path / "bin.log").write_bytes(b"\x00\x01" * 100)
    res = run_cli(["diagnose", str(tmp_path / "bin.log")])
    assert res.exit_code == 2 and "not a text log" in res.stderr


@pytest.mark.corpus
def test_known_error_texts_are_at_the_cited_lines() -> None:
    from mbmem_lint.dev.corpus import ensure_corpus
    from mbmem_lint.diagnose.known_errors import KNOWN_ERRORS

    root = ensure_corpus()
    for e in KNOWN_ERRORS:
        if e.tag is not None:
            continue  # checked against the public repository (next test)
        path, _, line = e.ref.partition(":")
        text = (root / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
        assert e.text in text, (e.ref, text)


MIRRORS = {"Megatron-LM": "/work/.mirror/NVIDIA+Megatron-LM/repo",
           "TransformerEngine": "/work/.mirror/NVIDIA+TransformerEngine/repo"}


def test_older_wordings_are_at_the_cited_release_lines() -> None:
    """Known errors cited at a release tag of a public repository (older Megatron wordings, Transformer
    Engine): the text is on that line at that tag (needs the repository snapshots; skipped without them)."""
    import subprocess

    from mbmem_lint.diagnose.known_errors import KNOWN_ERRORS

    tagged = [e for e in KNOWN_ERRORS if e.tag is not None]
    assert tagged
    for e in tagged:
        assert e.tag is not None
        repo, _, tag = e.tag.partition("@")
        git_dir = Path(MIRRORS[repo])
        if not git_dir.is_dir():
            pytest.skip(f"no snapshot of {repo}")
        path, _, line = e.ref.partition(":")
        out = subprocess.run(["git", "-C", str(git_dir), "show", f"{tag}:{path}"], capture_output=True, text=True,
                             check=True).stdout
        assert e.text in out.splitlines()[int(line) - 1], (e.tag, e.ref)


@pytest.mark.corpus
def test_report_formats_match_the_sources() -> None:
    """The report_memory / iteration-line format strings are still what the pinned wheels print."""
    from mbmem_lint.dev.corpus import ensure_corpus

    root = ensure_corpus()
    mcore = (root / "megatron/training/utils/common_utils.py").read_text(encoding="utf-8")
    for frag in ("' memory (MB)'", '" | allocated: {', '" | max allocated: {', '" | reserved: {', '" | max reserved: {',
                 '"[Rank {}] {}"'):
        assert frag in mcore, frag
    bridge = (root / "megatron/bridge/training/utils/train_utils.py").read_text(encoding="utf-8")
    for frag in ('memory (GB)"', 'f" | {metric}: {value}"', '"mem-max-allocated-bytes"', '"mem-alloc-retires"',
                 "/ 1.0e9", "Step Time : {elapsed_time_per_iteration:.2f}s GPU utilization: {per_gpu_tf:.1f}MODEL_TFLOP/s/GPU",
                 '" iteration {:8d}/{:8d} |"'):
        assert frag in bridge, frag
