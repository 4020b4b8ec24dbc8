"""Build recipe functions for real and dump their ``ConfigContainer`` flattened (``mbmem-lint verify``).

**This executes the recipe file's code.** It runs as a script in the interpreter that has Megatron
Bridge (``--python``), never inside mbmem-lint's process, and uses the standard library and
:mod:`doubles` (its neighbour) only::

    python realbuild.py --file recipes/my.py --functions '["my_config"]' --models models.json --out real.json

* GPU-only packages imported without a guard are replaced by ``sys.modules`` doubles; Hugging Face
  downloads by an offline ``AutoBridge.from_hf_pretrained`` answering from mbmem-lint's model table
  (``--models``); a recipe whose HF id is not in it is *skipped*, not guessed.
* Started with :data:`mbmem_lint.verify.run.BOOT` (``python -c BOOT realbuild.py ...``): nothing of
  mbmem-lint and not the working folder on ``sys.path``; the recipe file's own package root is put there to import it.
* Each named function is called with its defaults (``SIGALRM`` after ``--timeout`` seconds);
  neither ``ConfigContainer.validate()`` nor any runtime update runs: the dump is the recipe's values.
* Flattened: ``section.field`` paths, nested config objects as ``{"_target_": qualname}`` plus their
  fields, dtypes as ``"torch.bfloat16"``, enums and callables as dotted names, tuples as lists,
  ``env_vars`` as ``env_vars.NAME``; attributes that are not dataclass fields are dumped too and
  listed under ``extra``; values with no JSON form are ``"<opaque module.Class>"``.
* Megatron Bridge's own ``estimate_training_memory`` (0.5 and later) gives the model-state bytes of
  the most-loaded shard, on a copy of the config whose model was finalized (as when Bridge reports it)
  with ``data_parallel_size`` = world / (TP·PP·CP) (1 without a world size).

Exit 0 with the dump written; 3 when ``megatron.bridge`` cannot be imported (the dump says why).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import enum
import functools
import importlib
import importlib.util
import inspect
import json
import math
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

EXIT_NO_BRIDGE = 3
# How mbmem-lint starts this file: run by path under ``-c`` (so no folder of mbmem-lint lands on
# ``sys.path``, where its module names could shadow the user's), without the working folder.
def _load_doubles() -> Any:
    """:mod:`doubles`, loaded by path under a private name (this file is not imported as a package)."""
    name = "mbmem_lint_verify_doubles"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name("doubles.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


doubles = _load_doubles()


def _qual(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}.{name}" if mod else str(name)


def encode(v: Any) -> Any:
    """A JSON value for a leaf; opaque objects become ``"<opaque module.Class>"``."""
    if isinstance(v, enum.Enum):  # before int/str: IntEnum members (signal.SIGTERM) keep their name
        return f"{_qual(type(v))}.{v.name}"
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, getattr(torch, "dtype", ())):
        return str(v)
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
    if isinstance(v, doubles.Dummy) or v is doubles.Dummy:
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


def callable_with_defaults(fn: Any) -> bool:
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


def call_with_timeout(fn: Any, seconds: int) -> Any:
    """``fn()``, interrupted after ``seconds`` (``_Timeout``) where the platform has SIGALRM."""
    if not hasattr(signal, "SIGALRM") or seconds <= 0:
        return fn()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def module_name_for(path: Path) -> tuple[Path, str]:
    """(folder to import from, dotted module name) of a file: the package chain of ``__init__.py``
    folders above it, else the bare file name."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def load_recipe_module(path: Path) -> Any:
    """Import the recipe file. A file of a package is imported under its dotted name, its root put
    first on ``sys.path`` so its imports resolve as they do when it runs; a file inside a ``megatron``
    tree (a copy of a Bridge recipe) runs as that module of the *installed* package, so its relative
    imports reach the installed Bridge rather than a second copy of it."""
    root, dotted = module_name_for(path)
    if dotted.split(".")[0] == "megatron" and "." in dotted:
        spec = importlib.util.spec_from_file_location(dotted, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        module.__package__ = dotted.rpartition(".")[0]
        importlib.import_module(module.__package__)
        sys.modules[dotted] = module
        spec.loader.exec_module(module)
        return module
    sys.path.insert(0, str(root))
    return importlib.import_module(dotted)


def bridge_model_state(cfg: Any, world_size: int | None) -> dict[str, Any]:
    """Megatron Bridge's own model-state estimate (weights + gradients + optimizer, most-loaded shard)."""
    try:
        from megatron.bridge.training.utils.theoretical_memory_utils import estimate_training_memory
    except ImportError as exc:
        return {"unavailable": f"this Megatron Bridge has no estimate_training_memory ({exc})"}
    model = cfg.model
    tp = getattr(model, "tensor_model_parallel_size", 1) or 1
    pp = getattr(model, "pipeline_model_parallel_size", 1) or 1
    cp = getattr(model, "context_parallel_size", 1) or 1
    dp = max(1, world_size // (tp * pp * cp)) if world_size else 1
    # Bridge reports this estimate during training, after validate() finalized the model (derived
    # fields such as kv_channels are filled in there): do the same on a copy.
    try:
        cfg = copy.deepcopy(cfg)
        finalize = getattr(cfg.model, "finalize", None)
        if callable(finalize):
            finalize()
        basis = "after model.finalize(), as when Bridge reports it"
    except Exception as exc:  # noqa: BLE001 - finalize may need what the doubles do not provide
        basis = f"on the recipe's values (model.finalize() raised {type(exc).__name__})"
    cfg.data_parallel_size = dp  # what set_data_parallel_size() does in validate()
    try:
        est = estimate_training_memory(cfg, include_activation=False)
    except Exception as exc:  # noqa: BLE001 - the estimator does not support every model
        return {"unavailable": f"estimate_training_memory raised {type(exc).__name__}: {exc} ({basis})"[:300]}
    return {"model_state_bytes": float(est.weight_and_optimizer_bytes), "data_parallel_size": dp, "basis": basis,
            "components": [{"name": c.name, "bytes": float(c.memory_bytes)} for c in est.model_state_components]}


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    try:
        import importlib.metadata as md

        for dist in ("megatron-bridge", "megatron-core", "torch"):
            try:
                out[dist] = md.version(dist)
            except md.PackageNotFoundError:
                continue
    except ImportError:  # pragma: no cover - Python < 3.8
        pass
    return out


def build(path: Path, functions: list[str], world_sizes: dict[str, int | None], timeout: int) -> dict[str, Any]:
    """Call each function of the recipe file and dump what it returns."""
    from megatron.bridge.training.config import ConfigContainer

    result: dict[str, Any] = {"recipes": {}, "skipped": {}, "errors": {}, "not_called": {}}
    try:
        module = load_recipe_module(path)
    except BaseException as exc:  # noqa: BLE001 - the user's module may raise anything
        result["import_error"] = _describe(exc)
        return result
    for name in functions:
        fn = getattr(module, name, None)
        if not callable(fn):
            result["not_called"][name] = "no such function in the module"
            continue
        if not callable_with_defaults(fn):
            result["not_called"][name] = "has parameters without defaults"
            continue
        del doubles.HF_IDS_SEEN[:]
        try:
            cfg = call_with_timeout(fn, timeout)
        except doubles.SkipRecipe as exc:
            result["skipped"][name] = str(exc)
            continue
        except _Timeout:
            result["errors"][name] = f"did not return within {timeout} s"
            continue
        except BaseException as exc:  # noqa: BLE001
            result["errors"][name] = _describe(exc)
            continue
        if not isinstance(cfg, ConfigContainer):
            result["not_called"][name] = f"returned {type(cfg).__name__}, not a ConfigContainer"
            continue
        fields, extra = flatten_container(cfg)
        result["recipes"][name] = {"fields": fields, "extra": extra, "hf_ids": list(doubles.HF_IDS_SEEN),
                                   "bridge_estimate": bridge_model_state(cfg, world_sizes.get(name))}
    return result


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename.split('megatron/')[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"[:600]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build recipe functions for real (executes the file).")
    ap.add_argument("--file", required=True)
    ap.add_argument("--functions", required=True, help="JSON list of function names")
    ap.add_argument("--world-sizes", default="{}", help="JSON {function: world size or null}")
    ap.add_argument("--models", required=True, help="mbmem-lint's model table as JSON {id: {provider, fields}}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args(argv)

    doubles.offline_environment()
    doubles.MODEL_TABLE.update(json.loads(Path(args.models).read_text()))
    finder = doubles.install(doubles.STUB_ROOTS)
    out: dict[str, Any] = {"versions": _versions()}
    t0 = time.perf_counter()
    try:
        import megatron.bridge  # noqa: F401
        from megatron.bridge.training.config import ConfigContainer  # noqa: F401

        doubles.patch_autobridge()
    except BaseException as exc:  # noqa: BLE001 - ImportError or anything its import chain raises
        out["bridge_import_error"] = f"{type(exc).__name__}: {exc}"[:600]
        Path(args.out).write_text(json.dumps(out))
        return EXIT_NO_BRIDGE
    out.update(build(Path(args.file).resolve(), list(json.loads(args.functions)),
                     dict(json.loads(args.world_sizes)), args.timeout))
    out["stubbed_modules"] = sorted(finder.used)
    out["wall_s"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
