"""Failures that are not OOMs: communication (NCCL watchdog timeouts, NCCL errors, InfiniBand completion
errors), CUDA errors (illegal memory access, device-side asserts, cuBLAS/cuDNN status errors, raised by torch,
Triton or Transformer Engine), and any other fatal end (a Python traceback, ``terminate called``, a
``torch.distributed.elastic`` child failure). The formats and their sources are in
:mod:`mbmem_lint.diagnose.formats`; this module turns matched lines into events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mbmem_lint.diagnose import formats as F
from mbmem_lint.records import dataclass, field

if TYPE_CHECKING:
    from mbmem_lint.diagnose.scan import Where

MAX_TEXT = 600

# Megatron Core's process-group names (``group_desc`` of ``create_group`` in megatron/core/parallel_state.py,
# megatron-core 0.19.2: lines 944-1673), which PyTorch 2.6+ prints in its log prefix, and the layout
# dimension each group spans (the config field that sizes it).
GROUP_DIMENSIONS: dict[str, tuple[str, str]] = {
    "TENSOR_MODEL_PARALLEL_GROUP": ("tensor parallel", "model.tensor_model_parallel_size"),
    "PIPELINE_MODEL_PARALLEL_GROUP": ("pipeline parallel", "model.pipeline_model_parallel_size"),
    "EMBEDDING_GROUP": ("pipeline parallel (first and last stage: tied embeddings)",
                        "model.pipeline_model_parallel_size"),
    "POSITION_EMBEDDING_GROUP": ("pipeline parallel (first stage: position embeddings)",
                                 "model.pipeline_model_parallel_size"),
    "CONTEXT_PARALLEL_GROUP": ("context parallel", "model.context_parallel_size"),
    "DATA_PARALLEL_GROUP": ("data parallel", "data-parallel size (world / TP·PP·CP)"),
    "DATA_PARALLEL_GROUP_WITH_CP": ("data parallel × context parallel", "data-parallel size × model.context_parallel_size"),
    "DATA_PARALLEL_GROUP_WITH_CP_AG": ("data parallel × context parallel", "data-parallel size × model.context_parallel_size"),
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": ("data parallel (one distributed-optimizer instance)",
                                                  "ddp.num_distributed_optimizer_instances"),
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": ("data parallel (one distributed-optimizer instance)",
                                                   "ddp.num_distributed_optimizer_instances"),
    "MODEL_PARALLEL_GROUP": ("model parallel (tensor × pipeline)", "TP·PP"),
    "TENSOR_AND_DATA_PARALLEL_GROUP": ("tensor × data parallel", "TP·DP"),
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": ("tensor × data × context parallel", "TP·DP·CP"),
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": ("tensor × context parallel", "TP·CP"),
    "EXPERT_MODEL_PARALLEL_GROUP": ("expert parallel", "model.expert_model_parallel_size"),
    "EXPERT_TENSOR_PARALLEL_GROUP": ("expert tensor parallel", "model.expert_tensor_parallel_size"),
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": ("expert tensor × expert parallel", "ETP·EP"),
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": ("expert tensor × expert × pipeline parallel", "ETP·EP·PP"),
    "EXPERT_DATA_PARALLEL_GROUP": ("expert data parallel", "world / (ETP·EP·PP)"),
    "default_pg": ("the whole job (the default process group)", "world size"),
}


def group_dimension(group: str | None) -> tuple[str, str] | None:
    """(dimension, the setting that sizes it) of a Megatron process group, None when not one of them."""
    if not group:
        return None
    if group in GROUP_DIMENSIONS:
        return GROUP_DIMENSIONS[group]
    for suffix in ("_GLOO", "_AG"):
        if group.endswith(suffix) and group[: -len(suffix)] in GROUP_DIMENSIONS:
            return GROUP_DIMENSIONS[group[: -len(suffix)]]
    if group.startswith("HIERARCHICAL_"):  # HIERARCHICAL_{group_desc}_L{level} (parallel_state.py:420)
        inner = group[len("HIERARCHICAL_"):].rsplit("_L", 1)[0]
        return group_dimension(inner)
    return None


@dataclass
class CommEvent:
    """A communication failure: a watchdog timeout, an NCCL error or an InfiniBand completion error."""

    where: Where
    type: str  # "watchdog-timeout" | "nccl-error" | "ib-error"
    text: str
    collective: str | None = None  # OpType of the timed-out work
    seq: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    elapsed_ms: int | None = None
    group: str | None = None  # the process group's description (PyTorch 2.6+ prints it)
    pg: str | None = None  # the "[PG ...]" prefix as printed
    nccl_error: str | None = None
    nccl_code: int | None = None
    peer: str | None = None
    ib_status: int | None = None
    ib_status_name: str | None = None
    hints: list[str] = field(default_factory=list)  # NCCL's own HINT lines after an IB error
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        dim = group_dimension(self.group)
        return {"kind": "communication", **self.where.json_fields(), "type": self.type,
                "collective": self.collective, "seq": self.seq, "numel_in": self.numel_in,
                "numel_out": self.numel_out, "timeout_ms": self.timeout_ms, "elapsed_ms": self.elapsed_ms,
                "group": self.group, "dimension": dim[0] if dim else None, "process_group": self.pg,
                "nccl_error": self.nccl_error, "nccl_code": self.nccl_code, "peer": self.peer,
                "ib_status": self.ib_status, "ib_status_name": self.ib_status_name, "hints": list(self.hints),
                "count": self.count, "message": self.text}


def parse_comm(text: str) -> dict[str, Any] | None:
    """The communication failure a line shows (the event's fields), None when it shows none."""
    if "Watchdog caught" in text:
        m = F.WATCHDOG.search(text)
        if m:
            pg = m.group("pg")
            if pg is None:  # "[PG ID 2 PG GUID 5(NAME) Rank 3] Process group watchdog thread terminated with ..."
                prefix = F.PG_PREFIX.search(text, 0, m.start())
                pg = prefix.group(1) if prefix else None
            desc = F.PG_DESC.search(pg) if pg else None
            return {"type": "watchdog-timeout", "start": m.start(), "collective": m.group("op"),
                    "seq": F.bounded_int(m.group("seq")), "numel_in": F.bounded_int(m.group("numel_in")),
                    "numel_out": F.bounded_int(m.group("numel_out")), "timeout_ms": F.bounded_int(m.group("timeout")),
                    "elapsed_ms": F.bounded_int(m.group("ran")), "pg": pg.strip() if pg else None,
                    "group": desc.group(1) if desc else None, "reported_rank": F.bounded_int(m.group("rank"))}
    if "NCCL error in: " in text:
        m = F.NCCL_ERROR_IN.search(text)
        if m:
            pg = F.PG_PREFIX.search(text)
            desc = F.PG_DESC.search(pg.group(1)) if pg else None
            return {"type": "nccl-error", "start": m.start(), "nccl_error": m.group("error").strip(),
                    "pg": pg.group(1).strip() if pg else None, "group": desc.group(1) if desc else None}
    if "NCCL Error " in text:
        m = F.NCCL_ERROR_CODE.search(text)
        if m:
            return {"type": "nccl-error", "start": m.start(), "nccl_error": m.group("error").strip(),
                    "nccl_code": F.bounded_int(m.group("code"))}
    if "Got completion from peer" in text:
        m = F.IB_COMPLETION.search(text)
        if m:
            status = m.group("err") or m.group("status")
            name = m.group("status_name")
            return {"type": "ib-error", "start": m.start(), "peer": m.group("peer"),
                    "ib_status": F.bounded_int(status), "ib_status_name": name.strip() if name else None}
    return None


@dataclass
class CudaErrorEvent:
    """A CUDA error that is not an out-of-memory: where the kernel failed is unknown until it is re-run."""

    where: Where
    error: str  # cudaGetErrorString / the library status, as printed
    via: str  # "cuda" | "triton" | "cublas" | "cudnn" | "transformer-engine"
    text: str
    exception: str | None = None
    call: str | None = None  # the library call (cuBLAS "when calling `...`")
    assertion: str | None = None  # a device-side assert's expression and place
    count: int = 1

    @property
    def category(self) -> str:
        e = self.error.lower()
        if "device-side assert" in e:
            return "device-assert"
        if "illegal memory access" in e or "misaligned address" in e or "illegal instruction" in e \
                or "unspecified launch failure" in e:
            return "memory-access"
        if "status" in e or self.via in ("cublas", "cudnn"):
            return "library-status"
        return "other"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "cuda-error", **self.where.json_fields(), "error": self.error, "via": self.via,
                "category": self.category, "exception": self.exception, "call": self.call,
                "assertion": self.assertion, "count": self.count, "message": self.text}


_VIA = {"Triton Error [CUDA]": "triton", "CUDA error": "cuda", "CUDA Error": "transformer-engine",
        "cuBLAS Error": "transformer-engine", "cuDNN Error": "transformer-engine", "cuDNN error": "cudnn"}


def parse_cuda_error(text: str) -> dict[str, Any] | None:
    """The CUDA error a line shows (not an OOM: those are read first), None when it shows none."""
    if "rror" not in text:
        return None
    if "CUDA error" not in text and "CUDA Error" not in text and "Triton Error" not in text \
            and "cuBLAS Error" not in text and "cuDNN" not in text:
        return None
    m = F.CUDA_ERROR.search(text)
    if m is None:
        return None
    error = m.group("error").strip().rstrip(".")
    if not error or "out of memory" in error.lower():
        return None
    via = _VIA.get(m.group("via"), "cuda")
    if via == "cuda" and error.startswith("CUBLAS_STATUS"):
        via = "cublas"
    if m.group("via") == "cuDNN Error":
        error = "cuDNN " + error
    elif m.group("via") == "cuBLAS Error":
        error = "cuBLAS " + error
    exc = F.CUDA_EXCEPTION.search(text)
    return {"start": m.start(), "error": error[:200], "via": via, "call": m.group("call"),
            "exception": exc.group(1) if exc and exc.start() < m.start() else None}


@dataclass
class FatalEvent:
    """A fatal end no other pattern explains: the last exception of a traceback, a ``terminate called``,
    or a child failure that ``torch.distributed.elastic`` reported."""

    where: Where
    type: str  # "traceback" | "terminate" | "child-failed"
    exception: str  # the last exception line ("ValueError: ..."), or what the launcher says
    text: str
    location: str | None = None  # the innermost frame: 'File "x.py", line 12, in f'
    exitcode: int | None = None
    signal: str | None = None
    host: str | None = None
    count: int = 1
    ranks: list[int] = field(default_factory=list)  # every rank that ended with this same error

    def to_json(self) -> dict[str, Any]:
        return {"kind": "fatal", **self.where.json_fields(), "type": self.type, "exception": self.exception,
                "location": self.location, "exitcode": self.exitcode, "signal": self.signal, "host": self.host,
                "count": self.count, "message": self.text}


class TracebackState:
    """One rank's Python traceback as its lines arrive (ranks interleave: one state per rank and file)."""

    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: str | None = None  # the innermost frame so far


def exception_line(text: str) -> tuple[str, str] | None:
    """(type, whole line) of a Python exception line, None when ``text`` is not one."""
    if not text or text[0].isspace():
        return None
    m = F.EXCEPTION_LINE.match(text)
    if m is None:
        return None
    return m.group("type"), text.strip()[:MAX_TEXT]


@dataclass
class ElasticState:
    """The root-cause block of a ``ChildFailedError`` being read."""

    line: int
    lineno: int
    fields: dict[str, str] = field(default_factory=dict)
