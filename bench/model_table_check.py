"""Differential check of the model table: mbmem-lint's conversion of each bundled config.json (Bridge's conversion
code run in the abstract interpreter, ``mbmem_lint/data/models.pack``) against the provider the real
megatron-bridge 0.6.2 builds from the same config.

Not part of CI. Needs the Python 3.12 venv with megatron-bridge 0.6.2 + megatron-core 0.19.2 + transformers
(``--venv``, default ``.cache/diffcheck-venv``; see docs/differential-check.md). Run from this repo's venv:

    python bench/model_table_check.py [--venv /work/venvs/mb062] [--json OUT] [--id ORG/NAME ...]

For every field mbmem-lint's entry states (unknown values and symbols left out), the real provider's value is
``agree`` / ``disagree`` / ``missing`` (the real provider has no such attribute). Partial configs are compared
only on what they state.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from differential_check import same, same_name  # noqa: E402

from mbmem_lint.resolve.hf_models import bundled_configs, hf_class_view, read_models  # noqa: E402

DEFAULT_VENV = REPO / ".cache" / "diffcheck-venv"
HARNESS = REPO / "bench" / "diffcheck" / "convert_real.py"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default=str(DEFAULT_VENV))
    ap.add_argument("--json", help="write the comparison as JSON")
    ap.add_argument("--id", action="append", help="only these ids")
    args = ap.parse_args(argv)
    models = read_models((REPO / "mbmem_lint" / "data" / "models.pack").read_bytes())["models"]
    configs = {}
    for hf_id, entry in bundled_configs().items():
        if hf_id in models and (not args.id or hf_id in args.id):
            view, defaults = hf_class_view(entry["config"])
            # The real config class supplies its defaults itself; the derived attributes (Nemotron-H patterns
            # from layers_block_type) are what its class exposes.
            configs[hf_id] = {"config": {**defaults, **view}}
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path, out = Path(tmp) / "configs.json", Path(tmp) / "real.json"
        cfg_path.write_text(json.dumps(configs))
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([str(Path(args.venv) / "bin" / "python"), str(HARNESS), "--configs", str(cfg_path),
                               "--out", str(out)], env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            sys.stderr.write(proc.stderr[-6000:])
            return 2
        real = json.loads(out.read_text())
    totals: Counter[str] = Counter()
    report: dict[str, Any] = {"ids": {}, "errors": real["errors"], "config_classes": real["config_classes"]}
    for hf_id in sorted(configs):
        mine = models[hf_id]
        r = real["providers"].get(hf_id)
        row: dict[str, Any] = {"provider": [mine["provider"], r["class"] if r else None], "disagree": {}, "missing": []}
        counts: Counter[str] = Counter()
        if r is None:
            report["ids"][hf_id] = {**row, "error": real["errors"].get(hf_id)}
            totals["conversion errors"] += 1
            continue
        if r["class"] != mine["provider"]:
            counts["provider class differs"] += 1
        for name, value in mine["fields"].items():
            if "'unknown'" in repr(value):  # mbmem-lint does not know it (a partial config): nothing to compare
                continue
            if isinstance(value, dict) and set(value) in ({"unknown"}, {"symbol"}):
                if "symbol" in value and name in r["values"] and same_name(r["values"][name], value["symbol"]):
                    counts["agree"] += 1
                continue
            if name not in r["values"]:
                counts["missing"] += 1
                row["missing"].append(name)
                continue
            got = r["values"][name]
            if isinstance(got, list) and isinstance(value, list) or not isinstance(got, (dict, list)):
                ok = same(got, value)
            else:
                ok = same(got, value) or not isinstance(value, dict)
            if ok or (isinstance(got, str) and got.startswith("<opaque") and isinstance(value, dict)):
                counts["agree"] += 1
            else:
                counts["disagree"] += 1
                row["disagree"][name] = {"real": got, "mbmem": value}
        row["counts"] = dict(counts)
        totals.update(counts)
        report["ids"][hf_id] = row
    print(f"{len(configs)} bundled configs; real conversion errors: {len(real['errors'])}")
    print("totals: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    for hf_id, row in report["ids"].items():
        if row.get("error"):
            print(f"  {hf_id}: real Bridge failed: {row['error']}")
        elif row["disagree"] or row["missing"] or row["provider"][0] != row["provider"][1]:
            print(f"  {hf_id} [{report['config_classes'].get(hf_id)}]: {row['counts']}")
            if row["provider"][0] != row["provider"][1]:
                print(f"      provider: mbmem {row['provider'][0]} real {row['provider'][1]}")
            for name, d in list(row["disagree"].items())[:12]:
                print(f"      {name}: real {str(d['real'])[:100]} mbmem {str(d['mbmem'])[:100]}")
            if row["missing"]:
                print(f"      not on the real provider: {', '.join(row['missing'][:12])}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
