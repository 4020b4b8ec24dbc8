"""Build every megatron-bridge 0.6.2 corpus recipe for real (CPU, no network) and dump it flattened.

Runs in the Python 3.12 venv that holds megatron-bridge 0.6.2 + megatron-core 0.19.2 (see
``bench/differential_check.py``, which starts it as a subprocess):

    .cache/diffcheck-venv/bin/python bench/diffcheck/build_real.py --models models.json --out real.json

* GPU-only packages that are imported without a guard are replaced by ``sys.modules`` doubles
  (``mbmem_lint/verify/doubles.py``, shared with ``mbmem-lint verify``); the ones actually used are
  listed in the output.
* ``AutoBridge.from_hf_pretrained(id)`` is replaced by a double whose ``to_megatron_provider()``
  returns the provider class named by mbmem-lint's model table, built with the table's
  architecture fields (``--models``, written by the driver from ``load_model_table()``). Recipes
  whose HF id is not in the table are **skipped** (recorded with the id), not guessed.
* Each public recipe function (name ending in ``_config`` or annotated ``-> ConfigContainer``,
  defined in that module, every parameter defaulted) is called with its defaults. Neither
  ``ConfigContainer.validate()`` nor any runtime update is called: the dump is the recipe's own
  values.
* The ConfigContainer is flattened: ``section.field`` paths, nested config objects as
  ``{"_target_": qualname}`` plus their fields, dtypes as ``"torch.bfloat16"``, enums and callables
  as dotted names, tuples as lists, ``env_vars`` as ``env_vars.NAME``. Attributes set on a config
  object that are not dataclass fields (dead attributes, ``hf_model_id``) are dumped too and
  listed under ``extra``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# The doubles and the flattening live in the package (mbmem_lint/verify/), shared with
# ``mbmem-lint verify``; they are loaded by path (this interpreter need not have mbmem-lint installed).
_VERIFY = Path(__file__).resolve().parents[2] / "mbmem_lint" / "verify"
_spec = importlib.util.spec_from_file_location("mbmem_lint_verify_realbuild", _VERIFY / "realbuild.py")
assert _spec is not None and _spec.loader is not None
realbuild = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(realbuild)
doubles = realbuild.doubles
SkipRecipe = doubles.SkipRecipe
MODEL_TABLE = doubles.MODEL_TABLE
HF_IDS_SEEN = doubles.HF_IDS_SEEN
flatten_container = realbuild.flatten_container


# -- discovery and build ----------------------------------------------------------------------------


def recipe_modules(bridge_root: Path, family: str | None) -> list[tuple[str, str]]:
    """(relative path under megatron/bridge, module name) for every corpus file, sorted like mbmem-lint."""
    files = sorted(list((bridge_root / "recipes").rglob("*.py")) + list((bridge_root / "perf_recipes").rglob("*.py")))
    out = []
    for p in files:
        rel = p.relative_to(bridge_root).as_posix()
        if family and family not in rel.split("/")[1:-1] and not rel.split("/")[-1].startswith(family):
            continue
        parts = list(p.relative_to(bridge_root.parent.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((rel, ".".join(parts)))
    return out


def _is_recipe_function(name: str, fn: Any, module: str) -> bool:
    if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module:
        return False
    if fn.__name__ != name:  # module-level alias (``x_full_iteration_config = x_config``): built once
        return False
    ann = str(inspect.signature(fn).return_annotation)
    return name.endswith("_config") or "ConfigContainer" in ann


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="mbmem-lint model table as JSON {id: {provider, fields}}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", default=None)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()

    MODEL_TABLE.update(json.loads(Path(args.models).read_text()))
    doubles.offline_environment()
    finder = doubles.install(doubles.STUB_ROOTS)
    t0 = time.perf_counter()
    import megatron.bridge  # noqa: F401
    import megatron.core
    from megatron.bridge.training.config import ConfigContainer

    doubles.patch_autobridge()
    bridge_root = Path(megatron.bridge.__file__).resolve().parent
    result: dict[str, Any] = {
        "versions": {"python": sys.version.split()[0], "megatron.core": getattr(megatron.core, "__version__", "?")},
        "recipes": {}, "skipped": {}, "errors": {}, "import_errors": {}, "not_called": {},
    }
    try:
        import importlib.metadata as md

        result["versions"]["megatron-bridge"] = md.version("megatron-bridge")
        result["versions"]["megatron-core"] = md.version("megatron-core")
        import torch

        result["versions"]["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    built = 0
    for rel, modname in recipe_modules(bridge_root, args.family):
        if args.limit is not None and built >= args.limit:
            break
        try:
            mod = importlib.import_module(modname)
        except BaseException as exc:  # noqa: BLE001
            result["import_errors"][rel] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        for name, fn in sorted(vars(mod).items()):
            if args.limit is not None and built >= args.limit:
                break
            if not _is_recipe_function(name, fn, modname):
                continue
            key = f"{rel}::{name}"
            if not realbuild.callable_with_defaults(fn):
                result["not_called"][key] = "has parameters without defaults"
                continue
            del HF_IDS_SEEN[:]
            try:
                cfg = realbuild.call_with_timeout(fn, 120)
            except SkipRecipe as exc:
                result["skipped"][key] = str(exc)
                continue
            except BaseException as exc:  # noqa: BLE001
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                result["errors"][key] = f"{type(exc).__name__}: {exc} ({tb.filename.split('megatron/')[-1]}:{tb.lineno})"[:600]
                continue
            if not isinstance(cfg, ConfigContainer):
                result["not_called"][key] = f"returned {type(cfg).__name__}, not a ConfigContainer"
                continue
            fields, extra = flatten_container(cfg)
            result["recipes"][key] = {"fields": fields, "extra": extra, "hf_ids": list(HF_IDS_SEEN)}
            built += 1
    result["stubbed_modules"] = sorted(finder.used)
    result["wall_s"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(result))
    print(f"built {built} recipes, skipped {len(result['skipped'])}, errors {len(result['errors'])}, "
          f"import errors {len(result['import_errors'])}, stubs used: {result['stubbed_modules']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
