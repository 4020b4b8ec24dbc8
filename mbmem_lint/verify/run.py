"""``mbmem-lint verify``: build recipes for real and compare them with the static resolution.

**This runs the user's recipe code** (the one command that does; linting never does). For each recipe
function of the given files, mbmem-lint

1. resolves it statically (the usual resolver, against the Megatron Bridge data of the version the
   ``--python`` interpreter has installed, unless a version or source tree is given);
2. builds it for real in a subprocess of ``--python`` (:mod:`mbmem_lint.verify.realbuild`: Transformer
   Engine and Hugging Face downloads replaced by test doubles, ``validate()`` not called);
3. lists every field whose real value differs from the static one (:mod:`mbmem_lint.verify.compare`),
   and puts the estimate's model-state bytes (weights, gradients, optimizer states of the most-loaded
   stage) beside Megatron Bridge's own ``estimate_training_memory``.

A ``--python`` that cannot import ``megatron.bridge`` is a :class:`VerifyError` (exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from mbmem_lint.records import dataclass, field
from mbmem_lint.report.common import fmt_gib
from mbmem_lint.resolve.resolved import ResolvedRecipe
from mbmem_lint.resolve.resolver import ResolveOptions
from mbmem_lint.resolve.versions import BridgeData
from mbmem_lint.settings import Settings
from mbmem_lint.verify.compare import CLASSES, classify, norm

REALBUILD = Path(__file__).resolve().with_name("realbuild.py")
EXIT_NO_BRIDGE = 3  # realbuild.EXIT_NO_BRIDGE (that file is not imported here)
# How realbuild.py starts: run by path with an empty sys.path[0] dropped, so nothing of mbmem-lint and not
# the working folder shadows what the recipe imports.
BOOT = ("import runpy, sys; sys.path[:] = [p for p in sys.path if p]; path = sys.argv[1]; "
        "sys.argv = sys.argv[1:]; runpy.run_path(path, run_name='__main__')")
_VERSION_PROBE = ("import importlib.metadata as m\ntry:\n    print(m.version('megatron-bridge'))\n"
                  "except m.PackageNotFoundError:\n    pass\n")


class VerifyError(Exception):
    """The recipes cannot be built: no such interpreter, or it cannot import Megatron Bridge (exit 2)."""


@dataclass
class FieldDiff:
    """A field whose real value differs from mbmem-lint's, and where mbmem-lint took its value from."""

    path: str
    real: Any
    static: Any
    origin: str
    where: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "real": self.real, "static": self.static, "origin": self.origin,
                "where": self.where}


@dataclass
class RecipeCheck:
    """One recipe function: whether it was built, the comparison counts and differences, and model-state
    bytes by mbmem-lint and by Bridge's estimator."""

    path: str
    function: str
    status: str  # compared | error | skipped | not-called | static-only
    message: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    diffs: list[FieldDiff] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    model_state: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "function": self.function, "status": self.status, "message": self.message,
                "counts": dict(self.counts), "differences": [d.to_json() for d in self.diffs],
                "unknown": list(self.unknown), "missing": list(self.missing), "model_state": dict(self.model_state)}


@dataclass
class VerifyReport:
    """Every recipe checked, with the interpreter's versions and the static data used."""

    python: str
    versions: dict[str, str]
    bridge: BridgeData | None
    recipes: list[RecipeCheck] = field(default_factory=list)
    stubbed_modules: list[str] = field(default_factory=list)

    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for r in self.recipes:
            out.update(r.counts)
        return out

    def agreement(self) -> float | None:
        """Share of compared fields that agree, among those mbmem-lint knows (agree + disagree)."""
        t = self.totals()
        known = t["agree"] + t["disagree"]
        return t["agree"] / known if known else None

    def to_json(self) -> dict[str, Any]:
        t = self.totals()
        return {"python": self.python, "versions": dict(self.versions),
                "megatron_bridge": self.bridge.to_json() if self.bridge is not None else None,
                "totals": {k: t[k] for k in CLASSES}, "agreement": self.agreement(),
                "stubbed_modules": list(self.stubbed_modules), "recipes": [r.to_json() for r in self.recipes]}


def interpreter_bridge_version(python: str) -> str | None:
    """The ``megatron-bridge`` version installed for ``python`` (its metadata; nothing is imported)."""
    try:
        proc = subprocess.run([python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    out = proc.stdout.strip()
    return out.splitlines()[-1] if proc.returncode == 0 and out else None


def _check_python(python: str) -> None:
    """A path (not a bare command name, found on PATH when run) must be an executable file."""
    is_path = os.sep in python or bool(os.altsep and os.altsep in python)
    if is_path and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise VerifyError(f"--python {python}: no such executable")


def verify(targets: list[tuple[str, str | None]], settings: Settings, options: ResolveOptions, *,
           python: str | None = None, timeout: int = 120) -> VerifyReport:
    """Build and compare the recipes of ``targets`` (``(file, function or None)``) with ``python``
    (default: this interpreter)."""
    from mbmem_lint.pipeline import resolve_paths
    from mbmem_lint.resolve.hf_models import load_model_table

    python = python or sys.executable
    _check_python(python)
    if not (options.megatron_bridge_version or options.megatron_bridge_src
            or settings.megatron_bridge_version or settings.megatron_bridge_src):
        # Compare against the data of the Bridge that builds the recipes.
        installed = interpreter_bridge_version(python)
        if installed:
            options = _with(options, megatron_bridge_version=installed, megatron_bridge_source="python")
    recipes: list[ResolvedRecipe] = []
    failed: dict[tuple[str, str], str] = {}
    bridge = None
    for file, function in targets:
        run = resolve_paths([file], settings, _with(options, function=function))
        bridge = run.bridge
        recipes.extend(run.recipes)
        for f in run.failed:  # "path::function: reason"
            head, _, reason = f.partition(": ")
            path, _, fn = head.partition("::")
            if function is None or fn == function:
                failed[(path, fn)] = reason
    models = {k: {"provider": e.provider, "fields": e.fields}
              for k, e in load_model_table(settings.models or None, settings.root).items()}
    report = VerifyReport(python=python, versions={}, bridge=bridge)
    by_file: dict[str, list[ResolvedRecipe]] = {}
    for r in recipes:
        by_file.setdefault(r.path, []).append(r)
    for path, _fn in failed:
        by_file.setdefault(path, [])
    for path in sorted(by_file):
        rs = by_file[path]
        names = [r.function for r in rs] + [fn for p, fn in failed if p == path]
        real = _build(python, path, names, {r.function: r.target.world_size for r in rs}, models, timeout)
        report.versions = real.get("versions", report.versions)
        report.stubbed_modules = sorted(set(report.stubbed_modules) | set(real.get("stubbed_modules", [])))
        for r in rs:
            report.recipes.append(_check(r, real))
        for p, fn in failed:
            if p == path:
                report.recipes.append(_check_unresolved(path, fn, failed[(p, fn)], real))
    return report


def _with(options: ResolveOptions, **changes: Any) -> ResolveOptions:
    import dataclasses

    return dataclasses.replace(options, **changes)


def _build(python: str, path: str, functions: list[str], world_sizes: dict[str, int | None],
           models: dict[str, Any], timeout: int) -> dict[str, Any]:
    """Run :mod:`realbuild` on one file in ``python``; its JSON dump."""
    with tempfile.TemporaryDirectory(prefix="mbmem-verify-") as tmp:
        models_file, out = Path(tmp) / "models.json", Path(tmp) / "real.json"
        models_file.write_text(json.dumps(models), encoding="utf-8")
        cmd = [python, "-c", BOOT, str(REALBUILD), "--file", str(Path(path).resolve()),
               "--functions", json.dumps(functions), "--world-sizes", json.dumps(world_sizes),
               "--models", str(models_file), "--out", str(out), "--timeout", str(timeout)]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  timeout=timeout * max(1, len(functions)) + 300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise VerifyError(f"--python {python}: cannot run it: {exc}") from exc
        data: dict[str, Any] = {}
        if out.is_file():
            try:
                data = json.loads(out.read_text(encoding="utf-8"))
            except ValueError:
                data = {}
    if proc.returncode == EXIT_NO_BRIDGE or "bridge_import_error" in data:
        raise VerifyError(
            f"Megatron Bridge cannot be imported by {python}: {data.get('bridge_import_error', 'unknown error')}. "
            "verify builds recipes in an interpreter that has megatron-bridge, megatron-core and torch "
            "(pip install 'mbmem-lint[verify]' there, or pass --python PATH)")
    if proc.returncode != 0 or "recipes" not in data:
        tail = " ".join((proc.stderr or proc.stdout or "").split()[-60:])
        raise VerifyError(f"building {path} with {python} failed (exit {proc.returncode}): {tail}")
    return data


def _check_unresolved(path: str, function: str, reason: str, real: dict[str, Any]) -> RecipeCheck:
    status, message = _real_status(function, real)
    if status == "compared":
        status, message = "static-only", f"built for real, but mbmem-lint could not resolve it: {reason}"
    return RecipeCheck(path, function, status, message)


def _real_status(function: str, real: dict[str, Any]) -> tuple[str, str]:
    if "import_error" in real:
        return "error", f"the file raised on import: {real['import_error']}"
    for key, status in (("errors", "error"), ("skipped", "skipped"), ("not_called", "not-called")):
        if function in real.get(key, {}):
            return status, str(real[key][function])
    if function not in real.get("recipes", {}):
        return "not-called", "not built"
    return "compared", ""


def _check(r: ResolvedRecipe, real: dict[str, Any]) -> RecipeCheck:
    status, message = _real_status(r.function, real)
    check = RecipeCheck(r.path, r.function, status, message)
    if status != "compared":
        return check
    rec = real["recipes"][r.function]
    counts: Counter[str] = Counter()
    for path, value in rec["fields"].items():
        if path == "env_vars":
            continue
        cls, mine, _by_name = classify(path, value, r)
        counts[cls] += 1
        if cls == "disagree":
            f = r.fields[path]
            check.diffs.append(FieldDiff(path, value, norm(mine), f.origin, f"{f.location.path}:{f.location.line}"))
        elif cls == "unknown":
            check.unknown.append(path)
        elif cls == "missing":
            check.missing.append(path)
    check.counts = {k: counts[k] for k in CLASSES}
    check.model_state = _model_state(r, rec.get("bridge_estimate") or {})
    return check


def _model_state(r: ResolvedRecipe, bridge: dict[str, Any]) -> dict[str, Any]:
    """mbmem-lint's model-state bytes (weights + gradients + optimizer states of the most-loaded stage)
    beside Bridge's ``estimate_training_memory``; None with the reason where one is unavailable."""
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.estimate.gpus import UnknownGpuError
    from mbmem_lint.estimate.types import EstimateUnavailable

    out: dict[str, Any] = {"mbmem_bytes": None, "bridge_bytes": bridge.get("model_state_bytes")}
    try:
        est = estimate_recipe(r)
        out["mbmem_bytes"] = max(sum(c.bytes for c in s.components if c.kind == "state") for s in est.stages)
    except EstimateUnavailable as exc:
        out["mbmem_note"] = exc.reason
    except UnknownGpuError as exc:
        out["mbmem_note"] = str(exc)
    if "unavailable" in bridge:
        out["bridge_note"] = bridge["unavailable"]
    if out["mbmem_bytes"] and out["bridge_bytes"]:
        out["difference"] = (out["mbmem_bytes"] - out["bridge_bytes"]) / out["bridge_bytes"]
    return out


def render_text(report: VerifyReport) -> str:
    """The report for a terminal: per recipe the counts, each differing field, the model-state pair."""
    lines: list[str] = []
    v = report.versions
    lines.append(f"built with {report.python}: megatron-bridge {v.get('megatron-bridge', '?')}, megatron-core "
                 f"{v.get('megatron-core', '?')}, torch {v.get('torch', '?')}, Python {v.get('python', '?')}"
                 + (f"; doubles for {', '.join(report.stubbed_modules)}" if report.stubbed_modules else ""))
    if report.bridge is not None:
        lines.append(f"static data: {report.bridge.describe()}")
    for c in report.recipes:
        lines.append("")
        lines.append(f"{c.path}::{c.function}: {c.status}" + (f" ({c.message})" if c.message else ""))
        if c.status != "compared":
            continue
        lines.append("  fields: " + ", ".join(f"{c.counts.get(k, 0)} {k}" for k in CLASSES))
        for d in c.diffs:
            lines.append(f"  differs: {d.path}: real {json.dumps(d.real, default=str)[:80]}, static "
                         f"{json.dumps(d.static, default=str)[:80]} ({d.origin} {d.where})")
        ms = c.model_state
        ours = fmt_gib(ms["mbmem_bytes"], 2) if ms.get("mbmem_bytes") else f"n/a ({ms.get('mbmem_note', '')})"
        theirs = (fmt_gib(ms["bridge_bytes"], 2) if ms.get("bridge_bytes")
                  else f"n/a ({ms.get('bridge_note', '')})")
        diff = f", {ms['difference']:+.1%}" if "difference" in ms else ""
        lines.append(f"  model state (weights+grads+optimizer, most-loaded stage): mbmem-lint {ours}, "
                     f"Bridge estimate_training_memory {theirs}{diff}")
    t = report.totals()
    agreement = report.agreement()
    lines.append("")
    lines.append(f"{sum(1 for c in report.recipes if c.status == 'compared')} of {len(report.recipes)} recipes "
                 f"built and compared; fields: " + ", ".join(f"{t[k]} {k}" for k in CLASSES)
                 + (f"; {agreement:.2%} agree where mbmem-lint knows the value" if agreement is not None else ""))
    return "\n".join(lines) + "\n"
