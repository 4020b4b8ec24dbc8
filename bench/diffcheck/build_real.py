"""Build every megatron-bridge 0.6.2 corpus recipe for real (CPU, no network) and dump it flattened.

Runs in the Python 3.12 venv that holds megatron-bridge 0.6.2 + megatron-core 0.19.2 (see
``bench/differential_check.py``, which starts it as a subprocess):

    .cache/diffcheck-venv/bin/python bench/diffcheck/build_real.py --models models.json --out real.json

* GPU-only packages that are imported without a guard are replaced by ``sys.modules`` doubles
  (``stubs.py``); the ones actually used are listed in the output.
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
import dataclasses
import enum
import functools
import importlib
import inspect
import json
import math
import os
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stubs  # noqa: E402

# Top-level packages replaced by doubles when they are not installed. Megatron guards most of them;
# the list only matters for the few unguarded imports on the recipe import path.
STUB_ROOTS = {
    "transformer_engine",
    "megatron.energon",
    "modelopt",
}


class SkipRecipe(Exception):
    """The recipe needs something the doubles cannot provide (HF id not in mbmem-lint's table)."""


# -- AutoBridge double ------------------------------------------------------------------------------

MODEL_TABLE: dict[str, Any] = {}
HF_IDS_SEEN: list[str] = []


def _import_qualname(qualname: str) -> Any:
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _is_unknown(v: Any) -> bool:
    return "'unknown'" in repr(v)


def _decode(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"symbol"}:
        try:
            return _import_qualname(v["symbol"])
        except (ImportError, AttributeError):
            return v["symbol"]
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


class _OfflineBridge:
    """What ``AutoBridge.from_hf_pretrained(id)`` returns here: no download, the table's architecture."""

    def __init__(self, hf_id: str, revision: str | None) -> None:
        self.hf_id = hf_id
        self.revision = revision

    def to_megatron_provider(self, load_weights: bool = True, hf_path: Any = None) -> Any:
        entry = MODEL_TABLE.get(self.hf_id)
        if entry is None:
            raise SkipRecipe(f"HF id {self.hf_id!r} is not in mbmem-lint's model table")
        cls = _import_qualname(entry["provider"])
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        # The table's JSON: {"symbol": "torch.bfloat16"} for objects (dtypes, activation functions),
        # {"unknown": why} for what mbmem-lint does not know (left to the provider's default here).
        kwargs = {k: (tuple(v) if k == "window_size" and isinstance(v, list) else _decode(v))
                  for k, v in entry["fields"].items() if k in names and not _is_unknown(v)}
        provider = cls(**kwargs)
        for k, v in entry["fields"].items():  # attributes Bridge's conversion sets beyond the dataclass fields
            if k not in names and not _is_unknown(v):
                setattr(provider, k, _decode(v))
        if load_weights:
            provider.perform_initialization = False
        provider.hf_model_id = str(hf_path) if hf_path is not None else self.hf_id
        if hf_path is None and self.revision:
            provider.hf_model_revision = self.revision
        return provider

    def __getattr__(self, name: str) -> Any:
        raise SkipRecipe(f"recipe uses AutoBridge.{name}, which the offline double does not provide")


def _fake_from_hf_pretrained(cls: Any, path: Any, **kwargs: Any) -> _OfflineBridge:
    HF_IDS_SEEN.append(str(path))
    return _OfflineBridge(str(path), kwargs.get("revision"))


def _fake_from_hf_config(cls: Any, config: Any, **kwargs: Any) -> _OfflineBridge:
    raise SkipRecipe("recipe uses AutoBridge.from_hf_config (not doubled)")


def patch_autobridge() -> None:
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    AutoBridge.from_hf_pretrained = classmethod(_fake_from_hf_pretrained)  # type: ignore[method-assign]
    AutoBridge.from_hf_config = classmethod(_fake_from_hf_config)  # type: ignore[method-assign]


# -- flattening -------------------------------------------------------------------------------------


def _qual(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}.{name}" if mod else str(name)


def encode(v: Any) -> Any:
    """A JSON value for a leaf; opaque objects become ``"<opaque module.Class>"``."""
    import torch

    if isinstance(v, enum.Enum):  # before int/str: IntEnum members (signal.SIGTERM) keep their name
        return f"{_qual(type(v))}.{v.name}"
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, enum.Enum):
        return f"{_qual(type(v))}.{v.name}"
    if isinstance(v, (list, tuple)):
        return [encode(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((encode(x) for x in v), key=repr)
    if isinstance(v, dict):
        return {str(k): encode(x) for k, x in v.items()}
    if isinstance(v, functools.partial):
        return f"<partial {encode(v.func)}>"
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return _qual(v)
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, stubs.Dummy) or v is stubs.Dummy:
        return "<opaque stub>"
    return f"<opaque {_qual(type(v))}>"


def flatten(obj: Any, prefix: str, out: dict[str, Any], extra: list[str], seen: set[int]) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if id(obj) in seen:
            out[prefix] = "<opaque cycle>"
            return
        seen = seen | {id(obj)}
        out[prefix] = {"_target_": _qual(type(obj))}
        names = [f.name for f in dataclasses.fields(obj)]
        for name in names:
            try:
                value = getattr(obj, name)
            except Exception as exc:  # noqa: BLE001 - a property-like field that raises
                out[f"{prefix}.{name}"] = f"<opaque raises {type(exc).__name__}>"
                continue
            flatten(value, f"{prefix}.{name}", out, extra, seen)
        for name, value in vars(obj).items() if hasattr(obj, "__dict__") else ():
            if name in names or name.startswith("_"):
                continue
            extra.append(f"{prefix}.{name}")
            flatten(value, f"{prefix}.{name}", out, extra, seen)
        return
    if prefix == "env_vars" and isinstance(obj, dict):
        for k, v in obj.items():
            out[f"env_vars.{k}"] = encode(v)
        return
    out[prefix] = encode(obj)


def flatten_container(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    out: dict[str, Any] = {}
    extra: list[str] = []
    for f in dataclasses.fields(cfg):
        flatten(getattr(cfg, f.name), f.name, out, extra, set())
    return out, extra


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


def _callable_with_defaults(fn: Any) -> bool:
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            return False
    return True


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="mbmem-lint model table as JSON {id: {provider, fields}}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", default=None)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()

    MODEL_TABLE.update(json.loads(Path(args.models).read_text()))
    finder = stubs.install(STUB_ROOTS)
    t0 = time.perf_counter()
    import megatron.bridge  # noqa: F401
    import megatron.core
    from megatron.bridge.training.config import ConfigContainer

    patch_autobridge()
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
    signal.signal(signal.SIGALRM, _alarm)
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
            if not _callable_with_defaults(fn):
                result["not_called"][key] = "has parameters without defaults"
                continue
            del HF_IDS_SEEN[:]
            signal.alarm(120)
            try:
                cfg = fn()
            except SkipRecipe as exc:
                result["skipped"][key] = str(exc)
                continue
            except BaseException as exc:  # noqa: BLE001
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                result["errors"][key] = f"{type(exc).__name__}: {exc} ({tb.filename.split('megatron/')[-1]}:{tb.lineno})"[:600]
                continue
            finally:
                signal.alarm(0)
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
