#!/usr/bin/env python3
"""Measured (bench/gpu_calibration/measure.py on one H200) vs estimated (mbmem-lint) per-rank memory.

Run from the repository root with the project's environment:

    .venv/bin/python bench/gpu_calibration/compare.py measured.json [--gpu h200] [--format text|markdown|json]

For every case of ``measured.json`` the matching recipe function (``recipe_function`` in the file, in
``recipes/llama_calibration.py``) is resolved and estimated. What is compared:

- **peak**: measured ``max_memory_allocated`` (max over build and all iterations) vs the estimator's allocator
  total: components of kind ``state``, ``activation`` and ``workspace`` (``StageEstimate.allocated_bytes``;
  ``runtime`` = CUDA context/NCCL and ``reserve`` = fragmentation are outside ``max_memory_allocated``).
- **model state after step 1**: ``memory_allocated()`` after the first ``optimizer.step()`` (weights, fp32 grad
  buffer, fp32 main params, Adam exp_avg/exp_avg_sq, plus small persistent buffers) vs weights + gradients +
  main params + optimizer states.
- **model state after build**: ``memory_allocated()`` before step 1. Torch's Adam creates its states lazily in
  the first step, so this is compared with weights + gradients + main params only.
- **activations**: measured peak over the iterations minus the allocated bytes after step 1 (everything the
  training step adds on top of the persistent state: saved activations, logits/cross-entropy, transients) vs
  the estimator's activation + workspace components.
- **per layer**: median over decoder layers of the allocation growth across one layer's forward (measure.py's
  forward hooks: what the layer keeps for backward plus its output) vs activation component / layers.
- **components**: each state component against the exact buffer sizes measure.py recorded.
- **outside the allocator**: measured ``total - free - reserved`` (CUDA context, NCCL, cuBLAS handles) vs the
  ``runtime`` components, and measured ``peak_reserved - peak_allocated`` vs the fragmentation reserve.

Differences are (estimated - measured) / measured. The estimate is computed in-process through
``mbmem_lint.estimate`` (component kinds available); ``--via cli`` uses ``python -m mbmem_lint estimate
--format json`` instead and classifies components by name.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_RECIPES = "bench/gpu_calibration/recipes/llama_calibration.py"
GIB = 1024**3
STATE = ("weights", "gradients", "main params", "optimizer states")
ALLOCATED_KINDS = ("state", "activation", "workspace")
# Recipe path -> measured.json path, for the configuration cross-check.
CROSS_CHECK = [
    ("model.num_layers", "model.num_layers"), ("model.hidden_size", "model.hidden_size"),
    ("model.ffn_hidden_size", "model.ffn_hidden_size"), ("model.num_attention_heads", "model.num_attention_heads"),
    ("model.num_query_groups", "model.num_query_groups"), ("model.kv_channels", "model.kv_channels"),
    ("model.vocab_size", "model.vocab_size"), ("model.seq_length", "model.seq_length"),
    ("model.recompute_granularity", "model.recompute_granularity"),
    ("model.recompute_method", "model.recompute_method"), ("model.recompute_num_layers", "model.recompute_num_layers"),
    ("model.share_embeddings_and_output_weights", "model.share_embeddings_and_output_weights"),
    ("model.add_bias_linear", "model.add_bias_linear"), ("model.hidden_dropout", "model.hidden_dropout"),
    ("model.masked_softmax_fusion", "model.masked_softmax_fusion"),
    ("model.attention_dropout", "model.attention_dropout"),
    ("model.cross_entropy_loss_fusion", "model.cross_entropy_loss_fusion"),
    ("model.cross_entropy_fusion_impl", "model.cross_entropy_fusion_impl"),
    ("model.attention_softmax_in_fp32", "model.attention_softmax_in_fp32"),
    ("train.micro_batch_size", "train.micro_batch_size"), ("train.global_batch_size", "train.global_batch_size"),
    ("ddp.grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32"),
    ("optimizer.use_distributed_optimizer", "optimizer.use_distributed_optimizer"),
]


def _dig(d: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _kind_by_name(name: str) -> str:
    if name == "cuda context" or name.startswith("nccl buffers"):
        return "runtime"
    if name.startswith("allocator fragmentation"):
        return "reserve"
    if name in STATE:
        return "state"
    if name.startswith("activations") or name.startswith("logits") or name.startswith("embedding activations") \
            or name.startswith("full-recompute"):
        return "activation"
    return "workspace"


# ----------------------------------------------------------------------------------------------------------
# Estimates
# ----------------------------------------------------------------------------------------------------------

def estimates_api(recipe_file: Path, gpu: str, world_size: int) -> dict[str, dict[str, Any]]:
    """function name -> {"components": [(name, bytes, kind)], "values": getter, "assumptions": [...]}"""
    sys.path.insert(0, str(REPO))
    from mbmem_lint.estimate.api import estimate_recipe
    from mbmem_lint.pipeline import resolve_paths
    from mbmem_lint.resolve.resolver import ResolveOptions
    from mbmem_lint.settings import load_settings

    settings = load_settings(recipe_file.parent)
    run = resolve_paths([str(recipe_file)], settings, ResolveOptions(gpu=gpu, world_size=world_size))
    out: dict[str, dict[str, Any]] = {}
    for r in run.recipes:
        est = estimate_recipe(r, gpu=gpu, world_size=world_size)
        stage = max(est.stages, key=lambda s: s.allocated_bytes)
        out[r.function] = {
            "components": [(c.name, int(c.bytes), c.kind) for c in stage.components],
            "get": r.get,
            "assumptions": list(est.assumptions),
            "gpu": est.gpu.name,
        }
    if not out:
        raise RuntimeError(f"no recipe resolved in {recipe_file}: {run.failed or run.diagnostics}")
    return out


def estimates_cli(recipe_file: Path, gpu: str, world_size: int) -> dict[str, dict[str, Any]]:
    cmd = [sys.executable, "-m", "mbmem_lint", "estimate", str(recipe_file), "--gpu", gpu,
           "--world-size", str(world_size), "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    data = json.loads(proc.stdout)
    data = data if isinstance(data, list) else [data]
    out: dict[str, dict[str, Any]] = {}
    for e in data:
        fn = e["recipe"].rsplit("::", 1)[-1]
        stages = e["stages"]

        def alloc(s: dict[str, Any]) -> int:
            return sum(c["bytes"] for c in s["components"] if _kind_by_name(c["name"]) in ALLOCATED_KINDS)

        stage = max(stages, key=alloc)
        out[fn] = {"components": [(c["name"], int(c["bytes"]), _kind_by_name(c["name"])) for c in stage["components"]],
                   "get": None, "assumptions": e.get("assumptions", []), "gpu": e["gpu"]["name"]}
    return out


# ----------------------------------------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------------------------------------

def _pct(est: float | None, meas: float | None) -> float | None:
    if est is None or meas is None or meas == 0:
        return None
    return (est - meas) / meas * 100.0


def _norm(v: Any) -> Any:
    if isinstance(v, str):
        return v.rsplit(".", 1)[-1] if v.startswith("torch.") else v
    return v


def cross_check(case: dict[str, Any], get: Any) -> list[str]:
    if get is None:
        return []
    cfg = case.get("config") or {}
    problems = []
    for rpath, mpath in CROSS_CHECK:
        m = _dig(cfg, mpath)
        if m is None:
            continue
        try:
            r = get(rpath)
        except Exception:  # noqa: BLE001
            r = None
        if rpath == "model.recompute_granularity" and m is None:
            continue
        if _norm(r) != _norm(m) and not (r is None and m in (None, False)):
            problems.append(f"{rpath}: recipe {r!r} != measured {m!r}")
    att = _dig(cfg, "model.attention")
    if att is not None:
        backend = str(get("model.attention_backend"))
        flash_recipe = "unfused" not in backend and "local" not in backend
        if flash_recipe != (att == "sdpa_flash"):
            problems.append(f"model.attention_backend: recipe {backend!r} vs measured attention {att!r}")
    return problems


def compare_case(name: str, case: dict[str, Any], est: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"case": name, "status": case.get("status"), "recipe_function": case.get("recipe_function"),
                           "description": case.get("description")}
    if case.get("status") != "ok":
        row["note"] = case.get("error") or case.get("reason") or ""
        mem = case.get("memory") or {}
        if mem.get("at_error"):
            row["at_error_max_allocated"] = mem["at_error"].get("max_allocated_since_reset")
    if est is None:
        row["note"] = (row.get("note", "") + " no estimate for this recipe function").strip()
        return row
    comps = est["components"]
    by = {n: b for n, b, _k in comps}
    kinds: dict[str, int] = {}
    for _n, b, k in comps:
        kinds[k] = kinds.get(k, 0) + b
    e_alloc = sum(b for _n, b, k in comps if k in ALLOCATED_KINDS)
    e_state = sum(by.get(n, 0) for n in STATE)
    e_build = sum(by.get(n, 0) for n in ("weights", "gradients", "main params"))
    e_act = kinds.get("activation", 0) + kinds.get("workspace", 0)
    row["estimate"] = {"allocated": e_alloc, "state": e_state, "state_without_adam": e_build, "activation_workspace": e_act,
                       "runtime": kinds.get("runtime", 0), "reserve": kinds.get("reserve", 0),
                       "components": {n: b for n, b, _k in comps}}
    if case.get("status") != "ok":
        return row
    mem = case.get("memory") or {}
    buf = case.get("buffers") or {}
    peak = mem.get("peak_allocated_bytes")
    peak_steps = mem.get("peak_allocated_steps_bytes") or peak
    after1 = mem.get("allocated_after_step1_bytes")
    build = mem.get("allocated_after_build_bytes")
    m_act = (peak_steps - after1) if (peak_steps is not None and after1 is not None) else None
    non_alloc = _dig(mem, "final.mem_get_info.non_allocator")
    frag = (mem["peak_reserved_bytes"] - peak) if mem.get("peak_reserved_bytes") is not None and peak else None
    deltas = _dig(mem, "forward_allocation_deltas.layers") or []
    per_layer_m = sorted(deltas)[len(deltas) // 2] if deltas else None
    owners = _dig(mem, "saved_tensor_census.bytes_by_owner") or {}
    layer_saved = sorted(v for k, v in owners.items() if k != "outside")
    per_layer_census = layer_saved[len(layer_saved) // 2] if layer_saved else None
    act_comp = next(((n, b) for n, b, _k in comps if n.startswith("activations (")), None)
    per_layer_e = None
    if act_comp is not None and case.get("config", {}).get("model", {}).get("recompute_granularity") != "full":
        n_layers = _dig(case, "config.model.num_layers")
        per_layer_e = act_comp[1] / n_layers if n_layers else None
    row["measured"] = {"per_layer_forward_delta_median": per_layer_m, "per_layer_saved_census_median": per_layer_census,
                       "saved_outside_layers": owners.get("outside"), "peak_allocated": peak, "peak_allocated_steps": peak_steps, "after_step1": after1,
                       "after_build": build, "activation_transient": m_act, "non_allocator": non_alloc,
                       "reserved_minus_allocated_peak": frag, "peak_reserved": mem.get("peak_reserved_bytes"),
                       "saved_for_backward_per_microbatch": mem.get("saved_for_backward_bytes_per_microbatch")}
    row["estimate"]["per_layer_activation"] = per_layer_e
    row["diff_pct"] = {"per_layer": _pct(per_layer_e, per_layer_census if per_layer_census is not None else per_layer_m), "peak": _pct(e_alloc, peak), "state_after_step1": _pct(e_state, after1),
                       "state_after_build": _pct(e_build, build), "activations": _pct(e_act, m_act),
                       "runtime": _pct(kinds.get("runtime", 0), non_alloc)}
    meas_comp = {"weights": buf.get("model_param_bytes"), "gradients": buf.get("grad_buffer_bytes"),
                 "main params": buf.get("optimizer_param_bytes"), "optimizer states": buf.get("adam_state_bytes")}
    row["components"] = {n: {"measured": meas_comp[n], "estimated": by.get(n), "diff_pct": _pct(by.get(n), meas_comp[n])}
                         for n in STATE}
    row["config_mismatch"] = cross_check(case, est.get("get"))
    return row


def _g(v: Any) -> str:
    return "-" if v is None else f"{v / GIB:.2f}"


def _m(v: Any) -> str:
    return "-" if v is None else f"{v / 2**20:.1f}"


def _p(v: Any) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def render(rows: list[dict[str, Any]], meta: dict[str, Any], fmt: str) -> str:
    md = fmt == "markdown"

    def table(headers: list[str], body: list[list[str]]) -> list[str]:
        if md:
            out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(headers)))
                   + "|"]
            out += ["| " + " | ".join(r) + " |" for r in body]
            return out
        widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
        out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
        out.append("  ".join("-" * w for w in widths))
        out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in body]
        return out

    lines: list[str] = []
    if meta.get("fake"):
        lines += ["*** FAKE measured.json (hand-made test data, not a measurement) ***", ""]
    env = meta.get("env") or {}
    lines.append(f"measured: {meta.get('path')}  gpu={env.get('gpu')} torch={env.get('torch')} "
                 f"megatron-core={env.get('megatron_core')}  estimate: gpu={meta.get('est_gpu')} world_size=1 "
                 f"via {meta.get('via')}  (GiB = 2^30 B; diff = (estimated - measured) / measured)")
    lines.append("")
    ok = [r for r in rows if r.get("measured")]
    lines.append("Peak allocated (torch max_memory_allocated) vs estimated allocator total (state+activation+workspace)")
    lines += table(["case", "measured peak", "estimated", "diff", "meas. state@step1", "est. state", "diff",
                    "meas. state@build", "est. w+g+main", "diff"],
                   [[r["case"], _g(r["measured"]["peak_allocated"]), _g(r["estimate"]["allocated"]), _p(r["diff_pct"]["peak"]),
                     _g(r["measured"]["after_step1"]), _g(r["estimate"]["state"]), _p(r["diff_pct"]["state_after_step1"]),
                     _g(r["measured"]["after_build"]), _g(r["estimate"]["state_without_adam"]),
                     _p(r["diff_pct"]["state_after_build"])] for r in ok])
    lines.append("")
    lines.append("Activations: measured (peak over iterations - allocated after step 1) vs estimated activation+workspace")
    lines += table(["case", "measured", "estimated", "diff", "saved/mb", "layer saved MiB", "layer dalloc MiB",
                    "layer est. MiB", "diff", "outside layers MiB"],
                   [[r["case"], _g(r["measured"]["activation_transient"]), _g(r["estimate"]["activation_workspace"]),
                     _p(r["diff_pct"]["activations"]), _g(r["measured"]["saved_for_backward_per_microbatch"]),
                     _m(r["measured"]["per_layer_saved_census_median"]),
                     _m(r["measured"]["per_layer_forward_delta_median"]), _m(r["estimate"]["per_layer_activation"]),
                     _p(r["diff_pct"]["per_layer"]), _m(r["measured"]["saved_outside_layers"])] for r in ok])
    lines.append("  saved/mb: allocated at the loss - allocated at forward start (GiB). Per layer (median over decoder "
                 "layers): 'saved' = distinct storages autograd saved while the layer ran (saved_tensors_hooks); "
                 "'dalloc' = memory_allocated() growth across the layer's forward (saved + its output); 'est.' = "
                 "activation component / layers (PP=1: one microbatch in flight); diff = est. vs 'saved' "
                 "(else 'dalloc'). Not shown under full recompute. 'outside layers' = saved by embedding/RoPE, final "
                 "norm, output layer and cross entropy (MiB).")
    lines.append("")
    lines.append("Model-state components: measured buffer sizes vs estimated components")
    body = []
    for r in ok:
        for n in STATE:
            c = r["components"][n]
            body.append([f"{r['case']} {n}", _g(c["measured"]), _g(c["estimated"]), _p(c["diff_pct"])])
    lines += table(["case component", "measured", "estimated", "diff"], body)
    lines.append("")
    lines.append("Outside the allocator: measured (total - free - reserved) at the end vs estimated runtime components; "
                 "measured (peak reserved - peak allocated) vs estimated fragmentation reserve")
    lines += table(["case", "meas. non-allocator", "est. runtime", "diff", "meas. reserved-allocated", "est. reserve"],
                   [[r["case"], _g(r["measured"]["non_allocator"]), _g(r["estimate"]["runtime"]), _p(r["diff_pct"]["runtime"]),
                     _g(r["measured"]["reserved_minus_allocated_peak"]), _g(r["estimate"]["reserve"])] for r in ok])
    bad = [r for r in rows if r.get("status") != "ok"]
    if bad:
        lines.append("")
        lines.append("Cases without a measurement:")
        for r in bad:
            extra = ""
            if r.get("at_error_max_allocated"):
                extra = f" (max allocated before the error {_g(r['at_error_max_allocated'])} GiB)"
            est = f"; estimated allocator total {_g(r['estimate']['allocated'])} GiB" if r.get("estimate") else ""
            lines.append(f"  {r['case']}: {r.get('status')}: {r.get('note', '')}{extra}{est}")
    mism = [(r["case"], p) for r in ok for p in r.get("config_mismatch", [])]
    lines.append("")
    if mism:
        lines.append("CONFIG MISMATCH between measure.py and the recipe (fix before trusting the rows):")
        lines += [f"  {c}: {p}" for c, p in mism]
    elif meta.get("via") == "api":
        lines.append("config cross-check: recipe values match measure.py's recorded config for every measured case")
    else:
        lines.append("config cross-check: skipped (--via cli)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured", nargs="?", default="measured.json", help="measure.py output")
    ap.add_argument("--recipe-file", default=None, help=f"default: the file named in measured.json ({DEFAULT_RECIPES})")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--via", choices=["api", "cli", "auto"], default="auto")
    ap.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    args = ap.parse_args(argv)

    mpath = Path(args.measured)
    measured = json.loads(mpath.read_text())
    rfile = Path(args.recipe_file or measured.get("recipe_file") or DEFAULT_RECIPES)
    if not rfile.is_absolute():
        rfile = REPO / rfile
    via = args.via
    if via in ("api", "auto"):
        try:
            ests = estimates_api(rfile, args.gpu, args.world_size)
            via = "api"
        except Exception as exc:  # noqa: BLE001
            if args.via == "api":
                raise
            print(f"in-process estimate failed ({type(exc).__name__}: {exc}); using the CLI", file=sys.stderr)
            ests = estimates_cli(rfile, args.gpu, args.world_size)
            via = "cli"
    else:
        ests = estimates_cli(rfile, args.gpu, args.world_size)
    rows = []
    for name, case in (measured.get("cases") or {}).items():
        rows.append(compare_case(name, case, ests.get(case.get("recipe_function") or "")))
    env: dict[str, Any] = next((c["env"] for c in measured.get("cases", {}).values() if c.get("env")), {})
    meta = {"path": str(mpath), "fake": measured.get("fake", False), "env": env, "via": via,
            "est_gpu": next((e["gpu"] for e in ests.values()), args.gpu)}
    if args.format == "json":
        for r in rows:
            if r.get("estimate"):
                r["estimate"].pop("get", None)
        print(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str))
    else:
        sys.stdout.write(render(rows, meta, args.format))
    if measured.get("dry_run"):
        print("note: measured.json comes from a --dry-run (tiny CPU shapes): the numbers are not comparable",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
