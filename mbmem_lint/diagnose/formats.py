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

import math
import re

_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB)"
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
MAX_BYTES = 2**63 - 1  # a figure above this (a 400-digit number, 1e309) is not a size: read as unknown
MAX_DIGITS = 18  # an integer printed with more digits is not a rank, an iteration or a count


def size_bytes(number: str, unit: str) -> int | None:
    """``format_size`` output back to bytes (exact to the printed two decimals); None when the number is
    not a size a machine has (too many digits, not finite)."""
    value = finite_float(number)
    if value is None:
        return None
    n = value * _UNITS[unit]
    return int(round(n)) if 0 <= n <= MAX_BYTES else None


def finite_float(text: str | None) -> float | None:
    """A printed number as a float, None when it is not one or not finite (``1e309``, ``nan``, 400 digits)."""
    if text is None or len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def bounded_int(text: str | None) -> int | None:
    """A printed integer, None when it is not one or has more than :data:`MAX_DIGITS` digits."""
    if text is None:
        return None
    digits = text.lstrip("-")
    if not digits.isdigit() or len(digits) > MAX_DIGITS:
        return None
    return int(text)


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

# The caching allocator's OOM read clause by clause, so that a line cut off part-way (a log collector's
# line limit, a truncated file) still gives every figure it holds. The head, then each clause in the
# order the source prints it (torch 2.1+, v2.6.0 ``CUDACachingAllocator.cpp:1338-1363``; torch <= 2.0,
# v1.13.1 ``:681-702``). ``Tried to allocate more than 1EB memory.`` is printed for a request whose size
# does not fit ``format_size`` (fragment in the 2.8.0 wheel's ``libc10_cuda.so``).
OOM_HEAD = re.compile(r"CUDA out of memory\. Tried to allocate (?:" + _SIZE + r"|(more than 1EB) memory)")
OOM_NEW_CAPACITY = re.compile(r"^\. GPU (\d+) has a total capac(?:i)?ty of " + _SIZE)
OOM_NEW_FREE = re.compile(r" of which " + _SIZE + r" is free\.")
OOM_NEW_ALLOWED = re.compile(_SIZE + r" allowed; Of the allocated")
OOM_NEW_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
OOM_NEW_PRIVATE = re.compile(r"with " + _SIZE + r" allocated in private pools")
OOM_NEW_UNALLOCATED = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
OOM_OLD_CAPACITY = re.compile(r"^ \(GPU (\d+); " + _SIZE + r" total capacity")
OOM_OLD_ALLOCATED = re.compile(r"; " + _SIZE + r" already allocated")
OOM_OLD_FREE = re.compile(r"; " + _SIZE + r" free;")
OOM_OLD_ALLOWED = re.compile(r"; " + _SIZE + r" allowed;")
OOM_OLD_RESERVED = re.compile(_SIZE + r" reserved in total by PyTorch")

# torch's excepthook prefix found inside a line (two lines glued together by a log collector).
GLUED_RANK = re.compile(r"\[rank(\d+)\]: ?")
# Where a Megatron memory report starts (several can be glued onto one line, or onto an iteration line).
REPORT_START = re.compile(r"\[Rank \d+\] ")

# --- Communication failures -------------------------------------------------------------------------
# PyTorch ProcessGroupNCCL's watchdog (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::
# checkTimeout and operator<<(WorkNCCL)): "Watchdog caught collective operation timeout: " + "WorkNCCL(" +
# "SeqNum=" ", OpType=" ", NumelIn=" ", NumelOut=" ", Timeout(ms)=" ")" + " ran for " N + " milliseconds
# before timing out." (every fragment is in the 2.0.1, 2.1.2, 2.3.1, 2.6.0 and 2.8.0 wheels'
# libtorch_cuda.so). The log prefix in front names the rank: "[Rank 3] " (2.0-2.3) or
# "[PG ID 2 PG GUID 5(PIPELINE_MODEL_PARALLEL_GROUP) Rank 3] " (2.6, 2.8: " PG GUID ", "[PG ID ", ") Rank ").
WATCHDOG = re.compile(
    r"(?:\[(?P<pg>PG [^\]]*?)?\s*Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>-?\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>-?\d+))?"
    r"(?:, NumelOut=(?P<numel_out>-?\d+))?(?:, Timeout\(ms\)=(?P<timeout>\d+))?\)"
    r"(?: ran for (?P<ran>\d+) milliseconds before timing out)?"
)
# The process group named in a "[PG ...]" prefix: "PG GUID 5(PIPELINE_MODEL_PARALLEL_GROUP)".
PG_DESC = re.compile(r"\(([A-Za-z_][\w-]*)\)")
PG_PREFIX = re.compile(r"\[(PG [^\]]*?)\s*Rank (\d+)\] ")
# torch's NCCL result check (torch/csrc/distributed/c10d/NCCLUtils.hpp C10D_NCCL_CHECK): "NCCL error in: FILE:LINE,
# <ncclGetErrorString>, NCCL version X" ("NCCL error in: ", ", NCCL version " in the 2.6.0 wheel); and
# torch/csrc/cuda/nccl.cpp's "NCCL Error " + code + ": " + <ncclGetErrorString> ("NCCL Error " in the same wheel).
# ncclGetErrorString: NCCL src/init.cc:3416-3432 (HEAD): "unhandled system error (run with NCCL_DEBUG=INFO for
# details)", "remote process exited or there was a network error", ...
NCCL_ERROR_IN = re.compile(r"NCCL error in: (?P<at>\S+?), (?P<error>[^,]+)(?:, NCCL version (?P<version>[\w.+-]+))?")
NCCL_ERROR_CODE = re.compile(r"NCCL Error (?P<code>\d+): (?P<error>.+?)\s*$")
# NCCL's own log lines (src/debug.cc:328-354, HEAD): "HOST:PID:TID [DEV] NCCL INFO ..." and
# "HOST:PID:TID [DEV] FILE:LINE NCCL WARN ...". InfiniBand completion errors, NCCL src/transport/net_ib.cc:1294
# (v2.18.1-1) "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d (%s)",
# :1909 (v2.21.5-1) "... with status=%d opcode=%d len=%d vendor err %d (%s)", :2121 (v2.23.4-1) "NET/IB: ...
# hca %s", src/transport/net_ib/p2p.cc:688 (HEAD) "with status=%s(%d) opcode=%s(%d) vendor_err=%u".
NCCL_LOG = re.compile(r"NCCL (?P<level>WARN|INFO) ")
IB_COMPLETION = re.compile(
    r"NET/IB ?: Got completion from peer (?P<peer>\S+) with (?:error (?P<err>\d+)|status=(?:(?P<status_name>[^(=]+)\()?"
    r"(?P<status>\d+)\)?)"
)
# NCCL's hints after an IB completion error (src/transport/net_ib/common.h:612-630, HEAD).
IB_HINT = re.compile(r"NCCL INFO HINT: (?P<hint>.+)$")

# --- CUDA errors that are not OOMs ----------------------------------------------------------------------
# c10/cuda/CUDAException.cpp c10_cuda_check_implementation: "CUDA error: " + cudaGetErrorString, then "CUDA
# kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be
# incorrect." / "For debugging consider passing CUDA_LAUNCH_BLOCKING=1" / "Compile with `TORCH_USE_CUDA_DSA` to
# enable device-side assertions." (all in the 2.6.0 wheel's libc10_cuda.so). cuBLAS: aten/src/ATen/cuda/
# Exceptions.h TORCH_CUDABLAS_CHECK "CUDA error: " <status> " when calling `EXPR`" (2.6.0 libtorch_cuda.so);
# cuDNN: aten/src/ATen/cudnn/Exceptions.h "cuDNN error: " (same wheel). Transformer Engine: transformer_engine/
# common/util/logging.h:57-85 (HEAD) "CUDA Error: ", "cuBLAS Error: ", "cuDNN Error: ". Triton: triton/backends/
# nvidia/driver.c:13 (triton 3.2.0 wheel) "Triton Error [CUDA]: ". torch 2.8 raises torch.AcceleratorError (in the
# 2.8.0 wheel's libtorch_python.so, absent from 2.6.0's).
CUDA_ERROR = re.compile(
    r"(?P<via>Triton Error \[CUDA\]|CUDA error|CUDA Error|cuBLAS Error|cuDNN error|cuDNN Error): (?P<error>.+?)"
    r"(?: when calling `(?P<call>[^`]*)`?|\s*$|(?= CUDA kernel errors might)|(?=\. ?Compile with))"
)
CUDA_EXCEPTION = re.compile(r"(torch\.AcceleratorError|RuntimeError|torch\.cuda\.CudaError|[\w.]*Error)"
                            r": (?=.*?(?:CUDA error|CUDA Error|Triton Error|cuBLAS Error|cuDNN error|cuDNN Error))")
# A device-side assert prints where it failed (the CUDA runtime's device printf: "FILE:LINE: FUNC: block: [x,y,z],
# thread: [x,y,z] Assertion `EXPR` failed.").
DEVICE_ASSERT = re.compile(r"(?P<at>\S+:\d+): (?P<func>\S+): block: \[[\d,]+\], thread: \[[\d,]+\] "
                           r"Assertion `(?P<expr>.*)` failed\.")

# --- Other fatal ends -------------------------------------------------------------------------------
TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
# An exception line after a traceback: "pkg.mod.SomeError: message" or a bare name.
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning|Fault)"
                            r"|[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s?(?P<message>.*))?$")
# libstdc++'s verbose terminate handler (libstdc++-v3/libsupc++/vterminate.cc): "terminate called after throwing an
# instance of 'TYPE'" then "  what():  MESSAGE"; also "terminate called recursively" / "without an active exception".
TERMINATE = re.compile(r"terminate called (?:after throwing an instance of '(?P<type>[^']+)'|(?P<other>recursively|"
                       r"without an active exception))")
WHAT = re.compile(r"^\s*what\(\):\s+(?P<what>.+)$")
# torch.distributed.elastic (torch/distributed/elastic/multiprocessing/errors/__init__.py:179-197, 2.8.0 wheel):
# "ChildFailedError:" then a block with "Root Cause (first observed failure):", "[0]:", "  rank      : 3
# (local_rank: 3)", "  exitcode  : -6 (pid: 123)", "  traceback : Signal 6 (SIGABRT) received by PID 123".
CHILD_FAILED = "ChildFailedError"
ROOT_CAUSE = "Root Cause (first observed failure):"
ELASTIC_FIELD = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: (?P<value>.*)$")
ELASTIC_RANK = re.compile(r"^(\d+) \(local_rank: (\d+)\)")
ELASTIC_EXIT = re.compile(r"^(-?\d+) \(pid: (\d+)\)")
