"""The message formats ``diagnose`` recognises, each as the source prints it.

PyTorch's caching-allocator OOM (``TORCH_CHECK_WITH(OutOfMemoryError, ...)`` in
``c10/cuda/CUDACachingAllocator.cpp``; sizes from ``format_size``: two decimals, ``bytes`` up to
1024, then ``KiB``/``MiB``/``GiB`` in powers of 1024):

* torch <= 2.0 (v1.13.1 ``CUDACachingAllocator.cpp:681-702``; the same fragments are in the 2.0.1
  wheel's ``libc10_cuda.so``)::

    CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total capacity; 76.50 GiB already
    allocated; 11.06 MiB free; [X allowed; ]77.62 GiB reserved in total by PyTorch) If reserved memory is
    >> allocated memory try setting max_split_size_mb to avoid fragmentation. ...

  "reserved in total" includes the allocated memory.
* torch 2.1 - 2.3 (fragments in the 2.1.2 and 2.3.1 wheels' ``libc10_cuda.so``; 2.1 spells
  "capacty" and suggests ``max_split_size_mb``, 2.2+ suggests ``expandable_segments:True``)::

    CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacty of 79.15 GiB of which
    483.25 MiB is free. Process 2233285 has 78.66 GiB memory in use. Of the allocated memory 76.40 GiB is
    allocated by PyTorch, and 1.73 GiB is reserved by PyTorch but unallocated. ...

* torch 2.6+ (the clause below is absent from the 2.3.1 wheel; 2.4/2.5 not checked) (v2.6.0 ``CUDACachingAllocator.cpp:1338-1363``, per-process lines from
  ``reportProcessMemoryInfo`` at ``:975-1030``; the 2.14.1 wheel holds the same fragments): as above,
  plus ``with X allocated in private pools (e.g., CUDA Graphs), `` before ``and`` when graph pools hold
  memory, and ``X allowed; `` before ``Of the allocated memory`` under a memory fraction. Here
  "allocated by PyTorch" includes the private pools and "reserved but unallocated" excludes them.

The exception type in front of the message: ``torch.OutOfMemoryError`` (2.14 wheel),
``torch.cuda.OutOfMemoryError`` (2.0.1-2.3.1 wheels), ``RuntimeError`` (before 1.13). With a process group, torch
prefixes every line of an uncaught exception with ``[rankN]: `` (``distributed_c10d.py``
``_distributed_excepthook``).

Megatron's memory reports:

* Megatron-LM / MCore training loop (``megatron/training/utils/common_utils.py:313-334``, megatron-core
  0.19.2), MiB with two decimals, printed by the first data-parallel rank of each model-parallel group::

    [Rank 3] (after 2 iterations) memory (MB) | allocated: 1234.56 | max allocated: 2345.67 | reserved: ...
    | max reserved: ...[ | total device memory used: ...]

* Megatron Bridge (``megatron/bridge/training/utils/train_utils.py:1229-1236`` and ``report_memory`` at
  ``:1245-1297``, megatron-bridge 0.6.2): decimal GB (``/ 1.0e9``) rounded to five significant digits,
  keys from ``MEMORY_KEYS`` (``:258-269``)::

    [Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 41.234 | ... |
    mem-max-allocated-gigabytes: 60.123 | ... | mem-max-reserved-gigabytes: 63.5 | mem-alloc-retires: 0 | ...

Throughput: the iteration line of both loops (MCore ``megatron/training/training.py:2844-2909``, Bridge
``train_utils.py:1173-1225``) and Bridge's ``Step Time : 1.23s GPU utilization: 456.7MODEL_TFLOP/s/GPU``
(``train_utils.py:1133-1135``).
"""

from __future__ import annotations

import re

_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB)"
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def size_bytes(number: str, unit: str) -> int:
    """``format_size`` output back to bytes (exact to the printed two decimals)."""
    return int(round(float(number) * _UNITS[unit]))


# The exception type printed before the message (None: the message was found without one).
EXCEPTION = re.compile(r"((?:torch\.(?:cuda\.)?OutOfMemoryError|RuntimeError|torch\.AcceleratorError)): CUDA out of memory")

# torch 2.1+ ("capacty" in 2.1).
OOM_CURRENT = re.compile(
    r"CUDA out of memory\. Tried to allocate " + _SIZE + r"\. GPU (\d+) has a total capac(?:i)?ty of " + _SIZE
    + r" of which " + _SIZE + r" is free\. "
    r"(?P<procs>(?:(?:Including non-PyTorch memory, this process|Process \d+) has \d+(?:\.\d+)? (?:bytes|KiB|MiB|GiB)"
    r" memory in use\. )*)"
    r"(?:" + _SIZE + r" allowed; )?"
    r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch, "
    r"(?:with " + _SIZE + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?"
    r"and " + _SIZE + r" is reserved by PyTorch but unallocated\."
)
PROCESS = re.compile(r"(Including non-PyTorch memory, this process|Process (\d+)) has " + _SIZE + r" memory in use\.")

# torch <= 2.0.
OOM_OLD = re.compile(
    r"CUDA out of memory\. Tried to allocate " + _SIZE + r" \(GPU (\d+); " + _SIZE + r" total capacity; "
    + _SIZE + r" already allocated; " + _SIZE + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE
    + r" reserved in total by PyTorch\)"
)

# torch 2.14: a request over ``per_process_memory_fraction`` is refused before cudaMalloc.
OOM_FRACTION = re.compile(
    r"CUDA out of memory\. Allocation was preemptively rejected because it would exceed "
    r"per_process_memory_fraction limit\. Requested size: " + _SIZE
)

# Out-of-memory errors raised outside the caching allocator: no allocator figures.
OOM_OTHER = re.compile(
    r"CUDA error: out of memory|CUDA out of memory|Triton Error \[CUDA\]: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r"|CUDNN_STATUS_ALLOC_FAILED|NCCL WARN .*(?:out of memory|Failed to CUDA calloc|Cuda failure 'out of memory')"
)

# Megatron-LM / MCore report_memory (MiB).
MCORE_REPORT = re.compile(
    r"\[Rank (\d+)\] (.*?) ?memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+) \| reserved: ([\d.]+)"
    r" \| max reserved: ([\d.]+)(?: \| total device memory used: ([\d.]+))?"
)
# Megatron Bridge report_memory (decimal GB, ``key: value`` pairs).
BRIDGE_REPORT = re.compile(r"\[Rank (\d+)\] (.*?) ?memory \(GB\)((?: ?\| [\w./-]+: [^|]*)+)")
BRIDGE_PAIR = re.compile(r"\| ([\w./-]+): ([^|]*)")
# The iteration named by a report's label: "(after 2 iterations)", "(before save_checkpoint for iteration 100)".
REPORT_ITERATION = re.compile(r"after (\d+) iterations|for iteration (\d+)")

ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+) \|")
ELAPSED = re.compile(r"elapsed time per iteration \(ms\): ([\d.]+)")
THROUGHPUT = re.compile(r"throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)")
STEP_TIME = re.compile(r"Step Time : ([\d.]+)s GPU utilization: ([\d.]+)MODEL_TFLOP/s/GPU")

# Parallel sizes as launch logs print them: Megatron-LM's argument dump ("  pipeline_model_parallel_size
# ...... 4") and Bridge's YAML config dump ("  pipeline_model_parallel_size: 4").
PARALLEL_SIZE = re.compile(
    r"^\s*(tensor_model_parallel_size|pipeline_model_parallel_size|context_parallel_size|world_size)"
    r"\s*(?:\.+|:)\s*(\d+)\s*$"
)
ALLOC_CONF = re.compile(r"PYTORCH_(?:CUDA_)?ALLOC_CONF\W{1,4}([\w:.,]*expandable_segments:(?:True|False)[\w:.,]*)")

# Rank prefixes a line can carry, outermost first (each is stripped before the next is tried):
# Slurm ``srun --label`` ("%*d: ", width of the largest task id; "P%u %*d: " for heterogeneous jobs:
# slurm src/common/write_labelled_message.c:128-145, 24.11), torch's excepthook ("[rank3]: "),
# torchrun's tee ("[default3]:", role name + local rank, or a template such as "[3]:";
# torch/distributed/elastic/multiprocessing/tail_log.py).
SLURM_LABEL = re.compile(r"^(?:P\d+ )? *(\d+): ")
# A global rank: torch's "[rank3]: " or torchrun's "[3]:".
GLOBAL_RANK = re.compile(r"^\[(?:rank)?(\d+)\]: ?")
TORCHRUN_LOCAL = re.compile(r"^\[([A-Za-z_][\w-]*?)(\d+)\]: ?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
