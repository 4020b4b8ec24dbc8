"""Log lines → events: PyTorch OOM reports, Megatron memory reports (with the throughput line before
them), known failure messages, communication failures, CUDA errors and other fatal ends; plus what the
log says about the run (parallel sizes, allocator setting, iterations).

Memory stays bounded whatever the log's size: repeated messages fold into one event per rank and
message, and each event list keeps at most :data:`MAX_EVENTS` entries (the rest are counted).

The result does not depend on the order the logs are given in: iterations are followed per file, a line
without a rank prefix is keyed by its file, and what one event hides of another (an NCCL echo of an
allocator OOM, a traceback whose exception another pattern read) is decided once all logs are read.
Several events on one line (reports glued onto an iteration line, as log collectors join lines) are
all read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mbmem_lint.diagnose import formats as F
from mbmem_lint.diagnose.failures import (
    CommEvent,
    CudaErrorEvent,
    ElasticState,
    FatalEvent,
    TracebackState,
    exception_line,
    parse_comm,
    parse_cuda_error,
)
from mbmem_lint.diagnose.known_errors import KnownError, match_known_error
from mbmem_lint.diagnose.logread import LogLine, LogReader
from mbmem_lint.records import dataclass, field

MAX_EVENTS = 2000  # per kind; later ones are counted in ``ScanResult.dropped``
MAX_TEXT = 600  # characters of a matched message kept in an event
GLUED_RANK_REACH = 120  # a "[rankN]: " this close before a message glued onto another line is its rank
_KIND_ORDER = {"OomEvent": 0, "MemoryReport": 1, "KnownErrorEvent": 2, "CommEvent": 3, "CudaErrorEvent": 4,
               "FatalEvent": 5}


@dataclass
class Throughput:
    """The last iteration line of the training loop: iteration, time per iteration, TFLOP/s per GPU."""

    iteration: int | None
    train_iters: int | None = None
    elapsed_ms: float | None = None
    tflops_per_gpu: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "train_iters": self.train_iters, "elapsed_ms": self.elapsed_ms,
                "tflops_per_gpu": self.tflops_per_gpu}


@dataclass
class Where:
    """Where an event was found: file, line, rank (as the line's prefixes or text give it) and iteration."""

    file: str
    line: int
    rank: int | None = None
    task: int | None = None
    local_rank: int | None = None
    iteration: int | None = None  # the iteration it happened in, when the log says so exactly
    after_iteration: int | None = None  # the last iteration the log reported complete before it

    def json_fields(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "rank": self.rank, "slurm_task": self.task,
                "local_rank": self.local_rank, "iteration": self.iteration, "after_iteration": self.after_iteration}


@dataclass
class OomEvent:
    """A CUDA out-of-memory report, with the allocator's figures when the message carries them."""

    where: Where
    format: str  # "torch>=2.1" | "torch<=2.0" | "memory-fraction" | "outside-allocator"
    text: str
    exception: str | None = None
    device: int | None = None
    requested_bytes: int | None = None
    capacity_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None  # by PyTorch (tensors, private pools included)
    reserved_unallocated_bytes: int | None = None  # held by the allocator, not by tensors
    private_pool_bytes: int | None = None
    allowed_bytes: int | None = None  # set_per_process_memory_fraction
    process_bytes: int | None = None  # this process's memory as NVML counts it (context, NCCL, ...)
    other_processes_bytes: int | None = None  # "Process N has X memory in use" lines that are not this process
    count: int = 1  # identical messages folded into this one (tracebacks printed twice, ...)
    truncated: bool = False  # the message is cut off before its last clause: the figures are those it has
    processes: list[dict[str, Any]] = field(default_factory=list)  # every NVML line: {"pid", "bytes", "self"}
    exceeds_limit: bool = False  # "Tried to allocate more than 1EB memory."

    @property
    def has_figures(self) -> bool:
        return self.requested_bytes is not None and self.allocated_bytes is not None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "oom", **self.where.json_fields(), "format": self.format, "exception": self.exception,
                "device": self.device, "requested_bytes": self.requested_bytes, "capacity_bytes": self.capacity_bytes,
                "free_bytes": self.free_bytes, "allocated_bytes": self.allocated_bytes,
                "reserved_unallocated_bytes": self.reserved_unallocated_bytes,
                "private_pool_bytes": self.private_pool_bytes, "allowed_bytes": self.allowed_bytes,
                "process_bytes": self.process_bytes, "other_processes_bytes": self.other_processes_bytes,
                "processes": [dict(p) for p in self.processes], "truncated": self.truncated,
                "count": self.count, "message": self.text}


@dataclass
class MemoryReport:
    """A ``report_memory`` line (Megatron-LM MiB or Bridge decimal GB), converted to bytes."""

    where: Where
    source: str  # "megatron-core" | "megatron-bridge"
    label: str
    allocated_bytes: int | None = None
    max_allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    max_reserved_bytes: int | None = None
    alloc_retries: int | None = None  # cudaMalloc failures that flushed the cache and retried (Bridge)
    device_used_bytes: int | None = None
    throughput: Throughput | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "memory-report", **self.where.json_fields(), "source": self.source, "label": self.label,
                "allocated_bytes": self.allocated_bytes, "max_allocated_bytes": self.max_allocated_bytes,
                "reserved_bytes": self.reserved_bytes, "max_reserved_bytes": self.max_reserved_bytes,
                "alloc_retries": self.alloc_retries, "device_used_bytes": self.device_used_bytes,
                "throughput": self.throughput.to_json() if self.throughput else None}


@dataclass
class KnownErrorEvent:
    """A failure message that a rule of the catalog maps to."""

    where: Where
    error: KnownError
    text: str
    count: int = 1
    values: dict[str, int] = field(default_factory=dict)  # the numbers the message holds

    def to_json(self) -> dict[str, Any]:
        return {"kind": "known-error", **self.where.json_fields(), "codes": list(self.error.codes),
                "source": self.error.ref, "source_release": self.error.tag, "values": dict(self.values),
                "count": self.count, "message": self.text}


Event = OomEvent | MemoryReport | KnownErrorEvent | CommEvent | CudaErrorEvent | FatalEvent
Who = tuple[str | None, int | None, int | None, int | None]  # (file when no rank prefix, rank, task, local rank)


@dataclass
class ScanResult:
    """Everything found in the logs, in bounded memory."""

    ooms: list[OomEvent] = field(default_factory=list)
    reports: list[MemoryReport] = field(default_factory=list)
    known: list[KnownErrorEvent] = field(default_factory=list)
    comm: list[CommEvent] = field(default_factory=list)
    cuda: list[CudaErrorEvent] = field(default_factory=list)
    fatal: list[FatalEvent] = field(default_factory=list)  # fatal ends no other event explains
    secondary_fatal: int = 0  # fatal ends of ranks whose failure another event explains
    dropped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    parallel: dict[str, int] = field(default_factory=dict)  # sizes the log printed (args / config dump)
    alloc_conf: str | None = None  # an allocator setting the log printed
    first_iteration: int | None = None
    last_throughput: Throughput | None = None
    iteration_lines: int = 0
    lines: int = 0
    files: list[str] = field(default_factory=list)

    def events(self) -> list[Event]:
        out: list[Event] = [*self.ooms, *self.reports, *self.known, *self.comm, *self.cuda, *self.fatal]
        return sorted(out, key=lambda e: (e.where.file, e.where.line, _KIND_ORDER[type(e).__name__]))

    @property
    def failed(self) -> bool:
        """A failure was found (an OOM, a known error, a communication or CUDA error, a fatal end)."""
        return bool(self.ooms or self.known or self.comm or self.cuda or self.fatal)

    def oom_ranks(self) -> set[int]:
        """The ranks that ran out of memory (where the log says which)."""
        return {o.where.rank for o in self.ooms if o.where.rank is not None}

    def peak_reports(self) -> dict[int, MemoryReport]:
        """Per rank, the memory report with the highest ``max allocated`` (the run's peak so far)."""
        best: dict[int, MemoryReport] = {}
        for r in self.reports:
            if r.where.rank is None or r.max_allocated_bytes is None:
                continue
            prev = best.get(r.where.rank)
            if prev is None or (prev.max_allocated_bytes or 0) < r.max_allocated_bytes:
                best[r.where.rank] = r
        return best


def _size(m: Any, i: int) -> int | None:
    num = m.group(i)
    return None if num is None else F.size_bytes(num, m.group(i + 1))


def _oom_figures(segment: str, head: Any) -> tuple[str, dict[str, Any]]:
    """(format, figures) of the allocator message starting at ``head`` (a match in ``segment``), read
    clause by clause: a message cut off part-way gives the figures before the cut."""
    figures: dict[str, Any] = {"requested_bytes": _size(head, 1)}
    if head.group(3):  # "more than 1EB"
        figures["exceeds_limit"] = True
        return "torch>=2.1", figures
    rest = segment[head.end():]
    m = F.OOM_NEW_CAPACITY.match(rest)
    if m:
        figures["device"] = F.bounded_int(m.group(1))
        figures["capacity_bytes"] = _size(m, 2)
        done = False
        for key, pat in (("free_bytes", F.OOM_NEW_FREE), ("allowed_bytes", F.OOM_NEW_ALLOWED),
                         ("allocated_bytes", F.OOM_NEW_ALLOCATED), ("private_pool_bytes", F.OOM_NEW_PRIVATE),
                         ("reserved_unallocated_bytes", F.OOM_NEW_UNALLOCATED)):
            c = pat.search(rest)
            if c:
                figures[key] = _size(c, 1)
                done = key == "reserved_unallocated_bytes"
        procs = []
        for p in F.PROCESS.finditer(rest):
            procs.append({"pid": F.bounded_int(p.group(2)), "bytes": F.size_bytes(p.group(3), p.group(4)),
                          "self": p.group(2) is None})
        if procs:
            figures.update(_split_processes(procs, figures.get("allocated_bytes"),
                                            figures.get("reserved_unallocated_bytes")))
        figures["truncated"] = not done
        return "torch>=2.1", figures
    m = F.OOM_OLD_CAPACITY.match(rest)
    if m:
        figures["device"] = F.bounded_int(m.group(1))
        figures["capacity_bytes"] = _size(m, 2)
        allocated = reserved = None
        c = F.OOM_OLD_ALLOCATED.search(rest)
        if c:
            allocated = figures["allocated_bytes"] = _size(c, 1)
        c = F.OOM_OLD_FREE.search(rest)
        if c:
            figures["free_bytes"] = _size(c, 1)
        c = F.OOM_OLD_ALLOWED.search(rest)
        if c:
            figures["allowed_bytes"] = _size(c, 1)
        c = F.OOM_OLD_RESERVED.search(rest)
        if c:
            reserved = _size(c, 1)
        if reserved is not None and allocated is not None:  # "reserved in total" includes the allocated memory
            figures["reserved_unallocated_bytes"] = max(0, reserved - allocated)
        figures["truncated"] = c is None
        return "torch<=2.0", figures
    # Cut off right after the request: the release cannot be told from what is left.
    figures["truncated"] = True
    return "allocator", figures


def parse_ooms(text: str) -> list[tuple[int, str, dict[str, Any]]]:
    """Every OOM message in ``text`` as (offset, format, figures); several can be glued onto one line."""
    if "out of memory" not in text and "ALLOC_FAILED" not in text:
        return []
    heads = list(F.OOM_HEAD.finditer(text))
    out: list[tuple[int, str, dict[str, Any]]] = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        fmt, figures = _oom_figures(text[:end], head)
        out.append((head.start(), fmt, figures))
    if heads:
        return out
    m = F.OOM_FRACTION.search(text)
    if m:
        return [(m.start(), "memory-fraction", {"requested_bytes": _size(m, 1)})]
    m = F.OOM_OTHER.search(text)
    if m:
        return [(m.start(), "outside-allocator", {})]
    return []


def parse_oom(text: str) -> tuple[str, dict[str, Any]] | None:
    """(format, figures) of the first OOM message in ``text``, None when the line holds none."""
    found = parse_ooms(text)
    return (found[0][1], found[0][2]) if found else None


def _scaled(text: str | None, unit: float) -> int | None:
    """A printed figure in bytes (``unit``: bytes per printed unit), None when it is not a finite number."""
    v = F.finite_float(text)
    if v is None:
        return None
    n = v * unit
    return int(round(n)) if 0 <= n <= F.MAX_BYTES else None


def _parse_report_segment(text: str) -> tuple[int, str, str, dict[str, Any]] | None:
    m = F.MCORE_REPORT.search(text)
    if m:
        rank = F.bounded_int(m.group(1))
        if rank is None:
            return None
        groups = m.groups()

        def b(i: int) -> int | None:
            return _scaled(groups[i - 1], 1024.0 * 1024.0)

        return rank, "megatron-core", m.group(2).strip(), {
            "allocated_bytes": b(3), "max_allocated_bytes": b(4), "reserved_bytes": b(5),
            "max_reserved_bytes": b(6), "device_used_bytes": b(7)}
    m = F.BRIDGE_REPORT.search(text)
    if m:
        rank = F.bounded_int(m.group(1))
        if rank is None:
            return None
        pairs = {k: v.strip() for k, v in F.BRIDGE_PAIR.findall(m.group(3))}

        def gb(key: str) -> int | None:
            return _scaled(pairs.get(key), 1e9)

        retries = F.finite_float(pairs.get("mem-alloc-retires"))
        return rank, "megatron-bridge", m.group(2).strip(), {
            "allocated_bytes": gb("mem-allocated-gigabytes"), "max_allocated_bytes": gb("mem-max-allocated-gigabytes"),
            "reserved_bytes": gb("mem-reserved-gigabytes"), "max_reserved_bytes": gb("mem-max-reserved-gigabytes"),
            "alloc_retries": int(retries) if retries is not None and 0 <= retries < 2**63 else None}
    return None


def parse_reports(text: str) -> list[tuple[int, str, str, dict[str, Any]]]:
    """Every ``report_memory`` line in ``text`` (several can be glued together) as (rank, source, label,
    figures)."""
    if "memory (" not in text or "[Rank " not in text:
        return []
    starts = [m.start() for m in F.REPORT_START.finditer(text)]
    out = []
    for i, start in enumerate(starts):
        rep = _parse_report_segment(text[start: starts[i + 1] if i + 1 < len(starts) else len(text)])
        if rep is not None:
            out.append(rep)
    return out


def parse_report(text: str) -> tuple[int, str, str, dict[str, Any]] | None:
    """(rank, source, label, figures) of the first ``report_memory`` in ``text``, None when there is none."""
    found = parse_reports(text)
    return found[0] if found else None


class _FileState:
    """What a log says about iterations, followed per file (so that the order of the files does not matter)."""

    __slots__ = ("first", "last", "prev_iteration", "step", "completed")

    def __init__(self) -> None:
        self.first: int | None = None
        self.last: Throughput | None = None
        self.prev_iteration: int | None = None
        self.step: int | None = None  # iterations between consecutive iteration lines
        self.completed: int | None = None  # last iteration known complete (iteration line or report)


def _who(line: LogLine, rank: int | None = None) -> Who:
    rank = rank if rank is not None else line.rank
    if rank is None and line.task is None and line.local_rank is None:
        return (line.path, None, None, None)  # no prefix: the file stands for the process (one log per rank)
    return (None, rank, line.task, line.local_rank)


class Scanner:
    """Feed it lines (of one or more logs); read :attr:`result` after :meth:`finish`."""

    def __init__(self) -> None:
        self.result = ScanResult()
        self._files: dict[str, _FileState] = {}
        self._path: str | None = None
        self._state = _FileState()
        self._oom_index: dict[tuple[Any, ...], OomEvent] = {}
        self._known_index: dict[tuple[Any, ...], KnownErrorEvent] = {}
        self._comm_index: dict[tuple[Any, ...], CommEvent] = {}
        self._last_timeout: dict[Who, CommEvent] = {}
        self._cuda_index: dict[tuple[Any, ...], CudaErrorEvent] = {}
        self._fatal_index: dict[tuple[Any, ...], FatalEvent] = {}
        self._tracebacks: dict[Who, TracebackState] = {}  # open tracebacks, by process
        self._terminating: dict[Who, FatalEvent] = {}  # "terminate called" waiting for its "what():" line
        self._elastic: dict[str, ElasticState] = {}  # ChildFailedError blocks being read, by file
        self._fatal_candidates: list[tuple[Who, FatalEvent]] = []
        self._max_local = -1
        self._tasks_with_local = False

    # ------------------------------------------------------------------ helpers
    def _where(self, line: LogLine, rank: int | None = None, iteration: int | None = None) -> Where:
        st = self._state
        after = st.completed
        exact = iteration
        if exact is None and after is not None and st.step == 1:
            exact = after + 1
        return Where(line.path, line.lineno, rank if rank is not None else line.rank, line.task, line.local_rank,
                     exact, after)

    def _keep(self, kind: str, items: list[Any], item: Any) -> bool:
        if len(items) >= MAX_EVENTS:
            self.result.dropped[kind] = self.result.dropped.get(kind, 0) + 1
            return False
        items.append(item)
        return True

    # ------------------------------------------------------------------ lines
    def feed(self, line: LogLine) -> None:
        text = line.text
        r = self.result
        r.lines += 1
        if line.path is not self._path:
            self._path = line.path
            self._state = self._files.setdefault(line.path, _FileState())
        if line.local_rank is not None:
            self._max_local = max(self._max_local, line.local_rank)
            self._tasks_with_local = self._tasks_with_local or line.task is not None
        if "iteration" in text:
            m = F.ITERATION.search(text)
            if m:
                iteration, train_iters = F.bounded_int(m.group(1)), F.bounded_int(m.group(2))
                if iteration is not None:
                    self._iteration_line(text, iteration, train_iters)
        if "Step Time" in text:
            m = F.STEP_TIME.search(text)
            last = self._state.last
            if m and last is not None:
                last.elapsed_ms = last.elapsed_ms or _ms(F.finite_float(m.group(1)))
                last.tflops_per_gpu = F.finite_float(m.group(2))
        recognised = False
        for start, fmt, figures in parse_ooms(text):
            self._oom(line, start, fmt, figures)
            recognised = True
        for rep in parse_reports(text):
            self._report(line, *rep)
        known = match_known_error(text)
        if known is not None:
            self._known(line, known)
            recognised = True
        comm = parse_comm(text)
        if comm is not None:
            self._comm(line, comm)
            recognised = True
        elif "NCCL INFO HINT" in text:
            self._ib_hint(line)
        elif self._last_timeout and "[PG " in text:
            self._pg_line(line)
        if not recognised:
            cuda = parse_cuda_error(text)
            if cuda is not None:
                self._cuda(line, cuda)
                recognised = True
            elif "Assertion `" in text:
                m = F.DEVICE_ASSERT.search(text)
                if m:
                    self._cuda(line, {"start": m.start(), "error": "device-side assert triggered", "via": "cuda",
                                      "assertion": f"{m.group('at')}: {m.group('func')}: Assertion `{m.group('expr')}` failed"})
                    recognised = True
        self._fatal(line, text, recognised)
        if recognised:
            return  # an error message quotes settings (the OOM's own expandable_segments advice): not the run's
        if "parallel_size" in text or "world_size" in text:
            m = F.PARALLEL_SIZE.match(text)
            if m:
                value = F.bounded_int(m.group(2))
                if value is not None:
                    r.parallel[m.group(1)] = value
        if "expandable_segments" in text:
            m = F.ALLOC_CONF.search(text)
            if m:
                r.alloc_conf = m.group(1)

    def _iteration_line(self, text: str, iteration: int, train_iters: int | None) -> None:
        r = self.result
        st = self._state
        r.iteration_lines += 1
        if st.first is None:
            st.first = iteration
        if st.prev_iteration is not None and iteration > st.prev_iteration:
            st.step = iteration - st.prev_iteration
        st.prev_iteration = iteration
        st.completed = max(st.completed or 0, iteration)
        el, tp = F.ELAPSED.search(text), F.THROUGHPUT.search(text)
        st.last = Throughput(iteration, train_iters, F.finite_float(el.group(1)) if el else None,
                             F.finite_float(tp.group(1)) if tp else None)

    def _rank_at(self, line: LogLine, start: int) -> int | None:
        """The rank of a message glued onto the end of another line: torch's "[rankN]: " shortly before it."""
        if start <= 0 or "[rank" not in line.text[max(0, start - GLUED_RANK_REACH):start]:
            return None
        last = None
        for m in F.GLUED_RANK.finditer(line.text, max(0, start - GLUED_RANK_REACH), start):
            last = m
        return F.bounded_int(last.group(1)) if last is not None else None

    def _oom(self, line: LogLine, start: int, fmt: str, figures: dict[str, Any]) -> None:
        text = line.text
        m = F.EXCEPTION.search(text, max(0, start - 60))
        exc = m.group(1) if m and m.start() <= start else None
        begin = m.start() if exc and m else max(0, start)
        glued = self._rank_at(line, begin)
        who = _who(line, glued)
        key = (who, fmt, tuple(sorted((k, repr(v)) for k, v in figures.items())))
        seen = self._oom_index.get(key)
        if seen is not None:
            seen.count += 1
            return
        event = OomEvent(self._where(line, rank=glued), fmt, text[begin:begin + MAX_TEXT], exception=exc, **figures)
        if self._keep("oom", self.result.ooms, event):
            self._oom_index[key] = event

    def _report(self, line: LogLine, rank: int, source: str, label: str, figures: dict[str, Any]) -> None:
        m = F.REPORT_ITERATION.search(label)
        iteration = F.bounded_int(m.group(1) or m.group(2)) if m else None
        if iteration is not None and "after" in label:
            self._state.completed = max(self._state.completed or 0, iteration)
        where = self._where(line, rank=rank, iteration=iteration)
        last = self._state.last
        throughput = Throughput(last.iteration, last.train_iters, last.elapsed_ms, last.tflops_per_gpu) if last else None
        self._keep("memory-report", self.result.reports,
                   MemoryReport(where, source, label, throughput=throughput, **figures))

    def _known(self, line: LogLine, error: KnownError) -> None:
        who = _who(line)
        key = (who, error.ref)
        seen = self._known_index.get(key)
        if seen is not None:
            seen.count += 1
            return
        idx = error.pattern.search(line.text)
        start = max(0, idx.start() - 200) if idx else 0
        event = KnownErrorEvent(self._where(line), error, line.text[start:start + MAX_TEXT].strip(),
                                values=error.values(line.text))
        if self._keep("known-error", self.result.known, event):
            self._known_index[key] = event

    def _comm(self, line: LogLine, found: dict[str, Any]) -> None:
        found = dict(found)
        start = found.pop("start")
        reported = found.pop("reported_rank", None)
        rank = line.rank if line.rank is not None else reported
        glued = self._rank_at(line, start)
        if glued is not None:
            rank = glued
        who = _who(line, rank)
        key = (who, found["type"], found.get("seq"), found.get("collective"), found.get("nccl_error"),
               found.get("peer"), found.get("ib_status"))
        seen = self._comm_index.get(key)
        if seen is not None:
            seen.count += 1
            if seen.group is None and found.get("group"):  # the "terminated with exception" line names the PG
                seen.group, seen.pg = found["group"], found.get("pg")
            return
        begin = max(0, start - 120) if found["type"] == "watchdog-timeout" else start
        event = CommEvent(self._where(line, rank=rank), text=line.text[begin:begin + MAX_TEXT].strip(), **found)
        if self._keep("communication", self.result.comm, event):
            self._comm_index[key] = event
            if event.type == "watchdog-timeout":
                self._last_timeout[who] = event

    def _pg_line(self, line: LogLine) -> None:
        """A ProcessGroupNCCL line with a "[PG ...]" prefix right after a timeout of the same rank names the
        timed-out work's process group (torch prints "[Rank N] Watchdog caught ..." without it)."""
        m = F.PG_PREFIX.search(line.text)
        if m is None:
            return
        rank = F.bounded_int(m.group(2))
        ev = self._last_timeout.get(_who(line, line.rank if line.rank is not None else rank))
        if ev is not None and ev.group is None and ev.where.file == line.path and 0 <= line.lineno - ev.where.line <= 20:
            desc = F.PG_DESC.search(m.group(1))
            ev.pg, ev.group = m.group(1).strip(), desc.group(1) if desc else None

    def _ib_hint(self, line: LogLine) -> None:
        m = F.IB_HINT.search(line.text)
        if not m:
            return
        who = _who(line)
        for ev in reversed(self.result.comm[-8:]):  # the hints follow their WARN line
            if ev.type == "ib-error" and _who_of(ev) == who and ev.where.file == line.path:
                if len(ev.hints) < 8 and m.group("hint") not in ev.hints:
                    ev.hints.append(m.group("hint")[:300])
                return

    def _cuda(self, line: LogLine, found: dict[str, Any]) -> None:
        found = dict(found)
        start = found.pop("start")
        glued = self._rank_at(line, start)
        who = _who(line, glued)
        key = (who, found["error"])
        seen = self._cuda_index.get(key)
        if seen is not None:
            seen.count += 1
            if found.get("assertion") and not seen.assertion:
                seen.assertion = found["assertion"]
            if found.get("exception") and not seen.exception:
                seen.exception = found["exception"]
            return
        begin = max(0, start - 80)
        event = CudaErrorEvent(self._where(line, rank=glued), text=line.text[begin:begin + MAX_TEXT].strip(), **found)
        if self._keep("cuda-error", self.result.cuda, event):
            self._cuda_index[key] = event

    # ------------------------------------------------------------------ fatal ends
    def _fatal(self, line: LogLine, text: str, recognised: bool) -> None:
        who = _who(line)
        if recognised:  # this process's traceback ends in a recognised message: nothing more to say about it
            self._tracebacks.pop(who, None)
            self._terminating.pop(who, None)
            return
        if self._terminating:
            pending = self._terminating.pop(who, None)
            if pending is not None:
                m = F.WHAT.match(text)
                if m:
                    pending.exception = f"{pending.exception}: what(): {m.group('what').strip()}"[:MAX_TEXT]
                    pending.text = pending.exception
                    return
        if F.CHILD_FAILED in text:  # the launcher's own traceback ends here: read the block that follows
            self._tracebacks.pop(who, None)
            self._elastic[line.path] = ElasticState(line.lineno, line.lineno)
            return
        if self._tracebacks:
            tb = self._tracebacks.get(who)
            if tb is not None and text.strip() != F.TRACEBACK:
                m = F.FRAME.match(text)
                if m:
                    tb.frame = f'File "{m.group("file")}", line {m.group("line")}, in {m.group("func")}'
                    return
                exc = exception_line(text)
                if exc is not None:
                    del self._tracebacks[who]
                    self._candidate(who, FatalEvent(self._where(line), "traceback", exc[1], exc[1], location=tb.frame))
                    return
        if "Traceback" in text and text.strip() == F.TRACEBACK:
            if len(self._tracebacks) < MAX_EVENTS:
                self._tracebacks[who] = TracebackState()
            return
        if "terminate called" in text:
            m = F.TERMINATE.search(text)
            if m:
                what = (f"terminate called after throwing an instance of '{m.group('type')}'" if m.group("type")
                        else f"terminate called {m.group('other')}")
                ev = FatalEvent(self._where(line), "terminate", what, what)
                self._candidate(who, ev)
                self._terminating[who] = ev
                return
        if self._elastic:
            self._child_failed(line, text)

    def _candidate(self, who: Who, ev: FatalEvent) -> None:
        if len(self._fatal_candidates) < MAX_EVENTS:
            self._fatal_candidates.append((who, ev))
        else:
            self.result.dropped["fatal"] = self.result.dropped.get("fatal", 0) + 1

    def _child_failed(self, line: LogLine, text: str) -> None:
        st = self._elastic.get(line.path)
        if st is None:
            return
        if line.lineno - st.lineno > 40:  # the block is a few lines long: this one was never completed
            del self._elastic[line.path]
            return
        if text.rstrip().endswith(" FAILED") and "title" not in st.fields:
            st.fields["title"] = text.strip()[:200]
            return
        if text.strip() == F.ROOT_CAUSE:
            st.fields["root"] = "1"
            return
        m = F.ELASTIC_FIELD.match(text)
        if m and "root" in st.fields:
            st.fields[m.group("key")] = m.group("value").strip()[:300]
            if m.group("key") == "traceback":
                del self._elastic[line.path]
                self._elastic_event(line, st)

    def _elastic_event(self, line: LogLine, st: ElasticState) -> None:
        f = st.fields
        rank = local = exitcode = None
        m = F.ELASTIC_RANK.match(f.get("rank", ""))
        if m:
            rank, local = F.bounded_int(m.group(1)), F.bounded_int(m.group(2))
        m = F.ELASTIC_EXIT.match(f.get("exitcode", ""))
        if m:
            exitcode = F.bounded_int(m.group(1))
        tb = f.get("traceback", "")
        signal = None
        sm = re_signal(tb)
        if sm:
            signal = sm
        what = (f"{f.get('title', 'a torchrun child')}: rank {rank} (local rank {local}) on {f.get('host', '?')} exited "
                f"with code {exitcode}" + (f" ({tb})" if tb and tb != "<N/A>" else ""))
        where = Where(line.path, st.line, rank, line.task, local, None, self._state.completed)
        ev = FatalEvent(where, "child-failed", what[:MAX_TEXT], what[:MAX_TEXT], exitcode=exitcode, signal=signal,
                        host=f.get("host"))
        self._candidate((None, rank, None, None) if rank is not None else _who(line), ev)

    # ------------------------------------------------------------------ end
    def finish(self) -> ScanResult:
        """Decide what one event hides of another, derive global ranks from Slurm task + torchrun local rank
        (one launcher per node) when every prefixed line carried both, and pick the last throughput."""
        r = self.result
        # An OOM outside the allocator (NCCL, c10d echoing the failure) says less than the same process's
        # allocator report: drop it, whichever log or line came first.
        with_figures = {_who_of(o) for o in r.ooms if o.has_figures}
        r.ooms = [o for o in r.ooms if o.format != "outside-allocator" or _who_of(o) not in with_figures]
        located: list[Any] = [*r.ooms, *r.known, *r.comm, *r.cuda]
        if self._tasks_with_local and self._max_local >= 0:
            per = self._max_local + 1
            for ev in located:
                w = ev.where
                if w.rank is None and w.task is not None and w.local_rank is not None:
                    w.rank = w.task * per + w.local_rank
        elif not self._tasks_with_local:
            for ev in located:
                w = ev.where
                if w.rank is None and w.task is not None and w.local_rank is None:
                    w.rank = w.task  # srun with one task per GPU: the task id is the rank
        self._fatal_ends()
        states = [(st.last.iteration or 0, path, st.last) for path, st in self._files.items() if st.last is not None]
        if states:
            r.last_throughput = max(states, key=lambda t: (t[0], t[1]))[2]
        firsts = [st.first for st in self._files.values() if st.first is not None]
        r.first_iteration = min(firsts) if firsts else None
        return r

    def _fatal_ends(self) -> None:
        """The fatal ends no recognised failure of the same process explains: the last one of each process,
        one event per distinct exception (ranks dying of the same error fold together)."""
        r = self.result
        if r.ooms or r.known or r.comm or r.cuda:  # the job's end is diagnosed: the rest follows from it
            r.secondary_fatal += len(self._fatal_candidates)
            return
        last: dict[Who, FatalEvent] = {}
        for who, ev in self._fatal_candidates:
            prev = last.get(who)
            if prev is not None:
                r.secondary_fatal += 1
                if ev.type == "child-failed" and prev.type != "child-failed":
                    continue  # the rank's own traceback says more than the launcher's account of it
            last[who] = ev
        for ev in sorted(last.values(), key=lambda e: (e.where.file, e.where.line)):
            key = (ev.type, ev.exception)
            seen = self._fatal_index.get(key)
            if seen is not None:
                seen.count += 1
                if ev.where.rank is not None and ev.where.rank not in seen.ranks:
                    seen.ranks.append(ev.where.rank)
                continue
            if ev.where.rank is not None:
                ev.ranks.append(ev.where.rank)
            if self._keep("fatal", r.fatal, ev):
                self._fatal_index[key] = ev


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def re_signal(text: str) -> str | None:
    """The signal name in torchrun's "Signal 6 (SIGABRT) received by PID 123"."""
    start = text.find("(SIG")
    if start < 0:
        return None
    end = text.find(")", start)
    return text[start + 1:end] if end > start else None


def _who_of(ev: Any) -> Who:
    w = ev.where
    if w.rank is None and w.task is None and w.local_rank is None:
        return (w.file, None, None, None)
    return (None, w.rank, w.task, w.local_rank)


def _split_processes(procs: list[dict[str, Any]], allocated: int | None,
                     unallocated: int | None) -> dict[str, Any]:
    """This process's and the other processes' memory from the NVML lines of the message. Inside a PID
    namespace (a container) NVML's PID of this process is not ``getpid()``, so torch prints it as
    ``Process N`` too (``reportProcessMemoryInfo``, CUDACachingAllocator.cpp v2.6.0:975-1030): then the entry
    that holds at least what PyTorch itself reserved, the smallest such, is taken to be this process
    (``"assumed": true``)."""
    own = [p for p in procs if p["self"] and p["bytes"] is not None]
    others = [p for p in procs if not p["self"] and p["bytes"] is not None]
    if not own and others and allocated is not None:
        reserved = allocated + (unallocated or 0)
        fits = [p for p in others if p["bytes"] >= 0.99 * reserved]
        if fits:
            me = min(fits, key=lambda p: p["bytes"])
            me["self"] = True
            me["assumed"] = True  # identified by its size, not by its PID
            own, others = [me], [p for p in others if p is not me]
    return {"processes": procs, "process_bytes": sum(p["bytes"] for p in own) or None,
            "other_processes_bytes": sum(p["bytes"] for p in others)}


def scan_logs(paths: Iterable[str]) -> ScanResult:
    """Scan the logs (:class:`~mbmem_lint.diagnose.logread.LogReadError` propagates)."""
    scanner = Scanner()
    for path in paths:
        reader = LogReader(path)
        for line in reader:
            scanner.feed(line)
        scanner.result.notes.extend(reader.notes)
        scanner.result.files.append(path)
    return scanner.finish()
