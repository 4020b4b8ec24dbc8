"""Log lines → events: PyTorch OOM reports, Megatron memory reports (with the throughput line before
them), and known failure messages; plus what the log says about the run (parallel sizes, allocator
setting, iterations).

Memory stays bounded whatever the log's size: repeated OOM messages fold into one event per rank
and message, and each event list keeps at most :data:`MAX_EVENTS` entries (the rest are counted).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mbmem_lint.diagnose import formats as F
from mbmem_lint.diagnose.known_errors import KnownError, match_known_error
from mbmem_lint.diagnose.logread import LogLine, LogReader
from mbmem_lint.records import dataclass, field

MAX_EVENTS = 2000  # per kind; later ones are counted in ``ScanResult.dropped``
MAX_TEXT = 600  # characters of a matched message kept in an event


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
    other_processes_bytes: int | None = None
    count: int = 1  # identical messages folded into this one (tracebacks printed twice, ...)

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

    def to_json(self) -> dict[str, Any]:
        return {"kind": "known-error", **self.where.json_fields(), "codes": list(self.error.codes),
                "source": self.error.ref, "count": self.count, "message": self.text}


Event = OomEvent | MemoryReport | KnownErrorEvent


@dataclass
class ScanResult:
    """Everything found in the logs, in bounded memory."""

    ooms: list[OomEvent] = field(default_factory=list)
    reports: list[MemoryReport] = field(default_factory=list)
    known: list[KnownErrorEvent] = field(default_factory=list)
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
        out: list[Event] = [*self.ooms, *self.reports, *self.known]
        return sorted(out, key=lambda e: (e.where.file, e.where.line))

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


def parse_oom(text: str) -> tuple[str, dict[str, Any]] | None:
    """(format, figures) of an OOM message in ``text``, None when the line holds none."""
    if "out of memory" not in text and "ALLOC_FAILED" not in text:
        return None
    m = F.OOM_CURRENT.search(text)
    if m:
        # groups: requested(1,2) device(3) capacity(4,5) free(6,7) procs allowed(9,10) allocated(11,12)
        # private pools(13,14) reserved-unallocated(15,16)
        figures: dict[str, Any] = {
            "requested_bytes": _size(m, 1), "device": int(m.group(3)), "capacity_bytes": _size(m, 4),
            "free_bytes": _size(m, 6), "allowed_bytes": _size(m, 9), "allocated_bytes": _size(m, 11),
            "private_pool_bytes": _size(m, 13), "reserved_unallocated_bytes": _size(m, 15),
        }
        procs = m.group("procs") or ""
        if procs:
            own = others = 0
            for p in F.PROCESS.finditer(procs):
                n = F.size_bytes(p.group(3), p.group(4))
                if p.group(2) is None:
                    own += n
                else:
                    others += n
            figures["process_bytes"] = own or None
            figures["other_processes_bytes"] = others
        return "torch>=2.1", figures
    m = F.OOM_OLD.search(text)
    if m:
        # requested(1,2) device(3) capacity(4,5) allocated(6,7) free(8,9) allowed(10,11) reserved(12,13)
        allocated, reserved = _size(m, 6), _size(m, 12)
        return "torch<=2.0", {
            "requested_bytes": _size(m, 1), "device": int(m.group(3)), "capacity_bytes": _size(m, 4),
            "allocated_bytes": allocated, "free_bytes": _size(m, 8), "allowed_bytes": _size(m, 10),
            "reserved_unallocated_bytes": max(0, (reserved or 0) - (allocated or 0)),
        }
    m = F.OOM_FRACTION.search(text)
    if m:
        return "memory-fraction", {"requested_bytes": _size(m, 1)}
    if F.OOM_OTHER.search(text):
        return "outside-allocator", {}
    return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _scaled(text: str | None, unit: float) -> int | None:
    """A printed figure in bytes (``unit``: bytes per printed unit), None when it is not a number."""
    v = _float(text)
    return None if v is None else int(round(v * unit))


def parse_report(text: str) -> tuple[int, str, str, dict[str, Any]] | None:
    """(rank, source, label, figures) of a ``report_memory`` line, None when the line is not one."""
    if "memory (" not in text or "[Rank " not in text:
        return None
    m = F.MCORE_REPORT.search(text)
    if m:
        groups = m.groups()

        def b(i: int) -> int | None:
            return _scaled(groups[i - 1], 1024.0 * 1024.0)

        return int(m.group(1)), "megatron-core", m.group(2).strip(), {
            "allocated_bytes": b(3), "max_allocated_bytes": b(4), "reserved_bytes": b(5),
            "max_reserved_bytes": b(6), "device_used_bytes": b(7)}
    m = F.BRIDGE_REPORT.search(text)
    if m:
        pairs = {k: v.strip() for k, v in F.BRIDGE_PAIR.findall(m.group(3))}

        def gb(key: str) -> int | None:
            return _scaled(pairs.get(key), 1e9)

        retries = _float(pairs.get("mem-alloc-retires"))
        return int(m.group(1)), "megatron-bridge", m.group(2).strip(), {
            "allocated_bytes": gb("mem-allocated-gigabytes"), "max_allocated_bytes": gb("mem-max-allocated-gigabytes"),
            "reserved_bytes": gb("mem-reserved-gigabytes"), "max_reserved_bytes": gb("mem-max-reserved-gigabytes"),
            "alloc_retries": int(retries) if retries is not None else None}
    return None


class Scanner:
    """Feed it lines (of one or more logs, in order); read :attr:`result`."""

    def __init__(self) -> None:
        self.result = ScanResult()
        self._last: Throughput | None = None
        self._prev_iteration: int | None = None
        self._step: int | None = None  # iterations between consecutive iteration lines
        self._completed: int | None = None  # last iteration known complete (iteration line or report)
        self._oom_index: dict[tuple[Any, ...], OomEvent] = {}
        self._ranks_with_figures: set[tuple[int | None, int | None, int | None]] = set()  # (rank, task, local)
        self._known_index: dict[tuple[Any, ...], KnownErrorEvent] = {}
        self._max_local = -1
        self._tasks_with_local = False

    def _where(self, line: LogLine, rank: int | None = None, iteration: int | None = None) -> Where:
        after = self._completed
        exact = iteration
        if exact is None and after is not None and self._step == 1:
            exact = after + 1
        return Where(line.path, line.lineno, rank if rank is not None else line.rank, line.task, line.local_rank,
                     exact, after)

    def _keep(self, kind: str, items: list[Any], item: Any) -> bool:
        if len(items) >= MAX_EVENTS:
            self.result.dropped[kind] = self.result.dropped.get(kind, 0) + 1
            return False
        items.append(item)
        return True

    def feed(self, line: LogLine) -> None:
        text = line.text
        self.result.lines += 1
        if line.local_rank is not None:
            self._max_local = max(self._max_local, line.local_rank)
            self._tasks_with_local = self._tasks_with_local or line.task is not None
        if "iteration" in text:
            m = F.ITERATION.search(text)
            if m:
                self._iteration_line(text, int(m.group(1)), int(m.group(2)))
                return
        if "Step Time" in text:
            m = F.STEP_TIME.search(text)
            if m and self._last is not None:
                self._last.elapsed_ms = self._last.elapsed_ms or float(m.group(1)) * 1000.0
                self._last.tflops_per_gpu = float(m.group(2))
                return
        oom = parse_oom(text)
        if oom is not None:
            self._oom(line, *oom)
            return
        rep = parse_report(text)
        if rep is not None:
            self._report(line, *rep)
            return
        known = match_known_error(text)
        if known is not None:
            self._known(line, known)
            return
        if "parallel_size" in text or "world_size" in text:
            m = F.PARALLEL_SIZE.match(text)
            if m:
                self.result.parallel[m.group(1)] = int(m.group(2))
        if "expandable_segments" in text:
            m = F.ALLOC_CONF.search(text)
            if m:
                self.result.alloc_conf = m.group(1)

    def _iteration_line(self, text: str, iteration: int, train_iters: int) -> None:
        r = self.result
        r.iteration_lines += 1
        if r.first_iteration is None:
            r.first_iteration = iteration
        if self._prev_iteration is not None and iteration > self._prev_iteration:
            self._step = iteration - self._prev_iteration
        self._prev_iteration = iteration
        self._completed = max(self._completed or 0, iteration)
        el, tp = F.ELAPSED.search(text), F.THROUGHPUT.search(text)
        self._last = Throughput(iteration, train_iters, float(el.group(1)) if el else None,
                                float(tp.group(1)) if tp else None)
        r.last_throughput = self._last

    def _oom(self, line: LogLine, fmt: str, figures: dict[str, Any]) -> None:
        m = F.EXCEPTION.search(line.text)
        start = m.start() if m else max(0, line.text.find("CUDA"))
        text = line.text[start:start + MAX_TEXT]
        key = (line.rank, line.task, line.local_rank, fmt, tuple(sorted(figures.items())))
        seen = self._oom_index.get(key)
        if seen is not None:
            seen.count += 1
            return
        who = (line.rank, line.task, line.local_rank)
        if fmt == "outside-allocator" and who in self._ranks_with_figures:
            return  # the same rank's allocator report already says more (NCCL/c10d echo the failure)
        event = OomEvent(self._where(line), fmt, text, exception=m.group(1) if m else None, **figures)
        if self._keep("oom", self.result.ooms, event):
            self._oom_index[key] = event
            if event.has_figures:
                self._ranks_with_figures.add(who)

    def _report(self, line: LogLine, rank: int, source: str, label: str, figures: dict[str, Any]) -> None:
        m = F.REPORT_ITERATION.search(label)
        iteration = int(m.group(1) or m.group(2)) if m else None
        if iteration is not None and "after" in label:
            self._completed = max(self._completed or 0, iteration)
        where = self._where(line, rank=rank, iteration=iteration)
        last = self._last
        throughput = Throughput(last.iteration, last.train_iters, last.elapsed_ms, last.tflops_per_gpu) if last else None
        self._keep("memory-report", self.result.reports,
                   MemoryReport(where, source, label, throughput=throughput, **figures))

    def _known(self, line: LogLine, error: KnownError) -> None:
        key = (line.rank, line.task, line.local_rank, error.ref)
        seen = self._known_index.get(key)
        if seen is not None:
            seen.count += 1
            return
        idx = error.pattern.search(line.text)
        start = max(0, idx.start() - 200) if idx else 0
        event = KnownErrorEvent(self._where(line), error, line.text[start:start + MAX_TEXT].strip())
        if self._keep("known-error", self.result.known, event):
            self._known_index[key] = event

    def finish(self) -> ScanResult:
        """Derive global ranks from Slurm task + torchrun local rank (one launcher per node) when every
        prefixed line carried both."""
        r = self.result
        located: list[OomEvent | KnownErrorEvent] = [*r.ooms, *r.known]
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
        return r


def scan_logs(paths: Iterable[str]) -> ScanResult:
    """Scan the logs in order (:class:`~mbmem_lint.diagnose.logread.LogReadError` propagates)."""
    scanner = Scanner()
    for path in paths:
        reader = LogReader(path)
        for line in reader:
            scanner.feed(line)
        scanner.result.notes.extend(reader.notes)
        scanner.result.files.append(path)
    return scanner.finish()
