"""``diagnose`` on a large log: peak memory stays flat as the log grows (streamed, bounded events).

Writes a gzip-free synthetic Slurm log of the given size (iteration lines, noise, memory reports on
the first iterations, one OOM near the end, all in the exact source formats), runs
``mbmem-lint diagnose`` on it in a subprocess and reports its peak RSS and wall time; the same for a
log 1/16 of the size, so the result is a ratio measured in one run.

Run: ``.venv/bin/python bench/diagnose_log.py [--size-mb 1024] [--keep]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ITER = (" 31:  [2026-11-30 10:01:02] iteration {i:8d}/ 1000000 | consumed samples: {s:12d} | elapsed time per iteration "
        "(ms): 6981.0 | throughput per GPU (TFLOP/s/GPU): 702.9 | learning rate: 1.000000E-05 | global batch size:    "
        "32 | lm loss: 1.902345E+00 | loss scale: 1.0 | grad norm: 1.101 | number of skipped iterations:   0 | number "
        "of nan iterations:   0 |\n")
NOISE = " 7: [NeMo I 2026-11-30 10:01:03 data:88] loaded shard {i} of the blended dataset (cache hit)\n"
REPORT = (" {r}: [Rank {r}] (after {i} iterations) memory (GB) | mem-allocated-gigabytes: 30.113 | "
          "mem-reserved-gigabytes: 62.03 | mem-max-allocated-gigabytes: 58.812 | mem-max-reserved-gigabytes: 73.1 | "
          "mem-alloc-retires: 0\n")
OOM = (" 2: [rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 2 has a total capacity "
       "of 79.11 GiB of which 1.41 GiB is free. Including non-PyTorch memory, this process has 77.69 GiB memory in use. "
       "Of the allocated memory 66.84 GiB is allocated by PyTorch, and 9.14 GiB is reserved by PyTorch but unallocated. "
       "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
       "avoid fragmentation.  See documentation for Memory Management  "
       "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")


def write_log(path: Path, size: int) -> None:
    written = 0
    i = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < size:
            i += 1
            block = ITER.format(i=i, s=i * 32) + "".join(NOISE.format(i=i * 10 + k) for k in range(10))
            if i <= 2:
                block += "".join(REPORT.format(r=r, i=i) for r in (0, 8, 16, 24))
            fh.write(block)
            written += len(block)
        fh.write(OOM)


def measure(path: Path) -> tuple[float, int, str]:
    """(seconds, peak RSS of the child in KiB, last line of its output)."""
    exe = Path(sys.executable).with_name("mbmem-lint")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([str(exe), "diagnose", str(path)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 1:
        raise SystemExit(f"unexpected exit {proc.returncode}: {proc.stderr}")
    lines = proc.stdout.strip().splitlines()
    return elapsed, max(rss, before), lines[-1] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mbmem-diag-bench-") as tmp:
        small, big = Path(tmp, "small.out"), Path(tmp, "big.out")
        write_log(small, args.size_mb * 1024 * 1024 // 16)
        # Separate processes: ru_maxrss of RUSAGE_CHILDREN is the largest child so far, so the small
        # log is measured first.
        t_small, rss_small, _ = measure(small)
        write_log(big, args.size_mb * 1024 * 1024)
        t_big, rss_big, last = measure(big)
        print(f"small log {small.stat().st_size / 2**20:8.1f} MiB: {t_small:6.1f} s, peak RSS {rss_small / 1024:6.1f} MiB")
        print(f"large log {big.stat().st_size / 2**20:8.1f} MiB: {t_big:6.1f} s, peak RSS {rss_big / 1024:6.1f} MiB")
        print(f"peak RSS ratio large/small: {rss_big / rss_small:.2f} (constant memory: ~1.0); "
              f"throughput {big.stat().st_size / 2**20 / t_big:.0f} MiB/s")
        print(f"diagnose: {last}")
        if args.keep:
            os.rename(big, Path.cwd() / "diagnose-bench.out")


if __name__ == "__main__":
    main()
