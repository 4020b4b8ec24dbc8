"""Every user-visible output of mbmem-lint on the recipe corpora of each shipped release, written to a folder.

Two snapshots (before and after a change) compared with ``diff -r`` show what a change did to the outputs:
a refactoring must leave them byte-identical; a behaviour fix names the lines it changes.

    .venv/bin/python bench/output_snapshot.py OUT [--versions 0.4.2,0.5.1,0.6.2] [--jobs 2] [--quick]
    diff -r BEFORE AFTER

For each release (the wheel's ``recipes/`` and ``perf_recipes/``, downloaded by
:func:`mbmem_lint.dev.corpus.ensure_corpus`; set MBMEM_CORPUS_DIR / MBMEM_CORPORA_DIR to reuse unpacked
copies), run from the corpus folder with relative paths so the outputs do not depend on where it lies:

* ``check`` in every format (text, json, github, sarif, markdown), ``--fix --diff`` with and without
  ``--unsafe-fixes``;
* ``resolve --format json`` of every file;
* ``estimate --format json`` and text of every file that has recipes (a file per corpus file);
* ``plan --format json`` (and text, with diffs) of every recipe ``check`` reports MBM701 on (``--quick``:
  the first 10 per release).

Everything runs through the command line (the contract users see), as subprocesses of this interpreter
(``python -m mbmem_lint``), ``--jobs`` at a time. Timings inside JSON outputs (keys ending in ``_s`` or
``seconds``) are replaced by ``"<t>"``; nothing else is normalised.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mbmem_lint.dev.corpus import ensure_corpus  # noqa: E402

SHIPPED = ("0.4.2", "0.5.1", "0.6.2")
CHECK_FORMATS = ("text", "json", "github", "sarif", "markdown")
_TIMING_KEY = re.compile(r"(_s|seconds|_ms)$")


def _mask_timings(value: object) -> object:
    if isinstance(value, dict):
        return {k: ("<t>" if _TIMING_KEY.search(k) and isinstance(v, (int, float)) else _mask_timings(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_timings(v) for v in value]
    return value


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "mbmem_lint", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, errors="replace")
    return proc.returncode, proc.stdout, proc.stderr


def _normalise(stdout: str, is_json: bool) -> str:
    if not is_json:
        return stdout
    try:
        data = json.loads(stdout)
    except ValueError:
        return stdout
    return json.dumps(_mask_timings(data), indent=1, sort_keys=True) + "\n"


def _job(name: str, args: list[str], cwd: Path, env: dict[str, str], out: Path) -> str:
    rc, stdout, stderr = _run(args, cwd, env)
    is_json = "json" in args or "sarif" in args
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"$ mbmem-lint {' '.join(args)}\nexit {rc}\n--- stderr\n{stderr}--- stdout\n"
                    + _normalise(stdout, is_json))
    return name


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for sub in ("recipes", "perf_recipes") if (root / sub).is_dir()
                  for p in (root / sub).rglob("*.py"))


def snapshot(out: Path, versions: list[str], jobs: int, quick: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB")}
    env.update(NO_COLOR="1", PYTHONHASHSEED="0", COLUMNS="100")
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for version in versions:
            root = ensure_corpus(version=version) / "megatron" / "bridge"
            vout = out / version
            paths = [p for p in ("recipes", "perf_recipes") if (root / p).is_dir()]
            base = ["--megatron-bridge-version", version]
            futures = []
            for fmt in CHECK_FORMATS:
                futures.append(pool.submit(_job, f"check.{fmt}", ["check", *paths, "--format", fmt, *base],
                                           root, env, vout))
            futures.append(pool.submit(_job, "check.fix-diff", ["check", *paths, "--fix", "--diff", *base],
                                       root, env, vout))
            futures.append(pool.submit(_job, "check.fix-diff-unsafe",
                                       ["check", *paths, "--fix", "--diff", "--unsafe-fixes", *base],
                                       root, env, vout))
            files = _files(root)
            futures.append(pool.submit(_job, "resolve.json", ["resolve", *files, "--format", "json", *base],
                                       root, env, vout))
            for f in files:
                for fmt in ("json", "text"):
                    futures.append(pool.submit(_job, f"estimate/{f.replace('/', '__')}.{fmt}",
                                               ["estimate", f, "--format", fmt, *base], root, env, vout))
            for fut in futures:
                fut.result()
            # plans for the recipes check reports as not fitting
            check_json = (vout / "check.json").read_text().split("--- stdout\n", 1)[1]
            # the recipe's file: the finding may sit in a helper, so find the corpus file defining the function
            wanted = {d["function"] for d in json.loads(check_json)["diagnostics"]
                      if d["code"] == "MBM701" and d.get("function")}
            targets = sorted(f"{f}::{fn}" for f in files for fn in wanted
                             if re.search(rf"^def {fn}\(", (root / f).read_text(), re.M))
            if quick:
                targets = targets[:10]
            futures = []
            for t in targets:
                slug = t.replace("/", "__").replace("::", "--")
                futures.append(pool.submit(_job, f"plan/{slug}.json", ["plan", t, "--format", "json", *base],
                                           root, env, vout))
                futures.append(pool.submit(_job, f"plan/{slug}.text", ["plan", t, *base], root, env, vout))
            for fut in futures:
                fut.result()
            print(f"{version}: {len(files)} files, {len(targets)} plans -> {vout}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--versions", default=",".join(SHIPPED))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="at most 10 plans per release")
    args = parser.parse_args()
    snapshot(args.out, args.versions.split(","), args.jobs, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
