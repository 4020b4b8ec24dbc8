"""Checking many files on several cores.

Forked workers take groups of related files from a shared queue, largest first. Each worker keeps
one resolver for its whole life: every file of the tree is registered in it (imports work across
groups; a file outside the worker's groups is lowered only when something imports it), and what it
learnt for one group (lowered modules, memoised library calls) serves the next. Grouping keeps a
recipe and the modules it imports in one worker, so little is interpreted twice.

Nothing user-supplied is pickled into the workers: they inherit the discovered sources through
``fork``; only findings come back.
"""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import PurePath
from typing import TYPE_CHECKING

from mbmem_lint.diagnostics import Diagnostic
from mbmem_lint.discover.files import Discovered
from mbmem_lint.records import dataclass, field
from mbmem_lint.resolve.resolver import ResolveOptions, Resolver
from mbmem_lint.settings import Settings
from mbmem_lint.sources import SourceFile

if TYPE_CHECKING:
    from mbmem_lint.pipeline import EstimateRow, PerFile  # pipeline imports this module on use

YAML_TASK = -1  # the task that loads override files and resolves the recipes they name


def affinity_key(rel: tuple[str, ...]) -> str:
    """Group of a file from its path below the common root of the run: the folder below the top
    folder (``recipes/llama/llama3.py`` and ``perf_recipes/llama/h100/llama3.py`` → ``llama``), the
    top folder for files directly in it, the file itself at the root."""
    if len(rel) >= 3:
        return rel[1]
    if len(rel) == 2:
        return rel[0]
    return "/".join(rel)


def plan_groups(sources: list[SourceFile], jobs: int) -> list[list[str]]:
    """File groups for the queue, largest (by bytes) first. A group above half of one worker's share
    is split (in path order), so one big family cannot leave the other workers idle."""
    if not sources:
        return []
    paths = [s.path for s in sources]
    # Absolute paths: the command line may mix relative and absolute ones.
    absolute = {p: os.path.abspath(p) for p in paths}
    root = os.path.commonpath(list(absolute.values())) if len(paths) > 1 else os.path.dirname(absolute[paths[0]])
    size = {s.path: len(s.text) for s in sources}
    by_key: dict[str, list[str]] = {}
    for p in sorted(paths):
        by_key.setdefault(affinity_key(PurePath(os.path.relpath(absolute[p], root)).parts), []).append(p)
    total = sum(size.values())
    limit = max(1, total // (2 * jobs))
    groups: list[list[str]] = []
    for members in by_key.values():
        part: list[str] = []
        part_size = 0
        for p in members:
            part.append(p)
            part_size += size[p]
            if part_size >= limit:
                groups.append(part)
                part, part_size = [], 0
        if part:
            groups.append(part)
    groups.sort(key=lambda g: (-sum(size[p] for p in g), g[0]))
    return groups


@dataclass
class _Work:
    """What the forked workers inherit: the discovered files, settings and the planned groups."""

    found: Discovered
    settings: Settings
    options: ResolveOptions
    groups: list[list[str]]
    need_edits: bool
    want_estimates: bool
    per_file: bool  # results-cache run: each file's findings and dependencies, kept apart


@dataclass
class TaskResult:
    """What one queue task sends back: its findings, failures and number of recipe functions."""

    diagnostics: list[Diagnostic]
    failed: list[str]
    functions_seen: int
    estimates: list[EstimateRow] = field(default_factory=list)  # each recipe's, when wanted
    # Results-cache runs: each recipe file's findings and dependencies (``diagnostics`` then holds only
    # the tool diagnostics, ``paired`` the YAML task's findings).
    per_file: PerFile = field(default_factory=dict)
    # Results-cache runs: the YAML task's findings (override files, paired recipes), never cached.
    paired: list[Diagnostic] = field(default_factory=list)


_WORK: _Work | None = None  # set in the parent before forking, read by the workers
_RESOLVER: Resolver | None = None  # one per worker process, created by its first task


def _worker_resolver(work: _Work) -> Resolver:
    global _RESOLVER
    if _RESOLVER is None:
        # No automatic collections inside a task (a worker lives for one run); the cycles tasks
        # leave are collected between tasks once enough have piled up (see _run_task).
        gc.disable()
        _RESOLVER = Resolver(work.settings, work.options)
        _RESOLVER.register(work.found.python, own=set())
    return _RESOLVER


# Collect between tasks once this many container objects were created (net) since the last
# collection. A whole-corpus worker ends near 400k, most of them live (resolved modules, memoised
# calls), and its garbage cycles are ~7 MB: collecting after every task cost 70-100 ms per worker
# (4-5% of the run) to keep those 7 MB. The threshold bounds the garbage of bigger runs instead.
_COLLECT_AFTER_OBJECTS = 1_000_000


def _run_task(index: int) -> TaskResult:
    """One queue task; an unexpected error becomes an MBM001 finding on the task's files (a worker
    must not end the run with a traceback)."""
    work = _WORK
    assert work is not None
    try:
        return _task(work, index)
    except Exception as exc:  # reported, not raised
        return _failure(_task_paths(work, index), f"{type(exc).__name__}: {exc}")
    finally:
        if gc.get_count()[0] > _COLLECT_AFTER_OBJECTS:
            gc.collect(1)


def _task(work: _Work, index: int) -> TaskResult:
    from mbmem_lint.check.engine import run_checks
    from mbmem_lint.pipeline import (
        file_checker,
        file_recorder,
        filter_tool_diagnostics,
        load_overrides,
        recipe_estimates,
    )

    resolver = _worker_resolver(work)
    result = resolver.result
    diags_before, failed_before, seen_before = len(result.diagnostics), len(result.failed), result.functions_seen
    sources = work.found.sources
    findings: list[Diagnostic] = []
    estimates: list[EstimateRow] | None = [] if work.want_estimates else None
    per_file: PerFile = {}
    if index == YAML_TASK:
        overrides, override_diags = load_overrides(work.found)
        resolver.resolve_overrides(overrides)
        findings += filter_tool_diagnostics(override_diags, work.settings)
        findings += run_checks(result.recipes, overrides, work.settings, sources)
        if estimates is not None:
            estimates += recipe_estimates(result.recipes)
        result.recipes.clear()
    else:
        envs = [env for env in (resolver.adopt(sources[p]) for p in work.groups[index]) if env is not None]
        if work.per_file:
            resolver.resolve_modules(envs, file_recorder(work.settings, work.found, resolver.project.dependencies,
                                                         per_file))
        else:
            resolver.resolve_modules(envs, file_checker(work.settings, work.found, findings, estimates))
    tool = filter_tool_diagnostics(result.diagnostics[diags_before:], work.settings)
    for d in [*findings, *(d for diags, _deps in per_file.values() for d in diags)]:
        if d.fix is not None:
            # Builders are closures over this process's state: compute the edits here or drop them.
            d.fix.edits = d.fix.edits if work.need_edits else []
    failed, seen = result.failed[failed_before:], result.functions_seen - seen_before
    if work.per_file:
        return TaskResult(tool, failed, seen, [], per_file, findings)
    return TaskResult(tool + findings, failed, seen, estimates or [])


def run_parallel(found: Discovered, settings: Settings, options: ResolveOptions, jobs: int,
                 need_edits: bool, want_estimates: bool = False,
                 only: set[str] | None = None) -> list[TaskResult]:
    """Check ``found`` on ``jobs`` forked workers. ``only``: a results-cache run checking just these
    files (the others stay importable); their findings come back per file (``TaskResult.per_file``)."""
    global _WORK
    from mbmem_lint.resolve.library import LibrarySummary
    from mbmem_lint.resolve.schema import Schema

    # Loaded once before forking: the workers share these pages instead of each loading a copy.
    Schema.load()
    LibrarySummary.load()
    # What exists now lives as long as the workers: out of the collector's sight, its pages stay
    # shared with the parent instead of being touched (copied) by every collection in every worker.
    gc.freeze()
    groups = plan_groups(found.python if only is None else [s for s in found.python if s.path in only], jobs)
    tasks = ([YAML_TASK] if found.yaml else []) + list(range(len(groups)))
    _WORK = _Work(found, settings, options, groups, need_edits, want_estimates, only is not None)
    try:
        return _fork_map(tasks, min(jobs, len(tasks)))
    finally:
        _WORK = None
        gc.unfreeze()


_TASK_BYTES = 4  # one queue entry: a task index, little-endian signed
_QUEUE_WRITE = 4096  # bytes per write to the queue: POSIX's minimum PIPE_BUF, a multiple of _TASK_BYTES


def _fork_map(tasks: list[int], jobs: int) -> list[TaskResult]:
    """``_run_task`` over ``tasks`` on ``jobs`` forked workers, each taking the next task as it frees up.

    Plain ``os.fork`` and pipes rather than ``multiprocessing``: importing ``multiprocessing.pool``
    alone took ~35 ms, paid before the first task starts. The queue is a pipe holding every task
    index, written by the parent and then closed: a read of one entry takes whole entries only (see
    ``_QUEUE_WRITE``), so each read hands one task to one worker, and an empty read means the queue
    is done. Each worker sends back the pickled results of all its tasks when the queue is empty. A worker
    that dies without sending them (killed, out of memory) turns the tasks nobody reported into
    MBM001 findings rather than a hang.
    """
    import pickle

    queue_r, queue_w = os.pipe()
    payload = b"".join(t.to_bytes(_TASK_BYTES, "little", signed=True) for t in tasks)
    workers: list[tuple[int, int]] = []
    running: set[int] = set()
    unread: set[int] = set()
    try:
        for _ in range(jobs):
            result_r, result_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(result_r)
                os.close(queue_w)  # else the queue would never read as empty
                _worker_main(queue_r, result_w)
            os.close(result_w)
            workers.append((pid, result_r))
            running.add(pid)
            unread.add(result_r)
        os.close(queue_r)
        queue_r = -1
        # Writes of at most PIPE_BUF bytes are atomic and these hold whole entries, so a worker never
        # reads half an entry; a queue larger than the pipe buffer just waits for the workers to drain it.
        for start in range(0, len(payload), _QUEUE_WRITE):
            os.write(queue_w, payload[start:start + _QUEUE_WRITE])
        os.close(queue_w)
        queue_w = -1
        results: list[TaskResult] = []
        done: set[int] = set()
        for pid, fd in workers:
            # Workers write only after their last task, so reading them in turn never stalls one.
            unread.discard(fd)
            with os.fdopen(fd, "rb") as stream:
                data = stream.read()
            os.waitpid(pid, 0)
            running.discard(pid)
            try:
                part: list[tuple[int, TaskResult]] = pickle.loads(data)
            except Exception:  # the worker died before (or while) reporting
                continue
            for index, result in part:
                done.add(index)
                results.append(result)
        results += [_lost_task(i) for i in tasks if i not in done]
        return results
    finally:
        for fd in [f for f in (queue_r, queue_w) if f >= 0] + sorted(unread):
            os.close(fd)
        for pid in running:  # only after an error or Ctrl-C in the parent: stop the rest
            import signal

            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)


def _worker_main(queue_r: int, result_w: int) -> None:
    import pickle

    status = 1
    try:
        out: list[tuple[int, TaskResult]] = []
        while True:
            entry = os.read(queue_r, _TASK_BYTES)
            if len(entry) < _TASK_BYTES:
                break
            index = int.from_bytes(entry, "little", signed=True)
            out.append((index, _run_task(index)))
        with os.fdopen(result_w, "wb") as stream:
            stream.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    finally:
        # No interpreter shutdown: the parent's atexit handlers and unflushed buffers are not ours.
        os._exit(status)


def _lost_task(index: int) -> TaskResult:
    work = _WORK
    assert work is not None
    return _failure(_task_paths(work, index), "the worker process checking this file exited without reporting")


def _task_paths(work: _Work, index: int) -> list[str]:
    """The files a task checks: its group, or every YAML file for the YAML task."""
    return [s.path for s in work.found.yaml] if index == YAML_TASK else work.groups[index]


def _failure(paths: list[str], why: str) -> TaskResult:
    from mbmem_lint.diagnostics import Location
    from mbmem_lint.resolve.resolver import tool_diagnostic

    diags = [tool_diagnostic("MBM001", "internal-error", "error", f"internal error while checking this file: {why}",
                             Location(p, 1, 1)) for p in paths]
    return TaskResult(diags, [f"{p}: internal error ({why})" for p in paths], 0)
