"""Diagnoses of the failures that are not OOMs: communication, CUDA errors, and fatal ends nothing else
explains. Every piece of advice here is the one its source gives (cited), or a reading of the figures.

* **communication**: NCCL watchdog timeouts (one diagnosis per process group, collective and timeout, with
  every rank that timed out), NCCL errors, InfiniBand completion errors.
* **cuda-error**: illegal memory access, device-side asserts, cuBLAS / cuDNN status errors (from torch,
  Triton or Transformer Engine): the first step is always to find the kernel (``CUDA_LAUNCH_BLOCKING=1``).
* **unrecognised-failure**: the job ended with an exception, a ``terminate called`` or a launcher-reported
  child failure that no pattern explains: its last exception line and where it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mbmem_lint.diagnose.classify import Diagnosis, Suggestion, _rank_text, _when
from mbmem_lint.diagnose.failures import CommEvent, CudaErrorEvent, FatalEvent, group_dimension
from mbmem_lint.diagnose.scan import ScanResult

# InfiniBand work-completion status codes (enum ibv_wc_status, in NCCL's copy src/include/ibvcore.h:303-326).
IB_STATUS = ("IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
             "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
             "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
             "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR", "IBV_WC_REM_INV_RD_REQ_ERR",
             "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
             "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR")
# NCCL's own hints per status (src/transport/net_ib/common.h:612-630, printIbWcStatusHint, HEAD).
IB_HINTS = {
    4: "NCCL: this error often occurs when ACS is enabled, which breaks GPU Direct RDMA; to confirm, set "
       "NCCL_NET_GDR_LEVEL=0 (or disable ACS following the vendor's documentation)",
    5: "NCCL: this error often occurs when NICs on the same instance cannot talk to each other (a flush error "
       "also follows any earlier error on the queue pair: look for the first one)",
    12: "NCCL: this error often occurs when NCCL_IB_TIMEOUT is too short (default 20, about 30 s); to confirm, "
        "raise NCCL_IB_TIMEOUT and see whether the error persists",
}
# torch's reading of NCCL result codes (getNcclErrorDetailStr, torch/csrc/distributed/c10d/NCCLUtils.cpp; the
# texts are in the 2.6.0 wheel's libtorch_cuda.so), keyed by the start of ncclGetErrorString (NCCL src/init.cc).
NCCL_MEANING = {
    "unhandled system error": "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
                              "or device error",
    "remote process exited or there was a network error": "ncclRemoteError: A call failed possibly due to a network "
                                                          "error or a remote process exiting prematurely",
    "internal error": "ncclInternalError: Internal check failed",
    "unhandled cuda error": "ncclUnhandledCudaError: a CUDA call inside NCCL failed",
}

TIMEOUT_SETTING = "dist.distributed_timeout_minutes"
NCCL_DEBUG = Suggestion("rerun with NCCL_DEBUG=INFO (NCCL's own advice in its error string, src/init.cc): NCCL then "
                        "logs the failing call and the peer", "log volume only", setting={"env_vars.NCCL_DEBUG": "INFO"})
FLIGHT_RECORDER = Suggestion(
    "find the rank that did not join: TORCH_NCCL_TRACE_BUFFER_SIZE (e.g. 2000) with TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
    "makes PyTorch dump its flight recorder of the last collectives of each rank at the timeout (ProcessGroupNCCL "
    "reads both from torch 2.3 on, not in 2.1; torch 2.6 names its fr_trace script to read the dump)",
    "a small per-collective record",
    setting={"env_vars.TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "env_vars.TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
RAISE_TIMEOUT = Suggestion(
    f"only if the collective is legitimately long (the first iteration, checkpoint save or load, a slow data "
    f"loader on some ranks): raise {TIMEOUT_SETTING} (Bridge passes it to torch.distributed as the process groups' "
    "timeout: megatron/bridge/training/initialize.py:744; default 10 minutes = Timeout(ms)=600000: "
    "megatron/training/config/common_config.py:77)", "a real hang is found later")
LAUNCH_BLOCKING = Suggestion(
    "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel: CUDA reports kernel errors at a later API call, so the "
    "stack trace is not where the kernel failed (PyTorch's own advice in the message, c10/cuda/CUDAException.cpp)",
    "much slower: for the rerun only", setting={"env_vars.CUDA_LAUNCH_BLOCKING": "1"})
DSA = Suggestion("for a device-side assert, also TORCH_USE_CUDA_DSA (PyTorch's advice in the message: a build with "
                 "device-side assertions reports the kernel and the failed condition)", "a debug build")


def _ranks(events: Iterable[Any]) -> list[int]:
    return sorted({e.where.rank for e in events if e.where.rank is not None})


def _rank_list(ranks: list[int]) -> str:
    if not ranks:
        return "ranks unknown (the lines carry no rank)"
    shown = ", ".join(str(r) for r in ranks[:16])
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{', ...' if len(ranks) > 16 else ''}"


def _group_by(events: Iterable[Any], key: Callable[[Any], Any]) -> list[list[Any]]:
    groups: dict[Any, list[Any]] = {}
    for e in events:
        groups.setdefault(key(e), []).append(e)
    return [sorted(g, key=lambda e: (e.where.file, e.where.line)) for g in groups.values()]


def _iteration_text(events: list[Any]) -> str:
    exact = sorted({e.where.iteration for e in events if e.where.iteration is not None})
    if exact:
        return f" in iteration {exact[0]}" if len(exact) == 1 else f" in iterations {exact[0]}-{exact[-1]}"
    after = [e.where.after_iteration for e in events if e.where.after_iteration is not None]
    return f" after iteration {max(after)}" if after else " before the first logged iteration"


def _timeouts(group: list[CommEvent], other_failures: bool) -> Diagnosis:
    first = group[0]
    ranks = _ranks(group)
    dim = group_dimension(first.group)
    where_group = (f" in {first.group} (the {dim[0]} dimension, sized by {dim[1]})" if dim else
                   f" in process group {first.group}" if first.group else
                   f" in {first.pg}" if first.pg else "")
    if not first.group:
        where_group += (" (this PyTorch prints no process-group name: torch 2.6+ does, as 'PG GUID n(NAME)')"
                        if not first.pg or "(" not in first.pg else "")
    timeout = first.timeout_ms
    ran = max((e.elapsed_ms for e in group if e.elapsed_ms is not None), default=None)
    seqs = sorted({e.seq for e in group if e.seq is not None})
    seq = f" (SeqNum {seqs[0]})" if len(seqs) == 1 else f" (SeqNum {seqs[0]}-{seqs[-1]})" if seqs else ""
    collectives = list(dict.fromkeys(e.collective for e in group if e.collective))
    if len(collectives) > 1:  # e.g. the SEND and the RECV of one pipeline exchange
        what = " / ".join(f"{c} ({_rank_list(_ranks(e for e in group if e.collective == c))})" for c in collectives)
    else:
        what = collectives[0] if collectives else "a collective"
    msg = (f"communication: NCCL watchdog timeout on {_rank_list(ranks)}{_iteration_text(group)}: "
           f"{what}{seq}{where_group} ran "
           f"{ran if ran is not None else '?'} ms against a timeout of {timeout if timeout is not None else '?'} ms"
           + (f" ({timeout / 60000:g} min)" if timeout else "")
           + ". A timeout is where the job stopped, not necessarily why: the ranks waited for one that did not enter "
             "the collective (it failed, hung or was slower)")
    if other_failures:
        msg += "; other failures in these logs (listed with this one) are the first place to look"
    sugg = [FLIGHT_RECORDER, NCCL_DEBUG, RAISE_TIMEOUT]
    details = {"type": "watchdog-timeout", "collective": first.collective, "collectives": collectives,
               "group": first.group,
               "dimension": dim[0] if dim else None, "setting": dim[1] if dim else None, "process_group": first.pg,
               "timeout_ms": timeout, "elapsed_ms": ran, "seq": seqs, "events": sum(e.count for e in group)}
    return Diagnosis("communication", first.where, msg, [], sugg, None, None, details=details, ranks=ranks)


def _nccl_errors(group: list[CommEvent], other_failures: bool) -> Diagnosis:
    first = group[0]
    ranks = _ranks(group)
    err = first.nccl_error or "?"
    meaning = next((v for k, v in NCCL_MEANING.items() if err.startswith(k)), None)
    dim = group_dimension(first.group)
    msg = (f"communication: NCCL error on {_rank_list(ranks)}{_iteration_text(group)}: {err}"
           + (f" (NCCL error {first.nccl_code})" if first.nccl_code is not None else "")
           + (f" in {first.group} (the {dim[0]} dimension)" if dim else "")
           + (f". {meaning}" if meaning else ""))
    if err.startswith("remote process exited") or other_failures:
        msg += ". A rank that died first makes its peers fail this way: look at the other failures in these logs"
    return Diagnosis("communication", first.where, msg, [], [NCCL_DEBUG], None, None,
                     details={"type": "nccl-error", "nccl_error": err, "nccl_code": first.nccl_code,
                              "group": first.group, "dimension": dim[0] if dim else None,
                              "events": sum(e.count for e in group)}, ranks=ranks)


def _ib_errors(group: list[CommEvent]) -> Diagnosis:
    first = group[0]
    ranks = _ranks(group)
    status = first.ib_status
    name = first.ib_status_name or (IB_STATUS[status] if status is not None and 0 <= status < len(IB_STATUS) else None)
    peers = sorted({e.peer for e in group if e.peer})
    msg = (f"communication: InfiniBand completion error on {_rank_list(ranks)}{_iteration_text(group)}: status "
           f"{status}{f' ({name})' if name else ''} from peer{'s' if len(peers) > 1 else ''} {', '.join(peers[:6]) or '?'}"
           ". The network transport failed under NCCL: the job's configuration is not the cause")
    hints = [h for e in group for h in e.hints]
    sugg: list[Suggestion] = []
    if status in IB_HINTS:
        sugg.append(Suggestion(IB_HINTS[status], "none"))
    elif hints:
        sugg.append(Suggestion("NCCL's hint in the log: " + "; ".join(dict.fromkeys(hints)), "none"))
    sugg.append(Suggestion("report the node pair (peer address, hca) to the cluster's operators; exclude the node if "
                           "it repeats", "none"))
    sugg.append(NCCL_DEBUG)
    return Diagnosis("communication", first.where, msg, [], sugg, None, None,
                     details={"type": "ib-error", "ib_status": status, "ib_status_name": name, "peers": peers,
                              "hints": list(dict.fromkeys(hints)), "events": sum(e.count for e in group)},
                     ranks=ranks)


CUDA_MEANING = {
    "memory-access": "a kernel read or wrote memory it does not own (an out-of-range index, a wrong shape or stride, "
                     "a race; in a library kernel: an unsupported configuration)",
    "device-assert": "a kernel's own check failed (most often an index out of range: token ids at or above the "
                     "vocabulary size, labels outside the classes, an embedding or gather index)",
    "library-status": "a CUDA library call (cuBLAS / cuDNN) refused or failed the operation (an unsupported shape, "
                      "dtype or layout for that library version, or an earlier kernel error surfacing here)",
    "other": "a CUDA call failed",
}


def _cuda(group: list[CudaErrorEvent], other_failures: bool) -> Diagnosis:
    first = group[0]
    ranks = _ranks(group)
    via = {"triton": " (raised through Triton)", "transformer-engine": " (raised by Transformer Engine)",
           "cublas": " (cuBLAS)", "cudnn": " (cuDNN)"}.get(first.via, "")
    assertion = next((e.assertion for e in group if e.assertion), None)
    call = next((e.call for e in group if e.call), None)
    msg = (f"CUDA error on {_rank_list(ranks)}{_iteration_text(group)}: {first.error}{via}: "
           f"{CUDA_MEANING[first.category]}. Not an out-of-memory; no memory setting applies")
    if assertion:
        msg += f". The failed check: {assertion}"
    if call:
        msg += f". Call: {call[:160]}"
    if other_failures:
        msg += "; other failures in these logs may be the cause (a CUDA error also surfaces in later calls)"
    sugg = [LAUNCH_BLOCKING]
    if first.category == "device-assert":
        sugg.append(DSA)
    return Diagnosis("cuda-error", first.where, msg, [], sugg, None, None,
                     details={"error": first.error, "category": first.category, "via": first.via,
                              "exception": first.exception, "assertion": assertion, "call": call,
                              "events": sum(e.count for e in group)}, ranks=ranks)


def _fatal(ev: FatalEvent) -> Diagnosis:
    w = ev.where
    where = f" at {ev.location}" if ev.location else ""
    if ev.type == "child-failed":
        what = f"torchrun reported a failed child: {ev.exception}"
        if ev.signal == "SIGKILL" or ev.exitcode == -9:
            what += (". SIGKILL comes from outside the process: the kernel's out-of-memory killer (host memory), the "
                     "scheduler (a time or memory limit) or a user")
    elif ev.type == "terminate":
        what = f"the process aborted: {ev.exception}"
    else:
        what = f"the job ended with {ev.exception}{where}"
    ranks = sorted(ev.ranks)
    who = _rank_list(ranks) if len(ranks) > 1 else _rank_text(w)
    msg = (f"unrecognised failure: {who}{_when(w)}: {what}. No known pattern explains it"
           + (f" ({ev.count} processes ended with the same error)" if ev.count > 1 else ""))
    return Diagnosis("unrecognised-failure", w, msg, [], [], None, None,
                     details={"type": ev.type, "exception": ev.exception, "location": ev.location,
                              "exitcode": ev.exitcode, "signal": ev.signal, "host": ev.host, "events": ev.count},
                     ranks=ranks)


def classify_failures(scan: ScanResult, oom_or_known: bool) -> list[Diagnosis]:
    """Diagnoses of the communication failures, CUDA errors and (only when nothing else was found) the fatal
    ends of ``scan``. ``oom_or_known``: an OOM or known error was diagnosed (other failures may follow from it)."""
    out: list[Diagnosis] = []
    cuda_or_earlier = oom_or_known or bool(scan.cuda)
    comm = scan.comm
    for g in _group_by([e for e in comm if e.type == "watchdog-timeout"],
                       lambda e: (e.group or e.pg, e.timeout_ms)):
        out.append(_timeouts(g, cuda_or_earlier))
    for g in _group_by([e for e in comm if e.type == "nccl-error"], lambda e: e.nccl_error):
        out.append(_nccl_errors(g, cuda_or_earlier or any(e.type == "ib-error" for e in comm)))
    for g in _group_by([e for e in comm if e.type == "ib-error"], lambda e: e.ib_status):
        out.append(_ib_errors(g))
    for g in _group_by(scan.cuda, lambda e: (e.category, e.error)):
        out.append(_cuda(g, oom_or_known))
    if not out and not oom_or_known:
        out += [_fatal(f) for f in scan.fatal]
    return out
