"""``.mbmem-lint/measurements.json``: measured peaks of the team's own runs next to the estimate, committed
with the recipes (``diagnose --record`` appends; ``estimate`` shows a matching row; the validation bench
reads them). The estimate is never rescaled by them.

Schema (``docs/json-schema/measurements.schema.json``)::

    {"schema": "mbmem-lint/measurements/1",
     "measurements": [
       {"recipe": "recipes/llama.py::llama3_8b_config",   # path relative to the pyproject folder
        "overrides": [],                                  # YAML files applied (same relative form)
        "gpu": "h100-80gb", "world_size": 8,
        "fingerprint": "sha256:...",                      # of the values the estimate reads
        "tool_version": "0.1.0", "recorded": "2026-12-01T12:00:00Z",
        "logs": ["slurm-1234.out"], "iteration": 2, "oom": false,
        "throughput": {"iteration": 2, "train_iters": 100, "elapsed_ms": 812.3, "tflops_per_gpu": 402.1},
        "stages": [{"pp_rank": 0, "ranks": [0], "measured_max_allocated_bytes": 41234000000,
                    "measured_max_reserved_bytes": 44000000000, "estimated_allocated_bytes": 40112345678,
                    "estimated_total_bytes": 46223344556, "error": -0.0272, "oom": false}]}]}

A row matches an estimate when recipe, GPU and fingerprint are equal (the world size is part of the
fingerprint). Rows are only ever appended: several runs of one config are several rows.

The file is input like any other: it is read only when it is a regular file of at most
:data:`MAX_FILE_BYTES`, parsed without NaN/Infinity and with bounded nesting, and every row is checked
against the schema (types, ranges: byte counts in [0, 2**63), finite errors) with the offending path named.
``append`` holds an exclusive lock on ``<file>.lock`` across read, merge and replace, so concurrent
``diagnose --record`` runs all keep their rows; the new file is written to a private temporary file in the
same folder (``mkstemp``) and renamed over the old one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from mbmem_lint.records import dataclass

SCHEMA = "mbmem-lint/measurements/1"
MAX_FILE_BYTES = 64 * 2**20  # a team's measurements are kilobytes; anything this large is not one
MAX_DEPTH = 16  # the schema nests 4 levels; deeper JSON is refused before it is parsed
MAX_INT = 2**63 - 1
LOCK_TIMEOUT_S = 60.0


class MeasurementsError(Exception):
    """The measurements file exists but is not one (exit 2: never overwrite what we cannot read)."""


@dataclass(frozen=True)
class MeasurementKey:
    """What a recorded row and an estimate must share to be shown together."""

    recipe: str
    gpu: str
    fingerprint: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _nesting(text: str) -> int:
    """The deepest nesting of ``text``'s arrays and objects (brackets inside strings are skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def parse(text: str, where: str) -> list[dict[str, Any]]:
    """The rows of a measurements file's text, validated (:class:`MeasurementsError` names what is wrong)."""
    if _nesting(text) > MAX_DEPTH:
        raise MeasurementsError(f"{where}: nested deeper than {MAX_DEPTH} levels: not a measurements file")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise MeasurementsError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("measurements"), list):
        raise MeasurementsError(f"{where}: not a measurements file (expected {{\"schema\": \"{SCHEMA}\", "
                                "\"measurements\": [...]}})")
    rows = data["measurements"]
    for i, r in enumerate(rows):
        problem = row_problem(r)
        if problem is not None:
            raise MeasurementsError(f"{where}: measurements[{i}]{problem} (schema: "
                                    "docs/json-schema/measurements.schema.json)")
    return rows


def load(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a measurements file ([] when it does not exist)."""
    from mbmem_lint.diagnose.inputs import InputFileError, read_regular

    p = Path(path)
    try:
        data = read_regular(str(p), MAX_FILE_BYTES, "measurements file")
    except InputFileError as exc:
        raise MeasurementsError(str(exc)) from None
    if data is None:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MeasurementsError(f"{p}: cannot read: {exc}") from None
    return parse(text, str(p))


def dumps(data: Any) -> str:
    """Strict JSON (no NaN / Infinity: a reader that follows the standard can read it)."""
    return json.dumps(data, indent=2, allow_nan=False)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<path>.lock`` (created beside it, never followed through a symlink) for a
    read-merge-replace of ``path``: concurrent writers take turns."""
    lock_path = path.with_name(path.name + ".lock")
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(lock_path, flags, 0o644)
    try:
        try:
            import fcntl
        except ImportError:  # not POSIX: msvcrt's byte-range lock, retried
            import msvcrt
            import time

            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise MeasurementsError(f"{lock_path}: locked by another run for {LOCK_TIMEOUT_S:.0f} s") from None
                    time.sleep(0.05)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def append(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Append ``rows``: under the file's lock, read it (validated), write old + new rows to a temporary file
    in the same folder and rename it over the file (readers never see half of it, writers never lose a row)."""
    import tempfile

    for i, r in enumerate(rows):
        problem = row_problem(r)
        if problem is not None:
            raise MeasurementsError(f"new row {i}{problem}")
    p = Path(os.path.realpath(path))  # a symlinked file is written through its link (the link stays a link)
    if os.path.lexists(p) and not os.path.isfile(p):
        load(p)  # raises: not a regular file (nothing is created beside a FIFO or a device)
    p.parent.mkdir(parents=True, exist_ok=True)
    with locked(p):
        existing = load(p)
        text = dumps({"schema": SCHEMA, "measurements": existing + rows}) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            if p.exists():
                with suppress(OSError):
                    os.chmod(tmp, os.stat(p).st_mode & 0o777)
            else:
                os.chmod(tmp, 0o644)
            os.replace(tmp, p)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise


# ---------------------------------------------------------------------------------------------- validation
def _int(v: Any, lo: int = 0, hi: int = MAX_INT, null: bool = True) -> str | None:
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        return f"expected an integer{' or null' if null else ''}, got {_show(v)}"
    if not lo <= v <= hi:
        return f"expected an integer in [{lo}, {hi}], got {_show(v)}"
    return None


def _num(v: Any, null: bool = True) -> str | None:
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"expected a number{' or null' if null else ''}, got {_show(v)}"
    if isinstance(v, float) and not math.isfinite(v) or abs(v) > 1e18:
        return f"expected a finite number, got {_show(v)}"
    return None


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else f"expected a string, got {_show(v)}"


def _show(v: Any) -> str:
    text = json.dumps(v)[:40] if isinstance(v, (str, bool)) or v is None else type(v).__name__
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        text = repr(v) if len(repr(v)) <= 24 else f"a {len(str(int(v)))}-digit number" if isinstance(v, int) else repr(v)
    return text


_ROW_KEYS = ("recipe", "overrides", "gpu", "world_size", "fingerprint", "tool_version", "recorded", "logs",
             "iteration", "oom", "throughput", "stages")
_STAGE_BYTES = ("measured_max_allocated_bytes", "measured_max_reserved_bytes", "estimated_allocated_bytes",
                "estimated_total_bytes")


def row_problem(r: Any) -> str | None:
    """What is wrong with a row against the schema (``.key: why``), None when nothing is."""
    if not isinstance(r, dict):
        return f": expected an object, got {_show(r)}"
    for key in _ROW_KEYS:
        if key not in r:
            return f": missing key {key!r}"
    checks: list[tuple[str, str | None]] = [
        ("recipe", _str(r["recipe"])), ("gpu", _str(r["gpu"])), ("fingerprint", _str(r["fingerprint"])),
        ("tool_version", _str(r["tool_version"])), ("recorded", _str(r["recorded"])),
        ("world_size", _int(r["world_size"], lo=1)), ("iteration", _int(r["iteration"])),
        ("oom", None if isinstance(r["oom"], bool) else f"expected true or false, got {_show(r['oom'])}"),
    ]
    for key in ("overrides", "logs"):
        v = r[key]
        checks.append((key, None if isinstance(v, list) and all(isinstance(x, str) for x in v)
                       else f"expected a list of strings, got {_show(v)}"))
    for key, why in checks:
        if why is not None:
            return f".{key}: {why}"
    tp = r["throughput"]
    if tp is not None:
        if not isinstance(tp, dict):
            return f".throughput: expected an object or null, got {_show(tp)}"
        for key in ("iteration", "train_iters"):
            why = _int(tp.get(key))
            if why:
                return f".throughput.{key}: {why}"
        for key in ("elapsed_ms", "tflops_per_gpu"):
            why = _num(tp.get(key))
            if why:
                return f".throughput.{key}: {why}"
    stages = r["stages"]
    if not isinstance(stages, list):
        return f".stages: expected a list, got {_show(stages)}"
    for j, st in enumerate(stages):
        if not isinstance(st, dict):
            return f".stages[{j}]: expected an object, got {_show(st)}"
        for key in ("pp_rank", "ranks", "oom"):
            if key not in st:
                return f".stages[{j}]: missing key {key!r}"
        why = _int(st["pp_rank"], null=False, hi=1 << 20)
        if why:
            return f".stages[{j}].pp_rank: {why}"
        if not isinstance(st["ranks"], list) or any(_int(x, null=False, hi=1 << 31) for x in st["ranks"]):
            return f".stages[{j}].ranks: expected a list of ranks (integers >= 0)"
        for key in _STAGE_BYTES:
            why = _int(st.get(key))
            if why:
                return f".stages[{j}].{key}: {why}"
        why = _num(st.get("error"))
        if why:
            return f".stages[{j}].error: {why}"
        if not isinstance(st["oom"], bool):
            return f".stages[{j}].oom: expected true or false, got {_show(st['oom'])}"
    return None


def key_of(row: dict[str, Any]) -> MeasurementKey | None:
    try:
        return MeasurementKey(str(row["recipe"]), str(row["gpu"]), str(row["fingerprint"]))
    except KeyError:
        return None


def matching(rows: list[dict[str, Any]], key: MeasurementKey) -> list[dict[str, Any]]:
    """Rows recorded for exactly this recipe, GPU and configuration, oldest first."""
    return [r for r in rows if key_of(r) == key]


def row(*, recipe: str, overrides: list[str], gpu: str, world_size: int | None, fingerprint: str, logs: list[str],
        stages: list[dict[str, Any]], iteration: int | None, oom: bool, throughput: dict[str, Any] | None,
        tool_version: str, recorded: str) -> dict[str, Any]:
    """One row of the file, in the documented key order."""
    return {"recipe": recipe, "overrides": overrides, "gpu": gpu, "world_size": world_size,
            "fingerprint": fingerprint, "tool_version": tool_version, "recorded": recorded, "logs": logs,
            "iteration": iteration, "oom": oom, "throughput": throughput, "stages": stages}


def file_for(settings: Any, explicit: str | None) -> Path:
    """The measurements file of a run: ``--measurements``, else ``[tool.mbmem-lint] measurements`` relative
    to the pyproject folder (or the working folder)."""
    if explicit:
        return Path(explicit)
    p = Path(settings.measurements)
    return p if p.is_absolute() else (settings.root or Path.cwd()) / p


def recipe_key(settings: Any, recipe: Any, gpu: str, world_size: int | None) -> MeasurementKey:
    from mbmem_lint.fingerprint import config_fingerprint

    return MeasurementKey(f"{settings.relative(recipe.path)}::{recipe.function}", gpu,
                          config_fingerprint(recipe, world_size))


def latest_for(rows: list[dict[str, Any]], key: MeasurementKey) -> dict[str, Any] | None:
    """The most recent row for ``key``, with the number of matching runs (``"runs"``), or None."""
    hits = matching(rows, key)
    if not hits:
        return None
    return {**hits[-1], "runs": len(hits)}


def render_text(row: dict[str, Any]) -> str:
    """Lines showing a recorded measurement next to an estimate (the estimate itself is not changed)."""
    gib = 1024**3
    runs = row.get("runs", 1)
    lines = [f"measured (recorded {row.get('recorded', '?')}, {runs} run{'s' if runs != 1 else ''} of this exact "
             f"configuration; the estimate above is not adjusted):"]
    for st in row.get("stages", []):
        m, e = st.get("measured_max_allocated_bytes"), st.get("estimated_allocated_bytes")
        if not m:  # unknown, or 0 (nothing measured): no ratio to show
            continue
        err = f" (estimate {(e - m) / m * 100:+.1f}%)" if e else ""
        oom = ", ran out of memory" if st.get("oom") else ""
        lines.append(f"  stage {st.get('pp_rank')}: max allocated {m / gib:.2f} GiB{err}{oom}")
    return "\n".join(lines)


def finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None (what :func:`dumps` can write as strict JSON)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data
